//! `Watch`: the state machine of watching one chat, so that the application sees every event once, in
//! seq order.
//!
//! Owns: the watch state, the last delivered seq, the highest seq known to exist, the buffer of
//! out-of-order pushes, gap repair by paged `fetch`, resuming with `watch after=` on a new link, retrying
//! transient failures, and the pending `watch()` promises.
//! Does not own: the requests themselves or the page size (its owner, chat.ts, makes them through the
//! client), nor what happens to a delivered event (the owner feeds its message list and listeners), nor
//! typing, presence or the message list, which the owner resets on the hooks this file calls
//! (`live`, `suspended`, `stopped`).
//!
//! States:
//!
//!     unwatched ──watch()──▶ subscribing ──watch ok──▶ live ◀──────────┐
//!         ▲   └─(offline)─▶ suspended ◀─link down── any watched state  │
//!         │                    └──link up──▶ subscribing               │
//!         │                     live ──gap or notify──▶ repairing ─────┘
//!         └──── unwatch(), leave(), forbidden/not_found from any state
//!
//! Why buffer and fetch instead of trusting pushes: the server may skip pushes for a hot chat or a slow
//! link (docs/protocol.md, "Pushes"), and only seq tells the client what it lacks.
//!
//! Why every fetch here pages by `more`: the server bounds a reply in bytes as well as in count, so a page
//! of large events may hold far fewer than `limit` while more follow. Neither a short page (done?) nor a
//! full one (more?) says anything; only `more` does, and the next page starts after the last event held.

import { HeraldError } from './errors.js';
import type { EventPush, FetchOk, HeraldEvent, NotifyPush, RequestArgs, WatchOk } from './types.js';

/** Where a chat stands with respect to watching. */
export type WatchState = 'unwatched' | 'subscribing' | 'live' | 'repairing' | 'suspended';

/** Which watch states may follow which; anything else is a bug in this file. */
const WATCH_TRANSITIONS: Record<WatchState, readonly WatchState[]> = {
  unwatched: ['subscribing', 'suspended'],
  subscribing: ['live', 'repairing', 'suspended', 'unwatched'],
  live: ['repairing', 'suspended', 'unwatched'],
  repairing: ['live', 'suspended', 'unwatched'],
  suspended: ['subscribing', 'unwatched'],
};

/** A change of watch state. */
export interface WatchStateChange {
  chat: string;
  from: WatchState;
  to: WatchState;
}

/** What a watch needs from the chat handle that owns it. @internal */
export interface WatchOwner {
  /** True while requests go out on a live, greeted link. */
  readonly connected: boolean;
  /** The `watch` request. */
  subscribe(args: RequestArgs['watch']): Promise<WatchOk>;
  /** One page of events after `after`, at the client's page size. */
  fetchPage(after: number): Promise<FetchOk>;
  /** Runs `fn` after `ms`; returns a function that cancels it. */
  schedule(fn: () => void, ms: number): () => void;
  /** Buffered pushes allowed. */
  readonly maxBufferedEvents: number;
  /** The watch state changed. */
  changed(change: WatchStateChange): void;
  /** Hands `ev` on; `asOf` is the chat's seq when this view of it was read (a live push: its own seq). */
  deliver(ev: HeraldEvent, asOf: number): void;
  /** Reports what no promise reports: a watch that failed for good, a repair that gave up. */
  error(err: HeraldError): void;
  /** A watch reply was taken and the state is `live`: the server pushes to this link from now on. */
  live(): void;
  /** The link dropped; the state is about to be `suspended`. */
  suspended(): void;
  /** Watching ended; the state is about to be `unwatched`. */
  stopped(): void;
}

/** Codes after which watching or fetching may work later, on this link or the next. */
const TRANSIENT = new Set(['throttled', 'unavailable', 'timeout', 'internal']);

/** Wait before retrying a watch or fetch when the server gave no `retry_after_ms`. */
const DEFAULT_RETRY_MS = 1000;

/**
 * Fetches in a row that may bring nothing although more was announced, before the gap is given up.
 * This, not a count of pages, is what bounds a repair: every page that is not a stall delivers at least
 * one new event, and pages may be as short as one event, so no page count says when a catch-up is done.
 */
const MAX_STALLS = 3;

/** The watch of one chat. @internal Created by `Chat`. */
export class Watch {
  private current: WatchState = 'unwatched';
  /** The application wants this chat watched (survives link loss; cleared by unwatch/leave/forbidden). */
  private wanted = false;
  /** The seq of the last event handed on; null before the first watch reply. */
  private last: number | null = null;
  /** The seq of the current watch's reply: pushes up to it are its replay, stored views read after it. */
  private watchSeq = 0;
  /** The highest seq the server said exists (notify, gaps, fetch replies) that may not be delivered yet. */
  private known = 0;
  /** Pushes that arrived out of order or while subscribing or repairing, by seq. */
  private buffer = new Map<number, HeraldEvent>();
  /** Bumped whenever watching restarts or stops, so replies of an older round are ignored. */
  private epoch = 0;
  private cancelRetry: (() => void) | null = null;
  /** Repair fetches in a row that made no progress. */
  private stalls = 0;
  private waiters: Array<{ resolve(ok: WatchOk): void; reject(err: HeraldError): void }> = [];

  constructor(
    private readonly chat: string,
    private readonly owner: WatchOwner,
  ) {}

  get state(): WatchState {
    return this.current;
  }

  get lastSeq(): number | null {
    return this.last;
  }

  /** True while the application wants the chat watched, whatever the link does. */
  get isWanted(): boolean {
    return this.wanted;
  }

  /** True when a watch reply was taken on the current link: events flow (maybe through a repair). */
  get flowing(): boolean {
    return this.current === 'live' || this.current === 'repairing';
  }

  /** True when pushes for this chat are to be taken (neither unwatched nor waiting for a link). */
  get receiving(): boolean {
    return this.current !== 'unwatched' && this.current !== 'suspended';
  }

  /** A promise of the next watch reply (or of the current one, once `start` sees it is flowing). */
  nextReply(): Promise<WatchOk> {
    return new Promise<WatchOk>((resolve, reject) => this.waiters.push({ resolve, reject }));
  }

  /**
   * Starts watching after `after` (undefined: after the chat's seq when the watch begins). On a chat
   * already wanted, only settles the waiters when a reply was taken on this link.
   */
  start(after: number | undefined): void {
    if (this.wanted) {
      if (this.flowing) this.settleWaiters({ chat: this.chat, seq: this.last ?? 0 });
      return;
    }
    this.wanted = true;
    this.last = after ?? null;
    this.known = 0;
    if (this.owner.connected) void this.subscribe();
    else this.setState('suspended');
  }

  /** A new link is greeted: resume watching. */
  linkUp(): void {
    if (this.wanted && this.current === 'suspended') void this.subscribe();
  }

  /** The link dropped: keep `last`, forget the rest; the next watch's replay refills it. */
  linkDown(): void {
    if (this.current === 'unwatched') return;
    this.epoch++;
    this.cancelTimer();
    this.buffer.clear();
    this.known = 0;
    this.stalls = 0;
    this.owner.suspended();
    this.setState('suspended');
  }

  /** An `event` push for this chat. */
  onEventPush(push: EventPush): void {
    if (!this.receiving) return;
    const ev = toEvent(push);
    if (this.last !== null && ev.seq <= this.last) return; // already delivered
    if (this.current === 'live' && this.last !== null && ev.seq === this.last + 1) {
      this.deliver(ev, ev.seq <= this.watchSeq ? this.watchSeq : ev.seq);
      this.drainContiguous();
      return;
    }
    // Out of order, or we are subscribing or repairing: hold it, and make sure a repair covers the gap.
    this.hold(ev);
    if (this.current === 'live') this.repair();
  }

  /** A `notify` push: events up to `seq` exist. */
  onNotify(push: NotifyPush): void {
    if (!this.receiving) return;
    if (this.last !== null && push.seq <= this.last) return;
    this.known = Math.max(this.known, push.seq);
    if (this.current === 'live') this.repair();
  }

  /** Ends watching locally; rejects pending `watch()` promises with `err` when given. */
  stop(err: HeraldError | null): void {
    this.wanted = false;
    this.epoch++;
    this.cancelTimer();
    this.buffer.clear();
    this.last = null;
    this.known = 0;
    this.stalls = 0;
    this.owner.stopped();
    if (this.current !== 'unwatched') this.setState('unwatched');
    const waiters = this.waiters;
    this.waiters = [];
    const reason = err ?? new HeraldError('closed', `herald: chat ${this.chat} is no longer watched`);
    for (const w of waiters) w.reject(reason);
  }

  // ---- the state machine ----------------------------------------------------------------------

  private setState(to: WatchState): void {
    const from = this.current;
    if (from === to) return;
    if (!WATCH_TRANSITIONS[from].includes(to)) {
      throw new Error(`herald: chat ${this.chat}: no transition ${from} -> ${to}`);
    }
    this.current = to;
    this.owner.changed({ chat: this.chat, from, to });
  }

  private async subscribe(): Promise<void> {
    this.cancelTimer();
    const epoch = ++this.epoch;
    this.setState('subscribing');
    const args: RequestArgs['watch'] = { chat: this.chat };
    if (this.last !== null) args.after = this.last;
    let ok: WatchOk;
    try {
      ok = await this.owner.subscribe(args);
    } catch (err) {
      if (epoch !== this.epoch) return;
      this.failed(err, () => this.subscribe());
      return;
    }
    if (epoch !== this.epoch) return;
    // Without `after` the watch starts at the chat's seq now; pushes held meanwhile at or below it are old.
    if (this.last === null) this.last = ok.seq;
    this.watchSeq = ok.seq;
    this.settleWaiters(ok);
    // A waiter's callback may have unwatched; only go on if this round is still current.
    if (epoch !== this.epoch) return;
    this.setState('live');
    this.owner.live();
    this.catchUp();
  }

  /** Delivers held events in order, then repairs if a gap or a notify is still open. */
  private catchUp(): void {
    this.drainContiguous();
    if (this.current !== 'live') return;
    if (this.buffer.size > 0 || this.known > (this.last ?? 0)) this.repair();
  }

  /** Starts a repair from `live`; pushes that arrive meanwhile are held. */
  private repair(): void {
    if (this.current !== 'live') return;
    this.setState('repairing');
    void this.runRepair(this.epoch);
  }

  /**
   * Fetches pages after the last delivered seq until nothing is held, nothing announced is missing and
   * the last page did not say `more`. Fetching up to the chat's latest seq rather than just to the gap's
   * end costs a few duplicate events, which are dropped, and saves a round trip per page in a busy chat.
   */
  private async runRepair(epoch: number): Promise<void> {
    for (;;) {
      this.drainContiguous();
      if (epoch !== this.epoch) return;
      const last = this.last ?? 0;
      if (this.buffer.size === 0 && this.known <= last) break;
      let page: FetchOk;
      try {
        page = await this.owner.fetchPage(last);
      } catch (err) {
        if (epoch !== this.epoch) return;
        this.failed(err, () => void this.runRepair(epoch));
        return;
      }
      if (epoch !== this.epoch) return;
      for (const ev of page.events) {
        if (ev.seq !== (this.last ?? 0) + 1) continue; // older than what we have, or not the next one
        this.buffer.delete(ev.seq);
        this.deliver(ev, page.seq);
        if (epoch !== this.epoch) return; // a listener unwatched mid-page
      }
      this.known = Math.max(this.known, announcedBy(page, last));
      if ((this.last ?? 0) > last) {
        this.stalls = 0;
        continue;
      }
      // The server has nothing after `last`, though a push or notify said there is more. Maybe it is
      // not readable yet: try again a few times, then give up on this gap rather than spin.
      if (this.stalls < MAX_STALLS) {
        this.stalls++;
        this.cancelRetry = this.owner.schedule(() => {
          this.cancelRetry = null;
          void this.runRepair(epoch);
        }, DEFAULT_RETRY_MS);
        return;
      }
      this.stalls = 0;
      this.owner.error(
        new HeraldError('protocol', `herald: chat ${this.chat}: no events after ${last} though seq ${this.known} was announced`),
      );
      this.buffer.clear();
      this.known = last;
      break;
    }
    if (epoch !== this.epoch) return;
    this.setState('live');
  }

  /** Handles a failed watch or fetch: retry transient errors, give up on the rest. */
  private failed(err: unknown, retry: () => void): void {
    const e = err instanceof HeraldError ? err : new HeraldError('internal', String(err));
    if (e.code === 'disconnected' || e.code === 'closed') return; // linkDown / stop handle these
    if (TRANSIENT.has(e.code)) {
      this.cancelTimer();
      this.cancelRetry = this.owner.schedule(() => {
        this.cancelRetry = null;
        retry();
      }, e.retryAfterMs ?? DEFAULT_RETRY_MS);
      return;
    }
    this.owner.error(e);
    this.stop(e);
  }

  // ---- delivery -------------------------------------------------------------------------------

  private hold(ev: HeraldEvent): void {
    this.known = Math.max(this.known, ev.seq - 1);
    if (this.buffer.size >= this.owner.maxBufferedEvents) {
      // Beyond the bound, remember only how far the chat goes; the repair fetch brings the events back.
      this.known = Math.max(this.known, ev.seq);
      this.buffer.clear();
      return;
    }
    this.buffer.set(ev.seq, ev);
  }

  private drainContiguous(): void {
    if (this.last === null) return;
    const epoch = this.epoch;
    for (let next = this.buffer.get(this.last + 1); next !== undefined; next = this.buffer.get(this.last + 1)) {
      this.buffer.delete(next.seq);
      this.deliver(next, next.seq <= this.watchSeq ? this.watchSeq : next.seq);
      if (epoch !== this.epoch) return;
    }
    this.dropStale();
  }

  private dropStale(): void {
    const last = this.last ?? 0;
    for (const seq of this.buffer.keys()) if (seq <= last) this.buffer.delete(seq);
  }

  private deliver(ev: HeraldEvent, asOf: number): void {
    this.last = ev.seq;
    this.owner.deliver(ev, asOf);
  }

  private settleWaiters(ok: WatchOk): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w.resolve(ok);
  }

  private cancelTimer(): void {
    if (this.cancelRetry !== null) {
      this.cancelRetry();
      this.cancelRetry = null;
    }
  }
}

/**
 * The highest seq a fetch reply says exists: the chat's latest (`seq`), and, when `more` is true, at
 * least one past the page's last event. `more` is what the protocol promises to page by, so it keeps the
 * repair going even when a reply's `seq` does not reach past the events it carries.
 */
function announcedBy(page: FetchOk, after: number): number {
  const end = page.events.reduce((hi, ev) => Math.max(hi, ev.seq), after);
  return Math.max(page.seq, page.more ? end + 1 : end);
}

/** The event inside a push, without the push's routing fields. */
function toEvent(push: EventPush): HeraldEvent {
  const { ev: _ev, chat: _chat, ...event } = push;
  return event;
}
