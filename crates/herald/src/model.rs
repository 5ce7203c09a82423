//! The nouns every layer shares: a chat's key, a stored event and a chat's
//! summary. Owns no behaviour beyond construction and encoding.

use std::fmt;
use std::sync::Arc;

use axum::extract::ws::Utf8Bytes;
use herald_protocol::frame::EventPush;
use herald_protocol::{Event, EventType};

/// A chat, named within its workspace. Workspaces never see each other, so
/// every lookup goes through both halves.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChatKey {
    pub ws: Arc<str>,
    pub chat: Arc<str>,
}

impl ChatKey {
    pub fn new(ws: &str, chat: &str) -> Self {
        ChatKey { ws: ws.into(), chat: chat.into() }
    }
}

impl fmt::Debug for ChatKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ws, self.chat)
    }
}

impl fmt::Display for ChatKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ws, self.chat)
    }
}

/// A chat's summary as stored: its latest seq, member count and whether anyone may join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatInfo {
    pub seq: u64,
    pub members: u64,
    pub open: bool,
}

/// An event on its way from the store to watchers: the push frame is
/// encoded once here and shared by every connection that receives it.
#[derive(Debug)]
pub struct Published {
    pub key: ChatKey,
    pub seq: u64,
    pub kind: EventType,
    /// The acting user; the hub ends that user's watches on a `leave`.
    pub user: Option<Arc<str>>,
    /// The `{"ev":"event",...}` frame.
    pub frame: Utf8Bytes,
}

impl Published {
    /// Encodes `event` of chat `key` as a push.
    pub fn new(key: ChatKey, event: &Event) -> Arc<Published> {
        let frame = EventPush::new(&key.chat, event).encode();
        Arc::new(Published {
            seq: event.seq,
            kind: event.kind,
            user: event.user.as_deref().map(Arc::from),
            frame: Utf8Bytes::from(frame),
            key,
        })
    }
}
