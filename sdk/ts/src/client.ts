//! `HeraldClient`: one logical connection to herald that survives link drops.
//!
//! Owns: the connection state machine (disconnected, connecting, connected, closed), the `hello`
//! handshake and its connect timeout, wiring each link's liveness watcher (liveness.ts), carrying out
//! the reconnect policy per close code (codes.ts) with full-jitter backoff (backoff.ts), moving to the
//! next node URL after a loss (nodes.ts), the page size of the SDK's own fetches (page-size.ts), and
//! routing frames: replies to requests.ts, pushes (events, notifies, typing, presence, 1.2's stream
//! appends) to chat handles and inbox pushes to the inbox. Pushes, event types and
//! fields it does not know are ignored (the rule from protocol 1.1 on).
//! Does not own: request ids and timeouts (requests.ts), per-chat ordering and gap repair (chat.ts),
//! unsent messages (outbox.ts), socket details (transport.ts), token caching (token.ts), when a link
//! counts as lost for silence (liveness.ts) or which node URL an attempt uses (nodes.ts).
//!
//! States:
//!
//!     disconnected ──connect()──▶ connecting ──hello ok──▶ connected
//!          ▲                        ▲    │                    │
//!          │                        │    └──(retry, backoff)◀─┘ link lost (any reconnecting close code)
//!          └── disconnect(), or a token that fails again after a refresh
//!     any state ──close()──▶ closed (final)

import { Backoff } from './backoff.js';
import { Chat, type ChatHost } from './chat.js';
import { closePolicy, CloseCode } from './codes.js';
import { Emitter } from './emitter.js';
import { HeraldError } from './errors.js';
import { Inbox } from './inbox.js';
import { Liveness } from './liveness.js';
import { Nodes } from './nodes.js';
import { resolveOptions, type ClientOptions, type Settings } from './options.js';
import { newClientId, Outbox, type SendArgs } from './outbox.js';
import { PageSize } from './page-size.js';
import { Requests } from './requests.js';
import { searchArgs, searchPages, type SearchOptions } from './search.js';
import { TokenSource } from './token.js';
import { ABNORMAL_CLOSURE, Link, resolveWebSocket, type WebSocketConstructor } from './transport.js';
import type {
  ChatEvent,
  HelloOk,
  InboxOk,
  Op,
  PushFrame,
  ReplyFrame,
  RequestArgs,
  RequestOk,
  SearchOk,
  SearchResult,
  SeqOk,
  ThreadsOk,
} from './types.js';

/** Where the client stands. */
export type ClientState = 'disconnected' | 'connecting' | 'connected' | 'closed';

/** Which states may follow which; anything else is a bug in this file. */
const TRANSITIONS: Record<ClientState, readonly ClientState[]> = {
  disconnected: ['connecting', 'closed'],
  connecting: ['connected', 'disconnected', 'closed'],
  connected: ['connecting', 'disconnected', 'closed'],
  closed: [],
};

/** A change of client state. */
export interface StateChange {
  from: ClientState;
  to: ClientState;
}

/** Why a link ended, and what the client does next. */
export interface DisconnectInfo {
  /** The close code: the server's, 1006 for a lost or refused socket, 1000 for the client's own close. */
  code: number;
  /** A few words on why (the server's close reason, or the client's: "ping timeout", ...). */
  reason: string;
  /** Milliseconds until the next attempt, or null when the client stopped reconnecting. */
  reconnectInMs: number | null;
  /** The URL (as given in the options) of the link that ended or the attempt that failed. */
  url: string;
}

/** Events of a `HeraldClient`. */
export interface ClientEvents {
  /** The state changed. */
  state: StateChange;
  /** A link was greeted; carries the `hello` reply. */
  connected: HelloOk;
  /** A link ended, or an attempt failed. */
  disconnected: DisconnectInfo;
  /** Something failed that no promise reports: a rejected token, a token provider, a bad frame. */
  error: HeraldError;
  /** An event of any watched chat, delivered once and in seq order per chat. */
  event: ChatEvent;
}

/** The longest `after_ms` honoured from a `reconnect` push; past it, backoff takes over. */
const MAX_RECONNECT_AFTER_MS = 5 * 60_000;

/**
 * A link that lived this long counts as a success, and the next drop starts backoff from the base
 * window again. Resetting on every `hello` instead would let a server that accepts and then cuts each
 * link be hammered at the base rate forever. A slow-consumer close (4008) never counts as a success,
 * however long the link lived (see `lost`).
 */
const STABLE_CONNECTION_MS = 10_000;

/**
 * Attempts in a row that fail before a socket opens, after which the client says in an `error` event
 * what may be wrong. Three is past a blip (a server restarting, a network switch) yet only a few seconds
 * of backoff in: a wrong URL shows early, and the client still goes on trying, since a server that is
 * down for a while fails the same way.
 */
const UNREACHABLE_AFTER = 3;

/** Runs `fn` after `ms`; returns a function that cancels it. */
function schedule(fn: () => void, ms: number): () => void {
  const t = setTimeout(fn, ms);
  return () => clearTimeout(t);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isSeq(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

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
  private readonly ctor: WebSocketConstructor;
  /** The node URLs and which one the next attempt uses. */
  private readonly nodes: Nodes;
  private readonly tokens: TokenSource;
  private readonly backoff: Backoff;
  /**
   * The `limit` of the fetches chats make themselves. One per client, not per chat: a 4008 is about this
   * connection's outbound queue, which every chat's replies share.
   */
  private readonly pageSize: PageSize;
  private readonly outbox: Outbox;
  private readonly chats = new Map<string, Chat>();
  private readonly chatHost: ChatHost;
  private readonly inboxState: Inbox;

  private current: ClientState = 'disconnected';
  /** The link of the current attempt or connection; null while waiting to reconnect or stopped. */
  private link: Link | null = null;
  private helloOk: HelloOk | null = null;
  /** Whether the greeted link is still there; null while not connected. */
  private liveness: Liveness | null = null;
  private connectedAt = 0;
  /** Request ids, replies, timeouts, and requests parked while connecting. */
  private readonly requests: Requests;
  private connectWaiters: Array<{ resolve(ok: HelloOk): void; reject(err: HeraldError): void }> = [];
  /** Bumped when an attempt starts or the client stops, so a token fetched for an old attempt is dropped. */
  private generation = 0;
  /** Attempts in a row whose socket never opened; reset when one opens. */
  private failedOpens = 0;
  /** Set after a rejected token was replaced; a second rejection then stops the client. */
  private authRetried = false;
  /** When a `reconnect` push asked us to come back (absolute ms), until the next attempt uses it. */
  private reconnectAt: number | null = null;
  private cancelReconnect: (() => void) | null = null;
  private cancelConnectTimeout: (() => void) | null = null;
  private cancelDrain: (() => void) | null = null;

  /** Validates the options; throws `TypeError` for unusable ones (no WebSocket, bad workspace, ...). */
  constructor(options: ClientOptions) {
    super();
    this.s = resolveOptions(options);
    this.ctor = resolveWebSocket(this.s.WebSocket);
    this.nodes = new Nodes(this.s.url, this.s.workspace);
    this.tokens = new TokenSource(this.s.token, this.s.tokenRefreshMarginMs);
    this.backoff = new Backoff(this.s.backoff, this.s.random);
    this.pageSize = new PageSize(this.s.fetchPageSize);
    this.requests = new Requests(
      this.s.maxFrameBytes,
      (link) => this.lost(link, ABNORMAL_CLOSURE, 'write failed'),
      (link, op) => {
        // A request with no reply in time is a sign the link may be gone: probe it (liveness.ts says why
        // not drop it). The ping's own silence is the watcher's to judge; hello's, the connect timeout's.
        if (link === this.link && op !== 'ping' && op !== 'hello') this.liveness?.probe();
      },
    );
    // Getters rather than copies: both hosts must see the connection as it is at each call.
    const self = this;
    this.outbox = new Outbox(
      {
        get connected() {
          return self.isConnected;
        },
        sendRequest: (args) => this.sendRequest(args),
        schedule,
      },
      this.s.maxQueue,
      this.s.sendRetries,
      () => newClientId(this.s.random),
      this.s.sendTimeoutMs,
    );
    this.chatHost = {
      get connected() {
        return self.isConnected;
      },
      request: (op, args) => this.request(op, args),
      send: (chat, body, clientId, extra) => this.outbox.enqueue(chat, body, clientId, extra),
      delivered: (ev) => this.emit('event', ev),
      schedule,
      pageSize: this.pageSize,
      maxBufferedEvents: this.s.maxBufferedEvents,
      get user() {
        return self.helloOk?.user ?? null;
      },
      fetch: this.s.fetch,
    };
    this.inboxState = new Inbox({
      get connected() {
        return self.isConnected;
      },
      request: (op, args) => this.request(op, args),
      schedule,
    });
  }

  /** The current state. */
  get state(): ClientState {
    return this.current;
  }

  /**
   * The URL (as given in the options) of the current connection, or of the attempt in progress or next:
   * with several URLs, which node the client is on. Changes after a lost link or a failed attempt.
   */
  get url(): string {
    return this.nodes.url;
  }

  /** The `hello` reply of the current connection (user, node, session, heartbeat), or null. */
  get session(): HelloOk | null {
    return this.helloOk;
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
    return this.request('inbox', args);
  }

  /**
   * 1.2: the threads this user follows, latest reply first: in one chat (`chat`) or in all of theirs.
   * `limit` defaults to 20, at most 100; `cursor` from the previous page when it said `more`. Each entry
   * has the root and latest reply as `fetch` shows them, and this user's `read` and `unread` in it.
   */
  threads(args: RequestArgs['threads'] = {}): Promise<ThreadsOk> {
    return this.request('threads', args);
  }

  /**
   * 1.2: one page of the messages matching `query`, newest first, each a `message` event as `fetch`
   * shows it with its `chat`: in every chat this user is a member of now, or in `chat` alone. Each
   * whitespace-separated term must occur somewhere in a word of the message's text, case folded (`서버`
   * finds `서버가`). `limit` defaults to 20, at most 100; pass the reply's `cursor` while `more`.
   * Throws `TypeError` for an empty query or one over 200 characters.
   */
  search(query: string, opts: SearchOptions = {}): Promise<SearchOk> {
    return this.request('search', searchArgs(query, opts));
  }

  /**
   * 1.2: every result of `query`, newest first, fetched page by page as the loop asks (`limit` per
   * page), up to `max` results. A failed page ends the loop with its `HeraldError`.
   *
   *     for await (const hit of client.searchAll('invoice', { max: 200 })) show(hit.chat, hit);
   */
  searchAll(query: string, opts: SearchOptions & { max?: number } = {}): AsyncGenerator<SearchResult, void, undefined> {
    return searchPages((args) => this.request('search', args), query, opts);
  }

  /** Sends not yet acknowledged (waiting, written or sleeping before a retry). */
  get unacknowledgedSends(): number {
    return this.outbox.size;
  }

  /**
   * Starts connecting (if not already) and resolves once connected. It keeps retrying with backoff
   * through failures; it rejects only when the client stops: a token rejected again after a refresh
   * (`unauthenticated`), `disconnect()` or `close()`. When three attempts in a row fail before a socket
   * opens (a wrong `url`, or the server is down), an `error` event with code `unreachable` says what to
   * check, and the attempts go on.
   */
  connect(): Promise<HelloOk> {
    if (this.current === 'closed') return Promise.reject(new HeraldError('closed', 'herald: the client is closed'));
    if (this.current === 'connected' && this.helloOk !== null) return Promise.resolve(this.helloOk);
    const p = new Promise<HelloOk>((resolve, reject) => this.connectWaiters.push({ resolve, reject }));
    if (this.current === 'disconnected') {
      this.authRetried = false;
      this.failedOpens = 0;
      this.backoff.reset();
      this.setState('connecting');
      void this.startAttempt();
    }
    return p;
  }

  /**
   * Drops the link and stops reconnecting. Watches and unsent messages are kept and resume on the next
   * `connect()`; requests waiting for the link reject with `disconnected`.
   */
  disconnect(): void {
    if (this.current === 'disconnected' || this.current === 'closed') return;
    const err = new HeraldError('disconnected', 'herald: disconnect() was called');
    if (this.link !== null) this.detach(this.link, 'client disconnect', err);
    this.stop(1000, 'client disconnect', null);
  }

  /** Closes the client for good: every pending promise rejects with `closed`, timers stop. */
  close(): void {
    if (this.current === 'closed') return;
    const err = new HeraldError('closed', 'herald: the client was closed');
    if (this.link !== null) this.detach(this.link, 'client close', err);
    this.generation++;
    this.clearTimers();
    this.outbox.close(err);
    for (const chat of this.chats.values()) chat.shutdown(err);
    this.inboxState.shutdown(err);
    this.failWaiting(err);
    this.setState('closed');
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

  // ---- state --------------------------------------------------------------------------------

  private get isConnected(): boolean {
    return this.current === 'connected' && this.link !== null;
  }

  private setState(to: ClientState): void {
    const from = this.current;
    if (from === to) return;
    if (!TRANSITIONS[from].includes(to)) throw new Error(`herald: no transition ${from} -> ${to}`);
    this.current = to;
    this.emit('state', { from, to });
  }

  // ---- connecting ---------------------------------------------------------------------------

  private async startAttempt(): Promise<void> {
    const gen = ++this.generation;
    let token: string;
    try {
      token = await this.tokens.get();
    } catch (err) {
      if (gen !== this.generation || this.current !== 'connecting') return;
      const e = err instanceof HeraldError ? err : new HeraldError('token', String(err), { cause: err });
      this.emit('error', e);
      this.retryLater(ABNORMAL_CLOSURE, 'token provider failed', this.backoff.next(), this.nodes.url);
      return;
    }
    if (gen !== this.generation || this.current !== 'connecting') return;
    let link: Link;
    const url = this.nodes.url;
    try {
      link = new Link(this.ctor, this.nodes.endpoint, {
        onOpen: () => this.onOpen(link, token),
        onFrame: (text) => this.onFrame(link, text),
        onClose: (code, reason) => this.lost(link, code, reason),
      });
    } catch (err) {
      this.emit('error', new HeraldError('internal', `herald: cannot open a WebSocket: ${String(err)}`, { cause: err }));
      this.nodes.failed();
      this.retryLater(ABNORMAL_CLOSURE, 'socket failed to open', this.backoff.next(), url);
      return;
    }
    this.link = link;
    // One bound for open + hello: a socket stuck in CONNECTING (a frozen node's kernel accepted the TCP
    // connection; nothing answers the upgrade) must not hold the client: the attempt fails like any other.
    this.cancelConnectTimeout = schedule(() => {
      this.cancelConnectTimeout = null;
      this.lost(link, ABNORMAL_CLOSURE, 'connect timeout');
    }, this.s.connectTimeoutMs);
  }

  private onOpen(link: Link, token: string): void {
    if (link !== this.link) return;
    this.failedOpens = 0;
    // `hello` must be the first frame of a connection, so it bypasses the queue of waiting requests.
    this.requests.call(link, 'hello', { token }, this.s.connectTimeoutMs).then(
      (ok) => this.onHello(link, ok as HelloOk),
      (err: HeraldError) => {
        if (link !== this.link) return;
        if (err.code === 'unauthenticated') this.lost(link, CloseCode.Unauthenticated, err.message);
        else this.lost(link, ABNORMAL_CLOSURE, `hello failed: ${err.code}`);
      },
    );
  }

  private onHello(link: Link, ok: HelloOk): void {
    if (link !== this.link) return;
    this.cancelConnectTimeout?.();
    this.cancelConnectTimeout = null;
    this.helloOk = ok;
    this.connectedAt = Date.now();
    this.authRetried = false;
    this.setState('connected');
    this.emit('connected', ok);
    const waiters = this.connectWaiters;
    this.connectWaiters = [];
    for (const w of waiters) w.resolve(ok);
    if (link !== this.link) return; // a listener dropped the link meanwhile
    this.watchLiveness(link);
    // Resume in this order: watches first (so resumed history arrives early), then sends, then the rest.
    for (const chat of this.chats.values()) {
      if (link !== this.link) return; // a listener dropped the link meanwhile
      chat.linkUp();
    }
    this.outbox.flush();
    if (link !== this.link) return;
    this.inboxState.linkUp();
    this.requests.flush(link, () => link === this.link);
  }

  // ---- watchdog -----------------------------------------------------------------------------

  /**
   * Browsers hide WebSocket-level pings, so a half-open TCP link (a laptop lid closed, a NAT that
   * forgot us) or a frozen server process looks healthy until the OS gives up, minutes later. The
   * client pings on its own schedule when the link is quiet and drops a link that stays silent past a
   * ping (liveness.ts): within `pingIntervalMs + pingTimeoutMs` of the server's last frame.
   */
  private watchLiveness(link: Link): void {
    this.liveness?.stop();
    this.liveness = new Liveness(
      {
        // The reply settles in requests.ts like any other; its absence is judged by the watcher, so
        // the promise's own timeout (the same length) is ignored.
        ping: () => void this.requests.call(link, 'ping', {}, this.s.pingTimeoutMs).catch(() => {}),
        lost: (reason) => this.lost(link, ABNORMAL_CLOSURE, reason),
        schedule,
      },
      this.s.pingIntervalMs,
      this.s.pingTimeoutMs,
    );
  }

  // ---- losing a link ------------------------------------------------------------------------

  /** Tears a link down: stop its timers, fail the requests written on it, suspend watched chats. */
  private detach(link: Link, reason: string, err: HeraldError): void {
    if (link !== this.link) return;
    this.link = null;
    this.helloOk = null;
    link.abandon(reason);
    this.cancelConnectTimeout?.();
    this.cancelConnectTimeout = null;
    this.liveness?.stop();
    this.liveness = null;
    this.cancelDrain?.();
    this.cancelDrain = null;
    this.requests.failLink(link, err);
    for (const chat of this.chats.values()) chat.linkDown();
    this.inboxState.linkDown();
  }

  /** The current link closed or was found dead: apply the close code's policy. */
  private lost(link: Link, code: number, reason: string): void {
    if (link !== this.link) return;
    const lived = this.current === 'connected' ? Date.now() - this.connectedAt : 0;
    const url = this.nodes.url;
    const endpoint = this.nodes.endpoint;
    this.detach(link, reason, new HeraldError('disconnected', `herald: link closed (${code}${reason ? ` ${reason}` : ''})`, { closeCode: code }));
    // Whatever ended it, the next attempt goes to another node first (nodes.ts says why).
    this.nodes.failed();
    if (!link.opened && ++this.failedOpens === UNREACHABLE_AFTER) {
      const message = this.nodes.unreachableMessage(UNREACHABLE_AFTER, endpoint, reason);
      this.emit('error', new HeraldError('unreachable', message, { closeCode: code }));
    }
    const policy = closePolicy(code);
    if (policy === 'reconnect_smaller') {
      // A slow consumer is not forgiven for having lived long: a client that falls behind again and
      // again must come back later each time, or it replays and refetches at the base rate forever.
      this.pageSize.shrink();
    } else if (lived >= STABLE_CONNECTION_MS) {
      this.backoff.reset();
    }
    if (policy === 'refresh_token') {
      if (!this.tokens.canRefresh || this.authRetried) {
        const again = this.tokens.canRefresh ? ' again after a refresh' : ' (a fixed token cannot be refreshed)';
        this.stop(code, reason, new HeraldError('unauthenticated', `herald: the server rejected the token${again}`, { closeCode: code }), url);
        return;
      }
      this.authRetried = true;
      this.tokens.invalidate();
      this.retryLater(code, reason, this.backoff.next(), url);
      return;
    }
    let delay: number;
    if (this.reconnectAt !== null) {
      // The server spread its clients' return over a window; keep our place in it.
      delay = Math.max(0, this.reconnectAt - Date.now());
      this.reconnectAt = null;
    } else if (policy === 'reconnect_slow') {
      delay = this.s.throttledReconnectFloorMs + this.backoff.next();
    } else {
      delay = this.backoff.next();
    }
    this.retryLater(code, reason, delay, url);
  }

  /** Reports the end of a link or attempt (at `url`) and schedules the next attempt after `delay`. */
  private retryLater(code: number, reason: string, delay: number, url: string): void {
    this.emit('disconnected', { code, reason, reconnectInMs: delay, url });
    // A listener may have called disconnect() or close().
    if (this.current !== 'connecting' && this.current !== 'connected') return;
    this.setState('connecting');
    this.cancelReconnect?.();
    this.cancelReconnect = schedule(() => {
      this.cancelReconnect = null;
      if (this.current === 'connecting') void this.startAttempt();
    }, delay);
  }

  /** Stops reconnecting: state `disconnected`, waiting callers rejected. */
  private stop(code: number, reason: string, err: HeraldError | null, url = this.nodes.url): void {
    this.generation++;
    this.clearTimers();
    this.emit('disconnected', { code, reason, reconnectInMs: null, url });
    if (err !== null) this.emit('error', err);
    if (this.current === 'closed' || this.current === 'disconnected') return;
    this.setState('disconnected');
    this.failWaiting(err ?? new HeraldError('disconnected', `herald: disconnected (${reason})`, { closeCode: code }));
  }

  private clearTimers(): void {
    this.cancelReconnect?.();
    this.cancelReconnect = null;
    this.cancelConnectTimeout?.();
    this.cancelConnectTimeout = null;
    this.liveness?.stop();
    this.liveness = null;
    this.cancelDrain?.();
    this.cancelDrain = null;
    this.reconnectAt = null;
  }

  private failWaiting(err: HeraldError): void {
    const waiters = this.connectWaiters;
    this.connectWaiters = [];
    for (const w of waiters) w.reject(err);
    this.requests.failParked(err);
  }

  // ---- requests -----------------------------------------------------------------------------

  /**
   * A request for chat handles: written now when connected, else parked until the link is greeted.
   * The timeout covers both the wait and the reply.
   */
  private request<O extends Op>(op: O, args: RequestArgs[O]): Promise<RequestOk[O]> {
    if (this.current === 'closed') return Promise.reject(new HeraldError('closed', 'herald: the client is closed', { op }));
    if (this.current === 'disconnected') {
      return Promise.reject(new HeraldError('disconnected', 'herald: not connected; call connect() first', { op }));
    }
    if (this.isConnected) return this.requests.call(this.link!, op, args, this.s.requestTimeoutMs) as Promise<RequestOk[O]>;
    return this.requests.park(op, args, Date.now() + this.s.requestTimeoutMs) as Promise<RequestOk[O]>;
  }

  private sendRequest(args: SendArgs): Promise<SeqOk> {
    if (!this.isConnected) return Promise.reject(new HeraldError('disconnected', 'herald: not connected', { op: 'send' }));
    return this.requests.call(this.link!, 'send', args, this.s.requestTimeoutMs) as Promise<SeqOk>;
  }

  // ---- frames from the server ---------------------------------------------------------------

  private onFrame(link: Link, text: string): void {
    if (link !== this.link) return;
    this.liveness?.heard();
    let msg: unknown;
    try {
      msg = JSON.parse(text);
    } catch {
      this.emit('error', new HeraldError('protocol', 'herald: the server sent a frame that is not JSON'));
      return;
    }
    if (!isObject(msg)) {
      this.emit('error', new HeraldError('protocol', 'herald: the server sent a frame that is not an object'));
      return;
    }
    if (typeof msg.id === 'number') {
      this.requests.settle(msg as unknown as ReplyFrame);
      return;
    }
    this.onPush(link, msg as unknown as PushFrame);
  }

  private onPush(link: Link, push: PushFrame): void {
    switch (push.ev) {
      case 'event':
      case 'notify': {
        if (typeof push.chat !== 'string' || !isSeq(push.seq) || push.seq === 0) {
          this.emit('error', new HeraldError('protocol', `herald: a ${push.ev} push without a chat or seq`));
          return;
        }
        const chat = this.chats.get(push.chat);
        if (chat === undefined) return;
        if (push.ev === 'event') chat.onEventPush(push);
        else chat.onNotify(push);
        return;
      }
      case 'typing': {
        if (typeof push.chat !== 'string' || typeof push.user !== 'string') return;
        this.chats.get(push.chat)?.onTypingPush(push.user);
        return;
      }
      case 'presence': {
        if (typeof push.chat !== 'string') return;
        this.chats.get(push.chat)?.onPresencePush(push);
        return;
      }
      case 'inbox':
        this.inboxState.onPush(push);
        return;
      case 'append': {
        if (typeof push.chat !== 'string' || !isSeq(push.target) || typeof push.text !== 'string' || !isSeq(push.at)) return;
        this.chats.get(push.chat)?.onAppendPush(push);
        return;
      }
      case 'reconnect': {
        const after = isSeq(push.after_ms) ? Math.min(push.after_ms, MAX_RECONNECT_AFTER_MS) : 0;
        this.reconnectAt = Date.now() + after;
        // The server closes with 4012 next; if that close is late, leave by ourselves on time.
        this.cancelDrain?.();
        this.cancelDrain = schedule(() => {
          this.cancelDrain = null;
          this.lost(link, CloseCode.GoingAway, push.reason ?? 'reconnect requested');
        }, after);
        return;
      }
      default:
        return; // a push this version does not know: ignore, as a newer server may send more kinds
    }
  }
}
