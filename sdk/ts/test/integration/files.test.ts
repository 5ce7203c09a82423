//! Integration tests of protocol 1.2's files against a real herald (its embedded file storage): a file
//! uploaded by one user through the SDK and attached to a message reaches the other user's message
//! list, and its URL gives back exactly the uploaded bytes with the uploaded type; uploads from bytes, a
//! stream and a path; edits replacing and removing files; a file posted through the server API; the
//! limits a user meets. Skipped unless HERALD_BIN names the binary:
//!
//!     HERALD_BIN=../../target/release/herald npm run test:integration

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { HeraldClient } from '../../src/client.js';
import { putFile, UploadError } from '../../src/files.js';
import type { FileInfo, UploadOk } from '../../src/types.js';
import { Herald, HERALD_BIN, stopAfterEach, until } from './harness.js';

const WS = 'acme';

/** The largest file this test's herald takes (`--max-file-bytes`). */
const MAX_FILE_BYTES = 1_000_000;

const defer = stopAfterEach();

async function startHerald(): Promise<Herald> {
  const h = await Herald.start(['--max-file-bytes', String(MAX_FILE_BYTES)]);
  defer(() => h.dispose());
  return h;
}

async function user(herald: Herald, name: string): Promise<HeraldClient> {
  const c = await herald.client(WS, name);
  defer(() => c.close());
  await c.connect();
  return c;
}

/** alice and bob, both members of `general`; bob watches it with a message list. */
async function pair() {
  const herald = await startHerald();
  const alice = await user(herald, 'alice');
  const bob = await user(herald, 'bob');
  const achat = alice.chat('general');
  const bchat = bob.chat('general');
  await achat.join();
  await bchat.join();
  const list = bchat.messages();
  await bchat.watch();
  return { herald, alice, bob, achat, bchat, list };
}

/** A small image's bytes: a PNG signature and an IHDR chunk, then filler; enough to be an image/png upload. */
function pngBytes(n: number): Uint8Array<ArrayBuffer> {
  const head = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
  return new Uint8Array(n).map((_, i) => (i < head.length ? head[i]! : (i * 31) % 256));
}

/** GETs `url` with no credentials: status, type, disposition and bytes. */
async function download(url: string) {
  const res = await fetch(url);
  return {
    status: res.status,
    type: res.headers.get('content-type'),
    disposition: res.headers.get('content-disposition'),
    bytes: new Uint8Array(await res.arrayBuffer()),
  };
}

describe.skipIf(HERALD_BIN === '')('herald protocol 1.2: files', () => {
  it("a file alice uploads and attaches reaches bob's list, and its URL gives the same bytes with the uploaded type", async () => {
    const { achat, list } = await pair();
    const bytes = pngBytes(70_000);
    const progress: number[] = [];
    const up = await achat.upload(new File([bytes], 'cat.png', { type: 'image/png' }), { onProgress: (sent) => progress.push(sent) });
    expect(up).toMatchObject({ name: 'cat.png', type: 'image/png', size: bytes.byteLength });
    expect(up.upload.url).toMatch(/^https?:\/\//);
    expect(up.upload.expires_ms).toBeGreaterThan(Date.now() + 9 * 60_000);
    expect(progress.at(-1)).toBe(bytes.byteLength);

    const { seq } = await achat.send({ text: 'look' }, { files: [up.id] });
    await until('bob sees the message with its file', () => (list.get(seq)?.files?.length ?? 0) === 1);
    const file = list.get(seq)!.files![0]!;
    expect(file).toMatchObject({ id: up.id, name: 'cat.png', type: 'image/png', size: bytes.byteLength });
    const got = await download(file.url);
    expect(got.status).toBe(200);
    expect(got.type).toBe('image/png');
    expect(Buffer.from(got.bytes).equals(Buffer.from(bytes))).toBe(true);

    // History shows it too, with a URL that works.
    const page = await achat.fetch(seq - 1, 1);
    const fetched = page.events[0]?.files?.[0] as FileInfo;
    expect(fetched).toMatchObject({ id: up.id, name: 'cat.png' });
    expect((await download(fetched.url)).bytes.byteLength).toBe(bytes.byteLength);
  });

  it('uploads from bytes, a stream and a path; a type that must not run as a page downloads as an attachment', async () => {
    const { achat, list } = await pair();
    const html = new TextEncoder().encode('<script>alert(1)</script>');
    const a = await achat.upload(html, { name: 'page.html', type: 'text/html' });
    async function* chunks() {
      yield new Uint8Array([1, 2, 3]);
      yield new Uint8Array([4, 5]);
    }
    const b = await achat.upload(chunks(), { name: 'five.bin', type: 'application/octet-stream', size: 5 });
    const dir = mkdtempSync(join(tmpdir(), 'herald-it-files-'));
    let c;
    try {
      writeFileSync(join(dir, 'notes.txt'), '서버가 준비됐어요\n');
      c = await achat.uploadPath(join(dir, 'notes.txt'), { type: 'text/plain; charset=utf-8' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const { seq } = await achat.send({ text: 'three files' }, { files: [a.id, b.id, c.id] });
    await until('bob sees three files', () => (list.get(seq)?.files?.length ?? 0) === 3);
    const [fa, fb, fc] = list.get(seq)!.files!;
    const ga = await download(fa!.url);
    expect(ga.bytes).toEqual(html);
    expect(ga.disposition ?? '').toMatch(/^attachment/);
    expect((await download(fb!.url)).bytes).toEqual(new Uint8Array([1, 2, 3, 4, 5]));
    const gc = await download(fc!.url);
    expect(new TextDecoder().decode(gc.bytes)).toBe('서버가 준비됐어요\n');
    expect(gc.type).toBe('text/plain; charset=utf-8');
    expect(fc!.name).toBe('notes.txt');
  });

  it("an edit replaces a message's files and [] removes them; a removed or deleted message's file URL stops working", async () => {
    const { achat, list } = await pair();
    const a = await achat.upload(new Uint8Array([1, 2, 3]), { name: 'a.bin' });
    const b = await achat.upload(new Uint8Array([4, 5, 6]), { name: 'b.bin' });
    const { seq } = await achat.send({ text: 'a' }, { files: [a.id] });
    await until('bob sees a', () => list.get(seq)?.files?.[0]?.name === 'a.bin');
    const urlA = list.get(seq)!.files![0]!.url;
    await achat.edit(seq, { text: 'b instead' }, { files: [b.id] });
    await until('bob sees b', () => list.get(seq)?.files?.[0]?.name === 'b.bin');
    await achat.edit(seq, { text: 'text kept, files kept' });
    await until('bob sees the new text', () => (list.get(seq)?.body as { text?: string }).text === 'text kept, files kept');
    expect(list.get(seq)?.files?.map((f) => f.name)).toEqual(['b.bin']);
    const urlB = list.get(seq)!.files![0]!.url;
    await achat.edit(seq, { text: 'none' }, { files: [] });
    await until('bob sees no files', () => list.get(seq)?.files === undefined);
    // Deleted within 60 s of the edit that removed them (a's since the first edit).
    await until('the removed files answer 404', async () => (await download(urlA)).status === 404 && (await download(urlB)).status === 404, {
      timeoutMs: 70_000,
      intervalMs: 1000,
    });
  });

  it('the limits: a file over --max-file-bytes is too_large, a file attached twice is bad_request, another user may not attach mine', async () => {
    const { achat, bchat } = await pair();
    await expect(achat.upload(new Uint8Array(MAX_FILE_BYTES + 1), { name: 'big.bin' })).rejects.toMatchObject({ code: 'too_large', op: 'upload' });
    const up = await achat.upload(new Uint8Array([1]), { name: 'one.bin' });
    await expect(bchat.send({ text: 'mine now' }, { files: [up.id] })).rejects.toMatchObject({ code: 'forbidden' });
    await achat.send({ text: 'first' }, { files: [up.id] });
    await expect(achat.send({ text: 'again' }, { files: [up.id] })).rejects.toMatchObject({ code: 'bad_request' });
  });

  it('the upload URL refuses a body of another size than announced, and that file cannot be attached', async () => {
    const { herald, achat } = await pair();
    const grant = await herald.api<UploadOk>('POST', `/v1/workspaces/${WS}/chats/general/files`, { user: 'alice', name: 'short.bin', type: 'application/octet-stream', size: 4 });
    // putFile sends what the stream yields and says `size` 3: the storage knows the file as 4 bytes.
    const err = await putFile(
      grant,
      (async function* () {
        yield new Uint8Array([1, 2, 3]);
      })(),
      { size: 3 },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UploadError);
    expect((err as UploadError).status).toBeGreaterThanOrEqual(400);
    expect((err as UploadError).status).toBeLessThan(500);
    await expect(achat.send({ text: 'incomplete' }, { files: [grant.file] })).rejects.toMatchObject({ code: 'not_found' });
  });

  it('a file posted through the server API (POST .../files, then POST .../events with files) reaches a watcher', async () => {
    const { herald, list } = await pair();
    const bytes = pngBytes(1234);
    const grant = await herald.api<UploadOk>('POST', `/v1/workspaces/${WS}/chats/general/files`, { user: 'alice', name: 'bot.png', type: 'image/png', size: bytes.byteLength });
    await putFile(grant, bytes, { size: bytes.byteLength });
    const { seq } = await herald.api<{ seq: number }>('POST', `/v1/workspaces/${WS}/chats/general/events`, {
      type: 'message',
      user: 'alice',
      body: { text: 'from the backend' },
      files: [grant.file],
    });
    await until('bob sees the backend file', () => list.get(seq)?.files?.[0]?.name === 'bot.png');
    expect((await download(list.get(seq)!.files![0]!.url)).bytes).toEqual(bytes);
  });
});
