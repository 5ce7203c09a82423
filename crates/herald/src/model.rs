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
    /// v1.2: whether the chat ever had a profile (a `profile` event): without one, `join` need not read it.
    pub profiled: bool,
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
    /// When it was stored (ms since the epoch).
    pub ts: i64,
    /// The `{"ev":"event",...}` frame.
    pub frame: Utf8Bytes,
    /// Read back from the log (a catch-up), not delivered as it was stored: its frame shows the
    /// stored view as of that read, which may already include later events' changes.
    pub from_log: bool,
}

impl Published {
    /// Encodes `event` of chat `key` as a push.
    pub fn new(key: ChatKey, event: &Event) -> Arc<Published> {
        let frame = EventPush::new(&key.chat, event).encode();
        Arc::new(Published {
            seq: event.seq,
            kind: event.kind,
            user: event.user.as_deref().map(Arc::from),
            ts: event.ts,
            frame: Utf8Bytes::from(frame),
            key,
            from_log: false,
        })
    }

    /// `event` as a catch-up read it back from the log (see [`Published::from_log`]).
    pub fn from_log(key: ChatKey, event: &Event) -> Arc<Published> {
        let mut p = Arc::into_inner(Published::new(key, event)).expect("just made");
        p.from_log = true;
        Arc::new(p)
    }
}

/// Something a node says to the other nodes on a chat's subject that is not
/// an event: never stored, never sequenced. The broker keeps signals apart
/// from events (a NATS header), so the hub's seq and gap logic never sees one.
///
/// Presence travels as each node's local set of present users: a change is a
/// `Delta` numbered per (node incarnation, chat entry); a receiver that sees
/// a number missing asks that node for its whole set (`Ask` with `of`), and a
/// `Beat` after a burst of changes tells receivers the latest number, so a
/// lost last change is noticed too.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Signal {
    /// `user` is typing (already throttled by the typist's node).
    Typing { user: String },
    /// One change of the sender's local set: its `n`th for this chat since the
    /// sender's entry `epoch` began (1 is the first, from an empty set).
    Delta { from: String, epoch: u64, n: u64, user: String, present: bool },
    /// The sender's latest delta number.
    Beat { from: String, epoch: u64, n: u64 },
    /// Send your local set: every node (`of` absent) or only that incarnation.
    Ask {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        of: Option<String>,
    },
    /// The sender's whole local set as of delta `n`, in `parts` parts (0-based `part`).
    State { from: String, epoch: u64, n: u64, part: u32, parts: u32, users: Vec<String> },
    /// v1.2: streamed message `target` grew by `text`, its text `at` UTF-16 code units long before.
    Append { target: u64, text: String, at: u64 },
}

impl Signal {
    /// The metrics label of this kind.
    pub fn label(&self) -> &'static str {
        match self {
            Signal::Typing { .. } => "typing",
            Signal::Delta { .. } => "delta",
            Signal::Beat { .. } => "beat",
            Signal::Ask { .. } => "ask",
            Signal::State { .. } => "state",
            Signal::Append { .. } => "append",
        }
    }
}

/// A file's place: its workspace, chat and id. The bytes' key in a backend
/// is [`FileKey::object`]. Lives here, not in `files`, because the store
/// keeps files' rows and the files backends keep their bytes: both name them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub ws: String,
    pub chat: String,
    /// Random, unique across the cell (`f` and 22 characters of A-Z a-z 0-9).
    pub id: String,
}

impl FileKey {
    /// The object's name in a backend: `ws/chat/id` (ids never contain `/`).
    pub fn object(&self) -> String {
        format!("{}/{}/{}", self.ws, self.chat, self.id)
    }
}

/// A boxed future, so that the seams (store, broker, bus, files) can be trait objects.
pub type BoxFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// The time a file's download URL is valid for: from `start_ms` to `end_ms`. Here, not in
/// `files`, because the hub's window of a hot chat keeps frames signed within one and must know
/// when they go stale. A backend signs the same URL for the same file and window, so an event
/// rendered once per window can be served again within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlWindow {
    pub start_ms: i64,
    pub end_ms: i64,
}

/// A download URL is valid for at least this long after the frame that
/// carried it was sent (the contract's one hour).
pub const URL_VALID_MS: i64 = 3_600_000;

/// Beyond the second hour: a frame signed in the last moments of an hour and sent a little later
/// still carries a URL valid for an hour.
const URL_SLACK_MS: i64 = 300_000;

impl UrlWindow {
    /// The window a URL signed at `now_ms` gets: the hour `now_ms` falls in
    /// and the hour after it, so every URL signed within one hour is the same
    /// and is valid for at least [`URL_VALID_MS`] from any moment of that hour.
    pub fn at(now_ms: i64) -> UrlWindow {
        let start_ms = now_ms - now_ms.rem_euclid(URL_VALID_MS);
        UrlWindow { start_ms, end_ms: start_ms + 2 * URL_VALID_MS + URL_SLACK_MS }
    }
}

/// The length of `event`'s JSON encoding (a fetch page's, a webhook batch's), counted, not built.
pub fn encoded_len(event: &herald_protocol::Event) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, event);
    count.0
}
