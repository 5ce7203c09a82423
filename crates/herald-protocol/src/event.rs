//! Events: what a chat's log is made of.

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
    }
}
