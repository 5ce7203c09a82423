//! `MessageList`: a chat's messages as a user should see them, with every later event applied.
//!
//! Owns: folding events into an ordered list of messages (`message` and `system` events), applying
//! `edit` and `delete` events to their targets, and merging the stored view of fetched history (whose
//! messages carry `edited` and `deleted` already) without ever going back to an older version. From 1.2:
//! thread replies kept apart from the main list (a thread view per root) and counted in their root's
//! `replies`; reaction counts; pins; mentions and files replaced by edits; streamed text from `append` pushes, with a
//! refetch when a chunk does not fit; the chat's profile.
//! Does not own: where events come from (a chat feeds its list every event it delivers, pushes and gap
//! repair, in seq order; `load` takes pages of history, in any order relative to live events), nor the
//! rule of each single transition (message.ts).
//!
//! Why versions: a message's state is fixed by the seq of the last edit or delete applied to it. A
//! fetched page computed before an edit may be read after that edit was delivered; comparing `edited`
//! seqs (and a delete being final) makes applying the same information twice, or late, harmless.
//!
//! Why `asOf`: a stored view's `replies`, `pinned` and `reactions` are counts as of the moment it was read,
//! and the events that made them (replies, pins, reactions, deletes of replies) are delivered after the
//! message, since their seqs are higher. A view read when the chat was at seq S already shows every event
//! up to S, so only events above S move its counts. The chat passes S (a fetch reply's `seq`; the watch
//! reply's seq for a replay; the event's own seq for a live push); without it the list takes the highest
//! seq the view itself names (its seq, `edited`, `replies.last`), which is exact for live pushes.

import { Emitter } from './emitter.js';
import {
  bodyChange,
  fileList,
  fromEvent,
  sameDerived,
  streamText,
  withAppended,
  withChange,
  withDerived,
  withReaction,
  withReplies,
  type Change,
  type Message,
} from './message.js';
import type { AppendPush, ChatProfile, FileInfo, HeraldEvent } from './types.js';

export type { Message } from './message.js';

/** What changed in a list. */
export interface MessageChange {
  /**
   * `added`: a new message (a thread reply too: see its `thread`); `edited`: a new body (and mentions,
   * or the end of a stream); `deleted`: the body is gone; `appended`: streamed text grew; `updated`: its
   * replies, pin or reactions changed.
   */
  kind: 'added' | 'edited' | 'deleted' | 'appended' | 'updated';
  message: Message;
}

/** Events of a `MessageList`. */
export interface MessageListEvents {
  /** One message was added or changed. */
  change: MessageChange;
  /** The chat's profile changed (a `profile` event, or a `join` reply). */
  profile: ChatProfile;
}

/** A message's stored view, read again, and the chat's seq when it was read (the fetch reply's `seq`). */
export interface StoredView {
  event: HeraldEvent;
  asOf: number;
}

/** Options of a `MessageList`. */
export interface MessageListOptions {
  /**
   * The most messages kept, and apart from them the most thread replies kept; past it the oldest are
   * dropped. Default 10,000: a list that only ever grows would hold a long-lived chat's whole history.
   */
  maxMessages?: number;
  /**
   * How the list reads a streamed message again when an `append` does not fit its text (a chunk was
   * missed): its stored view, or null. A chat's own list fetches it; a list without one keeps the text
   * it has until the stream's final edit.
   */
  refetch?: (seq: number) => Promise<StoredView | null>;
}

/** Default of `maxMessages`. */
const DEFAULT_MAX_MESSAGES = 10_000;

/**
 * Edits and deletes whose target is not in the list yet (older than what was loaded) are remembered, up
 * to this many, so that loading that history later still shows the newest state. Beyond it the oldest
 * are forgotten: the stored view of a later fetch shows them anyway.
 */
const MAX_ORPHANS = 1_000;

/** What the list knows of a held message beyond its `Message`. */
interface Held {
  /** The chat's seq when its replies, pin and reactions were read (see "Why `asOf`"). */
  asOf: number;
  /** `asOf`, or the seq of a later event folded into those fields: a view older than this is stale. */
  version: number;
  /** Replies counted into `replies` after the view (a root). */
  counted?: Set<number>;
  /** Emoji -> user -> on, from reaction events after the view. */
  reactors?: Map<string, Map<string, boolean>>;
}

/** The part of an `append` push the list reads. */
export type Append = Pick<AppendPush, 'target' | 'text' | 'at'>;

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isSeq(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v > 0;
}

/** The highest seq a view names: what it shows at least, when nothing else says. */
function namedAsOf(ev: HeraldEvent): number {
  return Math.max(ev.seq, isSeq(ev.edited) ? ev.edited : 0, isObject(ev.replies) && isSeq(ev.replies.last) ? ev.replies.last : 0);
}

/**
 * A chat's messages in seq order, with edits, deletes, replies, reactions, pins and streamed text
 * applied. Get a chat's own with `chat.messages()`, which the chat keeps fed; or make one and feed it
 * yourself with `apply`, `load` and `append`.
 *
 * ```ts
 * const list = general.messages();
 * list.on('change', ({ kind, message }) => redraw(message));
 * await general.watch();
 * for await (const ev of general.history(0, { until: list.first?.seq })) list.load([ev]);
 * ```
 */
export class MessageList extends Emitter<MessageListEvents> {
  /** Seqs of the main list (no thread replies) in increasing order; inserts are nearly always appends. */
  private seqs: number[] = [];
  /** Every message held: the main list's and the threads'. */
  private readonly bySeq = new Map<number, Message>();
  private readonly held = new Map<number, Held>();
  /** Root -> its replies' seqs, increasing; in the order roots were first seen, for eviction. */
  private readonly threads = new Map<number, number[]>();
  private replyCount = 0;
  private readonly orphans = new Map<number, Change>();
  /** Streams being read again -> the appends that arrived meanwhile, applied after. */
  private readonly refetching = new Map<number, Append[]>();
  private chatProfile: ChatProfile | null = null;
  private profileSeq = 0;
  private readonly max: number;
  private readonly refetch: ((seq: number) => Promise<StoredView | null>) | undefined;

  constructor(opts: MessageListOptions = {}) {
    super();
    const max = opts.maxMessages ?? DEFAULT_MAX_MESSAGES;
    if (!Number.isInteger(max) || max <= 0) throw new TypeError('herald: `maxMessages` must be a positive integer');
    this.max = max;
    this.refetch = opts.refetch;
  }

  /** The messages not in a thread, oldest first. */
  get messages(): Message[] {
    return this.seqs.map((s) => this.bySeq.get(s)!);
  }

  /** How many messages the main list holds (thread replies not counted). */
  get size(): number {
    return this.seqs.length;
  }

  /** The oldest message of the main list, if any. */
  get first(): Message | undefined {
    const s = this.seqs[0];
    return s === undefined ? undefined : this.bySeq.get(s);
  }

  /** The chat's profile, once a `join` reply or a `profile` event told it; null before. */
  get profile(): ChatProfile | null {
    return this.chatProfile;
  }

  /** The message with this seq (in the main list or a thread), if held. */
  get(seq: number): Message | undefined {
    return this.bySeq.get(seq);
  }

  /** The replies held of the thread under `root`, oldest first (load more with `chat.history(.., { thread })`). */
  thread(root: number): Message[] {
    return (this.threads.get(root) ?? []).map((s) => this.bySeq.get(s)!);
  }

  /**
   * Folds one event in: a `message` or `system` is added (or merged, when already held); an `edit` or
   * `delete` changes its target; a `reaction` or `pin` moves its target's counts; a `profile` replaces the
   * profile. `asOf`: for a stored view, the chat's seq when it was read (see the file's doc). Other types,
   * and events that are not well formed, are ignored.
   */
  apply(ev: HeraldEvent, asOf?: number): void {
    if (!isObject(ev) || !isSeq(ev.seq)) return;
    const body = isObject(ev.body) ? ev.body : {};
    switch (ev.type) {
      case 'message':
      case 'system':
        this.put(ev, Math.max(asOf ?? 0, namedAsOf(ev)));
        return;
      case 'edit': {
        if (!isSeq(body.target)) return;
        const mentions = Array.isArray(ev.mentions) ? ev.mentions.filter((m): m is string => typeof m === 'string') : undefined;
        const files = fileList(ev.files);
        this.change(body.target, {
          seq: ev.seq,
          deleted: false,
          body: body.body,
          ...(mentions !== undefined ? { mentions } : {}),
          ...(files !== undefined ? { files } : {}),
        });
        return;
      }
      case 'delete':
        if (isSeq(body.target)) this.change(body.target, { seq: ev.seq, deleted: true, body: null });
        return;
      case 'reaction':
        if (isSeq(body.target) && typeof body.emoji === 'string' && ev.user !== undefined) {
          this.react(ev.seq, body.target, body.emoji, ev.user, body.on !== false);
        }
        return;
      case 'pin':
        if (isSeq(body.target)) this.pin(ev.seq, body.target, body.on !== false);
        return;
      case 'profile':
        this.setProfile(ev.body as ChatProfile, ev.seq);
        return;
      default:
        return; // reads, joins, and types of later versions change no message
    }
  }

  /** Folds in fetched events (a page of `fetch` or `history`), in the order given; `asOf` as for `apply`. */
  load(events: Iterable<HeraldEvent>, asOf?: number): void {
    for (const ev of events) this.apply(ev, asOf);
  }

  /**
   * Folds in an `append` push: when `at` is the length of the message's text (in UTF-16 code units, a
   * string's `length`) the chunk is added; a chunk already shown is ignored; any other `at` means a chunk
   * was missed, and the list reads the message again (`refetch`) and takes its stored text.
   */
  append(push: Append): void {
    const queued = this.refetching.get(push.target);
    if (queued !== undefined) {
      queued.push(push);
      return;
    }
    const m = this.bySeq.get(push.target);
    if (m === undefined || m.deleted || m.stream !== 'open') return;
    const text = streamText(m);
    if (text === undefined || typeof push.text !== 'string') return;
    if (push.at === text.length) {
      if (push.text.length > 0) this.update(m, withAppended(m, push.text), 'appended');
      return;
    }
    if (push.at + push.text.length <= text.length && text.startsWith(push.text, push.at)) return; // shown already
    this.reread(push.target);
  }

  /** Sets the profile as of the chat's `seq` (a `join` reply's); an older one than held is ignored. */
  setProfile(profile: ChatProfile, seq: number): void {
    if (!isObject(profile) || seq < this.profileSeq) return;
    const next: ChatProfile = {
      name: typeof profile.name === 'string' ? profile.name : null,
      image: typeof profile.image === 'string' ? profile.image : null,
      data: profile.data ?? null,
    };
    this.profileSeq = seq;
    if (this.chatProfile !== null && JSON.stringify(this.chatProfile) === JSON.stringify(next)) return;
    this.chatProfile = next;
    this.emit('profile', next);
  }

  /** Empties the list (the profile stays: it is the chat's, not its messages'). */
  clear(): void {
    this.seqs = [];
    this.bySeq.clear();
    this.held.clear();
    this.threads.clear();
    this.replyCount = 0;
    this.orphans.clear();
    this.refetching.clear();
  }

  // ---- internals --------------------------------------------------------------------------------

  /** Adds a message, or merges a newer view of one already held. */
  private put(ev: HeraldEvent, asOf: number): void {
    let next = fromEvent(ev);
    const orphan = this.orphans.get(ev.seq);
    if (orphan !== undefined) {
      this.orphans.delete(ev.seq);
      next = withChange(next, orphan);
    }
    const held = this.bySeq.get(ev.seq);
    if (held !== undefined) {
      this.merge(held, next, asOf);
      return;
    }
    if (next.thread !== undefined) {
      this.addReply(next, asOf);
      return;
    }
    if (this.seqs.length >= this.max && ev.seq < this.seqs[0]!) return; // older than what the list keeps
    this.insert(this.seqs, ev.seq);
    this.bySeq.set(ev.seq, next);
    this.held.set(ev.seq, { asOf, version: asOf });
    this.emit('change', { kind: 'added', message: next });
    while (this.seqs.length > this.max) this.forget(this.seqs.shift()!);
  }

  /** A held message seen again in a view: take what is newer of its body, its stream text and its counts. */
  private merge(held: Message, view: Message, asOf: number): void {
    const h = this.held.get(held.seq)!;
    let m = held;
    let kind: MessageChange['kind'] | null = bodyChange(held, view);
    if (kind !== null) {
      m = withDerived(view, held);
    } else if (held.stream === 'open' && !held.deleted) {
      // A stream read again: its stored text is at least as far as what the pushes gave, or it is older.
      const was = streamText(held) ?? '';
      const now = streamText(view);
      if (now !== undefined && now.length >= was.length && now !== was) {
        m = { ...m, body: view.body };
        kind = 'appended';
      }
    }
    if (kind === null && !held.deleted && view.edited === held.edited && view.files !== undefined && !sameUrls(held.files, view.files)) {
      // The same files read again come with fresh URLs (the old ones expire): take those.
      m = { ...m, files: view.files };
      kind = 'updated';
    }
    if (asOf >= h.version) {
      const derived = withDerived(m, view);
      if (!sameDerived(derived, m)) kind ??= 'updated';
      m = derived;
      this.held.set(held.seq, { asOf, version: asOf });
    }
    if (kind !== null) this.update(held, m, kind);
  }

  private addReply(reply: Message, asOf: number): void {
    const root = reply.thread!;
    let seqs = this.threads.get(root);
    if (seqs === undefined) {
      seqs = [];
      this.threads.set(root, seqs);
    }
    this.insert(seqs, reply.seq);
    this.replyCount++;
    this.bySeq.set(reply.seq, reply);
    this.held.set(reply.seq, { asOf, version: asOf });
    this.emit('change', { kind: 'added', message: reply });
    this.countReply(root, reply);
    while (this.replyCount > this.max) {
      const [oldest, list] = this.threads.entries().next().value!;
      const gone = list.shift()!;
      this.replyCount--;
      this.bySeq.delete(gone);
      this.held.delete(gone);
      if (list.length === 0) this.threads.delete(oldest);
    }
  }

  /** A new reply: one more in its root's `replies`, unless the root's view counted it already. */
  private countReply(root: number, reply: Message): void {
    const r = this.bySeq.get(root);
    const h = this.held.get(root);
    if (r === undefined || h === undefined || reply.deleted || reply.seq <= h.asOf) return;
    h.counted ??= new Set();
    if (h.counted.has(reply.seq)) return;
    h.counted.add(reply.seq);
    h.version = Math.max(h.version, reply.seq);
    this.update(r, withReplies(r, (r.replies?.count ?? 0) + 1, Math.max(r.replies?.last ?? 0, reply.seq)), 'updated');
  }

  /** `reply` was deleted by the event `at`: one fewer in its root's `replies`, if it was counted there. */
  private uncountReply(reply: Message, at: number): void {
    const root = reply.thread!;
    const r = this.bySeq.get(root);
    const h = this.held.get(root);
    if (r === undefined || h === undefined || at <= h.asOf) return; // the root's view knew of the delete
    const counted = h.counted?.delete(reply.seq) ?? false;
    if (!counted && reply.seq > h.asOf) return; // neither in the view nor counted since
    h.version = Math.max(h.version, at);
    let last = r.replies?.last;
    if (last === reply.seq) {
      const alive = (this.threads.get(root) ?? []).filter((s) => s !== reply.seq && this.bySeq.get(s)?.deleted === false);
      last = alive.length > 0 ? alive[alive.length - 1] : last;
    }
    this.update(r, withReplies(r, (r.replies?.count ?? 0) - 1, last), 'updated');
  }

  /** Applies an edit or delete to `target`, or remembers it until the target is added. */
  private change(target: number, c: Change): void {
    const held = this.bySeq.get(target);
    if (held === undefined) {
      const known = this.orphans.get(target);
      if (known !== undefined && (known.deleted || known.seq >= c.seq)) return;
      this.orphans.delete(target); // re-inserted last: the map's order is then oldest-first for eviction
      this.orphans.set(target, c);
      if (this.orphans.size > MAX_ORPHANS) this.orphans.delete(this.orphans.keys().next().value!);
      return;
    }
    const next = withChange(held, c);
    const kind = bodyChange(held, next);
    if (kind === null) return;
    this.update(held, next, kind);
    if (kind === 'deleted' && held.thread !== undefined) this.uncountReply(held, c.seq);
  }

  /** A reaction event: moves the target's count of `emoji` when it changes `user`'s reaction. */
  private react(seq: number, target: number, emoji: string, user: string, on: boolean): void {
    const m = this.bySeq.get(target);
    const h = this.held.get(target);
    if (m === undefined || h === undefined || m.deleted || seq <= h.asOf) return;
    h.reactors ??= new Map();
    let users = h.reactors.get(emoji);
    if (users === undefined) {
      users = new Map();
      h.reactors.set(emoji, users);
    }
    // A user not seen since the view is taken to have been off when reacting, and on when taking back.
    if (users.get(user) === on) return;
    users.set(user, on);
    h.version = Math.max(h.version, seq);
    this.update(m, withReaction(m, emoji, on ? 1 : -1), 'updated');
  }

  private pin(seq: number, target: number, on: boolean): void {
    const m = this.bySeq.get(target);
    const h = this.held.get(target);
    if (m === undefined || h === undefined || m.deleted || seq <= h.asOf) return;
    h.version = Math.max(h.version, seq);
    if (m.pinned !== on) this.update(m, { ...m, pinned: on }, 'updated');
  }

  /** Reads a stream again; appends that arrive meanwhile wait, and are folded in after its stored text. */
  private reread(target: number): void {
    if (this.refetch === undefined) return;
    const queued: Append[] = [];
    this.refetching.set(target, queued);
    const done = (view: StoredView | null): void => {
      if (this.refetching.get(target) !== queued) return; // cleared meanwhile
      this.refetching.delete(target);
      if (view === null) return; // the next append that does not fit tries again
      if (isObject(view.event) && view.event.seq === target) this.apply(view.event, view.asOf);
      for (const p of queued) this.append(p);
    };
    this.refetch(target).then(done, () => done(null));
  }

  private update(held: Message, next: Message, kind: MessageChange['kind']): void {
    if (next === held) return;
    this.bySeq.set(held.seq, next);
    this.emit('change', { kind, message: next });
  }

  /** Drops a message of the main list, and the thread under it. */
  private forget(seq: number): void {
    this.bySeq.delete(seq);
    this.held.delete(seq);
    for (const r of this.threads.get(seq) ?? []) {
      this.bySeq.delete(r);
      this.held.delete(r);
      this.replyCount--;
    }
    this.threads.delete(seq);
  }

  private insert(seqs: number[], seq: number): void {
    const last = seqs[seqs.length - 1];
    if (last === undefined || seq > last) {
      seqs.push(seq);
      return;
    }
    let lo = 0;
    let hi = seqs.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (seqs[mid]! < seq) lo = mid + 1;
      else hi = mid;
    }
    seqs.splice(lo, 0, seq);
  }
}

/** True when `a` and `b` list the same files at the same URLs. */
function sameUrls(a: readonly FileInfo[] | undefined, b: readonly FileInfo[]): boolean {
  return a !== undefined && a.length === b.length && a.every((f, i) => f.id === b[i]!.id && f.url === b[i]!.url);
}
