import { defineConfig } from 'tsup';

// ESM only: every supported runtime (browsers, bundlers, Node 20+) loads it.
export default defineConfig({
  entry: ['src/index.ts'],
  format: ['esm'],
  target: 'es2022',
  platform: 'neutral',
  dts: { compilerOptions: { types: [] } },
  tsconfig: 'tsconfig.build.json',
  sourcemap: true,
  clean: true,
  treeshake: true,
  // Keep class names (HeraldError, HeraldClient) readable in stack traces and `constructor.name`.
  keepNames: true,
});
