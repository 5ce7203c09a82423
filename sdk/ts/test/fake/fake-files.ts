//! The fake herald's file storage (protocol 1.2, "Files"): `upload` answers, a fake `fetch` that takes
//! the bytes at the upload URL and serves them at the file's URL, and the rules a `send` or `edit` that
//! names files must pass.
//!
//! Owns: files by id (who uploaded them for which chat, their bytes once complete, the message that
//! attached them) and the fake HTTP side. Does not own: the WebSocket protocol (fake-herald.ts).
//! Knobs a real storage does not have: answer the next uploads with a chosen status, count requests.

import type { FileInfo } from '../../src/types.js';

/** One file as the fake storage holds it. */
export interface FakeFile {
  id: string;
  chat: string;
  user: string;
  name: string;
  type: string;
  size: number;
  /** Set once exactly `size` bytes arrived. */
  bytes: Uint8Array | null;
  /** The seq of the message that attached it. */
  message: number | null;
  deleted: boolean;
}

/** Where the fake storage lives; any URL under it is answered by `fetch`. */
export const FILES_ORIGIN = 'https://files.test';

/** The header the upload answer asks for, standing in for a presigned URL's signature. */
export const SIG_HEADER = 'x-fake-signature';

/** The most files one message may carry (protocol 1.2). */
const MAX_FILES = 10;

/** A protocol error for the fake server to answer with. */
export class FileRuleError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export class FakeFiles {
  readonly files = new Map<string, FakeFile>();
  /** The largest size `upload` accepts (the server's --max-file-bytes). */
  maxBytes = 25 * 1024 * 1024;
  /** When set, the next upload PUTs are answered with this status and nothing is stored. */
  failUploadsWith: number | null = null;
  /** Every request the fake `fetch` got: method, URL and headers. */
  readonly requests: Array<{ method: string; url: string; headers: Record<string, string> }> = [];
  private next = 1;

  /** The `upload` op: a new file of `user` for `chat`, and where to send its bytes. */
  upload(chat: string, user: string, args: Record<string, unknown>): object {
    const name = args.name;
    const size = args.size;
    if (typeof name !== 'string' || [...name].length < 1 || [...name].length > 255) throw new FileRuleError('bad_request', 'name: 1 to 255 characters');
    if (typeof args.type !== 'string' || !args.type.includes('/')) throw new FileRuleError('bad_request', 'type: a MIME type');
    if (typeof size !== 'number' || !Number.isInteger(size) || size < 0) throw new FileRuleError('bad_request', 'size: bytes');
    if (size > this.maxBytes) throw new FileRuleError('too_large', `files are at most ${this.maxBytes} bytes`);
    const id = `file-${this.next++}`;
    this.files.set(id, { id, chat, user, name, type: args.type, size, bytes: null, message: null, deleted: false });
    return { file: id, url: `${FILES_ORIGIN}/up/${id}?sig=s3cr3t`, method: 'PUT', headers: { [SIG_HEADER]: `sig-${id}` }, expires_ms: Date.now() + 600_000 };
  }

  /**
   * The files a `send` (target null) or an `edit` of message `target` names, checked as herald checks
   * them; throws `FileRuleError`. Returns their infos, in the order given.
   */
  check(ids: unknown, chat: string, user: string, target: number | null): FileInfo[] {
    if (!Array.isArray(ids) || !ids.every((x) => typeof x === 'string')) throw new FileRuleError('bad_request', 'files: file ids');
    if (ids.length > MAX_FILES) throw new FileRuleError('bad_request', `at most ${MAX_FILES} files`);
    return ids.map((id: string) => {
      const f = this.files.get(id);
      if (f === undefined || f.bytes === null || f.deleted) throw new FileRuleError('not_found', `no complete file ${id}`);
      if (f.user !== user || f.chat !== chat) throw new FileRuleError('forbidden', `file ${id} is another's`);
      if (f.message !== null && f.message !== target) throw new FileRuleError('bad_request', `file ${id} belongs to message ${f.message}`);
      return this.info(f);
    });
  }

  /** Marks `ids` as message `seq`'s; files it had before and not now are deleted. */
  attach(seq: number, ids: string[]): void {
    for (const f of this.files.values()) if (f.message === seq && !ids.includes(f.id)) f.deleted = true;
    for (const id of ids) this.files.get(id)!.message = seq;
  }

  /** Deletes the files of message `seq` (a delete of the message). */
  drop(seq: number): void {
    for (const f of this.files.values()) if (f.message === seq) f.deleted = true;
  }

  info(f: FakeFile): FileInfo {
    return { id: f.id, name: f.name, type: f.type, size: f.size, url: `${FILES_ORIGIN}/f/${f.id}?t=${Date.now()}` };
  }

  /** A `fetch` for the client's `fetch` option: PUT to an upload URL stores, GET of a file URL serves. */
  readonly fetch = async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const url = new URL(String(input));
    const method = (init.method ?? 'GET').toUpperCase();
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    this.requests.push({ method, url: url.toString(), headers });
    const [, kind, id] = url.pathname.split('/');
    const f = id === undefined ? undefined : this.files.get(id);
    if (url.origin !== FILES_ORIGIN || f === undefined || f.deleted) return new Response('no such file', { status: 404 });
    if (kind === 'up' && method === 'PUT') {
      if (headers[SIG_HEADER] !== `sig-${f.id}`) return new Response('<Error>SignatureDoesNotMatch</Error>', { status: 403 });
      const body = new Uint8Array(await new Response(init.body as BodyInit).arrayBuffer());
      if (this.failUploadsWith !== null) return new Response('<Error>InternalError</Error>', { status: this.failUploadsWith });
      if (body.byteLength !== f.size) return new Response(`expected ${f.size} bytes, got ${body.byteLength}`, { status: 400 });
      f.bytes = body;
      return new Response(null, { status: 200 });
    }
    if (kind === 'f' && method === 'GET' && f.bytes !== null) {
      return new Response(f.bytes as unknown as BodyInit, { status: 200, headers: { 'content-type': f.type } });
    }
    return new Response('not allowed', { status: 405 });
  };
}
