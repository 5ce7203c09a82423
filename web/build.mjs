//! Bundles the pages' scripts: the demo's (web/src/*.ts plus the SDK's sources) into the single file
//! web/dist/demo.js, which herald compiles in with include_str! and serves at /demo.js; the admin page's
//! (web/admin/*.ts) into web/dist/admin.js, served at /admin.js.
//!
//! Owns: the bundles' settings and the freshness check. Does not own: the pages' markup (demo.html,
//! admin/admin.html) or the SDK (sdk/ts, bundled from its sources so this build needs no SDK build first).
//!
//!     node build.mjs            write dist/demo.js and dist/admin.js
//!     node build.mjs --check    build to a temp dir; exit 1 when a file in dist/ differs from it
//!
//! Why the output is committed: running herald must not need Node, so the server embeds this file.
//! Why --check exists: a change to src/ or to the SDK that was not rebuilt would ship a stale page.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const webDir = dirname(fileURLToPath(import.meta.url));

/** Each page's entry point, its file in dist/, and the sources named in the file's first line. */
const bundles = [
  { entry: 'src/demo.ts', file: 'demo.js', from: 'web/src/*.ts and sdk/ts/src' },
  { entry: 'admin/admin.ts', file: 'admin.js', from: 'web/admin/*.ts' },
];

/** Builds `b` into `dir`. Every setting here affects the bytes, so --check compares like with like. */
async function build(b, dir) {
  await esbuild.build({
    // Paths in the bundle's comments are relative to this, so the output is the same from any cwd.
    absWorkingDir: webDir,
    entryPoints: [b.entry],
    outfile: join(dir, b.file),
    bundle: true,
    format: 'esm',
    platform: 'browser',
    // Every browser with WebSocket and ES modules that anyone runs today; no down-levelling needed.
    target: 'es2022',
    // Syntax only (about 60 KB): no source map ships with the file, so it stays formatted, with names
    // intact, for a browser's debugger and for reviewing its diff in a commit.
    minifySyntax: true,
    sourcemap: false,
    legalComments: 'none',
    // Keep non-ASCII (reaction labels) as UTF-8; herald serves the file with charset=utf-8.
    charset: 'utf8',
    banner: { js: `// Generated from ${b.from} by \`npm run build\` in web/. Do not edit; see web/README.md.` },
    logLevel: 'warning',
  });
}

const dist = join(webDir, 'dist');
if (process.argv.includes('--check')) {
  const dir = mkdtempSync(join(tmpdir(), 'herald-web-'));
  try {
    let stale = false;
    for (const b of bundles) {
      await build(b, dir);
      let old = null;
      try {
        old = readFileSync(join(dist, b.file));
      } catch {
        // Reported below as a difference.
      }
      if (old === null || !old.equals(readFileSync(join(dir, b.file)))) {
        console.error(`web/dist/${b.file} is out of date with ${b.from}: run \`npm run build\` in web/ and commit it.`);
        stale = true;
      } else {
        console.log(`web/dist/${b.file} is up to date.`);
      }
    }
    if (stale) process.exit(1);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
} else {
  for (const b of bundles) await build(b, dist);
}
