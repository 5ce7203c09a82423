//! Full-jitter exponential backoff for reconnects.
//!
//! Owns: the delay before the n-th retry. Does not own: timers or the decision to retry (connection.ts).
//!
//! Why full jitter: after a server restart every client retries at once; a delay drawn uniformly from
//! [0, min(cap, base * 2^n)] spreads those retries over the whole window instead of stacking them at its
//! edge, which is what "equal jitter" or a fixed delay does.

/** Backoff settings, in milliseconds. */
export interface BackoffOptions {
  /** The window of the first retry; doubles on each further one. */
  baseMs: number;
  /** The largest window. */
  capMs: number;
}

/** The defaults: about half a second at first, never more than 20 s. */
export const DEFAULT_BACKOFF: BackoffOptions = { baseMs: 500, capMs: 20_000 };

/**
 * 2^31 already exceeds any sane cap; capping the exponent keeps `2 ** attempt` finite however long
 * a client stays offline.
 */
const MAX_EXPONENT = 31;

/** The upper bound of the window for retry number `attempt` (from 0): min(cap, base * 2^attempt). */
export function backoffCeiling(attempt: number, opts: BackoffOptions): number {
  const n = Math.min(Math.max(0, Math.floor(attempt)), MAX_EXPONENT);
  return Math.min(opts.capMs, opts.baseMs * 2 ** n);
}

/**
 * A full-jitter delay for retry number `attempt`: uniform in [0, min(cap, base * 2^attempt)].
 * `random` must return a number in [0, 1), like `Math.random`.
 */
export function fullJitter(attempt: number, opts: BackoffOptions, random: () => number = Math.random): number {
  // Clamp so an injected random of exactly 1 (or a bad one) cannot leave the window.
  const r = Math.min(Math.max(random(), 0), 1);
  return Math.floor(r * backoffCeiling(attempt, opts));
}

/** A retry counter that hands out full-jitter delays and resets after a success. */
export class Backoff {
  private attempt = 0;

  constructor(
    private readonly opts: BackoffOptions = DEFAULT_BACKOFF,
    private readonly random: () => number = Math.random,
  ) {}

  /** The delay before the next retry; each call widens the window for the one after. */
  next(): number {
    const delay = fullJitter(this.attempt, this.opts, this.random);
    this.attempt = Math.min(this.attempt + 1, MAX_EXPONENT);
    return delay;
  }

  /** How many delays were handed out since the last reset. */
  get attempts(): number {
    return this.attempt;
  }

  /** Starts over from the base window, after a connection that worked. */
  reset(): void {
    this.attempt = 0;
  }
}
