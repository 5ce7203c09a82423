//! Wire shapes of herald protocol version 1.2, as the server sends and receives them.
//!
//! Owns: the TypeScript spelling of docs/protocol.md's frames (requests, replies, pushes, events), up to
//! 1.2's conversations (profiles, members, threads, quotes, mentions, pins, reaction counts, streams),
//! files (`upload`, `files` on events, sends and edits) and search.
//! Every 1.2 field is optional where a 1.1 server leaves it out.
//! From 1.1 on, a client ignores `ev` values, event types and fields it does not know, so every shape
//! here is what this version reads, not a promise that nothing else arrives.
//! Kept in step with the server's Rust types by the golden fixtures of crates/herald-protocol/fixtures,
//! which test/unit/fixtures.test.ts reads against these declarations (and the Rust side against its own).
//! Does not own: codes (codes.ts), errors (errors.ts) or any behaviour. Field names stay in the
//! protocol's snake_case on purpose, so a frame can be read against the contract without a mapping.

/** The kinds of event a chat stores, as of protocol 1.2. */
export type KnownEventType =
  | 'message'
  | 'reaction'
  | 'read'
  | 'join'
  | 'leave'
  | 'system'
  | 'edit'
  | 'delete'
  | 'profile'
  | 'pin';

/**
 * An event's type: one this version knows, or a later version's, which the SDK delivers (its seq counts)
 * and applications ignore.
 */
export type EventType = KnownEventType | (string & {});

/**
 * One stored event of a chat. `seq` numbers a chat's events 1, 2, 3, ... with no gaps and no reuse.
 *
 * `body` depends on `type`: as sent for `message` and `system`; `{target, emoji, on}` for `reaction`;
 * `{seq}` for `read` (`{seq, thread}` for a read position in a thread); `{}` for `join` and `leave`;
 * `{target, body}` for `edit`; `{target}` for `delete`; the whole profile `{name, image, data}` after the
 * change for `profile`; `{target, on}` for `pin`.
 *
 * The stored view (fetch, watch replay) shows an edited message with its latest body and `edited`, and a
 * deleted one with `body: null` and `deleted: true`; from 1.2 also a thread root's `replies`, `pinned`,
 * `reactions` and a streamed message's `stream`. A live push shows an event as it was when stored.
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
  /** On a `message` of the stored view: the seq of its latest `edit` event. */
  edited?: number;
  /** On a `message` of the stored view: true once deleted (its `body` is then null). */
  deleted?: boolean;
  /** 1.2, on a `message`: the seq of the thread root this message replies in. */
  thread?: number;
  /** 1.2, on a `message`: the seq of the message it quotes. */
  quote?: number;
  /**
   * 1.2, on a `message` or `edit`: the users mentioned, without duplicates. On an `edit`, `[]` clears the
   * message's mentions and no field keeps them; the stored view shows a message's current ones.
   */
  mentions?: string[];
  /** 1.2, on a thread root of the stored view: its replies not deleted and the latest's seq; absent while none. */
  replies?: Replies;
  /** 1.2, on a `message` of the stored view: true while pinned. */
  pinned?: boolean;
  /** 1.2, on a `message` of the stored view: each emoji's count of users whose reaction is on now. */
  reactions?: Record<string, number>;
  /** 1.2, on a `message` sent with `stream: true`: `open` until its stream ends, then `done`. */
  stream?: StreamState;
  /**
   * 1.2, on a `message` (and on an `edit` that gave `files`): the files attached. In the stored view, a
   * message's current files; each `url` works for at least an hour after the frame that carried it, and
   * a fresh `fetch` gives fresh ones.
   */
  files?: FileInfo[];
}

/**
 * 1.2: a file attached to a message. `url` answers a plain GET, with no credentials, with the uploaded
 * bytes and `Content-Type: type`; only raster images, audio and video are served for showing inline,
 * every other type as an attachment.
 */
export interface FileInfo {
  /** The file id that `send` and `edit` name in `files`. */
  id: string;
  /** The file's name as uploaded, 1 to 255 characters. */
  name: string;
  /** Its MIME type as uploaded. */
  type: string;
  /** Its size in bytes. */
  size: number;
  /** Where to download it (absolute; herald's own or a presigned bucket URL). */
  url: string;
}

/**
 * 1.2, `ok` of `upload`: send exactly the announced size in bytes with `method` to `url`, with
 * `headers`, before `expires_ms`; then name `file` in a send's or edit's `files`.
 */
export interface UploadOk {
  /** The new file's id. */
  file: string;
  /** Where to send the bytes (absolute). */
  url: string;
  /** The HTTP method to send them with (`PUT`, or what the storage asks for). */
  method: string;
  /** Headers to send with them, exactly. */
  headers: Record<string, string>;
  /** When the URL stops accepting the upload (ms since the Unix epoch), at least 10 minutes ahead. */
  expires_ms: number;
}

/** 1.2: one result of `search`: a `message` event as `fetch` shows it, with its chat. */
export interface SearchResult extends HeraldEvent {
  /** The chat the message belongs to. */
  chat: string;
}

/** 1.2, `ok` of `search`: newest first (by `ts`, then chat and seq); `cursor` fetches the next page when `more`. */
export interface SearchOk {
  results: SearchResult[];
  more: boolean;
  cursor?: string;
}

/** 1.2: a thread root's replies in the stored view. */
export interface Replies {
  /** Its replies that are not deleted. */
  count: number;
  /** The seq of the latest of them. */
  last: number;
}

/** 1.2: whether a streamed message is still being written. */
export type StreamState = 'open' | 'done';

/** 1.2: a chat's profile; each field null until set. */
export interface ChatProfile {
  /** Up to 200 characters. */
  name: string | null;
  /** A URL, up to 2,000 characters. */
  image: string | null;
  /** Any JSON value, up to 4 KiB serialized. */
  data: unknown;
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
  /** The protocol version the server speaks (`"1.2"`, `"1.1"`); absent from version 1 servers. */
  protocol?: string;
}

/** `ok` of `join`. */
export interface JoinOk {
  chat: string;
  /** The chat's latest seq (the join event's, unless this user was already a member). */
  seq: number;
  /** How many members the chat has. */
  members: number;
  /** 1.2: the chat's profile. */
  profile?: ChatProfile;
}

/** `ok` of `watch`: `seq` is the chat's latest seq when the watch began. */
export interface WatchOk {
  chat: string;
  seq: number;
}

/**
 * `ok` of `send`, `react`, `read`, `edit`, `delete`, `profile` and `pin` (for `read`, the stored read
 * position; for a `profile` or `pin` that changed nothing, the latest such event's seq, 0 if none).
 */
export interface SeqOk {
  seq: number;
}

/** `ok` of `fetch`: events with seq > `after`, in order; `seq` is the chat's latest. */
export interface FetchOk {
  events: HeraldEvent[];
  seq: number;
  more: boolean;
}

/** `ok` of `presence`: `count` present users, and at most 100 of them, sorted. */
export interface PresenceOk {
  count: number;
  users: string[];
}

/** One chat of the `inbox` reply. */
export interface InboxEntry {
  chat: string;
  /** The chat's latest seq. */
  seq: number;
  /** The time of the chat's latest event (ms since the Unix epoch). */
  ts: number;
  /** This user's read position. */
  read: number;
  /** Messages above `read` from other users, not deleted. */
  unread: number;
  /** The latest `message` event as `fetch` shows it, or null (from 1.2: the latest not in a thread). */
  last: HeraldEvent | null;
  /** 1.2: the chat's profile. */
  profile?: ChatProfile;
  /** 1.2: unread replies summed over the threads this user follows in the chat. */
  threads?: number;
  /** 1.2: messages above `read` from others, not deleted, that mention this user. */
  mentions?: number;
}

/** `ok` of `inbox`: this user's chats, latest activity first; `cursor` fetches the next page when `more`. */
export interface InboxOk {
  chats: InboxEntry[];
  more: boolean;
  cursor?: string;
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

/** `{"ev":"typing"}`: `user` is typing in `chat`; show it for about 5 s. */
export interface TypingPush {
  ev: 'typing';
  chat: string;
  user: string;
}

/**
 * `{"ev":"presence"}`: either `user` started (`present: true`) or stopped being present, while the chat
 * has at most 100 present users; or, above that, only the new `count`.
 */
export interface PresencePush {
  ev: 'presence';
  chat: string;
  user?: string;
  present?: boolean;
  count?: number;
}

/** `{"ev":"inbox"}`: one of this user's chats changed (after `inbox` with `live: true`). */
export interface InboxPush {
  ev: 'inbox';
  chat: string;
  seq: number;
  ts: number;
  unread: number;
  /** 1.2: unread replies of the threads this user follows in the chat. */
  threads?: number;
  /** 1.2: unread messages that mention this user. */
  mentions?: number;
  /** True when this user left the chat. */
  left?: boolean;
}

/**
 * 1.2, `{"ev":"append"}`: `text` was added to the streamed message `target`, whose text was `at` UTF-16
 * code units long before it (a JavaScript string's `length`). Not an event: it takes no seq.
 */
export interface AppendPush {
  ev: 'append';
  chat: string;
  target: number;
  text: string;
  at: number;
}

/** Every frame the server sends without an `id` that this version reads. */
export type PushFrame = EventPush | NotifyPush | ReconnectPush | TypingPush | PresencePush | InboxPush | AppendPush;

/** 1.2: one member of the `members` reply. */
export interface MemberEntry {
  user: string;
  /** The member's read position. */
  read: number;
}

/** 1.2, `ok` of `members`: sorted by user id; `count` is the chat's member count. */
export interface MembersOk {
  members: MemberEntry[];
  count: number;
  more: boolean;
  cursor?: string;
}

/** 1.2: one thread of the `threads` reply. */
export interface ThreadEntry {
  chat: string;
  /** The root, as `fetch` shows it. */
  root: HeraldEvent;
  /** The latest reply, as `fetch` shows it. */
  last: HeraldEvent;
  /** This user's read position in the thread. */
  read: number;
  /** Replies above `read` from others, not deleted. */
  unread: number;
}

/** 1.2, `ok` of `threads`: the threads this user follows, latest reply first. */
export interface ThreadsOk {
  threads: ThreadEntry[];
  more: boolean;
  cursor?: string;
}

/** 1.2: one pinned message of the `pins` reply. */
export interface PinEntry {
  /** The `pin` event's seq. */
  seq: number;
  /** Who pinned it. */
  user: string;
  /** The message, as `fetch` shows it. */
  message: HeraldEvent;
}

/** 1.2, `ok` of `pins`: latest pin first. */
export interface PinsOk {
  pins: PinEntry[];
}

/** 1.2, `ok` of `reactions`: for each emoji with reactions on now, up to 100 users, sorted. */
export interface ReactionsOk {
  reactions: Record<string, string[]>;
}

/** Request operations and the arguments each takes (the `id` and `op` fields are added by the client). */
export interface RequestArgs {
  hello: { token: string };
  join: { chat: string };
  leave: { chat: string };
  watch: { chat: string; after?: number };
  unwatch: { chat: string };
  send: {
    chat: string;
    body: unknown;
    client_id?: string;
    thread?: number;
    quote?: number;
    mentions?: string[];
    stream?: boolean;
    files?: string[];
  };
  react: { chat: string; target: number; emoji: string; on?: boolean };
  read: { chat: string; seq: number; thread?: number };
  fetch: { chat: string; after: number; limit?: number; thread?: number };
  ping: Record<string, never>;
  edit: { chat: string; target: number; body: unknown; mentions?: string[]; files?: string[] };
  delete: { chat: string; target: number };
  typing: { chat: string };
  presence: { chat: string };
  inbox: { limit?: number; cursor?: string; live?: boolean };
  profile: { chat: string; name?: string | null; image?: string | null; data?: unknown };
  members: { chat: string; limit?: number; cursor?: string };
  threads: { chat?: string; limit?: number; cursor?: string };
  pin: { chat: string; target: number; on?: boolean };
  pins: { chat: string };
  reactions: { chat: string; target: number };
  append: { chat: string; target: number; text: string; done?: boolean };
  upload: { chat: string; name: string; type: string; size: number };
  search: { query: string; chat?: string; limit?: number; cursor?: string };
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
  edit: SeqOk;
  delete: SeqOk;
  typing: Record<string, never>;
  presence: PresenceOk;
  inbox: InboxOk;
  profile: SeqOk;
  members: MembersOk;
  threads: ThreadsOk;
  pin: SeqOk;
  pins: PinsOk;
  reactions: ReactionsOk;
  append: Record<string, never>;
  upload: UploadOk;
  search: SearchOk;
}

/** The name of a request operation. */
export type Op = keyof RequestArgs;
