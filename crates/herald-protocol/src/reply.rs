//! The `ok` objects of replies, one per op, and of the HTTP API.

use serde::{Deserialize, Serialize};

use crate::event::Event;

/// `hello`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HelloOk {
    pub user: String,
    pub workspace: String,
    pub node: String,
    pub session: String,
    pub heartbeat_ms: u64,
    /// The protocol version the server speaks: `"1.1"`.
    #[serde(default)]
    pub protocol: String,
}

/// The protocol version a server announces in `hello`'s answer.
pub const PROTOCOL_VERSION: &str = "1.1";

/// `join`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JoinOk {
    pub chat: String,
    pub seq: u64,
    pub members: u64,
}

/// `watch`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WatchOk {
    pub chat: String,
    pub seq: u64,
}

/// The answer of `send`, `react` and `read`, and of the HTTP member and event routes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SeqOk {
    pub seq: u64,
}

/// `fetch`'s answer, also `GET .../events`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct FetchOk {
    pub events: Vec<Event>,
    pub seq: u64,
    pub more: bool,
}

/// The empty answer of `leave`, `unwatch` and `ping`.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct EmptyOk {}

/// A chat as the HTTP API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChatView {
    pub chat: String,
    pub seq: u64,
    pub members: u64,
    pub open: bool,
}

/// The most users a presence answer lists; `count` says how many there are.
pub const PRESENCE_USERS_MAX: usize = 100;

/// `presence`'s answer, also `GET .../presence`: who is present in a chat.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PresenceOk {
    /// Users with at least one connection watching the chat, on any node.
    pub count: u64,
    /// At most 100 of them, sorted.
    pub users: Vec<String>,
}

/// One chat of a user's inbox (v1.1).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InboxEntry {
    pub chat: String,
    /// The chat's latest event.
    pub seq: u64,
    /// The timestamp of the chat's latest event.
    pub ts: i64,
    /// The user's read position.
    pub read: u64,
    /// `message` events above `read`, sent by other users, not deleted.
    pub unread: u64,
    /// The latest `message` event as `fetch` shows it, or `null`.
    pub last: Option<Event>,
}

/// `inbox`'s answer, also `GET .../users/{user}/inbox` (v1.1).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InboxOk {
    /// Latest activity first; ties by chat name.
    pub chats: Vec<InboxEntry>,
    pub more: bool,
    /// Given back to `inbox`, the next page; present when `more` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}
