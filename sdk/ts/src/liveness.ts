//! Link liveness: whether the server at the other end of a greeted link is still there.
//!
//! Owns: the rule, from what the client hears. The link is alive while frames arrive. After `intervalMs`
//! with nothing from the server, the client writes a `ping`; when nothing at all (the reply or any other
//! frame) arrives within `timeoutMs` of it, the link counts as lost. A request that timed out asks for a
//! probe: the same ping, written at once. Does not own: writing the ping, closing the link or
//! reconnecting (connection.ts), nor the bound on an attempt that never opens (connection.ts's connect timeout).
//!
//! Why any frame answers a ping, not only its reply: herald writes a connection's frames in order and
//! reads one request at a time, so a `ping` waits behind a slow request (a store stalled for a few
//! seconds) and its reply behind a long catch-up of pushes. A server still writing is alive; a frozen
//! process (SIGSTOP), a dead host or a half-open TCP link writes nothing, and is found within
//! `intervalMs + timeoutMs` of the last frame it sent.
//!
//! Why a timed-out request probes rather than drops the link: a request can time out on a link that is
//! fine (one slow operation while pushes flow), and dropping the link costs every watch a resume and every
//! request in flight an unknown outcome; when a store stalls, every client would do it at once and then
//! reconnect at once. A probe costs one small frame and decides within `timeoutMs`.

/** What a `Liveness` drives. */
export interface LivenessHost {
  /** Writes a `ping` on the link. Its reply needs no handling here: every frame heard is reported. */
  ping(): void;
  /** Nothing arrived within the timeout of a ping: the link is lost. Called at most once. */
  lost(reason: string): void;
  /** Runs `fn` after `ms`; returns a function that cancels it. */
  schedule(fn: () => void, ms: number): () => void;
}

/**
 * A deadline that fires this much later than it was due means the client's own event loop stalled (a
 * busy page, a throttled background tab, a laptop waking up). Frames may then sit undelivered behind
 * the timer, so the client looks once more after `STALL_GRACE_MS` before it calls the link lost.
 */
const STALL_MS = 1_000;

/** See `STALL_MS`: the one extra wait given after a stall, so frames that arrived meanwhile are dispatched. */
const STALL_GRACE_MS = 1_000;

/** The liveness of one link, from its `hello` reply until it is stopped. */
export class Liveness {
  /** When the last frame from the server arrived (ms since the epoch). */
  private lastHeard = Date.now();
  /** When the ping now waiting for an answer was written; null when none waits. */
  private probeAt: number | null = null;
  /** When the armed timer is due, to notice that it fired late. */
  private due = 0;
  /** Set once a late deadline was given its grace, so a stall delays the verdict once, not forever. */
  private graced = false;
  private cancel: (() => void) | null = null;
  private stopped = false;

  /**
   * Starts watching: the first ping goes out after `intervalMs` of silence.
   * @param intervalMs silence after which the client pings.
   * @param timeoutMs how long after a ping the link may stay silent before it counts as lost.
   */
  constructor(
    private readonly host: LivenessHost,
    private readonly intervalMs: number,
    private readonly timeoutMs: number,
  ) {
    this.arm(intervalMs);
  }

  /** A frame arrived: the server is there. Cheap, as it runs for every frame: no timer is touched unless a ping waits. */
  heard(): void {
    if (this.stopped) return;
    this.lastHeard = Date.now();
    if (this.probeAt !== null) {
      this.probeAt = null;
      this.arm(this.intervalMs);
    }
  }

  /** A request timed out: ping now, unless a ping already waits for an answer. */
  probe(): void {
    if (this.stopped || this.probeAt !== null) return;
    this.sendProbe();
  }

  /** True while a ping waits for an answer. */
  get probing(): boolean {
    return this.probeAt !== null;
  }

  /** Stops the timers for good (the link is gone). */
  stop(): void {
    this.stopped = true;
    this.cancel?.();
    this.cancel = null;
  }

  private arm(ms: number): void {
    this.cancel?.();
    this.due = Date.now() + ms;
    this.cancel = this.host.schedule(() => this.fire(), ms);
  }

  private fire(): void {
    this.cancel = null;
    if (this.stopped) return;
    const now = Date.now();
    if (this.probeAt === null) {
      // Frames reset nothing when they arrive (that would cost a timer per frame); the quiet time is
      // measured here instead, and the timer set again for what is left of it.
      const quiet = now - this.lastHeard;
      if (quiet < this.intervalMs) this.arm(this.intervalMs - quiet);
      else this.sendProbe();
      return;
    }
    if (now - this.due > STALL_MS && !this.graced) {
      this.graced = true;
      this.arm(STALL_GRACE_MS);
      return;
    }
    this.stopped = true;
    this.host.lost('ping timeout');
  }

  private sendProbe(): void {
    this.probeAt = Date.now();
    this.graced = false;
    // Armed before writing: a write that fails drops the link, and with it this watcher, at once.
    this.arm(this.timeoutMs);
    this.host.ping();
  }
}
