//! Bundles the demo page's script: web/src/*.ts plus the SDK's sources into the single file
//! web/dist/demo.js, which herald compiles in with include_str! and serves at /demo.js.
//!
//! Owns: the bundle's settings and the freshness check. Does not own: the page's markup (demo.html) or
//! the SDK (sdk/ts, bundled from its sources so this build needs no SDK build first).
//!
//!     node build.mjs            write dist/demo.js
//!     node build.mjs --check    build to a temp file; exit 1 when dist/demo.js differs from it
//!
//! Why the output is committed: running herald must not need Node, so the server embeds this file.
//! Why --check exists: a change to src/ or to the SDK that was not rebuilt would ship a stale page.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const webDir = dirname(fileURLToPath(import.meta.url));
const committed = join(webDir, 'dist', 'demo.js');

/** Builds to `outfile`. Every setting here affects the bytes, so --check compares like with like. */
async function build(outfile) {
  await esbuild.build({
    // Paths in the bundle's comments are relative to this, so the output is the same from any cwd.
    absWorkingDir: webDir,
    entryPoints: ['src/demo.ts'],
    outfile,
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
    banner: { js: '// Generated from web/src/*.ts and sdk/ts/src by `npm run build` in web/. Do not edit; see web/README.md.' },
    logLevel: 'warning',
  });
}

if (process.argv.includes('--check')) {
  const dir = mkdtempSync(join(tmpdir(), 'herald-web-'));
  try {
    const fresh = join(dir, 'demo.js');
    await build(fresh);
    let old = null;
    try {
      old = readFileSync(committed);
    } catch {
      // Reported below as a difference.
    }
    if (old === null || !old.equals(readFileSync(fresh))) {
      console.error('web/dist/demo.js is out of date with web/src or sdk/ts/src: run `npm run build` in web/ and commit it.');
      process.exit(1);
    }
    console.log('web/dist/demo.js is up to date.');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
} else {
  await build(committed);
}
