//! The `limit` the client asks for in the fetches it makes itself (gap repair, `Chat.history`), sized to
//! what the connection has shown it can take.
//!
//! Owns: the current page size, halving it after a slow-consumer close and growing it back slowly.
//! Does not own: noticing the close (connection.ts) or the fetches (chat.ts).
//!
//! Why: close code 4008 means the connection's outbound queue overflowed, and a large fetch reply (500
//! events with bodies of up to 16 KiB each) is the one part of that queue the client controls. Asking for
//! the same page again on the next link would overflow it again, forever. Halving on each 4008 finds a
//! size that fits in a few tries; growing back only in small, spaced steps keeps one catch-up from
//! climbing straight back to the size that overflowed (additive increase, multiplicative decrease).

/** The smallest page asked for after 4008s: still a useful amount of history per round trip. */
export const MIN_PAGE_SIZE = 10;

/**
 * Growth happens at most once per this interval. Without the spacing, the many fetches of one catch-up
 * would grow the page back to the size that overflowed within seconds and cost one 4008 (and one
 * reconnect) every few pages; with it, a link that cannot take more costs at most one probe per interval.
 */
export const GROW_INTERVAL_MS = 10_000;

/** Each growth step adds this share of the current size (at least one event). */
const GROW_FRACTION = 0.25;

/** The client's page size for its own fetches. */
export class PageSize {
  private size: number;
  /** When the size last changed (shrunk or grew); growth waits `GROW_INTERVAL_MS` after it. */
  private changedAt = Number.NEGATIVE_INFINITY;

  /**
   * @param max the configured page size (`fetchPageSize`), which is also where growth stops.
   * @param now the clock, in milliseconds.
   */
  constructor(
    private readonly max: number,
    private readonly now: () => number = Date.now,
  ) {
    this.size = max;
  }

  /** The `limit` to ask for now. */
  get current(): number {
    return this.size;
  }

  /** The connection was closed as a slow consumer: ask for half as much, down to the floor. */
  shrink(): void {
    const floor = Math.min(MIN_PAGE_SIZE, this.max);
    this.size = Math.max(floor, Math.floor(this.size / 2));
    this.changedAt = this.now();
  }

  /** A fetch of the current size came back: grow one step, if the last change is old enough. */
  grow(): void {
    if (this.size >= this.max) return;
    const now = this.now();
    if (now - this.changedAt < GROW_INTERVAL_MS) return;
    this.size = Math.min(this.max, this.size + Math.max(1, Math.ceil(this.size * GROW_FRACTION)));
    this.changedAt = now;
  }
}
