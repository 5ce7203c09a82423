//! The outbox: sends not yet acknowledged, and their retries.
//!
//! Owns: the bounded queue of unsent messages, their `client_id`s, order, and when each is tried again.
//! Does not own: the link or request bookkeeping (connection.ts, requests.ts), nor event delivery
//! (watch.ts, chat.ts).
//!
//! Why the chat keeps the caller's order: entries go out in enqueue order, and a refused one goes back to
//! its place. The server holds back the sends written behind a send it refused for now (it refuses them the
//! same way until the refused one comes again), and the outbox writes no send to a chat while an earlier
//! one to it sleeps before its retry.
//!
//! Why every send has a deadline: a chat app's user expects a message written offline to go out when the
//! link comes back, and a message that cannot go to say so, not to show "sending..." forever. So a send
//! waits through link drops, retries and `disconnected` (sent on the next `connect()`), but one not stored
//! within `sendTimeoutMs` of the call rejects with `timeout`; one written by then waits for its reply.
//!
//! Why it is safe to retry: the server stores a (chat, user, client_id) once and answers a repeat with the
//! first seq. So every send gets a `client_id` when it is queued, and keeps it for every try; a link that
//! drops after the server stored the message but before its reply arrived costs one duplicate frame, never
//! a duplicate message.

import { HeraldError } from './errors.js';
import type { RequestArgs, SeqOk } from './types.js';

/** A send's 1.2 arguments beyond chat, body and client_id (thread, quote, mentions, stream). */
export type SendExtras = Omit<RequestArgs['send'], 'chat' | 'body' | 'client_id'>;

/** The arguments of one `send` as the outbox writes it. */
export type SendArgs = SendExtras & { chat: string; body: unknown; client_id: string };

/** What the outbox needs from the client. */
export interface OutboxHost {
  /** True when a request written now goes out on a live, greeted link. */
  readonly connected: boolean;
  /** Writes a `send` request; rejects with `disconnected` when the link drops before the reply. */
  sendRequest(args: SendArgs): Promise<SeqOk>;
  /** Runs `fn` after `ms`; returns a function that cancels it. */
  schedule(fn: () => void, ms: number): () => void;
}

interface Entry {
  /** Position in enqueue order: retries go back to this place, so the queue keeps the caller's order. */
  order: number;
  chat: string;
  body: unknown;
  clientId: string;
  /** Written with every try, after `client_id`. */
  extra: SendExtras;
  /** Retries spent on `unavailable`, `internal` and timeouts (link drops and throttles are free). */
  retries: number;
  /** Cancels the deadline timer; called once the entry settles. */
  cancelDeadline: () => void;
  /** Set when the deadline passed while the entry was in flight: its reply decides, no retry follows. */
  expired: boolean;
  resolve(ok: SeqOk): void;
  reject(err: HeraldError): void;
}

/** Codes after which the same send may succeed later; each costs one of the entry's retries. */
const RETRYABLE = new Set(['unavailable', 'timeout', 'internal']);

/** Wait before retrying when the server gave no `retry_after_ms`. */
const DEFAULT_RETRY_MS = 1000;

/**
 * The most sends written and unanswered at once. Pipelining hides the round trip; more than this buys
 * nothing on one connection and only spends the server's request budget faster.
 */
const MAX_WINDOW = 32;

/**
 * Holds sends until the server acknowledges them.
 *
 * Why a window that halves on `throttled`: the server's limit is a token bucket per connection, and it
 * closes a connection (4029) that keeps sending into it. A queue flushed all at once after a reconnect
 * would hit the bucket with every send; instead the outbox stops writing for `retry_after_ms`, halves the
 * number of sends it keeps in flight, and grows it back by one per acknowledged send. A throttle is the
 * server pacing us, not the send failing, so it costs the send none of its retries.
 */
export class Outbox {
  /** Entries not yet written (offline, outside the window, or after a failed try), in enqueue order. */
  private waiting: Entry[] = [];
  /** Entries written and awaiting their reply. */
  private readonly inflight = new Set<Entry>();
  /** Entries sleeping until a retry timer fires, with the timer's cancel function. */
  private readonly delayed = new Map<Entry, () => void>();
  private nextOrder = 0;
  private closedWith: HeraldError | null = null;
  /** How many sends may be in flight now. */
  private window = MAX_WINDOW;
  /** Set while the server asked us to wait (`throttled`); cancels the timer that lifts it. */
  private cancelPause: (() => void) | null = null;

  constructor(
    private readonly host: OutboxHost,
    private readonly maxQueue: number,
    private readonly maxRetries: number,
    private readonly newClientId: () => string,
    private readonly sendTimeoutMs: number,
  ) {}

  /** Sends not yet written (the bounded part). */
  get unsentCount(): number {
    return this.waiting.length + this.delayed.size;
  }

  /** Every send not yet acknowledged. */
  get size(): number {
    return this.waiting.length + this.inflight.size + this.delayed.size;
  }

  /**
   * Queues a message. Rejects with `queue_full` when `maxQueue` sends already wait unsent: offline, that
   * bound is all that stops an application from piling up memory it cannot send. Sends in flight do not
   * count; there are at most 32 of them.
   */
  enqueue(chat: string, body: unknown, clientId: string | undefined, extra: SendExtras = {}): Promise<SeqOk> {
    if (this.closedWith !== null) return Promise.reject(this.closedWith);
    if (this.unsentCount >= this.maxQueue) {
      return Promise.reject(
        new HeraldError('queue_full', `herald: ${this.unsentCount} sends already wait to be sent (maxQueue)`, { op: 'send' }),
      );
    }
    return new Promise<SeqOk>((resolve, reject) => {
      const entry: Entry = {
        order: this.nextOrder++,
        chat,
        body,
        clientId: clientId ?? this.newClientId(),
        extra,
        retries: 0,
        resolve: (ok) => {
          entry.cancelDeadline();
          resolve(ok);
        },
        reject: (err) => {
          entry.cancelDeadline();
          reject(err);
        },
        cancelDeadline: () => {},
        expired: false,
      };
      entry.cancelDeadline = this.host.schedule(() => this.expire(entry), this.sendTimeoutMs);
      this.waiting.push(entry);
      this.flush();
    });
  }

  /**
   * The send's deadline passed: an unwritten one (waiting, or sleeping before a retry) rejects with
   * `timeout` now and is never written; one in flight is left to its reply.
   */
  private expire(entry: Entry): void {
    const err = new HeraldError(
      'timeout',
      `herald: send not stored within ${this.sendTimeoutMs} ms (sendTimeoutMs)${this.host.connected ? '' : '; the client is not connected'}`,
      { op: 'send' },
    );
    const waitingAt = this.waiting.indexOf(entry);
    if (waitingAt >= 0) {
      this.waiting.splice(waitingAt, 1);
      entry.reject(err);
      return;
    }
    const cancelRetry = this.delayed.get(entry);
    if (cancelRetry !== undefined) {
      cancelRetry();
      this.delayed.delete(entry);
      entry.reject(err);
      // Sends to its chat held behind it may go now.
      this.flush();
      return;
    }
    if (this.inflight.has(entry)) entry.expired = true;
  }

  /**
   * Writes waiting sends, in order, while the link is up, the window has room and no throttle holds. A send
   * to a chat with an earlier send sleeping before its retry stays back: written now, it would be stored
   * before that one (the server holds back sends written behind a refused one, but only until the refused
   * one comes again, and this one would come first).
   */
  flush(): void {
    // Per chat, the earliest send sleeping before its retry.
    const asleep = new Map<string, number>();
    for (const e of this.delayed.keys()) asleep.set(e.chat, Math.min(e.order, asleep.get(e.chat) ?? e.order));
    let i = 0;
    while (
      this.host.connected &&
      this.cancelPause === null &&
      this.inflight.size < this.window &&
      i < this.waiting.length
    ) {
      const entry = this.waiting[i]!;
      if ((asleep.get(entry.chat) ?? Infinity) < entry.order) {
        i++;
        continue;
      }
      this.waiting.splice(i, 1);
      this.dispatch(entry);
    }
  }

  /** Rejects everything with `err` and refuses further sends (the client was closed). */
  close(err: HeraldError): void {
    this.closedWith = err;
    this.cancelPause?.();
    this.cancelPause = null;
    const all = [...this.waiting, ...this.delayed.keys()];
    for (const cancel of this.delayed.values()) cancel();
    this.waiting = [];
    this.delayed.clear();
    for (const e of all) e.reject(err);
    // In-flight sends are rejected by their requests, which the client fails with the same error.
  }

  private dispatch(entry: Entry): void {
    this.inflight.add(entry);
    this.host.sendRequest({ chat: entry.chat, body: entry.body, client_id: entry.clientId, ...entry.extra }).then(
      (ok) => {
        this.inflight.delete(entry);
        this.window = Math.min(MAX_WINDOW, this.window + 1);
        entry.resolve(ok);
        this.flush();
      },
      (err: unknown) => {
        this.inflight.delete(entry);
        this.failed(entry, err);
        this.flush();
      },
    );
  }

  private failed(entry: Entry, err: unknown): void {
    const e = err instanceof HeraldError ? err : new HeraldError('internal', String(err), { op: 'send' });
    if (this.closedWith !== null) {
      entry.reject(this.closedWith);
      return;
    }
    if (entry.expired) {
      // Past its deadline: no further try. A link drop leaves the outcome unknown, which `timeout` says.
      const unknown = e.code === 'disconnected' || e.code === 'timeout';
      entry.reject(
        unknown
          ? new HeraldError('timeout', `herald: send not stored within ${this.sendTimeoutMs} ms (sendTimeoutMs); its last try's outcome is unknown`, { op: 'send' })
          : e,
      );
      return;
    }
    if (e.code === 'disconnected') {
      // The outcome is unknown; the retry with the same client_id settles it on the next link.
      this.requeue(entry);
      return;
    }
    if (e.code === 'throttled') {
      // Once per pause: the sends written with this one are refused with it (and, behind a refused send, so
      // is every later send to its chat), which is one signal, not one per send.
      if (this.cancelPause === null) this.window = Math.max(1, Math.floor(this.window / 2));
      this.requeue(entry);
      this.pause(e.retryAfterMs ?? DEFAULT_RETRY_MS);
      return;
    }
    if (RETRYABLE.has(e.code) && entry.retries < this.maxRetries) {
      entry.retries++;
      const cancel = this.host.schedule(() => {
        this.delayed.delete(entry);
        this.requeue(entry);
        this.flush();
      }, e.retryAfterMs ?? DEFAULT_RETRY_MS);
      this.delayed.set(entry, cancel);
      return;
    }
    entry.reject(e);
  }

  /** Stops writing for `ms` (a later throttle may extend it). */
  private pause(ms: number): void {
    this.cancelPause?.();
    this.cancelPause = this.host.schedule(() => {
      this.cancelPause = null;
      this.flush();
    }, ms);
  }

  /** Puts an entry back at its original place among the waiting ones. */
  private requeue(entry: Entry): void {
    let i = this.waiting.length;
    while (i > 0 && this.waiting[i - 1]!.order > entry.order) i--;
    this.waiting.splice(i, 0, entry);
  }
}

/**
 * A random idempotency key. `crypto.getRandomValues` exists in every browser (secure context or not)
 * and in Node 20; `randomUUID` does not exist on plain-http pages, so it is not used.
 */
export function newClientId(random: () => number = Math.random): string {
  const bytes = new Uint8Array(16);
  const c = (globalThis as { crypto?: { getRandomValues?(a: Uint8Array): Uint8Array } }).crypto;
  if (c?.getRandomValues !== undefined) {
    c.getRandomValues(bytes);
  } else {
    for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(random() * 256);
  }
  let hex = '';
  for (const b of bytes) hex += b.toString(16).padStart(2, '0');
  return `c-${hex}`;
}
