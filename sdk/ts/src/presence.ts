//! Who is present in one chat: the `presence` reply, kept current by `presence` pushes.
//!
//! Owns: the state (a count and the users known present), the rules for folding pushes into it,
//! including when it can no longer be trusted and must be fetched again, and the `presence` requests
//! that (re)fetch it, with the pushes that arrive meanwhile held and applied on top of the reply.
//! Does not own: when a watch begins (chat.ts calls `sync` when watch.ts takes a watch reply) or the
//! link.
//!
//! Why resync: above 100 present users the server sends only counts, so the list is partial; when the
//! count comes back down, per-user pushes resume on top of a list that lacks people. A list that is
//! known complete (count <= 100) but disagrees with its own count is refetched rather than guessed at.

import { HeraldError } from './errors.js';
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

/** The presence of one chat, as pushes and replies tell it. */
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

/** What a `PresenceTracker` needs from its chat. */
export interface PresenceHost {
  /** Sends the `presence` request. */
  request(): Promise<PresenceOk>;
  /** Runs `fn` after `ms`; returns a function that cancels it. */
  schedule(fn: () => void, ms: number): () => void;
  /** The state changed. */
  changed(state: PresenceState): void;
  /** A sync failed for a reason retrying will not fix. */
  failed(err: HeraldError): void;
}

/** Codes after which a presence request is retried. */
const TRANSIENT = new Set(['throttled', 'unavailable', 'timeout', 'internal']);

/** Wait before retrying when the server gave no `retry_after_ms`. */
const DEFAULT_RETRY_MS = 1000;

/** Keeps one chat's presence current while the application wants it. */
export class PresenceTracker {
  private readonly presence = new Presence();
  private on = false;
  /** Pushes that came while a request was out; null while none is. */
  private held: PresencePush[] | null = null;
  /** Bumped when the link drops or tracking stops, so an older reply is ignored. */
  private epoch = 0;
  private cancelRetry: (() => void) | null = null;

  constructor(private readonly host: PresenceHost) {}

  /** True once enabled and until `stop`. */
  get enabled(): boolean {
    return this.on;
  }

  /** The state, or null before the first reply. */
  get state(): PresenceState | null {
    return this.presence.state;
  }

  /** Starts tracking (the next `sync` fetches). */
  enable(): void {
    this.on = true;
  }

  /** Fetches the state now, unless a request is already out. Call after each watch reply. */
  sync(): void {
    if (!this.on || this.held !== null) return;
    this.cancelTimer();
    const epoch = this.epoch;
    this.held = [];
    this.host.request().then(
      (ok) => {
        if (epoch !== this.epoch) return;
        const held = this.held ?? [];
        this.held = null;
        this.presence.reset(ok);
        for (const push of held) this.presence.apply(push);
        this.emit();
        if (this.presence.stale) this.sync();
      },
      (err: unknown) => {
        if (epoch !== this.epoch) return;
        this.held = null;
        const e = err instanceof HeraldError ? err : new HeraldError('internal', String(err), { op: 'presence' });
        if (e.code === 'disconnected' || e.code === 'closed') return; // the next watch reply syncs again
        if (TRANSIENT.has(e.code)) {
          this.cancelRetry = this.host.schedule(() => {
            this.cancelRetry = null;
            if (epoch === this.epoch) this.sync();
          }, e.retryAfterMs ?? DEFAULT_RETRY_MS);
          return;
        }
        this.host.failed(e); // the watch goes on without presence
      },
    );
  }

  /** A `presence` push for the chat while it is watched. */
  pushed(push: PresencePush): void {
    if (!this.on) return;
    if (this.held !== null) {
      this.held.push(push);
      return;
    }
    if (this.presence.apply(push)) this.emit();
    if (this.presence.stale) this.sync();
  }

  /** The link dropped: a request out is void; the state stays on show until the next sync. */
  suspend(): void {
    this.epoch++;
    this.held = null;
    this.cancelTimer();
  }

  /** Stops tracking and forgets the state (the watch ended). */
  stop(): void {
    this.suspend();
    this.on = false;
    this.presence.clear();
  }

  private emit(): void {
    const state = this.presence.state;
    if (state !== null) this.host.changed(state);
  }

  private cancelTimer(): void {
    this.cancelRetry?.();
    this.cancelRetry = null;
  }
}
