//! `Connection`: one logical connection to herald that survives link drops.
//!
//! Owns: the connection state machine (disconnected, connecting, connected, closed), the `hello`
//! handshake and its connect timeout, the token for each attempt (and stopping, in plain words, when the
//! token function gives nothing usable or the server refuses a refreshed token), wiring each link's
//! liveness watcher (liveness.ts), carrying out the reconnect policy per close code (codes.ts) with
//! full-jitter backoff (backoff.ts) and a server's `reconnect` push, moving to the next node URL after a
//! loss (nodes.ts), shrinking the page size after a slow-consumer close (page-size.ts), writing
//! requests on the current link or parking them until one is greeted, and reading frames: replies to
//! requests.ts, every other push to its host.
//! Does not own: request ids and timeouts (requests.ts), what a push means or whom it is for, chats, the
//! inbox or unsent messages (the host, client.ts, resumes and suspends those), socket details
//! (transport.ts), token caching (token.ts), when a link counts as lost for silence (liveness.ts) or
//! which node URL an attempt uses (nodes.ts).
//!
//! States:
//!
//!     disconnected ──connect()──▶ connecting ──hello ok──▶ connected
//!          ▲                        ▲    │                    │
//!          │                        │    └──(retry, backoff)◀─┘ link lost (any reconnecting close code)
//!          └── disconnect(), a token function that gives no usable token, or a token refused again
//!              after a refresh
//!     any state ──close()──▶ closed (final)

import { Backoff } from './backoff.js';
import type { ClientEvents, ClientState } from './client-events.js';
import { closePolicy, CloseCode } from './codes.js';
import { HeraldError } from './errors.js';
import { Liveness } from './liveness.js';
import { Nodes } from './nodes.js';
import type { Settings } from './options.js';
import type { SendArgs } from './outbox.js';
import type { PageSize } from './page-size.js';
import { isSeq } from './pushes.js';
import { Requests } from './requests.js';
import { refusedTokenMessage, TokenSource, UnusableToken } from './token.js';
import { ABNORMAL_CLOSURE, Link, resolveWebSocket, type WebSocketConstructor } from './transport.js';
import type { HelloOk, Op, PushFrame, ReconnectPush, ReplyFrame, RequestArgs, RequestOk, SeqOk } from './types.js';

/** Which states may follow which; anything else is a bug in this file. */
const TRANSITIONS: Record<ClientState, readonly ClientState[]> = {
  disconnected: ['connecting', 'closed'],
  connecting: ['connected', 'disconnected', 'closed'],
  connected: ['connecting', 'disconnected', 'closed'],
  closed: [],
};

/** What a connection reports to, and what it resumes and suspends. @internal */
export interface ConnectionHost {
  /** Emits a client event: `state`, `connected`, `disconnected`, `error`. */
  emit<K extends keyof ClientEvents>(name: K, payload: ClientEvents[K]): void;
  /**
   * A greeted link is ready: resume what uses it (watches first, then sends, then the rest), checking
   * `isCurrent` between steps, since a listener may drop the link meanwhile. Parked requests go after.
   */
  resume(isCurrent: () => boolean): void;
  /** The link is gone: suspend what used it. */
  suspend(): void;
  /** A push other than `reconnect`. */
  pushed(push: PushFrame): void;
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
export function schedule(fn: () => void, ms: number): () => void {
  const t = setTimeout(fn, ms);
  return () => clearTimeout(t);
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** The connection of one `HeraldClient`. @internal */
export class Connection {
  private readonly ctor: WebSocketConstructor;
  /** The node URLs and which one the next attempt uses. */
  private readonly nodes: Nodes;
  private readonly tokens: TokenSource;
  private readonly backoff: Backoff;
  /** Request ids, replies, timeouts, and requests parked while connecting. */
  private readonly requests: Requests;

  private current: ClientState = 'disconnected';
  /** The link of the current attempt or connection; null while waiting to reconnect or stopped. */
  private link: Link | null = null;
  private helloOk: HelloOk | null = null;
  /** Whether the greeted link is still there; null while not connected. */
  private liveness: Liveness | null = null;
  private connectedAt = 0;
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

  /**
   * @param pageSize the `limit` of the fetches chats make themselves: one per client, not per chat, since
   *   a 4008 is about this connection's outbound queue, which every chat's replies share.
   */
  constructor(
    private readonly s: Settings,
    private readonly pageSize: PageSize,
    private readonly host: ConnectionHost,
  ) {
    this.ctor = resolveWebSocket(s.WebSocket);
    this.nodes = new Nodes(s.url, s.workspace);
    this.tokens = new TokenSource(s.token, s.tokenRefreshMarginMs);
    this.backoff = new Backoff(s.backoff, s.random);
    this.requests = new Requests(
      s.maxFrameBytes,
      (link) => this.lost(link, ABNORMAL_CLOSURE, 'write failed'),
      (link, op) => {
        // A request with no reply in time is a sign the link may be gone: probe it (liveness.ts says why
        // not drop it). The ping's own silence is the watcher's to judge; hello's, the connect timeout's.
        if (link === this.link && op !== 'ping' && op !== 'hello') this.liveness?.probe();
      },
    );
  }

  get state(): ClientState {
    return this.current;
  }

  /** The URL (as given in the options) of the current connection, or of the attempt in progress or next. */
  get url(): string {
    return this.nodes.url;
  }

  /** The `hello` reply of the current connection, or null. */
  get session(): HelloOk | null {
    return this.helloOk;
  }

  /** True while requests go out on a live, greeted link. */
  get isConnected(): boolean {
    return this.current === 'connected' && this.link !== null;
  }

  /** See `HeraldClient.connect`. */
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

  /** See `HeraldClient.disconnect`. */
  disconnect(): void {
    if (this.current === 'disconnected' || this.current === 'closed') return;
    const err = new HeraldError('disconnected', 'herald: disconnect() was called');
    if (this.link !== null) this.detach(this.link, 'client disconnect', err);
    this.stop(1000, 'client disconnect', null);
  }

  /**
   * Closes for good with `err`: the link and timers go, then `shutdown` ends what the host holds, then
   * waiting callers reject, and the state becomes `closed` last.
   */
  close(err: HeraldError, shutdown: () => void): void {
    if (this.current === 'closed') return;
    if (this.link !== null) this.detach(this.link, 'client close', err);
    this.generation++;
    this.clearTimers();
    shutdown();
    this.failWaiting(err);
    this.setState('closed');
  }

  /**
   * A request: written now when connected, else parked until the link is greeted. The timeout covers
   * both the wait and the reply.
   */
  request<O extends Op>(op: O, args: RequestArgs[O]): Promise<RequestOk[O]> {
    if (this.current === 'closed') return Promise.reject(new HeraldError('closed', 'herald: the client is closed', { op }));
    if (this.current === 'disconnected') {
      return Promise.reject(new HeraldError('disconnected', 'herald: not connected; call connect() first', { op }));
    }
    if (this.isConnected) return this.requests.call(this.link!, op, args, this.s.requestTimeoutMs) as Promise<RequestOk[O]>;
    return this.requests.park(op, args, Date.now() + this.s.requestTimeoutMs) as Promise<RequestOk[O]>;
  }

  /** A send for the outbox: written only on a greeted link, since the outbox keeps its own queue. */
  sendRequest(args: SendArgs): Promise<SeqOk> {
    if (!this.isConnected) return Promise.reject(new HeraldError('disconnected', 'herald: not connected', { op: 'send' }));
    return this.requests.call(this.link!, 'send', args, this.s.requestTimeoutMs) as Promise<SeqOk>;
  }

  // ---- state --------------------------------------------------------------------------------

  private setState(to: ClientState): void {
    const from = this.current;
    if (from === to) return;
    if (!TRANSITIONS[from].includes(to)) throw new Error(`herald: no transition ${from} -> ${to}`);
    this.current = to;
    this.host.emit('state', { from, to });
  }

  // ---- connecting ---------------------------------------------------------------------------

  private async startAttempt(): Promise<void> {
    const gen = ++this.generation;
    let token: string;
    try {
      token = await this.tokens.get();
    } catch (err) {
      if (gen !== this.generation || this.current !== 'connecting') return;
      if (err instanceof UnusableToken) {
        // The function would give the same again: retrying forever would hide the mistake.
        this.stop(ABNORMAL_CLOSURE, 'no usable token', err);
        return;
      }
      const e = err instanceof HeraldError ? err : new HeraldError('token', String(err), { cause: err });
      this.host.emit('error', e);
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
      this.host.emit('error', new HeraldError('internal', `herald: cannot open a WebSocket: ${String(err)}`, { cause: err }));
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
        // The reply's message is the server's reason, richer than the close reason that follows it.
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
    this.host.emit('connected', ok);
    const waiters = this.connectWaiters;
    this.connectWaiters = [];
    for (const w of waiters) w.resolve(ok);
    if (link !== this.link) return; // a listener dropped the link meanwhile
    this.watchLiveness(link);
    const isCurrent = () => link === this.link;
    this.host.resume(isCurrent);
    if (isCurrent()) this.requests.flush(link, isCurrent);
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

  /** Tears a link down: stop its timers, fail the requests written on it, suspend what used it. */
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
    this.host.suspend();
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
      this.host.emit('error', new HeraldError('unreachable', message, { closeCode: code }));
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
        const err = new HeraldError('unauthenticated', refusedTokenMessage(reason, this.tokens.canRefresh), { closeCode: code });
        this.stop(code, reason, err, url);
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
    this.host.emit('disconnected', { code, reason, reconnectInMs: delay, url });
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
    this.host.emit('disconnected', { code, reason, reconnectInMs: null, url });
    if (err !== null) this.host.emit('error', err);
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

  // ---- frames from the server ---------------------------------------------------------------

  private onFrame(link: Link, text: string): void {
    if (link !== this.link) return;
    this.liveness?.heard();
    let msg: unknown;
    try {
      msg = JSON.parse(text);
    } catch {
      this.host.emit('error', new HeraldError('protocol', 'herald: the server sent a frame that is not JSON'));
      return;
    }
    if (!isObject(msg)) {
      this.host.emit('error', new HeraldError('protocol', 'herald: the server sent a frame that is not an object'));
      return;
    }
    if (typeof msg.id === 'number') {
      this.requests.settle(msg as unknown as ReplyFrame);
      return;
    }
    const push = msg as unknown as PushFrame;
    if (push.ev === 'reconnect') this.onReconnectPush(link, push);
    else this.host.pushed(push);
  }

  /** The server is about to close this link (draining, rebalancing) and says when to come back. */
  private onReconnectPush(link: Link, push: ReconnectPush): void {
    const after = isSeq(push.after_ms) ? Math.min(push.after_ms, MAX_RECONNECT_AFTER_MS) : 0;
    this.reconnectAt = Date.now() + after;
    // The server closes with 4012 next; if that close is late, leave by ourselves on time.
    this.cancelDrain?.();
    this.cancelDrain = schedule(() => {
      this.cancelDrain = null;
      this.lost(link, CloseCode.GoingAway, push.reason ?? 'reconnect requested');
    }, after);
  }
}

