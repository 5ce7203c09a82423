//! `MessageList`: a chat's messages as a user should see them, with edits and deletes applied.
//!
//! Owns: folding events into an ordered list of messages (`message` and `system` events), applying
//! `edit` and `delete` events to their targets, and merging the stored view of fetched history (whose
//! messages carry `edited` and `deleted` already) without ever going back to an older version.
//! Does not own: where events come from. A chat feeds its list every event it delivers (pushes and gap
//! repair, in seq order); `load` takes pages of history, in any order relative to live events.
//!
//! Why versions: a message's state is fixed by the seq of the last edit or delete applied to it. A
//! fetched page computed before an edit may be read after that edit was delivered; comparing `edited`
//! seqs (and a delete being final) makes applying the same information twice, or late, harmless.

import { Emitter } from './emitter.js';
import type { HeraldEvent } from './types.js';

/** One message of a list, in its latest known state. */
export interface Message {
  /** The seq of the `message` (or `system`) event. */
  readonly seq: number;
  /** `message` or `system`. */
  readonly type: string;
  /** The sender; absent only on `system` events posted without one. */
  readonly user?: string;
  /** When it was sent (ms since the Unix epoch). */
  readonly ts: number;
  /** The latest body: as sent, as last edited, or null once deleted. */
  readonly body: unknown;
  /** The sender's idempotency key, when the message was sent with one. */
  readonly client_id?: string;
  /** The seq of the latest edit applied, or undefined when never edited. */
  readonly edited?: number;
  /** True once deleted; `body` is then null. */
  readonly deleted: boolean;
}

/** What changed in a list. */
export interface MessageChange {
  /** `added`: a new message; `edited`: a new body; `deleted`: the body is gone. */
  kind: 'added' | 'edited' | 'deleted';
  message: Message;
}

/** Events of a `MessageList`. */
export interface MessageListEvents {
  /** One message was added, edited or deleted. */
  change: MessageChange;
}

/** Options of a `MessageList`. */
export interface MessageListOptions {
  /**
   * The most messages kept; past it the oldest are dropped. Default 10,000: a list that only ever grows
   * would hold a long-lived chat's whole history in memory.
   */
  maxMessages?: number;
}

/** Default of `maxMessages`. */
const DEFAULT_MAX_MESSAGES = 10_000;

/**
 * Edits and deletes whose target is not in the list yet (older than what was loaded) are remembered, up
 * to this many, so that loading that history later still shows the newest state. Beyond it the oldest
 * are forgotten: the stored view of a later fetch shows them anyway.
 */
const MAX_ORPHANS = 1_000;

/** An edit (`deleted` false, with its body) or a delete seen before its target. */
interface Orphan {
  seq: number;
  deleted: boolean;
  body: unknown;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isSeq(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v > 0;
}

/**
 * A chat's messages in seq order, with edits and deletes applied. Get a chat's own with
 * `chat.messages()`, which the chat keeps fed; or make one and feed it yourself with `apply` and `load`.
 *
 * ```ts
 * const list = general.messages();
 * list.on('change', ({ kind, message }) => redraw(message));
 * await general.watch();
 * for await (const ev of general.history(0, { until: list.first?.seq })) list.load([ev]);
 * ```
 */
export class MessageList extends Emitter<MessageListEvents> {
  /** Seqs in increasing order; inserts are nearly always appends. */
  private seqs: number[] = [];
  private readonly bySeq = new Map<number, Message>();
  private readonly orphans = new Map<number, Orphan>();
  private readonly max: number;

  constructor(opts: MessageListOptions = {}) {
    super();
    const max = opts.maxMessages ?? DEFAULT_MAX_MESSAGES;
    if (!Number.isInteger(max) || max <= 0) throw new TypeError('herald: `maxMessages` must be a positive integer');
    this.max = max;
  }

  /** The messages, oldest first. */
  get messages(): Message[] {
    return this.seqs.map((s) => this.bySeq.get(s)!);
  }

  /** How many messages the list holds. */
  get size(): number {
    return this.seqs.length;
  }

  /** The oldest message held, if any. */
  get first(): Message | undefined {
    const s = this.seqs[0];
    return s === undefined ? undefined : this.bySeq.get(s);
  }

  /** The message with this seq, if held. */
  get(seq: number): Message | undefined {
    return this.bySeq.get(seq);
  }

  /**
   * Folds one event in: a `message` or `system` is added (or merged, when already held), an `edit` or
   * `delete` changes its target. Other types, and events that are not well formed, are ignored.
   */
  apply(ev: HeraldEvent): void {
    if (!isObject(ev) || !isSeq(ev.seq)) return;
    switch (ev.type) {
      case 'message':
      case 'system':
        this.put(ev);
        return;
      case 'edit': {
        const body = ev.body as { target?: unknown; body?: unknown } | null;
        if (!isObject(body) || !isSeq(body.target)) return;
        this.change(body.target, { seq: ev.seq, deleted: false, body: body.body });
        return;
      }
      case 'delete': {
        const body = ev.body as { target?: unknown } | null;
        if (!isObject(body) || !isSeq(body.target)) return;
        this.change(body.target, { seq: ev.seq, deleted: true, body: null });
        return;
      }
      default:
        return; // reactions, reads, joins, and types of later versions change no message
    }
  }

  /** Folds in fetched events (a page of `fetch` or `history`), in the order given. */
  load(events: Iterable<HeraldEvent>): void {
    for (const ev of events) this.apply(ev);
  }

  /** Empties the list. */
  clear(): void {
    this.seqs = [];
    this.bySeq.clear();
    this.orphans.clear();
  }

  // ---- internals --------------------------------------------------------------------------------

  /** Adds a message, or merges a newer view of one already held. */
  private put(ev: HeraldEvent): void {
    let next: Message = {
      seq: ev.seq,
      type: ev.type,
      ...(ev.user !== undefined ? { user: ev.user } : {}),
      ts: ev.ts,
      body: ev.deleted === true ? null : ev.body,
      ...(ev.client_id !== undefined ? { client_id: ev.client_id } : {}),
      ...(isSeq(ev.edited) ? { edited: ev.edited } : {}),
      deleted: ev.deleted === true,
    };
    const orphan = this.orphans.get(ev.seq);
    if (orphan !== undefined) {
      this.orphans.delete(ev.seq);
      next = merged(next, orphan);
    }
    const held = this.bySeq.get(ev.seq);
    if (held !== undefined) {
      const kind = newer(held, next);
      if (kind === null) return;
      this.bySeq.set(ev.seq, next);
      this.emit('change', { kind, message: next });
      return;
    }
    if (this.seqs.length >= this.max && ev.seq < this.seqs[0]!) return; // older than what the list keeps
    this.insert(ev.seq);
    this.bySeq.set(ev.seq, next);
    this.emit('change', { kind: 'added', message: next });
    while (this.seqs.length > this.max) this.bySeq.delete(this.seqs.shift()!);
  }

  /** Applies an edit or delete to `target`, or remembers it until the target is added. */
  private change(target: number, o: Orphan): void {
    const held = this.bySeq.get(target);
    if (held === undefined) {
      const known = this.orphans.get(target);
      if (known !== undefined && (known.deleted || known.seq >= o.seq)) return;
      this.orphans.delete(target); // re-inserted last: the map's order is then oldest-first for eviction
      this.orphans.set(target, o);
      if (this.orphans.size > MAX_ORPHANS) this.orphans.delete(this.orphans.keys().next().value!);
      return;
    }
    const next = merged(held, o);
    const kind = newer(held, next);
    if (kind === null) return;
    this.bySeq.set(target, next);
    this.emit('change', { kind, message: next });
  }

  private insert(seq: number): void {
    const last = this.seqs[this.seqs.length - 1];
    if (last === undefined || seq > last) {
      this.seqs.push(seq);
      return;
    }
    let lo = 0;
    let hi = this.seqs.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.seqs[mid]! < seq) lo = mid + 1;
      else hi = mid;
    }
    this.seqs.splice(lo, 0, seq);
  }
}

/** `m` with the edit or delete `o` applied, when `o` is newer than what `m` shows. */
function merged(m: Message, o: Orphan): Message {
  if (m.deleted) return m; // a delete is final: later edits of it carry no body anyway
  if (o.deleted) return { ...m, body: null, deleted: true };
  if (m.edited !== undefined && m.edited >= o.seq) return m;
  return { ...m, body: o.body, edited: o.seq };
}

/** What `next` changes over `held`, or null when it is not newer. */
function newer(held: Message, next: Message): MessageChange['kind'] | null {
  if (held.deleted) return null;
  if (next.deleted) return 'deleted';
  if ((next.edited ?? 0) > (held.edited ?? 0)) return 'edited';
  return null;
}
