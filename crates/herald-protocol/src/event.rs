//! Events: what a chat's log is made of, as stored and as the stored view shows them (v1.1's
//! `edited` and `deleted`; v1.2's `replies`, `pinned`, `reactions`, `stream`; `files`). Not here: how a push
//! frames an event (`frame`), or what a server derives the stored view from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// The type of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum EventType {
    Message,
    Reaction,
    Read,
    Join,
    Leave,
    System,
    // v1.1: the message lifecycle.
    Edit,
    Delete,
    // v1.2: chat profiles and pins.
    Profile,
    Pin,
}

impl EventType {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Message => "message",
            EventType::Reaction => "reaction",
            EventType::Read => "read",
            EventType::Join => "join",
            EventType::Leave => "leave",
            EventType::System => "system",
            EventType::Edit => "edit",
            EventType::Delete => "delete",
            EventType::Profile => "profile",
            EventType::Pin => "pin",
        }
    }

    /// The inverse of [`EventType::as_str`].
    pub fn parse(s: &str) -> Option<EventType> {
        Some(match s {
            "message" => EventType::Message,
            "reaction" => EventType::Reaction,
            "read" => EventType::Read,
            "join" => EventType::Join,
            "leave" => EventType::Leave,
            "system" => EventType::System,
            "edit" => EventType::Edit,
            "delete" => EventType::Delete,
            "profile" => EventType::Profile,
            "pin" => EventType::Pin,
            _ => return None,
        })
    }
}

/// One stored event, as `fetch` returns it.
///
/// `body` stays raw JSON: the server stores and forwards it without parsing
/// it again. `user` is absent only on `system` events posted without one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Event {
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: EventType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    pub ts: i64,
    /// Any JSON value: as sent, for `message` and `system` events.
    #[cfg_attr(feature = "openapi", schema(value_type = serde_json::Value))]
    pub body: Box<RawValue>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// v1.1, `message` events only: the seq of the latest `edit` of this
    /// message; absent when it was never edited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited: Option<u64>,
    /// v1.1, `message` events only: true once the message was deleted (its
    /// `body` is then `null`); absent otherwise.
    #[serde(default, skip_serializing_if = "is_false")]
    pub deleted: bool,
    /// v1.2, `message` events: the seq of the thread root this message replies in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<u64>,
    /// v1.2, `message` events: the seq of the message this one quotes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quote: Option<u64>,
    /// v1.2, `message` and `edit` events: the users mentioned, without duplicates, in the order given.
    /// On an `edit`, `Some([])` clears the message's mentions and `None` keeps them; the stored view
    /// shows a message's current mentions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mentions: Option<Vec<String>>,
    /// v1.2, the stored view of a thread root: its replies that are not deleted; absent while none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replies: Option<Replies>,
    /// v1.2, the stored view: true while the message is pinned; absent otherwise.
    #[serde(default, skip_serializing_if = "is_false")]
    pub pinned: bool,
    /// v1.2, the stored view: each emoji's count of users whose reaction is on now; absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reactions: Option<BTreeMap<String, u64>>,
    /// v1.2, a message sent with `"stream": true`: `open` until its stream ends, then `done`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamState>,
    /// v1.2, `message` and `edit` events: the files attached. On an `edit`, `Some([])` removes the
    /// message's files and `None` keeps them; the stored view shows a message's current files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<FileRef>>,
}

/// v1.2: a file attached to a message, `{"id", "name", "type", "size", "url"}`. A server stores it
/// without `url` and signs a fresh one each time it sends the event.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    pub id: String,
    pub name: String,
    /// The MIME type it was uploaded as.
    #[serde(rename = "type")]
    pub mime: String,
    /// In bytes.
    pub size: u64,
    /// Answers a plain GET with the file's bytes for at least an hour after the frame carrying it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
}

impl Event {
    /// An event with no v1.1 or v1.2 extras (no client id, never edited,
    /// not deleted, in no thread, quoting, mentioning or pinned nothing).
    pub fn new(seq: u64, kind: EventType, user: Option<String>, ts: i64, body: Box<RawValue>) -> Event {
        Event {
            seq,
            kind,
            user,
            ts,
            body,
            client_id: None,
            edited: None,
            deleted: false,
            thread: None,
            quote: None,
            mentions: None,
            replies: None,
            pinned: false,
            reactions: None,
            stream: None,
            files: None,
        }
    }
}

/// v1.2: `"replies": {"count": N, "last": S}` on a thread root in the stored view.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replies {
    /// The root's replies that are not deleted.
    pub count: u64,
    /// The seq of the latest of them.
    pub last: u64,
}

/// v1.2: where a streamed message stands.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamState {
    /// Appends are still coming.
    Open,
    /// Ended by `done`, by a delete, or by the server after 60 s without an append.
    Done,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
            && self.kind == other.kind
            && self.user == other.user
            && self.ts == other.ts
            && self.body.get() == other.body.get()
            && self.client_id == other.client_id
            && self.edited == other.edited
            && self.deleted == other.deleted
            && self.thread == other.thread
            && self.quote == other.quote
            && self.mentions == other.mentions
            && self.replies == other.replies
            && self.pinned == other.pinned
            && self.reactions == other.reactions
            && self.stream == other.stream
            && self.files == other.files
    }
}
