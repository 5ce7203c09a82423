//! `HeraldClient`: the application's entry point, and the facade of the client's parts.
//!
//! Owns: building the parts from the options and wiring them together (the connection, the outbox, one
//! chat handle per id, the inbox, the page size of the SDK's own fetches), the client's events, the
//! requests that belong to no one chat (inbox page, threads, search), and what a link coming up or going
//! down means for the parts: on a greeted link watches resume first (so resumed history arrives early),
//! then unsent messages, then the inbox; on a lost one, chats and the inbox are suspended.
//! Does not own: the connection state machine, reconnects and tokens (connection.ts), where a push goes
//! (pushes.ts), request ids and timeouts (requests.ts), per-chat ordering and gap repair (chat.ts,
//! watch.ts), unsent messages (outbox.ts) or the inbox's state (inbox.ts).

import { Chat } from './chat.js';
import type { ChatHost } from './chat-types.js';
import type { ClientEvents, ClientState } from './client-events.js';
import { Connection, schedule } from './connection.js';
import { Emitter } from './emitter.js';
import { HeraldError } from './errors.js';
import { Inbox } from './inbox.js';
import { resolveOptions, type ClientOptions, type Settings } from './options.js';
import { newClientId, Outbox } from './outbox.js';
import { PageSize } from './page-size.js';
import { routePush } from './pushes.js';
import { searchArgs, searchPages, type SearchOptions } from './search.js';
import type { HelloOk, InboxOk, RequestArgs, SearchOk, SearchResult, ThreadsOk } from './types.js';

export type { ClientEvents, ClientState, DisconnectInfo, StateChange } from './client-events.js';

/** Ids of workspaces, users and chats (docs/protocol.md, "Words"). */
const ID_PATTERN = /^[A-Za-z0-9_.:-]{1,128}$/;

/**
 * A herald client. Create it, call `connect()`, get chat handles with `chat(id)`.
 *
 * ```ts
 * const client = new HeraldClient({ url: 'ws://localhost:8080/v1/ws', workspace: 'acme', token: getToken });
 * client.on('state', ({ to }) => console.log('herald is', to));
 * await client.connect();
 * const general = client.chat('general');
 * general.on('event', (ev) => render(ev));
 * await general.join();
 * await general.watch();
 * await general.send({ text: 'hi' });
 * ```
 */
export class HeraldClient extends Emitter<ClientEvents> {
  private readonly s: Settings;
  /** The link, its state machine and reconnects, the requests on it. */
  private readonly conn: Connection;
  /**
   * The `limit` of the fetches chats make themselves. One per client, not per chat: a 4008 is about this
   * connection's outbound queue, which every chat's replies share.
   */
  private readonly pageSize: PageSize;
  private readonly outbox: Outbox;
  private readonly chats = new Map<string, Chat>();
  private readonly chatHost: ChatHost;
  private readonly inboxState: Inbox;

  /** Validates the options; throws `TypeError` for unusable ones (no WebSocket, bad workspace, ...). */
  constructor(options: ClientOptions) {
    super();
    this.s = resolveOptions(options);
    this.pageSize = new PageSize(this.s.fetchPageSize);
    this.conn = new Connection(this.s, this.pageSize, {
      emit: (name, payload) => this.emit(name, payload),
      resume: (isCurrent) => this.linkUp(isCurrent),
      suspend: () => this.linkDown(),
      pushed: (push) =>
        routePush(push, {
          chat: (id) => this.chats.get(id),
          inbox: this.inboxState,
          error: (err) => this.emit('error', err),
        }),
    });
    // Getters rather than copies: every host must see the connection as it is at each call.
    const conn = this.conn;
    this.outbox = new Outbox(
      {
        get connected() {
          return conn.isConnected;
        },
        sendRequest: (args) => conn.sendRequest(args),
        schedule,
      },
      this.s.maxQueue,
      this.s.sendRetries,
      () => newClientId(this.s.random),
      this.s.sendTimeoutMs,
    );
    this.chatHost = {
      get connected() {
        return conn.isConnected;
      },
      request: (op, args) => conn.request(op, args),
      send: (chat, body, clientId, extra) => this.outbox.enqueue(chat, body, clientId, extra),
      delivered: (ev) => this.emit('event', ev),
      schedule,
      pageSize: this.pageSize,
      maxBufferedEvents: this.s.maxBufferedEvents,
      get user() {
        return conn.session?.user ?? null;
      },
      fetch: this.s.fetch,
    };
    this.inboxState = new Inbox({
      get connected() {
        return conn.isConnected;
      },
      request: (op, args) => conn.request(op, args),
      schedule,
    });
  }

  /** The current state. */
  get state(): ClientState {
    return this.conn.state;
  }

  /**
   * The URL (as given in the options) of the current connection, or of the attempt in progress or next:
   * with several URLs, which node the client is on. Changes after a lost link or a failed attempt.
   */
  get url(): string {
    return this.conn.url;
  }

  /** The `hello` reply of the current connection (user, node, session, heartbeat), or null. */
  get session(): HelloOk | null {
    return this.conn.session;
  }

  /**
   * This user's inbox: chats with unread counts, latest activity first. `start()` it to load it and keep
   * it live through reconnects. One per client.
   */
  get inbox(): Inbox {
    return this.inboxState;
  }

  /**
   * The bare `inbox` request: one page of this user's chats (`limit` default 50, at most 200; `cursor`
   * from the previous page). With `live: true` this connection also gets `inbox` pushes until it closes,
   * which only `client.inbox` reads; prefer it.
   */
  fetchInbox(args: RequestArgs['inbox'] = {}): Promise<InboxOk> {
    return this.conn.request('inbox', args);
  }

  /**
   * 1.2: the threads this user follows, latest reply first: in one chat (`chat`) or in all of theirs.
   * `limit` defaults to 20, at most 100; `cursor` from the previous page when it said `more`. Each entry
   * has the root and latest reply as `fetch` shows them, and this user's `read` and `unread` in it.
   */
  threads(args: RequestArgs['threads'] = {}): Promise<ThreadsOk> {
    return this.conn.request('threads', args);
  }

  /**
   * 1.2: one page of the messages matching `query`, newest first, each a `message` event as `fetch`
   * shows it with its `chat`: in every chat this user is a member of now, or in `chat` alone. Each
   * whitespace-separated term must occur somewhere in a word of the message's text, case folded (`서버`
   * finds `서버가`). `limit` defaults to 20, at most 100; pass the reply's `cursor` while `more`.
   * Throws `TypeError` for an empty query or one over 200 characters.
   */
  search(query: string, opts: SearchOptions = {}): Promise<SearchOk> {
    return this.conn.request('search', searchArgs(query, opts));
  }

  /**
   * 1.2: every result of `query`, newest first, fetched page by page as the loop asks (`limit` per
   * page), up to `max` results. A failed page ends the loop with its `HeraldError`.
   *
   *     for await (const hit of client.searchAll('invoice', { max: 200 })) show(hit.chat, hit);
   */
  searchAll(query: string, opts: SearchOptions & { max?: number } = {}): AsyncGenerator<SearchResult, void, undefined> {
    return searchPages((args) => this.conn.request('search', args), query, opts);
  }

  /** Sends not yet acknowledged (waiting, written or sleeping before a retry). */
  get unacknowledgedSends(): number {
    return this.outbox.size;
  }

  /**
   * Starts connecting (if not already) and resolves once connected. It keeps retrying with backoff
   * through failures; it rejects only when the client stops: a token refused again after a refresh, or a
   * fixed token refused (`unauthenticated`, its message the server's reason), a token function that
   * gives no usable token (`token`: nothing, a non-string, or a JSON body instead of its `token` field),
   * `disconnect()` or `close()`. When three attempts in a row fail before a socket opens (a wrong `url`,
   * or the server is down), an `error` event with code `unreachable` says what to check, and the
   * attempts go on.
   */
  connect(): Promise<HelloOk> {
    return this.conn.connect();
  }

  /**
   * Drops the link and stops reconnecting. Watches and unsent messages are kept and resume on the next
   * `connect()`; requests waiting for the link reject with `disconnected`.
   */
  disconnect(): void {
    this.conn.disconnect();
  }

  /** Closes the client for good: every pending promise rejects with `closed`, timers stop. */
  close(): void {
    if (this.conn.state === 'closed') return;
    const err = new HeraldError('closed', 'herald: the client was closed');
    this.conn.close(err, () => {
      this.outbox.close(err);
      for (const chat of this.chats.values()) chat.shutdown(err);
      this.inboxState.shutdown(err);
    });
  }

  /**
   * The handle of chat `id`; the same object for the same id, so its listeners and watch survive
   * reconnects. Handles are kept for the client's lifetime and hold no buffers unless watched.
   */
  chat(id: string): Chat {
    if (!ID_PATTERN.test(id)) throw new TypeError('herald: chat ids are 1 to 128 characters of A-Z a-z 0-9 _ . : -');
    let chat = this.chats.get(id);
    if (chat === undefined) {
      chat = new Chat(id, this.chatHost);
      this.chats.set(id, chat);
    }
    return chat;
  }

  // ---- links coming and going --------------------------------------------------------------

  /** A greeted link: watches first (so resumed history arrives early), then sends, then the inbox. */
  private linkUp(isCurrent: () => boolean): void {
    for (const chat of this.chats.values()) {
      if (!isCurrent()) return; // a listener dropped the link meanwhile
      chat.linkUp();
    }
    this.outbox.flush();
    if (!isCurrent()) return;
    this.inboxState.linkUp();
  }

  /** The link is gone: watched chats keep their place and wait; the inbox's live pushes ended with it. */
  private linkDown(): void {
    for (const chat of this.chats.values()) chat.linkDown();
    this.inboxState.linkDown();
  }
}
