//! The outbox: sends not yet acknowledged, and their retries.
//!
//! Owns: the bounded queue of unsent messages, their `client_id`s, order, and when each is tried again.
//! Does not own: the link or request bookkeeping (client.ts), nor event delivery (chat.ts).
//!
//! Why it is safe to retry: the server stores a (chat, user, client_id) once and answers a repeat with the
//! first seq. So every send gets a `client_id` when it is queued, and keeps it for every try; a link that
//! drops after the server stored the message but before its reply arrived costs one duplicate frame, never
//! a duplicate message.

import { HeraldError } from './errors.js';
import type { SeqOk } from './types.js';

/** What the outbox needs from the client. */
export interface OutboxHost {
  /** True when a request written now goes out on a live, greeted link. */
  readonly connected: boolean;
  /** Writes a `send` request; rejects with `disconnected` when the link drops before the reply. */
  sendRequest(args: { chat: string; body: unknown; client_id: string }): Promise<SeqOk>;
  /** Runs `fn` after `ms`; returns a function that cancels it. */
  schedule(fn: () => void, ms: number): () => void;
}

interface Entry {
  /** Position in enqueue order: retries go back to this place, so the queue keeps the caller's order. */
  order: number;
  chat: string;
  body: unknown;
  clientId: string;
  /** Retries spent on `throttled`, `unavailable` and timeouts (link drops are free). */
  retries: number;
  resolve(ok: SeqOk): void;
  reject(err: HeraldError): void;
}

/** Codes after which the same send may succeed later; each costs one of the entry's retries. */
const RETRYABLE = new Set(['throttled', 'unavailable', 'timeout', 'internal']);

/** Wait before retrying when the server gave no `retry_after_ms`. */
const DEFAULT_RETRY_MS = 1000;

/** Holds sends until the server acknowledges them. */
export class Outbox {
  /** Entries not written on the current link, in enqueue order. */
  private waiting: Entry[] = [];
  /** Entries written and awaiting their reply. */
  private readonly inflight = new Set<Entry>();
  /** Entries sleeping until a retry timer fires, with the timer's cancel function. */
  private readonly delayed = new Map<Entry, () => void>();
  private nextOrder = 0;
  private closedWith: HeraldError | null = null;

  constructor(
    private readonly host: OutboxHost,
    private readonly maxQueue: number,
    private readonly maxRetries: number,
    private readonly newClientId: () => string,
  ) {}

  /** Sends waiting to be written (the bounded part). */
  get waitingCount(): number {
    return this.waiting.length;
  }

  /** Every send not yet acknowledged. */
  get size(): number {
    return this.waiting.length + this.inflight.size + this.delayed.size;
  }

  /**
   * Queues a message. Rejects with `queue_full` when `maxQueue` sends already wait unsent: while offline
   * that bound is all that stops an application from piling up memory it cannot send. Written sends do
   * not count, since the server answers them within a round trip.
   */
  enqueue(chat: string, body: unknown, clientId: string | undefined): Promise<SeqOk> {
    if (this.closedWith !== null) return Promise.reject(this.closedWith);
    if (this.waiting.length >= this.maxQueue) {
      return Promise.reject(
        new HeraldError('queue_full', `herald: ${this.waiting.length} sends already wait to be sent (maxQueue)`, { op: 'send' }),
      );
    }
    return new Promise<SeqOk>((resolve, reject) => {
      this.waiting.push({
        order: this.nextOrder++,
        chat,
        body,
        clientId: clientId ?? this.newClientId(),
        retries: 0,
        resolve,
        reject,
      });
      this.flush();
    });
  }

  /** Writes every waiting send, in order, while the link is up. Called on connect and on each enqueue. */
  flush(): void {
    while (this.host.connected && this.waiting.length > 0) {
      this.dispatch(this.waiting.shift()!);
    }
  }

  /** Rejects everything with `err` and refuses further sends (the client was closed). */
  close(err: HeraldError): void {
    this.closedWith = err;
    const all = [...this.waiting, ...this.delayed.keys()];
    for (const cancel of this.delayed.values()) cancel();
    this.waiting = [];
    this.delayed.clear();
    for (const e of all) e.reject(err);
    // In-flight sends are rejected by their requests, which the client fails with the same error.
  }

  private dispatch(entry: Entry): void {
    this.inflight.add(entry);
    this.host.sendRequest({ chat: entry.chat, body: entry.body, client_id: entry.clientId }).then(
      (ok) => {
        this.inflight.delete(entry);
        entry.resolve(ok);
      },
      (err: unknown) => {
        this.inflight.delete(entry);
        this.failed(entry, err);
      },
    );
  }

  private failed(entry: Entry, err: unknown): void {
    const e = err instanceof HeraldError ? err : new HeraldError('internal', String(err), { op: 'send' });
    if (this.closedWith !== null) {
      entry.reject(this.closedWith);
      return;
    }
    if (e.code === 'disconnected') {
      // The outcome is unknown; the retry with the same client_id settles it on the next link.
      this.requeue(entry);
      return;
    }
    if (RETRYABLE.has(e.code) && entry.retries < this.maxRetries) {
      entry.retries++;
      const cancel = this.host.schedule(() => {
        this.delayed.delete(entry);
        this.requeue(entry);
      }, e.retryAfterMs ?? DEFAULT_RETRY_MS);
      this.delayed.set(entry, cancel);
      return;
    }
    entry.reject(e);
  }

  /** Puts an entry back at its original place and writes it if the link is up. */
  private requeue(entry: Entry): void {
    let i = this.waiting.length;
    while (i > 0 && this.waiting[i - 1]!.order > entry.order) i--;
    this.waiting.splice(i, 0, entry);
    this.flush();
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
