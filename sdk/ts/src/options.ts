//! The client's options, their defaults, and the reason for each default.
//!
//! Owns: `ClientOptions` and turning it into a complete, validated settings object.
//! Does not own: behaviour; client.ts reads the resolved settings.

import { DEFAULT_BACKOFF, type BackoffOptions } from './backoff.js';
import type { TokenProvider } from './token.js';
import type { WebSocketConstructor } from './transport.js';

/** Options of `new HeraldClient(...)`. Only `url`, `workspace` and `token` are required. */
export interface ClientOptions {
  /** The WebSocket endpoint, e.g. `ws://host:8080/v1/ws`; `?ws=WORKSPACE` is added when missing. */
  url: string;
  /** The workspace this client belongs to; must match the token's `ws` claim. */
  workspace: string;
  /**
   * A JWT, or a function returning one (sync or async). A function is called again when the server
   * rejects the token (4001 / `unauthenticated`) and before a connect when the token's `exp` is within
   * `tokenRefreshMarginMs`; a fixed string cannot be refreshed, so a rejection stops the client.
   */
  token: string | TokenProvider;
  /** The WebSocket class; required where there is no global one (Node 20: pass `ws`'s). */
  WebSocket?: WebSocketConstructor;
  /** How long a request waits for its reply, including any wait for the connection. Default 10 s. */
  requestTimeoutMs?: number;
  /** How long a `ping` may go unanswered before the link counts as dead. Default 10 s. */
  pingTimeoutMs?: number;
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
  url: string;
  workspace: string;
  token: string | TokenProvider;
  WebSocket: WebSocketConstructor | undefined;
  requestTimeoutMs: number;
  pingTimeoutMs: number;
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
  if (typeof opts.url !== 'string' || opts.url.length === 0) throw new TypeError('herald: `url` is required');
  if (!/^[A-Za-z0-9_.:-]{1,128}$/.test(opts.workspace ?? '')) {
    throw new TypeError('herald: `workspace` must be 1 to 128 characters of A-Z a-z 0-9 _ . : -');
  }
  if (typeof opts.token !== 'string' && typeof opts.token !== 'function') {
    throw new TypeError('herald: `token` must be a string or a function returning one');
  }
  const backoff = { ...DEFAULT_BACKOFF, ...opts.backoff };
  const s: Settings = {
    url: opts.url,
    workspace: opts.workspace,
    token: opts.token,
    WebSocket: opts.WebSocket,
    requestTimeoutMs: positive('requestTimeoutMs', opts.requestTimeoutMs, 10_000),
    // Shorter than the server's 60 s idle cut so the client notices a dead link well before then.
    pingTimeoutMs: positive('pingTimeoutMs', opts.pingTimeoutMs, 10_000),
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
