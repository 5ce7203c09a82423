//! An in-process fake herald for unit tests: a WebSocket class plus a tiny protocol server behind it.
//!
//! Owns: enough of docs/protocol.md (hello, join, watch with a bounded replay, unwatch, send with client_id
//! dedupe, react, read, fetch paging bounded in count and bytes, ping) to drive the client, plus knobs a
//! real server does not have: refuse connects, stop answering pings, hold pushes back, intercept any
//! request, cut a link with any close code, close with 4008 when one frame overflows the outbound queue.
//! Does not own: timing. Everything is delivered on microtasks, so tests drive time with fake timers.

import type { HeraldEvent } from '../../src/types.js';
import type { WebSocketConstructor, WebSocketLike } from '../../src/transport.js';

/** A request frame as the fake server received it. */
export interface Frame {
  id: number;
  op: string;
  [arg: string]: unknown;
}

/** Decides a request's fate before the built-in handler: return true when handled (or dropped). */
export type Interceptor = (conn: FakeSocket, frame: Frame) => boolean;

const CONNECTING = 0;
const OPEN = 1;
const CLOSING = 2;
const CLOSED = 3;

/** The client's end of a fake link; the server drives it through the `server*` methods. */
export class FakeSocket implements WebSocketLike {
  readyState = CONNECTING;
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: string }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  /** Requests this socket sent, in order. */
  readonly frames: Frame[] = [];
  /** Set once `hello` succeeded. */
  authed = false;
  /** Chats this connection watches. */
  readonly watching = new Set<string>();
  /** The close code the client used, if it closed the socket itself. */
  clientCloseCode: number | undefined;
  /** A black-holed link: nothing gets through in either direction and no close is reported. */
  dead = false;
  /** Frames the server sent on this socket (replies and pushes), in order. */
  readonly out: unknown[] = [];

  constructor(
    readonly url: string,
    private readonly server: FakeHerald,
  ) {
    server.sockets.push(this);
    queueMicrotask(() => {
      if (this.readyState !== CONNECTING) return;
      if (server.refuse) {
        this.readyState = CLOSED;
        this.onerror?.({});
        this.onclose?.({ code: 1006, reason: '' });
        return;
      }
      this.readyState = OPEN;
      this.onopen?.({});
    });
  }

  send(data: string): void {
    if (this.readyState !== OPEN) throw new Error('fake socket not open');
    if (this.dead) return;
    const frame = JSON.parse(data) as Frame;
    this.frames.push(frame);
    queueMicrotask(() => this.server.receive(this, frame));
  }

  close(code?: number, reason?: string): void {
    if (this.readyState === CLOSING || this.readyState === CLOSED) return;
    this.clientCloseCode = code ?? 1005;
    this.readyState = CLOSING;
    queueMicrotask(() => {
      this.readyState = CLOSED;
      this.onclose?.({ code: code ?? 1005, reason: reason ?? '' });
    });
  }

  /** True while the link carries frames. */
  get isOpen(): boolean {
    return this.readyState === OPEN && !this.dead;
  }

  /** Sends a frame to the client. */
  serverSend(obj: unknown): void {
    if (!this.isOpen) return;
    const data = JSON.stringify(obj);
    if (data.length > this.server.outboxBytes) {
      // As herald does when its outbound queue passes the limit: the frame is dropped, the link closed.
      this.server.slowConsumerCloses++;
      this.serverClose(4008, 'slow consumer');
      return;
    }
    this.out.push(obj);
    queueMicrotask(() => {
      if (this.readyState === OPEN && !this.dead) this.onmessage?.({ data });
    });
  }

  /** Closes the link from the server's side with `code`. */
  serverClose(code: number, reason = ''): void {
    if (this.readyState === CLOSED) return;
    this.readyState = CLOSING;
    queueMicrotask(() => {
      this.readyState = CLOSED;
      this.onclose?.({ code, reason });
    });
  }

  /** The requests with op `op`. */
  sent(op: string): Frame[] {
    return this.frames.filter((f) => f.op === op);
  }

  /** The `ok` the server sent in reply to `frame`, if it replied with one. */
  okFor(frame: Frame): unknown {
    for (const m of this.out) {
      const r = m as { id?: number; ok?: unknown };
      if (r.id === frame.id) return r.ok;
    }
    return undefined;
  }
}

interface ChatState {
  events: HeraldEvent[];
  members: Set<string>;
  /** (user, client_id) -> seq: the idempotency the real server promises. */
  clientIds: Map<string, number>;
}

/** The fake server. `new FakeHerald().WebSocket` is what the client gets as its WebSocket class. */
export class FakeHerald {
  /** Every socket ever created, oldest first. */
  readonly sockets: FakeSocket[] = [];
  /** Chats by id. */
  readonly chats = new Map<string, ChatState>();
  /** heartbeat_ms in hello replies. */
  heartbeatMs = 25_000;
  /** New sockets fail to open (close 1006), as when the server is down. */
  refuse = false;
  /** When false, `ping` requests get no reply. */
  answerPings = true;
  /** When false, stored events are not pushed to watchers (tests push by hand). */
  autoPush = true;
  /** Which tokens `hello` accepts. */
  acceptToken: (token: string) => boolean = () => true;
  /** Runs before the built-in handler for every request after hello. */
  intercept: Interceptor | null = null;
  /** Every token presented in a hello, in order. */
  readonly tokens: string[] = [];
  /** The user every authenticated connection acts as. */
  user = 'alice';
  /**
   * Bytes of events one fetch reply may hold (at least one event), as herald bounds replies in bytes:
   * a page may then hold fewer events than `limit` while `more` is true.
   */
  fetchBytes = Infinity;
  /** Events a `watch` with `after` replays; past it the watcher gets `notify` with the latest seq instead. */
  replayEvents = Infinity;
  /**
   * The outbound queue, simplified to one frame: a server frame longer than this closes the link with
   * 4008 (slow consumer) instead of being sent. Real herald counts every queued frame; one large fetch
   * reply is the case that matters to the client.
   */
  outboxBytes = Infinity;
  /** Links closed with 4008 so far. */
  slowConsumerCloses = 0;
  private ts = 1_700_000_000_000;

  /** The WebSocket class bound to this server. */
  readonly WebSocket: WebSocketConstructor;

  constructor() {
    const server = this;
    this.WebSocket = class extends FakeSocket {
      constructor(url: string) {
        super(url, server);
      }
    };
  }

  /** The newest socket. */
  get last(): FakeSocket {
    const s = this.sockets[this.sockets.length - 1];
    if (s === undefined) throw new Error('no socket yet');
    return s;
  }

  /** Sockets currently open. */
  get openSockets(): FakeSocket[] {
    return this.sockets.filter((s) => s.readyState === OPEN);
  }

  /** Stores an event in `chat` (creating it) and returns it; pushes it to watchers when autoPush. */
  store(chat: string, type: HeraldEvent['type'], body: unknown, user = this.user, clientId?: string): HeraldEvent {
    const c = this.chat(chat);
    const ev: HeraldEvent = { seq: c.events.length + 1, type, user, ts: this.ts++, body };
    if (clientId !== undefined) ev.client_id = clientId;
    c.events.push(ev);
    if (this.autoPush) for (const s of this.sockets) if (s.watching.has(chat)) this.push(s, chat, ev);
    return ev;
  }

  /** Pushes one stored event of `chat` (by seq) to `socket`. */
  pushSeq(socket: FakeSocket, chat: string, seq: number): void {
    const ev = this.chat(chat).events[seq - 1];
    if (ev === undefined) throw new Error(`no event ${seq} in ${chat}`);
    this.push(socket, chat, ev);
  }

  /** Pushes `ev` as an `event` push. */
  push(socket: FakeSocket, chat: string, ev: HeraldEvent): void {
    socket.serverSend({ ev: 'event', chat, ...ev });
  }

  /** The stored events of `chat`. */
  events(chat: string): HeraldEvent[] {
    return this.chat(chat).events;
  }

  /** Handles one request frame. */
  receive(conn: FakeSocket, frame: Frame): void {
    if (!conn.authed) {
      if (frame.op === 'hello' && typeof frame.token === 'string') this.tokens.push(frame.token);
      if (frame.op === 'hello' && typeof frame.token === 'string' && this.acceptToken(frame.token)) {
        conn.authed = true;
        conn.serverSend({
          id: frame.id,
          ok: { user: this.user, workspace: 'acme', node: 'fake-1', session: `s${this.sockets.length}`, heartbeat_ms: this.heartbeatMs },
        });
      } else {
        conn.serverSend({ id: frame.id, err: { code: 'unauthenticated', message: 'bad token' } });
        conn.serverClose(4001, 'unauthenticated');
      }
      return;
    }
    if (this.intercept?.(conn, frame)) return;
    const ok = (v: unknown) => conn.serverSend({ id: frame.id, ok: v });
    const chatId = frame.chat as string;
    switch (frame.op) {
      case 'ping':
        if (this.answerPings) ok({});
        return;
      case 'join': {
        const c = this.chat(chatId);
        if (!c.members.has(this.user)) {
          c.members.add(this.user);
          this.store(chatId, 'join', {});
        }
        ok({ chat: chatId, seq: c.events.length, members: c.members.size });
        return;
      }
      case 'watch': {
        const c = this.chat(chatId);
        conn.watching.add(chatId);
        ok({ chat: chatId, seq: c.events.length });
        if (typeof frame.after === 'number' && this.autoPush) {
          const backlog = c.events.slice(frame.after);
          for (const ev of backlog.slice(0, this.replayEvents)) this.push(conn, chatId, ev);
          if (backlog.length > this.replayEvents) conn.serverSend({ ev: 'notify', chat: chatId, seq: c.events.length });
        }
        return;
      }
      case 'leave': {
        const c = this.chat(chatId);
        if (c.members.delete(this.user)) this.store(chatId, 'leave', {});
        for (const s of this.sockets) s.watching.delete(chatId);
        ok({});
        return;
      }
      case 'unwatch':
        conn.watching.delete(chatId);
        ok({});
        return;
      case 'send': {
        const c = this.chat(chatId);
        const cid = typeof frame.client_id === 'string' ? frame.client_id : undefined;
        const key = `${this.user}\u0000${cid}`;
        const seen = cid === undefined ? undefined : c.clientIds.get(key);
        if (seen !== undefined) {
          ok({ seq: seen });
          return;
        }
        const ev = this.store(chatId, 'message', frame.body, this.user, cid);
        if (cid !== undefined) c.clientIds.set(key, ev.seq);
        ok({ seq: ev.seq });
        return;
      }
      case 'react':
        ok({ seq: this.store(chatId, 'reaction', { target: frame.target, emoji: frame.emoji, on: frame.on ?? true }).seq });
        return;
      case 'read':
        ok({ seq: this.store(chatId, 'read', { seq: frame.seq }).seq });
        return;
      case 'fetch': {
        const c = this.chat(chatId);
        const limit = Math.min(typeof frame.limit === 'number' ? frame.limit : 100, 500);
        const after = frame.after as number;
        const events = this.withinBytes(c.events.slice(after, after + limit));
        const end = events.length > 0 ? events[events.length - 1]!.seq : after;
        ok({ events, seq: c.events.length, more: end < c.events.length });
        return;
      }
      default:
        conn.serverSend({ id: frame.id, err: { code: 'bad_request', message: `unknown op ${frame.op}` } });
    }
  }

  /** The longest prefix of `events` within `fetchBytes`, and never less than one event. */
  private withinBytes(events: HeraldEvent[]): HeraldEvent[] {
    let bytes = 0;
    for (let i = 0; i < events.length; i++) {
      bytes += JSON.stringify(events[i]).length;
      if (bytes > this.fetchBytes && i > 0) return events.slice(0, i);
    }
    return events;
  }

  private chat(id: string): ChatState {
    let c = this.chats.get(id);
    if (c === undefined) {
      c = { events: [], members: new Set(), clientIds: new Map() };
      this.chats.set(id, c);
    }
    return c;
  }
}

/** A JWT-shaped token with the given `exp` (seconds); unsigned, which the client never checks anyway. */
export function fakeJwt(exp: number, sub = 'alice'): string {
  const enc = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  return `${enc({ alg: 'HS256', typ: 'JWT' })}.${enc({ sub, ws: 'acme', exp })}.sig`;
}
