//! An in-process fake herald for unit tests: a WebSocket class plus a tiny protocol server behind it.
//!
//! Owns: enough of docs/protocol.md (hello, join, watch with a bounded replay, unwatch, send with client_id
//! dedupe, react, read, fetch paging bounded in count and bytes, ping; from 1.1 edit and delete with the
//! stored view, typing with its 2 s window, presence with per-user pushes, inbox with live pushes; from
//! 1.2 profiles, members, threads and quotes, mentions, pins, reaction counts and streams with `append`
//! pushes, each in the stored view and the inbox counts, files (with fake-files.ts's storage) and search) to
//! drive the client, plus knobs a real server does not have: refuse connects, accept them and never answer
//! the upgrade, freeze one node (a host of the URL) as SIGSTOP does, stop answering pings, hold
//! pushes back, intercept any request, cut a link with any close code, close with 4008 when one frame
//! overflows the outbound queue. Each connection acts as the user `userFor(token)` names.
//! Does not own: timing. Everything is delivered on microtasks, so tests drive time with fake timers.

import type { ChatProfile, HeraldEvent } from '../../src/types.js';
import { FakeFiles, FileRuleError } from './fake-files.js';
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
  /** The user this connection acts as, set by `hello`. */
  user = '';
  /** Set by `inbox` with `live: true`. */
  inboxLive = false;

  constructor(
    readonly url: string,
    private readonly server: FakeHerald,
  ) {
    server.sockets.push(this);
    // A hanging connect: the TCP connection is accepted (by a frozen process's kernel, say) and the
    // upgrade is never answered. The socket stays CONNECTING until the client gives up on it.
    if (server.hang || server.frozen.has(new URL(url).host)) return;
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
    this.server.gone(this);
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
    this.server.gone(this);
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
  /** Each member's read position. */
  reads: Map<string, number>;
  /** When each member's typing was last pushed (ms). */
  typedAt: Map<string, number>;
  /** 1.2: the chat's profile and the seq of its latest `profile` event. */
  profile: ChatProfile;
  profileSeq: number;
  /** 1.2: pinned message -> the pin event's seq and who pinned it; in pin order. */
  pins: Map<number, { seq: number; user: string }>;
  /** 1.2: message -> the latest `pin` event's seq of it. */
  pinSeqs: Map<number, number>;
  /** 1.2: message -> emoji -> users whose reaction is on. */
  reactions: Map<number, Map<string, Set<string>>>;
  /** 1.2: `${user}\u0000${root}` -> the user's read position in that thread. */
  threadReads: Map<string, number>;
}

/** The most mentions a message may carry (protocol 1.2). */
const MAX_MENTIONS = 50;

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
  /** New sockets stay CONNECTING forever: accepted, never upgraded. */
  hang = false;
  /** Hosts (of the socket URL) frozen by `freeze`. */
  readonly frozen = new Set<string>();
  /** When false, `ping` requests get no reply. */
  answerPings = true;
  /** When false, stored events are not pushed to watchers (tests push by hand). */
  autoPush = true;
  /** Which tokens `hello` accepts. */
  acceptToken: (token: string) => boolean = () => true;
  /** The message of the `unauthenticated` reply to a refused token: herald says there what is wrong. */
  refusal: (token: string) => string = () => 'bad token';
  /** Runs before the built-in handler for every request after hello. */
  intercept: Interceptor | null = null;
  /** Every token presented in a hello, in order. */
  readonly tokens: string[] = [];
  /** The user of connections whose token `userFor` does not name another. */
  user = 'alice';
  /** The user a `hello` token stands for: `user:<name>` names one, anything else is `user`. */
  userFor: (token: string) => string = (token) => (token.startsWith('user:') ? token.slice(5) : this.user);
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
  /** When false, `append` requests are stored but not pushed (tests push appends by hand). */
  pushAppends = true;
  /** 1.2: the file storage; `files.fetch` is what a client's `fetch` option gets. */
  readonly files = new FakeFiles();
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

  /**
   * Freezes the node at `host` (`name:port` of the URL), as SIGSTOP does to a process: its links carry
   * nothing either way and report no close, and new connections to it are accepted and never upgraded.
   * The other hosts go on serving the same chats, as the nodes of one cell do.
   */
  freeze(host: string): void {
    this.frozen.add(host);
    for (const s of this.sockets) if (new URL(s.url).host === host) s.dead = true;
  }

  /** The host (`name:port`) a socket was opened to. */
  static hostOf(socket: FakeSocket): string {
    return new URL(socket.url).host;
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
  store(chat: string, type: HeraldEvent['type'], body: unknown, user = this.user, clientId?: string, extra: Partial<HeraldEvent> = {}): HeraldEvent {
    const c = this.chat(chat);
    const ev: HeraldEvent = { seq: c.events.length + 1, type, user, ts: this.ts++, body };
    if (clientId !== undefined) ev.client_id = clientId;
    Object.assign(ev, extra);
    c.events.push(ev);
    if (this.autoPush) for (const s of this.sockets) if (s.watching.has(chat)) this.push(s, chat, ev);
    this.inboxPush(chat);
    return ev;
  }

  /** Users with a connection watching `chat`, sorted. */
  present(chat: string): string[] {
    const users = new Set<string>();
    for (const s of this.sockets) if (s.readyState === OPEN && s.watching.has(chat)) users.add(s.user);
    return [...users].sort();
  }

  /** This user's inbox entries, latest activity first. */
  inbox(user: string): Array<{
    chat: string;
    seq: number;
    ts: number;
    read: number;
    unread: number;
    last: HeraldEvent | null;
    profile: ChatProfile;
    threads: number;
    mentions: number;
  }> {
    const out = [];
    for (const [id, c] of this.chats) {
      if (!c.members.has(user)) continue;
      const read = c.reads.get(user) ?? 0;
      const all = c.events.filter((e) => e.type === 'message');
      const messages = all.filter((e) => e.thread === undefined);
      const fromOthers = (e: HeraldEvent) => e.seq > read && e.user !== user && e.deleted !== true;
      out.push({
        chat: id,
        seq: c.events.length,
        ts: c.events[c.events.length - 1]?.ts ?? 0,
        read,
        unread: messages.filter(fromOthers).length,
        last: messages[messages.length - 1] ?? null,
        profile: { ...c.profile },
        threads: this.followed(id, user).reduce((n, t) => n + t.unread, 0),
        mentions: all.filter((e) => fromOthers(e) && e.mentions?.includes(user) === true).length,
      });
    }
    return out.sort((a, b) => b.ts - a.ts || (a.chat < b.chat ? -1 : 1));
  }

  /** 1.2: the threads of `chat` that `user` follows, as `threads` entries, latest reply first. */
  followed(chat: string, user: string): Array<{ chat: string; root: HeraldEvent; last: HeraldEvent; read: number; unread: number }> {
    const c = this.chat(chat);
    const out = [];
    for (const root of c.events) {
      if (root.type !== 'message' || root.thread !== undefined) continue;
      const replies = c.events.filter((e) => e.type === 'message' && e.thread === root.seq);
      const alive = replies.filter((e) => e.deleted !== true);
      if (alive.length === 0) continue;
      const involved = [root, ...replies].some((e) => e.user === user || e.mentions?.includes(user) === true);
      if (!involved) continue;
      const read = c.threadReads.get(`${user}\u0000${root.seq}`) ?? 0;
      out.push({ chat, root, last: alive[alive.length - 1]!, read, unread: alive.filter((e) => e.seq > read && e.user !== user).length });
    }
    return out.sort((a, b) => b.last.seq - a.last.seq);
  }

  /** A socket closed: it no longer watches anything, which may end its user's presence. */
  gone(conn: FakeSocket): void {
    const chats = [...conn.watching];
    conn.watching.clear();
    for (const chat of chats) this.presenceChanged(chat, conn, false);
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
        conn.user = this.userFor(frame.token);
        conn.serverSend({
          id: frame.id,
          ok: { user: conn.user, workspace: 'acme', node: 'fake-1', session: `s${this.sockets.length}`, heartbeat_ms: this.heartbeatMs, protocol: '1.2' },
        });
      } else {
        conn.serverSend({ id: frame.id, err: { code: 'unauthenticated', message: this.refusal(String(frame.token)) } });
        // Behind the reply, as herald queues it, so that the client reads the reply first.
        queueMicrotask(() => conn.serverClose(4001, 'unauthenticated'));
      }
      return;
    }
    if (this.intercept?.(conn, frame)) return;
    const ok = (v: unknown) => conn.serverSend({ id: frame.id, ok: v });
    const chatId = frame.chat as string;
    const user = conn.user;
    const err = (code: string, message: string) => conn.serverSend({ id: frame.id, err: { code, message } });
    switch (frame.op) {
      case 'ping':
        if (this.answerPings) ok({});
        return;
      case 'join': {
        const c = this.chat(chatId);
        if (!c.members.has(user)) {
          c.members.add(user);
          this.store(chatId, 'join', {}, user);
        }
        ok({ chat: chatId, seq: c.events.length, members: c.members.size, profile: { ...c.profile } });
        return;
      }
      case 'watch': {
        const c = this.chat(chatId);
        const was = conn.watching.has(chatId);
        conn.watching.add(chatId);
        ok({ chat: chatId, seq: c.events.length });
        if (!was) this.presenceChanged(chatId, conn, true);
        if (typeof frame.after === 'number' && this.autoPush) {
          const backlog = c.events.slice(frame.after);
          for (const ev of backlog.slice(0, this.replayEvents)) this.push(conn, chatId, ev);
          if (backlog.length > this.replayEvents) conn.serverSend({ ev: 'notify', chat: chatId, seq: c.events.length });
        }
        return;
      }
      case 'leave': {
        const c = this.chat(chatId);
        if (c.members.delete(user)) {
          this.store(chatId, 'leave', {}, user);
          for (const s of this.sockets) if (s.user === user && s.inboxLive) s.serverSend({ ev: 'inbox', chat: chatId, seq: c.events.length, ts: this.ts, unread: 0, left: true });
        }
        for (const s of this.sockets) {
          if (s.user === user && s.watching.delete(chatId)) this.presenceChanged(chatId, s, false);
        }
        ok({});
        return;
      }
      case 'unwatch':
        if (conn.watching.delete(chatId)) this.presenceChanged(chatId, conn, false);
        ok({});
        return;
      case 'send': {
        const c = this.chat(chatId);
        const cid = typeof frame.client_id === 'string' ? frame.client_id : undefined;
        const key = `${user}\u0000${cid}`;
        const seen = cid === undefined ? undefined : c.clientIds.get(key);
        if (seen !== undefined) {
          ok({ seq: seen });
          return;
        }
        const extra: Partial<HeraldEvent> = {};
        const message = (seq: unknown) => (typeof seq === 'number' ? c.events[seq - 1] : undefined);
        if (frame.thread !== undefined) {
          const root = message(frame.thread);
          if (root === undefined || root.type !== 'message' || root.deleted === true) return err('not_found', 'no such root');
          if (root.thread !== undefined) return err('bad_request', 'threads do not nest');
          extra.thread = root.seq;
        }
        if (frame.quote !== undefined) {
          const quoted = message(frame.quote);
          if (quoted === undefined || quoted.type !== 'message') return err('not_found', 'no such message to quote');
          extra.quote = quoted.seq;
        }
        if (frame.mentions !== undefined) {
          const mentions = [...new Set(frame.mentions as string[])];
          if (mentions.length > MAX_MENTIONS) return err('bad_request', 'too many mentions');
          extra.mentions = mentions;
        }
        if (frame.stream === true) {
          const b = frame.body as { text?: unknown } | null;
          if (b === null || typeof b !== 'object' || typeof b.text !== 'string') return err('bad_request', 'a stream needs a text');
          extra.stream = 'open';
        }
        if (frame.files !== undefined) {
          const files = this.fileRule(() => this.files.check(frame.files, chatId, user, null), err);
          if (files === null) return;
          if (files.length > 0) extra.files = files;
        }
        const ev = this.store(chatId, 'message', frame.body, user, cid, extra);
        if (frame.files !== undefined) this.files.attach(ev.seq, frame.files as string[]);
        if (cid !== undefined) c.clientIds.set(key, ev.seq);
        if (ev.thread !== undefined) this.recountReplies(chatId, ev.thread);
        ok({ seq: ev.seq });
        return;
      }
      case 'react': {
        const c = this.chat(chatId);
        const target = c.events[(frame.target as number) - 1];
        if (target !== undefined && target.type === 'message') {
          const byEmoji = c.reactions.get(target.seq) ?? new Map<string, Set<string>>();
          c.reactions.set(target.seq, byEmoji);
          const users = byEmoji.get(frame.emoji as string) ?? new Set<string>();
          byEmoji.set(frame.emoji as string, users);
          if (frame.on === false) users.delete(user);
          else users.add(user);
          const counts: Record<string, number> = {};
          for (const [emoji, us] of byEmoji) if (us.size > 0) counts[emoji] = us.size;
          if (Object.keys(counts).length > 0) target.reactions = counts;
          else delete target.reactions;
        }
        ok({ seq: this.store(chatId, 'reaction', { target: frame.target, emoji: frame.emoji, on: frame.on ?? true }, user).seq });
        return;
      }
      case 'read': {
        const c = this.chat(chatId);
        const to = frame.seq as number;
        if (typeof frame.thread === 'number') {
          const key = `${user}\u0000${frame.thread}`;
          if (to > (c.threadReads.get(key) ?? 0)) {
            c.threadReads.set(key, to);
            this.store(chatId, 'read', { seq: to, thread: frame.thread }, user);
          }
          ok({ seq: c.threadReads.get(key) ?? 0 });
          return;
        }
        if (to > (c.reads.get(user) ?? 0)) {
          c.reads.set(user, to);
          this.store(chatId, 'read', { seq: to }, user);
        }
        ok({ seq: c.reads.get(user) ?? 0 });
        return;
      }
      case 'edit':
      case 'delete': {
        const c = this.chat(chatId);
        const target = c.events[(frame.target as number) - 1];
        if (target === undefined || target.type !== 'message' || target.deleted === true) {
          err('not_found', 'no such message');
          return;
        }
        if (target.user !== user) {
          err('forbidden', "another user's message");
          return;
        }
        if (frame.op === 'edit') {
          if (target.stream === 'open') return err('bad_request', 'an open stream is edited by append');
          const extra: Partial<HeraldEvent> = {};
          if (frame.mentions !== undefined) extra.mentions = [...new Set(frame.mentions as string[])];
          if (frame.files !== undefined) {
            const files = this.fileRule(() => this.files.check(frame.files, chatId, user, target.seq), err);
            if (files === null) return;
            extra.files = files;
            this.files.attach(target.seq, frame.files as string[]);
            if (files.length > 0) target.files = files;
            else delete target.files;
          }
          // Before the event is stored, so that its inbox pushes count the new mentions.
          if (extra.mentions !== undefined) {
            if (extra.mentions.length > 0) target.mentions = extra.mentions;
            else delete target.mentions;
          }
          target.body = frame.body;
          const ev = this.store(chatId, 'edit', { target: target.seq, body: frame.body }, user, undefined, extra);
          target.edited = ev.seq;
          ok({ seq: ev.seq });
        } else {
          delete target.pinned;
          delete target.reactions;
          c.pins.delete(target.seq);
          if (target.stream === 'open') target.stream = 'done';
          this.files.drop(target.seq);
          delete target.files;
          // Erased before the delete event is stored, so that its inbox pushes count without it.
          target.body = null;
          target.deleted = true;
          delete target.edited;
          for (const e of c.events) {
            const b = e.body as { target?: number } | null;
            if (e.type === 'edit' && b?.target === target.seq) e.body = { target: target.seq, body: null };
          }
          const ev = this.store(chatId, 'delete', { target: target.seq }, user);
          if (target.thread !== undefined) this.recountReplies(chatId, target.thread);
          ok({ seq: ev.seq });
        }
        return;
      }
      case 'profile': {
        const c = this.chat(chatId);
        if (!c.members.has(user)) return err('forbidden', 'not a member');
        const next: ChatProfile = { ...c.profile };
        if (frame.name !== undefined) next.name = frame.name as string | null;
        if (frame.image !== undefined) next.image = frame.image as string | null;
        if (frame.data !== undefined) next.data = frame.data;
        if (JSON.stringify(next) === JSON.stringify(c.profile)) return ok({ seq: c.profileSeq });
        c.profile = next;
        c.profileSeq = this.store(chatId, 'profile', { ...next }, user).seq;
        ok({ seq: c.profileSeq });
        return;
      }
      case 'members': {
        const c = this.chat(chatId);
        const all = [...c.members].sort().map((u) => ({ user: u, read: c.reads.get(u) ?? 0 }));
        const limit = Math.min(typeof frame.limit === 'number' ? frame.limit : 100, 1000);
        const from = typeof frame.cursor === 'string' ? Number(frame.cursor) : 0;
        const more = from + limit < all.length;
        const page = { members: all.slice(from, from + limit), count: all.length, more };
        ok(more ? { ...page, cursor: String(from + limit) } : page);
        return;
      }
      case 'threads': {
        const chats = typeof frame.chat === 'string' ? [frame.chat] : [...this.chats.keys()].filter((id) => this.chat(id).members.has(user));
        const all = chats.flatMap((id) => this.followed(id, user)).sort((a, b) => b.last.ts - a.last.ts);
        const limit = Math.min(typeof frame.limit === 'number' ? frame.limit : 20, 100);
        const from = typeof frame.cursor === 'string' ? Number(frame.cursor) : 0;
        const more = from + limit < all.length;
        ok(more ? { threads: all.slice(from, from + limit), more, cursor: String(from + limit) } : { threads: all.slice(from, from + limit), more });
        return;
      }
      case 'pin': {
        const c = this.chat(chatId);
        const target = c.events[(frame.target as number) - 1];
        if (target === undefined || target.type !== 'message' || target.deleted === true) return err('not_found', 'no such message');
        const on = frame.on !== false;
        if (c.pins.has(target.seq) === on) return ok({ seq: c.pinSeqs.get(target.seq) ?? 0 });
        if (on) target.pinned = true;
        else delete target.pinned;
        const ev = this.store(chatId, 'pin', { target: target.seq, on }, user);
        c.pinSeqs.set(target.seq, ev.seq);
        if (on) c.pins.set(target.seq, { seq: ev.seq, user });
        else c.pins.delete(target.seq);
        ok({ seq: ev.seq });
        return;
      }
      case 'pins': {
        const c = this.chat(chatId);
        const pins = [...c.pins].reverse().map(([target, p]) => ({ seq: p.seq, user: p.user, message: c.events[target - 1] }));
        ok({ pins });
        return;
      }
      case 'reactions': {
        const c = this.chat(chatId);
        const reactions: Record<string, string[]> = {};
        for (const [emoji, users] of c.reactions.get(frame.target as number) ?? []) if (users.size > 0) reactions[emoji] = [...users].sort();
        ok({ reactions });
        return;
      }
      case 'append': {
        const c = this.chat(chatId);
        const target = c.events[(frame.target as number) - 1];
        if (target === undefined || target.type !== 'message') return err('not_found', 'no such message');
        if (target.user !== user) return err('forbidden', "another user's stream");
        if (target.stream !== 'open') return err('bad_request', `message ${target.seq} is not an open stream`);
        const body = target.body as { text: string };
        const at = body.text.length;
        const text = frame.text as string;
        target.body = { ...body, text: body.text + text };
        if (this.pushAppends && text.length > 0) {
          for (const s of this.sockets) if (s.watching.has(chatId)) s.serverSend({ ev: 'append', chat: chatId, target: target.seq, text, at });
        }
        if (frame.done === true) {
          target.stream = 'done';
          const ev = this.store(chatId, 'edit', { target: target.seq, body: target.body }, user);
          target.edited = ev.seq;
        }
        ok({});
        return;
      }
      case 'upload': {
        if (!this.chat(chatId).members.has(user)) return err('forbidden', 'not a member');
        const answer = this.fileRule(() => this.files.upload(chatId, user, frame), err);
        if (answer !== null) ok(answer);
        return;
      }
      case 'search': {
        const results = this.search(user, frame);
        if (typeof results === 'string') return err(results, `search: ${results}`);
        const limit = Math.min(typeof frame.limit === 'number' ? frame.limit : 20, 100);
        const from = typeof frame.cursor === 'string' ? Number(frame.cursor) : 0;
        const more = from + limit < results.length;
        const page = results.slice(from, from + limit);
        ok(more ? { results: page, more, cursor: String(from + limit) } : { results: page, more });
        return;
      }
      case 'typing': {
        const c = this.chat(chatId);
        const now = Date.now();
        const at = c.typedAt.get(user);
        if (at === undefined || now - at >= 2000) {
          c.typedAt.set(user, now);
          for (const s of this.sockets) if (s.user !== user && s.watching.has(chatId)) s.serverSend({ ev: 'typing', chat: chatId, user });
        }
        ok({});
        return;
      }
      case 'presence': {
        const users = this.present(chatId);
        ok({ count: users.length, users: users.slice(0, 100) });
        return;
      }
      case 'inbox': {
        const all = this.inbox(user);
        const limit = Math.min(typeof frame.limit === 'number' ? frame.limit : 50, 200);
        const from = typeof frame.cursor === 'string' ? Number(frame.cursor) : 0;
        const chats = all.slice(from, from + limit);
        const more = from + limit < all.length;
        ok(more ? { chats, more, cursor: String(from + limit) } : { chats, more });
        if (frame.live === true) conn.inboxLive = true;
        return;
      }
      case 'fetch': {
        const c = this.chat(chatId);
        const limit = Math.min(typeof frame.limit === 'number' ? frame.limit : 100, 500);
        const after = frame.after as number;
        if (typeof frame.thread === 'number') {
          const replies = c.events.filter((e) => e.type === 'message' && e.thread === frame.thread && e.seq > after);
          const events = replies.slice(0, limit);
          ok({ events, seq: c.events.length, more: events.length < replies.length });
          return;
        }
        const events = this.withinBytes(c.events.slice(after, after + limit));
        const end = events.length > 0 ? events[events.length - 1]!.seq : after;
        ok({ events, seq: c.events.length, more: end < c.events.length });
        return;
      }
      default:
        conn.serverSend({ id: frame.id, err: { code: 'bad_request', message: `unknown op ${frame.op}` } });
    }
  }

  /** Runs a file rule; answers its error and returns null when it fails. */
  private fileRule<T>(rule: () => T, err: (code: string, message: string) => void): T | null {
    try {
      return rule();
    } catch (e) {
      if (!(e instanceof FileRuleError)) throw e;
      err(e.code, e.message);
      return null;
    }
  }

  /**
   * 1.2: `user`'s messages matching the `search` frame, newest first, each with its chat; or the error
   * code. Case folding is approximated by `toLowerCase`, enough for the tests' words.
   */
  private search(user: string, frame: Frame): Array<HeraldEvent & { chat: string }> | string {
    const query = typeof frame.query === 'string' ? frame.query : '';
    const terms = query.toLowerCase().split(/\s+/).filter((t) => t !== '');
    if (terms.length === 0 || [...query].length > 200) return 'bad_request';
    const chats = typeof frame.chat === 'string' ? [frame.chat] : [...this.chats.keys()];
    if (typeof frame.chat === 'string' && !this.chat(frame.chat).members.has(user)) return 'forbidden';
    const out: Array<HeraldEvent & { chat: string }> = [];
    for (const id of chats) {
      const c = this.chat(id);
      if (!c.members.has(user)) continue;
      for (const e of c.events) {
        if (e.type !== 'message' || e.deleted === true) continue;
        const text = strings(e.body).join(' ').toLowerCase();
        if (terms.every((t) => text.includes(t))) out.push({ chat: id, ...e });
      }
    }
    return out.sort((a, b) => b.ts - a.ts || (a.chat < b.chat ? -1 : a.chat > b.chat ? 1 : b.seq - a.seq));
  }

  /** `conn` started or stopped watching `chat`: push its user's presence change to the chat's watchers. */
  private presenceChanged(chat: string, conn: FakeSocket, watching: boolean): void {
    const others = this.sockets.some((s) => s !== conn && s.readyState === OPEN && s.user === conn.user && s.watching.has(chat));
    if (others) return; // another connection of the user keeps them present
    for (const s of this.sockets) {
      if (s.watching.has(chat)) s.serverSend({ ev: 'presence', chat, user: conn.user, present: watching });
    }
  }

  /** Pushes `chat`'s inbox entry to the live inbox connections of its members. */
  private inboxPush(chat: string): void {
    const c = this.chat(chat);
    for (const s of this.sockets) {
      if (!s.inboxLive || !c.members.has(s.user)) continue;
      const e = this.inbox(s.user).find((x) => x.chat === chat);
      if (e !== undefined) s.serverSend({ ev: 'inbox', chat, seq: e.seq, ts: e.ts, unread: e.unread, threads: e.threads, mentions: e.mentions });
    }
  }

  /** 1.2: sets a root's `replies` in the stored view from its replies not deleted. */
  private recountReplies(chat: string, root: number): void {
    const c = this.chat(chat);
    const r = c.events[root - 1];
    if (r === undefined) return;
    const alive = c.events.filter((e) => e.type === 'message' && e.thread === root && e.deleted !== true);
    if (alive.length > 0) r.replies = { count: alive.length, last: alive[alive.length - 1]!.seq };
    else delete r.replies;
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
      c = {
        events: [],
        members: new Set(),
        clientIds: new Map(),
        reads: new Map(),
        typedAt: new Map(),
        profile: { name: null, image: null, data: null },
        profileSeq: 0,
        pins: new Map(),
        pinSeqs: new Map(),
        reactions: new Map(),
        threadReads: new Map(),
      };
      this.chats.set(id, c);
    }
    return c;
  }
}

/** Every string value in `v`, depth first (a message's text, as search reads it). */
function strings(v: unknown): string[] {
  if (typeof v === 'string') return [v];
  if (Array.isArray(v)) return v.flatMap(strings);
  if (typeof v === 'object' && v !== null) return Object.values(v).flatMap(strings);
  return [];
}

/** A JWT-shaped token with the given `exp` (seconds); unsigned, which the client never checks anyway. */
export function fakeJwt(exp: number, sub = 'alice'): string {
  const enc = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  return `${enc({ alg: 'HS256', typ: 'JWT' })}.${enc({ sub, ws: 'acme', exp })}.sig`;
}
