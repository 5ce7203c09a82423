//! `HeraldError`, the one error type every promise of this package rejects with.
//!
//! Owns: turning a wire `err` object into an error and carrying code, retry hint and close code.
//! Does not own: the list of codes (codes.ts).

import type { ErrorCode } from './codes.js';
import type { WireError } from './types.js';

/** Extra facts an error may carry. */
export interface HeraldErrorInit {
  /** Milliseconds the server asked to wait before trying again (`throttled`, `unavailable`). */
  retryAfterMs?: number;
  /** The request operation that failed, when the error answers a request. */
  op?: string;
  /** The WebSocket close code, when the error comes from a closed link. */
  closeCode?: number;
  /** The underlying error, when one exists (a token provider's throw, a socket error). */
  cause?: unknown;
}

/**
 * An error from herald or from this client. `code` is a protocol error code (`throttled`, `forbidden`,
 * ...) or one of the client's own (`timeout`, `disconnected`, `closed`, `queue_full`, `token`,
 * `protocol`), so callers can branch on it without parsing messages.
 */
export class HeraldError extends Error {
  /** The machine-readable code. */
  readonly code: ErrorCode;
  /** The server's retry hint in milliseconds, when it gave one. */
  readonly retryAfterMs: number | undefined;
  /** The request operation that failed, when there was one. */
  readonly op: string | undefined;
  /** The close code of the link, when the error is about a closed link. */
  readonly closeCode: number | undefined;

  constructor(code: ErrorCode, message: string, init: HeraldErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = 'HeraldError';
    this.code = code;
    this.retryAfterMs = init.retryAfterMs;
    this.op = init.op;
    this.closeCode = init.closeCode;
  }

  /** Builds the error for a reply's `err` object. */
  static fromWire(err: WireError, op?: string): HeraldError {
    const code = typeof err.code === 'string' ? err.code : 'internal';
    const retry = typeof err.retry_after_ms === 'number' ? err.retry_after_ms : undefined;
    return new HeraldError(code, err.message ?? code, { retryAfterMs: retry, op });
  }
}

/** True when `e` is a `HeraldError`, optionally with the given code. */
export function isHeraldError(e: unknown, code?: ErrorCode): e is HeraldError {
  return e instanceof HeraldError && (code === undefined || e.code === code);
}
