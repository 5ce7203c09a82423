//! The options and arguments of a chat's calls (`Chat.send`, `edit`, `fetch`, `read`, `append`,
//! `profile`, `members`, `threads`, `watch`, `history`; uploads and searches have theirs in files.ts and
//! search.ts).
//!
//! Owns: their shapes and defaults as documented here, and turning paging options into request
//! arguments. Does not own: the calls (chat.ts) or the wire shapes (types.ts).

/** Options of `Chat.send`. */
export interface SendOptions {
  /** Idempotency key; one is generated when absent. Reuse it to make an application-level retry safe. */
  clientId?: string;
  /** 1.2: reply in the thread under this root message (threads do not nest). */
  thread?: number;
  /** 1.2: quote this message of the chat. */
  quote?: number;
  /** 1.2: the users mentioned (up to 50; duplicates are removed by the server). */
  mentions?: string[];
  /**
   * 1.2: open a stream: the body must be an object whose `text` is a string; add text with
   * `chat.append(seq, text)` and end it with `{ done: true }`.
   */
  stream?: boolean;
  /**
   * 1.2: file ids to attach (up to 10), each uploaded completely by this user for this chat
   * (`chat.upload`); a file belongs to the first message that attaches it.
   */
  files?: string[];
}

/** Options of `Chat.edit`. */
export interface EditOptions {
  /** 1.2: replaces the message's mentions (`[]` clears them); left out, they are kept. */
  mentions?: string[];
  /** 1.2: replaces the message's files (`[]` removes them, and the server deletes those); left out, they are kept. */
  files?: string[];
}

/** Options of `Chat.fetch` and `Chat.read`. */
export interface ThreadOption {
  /** 1.2: the root of a thread: only its replies (`fetch`), this user's position in it (`read`). */
  thread?: number;
}

/** Options of `Chat.append`. */
export interface AppendOptions {
  /** Ends the stream (the text may then be empty): the server stores the final body as an `edit`. */
  done?: boolean;
}

/** Fields of `Chat.profile`: each one given is set, `null` clears it, one left out is kept. */
export interface ProfileFields {
  /** Up to 200 characters. */
  name?: string | null;
  /** A URL, up to 2,000 characters. */
  image?: string | null;
  /** Any JSON value, up to 4 KiB serialized. */
  data?: unknown;
}

/** Options of `Chat.members` and `Chat.threads`: a page size and where the previous page ended. */
export interface PageOptions {
  limit?: number;
  cursor?: string;
}

/** Options of `Chat.watch`. */
export interface WatchOptions {
  /** Resume after this seq (e.g. one the application stored); events after it are delivered. */
  after?: number;
  /**
   * Keep `chat.present` current: a `presence` request after every watch reply (so after each
   * reconnect too), then the server's presence pushes. Default false: one more request per chat.
   */
  presence?: boolean;
}

/** Options of `Chat.history`. */
export interface HistoryOptions {
  /** Stop after the event with this seq (e.g. the seq a watch began at); default: page until `more` is false. */
  until?: number;
  /** 1.2: only the replies of the thread under this root. */
  thread?: number;
}

/** The paging arguments given. */
export function pageArgs(opts: PageOptions): { limit?: number; cursor?: string } {
  const out: { limit?: number; cursor?: string } = {};
  if (opts.limit !== undefined) out.limit = opts.limit;
  if (opts.cursor !== undefined) out.cursor = opts.cursor;
  return out;
}
