//! The types around a `Chat` handle: the events it emits, and what it needs from its client.
//!
//! Owns: the event map a chat emits (`ChatEvents`), the payload shapes that are a chat's own
//! (`TypingChange`, `PresenceChange`), and `ChatHost`, the chat's view of its client. Does not own:
//! emitting them or using the host (chat.ts), the watch states (watch.ts) or the wire shapes (types.ts).

import type { HeraldError } from './errors.js';
import type { SendExtras } from './outbox.js';
import type { PageSize } from './page-size.js';
import type { PresenceState } from './presence.js';
import type { AppendPush, ChatEvent, RequestArgs, RequestOk, SeqOk } from './types.js';
import type { WatchStateChange } from './watch.js';

/** Events of a `Chat`. */
export interface ChatEvents {
  /** One event, delivered exactly once and in seq order while the chat is watched. */
  event: ChatEvent;
  /** The watch state changed. */
  state: WatchStateChange;
  /** Watching failed for good (forbidden, not found), a repair fetch failed, or a presence sync did. */
  error: HeraldError;
  /** The others typing changed (someone started, expired, or sent their message); sorted. */
  typing: TypingChange;
  /** Who is present changed (after `watch({ presence: true })`). */
  presence: PresenceChange;
  /**
   * 1.2: streamed text for the message `target` (an `append` push), while watched. `chat.messages()`
   * folds these in already; this is for applications that keep their own view.
   */
  append: AppendPush;
}

/** The payload of a chat's `typing` event. */
export interface TypingChange {
  chat: string;
  /** Others typing now, sorted; empty when nobody is. */
  users: string[];
}

/** The payload of a chat's `presence` event. */
export interface PresenceChange extends PresenceState {
  chat: string;
}

/** What a chat needs from its client. @internal */
export interface ChatHost {
  /** True while requests go out on a live, greeted link. */
  readonly connected: boolean;
  /** A request that waits for the link (up to the request timeout) and rejects with `HeraldError`. */
  request<O extends keyof RequestArgs>(op: O, args: RequestArgs[O]): Promise<RequestOk[O]>;
  /** Queues a send in the outbox. */
  send(chat: string, body: unknown, clientId: string | undefined, extra: SendExtras): Promise<SeqOk>;
  /** Hands a delivered event to the client's own `event` listeners. */
  delivered(event: ChatEvent): void;
  /** Runs `fn` after `ms`; returns a function that cancels it. */
  schedule(fn: () => void, ms: number): () => void;
  /** The `limit` of the fetches the SDK makes itself; smaller after slow-consumer closes. */
  readonly pageSize: PageSize;
  /** Buffered pushes allowed per chat. */
  readonly maxBufferedEvents: number;
  /** The user of the current connection, or null; one's own typing is never shown. */
  readonly user: string | null;
  /** The `fetch` uploads send their bytes with; undefined: the global one. */
  readonly fetch: typeof fetch | undefined;
}
