//! The public surface of `@herald/client`.
//!
//! Owns: what is exported. Everything else in src/ is an implementation detail.

export { HeraldClient } from './client.js';
export type { ClientEvents, ClientState, DisconnectInfo, StateChange } from './client.js';
export { Chat } from './chat.js';
export type { ChatEvents, PresenceChange, TypingChange } from './chat-types.js';
export type {
  AppendOptions,
  EditOptions,
  HistoryOptions,
  PageOptions,
  ProfileFields,
  SendOptions,
  ThreadOption,
  WatchOptions,
} from './chat-options.js';
export type { WatchState, WatchStateChange } from './watch.js';
export { DEFAULT_FILE_TYPE, putFile, UploadError } from './files.js';
export type { PutOptions, Uploaded, UploadOptions, UploadSource } from './files.js';
export { MAX_QUERY_CHARS } from './search.js';
export type { SearchOptions } from './search.js';
export { Inbox } from './inbox.js';
export type { InboxEvents, InboxItem, InboxOptions } from './inbox.js';
export { MessageList } from './messages.js';
export type { Append, Message, MessageChange, MessageListEvents, MessageListOptions, StoredView } from './messages.js';
export type { PresenceState } from './presence.js';
export { TYPING_EXPIRY_MS, TYPING_SEND_INTERVAL_MS } from './typing.js';
export type { ClientOptions } from './options.js';
export { HeraldError, isHeraldError } from './errors.js';
export type { HeraldErrorInit } from './errors.js';
export { CloseCode, closePolicy } from './codes.js';
export type { ClientErrorCode, ClosePolicy, ErrorCode, ServerErrorCode } from './codes.js';
export { backoffCeiling, fullJitter, DEFAULT_BACKOFF } from './backoff.js';
export type { BackoffOptions } from './backoff.js';
export { jwtExp } from './token.js';
export type { TokenProvider } from './token.js';
export type { WebSocketConstructor, WebSocketLike } from './transport.js';
export type {
  AppendPush,
  ChatEvent,
  ChatProfile,
  EventType,
  FetchOk,
  FileInfo,
  HeraldEvent,
  HelloOk,
  InboxEntry,
  InboxOk,
  JoinOk,
  KnownEventType,
  MemberEntry,
  MembersOk,
  PinEntry,
  PinsOk,
  PresenceOk,
  ReactionsOk,
  Replies,
  SearchOk,
  SearchResult,
  SeqOk,
  StreamState,
  ThreadEntry,
  ThreadsOk,
  UploadOk,
  WatchOk,
} from './types.js';
