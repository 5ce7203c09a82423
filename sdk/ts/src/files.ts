//! Uploading a file (protocol 1.2, "Files"): ask herald where to put it (the `upload` op), send exactly
//! its bytes there over HTTP, and hand back the file id that a `send` or `edit` attaches.
//!
//! Owns: what a source says about itself (a browser `File` or `Blob`: name, type and size; bytes or a
//! stream: what the caller gives), the HTTP request that carries the bytes (`method`, `url`, `headers` of
//! the upload answer, exactly `size` bytes, progress while a stream is read), and `UploadError` for an
//! answer that is not 2xx or a request that never got one.
//! Does not own: the `upload` request itself (chat.ts sends it through the client), a file on disk
//! (file-path.ts) or attaching a file to a message (`files` of `send` and `edit`, chat.ts).
//!
//! Why `fetch` and nothing else: the URL is herald's own in the embedded backend and a presigned bucket
//! URL with S3, so the bytes go with a plain HTTP request that carries no herald credentials; `fetch`
//! exists in browsers and in Node 20. Why nothing is retried: an upload that failed leaves its file
//! incomplete and unusable, and a retry is a new `upload` with a new id, which only the caller can decide.

import { HeraldError } from './errors.js';
import type { UploadOk } from './types.js';

/**
 * What can be uploaded: a `Blob` (a browser `File` is one, and names itself), bytes (`Uint8Array`, a
 * Node `Buffer`, an `ArrayBuffer`), or a stream of bytes (a web `ReadableStream`, or any async iterable
 * of `Uint8Array` such as Node's `fs.createReadStream(path)`), whose `size` must then be given.
 */
export type UploadSource = Blob | ArrayBuffer | ArrayBufferView | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>;

/** Options of `Chat.upload`. */
export interface UploadOptions {
  /** The file's name, 1 to 255 characters; default a `File`'s own name (required for other sources). */
  name?: string;
  /** Its MIME type; default a `Blob`'s own type, else `application/octet-stream`. */
  type?: string;
  /** Its size in bytes; required for a stream, which must then yield exactly that many. */
  size?: number;
  /**
   * Called with the bytes sent so far and the total: while a stream is read, as each chunk goes out;
   * for a `Blob` or bytes (which `fetch` sends whole), once when the upload is done.
   */
  onProgress?: (sent: number, total: number) => void;
  /** Aborts the upload: it rejects with an `UploadError` (status 0) whose cause is the abort. */
  signal?: AbortSignal;
}

/** Options of `putFile`: what `UploadOptions` says about sending, given the size. */
export interface PutOptions {
  /** The size announced in the `upload` request: exactly this many bytes are sent. */
  size: number;
  /**
   * The type announced in the `upload` request: sent as `Content-Type` when the answer's `headers` do
   * not name one (a URL may refuse bytes of another type, and a `Blob` would send its own).
   */
  type?: string;
  onProgress?: (sent: number, total: number) => void;
  signal?: AbortSignal;
  /** The `fetch` to use; default the global one. */
  fetch?: typeof fetch;
}

/** A finished upload: the file id to attach, what was announced, and herald's `upload` answer. */
export interface Uploaded {
  /** The file id: pass it in `files` of `send` or `edit`. */
  id: string;
  name: string;
  type: string;
  size: number;
  /** The `upload` answer the bytes were sent with. */
  upload: UploadOk;
}

/** The type given to a file whose type nobody knows (RFC 2046's "arbitrary binary data"). */
export const DEFAULT_FILE_TYPE = 'application/octet-stream';

/**
 * The storage did not take the bytes: `status` is the HTTP answer's status (4xx, 5xx), or 0 when no
 * answer came (network failure, abort, a stream that yielded more or fewer bytes than `size`).
 * `code` is always `upload_failed`; the file is left incomplete and cannot be attached.
 */
export class UploadError extends HeraldError {
  /** The HTTP status of the storage's answer, or 0 when there was none. */
  readonly status: number;
  /** The start of the answer's body, for logs (storage errors say why there, S3's as XML). */
  readonly body: string;

  constructor(status: number, message: string, body = '', cause?: unknown) {
    super('upload_failed', message, { op: 'upload', cause });
    this.name = 'UploadError';
    this.status = status;
    this.body = body;
  }
}

/** How much of an error answer's body an `UploadError` keeps. */
const ERROR_BODY_CHARS = 500;

/** What `source` and `opts` say the file is; throws `TypeError` for what cannot be uploaded. */
export function describeUpload(source: UploadSource, opts: UploadOptions): { name: string; type: string; size: number } {
  let name = opts.name;
  let type = opts.type;
  let size: number | undefined;
  if (isBlob(source)) {
    const own = (source as unknown as { name?: unknown }).name; // a File's
    name ??= typeof own === 'string' ? own : undefined;
    type ??= source.type === '' ? undefined : source.type;
    size = source.size;
  } else if (source instanceof ArrayBuffer) {
    size = source.byteLength;
  } else if (ArrayBuffer.isView(source)) {
    size = source.byteLength;
  } else if (isStream(source)) {
    size = opts.size;
    if (size === undefined) throw new TypeError('herald: upload of a stream needs `size`: exactly the bytes it yields');
  } else {
    throw new TypeError('herald: upload takes a Blob or File, bytes (Uint8Array, ArrayBuffer) or a stream with `size`');
  }
  if (opts.size !== undefined && opts.size !== size) throw new TypeError(`herald: upload's \`size\` ${opts.size} is not the source's ${size} bytes`);
  if (name === undefined || name === '') throw new TypeError('herald: upload needs a `name` (a File has its own)');
  if (!Number.isSafeInteger(size) || size < 0) throw new TypeError('herald: upload `size` must be a whole number of bytes');
  return { name, type: type ?? DEFAULT_FILE_TYPE, size };
}

/**
 * Sends `source` with an `upload` answer: `grant.method` to `grant.url` with `grant.headers`, exactly
 * `opts.size` bytes. Resolves when the storage answered 2xx; rejects with `UploadError` otherwise.
 *
 * Use it on its own where the answer came from elsewhere: a backend that asked the server API
 * (`POST /v1/workspaces/{ws}/chats/{chat}/files`) gets the same answer and sends the bytes with this.
 */
export async function putFile(grant: UploadOk, source: UploadSource, opts: PutOptions): Promise<void> {
  const doFetch = opts.fetch ?? globalThis.fetch;
  if (typeof doFetch !== 'function') throw new TypeError('herald: upload needs fetch (browsers and Node 20 have it)');
  const headers: Record<string, string> = { ...grant.headers };
  const init: RequestInit & { duplex?: 'half' } = { method: grant.method, headers };
  if (opts.signal !== undefined) init.signal = opts.signal;
  const { size } = opts;
  if (opts.type !== undefined && !hasHeader(headers, 'content-type')) headers['content-type'] = opts.type;
  const whole = !isStream(source);
  if (whole) {
    init.body = source as BodyInit;
  } else {
    // A streamed body has no length of its own: say it, since storage (S3 above all) refuses a PUT
    // without one. Node's fetch sends it; a browser streams uploads only over HTTP/2 (give it a Blob).
    if (!hasHeader(headers, 'content-length')) headers['content-length'] = String(size);
    init.body = readable(counted(source, size, opts.onProgress));
    init.duplex = 'half';
  }
  let res: Response;
  try {
    res = await doFetch(grant.url, init);
  } catch (err) {
    throw new UploadError(0, `herald: upload to ${origin(grant.url)} failed: ${String((err as { message?: unknown })?.message ?? err)}`, '', err);
  }
  if (res.status < 200 || res.status > 299) {
    const body = await res.text().catch(() => '');
    throw new UploadError(res.status, `herald: upload to ${origin(grant.url)} answered ${res.status}`, body.slice(0, ERROR_BODY_CHARS));
  }
  await res.arrayBuffer().catch(() => undefined); // drain, so the connection can be reused
  if (whole) opts.onProgress?.(size, size);
}

/** The scheme, host and port of `url`, for messages: a presigned URL's query is a credential. */
function origin(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return 'the upload URL';
  }
}

function hasHeader(headers: Record<string, string>, name: string): boolean {
  return Object.keys(headers).some((k) => k.toLowerCase() === name);
}

function isBlob(v: unknown): v is Blob {
  return typeof Blob !== 'undefined' && v instanceof Blob;
}

function isStream(v: unknown): v is ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> {
  if (typeof v !== 'object' || v === null) return false;
  return typeof (v as { getReader?: unknown }).getReader === 'function' || typeof (v as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === 'function';
}

/**
 * The chunks of `source`, counted: progress as each goes out, and an error rather than a body longer
 * than announced (the storage would refuse it anyway, after reading it all). A shorter one is refused
 * by fetch or by the storage.
 */
async function* counted(
  source: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>,
  size: number,
  onProgress: ((sent: number, total: number) => void) | undefined,
): AsyncGenerator<Uint8Array> {
  let sent = 0;
  for await (const chunk of chunks(source)) {
    const bytes = chunk instanceof Uint8Array ? chunk : new Uint8Array(chunk as ArrayBuffer);
    sent += bytes.byteLength;
    if (sent > size) throw new TypeError(`herald: the upload stream yielded more than the ${size} bytes announced`);
    yield bytes;
    onProgress?.(sent, size);
  }
}

/** `gen` as a web `ReadableStream`, the one streamed body that both browsers' and Node's fetch take. */
function readable(gen: AsyncGenerator<Uint8Array>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await gen.next();
        if (done) controller.close();
        else controller.enqueue(value);
      } catch (err) {
        controller.error(err);
      }
    },
    async cancel(reason) {
      await gen.return(undefined);
      void reason;
    },
  });
}

/** A web `ReadableStream` read chunk by chunk (not every runtime makes it async-iterable), or the iterable itself. */
async function* chunks(source: ReadableStream<Uint8Array> | AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  if (typeof (source as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === 'function') {
    yield* source as AsyncIterable<Uint8Array>;
    return;
  }
  const reader = (source as ReadableStream<Uint8Array>).getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  } finally {
    reader.releaseLock();
  }
}
