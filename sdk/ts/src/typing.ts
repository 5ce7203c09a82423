//! Typing indicators for one chat: saying that this user types, and knowing who else does.
//!
//! Owns: throttling this user's `typing` requests (at most one every 2 s while the user types, the
//! server's own push window, with one trailing request for keystrokes inside the window) and the set of
//! others typing, each of whom expires 5 s after their last push, or at once when their message arrives. Does not own: the request (sent through the chat) or
//! which pushes belong to this chat (pushes.ts routes them).

/** The server pushes one member's typing at most once per this window; sending more often is wasted. */
export const TYPING_SEND_INTERVAL_MS = 2_000;

/**
 * Keystrokes inside the window are announced by one request at its end, plus this margin: the server
 * measures its 2 s between arrivals, and a request that overtook the previous one's latency by a few
 * milliseconds would be answered ok and not pushed. Without a trailing request, a short burst of typing
 * soon after the last request (say, the next message right after sending one) would never show.
 */
const TRAILING_MARGIN_MS = 250;

/**
 * How long someone counts as typing after their last push. The protocol says clients show typing for
 * about 5 s: longer than the 2 s push window, so a steady typist never flickers off between pushes.
 */
export const TYPING_EXPIRY_MS = 5_000;

/** What `Typing` needs from its chat. */
export interface TypingHost {
  /** True while requests go out on a live link. */
  readonly connected: boolean;
  /** Sends the `typing` request; failures are the caller's to ignore. */
  sendTyping(): Promise<unknown>;
  /** Runs `fn` after `ms`; returns a function that cancels it. */
  schedule(fn: () => void, ms: number): () => void;
  /** Called whenever the set of others typing changes, with them sorted. */
  changed(users: string[]): void;
}

/** The typing state of one chat. */
export class Typing {
  /** When the last `typing` request went out (ms), or null for never. */
  private sentAt: number | null = null;
  /** Cancels the trailing request, when one is scheduled. */
  private cancelTrailing: (() => void) | null = null;
  /** Others typing, with the timer that expires each. */
  private readonly typists = new Map<string, () => void>();

  constructor(private readonly host: TypingHost) {}

  /** Others typing now, sorted. */
  get users(): string[] {
    return [...this.typists.keys()].sort();
  }

  /**
   * This user typed: sends `typing` unless one went out less than 2 s ago, in which case one goes out
   * when those 2 s are over. Nothing is sent offline (a request parked until a reconnect would announce
   * typing that is long over). Returns whether a request went out now. Errors (a muted member's
   * `forbidden`, a dropped link) are ignored: typing is a hint.
   */
  typed(): boolean {
    if (!this.host.connected) return false;
    const now = Date.now();
    if (this.sentAt === null || now - this.sentAt >= TYPING_SEND_INTERVAL_MS) {
      this.stopTrailing();
      this.send(now);
      return true;
    }
    if (this.cancelTrailing === null) {
      this.cancelTrailing = this.host.schedule(() => {
        this.cancelTrailing = null;
        if (this.host.connected) this.send(Date.now());
      }, this.sentAt + TYPING_SEND_INTERVAL_MS + TRAILING_MARGIN_MS - now);
    }
    return false;
  }

  /** This user sent their message (or left): a trailing `typing` would announce typing that is over. */
  stopTrailing(): void {
    this.cancelTrailing?.();
    this.cancelTrailing = null;
  }

  /** A `typing` push: `user` typed; (re)starts their expiry. */
  pushed(user: string): void {
    const known = this.typists.get(user);
    known?.();
    this.typists.set(
      user,
      this.host.schedule(() => this.remove(user), TYPING_EXPIRY_MS),
    );
    if (known === undefined) this.host.changed(this.users);
  }

  /** `user`'s message arrived: they stopped typing it. */
  remove(user: string): void {
    const cancel = this.typists.get(user);
    if (cancel === undefined) return;
    cancel();
    this.typists.delete(user);
    this.host.changed(this.users);
  }

  private send(now: number): void {
    this.sentAt = now;
    this.host.sendTyping().catch(() => {});
  }

  /** Forgets everyone (the link dropped or the watch ended: nobody's pushes will come). */
  clear(): void {
    if (this.typists.size === 0) return;
    for (const cancel of this.typists.values()) cancel();
    this.typists.clear();
    this.host.changed([]);
  }
}
