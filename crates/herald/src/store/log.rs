//! The event log capability: a chat's append-only log of events with
//! per-chat seq numbers, the changes that write it ([`Write`]) and the reads
//! of it. Every backend keeps a log; the chat layer and the hub read it.
//!
//! Not here: who is a member and what they read (`members`), the inbox,
//! a user's messages across chats (`moderation`), or how a backend stores
//! any of it (the backends' `log.rs`, and [`super::apply`] for the rules
//! every write follows).

use std::sync::Arc;

use herald_protocol::Event;
use herald_protocol::request::ProfilePatch;
use serde_json::value::RawValue;

use super::{BoxFuture, StoreError};
use crate::model::{ChatInfo, ChatKey};

/// Who asks for a membership change, which decides what a closed or missing chat means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor {
    /// A client over the WebSocket: `join` creates a missing chat as open,
    /// and a closed chat refuses a non-member.
    Client,
    /// The server API: the chat must exist; closed chats accept members.
    Admin,
}

/// A change to a chat. Each one is applied atomically.
#[derive(Debug)]
pub enum Write {
    Join {
        key: ChatKey,
        user: Arc<str>,
        actor: Actor,
    },
    Leave {
        key: ChatKey,
        user: Arc<str>,
        actor: Actor,
    },
    /// A `message` or `system` event. `member_only` refuses users who are not members.
    Append {
        key: ChatKey,
        user: Option<Arc<str>>,
        system: bool,
        body: Box<RawValue>,
        client_id: Option<String>,
        member_only: bool,
        /// v1.2: where the message stands in its chat (thread, quote, mentions, stream).
        conv: Conversation,
    },
    React {
        key: ChatKey,
        user: Arc<str>,
        target: u64,
        emoji: String,
        on: bool,
    },
    /// The user's read position in the chat, or (v1.2) in the thread under root `thread`.
    Read {
        key: ChatKey,
        user: Arc<str>,
        seq: u64,
        thread: Option<u64>,
    },
    /// Creates the chat or sets whether it is open; stores no event.
    PutChat {
        key: ChatKey,
        open: bool,
    },
    // v1.1: the message lifecycle and moderation.
    /// An `edit` event of message `target`. A client (`Actor::Client`) may
    /// edit only its own messages and not while muted; the server API any
    /// message, with `user` (optional) as the event's author.
    Edit {
        key: ChatKey,
        user: Option<Arc<str>>,
        actor: Actor,
        target: u64,
        body: Box<RawValue>,
        /// v1.2: the message's mentions from now on (`None` keeps them).
        mentions: Option<Vec<String>>,
        /// v1.2: the message's files from now on (`None` keeps them, `Some([])` removes them).
        files: Option<Vec<String>>,
    },
    /// A `delete` event of message `target`, which erases the target's body
    /// and the bodies of its edits. Same rules as `Edit`.
    Delete {
        key: ChatKey,
        user: Option<Arc<str>>,
        actor: Actor,
        target: u64,
    },
    /// Bans `user` from the chat (removing them, with a `leave` event, if a
    /// member), or lifts the ban. Stores no other event.
    Ban {
        key: ChatKey,
        user: Arc<str>,
        banned: bool,
    },
    /// Mutes `user` until `until_ms` (`None`: until unmuted), or unmutes (`muted` false).
    Mute {
        key: ChatKey,
        user: Arc<str>,
        muted: bool,
        until_ms: Option<i64>,
    },
    // v1.2: conversations.
    /// Changes the chat's profile; stores a `profile` event when something changed.
    /// A client must be a member and not muted; the server API (`Actor::Admin`) stores it with no user.
    Profile {
        key: ChatKey,
        user: Option<Arc<str>>,
        actor: Actor,
        patch: ProfilePatch,
    },
    /// Pins (`on`) or unpins message `target`; stores a `pin` event when its state changes.
    Pin {
        key: ChatKey,
        user: Arc<str>,
        target: u64,
        on: bool,
    },
    /// Adds `text` to the end of streamed message `target`'s text; with `done`, ends the stream with
    /// an `edit` event of the final body. A client (`Actor::Client`) may extend only its own stream;
    /// the server API and the server's timeout (`Actor::Admin`) any. The whole body stays within
    /// `limit` bytes. An `Actor::Admin` end of a stream that is no longer open changes nothing.
    StreamText {
        key: ChatKey,
        user: Option<Arc<str>>,
        actor: Actor,
        target: u64,
        text: String,
        done: bool,
        limit: usize,
    },
    // v1.2: files.
    /// A new file's row: `user` uploads it for the chat. A client must be a member and not muted.
    /// Stores no event.
    Upload {
        key: ChatKey,
        user: Arc<str>,
        actor: Actor,
        file: super::NewFile,
    },
    /// Forgets file `id` of the chat, whose bytes the sweeper deleted. Stores no event.
    ForgetFile {
        key: ChatKey,
        id: String,
    },
}

/// v1.2: what a `message` says about its place in the chat, beside its body.
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    /// The root of the thread it replies in.
    pub thread: Option<u64>,
    /// The message it quotes.
    pub quote: Option<u64>,
    /// The users it mentions, without duplicates, in the order given.
    pub mentions: Option<Vec<String>>,
    /// Sent with `"stream": true`: its text grows by appends until the stream ends.
    pub stream: bool,
    /// The ids of the files it carries.
    pub files: Option<Vec<String>>,
}

impl Write {
    pub fn key(&self) -> &ChatKey {
        match self {
            Write::Join { key, .. }
            | Write::Leave { key, .. }
            | Write::Append { key, .. }
            | Write::React { key, .. }
            | Write::Read { key, .. }
            | Write::PutChat { key, .. }
            | Write::Edit { key, .. }
            | Write::Delete { key, .. }
            | Write::Ban { key, .. }
            | Write::Mute { key, .. }
            | Write::Profile { key, .. }
            | Write::Pin { key, .. }
            | Write::StreamText { key, .. }
            | Write::Upload { key, .. }
            | Write::ForgetFile { key, .. } => key,
        }
    }

    /// Whether this write's event can carry files: a message or an edit that names some. Every
    /// other write's event has none, whatever its chat holds.
    pub fn names_files(&self) -> bool {
        match self {
            Write::Append { conv, .. } => conv.files.as_ref().is_some_and(|f| !f.is_empty()),
            Write::Edit { files, .. } => files.as_ref().is_some_and(|f| !f.is_empty()),
            _ => false,
        }
    }
}

/// What a durable write did.
#[derive(Debug)]
pub struct Written {
    /// The event stored, if the write stored one.
    pub event: Option<Event>,
    /// The seq to answer with: the new event's, the first event's for a repeated
    /// `client_id`, the stored read position for `Read`, the chat's latest otherwise.
    pub seq: u64,
    /// The chat after the write.
    pub info: ChatInfo,
    /// `StreamText`: the text's length before the appended text, in UTF-16 code units (an
    /// `append` push's `at`); `None` when nothing was appended.
    pub at: Option<u64>,
}

/// A page of a chat's log.
#[derive(Debug)]
pub struct Fetched {
    pub events: Vec<Event>,
    pub info: ChatInfo,
    /// Whether events after the last one returned exist.
    pub more: bool,
}

/// Chats whose latest seq moved, with that seq ([`EventLog::changed_heads`]).
pub type Moved = Vec<(ChatKey, u64)>;

/// The event log. See the `store` module's documentation for the contract
/// every backend keeps.
pub trait EventLog: Send + Sync + 'static {
    /// Applies `write`; resolves once it is durable.
    fn write(&self, write: Write) -> BoxFuture<'_, Result<Written, StoreError>>;

    /// The chat's summary, `None` if it does not exist.
    fn chat(&self, key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>>;

    /// Events of `key` with seq > `after`, at most `limit`, in seq order. With
    /// `member`, fails with `Forbidden` unless that user is a member. A missing
    /// chat is `NotFound`.
    fn fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>>;

    /// The latest seq of each chat of `keys`, in the same order (`None` for a
    /// chat that does not exist). The hub's tail check calls it for every
    /// chat it watches, so backends answer many keys in one read.
    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>>;

    /// The chats whose latest seq moved since this node's previous call, with
    /// that seq: the tail checks' read where the backend can answer it for the
    /// cost of its writes. `None` when it cannot say (the default, a first
    /// call, ...): the caller then asks [`EventLog::heads`] of every chat it watches.
    fn changed_heads(&self) -> BoxFuture<'_, Result<Option<Moved>, StoreError>> {
        Box::pin(async { Ok(None) })
    }

    /// The seq of the event `user` already stored in `key` with `client_id`,
    /// if any: the send hook asks before it calls out, so that a repeated
    /// send is answered without asking the hook again (the write's own check
    /// keeps sends idempotent either way).
    fn client_id_seq<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
        client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>>;
}
