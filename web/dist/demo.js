// built from web/src/demo.ts by `npm run build` in web/; see web/README.md
