//! Presence, the hub's one wing that is about users rather than events: who is in a chat now,
//! on this node and on every other node of the cell. Typing rides the same signals and lives
//! here too ([`live`]).
//!
//! # What "present" means
//!
//! A user is present in a chat while at least one of their connections, on any node of the
//! cell, has a live watch of it. A watch counts once it is live (its replay sent), and stops
//! counting when it ends (an `unwatch`, a `leave`, the connection's close). Presence is never
//! stored and never sequenced: it is what the nodes alive now say.
//!
//! # The bounds every node keeps
//!
//! - A change reaches the watchers on every node within 2 s: the node where it happened sends a
//!   numbered delta on the chat's subject at once and a beat [`live::BEAT_AFTER`] after a burst.
//! - Any disagreement (a delta lost on the way, a node that restarted) is repaired within 12 s:
//!   each chat's full check is due every [`book::FULL_CHECK_EVERY`] and carried in one digest
//!   per node per second ([`digest`]); a node holding users of another node it has not heard
//!   from in the chat for [`book::QUIET_ASK`] asks it by name.
//! - A node the cell stops hearing of loses its users after [`book::REMOTE_TTL`] ([`sweep`]);
//!   a node that finds it was paused expires nobody and asks the cell instead.
//! - Another node's departure is held [`book::LEAVE_GRACE`] before it counts, so a user moving
//!   between two nodes is not flapped on a third.
//!
//! # Parts, each with its owner
//!
//! | part | owns |
//! |---|---|
//! | [`book`] | one chat's bookkeeping on one node: local set, the other nodes' sets, their union (plain data) |
//! | [`live`] | the node's side ([`live::Live`]: its name in the cell, the typing gate, the signals it sends) and one chat's side ([`live::ChatLive`], held by the chat's entry under its lock) |
//! | [`digest`] | the full check's beats, one message per node per second on the cell's `presence` topic |
//! | [`sweep`] | the once-a-second sweep of dead nodes' users, and what a paused node does instead |
//!
//! The chat's entry (`hub/entry.rs`) holds its [`live::ChatLive`] under the chat's lock and runs
//! the timers it asks for; nothing here calls back into the entry.

pub(in crate::hub) mod book;
pub(in crate::hub) mod digest;
pub(in crate::hub) mod live;
pub(in crate::hub) mod sweep;

#[cfg(test)]
mod tests;
