//! Who is present in one chat: the `presence` reply, kept current by `presence` pushes.
//!
//! Owns: the state (a count and the users known present) and the rules for folding pushes into it,
//! including when it can no longer be trusted and must be fetched again. Does not own: requests or
//! when to resync (chat.ts asks after each watch reply, and when `stale` says so).
//!
//! Why resync: above 100 present users the server sends only counts, so the list is partial; when the
//! count comes back down, per-user pushes resume on top of a list that lacks people. A list that is
//! known complete (count <= 100) but disagrees with its own count is refetched rather than guessed at.

import type { PresenceOk, PresencePush } from './types.js';

/** Above this many present users the server pushes counts only, and lists at most this many. */
export const PRESENCE_LIST_MAX = 100;

/** Who is present in a chat. */
export interface PresenceState {
  /** How many users are present. */
  count: number;
  /** Users known present, sorted: all of them while `count` is at most 100, else some. */
  users: string[];
}

/** The presence of one chat. */
export class Presence {
  private count = 0;
  private readonly users = new Set<string>();
  private known = false;
  /** A count-only push came: the list may name people who left, so it cannot be trusted at <= 100. */
  private partial = false;

  /** The state, or null before the first `presence` reply. */
  get state(): PresenceState | null {
    if (!this.known) return null;
    return { count: this.count, users: [...this.users].sort() };
  }

  /** True when the state disagrees with itself and only a `presence` reply can fix it. */
  get stale(): boolean {
    return this.known && this.count <= PRESENCE_LIST_MAX && (this.partial || this.users.size !== this.count);
  }

  /** Replaces the state with a `presence` reply. */
  reset(ok: PresenceOk): void {
    this.users.clear();
    for (const u of ok.users) if (typeof u === 'string') this.users.add(u);
    this.count = Number.isInteger(ok.count) && ok.count >= 0 ? ok.count : this.users.size;
    this.known = true;
    this.partial = false;
  }

  /** Applies a push; returns true when the state changed. Pushes before the first reply are dropped. */
  apply(push: PresencePush): boolean {
    if (!this.known) return false;
    if (typeof push.user === 'string' && typeof push.present === 'boolean') {
      const complete = this.users.size === this.count;
      const had = this.users.has(push.user);
      if (had === push.present) return false;
      if (push.present) this.users.add(push.user);
      else this.users.delete(push.user);
      // A complete list stays complete; a partial one moves its count by the same step.
      this.count = complete ? this.users.size : Math.max(0, this.count + (push.present ? 1 : -1));
      return true;
    }
    if (typeof push.count === 'number' && Number.isInteger(push.count) && push.count >= 0) {
      if (push.count === this.count) return false;
      this.count = push.count;
      this.partial = true;
      return true;
    }
    return false; // a shape of a later version
  }

  /** Forgets the state (the watch ended). */
  clear(): void {
    this.users.clear();
    this.count = 0;
    this.known = false;
    this.partial = false;
  }
}
