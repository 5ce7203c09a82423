//! The client's options, their defaults, and the reason for each default.
//!
//! Owns: `ClientOptions` and turning it into a complete, validated settings object.
//! Does not own: behaviour; client.ts and connection.ts read the resolved settings.

import { DEFAULT_BACKOFF, type BackoffOptions } from './backoff.js';
import { tokenProblem, type TokenProvider } from './token.js';
import type { WebSocketConstructor } from './transport.js';

/** Options of `new HeraldClient(...)`. Only `url`, `workspace` and `token` are required. */
export interface ClientOptions {
  /**
   * The WebSocket endpoint, e.g. `ws://host:8080/v1/ws`; `?ws=WORKSPACE` is added when missing. Or
   * several, one per node of a cell (`['ws://10.0.0.5:8080/v1/ws', 'ws://10.0.0.6:8080/v1/ws']`): the
   * client starts with the first, and after a lost link or a failed attempt tries the next one, so the
   * node it lost comes round again only after every other. Each must be a `ws://` or `wss://` URL; the
   * list must not be empty or name one endpoint twice.
   */
  url: string | readonly string[];
  /** The workspace this client belongs to; must match the token's `ws` claim. */
  workspace: string;
  /**
   * A JWT, or a function returning one (sync or async). A function is called again when the server
   * rejects the token (4001 / `unauthenticated`) and before a connect when the token's `exp` is within
   * `tokenRefreshMarginMs`; a fixed string cannot be refreshed, so a rejection stops the client. It must
   * give the JWT string itself: nothing, a non-string or a JSON body (`{"token": ...}`) makes `connect()`
   * reject with code `token` (a fixed one, the constructor throw).
   */
  token: string | TokenProvider;
  /** The WebSocket class; required where there is no global one (Node 20: pass `ws`'s). */
  WebSocket?: WebSocketConstructor;
  /**
   * How long a request waits for its reply, including any wait for the connection. Default 10 s. A
   * request that times out on a link makes the client probe the link at once (a `ping`, `pingTimeoutMs`).
   */
  requestTimeoutMs?: number;
  /**
   * How long a link may stay silent (nothing from the server) before the client sends a `ping`. Default
   * 5 s. With `pingTimeoutMs`, it bounds how long a frozen node or a dead link goes unnoticed:
   * `pingIntervalMs + pingTimeoutMs` (10 s by default) after the last frame the server sent.
   */
  pingIntervalMs?: number;
  /**
   * How long after a `ping` the link may stay silent before it counts as lost: closed by the client and
   * reconnected (to the next URL when there are several). Any frame from the server answers it, not only
   * the ping's reply. Default 5 s.
   */
  pingTimeoutMs?: number;
  /**
   * How long one connect attempt may take, from opening the socket to the `hello` reply. Past it the
   * attempt counts as failed (a frozen node's kernel still accepts TCP connections and never answers
   * the upgrade). Default 10 s.
   */
  connectTimeoutMs?: number;
  /** Reconnect backoff window: `baseMs` (default 500) doubling up to `capMs` (default 20 000). */
  backoff?: Partial<BackoffOptions>;
  /** The least wait before reconnecting after close code 4029 (too many requests). Default 10 s. */
  throttledReconnectFloorMs?: number;
  /** The most sends that may wait unsent (offline, behind the in-flight window, or before a retry). Default 100. */
  maxQueue?: number;
  /** How many times one send is retried after `unavailable`, `internal` or a timeout. Default 10. */
  sendRetries?: number;
  /**
   * How long a send may take to be stored, from the call: offline waits, retries and the reply included.
   * Past it a send not yet written rejects with `timeout` (one written by then waits for its reply).
   * Default 60 s.
   */
  sendTimeoutMs?: number;
  /** Refresh a provider's token this long before its `exp`. Default 30 s. */
  tokenRefreshMarginMs?: number;
  /** The server's frame limit; larger requests fail locally with `too_large`. Default 64 KiB. */
  maxFrameBytes?: number;
  /**
   * `limit` of the fetches the client makes itself (gap repair, `Chat.history`); the protocol allows at
   * most 500. Default 500. After a slow-consumer close (4008) the client asks for half as much (down to
   * 10) and, on successful fetches, grows back toward this size by a quarter at most once per 10 s.
   */
  fetchPageSize?: number;
  /** Out-of-order pushes kept per chat while a gap is fetched; beyond it they are re-fetched. Default 1000. */
  maxBufferedEvents?: number;
  /** Random source in [0, 1) for jitter and client ids' fallback; tests inject a fixed one. */
  random?: () => number;
  /** The `fetch` that uploads send their bytes with (1.2 files). Default: the global one. */
  fetch?: typeof fetch;
}

/** `ClientOptions` with every default filled in. */
export interface Settings {
  /** One or more URLs, in the order given. */
  url: readonly string[];
  workspace: string;
  token: string | TokenProvider;
  WebSocket: WebSocketConstructor | undefined;
  requestTimeoutMs: number;
  pingIntervalMs: number;
  pingTimeoutMs: number;
  connectTimeoutMs: number;
  backoff: BackoffOptions;
  throttledReconnectFloorMs: number;
  maxQueue: number;
  sendRetries: number;
  sendTimeoutMs: number;
  tokenRefreshMarginMs: number;
  maxFrameBytes: number;
  fetchPageSize: number;
  maxBufferedEvents: number;
  random: () => number;
  fetch: typeof fetch | undefined;
}

/** The protocol's largest `fetch` limit. */
export const MAX_FETCH_LIMIT = 500;

/** The protocol's default frame limit (64 KiB). */
const DEFAULT_FRAME_BYTES = 64 * 1024;

/** Validates `opts` and fills in defaults. Throws `TypeError` for a setting that cannot work. */
export function resolveOptions(opts: ClientOptions): Settings {
  const url = urlList(opts.url);
  if (!/^[A-Za-z0-9_.:-]{1,128}$/.test(opts.workspace ?? '')) {
    throw new TypeError('herald: `workspace` must be 1 to 128 characters of A-Z a-z 0-9 _ . : -');
  }
  if (typeof opts.token !== 'function') {
    const given: unknown = opts.token;
    // A string or an object may be a token gone wrong (empty, a JSON body, `{ token }`): say how.
    // Anything else is not a token at all.
    if (typeof given !== 'string' && (typeof given !== 'object' || given === null)) {
      throw new TypeError('herald: `token` must be a string or a function returning one');
    }
    const problem = tokenProblem(given, 'the `token` option is');
    if (problem !== null) throw new TypeError(problem);
  }
  const backoff = { ...DEFAULT_BACKOFF, ...opts.backoff };
  const s: Settings = {
    url,
    workspace: opts.workspace,
    token: opts.token,
    WebSocket: opts.WebSocket,
    requestTimeoutMs: positive('requestTimeoutMs', opts.requestTimeoutMs, 10_000),
    // 5 s + 5 s: a frozen node is noticed within 10 s of its last frame (it was 25 s + 10 s when the
    // client pinged on the server's heartbeat), and no live server is taken for dead on a link that is
    // merely slow. A live herald writes pushes in order while a request runs, and reads one request at a
    // time, so a ping waits at most behind a request in progress; herald bounds a stalled store write by
    // 3 s (its PostgreSQL batch timeout) before it moves on, inside the 5 s. The 10 s of silence that
    // make a link lost are as long as a request may wait for its reply (requestTimeoutMs). A ping every
    // 5 s of quiet is one small frame each way.
    pingIntervalMs: positive('pingIntervalMs', opts.pingIntervalMs, 5_000),
    pingTimeoutMs: positive('pingTimeoutMs', opts.pingTimeoutMs, 5_000),
    // TCP, TLS, the upgrade and `hello`: a few round trips, seconds on a poor mobile link, and a node
    // that just restarted greets thousands of clients at once; cutting those short would add attempts
    // to its load. A frozen node costs this only when every other node failed too (rotation, nodes.ts).
    connectTimeoutMs: positive('connectTimeoutMs', opts.connectTimeoutMs, 10_000),
    backoff: { baseMs: positive('backoff.baseMs', backoff.baseMs, 500), capMs: positive('backoff.capMs', backoff.capMs, 20_000) },
    throttledReconnectFloorMs: nonNegative('throttledReconnectFloorMs', opts.throttledReconnectFloorMs, 10_000),
    maxQueue: positive('maxQueue', opts.maxQueue, 100),
    sendRetries: nonNegative('sendRetries', opts.sendRetries, 10),
    // Long enough to ride out a reconnect (backoff tops out at 20 s) and a server restart; short enough
    // that a user learns within a minute that a message did not go, and can send it again.
    sendTimeoutMs: positive('sendTimeoutMs', opts.sendTimeoutMs, 60_000),
    tokenRefreshMarginMs: nonNegative('tokenRefreshMarginMs', opts.tokenRefreshMarginMs, 30_000),
    maxFrameBytes: positive('maxFrameBytes', opts.maxFrameBytes, DEFAULT_FRAME_BYTES),
    fetchPageSize: Math.min(positive('fetchPageSize', opts.fetchPageSize, MAX_FETCH_LIMIT), MAX_FETCH_LIMIT),
    maxBufferedEvents: positive('maxBufferedEvents', opts.maxBufferedEvents, 1000),
    random: opts.random ?? Math.random,
    fetch: opts.fetch,
  };
  if (s.backoff.capMs < s.backoff.baseMs) throw new TypeError('herald: `backoff.capMs` must be >= `backoff.baseMs`');
  return s;
}

/** `url` as a list: one string, or a non-empty list of non-empty strings without repeats. */
function urlList(url: string | readonly string[] | undefined): readonly string[] {
  if (typeof url === 'string') {
    if (url.length === 0) throw new TypeError('herald: `url` is required');
    return [url];
  }
  if (!Array.isArray(url)) throw new TypeError('herald: `url` is required: a URL, or a list of them');
  if (url.length === 0) throw new TypeError('herald: `url` lists no URL');
  for (const u of url) {
    if (typeof u !== 'string' || u.length === 0) throw new TypeError('herald: every entry of `url` must be a non-empty string');
  }
  if (new Set(url).size !== url.length) throw new TypeError('herald: `url` lists the same URL twice');
  return [...(url as string[])];
}

function positive(name: string, v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  if (!Number.isFinite(v) || v <= 0) throw new TypeError(`herald: \`${name}\` must be a positive number`);
  return v;
}

function nonNegative(name: string, v: number | undefined, dflt: number): number {
  if (v === undefined) return dflt;
  if (!Number.isFinite(v) || v < 0) throw new TypeError(`herald: \`${name}\` must be zero or more`);
  return v;
}
