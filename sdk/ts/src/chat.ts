//! `Chat`: the handle for one chat, and the state machine of watching it.
//!
//! Owns: the chat's requests (join, leave, send, react, read, edit, delete, typing, presence, fetch,
//! paged history; from 1.2 profile, members, threads, pin, pins, reactions, append, upload (the bytes
//! go through files.ts), search), and for a watched chat the last delivered seq, the buffer of
//! out-of-order pushes, gap repair by paged `fetch`, and resuming with `watch after=` on a new link, so
//! that the application sees every event once, in seq order; then feeding what it delivers to the chat's message list (with the seq
//! each stored view was read at), and routing typing, presence and 1.2's `append` pushes, with a presence
//! resync after every watch reply.
//! Does not own: the link, request ids, the outbox or the page size (client.ts, outbox.ts, page-size.ts,
//! reached through `ChatHost`), nor the rules of the message list, typing or presence (messages.ts,
//! typing.ts, presence.ts).
//!
//! Watch states:
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

import { Emitter } from './emitter.js';
import { HeraldError } from './errors.js';
import {
  pageArgs,
  type AppendOptions,
  type EditOptions,
  type HistoryOptions,
  type PageOptions,
  type ProfileFields,
  type SendOptions,
  type ThreadOption,
  type WatchOptions,
} from './chat-options.js';
import { openPath } from './file-path.js';
import { describeUpload, putFile, type UploadOptions, type UploadSource, type Uploaded } from './files.js';
import { MessageList, type MessageListOptions, type StoredView } from './messages.js';
import type { SendExtras } from './outbox.js';
import type { PageSize } from './page-size.js';
import { PresenceTracker, type PresenceState } from './presence.js';
import { searchArgs, type SearchOptions } from './search.js';
import { Typing } from './typing.js';
import type {
  AppendPush,
  ChatEvent,
  ChatProfile,
  EventPush,
  FetchOk,
  HeraldEvent,
  JoinOk,
  MembersOk,
  NotifyPush,
  PinsOk,
  PresenceOk,
  PresencePush,
  ReactionsOk,
  RequestArgs,
  RequestOk,
  SearchOk,
  SeqOk,
  ThreadsOk,
  WatchOk,
} from './types.js';

export type {
  AppendOptions,
  EditOptions,
  HistoryOptions,
  PageOptions,
  ProfileFields,
  SendOptions,
  ThreadOption,
  WatchOptions,
} from './chat-options.js';

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

/** Events of a `Chat`. */
export interface ChatEvents {
  /** One event, delivered exactly once and in seq order while the chat is watched. */
  event: ChatEvent;
  /** The watch state changed. */
  state: WatchStateChange;
  /** Watching failed for good (forbidden, not found), a repair fetch failed, or a presence sync did. */
  error: HeraldError;
  /** The others typing changed (someone started, expired, or sent their message); sorted. */
  typing: TypingChange;
  /** Who is present changed (after `watch({ presence: true })`). */
  presence: PresenceChange;
  /**
   * 1.2: streamed text for the message `target` (an `append` push), while watched. `chat.messages()`
   * folds these in already; this is for applications that keep their own view.
   */
  append: AppendPush;
}

/** The payload of a chat's `typing` event. */
export interface TypingChange {
  chat: string;
  /** Others typing now, sorted; empty when nobody is. */
  users: string[];
}

/** The payload of a chat's `presence` event. */
export interface PresenceChange extends PresenceState {
  chat: string;
}

/** What a chat needs from its client. @internal */
export interface ChatHost {
  /** True while requests go out on a live, greeted link. */
  readonly connected: boolean;
  /** A request that waits for the link (up to the request timeout) and rejects with `HeraldError`. */
  request<O extends keyof RequestArgs>(op: O, args: RequestArgs[O]): Promise<RequestOk[O]>;
  /** Queues a send in the outbox. */
  send(chat: string, body: unknown, clientId: string | undefined, extra: SendExtras): Promise<SeqOk>;
  /** Hands a delivered event to the client's own `event` listeners. */
  delivered(event: ChatEvent): void;
  /** Runs `fn` after `ms`; returns a function that cancels it. */
  schedule(fn: () => void, ms: number): () => void;
  /** The `limit` of the fetches the SDK makes itself; smaller after slow-consumer closes. */
  readonly pageSize: PageSize;
  /** Buffered pushes allowed per chat. */
  readonly maxBufferedEvents: number;
  /** The user of the current connection, or null; one's own typing is never shown. */
  readonly user: string | null;
  /** The `fetch` uploads send their bytes with; undefined: the global one. */
  readonly fetch: typeof fetch | undefined;
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

/**
 * One chat. Get it with `client.chat(id)`; the client keeps one handle per id, so listeners added on it
 * stay valid across reconnects.
 */
export class Chat extends Emitter<ChatEvents> {
  /** The chat id. */
  readonly id: string;
  private readonly host: ChatHost;
  private watchState: WatchState = 'unwatched';
  /** The application wants this chat watched (survives link loss; cleared by unwatch/leave/forbidden). */
  private wanted = false;
  /** The seq of the last event handed to the application; null before the first watch reply. */
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
  /** Created by the first `messages()` call; fed every delivered event from then on. */
  private list: MessageList | null = null;
  /** The profile of the latest `join` reply and its seq, for a list made after it. */
  private joined: { profile: ChatProfile; seq: number } | null = null;
  private readonly typists: Typing;
  private readonly presenceTracker: PresenceTracker;

  /** @internal Created by `HeraldClient.chat`. */
  constructor(id: string, host: ChatHost) {
    super();
    this.id = id;
    this.host = host;
    this.typists = new Typing({
      get connected() {
        return host.connected;
      },
      sendTyping: () => this.typing(),
      schedule: host.schedule,
      changed: (users) => this.emit('typing', { chat: id, users }),
    });
    this.presenceTracker = new PresenceTracker({
      request: () => this.presence(),
      schedule: host.schedule,
      changed: (state) => this.emit('presence', { chat: id, ...state }),
      failed: (err) => this.emit('error', err),
    });
  }

  /** The watch state. */
  get state(): WatchState {
    return this.watchState;
  }

  /** The seq of the last event delivered to the application, or null when none is known yet. */
  get lastSeq(): number | null {
    return this.last;
  }

  /** Others typing in this chat now (from typing pushes, each kept 5 s), sorted. */
  get typingUsers(): string[] {
    return this.typists.users;
  }

  /** Who is present, kept current after `watch({ presence: true })`; null before the first reply. */
  get present(): PresenceState | null {
    return this.presenceTracker.state;
  }

  /**
   * The chat's message list: its `message` and `system` events with edits and deletes applied, fed with
   * every event this handle delivers from now on (pushes and gap repair, in seq order). Load older ones
   * with `list.load(...)` from `history()`. The same list on every call; emptied when the watch ends.
   */
  messages(opts: MessageListOptions = {}): MessageList {
    if (this.list === null) {
      this.list = new MessageList({ refetch: (seq) => this.reread(seq), ...opts });
      if (this.joined !== null) this.list.setProfile(this.joined.profile, this.joined.seq);
    }
    return this.list;
  }

  /** Joins the chat (creating an open chat that does not exist yet); from 1.2 the reply has its profile. */
  async join(): Promise<JoinOk> {
    const ok = await this.host.request('join', { chat: this.id });
    if (ok.profile !== undefined && ok.profile !== null) {
      this.joined = { profile: ok.profile, seq: ok.seq };
      this.list?.setProfile(ok.profile, ok.seq);
    }
    return ok;
  }

  /** Leaves the chat; the server ends this user's watches of it, and so does this handle. */
  async leave(): Promise<void> {
    await this.host.request('leave', { chat: this.id });
    this.stop(null);
  }

  /**
   * Starts delivering events: those after `opts.after` when given, else those after the chat's seq when
   * the watch begins. Resolves on the first watch reply; the watch then survives reconnects (resuming
   * with `after` = the last delivered seq) until `unwatch` or `leave`. Calling it on a watched chat only
   * waits for the current subscription.
   */
  watch(opts: WatchOptions = {}): Promise<WatchOk> {
    if (opts.after !== undefined && (!Number.isInteger(opts.after) || opts.after < 0)) {
      return Promise.reject(new TypeError('herald: `after` must be a non-negative integer'));
    }
    const p = new Promise<WatchOk>((resolve, reject) => this.waiters.push({ resolve, reject }));
    if (opts.presence === true && !this.presenceTracker.enabled) {
      this.presenceTracker.enable();
      // Already watching: the next watch reply would be the next reconnect's, so sync now.
      if (this.wanted && (this.watchState === 'live' || this.watchState === 'repairing')) this.presenceTracker.sync();
    }
    if (this.wanted) {
      if (this.watchState === 'live' || this.watchState === 'repairing') this.settleWaiters({ chat: this.id, seq: this.last ?? 0 });
      return p;
    }
    this.wanted = true;
    this.last = opts.after ?? null;
    this.known = 0;
    if (this.host.connected) void this.subscribe();
    else this.setState('suspended');
    return p;
  }

  /** Stops delivering events; a later `watch()` starts from the chat's seq at that time. */
  async unwatch(): Promise<void> {
    const wasWatching = this.wanted;
    this.stop(null);
    if (wasWatching && this.host.connected) await this.host.request('unwatch', { chat: this.id });
  }

  /**
   * Sends a message. Resolves with its seq once it is durable. The send survives link drops and is
   * retried with the same `client_id`, so it is stored once; made offline, it waits for the next link.
   * Rejects with `queue_full` when too many sends wait unsent, and with `timeout` when it could not be
   * written within `sendTimeoutMs` (60 s) of the call.
   */
  send(body: unknown, opts: SendOptions = {}): Promise<SeqOk> {
    this.typists.stopTrailing();
    const extra: SendExtras = {};
    if (opts.thread !== undefined) extra.thread = opts.thread;
    if (opts.quote !== undefined) extra.quote = opts.quote;
    if (opts.mentions !== undefined) extra.mentions = opts.mentions;
    if (opts.stream === true) extra.stream = true;
    if (opts.files !== undefined) extra.files = opts.files;
    return this.host.send(this.id, body, opts.clientId, extra);
  }

  /**
   * 1.2: uploads a file for a message of this chat: asks herald where (`upload`), sends exactly its
   * bytes there with `fetch`, and resolves with the file id to pass in `send`'s or `edit`'s `files`,
   * with the `upload` answer. A browser `File` names itself; bytes need `name`, a stream `name` and
   * `size`. Rejects with the `upload` request's `HeraldError` (`forbidden` for a muted member,
   * `too_large` past the server's file limit, ...), or with an `UploadError` (code `upload_failed`, its
   * `status` the storage's answer, 0 for none) when the bytes were not taken. Nothing is retried: call
   * again for a new file.
   *
   *     const { id } = await chat.upload(input.files[0]);
   *     await chat.send({ text: 'the plan' }, { files: [id] });
   */
  async upload(source: UploadSource, opts: UploadOptions = {}): Promise<Uploaded> {
    const file = describeUpload(source, opts);
    const grant = await this.host.request('upload', { chat: this.id, ...file });
    await putFile(grant, source, {
      size: file.size,
      type: file.type,
      ...(opts.onProgress !== undefined ? { onProgress: opts.onProgress } : {}),
      ...(opts.signal !== undefined ? { signal: opts.signal } : {}),
      ...(this.host.fetch !== undefined ? { fetch: this.host.fetch } : {}),
    });
    const id = typeof grant.file === 'string' ? grant.file : String((grant.file as { id?: unknown } | null)?.id ?? '');
    return { id, ...file, upload: grant };
  }

  /**
   * 1.2, Node: uploads the file at `path`, streamed from disk (named by its base name unless `name` is
   * given; `type` defaults to `application/octet-stream`). As `upload` otherwise.
   */
  async uploadPath(path: string, opts: Omit<UploadOptions, 'size'> = {}): Promise<Uploaded> {
    const file = await openPath(path);
    return this.upload(file.stream, { ...opts, name: opts.name ?? file.name, size: file.size });
  }

  /** 1.2: one page of `client.search` within this chat (newest first). */
  search(query: string, opts: Omit<SearchOptions, 'chat'> = {}): Promise<SearchOk> {
    return this.host.request('search', searchArgs(query, { ...opts, chat: this.id }));
  }

  /**
   * 1.2: adds `text` to the end of this user's open stream `target` (a message sent with
   * `stream: true`); `{ done: true }` ends it (the server then stores the final body as an `edit`).
   * Resolves once the text is durable. Not retried across a link drop: an append is not idempotent, so a
   * `disconnected` rejection leaves its outcome unknown (fetch the message to see its text). Await each
   * append before the next: requests on one link are answered in order, but a dropped link fails all
   * that are out.
   */
  async append(target: number, text: string, opts: AppendOptions = {}): Promise<void> {
    const args: RequestArgs['append'] = { chat: this.id, target, text };
    if (opts.done === true) args.done = true;
    await this.host.request('append', args);
  }

  /** Adds (`on` true, the default) or takes back a reaction to the event `target`. */
  react(target: number, emoji: string, on = true): Promise<SeqOk> {
    return this.host.request('react', { chat: this.id, target, emoji, on });
  }

  /**
   * Moves this member's read position forward to `seq`; resolves with the position now stored. With
   * `thread` (1.2), this member's position in the thread under that root.
   */
  read(seq: number, opts: ThreadOption = {}): Promise<SeqOk> {
    const args: RequestArgs['read'] = { chat: this.id, seq };
    if (opts.thread !== undefined) args.thread = opts.thread;
    return this.host.request('read', args);
  }

  /**
   * 1.2: sets the chat's profile fields given (`null` clears one; one left out is kept). Resolves with
   * the `profile` event's seq, or, when nothing changed, the latest one's (0 if none). Watchers' message
   * lists show the new profile (`list.profile`).
   */
  profile(fields: ProfileFields): Promise<SeqOk> {
    const args: RequestArgs['profile'] = { chat: this.id };
    if (fields.name !== undefined) args.name = fields.name;
    if (fields.image !== undefined) args.image = fields.image;
    if (fields.data !== undefined) args.data = fields.data;
    return this.host.request('profile', args);
  }

  /**
   * 1.2: one page of the chat's members, sorted by user id, each with their read position; `count` is
   * the chat's member count. `limit` defaults to 100, at most 1,000; pass the reply's `cursor` for the
   * next page while `more`.
   */
  members(opts: PageOptions = {}): Promise<MembersOk> {
    return this.host.request('members', { chat: this.id, ...pageArgs(opts) });
  }

  /** 1.2: the threads of this chat that this user follows, latest reply first (see `client.threads`). */
  threads(opts: PageOptions = {}): Promise<ThreadsOk> {
    return this.host.request('threads', { chat: this.id, ...pageArgs(opts) });
  }

  /**
   * 1.2: pins (`on` true, the default) or unpins the message `target`; resolves with the `pin` event's
   * seq, or, when that changes nothing, the latest pin event's of that target (0 if none). At most 50
   * pinned messages per chat (`bad_request` past it).
   */
  pin(target: number, on = true): Promise<SeqOk> {
    return this.host.request('pin', { chat: this.id, target, on });
  }

  /** 1.2: the pinned messages, latest pin first, each as `fetch` shows it with who pinned it. */
  pins(): Promise<PinsOk> {
    return this.host.request('pins', { chat: this.id });
  }

  /** 1.2: who reacted to `target` with what: up to 100 users per emoji, sorted. */
  reactions(target: number): Promise<ReactionsOk> {
    return this.host.request('reactions', { chat: this.id, target });
  }

  /**
   * Replaces the body of this user's message `target` (with `mentions` or `files` (1.2), those too; left
   * out, they are kept); resolves with the `edit` event's seq. `not_found`
   * when `target` is not a message of this chat or is deleted, `forbidden` for another's message or
   * while muted; the body has `send`'s size limit. Not retried across a link drop: a `disconnected`
   * rejection means the outcome is unknown (the watch shows whether it was stored).
   */
  edit(target: number, body: unknown, opts: EditOptions = {}): Promise<SeqOk> {
    const args: RequestArgs['edit'] = { chat: this.id, target, body };
    if (opts.mentions !== undefined) args.mentions = opts.mentions;
    if (opts.files !== undefined) args.files = opts.files;
    return this.host.request('edit', args);
  }

  /**
   * Deletes this user's message `target`: the server erases its body for good. Resolves with the
   * `delete` event's seq; errors as for `edit`.
   */
  delete(target: number): Promise<SeqOk> {
    return this.host.request('delete', { chat: this.id, target });
  }

  /** The bare `typing` request; `notifyTyping()` is what a text box should call. */
  async typing(): Promise<void> {
    await this.host.request('typing', { chat: this.id });
  }

  /**
   * Call on every keystroke: sends `typing` at most once every 2 s (keystrokes inside the 2 s are
   * announced by one request when they are over, unless a `send` comes first), and only while
   * connected; errors are ignored (typing is a hint). Returns whether a request went out now.
   */
  notifyTyping(): boolean {
    return this.typists.typed();
  }

  /** The bare `presence` request: how many are present, and at most 100 of them, sorted. */
  presence(): Promise<PresenceOk> {
    return this.host.request('presence', { chat: this.id });
  }

  /**
   * Fetches one page of events after `after`, without touching delivery: at most `limit` (at most 500,
   * default 100), and possibly fewer, since the server also bounds a reply in bytes. When the reply says
   * `more`, the next page starts after its last event's seq; `history()` does that paging. With
   * `thread` (1.2), only the replies of the thread under that root.
   */
  fetch(after: number, limit?: number, opts: ThreadOption = {}): Promise<FetchOk> {
    const args: RequestArgs['fetch'] = { chat: this.id, after };
    if (limit !== undefined) args.limit = limit;
    if (opts.thread !== undefined) args.thread = opts.thread;
    return this.host.request('fetch', args);
  }

  /**
   * The events after `after`, in seq order, fetched page by page until the server says there is no more
   * (or past `opts.until`); outside delivery, like `fetch`. Pages use the client's page size, which shrinks
   * after slow-consumer closes. A failed fetch (a dropped link, `forbidden`, ...) ends the iteration with
   * its `HeraldError`; start again after the last event received to go on.
   *
   *     for await (const ev of chat.history(0, { until: watchStartSeq })) render(ev);
   */
  async *history(after = 0, opts: HistoryOptions = {}): AsyncGenerator<HeraldEvent, void, undefined> {
    if (!Number.isInteger(after) || after < 0) throw new TypeError('herald: `after` must be a non-negative integer');
    if (opts.until !== undefined && (!Number.isInteger(opts.until) || opts.until < 0)) {
      throw new TypeError('herald: `until` must be a non-negative integer');
    }
    const until = opts.until ?? Number.POSITIVE_INFINITY;
    let last = after;
    while (last < until) {
      const page = await this.fetchPage(last, opts.thread);
      const before = last;
      for (const ev of page.events) {
        if (ev.seq <= last) continue; // a page overlapping what was already yielded
        if (ev.seq > until) return;
        last = ev.seq;
        yield ev;
      }
      if (!page.more) return;
      // `more` with nothing new would ask for the same page again at once, and again: stop instead.
      if (last === before) {
        throw new HeraldError('protocol', `herald: chat ${this.id}: more announced after ${last} but no events came`, { op: 'fetch' });
      }
    }
  }

  // ---- called by the client -------------------------------------------------------------------

  /** @internal A new link is greeted: resume watching. */
  linkUp(): void {
    if (this.wanted && this.watchState === 'suspended') void this.subscribe();
  }

  /** @internal The link dropped: keep `last`, forget the rest; the next watch's replay refills it. */
  linkDown(): void {
    if (this.watchState === 'unwatched') return;
    this.epoch++;
    this.cancelTimer();
    this.buffer.clear();
    this.known = 0;
    this.stalls = 0;
    this.presenceTracker.suspend();
    // Nobody's typing pushes reach us while offline; presence is kept on show until the resync.
    this.typists.clear();
    this.setState('suspended');
  }

  /** @internal The client is closed for good. */
  shutdown(err: HeraldError): void {
    this.stop(err);
  }

  /** @internal An `event` push for this chat. */
  onEventPush(push: EventPush): void {
    if (this.watchState === 'unwatched' || this.watchState === 'suspended') return;
    const ev = toEvent(push);
    if (this.last !== null && ev.seq <= this.last) return; // already delivered
    if (this.watchState === 'live' && this.last !== null && ev.seq === this.last + 1) {
      this.deliver(ev, ev.seq <= this.watchSeq ? this.watchSeq : ev.seq);
      this.drainContiguous();
      return;
    }
    // Out of order, or we are subscribing or repairing: hold it, and make sure a repair covers the gap.
    this.hold(ev);
    if (this.watchState === 'live') this.repair();
  }

  /** @internal A `typing` push: `user` is typing here. */
  onTypingPush(user: string): void {
    if (this.watchState === 'unwatched' || this.watchState === 'suspended') return;
    if (user === this.host.user) return; // this user on another device
    this.typists.pushed(user);
  }

  /** @internal A `presence` push. */
  onPresencePush(push: PresencePush): void {
    if (this.watchState === 'unwatched' || this.watchState === 'suspended') return;
    this.presenceTracker.pushed(push);
  }

  /** @internal An `append` push: streamed text for a message of this chat. */
  onAppendPush(push: AppendPush): void {
    if (this.watchState === 'unwatched' || this.watchState === 'suspended') return;
    this.list?.append(push);
    this.emit('append', push);
  }

  /** @internal A `notify` push: events up to `seq` exist. */
  onNotify(push: NotifyPush): void {
    if (this.watchState === 'unwatched' || this.watchState === 'suspended') return;
    if (this.last !== null && push.seq <= this.last) return;
    this.known = Math.max(this.known, push.seq);
    if (this.watchState === 'live') this.repair();
  }

  // ---- the state machine ----------------------------------------------------------------------

  private setState(to: WatchState): void {
    const from = this.watchState;
    if (from === to) return;
    if (!WATCH_TRANSITIONS[from].includes(to)) {
      throw new Error(`herald: chat ${this.id}: no transition ${from} -> ${to}`);
    }
    this.watchState = to;
    this.emit('state', { chat: this.id, from, to });
  }

  private async subscribe(): Promise<void> {
    this.cancelTimer();
    const epoch = ++this.epoch;
    this.setState('subscribing');
    const args: RequestArgs['watch'] = { chat: this.id };
    if (this.last !== null) args.after = this.last;
    let ok: WatchOk;
    try {
      ok = await this.host.request('watch', args);
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
    // After the watch, so that this connection is present, and its pushes flow, before asking.
    this.presenceTracker.sync();
    this.catchUp();
  }

  /** Delivers held events in order, then repairs if a gap or a notify is still open. */
  private catchUp(): void {
    this.drainContiguous();
    if (this.watchState !== 'live') return;
    if (this.buffer.size > 0 || this.known > (this.last ?? 0)) this.repair();
  }

  /** Starts a repair from `live`; pushes that arrive meanwhile are held. */
  private repair(): void {
    if (this.watchState !== 'live') return;
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
        page = await this.fetchPage(last);
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
        this.cancelRetry = this.host.schedule(() => {
          this.cancelRetry = null;
          void this.runRepair(epoch);
        }, DEFAULT_RETRY_MS);
        return;
      }
      this.stalls = 0;
      this.emit(
        'error',
        new HeraldError('protocol', `herald: chat ${this.id}: no events after ${last} though seq ${this.known} was announced`),
      );
      this.buffer.clear();
      this.known = last;
      break;
    }
    if (epoch !== this.epoch) return;
    this.setState('live');
  }

  /** One page after `after` at the client's page size; a reply lets the page size grow back a step. */
  private async fetchPage(after: number, thread?: number): Promise<FetchOk> {
    const args: RequestArgs['fetch'] = { chat: this.id, after, limit: this.host.pageSize.current };
    if (thread !== undefined) args.thread = thread;
    const page = await this.host.request('fetch', args);
    this.host.pageSize.grow();
    return page;
  }

  /** The stored view of the message `seq`, for the list's stream repair; null when it cannot be read. */
  private async reread(seq: number): Promise<StoredView | null> {
    const page = await this.host.request('fetch', { chat: this.id, after: seq - 1, limit: 1 });
    const event = page.events.find((ev) => ev.seq === seq);
    return event === undefined ? null : { event, asOf: page.seq };
  }

  /** Handles a failed watch or fetch: retry transient errors, give up on the rest. */
  private failed(err: unknown, retry: () => void): void {
    const e = err instanceof HeraldError ? err : new HeraldError('internal', String(err));
    if (e.code === 'disconnected' || e.code === 'closed') return; // linkDown / shutdown handle these
    if (TRANSIENT.has(e.code)) {
      this.cancelTimer();
      this.cancelRetry = this.host.schedule(() => {
        this.cancelRetry = null;
        retry();
      }, e.retryAfterMs ?? DEFAULT_RETRY_MS);
      return;
    }
    this.emit('error', e);
    this.stop(e);
  }

  /** Ends watching locally; rejects pending `watch()` promises with `err` when given. */
  private stop(err: HeraldError | null): void {
    this.wanted = false;
    this.epoch++;
    this.cancelTimer();
    this.buffer.clear();
    this.last = null;
    this.known = 0;
    this.stalls = 0;
    this.presenceTracker.stop();
    this.typists.stopTrailing();
    this.typists.clear();
    this.list?.clear();
    if (this.watchState !== 'unwatched') this.setState('unwatched');
    const waiters = this.waiters;
    this.waiters = [];
    const reason = err ?? new HeraldError('closed', `herald: chat ${this.id} is no longer watched`);
    for (const w of waiters) w.reject(reason);
  }

  // ---- delivery -------------------------------------------------------------------------------

  private hold(ev: HeraldEvent): void {
    this.known = Math.max(this.known, ev.seq - 1);
    if (this.buffer.size >= this.host.maxBufferedEvents) {
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

  /** `asOf`: the chat's seq when this event's view was read (a live push: its own seq). */
  private deliver(ev: HeraldEvent, asOf: number): void {
    this.last = ev.seq;
    const out: ChatEvent = { ...ev, chat: this.id };
    // Before the listeners, so that a listener reading the list sees this event in it.
    this.list?.apply(ev, asOf);
    if (ev.type === 'message' && ev.user !== undefined) this.typists.remove(ev.user);
    this.emit('event', out);
    this.host.delivered(out);
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
