//! Protocol 1.2's files through the SDK against the fake server and its fake storage: uploads from a
//! browser `File`, from bytes, from a stream and from a path, each sending exactly its bytes with the
//! upload answer's method, URL and headers; the errors a user can meet (storage refusing, a file too
//! large, a file that is not theirs); files on sends and edits as a watcher's message list shows them.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { HeraldError } from '../../src/errors.js';
import { putFile, UploadError } from '../../src/files.js';
import { MessageList } from '../../src/messages.js';
import { FILES_ORIGIN, SIG_HEADER } from '../fake/fake-files.js';
import { FakeHerald } from '../fake/fake-herald.js';
import { clientOn, connected, tick } from './helpers.js';

beforeEach(() => {
  // setImmediate stays real: reading a request body (web streams, fs) needs it.
  vi.useFakeTimers({ now: 1_000_000_000_000, toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
});
afterEach(() => {
  vi.useRealTimers();
});

/** Alice and bob in `general`, both with the fake storage's fetch; bob watches with a message list. */
async function pair() {
  const server = new FakeHerald();
  const opts = { fetch: server.files.fetch as typeof fetch };
  const a = clientOn(server, 'alice', opts);
  const bob = clientOn(server, 'bob', opts);
  await connected(a);
  await connected(bob);
  const achat = a.chat('general');
  const bchat = bob.chat('general');
  await achat.join();
  await bchat.join();
  const list = bchat.messages();
  await bchat.watch();
  const close = () => {
    a.close();
    bob.close();
  };
  return { server, alice: a, bob, achat, bchat, list, close };
}

/** The bytes the fake storage holds for `id`. */
function stored(server: FakeHerald, id: string): number[] {
  return [...(server.files.files.get(id)?.bytes ?? [])];
}

/** Alice's open socket. */
function aliceSocket(server: FakeHerald) {
  return server.sockets.find((s) => s.user === 'alice' && s.readyState === 1)!;
}

const PNG_BYTES = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3]);

describe('uploads', () => {
  it("a browser File uploads under its own name, type and size, with the answer's method, URL and headers; a send attaches it", async () => {
    const { server, achat, list, close } = await pair();
    const file = new File([PNG_BYTES], 'cat.png', { type: 'image/png' });
    const up = await achat.upload(file);
    expect(up).toMatchObject({ id: 'file-1', name: 'cat.png', type: 'image/png', size: PNG_BYTES.length });
    expect(up.upload).toMatchObject({ file: 'file-1', method: 'PUT', headers: { [SIG_HEADER]: 'sig-file-1' } });
    expect(aliceSocket(server).sent('upload').at(-1)).toMatchObject({ op: 'upload', chat: 'general', name: 'cat.png', type: 'image/png', size: PNG_BYTES.length });
    const put = server.files.requests.at(-1)!;
    expect(put).toMatchObject({ method: 'PUT', url: `${FILES_ORIGIN}/up/file-1?sig=s3cr3t` });
    expect(put.headers[SIG_HEADER]).toBe('sig-file-1');
    expect(put.headers['content-type']).toBe('image/png');
    expect(stored(server, up.id)).toEqual([...PNG_BYTES]);

    const { seq } = await achat.send({ text: 'look' }, { files: [up.id] });
    await tick();
    const shown = list.get(seq)!;
    expect(shown.files).toEqual([{ id: 'file-1', name: 'cat.png', type: 'image/png', size: PNG_BYTES.length, url: expect.stringContaining(`${FILES_ORIGIN}/f/file-1`) }]);
    close();
  });

  it('bytes upload with the name and type given; without a name they are refused before any request', async () => {
    const { server, achat, close } = await pair();
    const bytes = new TextEncoder().encode('hello, 서버');
    const up = await achat.upload(bytes, { name: 'notes.txt', type: 'text/plain; charset=utf-8' });
    expect(up).toMatchObject({ name: 'notes.txt', type: 'text/plain; charset=utf-8', size: bytes.byteLength });
    expect(stored(server, up.id)).toEqual([...bytes]);
    expect(server.files.requests.at(-1)!.headers['content-type']).toBe('text/plain; charset=utf-8');
    const ab = await achat.upload(bytes.buffer.slice(0), { name: 'raw.bin' });
    expect(ab.type).toBe('application/octet-stream');
    // A File whose own type is not the one given is sent as the one given (the one announced).
    await achat.upload(new File([bytes], 'n.txt', { type: 'text/plain' }), { type: 'text/markdown' });
    expect(server.files.requests.at(-1)!.headers['content-type']).toBe('text/markdown');
    const frames = aliceSocket(server).sent('upload').length;
    await expect(achat.upload(bytes)).rejects.toThrow(TypeError);
    await expect(achat.upload(bytes)).rejects.toThrow(/name/);
    expect(aliceSocket(server).sent('upload')).toHaveLength(frames);
    close();
  });

  it('a stream uploads exactly its announced size with a Content-Length, reporting progress chunk by chunk', async () => {
    const { server, achat, close } = await pair();
    async function* chunks() {
      yield new Uint8Array([1, 2, 3]);
      yield new Uint8Array([4, 5]);
      yield new Uint8Array([6]);
    }
    const progress: Array<[number, number]> = [];
    const up = await achat.upload(chunks(), { name: 'data.bin', size: 6, onProgress: (sent, total) => progress.push([sent, total]) });
    expect(stored(server, up.id)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(server.files.requests.at(-1)!.headers['content-length']).toBe('6');
    expect(progress).toEqual([
      [3, 6],
      [5, 6],
      [6, 6],
    ]);
    await expect(achat.upload(chunks(), { name: 'data.bin' })).rejects.toThrow(/size/);
    // A stream longer than announced fails the upload; the file stays incomplete.
    const err = (await achat.upload(chunks(), { name: 'data.bin', size: 4 }).catch((e: unknown) => e)) as UploadError;
    expect(err).toBeInstanceOf(UploadError);
    expect([err.code, err.status]).toEqual(['upload_failed', 0]);
    expect(server.files.files.get('file-2')?.bytes).toBeNull();
    close();
  });

  it('a path uploads from disk under its base name', async () => {
    const { server, achat, close } = await pair();
    const dir = mkdtempSync(join(tmpdir(), 'herald-sdk-files-'));
    try {
      const path = join(dir, 'report.pdf');
      const bytes = new Uint8Array(70_000).map((_, i) => i % 251);
      writeFileSync(path, bytes);
      const up = await achat.uploadPath(path, { type: 'application/pdf' });
      expect(up).toMatchObject({ name: 'report.pdf', type: 'application/pdf', size: 70_000 });
      expect(stored(server, up.id)).toEqual([...bytes]);
      writeFileSync(join(dir, 'empty.txt'), '');
      const empty = await achat.uploadPath(join(dir, 'empty.txt'), { type: 'text/plain', name: 'nothing.txt' });
      expect(empty).toMatchObject({ name: 'nothing.txt', size: 0 });
      expect(stored(server, empty.id)).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    close();
  });

  it("the storage's refusal is an UploadError with its status; the upload op's errors are the server's", async () => {
    const { server, achat, close } = await pair();
    server.files.failUploadsWith = 503;
    const err = (await achat.upload(PNG_BYTES, { name: 'a.png', type: 'image/png' }).catch((e: unknown) => e)) as UploadError;
    expect(err).toBeInstanceOf(UploadError);
    expect(err).toBeInstanceOf(HeraldError);
    expect([err.code, err.status, err.op]).toEqual(['upload_failed', 503, 'upload']);
    expect(err.body).toContain('InternalError');
    expect(err.message).not.toContain('s3cr3t'); // a presigned URL's query is a credential
    server.files.failUploadsWith = null;

    server.files.maxBytes = 4;
    const puts = server.files.requests.length;
    await expect(achat.upload(PNG_BYTES, { name: 'a.png' })).rejects.toMatchObject({ code: 'too_large', op: 'upload' });
    expect(server.files.requests).toHaveLength(puts);
    await expect(achat.upload(PNG_BYTES, { name: '' })).rejects.toThrow(TypeError);
    close();
  });

  it('putFile sends the bytes of an upload answer got elsewhere (the server API), with a given fetch', async () => {
    const { server, close } = await pair();
    // An answer as POST /v1/workspaces/{ws}/chats/{chat}/files gives it, for a file the fake knows.
    const answer = server.files.upload('general', 'alice', { name: 'bot.txt', type: 'text/plain', size: 3 }) as Parameters<typeof putFile>[0];
    await putFile(answer, new Uint8Array([7, 8, 9]), { size: 3, fetch: server.files.fetch as typeof fetch });
    expect(stored(server, answer.file)).toEqual([7, 8, 9]);
    close();
  });
});

describe('files on messages', () => {
  it('a send with files shows them to watchers; an edit with files replaces them, [] removes them, none keeps them; a delete drops them', async () => {
    const { server, achat, list, close } = await pair();
    const a = await achat.upload(new Uint8Array([1]), { name: 'a.txt', type: 'text/plain' });
    const b = await achat.upload(new Uint8Array([2]), { name: 'b.txt', type: 'text/plain' });
    const { seq } = await achat.send({ text: 'two files' }, { files: [a.id] });
    await tick();
    expect(list.get(seq)?.files?.map((f) => f.name)).toEqual(['a.txt']);
    expect(aliceSocket(server).sent('send').at(-1)).toMatchObject({ files: [a.id] });

    await achat.edit(seq, { text: 'now b' }, { files: [b.id] });
    await tick();
    expect(list.get(seq)?.files?.map((f) => f.name)).toEqual(['b.txt']);
    expect(server.files.files.get(a.id)?.deleted).toBe(true);
    await achat.edit(seq, { text: 'still b' });
    await tick();
    expect(list.get(seq)?.files?.map((f) => f.name)).toEqual(['b.txt']);
    await achat.edit(seq, { text: 'no files' }, { files: [] });
    await tick();
    expect(list.get(seq)?.files).toBeUndefined();

    const c = await achat.upload(new Uint8Array([3]), { name: 'c.txt', type: 'text/plain' });
    const other = await achat.send({ text: 'c' }, { files: [c.id] });
    await achat.delete(other.seq);
    await tick();
    expect(list.get(other.seq)).toMatchObject({ deleted: true });
    expect(list.get(other.seq)?.files).toBeUndefined();
    close();
  });

  it("a file that is incomplete, another user's, or already attached is refused by the send", async () => {
    const { server, achat, bchat, close } = await pair();
    const grant = server.files.upload('general', 'alice', { name: 'half.bin', type: 'application/octet-stream', size: 10 }) as { file: string };
    await expect(achat.send({ text: 'x' }, { files: [grant.file] })).rejects.toMatchObject({ code: 'not_found' });
    const mine = await achat.upload(new Uint8Array([1]), { name: 'a.txt', type: 'text/plain' });
    await expect(bchat.send({ text: 'x' }, { files: [mine.id] })).rejects.toMatchObject({ code: 'forbidden' });
    await achat.send({ text: 'first' }, { files: [mine.id] });
    await expect(achat.send({ text: 'second' }, { files: [mine.id] })).rejects.toMatchObject({ code: 'bad_request' });
    close();
  });

  it('a message read again with fresh file URLs takes them; an older view does not bring back edited-away files', () => {
    const list = new MessageList();
    const changes: string[] = [];
    list.on('change', (c) => changes.push(c.kind));
    const file = { id: 'f1', name: 'a.png', type: 'image/png', size: 1, url: 'https://files.test/f/f1?t=1' };
    list.load([{ seq: 5, type: 'message', user: 'alice', ts: 1, body: { text: 'x' }, files: [file] }], 5);
    list.load([{ seq: 5, type: 'message', user: 'alice', ts: 1, body: { text: 'x' }, files: [{ ...file, url: 'https://files.test/f/f1?t=2' }] }], 6);
    expect(list.get(5)?.files?.[0]?.url).toBe('https://files.test/f/f1?t=2');
    expect(changes).toEqual(['added', 'updated']);
    list.apply({ seq: 7, type: 'edit', user: 'alice', ts: 2, body: { target: 5, body: { text: 'y' } }, files: [] });
    list.load([{ seq: 5, type: 'message', user: 'alice', ts: 1, body: { text: 'x' }, files: [{ ...file, url: 'https://files.test/f/f1?t=3' }] }], 6);
    expect(list.get(5)).toMatchObject({ body: { text: 'y' }, edited: 7 });
    expect(list.get(5)?.files).toBeUndefined();
  });
});
