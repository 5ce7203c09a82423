//! Close codes and error codes, and what the client does on each close code.
//!
//! Owns: the numbers and names of docs/protocol.md's close and error tables, the client's own local error
//! codes, and the reconnect policy per close code (the table in README.md mirrors `closePolicy`).
//! Does not own: timing (backoff.ts) or carrying the policy out (connection.ts).

/** WebSocket close codes herald's server uses (docs/protocol.md, "Close codes"). */
export const CloseCode = {
  /** A frame over the server's frame limit. */
  FrameTooLarge: 1009,
  /** Frames that are not JSON objects of this protocol. */
  BadProtocol: 4000,
  /** No valid `hello`: bad, expired or missing token, or hello timeout. */
  Unauthenticated: 4001,
  /** Slow consumer: the connection's outbound queue passed its limit. */
  SlowConsumer: 4008,
  /** Going away: drain or rebalance. */
  GoingAway: 4012,
  /** Too many requests for too long. */
  TooManyRequests: 4029,
} as const;

/** Error codes the server puts in `err.code` (docs/protocol.md, "Error codes"). */
export type ServerErrorCode =
  | 'bad_request'
  | 'unauthenticated'
  | 'forbidden'
  | 'not_found'
  | 'throttled'
  | 'unavailable'
  | 'too_large'
  | 'internal';

/**
 * Error codes the client raises itself, never sent by a server.
 *
 * - `timeout`: no reply within the request timeout.
 * - `disconnected`: the link dropped after the request was written, so its outcome is unknown.
 * - `closed`: the client was closed (or stopped reconnecting) before the request could finish.
 * - `queue_full`: the offline send queue is at its bound.
 * - `token`: the token provider threw or returned something that is not a string.
 * - `protocol`: the server sent a frame this client cannot read.
 * - `unreachable`: several attempts in a row failed before a WebSocket opened (a wrong `url`, or the
 *   server is down); only in `error` events, since the client goes on trying.
 * - `upload_failed`: (1.2) the storage did not take a file's bytes; an `UploadError` with the HTTP status.
 */
export type ClientErrorCode = 'timeout' | 'disconnected' | 'closed' | 'queue_full' | 'token' | 'protocol' | 'unreachable' | 'upload_failed';

/** Every code a `HeraldError` may carry. Unknown server codes pass through as plain strings. */
export type ErrorCode = ServerErrorCode | ClientErrorCode | (string & {});

/**
 * What the client does after a link closes.
 *
 * - `reconnect`: reconnect after a full-jitter backoff delay, or after the server's `after_ms` when a
 *   `reconnect` push came first.
 * - `reconnect_slow`: reconnect, but not before a long floor delay (the server said we sent too much).
 * - `reconnect_smaller`: reconnect after backoff that even a long-lived link does not reset, and ask for
 *   smaller fetch pages from then on (the server said we fell behind what it sent us).
 * - `refresh_token`: fetch a new token from the provider and reconnect; stop if that one fails too.
 */
export type ClosePolicy = 'reconnect' | 'reconnect_slow' | 'reconnect_smaller' | 'refresh_token';

/**
 * The policy for a close code. Every code reconnects in some way except a token that keeps failing,
 * which `refresh_token` turns into a stop in the client: a client that gives up on a transient code
 * would leave a user silently offline, which is worse than a bounded, jittered retry.
 */
export function closePolicy(code: number): ClosePolicy {
  switch (code) {
    case CloseCode.Unauthenticated:
      return 'refresh_token';
    case CloseCode.TooManyRequests:
      return 'reconnect_slow';
    // The outbound queue overflowed, most likely on a large fetch reply or replay. The same requests on
    // the next link would overflow it again: come back later each time, and ask for less.
    case CloseCode.SlowConsumer:
      return 'reconnect_smaller';
    // 4000 means one of us broke the protocol; backoff keeps a buggy loop from hammering the server.
    // 4012, 1006 (network), 1009 and anything unknown: the next connection may well be fine.
    default:
      return 'reconnect';
  }
}
