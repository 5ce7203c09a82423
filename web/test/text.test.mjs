//! Unit test of web/src/text.ts's `mentionsIn`: which users a typed text mentions (what the page sends as
//! `mentions`). Bundled from the TypeScript source with esbuild, imported, and run without a browser.
//!
//! Owns: the rules a person relies on when typing `@name`: after a space or at the start, punctuation at
//! the end not part of the name, an email-like user id kept whole, each user once, at most 50.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as esbuild from 'esbuild';
import { webDir } from './support.mjs';

describe('mentions typed in the message box', () => {
  const dir = mkdtempSync(join(tmpdir(), 'herald-web-text-'));
  let text;

  before(async () => {
    const out = await esbuild.build({ absWorkingDir: webDir, entryPoints: ['src/text.ts'], bundle: true, format: 'esm', write: false, logLevel: 'warning' });
    const file = join(dir, 'text.mjs');
    writeFileSync(file, out.outputFiles[0].text);
    text = await import(pathToFileURL(file).href);
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('@name at the start or after a space, punctuation after it left out', () => {
    assert.deepEqual(text.mentionsIn('@bob look'), ['bob']);
    assert.deepEqual(text.mentionsIn('thanks @bob.'), ['bob']);
    assert.deepEqual(text.mentionsIn('ask @ann: or @carl, or (@dee)!'), ['ann', 'carl', 'dee']);
    assert.deepEqual(text.mentionsIn('@first.last and @a_b-c'), ['first.last', 'a_b-c']);
  });

  test('each user once, in order; an email-like id whole; an address in the text is no mention', () => {
    assert.deepEqual(text.mentionsIn('@bob @ann @bob'), ['bob', 'ann']);
    assert.deepEqual(text.mentionsIn('cc @ann@example.com please'), ['ann@example.com']);
    assert.deepEqual(text.mentionsIn('write to me@example.com'), []);
    assert.deepEqual(text.mentionsIn('a lone @ sign'), []);
  });

  test('at most 50, the protocol limit', () => {
    const many = Array.from({ length: 60 }, (_, i) => `@user${i}`).join(' ');
    const got = text.mentionsIn(many);
    assert.equal(got.length, text.MAX_MENTIONS);
    assert.equal(got[49], 'user49');
  });
});
