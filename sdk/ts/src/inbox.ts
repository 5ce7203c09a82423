//! `Inbox`: this user's chats with unread counts, latest activity first, kept live across reconnects; from
//! protocol 1.2 with each chat's profile and its unread thread replies and mentions.
//!
//! Owns: the `inbox` request with `live: true`, the entries it returned and the later pages loaded,
//! folding `inbox` pushes into them, and resyncing from the first page on every new link (pushes stop
//! with the connection that asked for them). Does not own: the link or requests (connection.ts, through
//! `InboxHost`) or the chats' events (chat.ts).
//!
//! Why hold pushes while a sync is out: with `live: true` the server pushes right after its reply, and a
//! WebSocket library may hand over both frames before the code awaiting the reply runs. Pushes that
//! arrive first are kept and applied on top of the reply, so none is lost to the reply's overwrite.

import { Emitter } from './emitter.js';
import { HeraldError } from './errors.js';
import type { ChatProfile, HeraldEvent, InboxOk, InboxPush, RequestArgs, RequestOk } from './types.js';

/** One chat of the inbox. */
export interface InboxItem {
  /** The chat id. */
  chat: string;
  /** The chat's latest seq. */
  seq: number;
  /** The time of the chat's latest event (ms since the Unix epoch): the list's order. */
  ts: number;
  /**
   * Messages from others after this user's read position, deleted ones not counted (from 1.2: thread
   * replies not counted; see `threads`).
   */
  unread: number;
  /** 1.2: unread replies summed over the threads this user follows in the chat; 0 from a 1.1 server. */
  threads: number;
  /** 1.2: unread messages (thread replies included) that mention this user; 0 from a 1.1 server. */
  mentions: number;
  /**
   * 1.2: the chat's profile, as of the last page that listed the chat; undefined for a chat only a push
   * has told of, or from a 1.1 server.
   */
  profile?: ChatProfile;
  /**
   * This user's read position, as of the last inbox page that listed the chat; undefined for a chat
   * that only a push has told of (pushes carry no read position).
   */
  read?: number;
  /**
   * The latest message as of the last page that listed the chat (null: none yet); undefined for a chat
   * only a push has told of. Pushes do not carry it: watch the chat for its messages.
   */
  last?: HeraldEvent | null;
}

/** Events of an `Inbox`. */
export interface InboxEvents {
  /** The entries changed; carries them all, latest activity first. */
  change: InboxItem[];
  /** A sync failed for a reason retrying will not fix (`forbidden`, `bad_request`, ...). */
  error: HeraldError;
}

/** Options of `Inbox.start`. */
export interface InboxOptions {
  /** Chats per page (the protocol's default 50, at most 200). */
  limit?: number;
}

/** What an inbox needs from its client. @internal */
export interface InboxHost {
  readonly connected: boolean;
  request<O extends keyof RequestArgs>(op: O, args: RequestArgs[O]): Promise<RequestOk[O]>;
  schedule(fn: () => void, ms: number): () => void;
}

/** The protocol's largest `inbox` limit. */
const MAX_INBOX_LIMIT = 200;

/** Codes after which a sync is retried. */
const TRANSIENT = new Set(['throttled', 'unavailable', 'timeout', 'internal']);

/** Wait before retrying a sync when the server gave no `retry_after_ms`. */
const DEFAULT_RETRY_MS = 1000;

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

/** Latest activity first; ties by chat id, so the order never depends on arrival. */
function byActivity(a: InboxItem, b: InboxItem): number {
  if (a.ts !== b.ts) return b.ts - a.ts;
  return a.chat < b.chat ? -1 : a.chat > b.chat ? 1 : 0;
}

/**
 * The inbox of the client's user. Get it with `client.inbox`, `start()` it once; it resyncs by itself
 * after every reconnect.
 *
 * ```ts
 * client.inbox.on('change', (items) => drawChatList(items));
 * await client.inbox.start();
 * ```
 */
export class Inbox extends Emitter<InboxEvents> {
  private readonly items = new Map<string, InboxItem>();
  private wanted = false;
  private limit: number | undefined;
  /** True while the first page's request is out on the current link. */
  private syncing = false;
  private held: InboxPush[] = [];
  private cursor: string | undefined;
  private hasMore = false;
  private epoch = 0;
  private cancelRetry: (() => void) | null = null;
  private waiters: Array<{ resolve(items: InboxItem[]): void; reject(err: HeraldError): void }> = [];

  /** @internal Created by `HeraldClient`. */
  constructor(private readonly host: InboxHost) {
    super();
  }

  /** The chats, latest activity first. */
  get entries(): InboxItem[] {
    return [...this.items.values()].sort(byActivity);
  }

  /** The entry of `chat`, if listed. */
  get(chat: string): InboxItem | undefined {
    return this.items.get(chat);
  }

  /** Unread messages over every listed chat. */
  get unread(): number {
    let n = 0;
    for (const it of this.items.values()) n += it.unread;
    return n;
  }

  /** 1.2: unread thread replies over every listed chat. */
  get threads(): number {
    let n = 0;
    for (const it of this.items.values()) n += it.threads;
    return n;
  }

  /** 1.2: unread mentions of this user over every listed chat. */
  get mentions(): number {
    let n = 0;
    for (const it of this.items.values()) n += it.mentions;
    return n;
  }

  /** True when the server has chats past the pages loaded (`loadMore` gets them). */
  get more(): boolean {
    return this.hasMore;
  }

  /** True once started and until `stop`. */
  get started(): boolean {
    return this.wanted;
  }

  /**
   * Loads the first page with live updates and keeps the entries current from then on, through
   * reconnects. Resolves with the entries once the first page is in; calling it again while started
   * only waits for the current sync.
   */
  start(opts: InboxOptions = {}): Promise<InboxItem[]> {
    if (opts.limit !== undefined && (!Number.isInteger(opts.limit) || opts.limit < 1 || opts.limit > MAX_INBOX_LIMIT)) {
      return Promise.reject(new TypeError(`herald: inbox \`limit\` must be an integer from 1 to ${MAX_INBOX_LIMIT}`));
    }
    const p = new Promise<InboxItem[]>((resolve, reject) => this.waiters.push({ resolve, reject }));
    if (this.wanted) {
      if (!this.syncing && this.host.connected && this.cancelRetry === null) this.settle();
      return p;
    }
    this.wanted = true;
    this.limit = opts.limit;
    if (this.host.connected) void this.sync();
    return p;
  }

  /**
   * Loads the next page (when `more`), merging it into the entries. Resolves with whether still more
   * remain. A page's entry never replaces a newer one (a higher seq) that a push already brought.
   */
  async loadMore(): Promise<boolean> {
    if (!this.hasMore || this.cursor === undefined) return false;
    const epoch = this.epoch;
    const args: RequestArgs['inbox'] = { cursor: this.cursor };
    if (this.limit !== undefined) args.limit = this.limit;
    const page = await this.host.request('inbox', args);
    if (epoch !== this.epoch) return this.hasMore; // a resync replaced the list meanwhile
    this.merge(page.chats);
    this.hasMore = page.more === true;
    this.cursor = typeof page.cursor === 'string' ? page.cursor : undefined;
    this.emit('change', this.entries);
    return this.hasMore;
  }

  /**
   * Stops following: entries are dropped and later pushes ignored. The server keeps pushing on this link
   * until it closes (the protocol has no way to take `live` back); they are only ignored.
   */
  stop(): void {
    if (!this.wanted) return;
    this.wanted = false;
    this.reset();
    this.rejectWaiters(new HeraldError('closed', 'herald: the inbox was stopped', { op: 'inbox' }));
    this.emit('change', []);
  }

  // ---- called by the client -------------------------------------------------------------------

  /** @internal A new link is greeted: pushes come only after a new live request, so sync again. */
  linkUp(): void {
    if (this.wanted) void this.sync();
  }

  /** @internal The link dropped: the entries stay on show until the next link's first page. */
  linkDown(): void {
    this.epoch++;
    this.syncing = false;
    this.held = [];
    this.cancelTimer();
  }

  /** @internal The client is closed for good. */
  shutdown(err: HeraldError): void {
    this.wanted = false;
    this.reset();
    this.rejectWaiters(err);
  }

  /** @internal An `inbox` push. */
  onPush(push: InboxPush): void {
    if (!this.wanted) return;
    if (typeof push.chat !== 'string') return;
    if (this.syncing) {
      this.held.push(push);
      return;
    }
    if (this.applyPush(push)) this.emit('change', this.entries);
  }

  // ---- internals --------------------------------------------------------------------------------

  private async sync(): Promise<void> {
    this.cancelTimer();
    const epoch = ++this.epoch;
    this.syncing = true;
    this.held = [];
    const args: RequestArgs['inbox'] = { live: true };
    if (this.limit !== undefined) args.limit = this.limit;
    let page: InboxOk;
    try {
      page = await this.host.request('inbox', args);
    } catch (err) {
      if (epoch !== this.epoch) return;
      this.syncing = false;
      const e = err instanceof HeraldError ? err : new HeraldError('internal', String(err), { op: 'inbox' });
      if (e.code === 'disconnected' || e.code === 'closed') return; // linkUp or shutdown follows
      if (TRANSIENT.has(e.code)) {
        this.cancelRetry = this.host.schedule(() => {
          this.cancelRetry = null;
          if (this.wanted && this.host.connected) void this.sync();
        }, e.retryAfterMs ?? DEFAULT_RETRY_MS);
        return;
      }
      this.wanted = false;
      this.reset();
      this.emit('error', e);
      this.rejectWaiters(e);
      return;
    }
    if (epoch !== this.epoch) return;
    this.syncing = false;
    // The first page replaces everything: entries of later pages may have changed unseen meanwhile.
    this.items.clear();
    this.merge(Array.isArray(page.chats) ? page.chats : []);
    this.hasMore = page.more === true;
    this.cursor = typeof page.cursor === 'string' ? page.cursor : undefined;
    const held = this.held;
    this.held = [];
    for (const push of held) this.applyPush(push);
    this.emit('change', this.entries);
    this.settle();
  }

  /** Adds or refreshes entries from a page; an entry already at a higher seq is kept. */
  private merge(chats: unknown[]): void {
    for (const c of chats) {
      const e = c as Partial<InboxItem> | null;
      if (e === null || typeof e !== 'object' || typeof e.chat !== 'string' || !isCount(e.seq)) continue;
      const held = this.items.get(e.chat);
      if (held !== undefined && held.seq > e.seq) continue;
      this.items.set(e.chat, {
        chat: e.chat,
        seq: e.seq,
        ts: typeof e.ts === 'number' ? e.ts : 0,
        unread: isCount(e.unread) ? e.unread : 0,
        threads: isCount(e.threads) ? e.threads : 0,
        mentions: isCount(e.mentions) ? e.mentions : 0,
        read: isCount(e.read) ? e.read : 0,
        last: e.last ?? null,
        ...(e.profile !== null && typeof e.profile === 'object' ? { profile: e.profile } : {}),
      });
    }
  }

  /** Folds a push in; returns whether anything changed. */
  private applyPush(push: InboxPush): boolean {
    if (push.left === true) return this.items.delete(push.chat);
    if (!isCount(push.seq) || !isCount(push.unread)) return false;
    const held = this.items.get(push.chat);
    // A 1.1 server's push has no thread or mention counts: the entry keeps what it had.
    const threads = isCount(push.threads) ? push.threads : (held?.threads ?? 0);
    const mentions = isCount(push.mentions) ? push.mentions : (held?.mentions ?? 0);
    if (held !== undefined) {
      if (push.seq < held.seq) return false; // older than what the entry shows
      if (
        push.seq === held.seq &&
        push.unread === held.unread &&
        push.ts === held.ts &&
        threads === held.threads &&
        mentions === held.mentions
      ) {
        return false;
      }
      this.items.set(push.chat, {
        ...held,
        seq: push.seq,
        ts: typeof push.ts === 'number' ? push.ts : held.ts,
        unread: push.unread,
        threads,
        mentions,
      });
      return true;
    }
    const ts = typeof push.ts === 'number' ? push.ts : 0;
    this.items.set(push.chat, { chat: push.chat, seq: push.seq, ts, unread: push.unread, threads, mentions });
    return true;
  }

  private settle(): void {
    const waiters = this.waiters;
    this.waiters = [];
    const entries = this.entries;
    for (const w of waiters) w.resolve(entries);
  }

  private rejectWaiters(err: HeraldError): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w.reject(err);
  }

  private reset(): void {
    this.epoch++;
    this.cancelTimer();
    this.items.clear();
    this.held = [];
    this.syncing = false;
    this.cursor = undefined;
    this.hasMore = false;
  }

  private cancelTimer(): void {
    this.cancelRetry?.();
    this.cancelRetry = null;
  }
}
