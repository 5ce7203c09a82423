//! `Message`: one message as a user should see it, and the pure steps that move it from one state to the
//! next (an edit, a delete, a reaction, a pin, a reply counted or taken away, streamed text, files
//! replaced or removed by an edit).
//!
//! Owns: the shape of a list's message and each transition's rule, as functions that return a new
//! `Message` (or the same one when nothing changes), so that a list can hand out messages that never
//! change under the application's feet. Does not own: which message an event targets, ordering, threads
//! or memory bounds (messages.ts).

import type { FileInfo, HeraldEvent, Replies, StreamState } from './types.js';

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
  /** The latest body: as sent, as last edited, with streamed text appended, or null once deleted. */
  readonly body: unknown;
  /** The sender's idempotency key, when the message was sent with one. */
  readonly client_id?: string;
  /** The seq of the latest edit applied, or undefined when never edited. */
  readonly edited?: number;
  /** True once deleted; `body` is then null. */
  readonly deleted: boolean;
  /** 1.2: the seq of the thread root this message replies in; such a message is in `list.thread(root)`. */
  readonly thread?: number;
  /** 1.2: the seq of the message this one quotes. */
  readonly quote?: number;
  /** 1.2: the users it mentions (as sent, or as the latest edit that gave mentions set them). */
  readonly mentions?: readonly string[];
  /** 1.2, on a thread root: its replies not deleted, and the latest one's seq; absent while none. */
  readonly replies?: Readonly<Replies>;
  /** 1.2: true while pinned. */
  readonly pinned: boolean;
  /** 1.2: each emoji's count of users whose reaction is on now; absent when none. */
  readonly reactions?: Readonly<Record<string, number>>;
  /** 1.2: `open` while its sender streams text into it, `done` after; absent for a plain message. */
  readonly stream?: StreamState;
  /** 1.2: the files attached (as sent, or as the latest edit that gave files set them); absent when none. */
  readonly files?: readonly FileInfo[];
}

/** An edit (`deleted` false, with its body and maybe mentions) or a delete, applied by seq. */
export interface Change {
  seq: number;
  deleted: boolean;
  body: unknown;
  /** The edit's mentions: replaces the message's; undefined keeps them. */
  mentions?: readonly string[];
  /** The edit's files: replaces the message's (`[]` removes them); undefined keeps them. */
  files?: readonly FileInfo[];
}

function isSeq(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v > 0;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function strings(v: unknown): string[] | undefined {
  return Array.isArray(v) && v.every((x) => typeof x === 'string') ? [...(v as string[])] : undefined;
}

/** The well-formed entries of an event's `files`, or undefined when it has no such field. */
export function fileList(v: unknown): FileInfo[] | undefined {
  if (!Array.isArray(v)) return undefined;
  return v.filter(
    (f): f is FileInfo =>
      isObject(f) && typeof f.id === 'string' && typeof f.name === 'string' && typeof f.type === 'string' && typeof f.size === 'number' && typeof f.url === 'string',
  );
}

function counts(v: unknown): Record<string, number> | undefined {
  if (!isObject(v)) return undefined;
  const out: Record<string, number> = {};
  for (const [k, n] of Object.entries(v)) if (typeof n === 'number' && Number.isInteger(n) && n > 0) out[k] = n;
  return Object.keys(out).length > 0 ? out : undefined;
}

/** The message a `message` or `system` event shows (a stored view or a push as stored). */
export function fromEvent(ev: HeraldEvent): Message {
  const r = ev.replies;
  const replies = isObject(r) && isSeq(r.count) && isSeq(r.last) ? { count: r.count, last: r.last } : undefined;
  const mentions = strings(ev.mentions);
  const reactions = ev.deleted === true ? undefined : counts(ev.reactions);
  const files = ev.deleted === true ? undefined : fileList(ev.files);
  return {
    seq: ev.seq,
    type: ev.type,
    ...(ev.user !== undefined ? { user: ev.user } : {}),
    ts: ev.ts,
    body: ev.deleted === true ? null : ev.body,
    ...(ev.client_id !== undefined ? { client_id: ev.client_id } : {}),
    ...(isSeq(ev.edited) ? { edited: ev.edited } : {}),
    deleted: ev.deleted === true,
    ...(isSeq(ev.thread) ? { thread: ev.thread } : {}),
    ...(isSeq(ev.quote) ? { quote: ev.quote } : {}),
    ...(mentions !== undefined ? { mentions } : {}),
    ...(replies !== undefined ? { replies } : {}),
    pinned: ev.pinned === true && ev.deleted !== true,
    ...(reactions !== undefined ? { reactions } : {}),
    ...(ev.stream === 'open' || ev.stream === 'done' ? { stream: ev.stream } : {}),
    ...(files !== undefined && files.length > 0 ? { files } : {}),
  };
}

/**
 * `m` with the edit or delete `c` applied, when `c` is newer than what `m` shows. An edit of an open
 * stream is its end: the server's final edit carries the whole text. A delete unpins and ends a stream.
 */
export function withChange(m: Message, c: Change): Message {
  if (m.deleted) return m; // a delete is final: later edits of it carry no body anyway
  if (c.deleted) {
    // A deleted message's files are deleted too.
    const { reactions: _r, files: _f, ...rest } = m;
    return { ...rest, body: null, deleted: true, pinned: false, ...(m.stream === 'open' ? { stream: 'done' as const } : {}) };
  }
  if (m.edited !== undefined && m.edited >= c.seq) return m;
  const { files: held, ...rest } = m;
  const files = c.files ?? held;
  return {
    ...rest,
    ...(files !== undefined && files.length > 0 ? { files } : {}),
    body: c.body,
    edited: c.seq,
    ...(c.mentions !== undefined ? { mentions: c.mentions } : {}),
    ...(m.stream === 'open' ? { stream: 'done' as const } : {}),
  };
}

/** What `next` changes in `held`'s body or life, or null when it is not newer there. */
export function bodyChange(held: Message, next: Message): 'edited' | 'deleted' | null {
  if (held.deleted) return null;
  if (next.deleted) return 'deleted';
  if ((next.edited ?? 0) > (held.edited ?? 0)) return 'edited';
  return null;
}

/** `m` with `emoji`'s count moved by `delta` (never below 0; an emoji at 0 is dropped). */
export function withReaction(m: Message, emoji: string, delta: number): Message {
  const was = m.reactions?.[emoji] ?? 0;
  const now = Math.max(0, was + delta);
  if (now === was) return m;
  const reactions: Record<string, number> = { ...m.reactions };
  if (now === 0) delete reactions[emoji];
  else reactions[emoji] = now;
  const { reactions: _r, ...rest } = m;
  return Object.keys(reactions).length > 0 ? { ...rest, reactions } : rest;
}

/** `m` with its replies counted one more (`seq` the new reply) or one fewer; `last` given when known. */
export function withReplies(m: Message, count: number, last: number | undefined): Message {
  const { replies: _r, ...rest } = m;
  if (count <= 0 || last === undefined) return rest;
  if (m.replies?.count === count && m.replies.last === last) return m;
  return { ...rest, replies: { count, last } };
}

/** The text of a streamed message's body, or undefined when its body has none. */
export function streamText(m: Message): string | undefined {
  return isObject(m.body) && typeof m.body.text === 'string' ? m.body.text : undefined;
}

/** `m` with `text` appended to its body's text. */
export function withAppended(m: Message, text: string): Message {
  const body = m.body as Record<string, unknown>;
  return { ...m, body: { ...body, text: `${String(body.text)}${text}` } };
}

/** `m` with the derived fields (replies, pins, reactions) of the stored view `view`. */
export function withDerived(m: Message, view: Message): Message {
  const { replies: _a, reactions: _b, ...rest } = m;
  return {
    ...rest,
    ...(view.replies !== undefined ? { replies: view.replies } : {}),
    pinned: view.pinned && !m.deleted,
    ...(view.reactions !== undefined && !m.deleted ? { reactions: view.reactions } : {}),
  };
}

/** True when `a` and `b` show the same replies, pin and reactions. */
export function sameDerived(a: Message, b: Message): boolean {
  return (
    a.pinned === b.pinned &&
    a.replies?.count === b.replies?.count &&
    a.replies?.last === b.replies?.last &&
    sameCounts(a.reactions ?? {}, b.reactions ?? {})
  );
}

function sameCounts(a: Readonly<Record<string, number>>, b: Readonly<Record<string, number>>): boolean {
  const keys = Object.keys(a);
  return keys.length === Object.keys(b).length && keys.every((k) => a[k] === b[k]);
}
