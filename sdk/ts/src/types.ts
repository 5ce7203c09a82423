//! Wire shapes of herald protocol version 1, as the server sends and receives them.
//!
//! Owns: the TypeScript spelling of docs/protocol.md's frames (requests, replies, pushes, events).
//! Does not own: codes (codes.ts), errors (errors.ts) or any behaviour. Field names stay in the
//! protocol's snake_case on purpose, so a frame can be read against the contract without a mapping.

/** The kinds of event a chat stores. */
export type EventType = 'message' | 'reaction' | 'read' | 'join' | 'leave' | 'system';

/**
 * One stored event of a chat. `seq` numbers a chat's events 1, 2, 3, ... with no gaps and no reuse.
 *
 * `body` depends on `type`: as sent for `message` and `system`; `{target, emoji, on}` for `reaction`;
 * `{seq}` for `read`; `{}` for `join` and `leave`.
 */
export interface HeraldEvent {
  /** The event's position in its chat, from 1. */
  seq: number;
  /** What kind of event this is. */
  type: EventType;
  /** The user who caused it; absent only on `system` events posted through the HTTP API without one. */
  user?: string;
  /** Milliseconds since the Unix epoch, stamped by the server. */
  ts: number;
  /** The payload; see the type's shape above. */
  body: unknown;
  /** The sender's idempotency key, present on messages sent with one. */
  client_id?: string;
}

/** A delivered event together with the chat it belongs to. */
export interface ChatEvent extends HeraldEvent {
  /** The chat the event belongs to. */
  chat: string;
}

/** `ok` of `hello`. */
export interface HelloOk {
  user: string;
  workspace: string;
  node: string;
  session: string;
  /** How often the client should prove the link alive; drives the ping watchdog. */
  heartbeat_ms: number;
}

/** `ok` of `join`. */
export interface JoinOk {
  chat: string;
  /** The chat's latest seq (the join event's, unless this user was already a member). */
  seq: number;
  /** How many members the chat has. */
  members: number;
}

/** `ok` of `watch`: `seq` is the chat's latest seq when the watch began. */
export interface WatchOk {
  chat: string;
  seq: number;
}

/** `ok` of `send`, `react` and `read` (for `read`, the stored read position). */
export interface SeqOk {
  seq: number;
}

/** `ok` of `fetch`: events with seq > `after`, in order; `seq` is the chat's latest. */
export interface FetchOk {
  events: HeraldEvent[];
  seq: number;
  more: boolean;
}

/** The `err` object of a reply. */
export interface WireError {
  code: string;
  message?: string;
  retry_after_ms?: number;
}

/** A reply to the request with the same `id`: exactly one of `ok` or `err`. */
export interface ReplyFrame {
  id: number;
  ok?: unknown;
  err?: WireError;
}

/** `{"ev":"event"}`: one event of a watched chat, in strictly increasing seq per chat and connection. */
export interface EventPush extends HeraldEvent {
  ev: 'event';
  chat: string;
}

/** `{"ev":"notify"}`: the server skipped pushes; the chat's latest seq is `seq`. */
export interface NotifyPush {
  ev: 'notify';
  chat: string;
  seq: number;
}

/** `{"ev":"reconnect"}`: reconnect after `after_ms`; the server closes with 4012 next. */
export interface ReconnectPush {
  ev: 'reconnect';
  after_ms: number;
  reason?: string;
}

/** Every frame the server sends without an `id`. */
export type PushFrame = EventPush | NotifyPush | ReconnectPush;

/** Request operations and the arguments each takes (the `id` and `op` fields are added by the client). */
export interface RequestArgs {
  hello: { token: string };
  join: { chat: string };
  leave: { chat: string };
  watch: { chat: string; after?: number };
  unwatch: { chat: string };
  send: { chat: string; body: unknown; client_id?: string };
  react: { chat: string; target: number; emoji: string; on?: boolean };
  read: { chat: string; seq: number };
  fetch: { chat: string; after: number; limit?: number };
  ping: Record<string, never>;
}

/** The `ok` shape of each operation. */
export interface RequestOk {
  hello: HelloOk;
  join: JoinOk;
  leave: Record<string, never>;
  watch: WatchOk;
  unwatch: Record<string, never>;
  send: SeqOk;
  react: SeqOk;
  read: SeqOk;
  fetch: FetchOk;
  ping: Record<string, never>;
}

/** The name of a request operation. */
export type Op = keyof RequestArgs;
