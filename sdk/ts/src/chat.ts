//! `Chat`: the handle for one chat, and the facade of its requests.
//!
//! Owns: the chat's requests (join, leave, send, react, read, edit, delete, typing, presence, fetch,
//! paged history; from 1.2 profile, members, threads, pin, pins, reactions, append, upload (the bytes
//! go through files.ts), search), emitting the handle's events (chat-types.ts), and wiring the parts
//! of a watched chat together: each event the watch delivers goes to the chat's message list (with
//! the seq each stored view was read at), its typists and its listeners; typing, presence and 1.2's
//! `append` pushes are taken while the watch takes pushes, with a presence resync after every watch
//! reply.
//! Does not own: the watch state machine, ordering and gap repair (watch.ts), paging history
//! (history.ts), the link, request ids, the outbox or the page size (connection.ts, requests.ts,
//! outbox.ts, page-size.ts, reached through `ChatHost`), nor the rules of the message list, typing or
//! presence (messages.ts, typing.ts, presence.ts).

import type { ChatEvents, ChatHost } from './chat-types.js';
import { Emitter } from './emitter.js';
import type { HeraldError } from './errors.js';
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
import { historyPages } from './history.js';
import { MessageList, type MessageListOptions, type StoredView } from './messages.js';
import type { SendExtras } from './outbox.js';
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
  SearchOk,
  SeqOk,
  ThreadsOk,
  WatchOk,
} from './types.js';
import { Watch, type WatchState } from './watch.js';

// The types of a chat handle, importable from beside it.
export type { ChatEvents, PresenceChange, TypingChange } from './chat-types.js';
export type { WatchState, WatchStateChange } from './watch.js';

/**
 * One chat. Get it with `client.chat(id)`; the client keeps one handle per id, so listeners added on it
 * stay valid across reconnects.
 */
export class Chat extends Emitter<ChatEvents> {
  /** The chat id. */
  readonly id: string;
  private readonly host: ChatHost;
  /** Watching: delivery once and in order, gap repair, resuming on a new link. */
  private readonly watcher: Watch;
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
    this.watcher = new Watch(id, {
      get connected() {
        return host.connected;
      },
      subscribe: (args) => host.request('watch', args),
      fetchPage: (after) => this.fetchPage(after),
      schedule: host.schedule,
      get maxBufferedEvents() {
        return host.maxBufferedEvents;
      },
      changed: (change) => this.emit('state', change),
      deliver: (ev, asOf) => this.deliver(ev, asOf),
      error: (err) => this.emit('error', err),
      // After the watch, so that this connection is present, and its pushes flow, before asking.
      live: () => this.presenceTracker.sync(),
      suspended: () => {
        this.presenceTracker.suspend();
        // Nobody's typing pushes reach us while offline; presence is kept on show until the resync.
        this.typists.clear();
      },
      stopped: () => {
        this.presenceTracker.stop();
        this.typists.stopTrailing();
        this.typists.clear();
        this.list?.clear();
      },
    });
  }

  /** The watch state. */
  get state(): WatchState {
    return this.watcher.state;
  }

  /** The seq of the last event delivered to the application, or null when none is known yet. */
  get lastSeq(): number | null {
    return this.watcher.lastSeq;
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
    this.watcher.stop(null);
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
    const p = this.watcher.nextReply();
    if (opts.presence === true && !this.presenceTracker.enabled) {
      this.presenceTracker.enable();
      // Already watching: the next watch reply would be the next reconnect's, so sync now.
      if (this.watcher.isWanted && this.watcher.flowing) this.presenceTracker.sync();
    }
    this.watcher.start(opts.after);
    return p;
  }

  /** Stops delivering events; a later `watch()` starts from the chat's seq at that time. */
  async unwatch(): Promise<void> {
    const wasWatching = this.watcher.isWanted;
    this.watcher.stop(null);
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
  history(after = 0, opts: HistoryOptions = {}): AsyncGenerator<HeraldEvent, void, undefined> {
    return historyPages(this.id, (from) => this.fetchPage(from, opts.thread), after, opts);
  }

  // ---- called by the client -------------------------------------------------------------------

  /** @internal A new link is greeted: resume watching. */
  linkUp(): void {
    this.watcher.linkUp();
  }

  /** @internal The link dropped: keep the last delivered seq, forget the rest until the watch resumes. */
  linkDown(): void {
    this.watcher.linkDown();
  }

  /** @internal The client is closed for good. */
  shutdown(err: HeraldError): void {
    this.watcher.stop(err);
  }

  /** @internal An `event` push for this chat. */
  onEventPush(push: EventPush): void {
    this.watcher.onEventPush(push);
  }

  /** @internal A `typing` push: `user` is typing here. */
  onTypingPush(user: string): void {
    if (!this.watcher.receiving) return;
    if (user === this.host.user) return; // this user on another device
    this.typists.pushed(user);
  }

  /** @internal A `presence` push. */
  onPresencePush(push: PresencePush): void {
    if (!this.watcher.receiving) return;
    this.presenceTracker.pushed(push);
  }

  /** @internal An `append` push: streamed text for a message of this chat. */
  onAppendPush(push: AppendPush): void {
    if (!this.watcher.receiving) return;
    this.list?.append(push);
    this.emit('append', push);
  }

  /** @internal A `notify` push: events up to `seq` exist. */
  onNotify(push: NotifyPush): void {
    this.watcher.onNotify(push);
  }

  // ---- internals ------------------------------------------------------------------------------

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

  /** An event the watch delivers, in order. `asOf`: the chat's seq when this view of it was read. */
  private deliver(ev: HeraldEvent, asOf: number): void {
    const out: ChatEvent = { ...ev, chat: this.id };
    // Before the listeners, so that a listener reading the list sees this event in it.
    this.list?.apply(ev, asOf);
    if (ev.type === 'message' && ev.user !== undefined) this.typists.remove(ev.user);
    this.emit('event', out);
    this.host.delivered(out);
  }
}
