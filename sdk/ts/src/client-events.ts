//! The events of a `HeraldClient` and their payloads.
//!
//! Owns: the client's states (`ClientState`), the event map a client emits (`ClientEvents`) and the
//! payload shapes that are the client's own (`StateChange`, `DisconnectInfo`). Does not own: which state
//! may follow which or when each event is emitted (connection.ts, client.ts), nor the wire shapes
//! (types.ts).

import type { HeraldError } from './errors.js';
import type { ChatEvent, HelloOk } from './types.js';

/** Where the client stands. */
export type ClientState = 'disconnected' | 'connecting' | 'connected' | 'closed';

/** A change of client state. */
export interface StateChange {
  from: ClientState;
  to: ClientState;
}

/** Why a link ended, and what the client does next. */
export interface DisconnectInfo {
  /** The close code: the server's, 1006 for a lost or refused socket, 1000 for the client's own close. */
  code: number;
  /** A few words on why (the server's close reason, or the client's: "ping timeout", ...). */
  reason: string;
  /** Milliseconds until the next attempt, or null when the client stopped reconnecting. */
  reconnectInMs: number | null;
  /** The URL (as given in the options) of the link that ended or the attempt that failed. */
  url: string;
}

/** Events of a `HeraldClient`. */
export interface ClientEvents {
  /** The state changed. */
  state: StateChange;
  /** A link was greeted; carries the `hello` reply. */
  connected: HelloOk;
  /** A link ended, or an attempt failed. */
  disconnected: DisconnectInfo;
  /** Something failed that no promise reports: a rejected token, a token provider, a bad frame. */
  error: HeraldError;
  /** An event of any watched chat, delivered once and in seq order per chat. */
  event: ChatEvent;
}
