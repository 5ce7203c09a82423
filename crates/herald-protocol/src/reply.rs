//! The `ok` objects of replies, one per op, and of the HTTP API.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::event::Event;

/// `hello`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HelloOk {
    pub user: String,
    pub workspace: String,
    pub node: String,
    pub session: String,
    pub heartbeat_ms: u64,
    /// The protocol version the server speaks: [`PROTOCOL_VERSION`] (`"1.2"`); a server of
    /// version 1 sends none, read as `""`.
    #[serde(default)]
    pub protocol: String,
}

/// The protocol version a server announces in `hello`'s answer.
pub const PROTOCOL_VERSION: &str = "1.2";

/// `join`'s answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct JoinOk {
    pub chat: String,
    pub seq: u64,
    pub members: u64,
    /// v1.2: the chat's profile, once any of its fields is set (a chat without one answers v1's shape;
    /// read its absence as every field `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
}

/// v1.2: a chat's profile, `{"name", "image", "data"}`, each `null` until set. Also the body of a
/// `profile` event (the whole profile after the change).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Profile {
    /// Up to [`crate::limits::PROFILE_NAME_MAX`] characters.
    pub name: Option<String>,
    /// A URL, up to [`crate::limits::PROFILE_IMAGE_MAX`] characters.
    pub image: Option<String>,
    /// Any JSON value the app keeps with the chat, up to [`crate::limits::PROFILE_DATA_LIMIT`]
    /// serialized; raw, as the server stores and forwards it.
    #[cfg_attr(feature = "openapi", schema(value_type = Option<serde_json::Value>))]
    pub data: Option<Box<RawValue>>,
}

impl Profile {
    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        self.name.is_none() && self.image.is_none() && self.data.is_none()
    }
}

impl PartialEq for Profile {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.image == other.image
            && self.data.as_ref().map(|d| d.get()) == other.data.as_ref().map(|d| d.get())
    }
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
    // v1.2's profile fields are left out while unset, so a chat without a profile answers v1's shape.
    /// v1.2: the chat's profile name; absent until set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// v1.2: the chat's image URL; absent until set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// v1.2: the app's data kept with the chat; absent until set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<serde_json::Value>))]
    pub data: Option<serde_json::Value>,
}

impl ChatView {
    /// A chat's view from its summary and profile.
    pub fn new(chat: String, seq: u64, members: u64, open: bool, profile: Profile) -> ChatView {
        let data = profile.data.and_then(|d| serde_json::from_str(d.get()).ok());
        ChatView { chat, seq, members, open, name: profile.name, image: profile.image, data }
    }
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
    /// The latest `message` event that is not a thread reply, as `fetch` shows it, or `null`.
    pub last: Option<Event>,
    // v1.2's fields are `None` only in a v1.1 server's entry.
    /// v1.2: the chat's profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<Profile>,
    /// v1.2: the sum of `unread` over the threads this user follows in the chat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u64>,
    /// v1.2: messages above `read` (thread replies included), sent by other users, not deleted,
    /// whose mentions name this user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mentions: Option<u64>,
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

/// One member of a chat in `members`' answer (v1.2).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MemberEntry {
    pub user: String,
    /// The member's read position in the chat.
    pub read: u64,
}

/// `members`' answer, also `GET .../chats/{chat}/members` (v1.2).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MembersOk {
    /// Sorted by user id.
    pub members: Vec<MemberEntry>,
    /// The chat's member count.
    pub count: u64,
    pub more: bool,
    /// Given back to `members`, the next page; present when `more` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// One thread a user follows, in `threads`' answer (v1.2).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ThreadEntry {
    pub chat: String,
    /// The thread's root as `fetch` shows it.
    pub root: Event,
    /// The thread's latest reply as `fetch` shows it (a thread has a reply once it is one).
    pub last: Event,
    /// This user's read position in the thread.
    pub read: u64,
    /// The thread's replies above `read`, sent by other users, not deleted.
    pub unread: u64,
}

/// `threads`' answer (v1.2): latest reply first.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ThreadsOk {
    pub threads: Vec<ThreadEntry>,
    pub more: bool,
    /// Given back to `threads`, the next page; present when `more` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// One pinned message in `pins`' answer (v1.2).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PinEntry {
    /// The seq of the `pin` event that pinned it.
    pub seq: u64,
    /// Who pinned it.
    pub user: String,
    /// The pinned message as `fetch` shows it.
    pub message: Event,
}

/// `pins`' answer, also `GET .../chats/{chat}/pins` (v1.2): latest pin first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PinsOk {
    pub pins: Vec<PinEntry>,
}

/// `reactions`' answer (v1.2): for each emoji with reactions on now, up to
/// [`crate::limits::REACTION_USERS_MAX`] users, sorted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReactionsOk {
    pub reactions: BTreeMap<String, Vec<String>>,
}

/// `GET /v1/workspaces/{ws}/chats` (v1.2): the workspace's chats sorted by id.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatsOk {
    pub chats: Vec<ChatView>,
    pub more: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}

/// v1.2: `upload`'s answer (and the server API's `POST .../files`): where and how to send the bytes.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct UploadOk {
    /// The file's id, for `files` on `send` and `edit`.
    pub file: String,
    /// Absolute: send exactly `size` bytes here.
    pub url: String,
    /// `PUT`.
    pub method: String,
    /// Headers to send as given.
    pub headers: BTreeMap<String, String>,
    /// The URL is accepted until then (ms since the epoch), at least 10 minutes ahead.
    pub expires_ms: i64,
}

/// One message `search` found (v1.2): the message as `fetch` shows it, with its chat.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct SearchHit {
    pub chat: String,
    #[serde(flatten)]
    pub event: Event,
}

/// `search`'s answer, also `GET /v1/workspaces/{ws}/search` (v1.2): newest first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct SearchOk {
    pub results: Vec<SearchHit>,
    pub more: bool,
    /// Given back to `search`, the next page; present when `more` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
}
