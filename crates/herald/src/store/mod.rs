//! The event log seam. A [`Store`] appends events with per-chat seq numbers
//! and answers reads; the chat layer is its only caller. Backends: [`sqlite`]
//! (embedded, the default). PostgreSQL shards plug in behind the same trait.
//!
//! The contract every backend keeps:
//! - `write` resolves `Ok` only once the change is durable (on disk, fsynced);
//! - each chat's events get seq 1, 2, 3, ... in commit order, no gaps, no reuse;
//! - an `Append` with a `client_id` already stored for the same chat and user
//!   stores nothing and answers the first event's seq;
//! - member counts are kept as counts, never recounted on a request;
//! - many concurrent writes share few commits (group commit).

mod apply;
pub(crate) use apply::now_ms;
mod pg_tls;
pub mod postgres;
pub mod settings;
pub mod shard_identity;
pub mod shard_spec;
pub mod sharded;
pub mod sqlite;

pub use shard_spec::{ShardName, ShardSpec};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use herald_protocol::Event;
use herald_protocol::reply::InboxEntry;
use serde_json::value::RawValue;

use crate::model::{ChatInfo, ChatKey};

/// A seq as SQL stores it (a signed 64-bit integer). Seqs never come near
/// `i64::MAX`; a client's `after` may, and must not wrap negative (which
/// would read the log from its start): it is capped instead.
pub(crate) fn sql_seq(seq: u64) -> i64 {
    i64::try_from(seq).unwrap_or(i64::MAX)
}

/// Marks a backend's writer dead when its thread or task ends, however it
/// ends (a panic that unwinds past its supervision included), and says so
/// loudly; the backend's `ready` reads the flag.
pub(crate) struct Alive(pub Arc<std::sync::atomic::AtomicBool>, pub &'static str);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::SeqCst);
        if std::thread::panicking() {
            tracing::error!(backend = self.1, "a store writer died; the node is not ready");
            metrics::counter!("herald_store_errors_total", "kind" => "writer_died").increment(1);
        }
    }
}

/// A boxed future, so that `Store` can be a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a store operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    /// The backend cannot take or finish the operation now; retrying later may work.
    #[error("{0}")]
    Unavailable(String),
    /// Refused without trying (an open breaker, a full bulkhead): retry after the given time.
    #[error("{message}")]
    Refused { message: String, retry_after_ms: u64 },
}

/// How one shard is doing, for `/readyz`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardStatus {
    /// The routing name, which for a bare URL spells host, port and
    /// database: for logs and operators, never serialized.
    #[serde(skip_serializing)]
    pub name: String,
    /// What a page anyone may read shows: the name given with `NAME=`, or
    /// `#n`, the shard's place (from 1) in the node's `--store` list.
    pub label: String,
    /// `closed`, `open` or `half_open`.
    pub breaker: &'static str,
    /// Operations running on the shard now.
    pub in_flight: usize,
    /// Operations waiting for the shard's bulkhead.
    pub waiting: usize,
}

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
    },
    React {
        key: ChatKey,
        user: Arc<str>,
        target: u64,
        emoji: String,
        on: bool,
    },
    Read {
        key: ChatKey,
        user: Arc<str>,
        seq: u64,
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
            | Write::Mute { key, .. } => key,
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
}

/// A page of a chat's log.
#[derive(Debug)]
pub struct Fetched {
    pub events: Vec<Event>,
    pub info: ChatInfo,
    /// Whether events after the last one returned exist.
    pub more: bool,
}

/// A member of a chat as the store keeps them (v1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// The read position.
    pub read: u64,
    /// Until when (ms since the epoch) the member is muted: `None` when not
    /// muted (or the mute has run out), `Some(i64::MAX)` for a mute without end.
    pub muted_until_ms: Option<i64>,
}

/// Where a page of an inbox starts: after the chat with this latest-activity
/// `ts` and name, in the inbox's order (ts descending, then chat ascending).
/// The same order on every shard, so shards' pages merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxCursor {
    pub ts: i64,
    pub chat: String,
}

impl InboxCursor {
    /// The opaque string clients get: hex, so nobody mistakes it for something to build.
    pub fn encode(&self) -> String {
        let plain = format!("{}:{}", self.ts, self.chat);
        plain.bytes().map(|b| format!("{b:02x}")).collect()
    }

    /// The inverse of [`InboxCursor::encode`]; `None` for anything it did not make.
    pub fn decode(s: &str) -> Option<InboxCursor> {
        if !s.len().is_multiple_of(2) || s.len() > 2 * 300 {
            return None;
        }
        let bytes: Option<Vec<u8>> =
            (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
        let plain = String::from_utf8(bytes?).ok()?;
        let (ts, chat) = plain.split_once(':')?;
        if !herald_protocol::ids::is_valid_id(chat) {
            return None;
        }
        Some(InboxCursor { ts: ts.parse().ok()?, chat: chat.to_string() })
    }

    /// Whether `entry` comes after this cursor in the inbox's order.
    pub fn is_before(&self, entry: &InboxEntry) -> bool {
        entry.ts < self.ts || (entry.ts == self.ts && entry.chat.as_str() > self.chat.as_str())
    }
}

/// The inbox's order: latest activity first, ties by chat name.
pub fn inbox_order(a: &InboxEntry, b: &InboxEntry) -> std::cmp::Ordering {
    b.ts.cmp(&a.ts).then_with(|| a.chat.cmp(&b.chat))
}

/// How many `message` events a member has not read, from counts kept as
/// counts (no history is read): `messages` in the chat, `messages_at_read`
/// of them at or below the read position, the member's `own` messages in
/// the chat and `own_at_read` of them at or below the read position, and
/// `deleted_by_others_after`: other users' messages above the read position
/// that were deleted.
pub fn unread(messages: u64, messages_at_read: u64, own: u64, own_at_read: u64, deleted_by_others_after: u64) -> u64 {
    let above = messages.saturating_sub(messages_at_read);
    let own_above = own.saturating_sub(own_at_read);
    above.saturating_sub(own_above).saturating_sub(deleted_by_others_after)
}

/// One user's revocation: tokens of `user` in `ws` issued at or before
/// `revoked_ms` (ms since the epoch) are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    pub ws: String,
    pub user: String,
    pub revoked_ms: i64,
}

/// What [`Store::revocations`] read.
#[derive(Debug, Clone, Default)]
pub struct Revoked {
    pub rows: Vec<Revocation>,
    /// False when some shard did not answer: its rows may be missing, and
    /// the reader should read everything again later.
    pub complete: bool,
}

// --- webhook: delivery positions -------------------------------------------

/// A chat holding events the webhook has not delivered yet, with the first of
/// them. Backends keep, per chat, the last acknowledged seq (`delivered`)
/// beside the latest seq stored while the webhook was on (`head`); only
/// chats with `head > delivered` sit in the index the webhook reads, so an
/// idle chat costs nothing.
#[derive(Debug, Clone)]
pub struct Undelivered {
    /// The backend's row id of the chat: what [`Store::webhook_ack`] takes.
    pub chat_id: i64,
    pub key: ChatKey,
    /// The last seq the webhook's receiver acknowledged.
    pub delivered: u64,
    /// The chat's latest seq stored while the webhook was on.
    pub head: u64,
    /// When (ms since the epoch) the oldest event not acknowledged was
    /// stored, or a moment before it: what the lag is measured from.
    pub since_ms: i64,
    /// Events with seq > `delivered`, in seq order, at most the limit asked.
    pub events: Vec<Event>,
    /// The chat's members when it has at most the number asked; `None` above.
    pub members: Option<Vec<String>>,
}

/// A position the webhook's receiver acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookAck {
    pub chat_id: i64,
    /// The last seq delivered.
    pub seq: u64,
    /// When the first event after `seq` was stored, or a lower bound of it.
    pub since_ms: i64,
}

/// The event log. See the module documentation for the contract.
pub trait Store: Send + Sync + 'static {
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
    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
        Box::pin(async move {
            let mut heads = Vec::with_capacity(keys.len());
            for key in keys {
                heads.push(self.chat(key).await?.map(|info| info.seq));
            }
            Ok(heads)
        })
    }

    /// `user`'s membership of `key`: `Ok(None)` for a non-member, `NotFound`
    /// for a missing chat.
    fn member<'a>(&'a self, key: &'a ChatKey, user: &'a str) -> BoxFuture<'a, Result<Option<Member>, StoreError>> {
        let _ = (key, user);
        Box::pin(std::future::ready(Err(StoreError::Unavailable("this store keeps no members".into()))))
    }

    /// A page of `user`'s chats in workspace `ws`, in the inbox's order
    /// ([`inbox_order`]), those after `after` only, at most `limit` of them;
    /// answers one more than `limit` when there are more, so the caller
    /// knows whether to say `more`.
    fn inbox<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a InboxCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<InboxEntry>, StoreError>> {
        let _ = (ws, user, after, limit);
        Box::pin(std::future::ready(Err(StoreError::Unavailable("this store keeps no inbox".into()))))
    }

    /// The chats `user` of `ws` is a member of, with their latest event's
    /// time, most recently active first, at most `limit`: what a live inbox follows.
    fn member_chats<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>> {
        let _ = (ws, user, limit);
        Box::pin(std::future::ready(Err(StoreError::Unavailable("this store keeps no members".into()))))
    }

    /// One chat's inbox entry for `user`; `None` if not a member (or no chat).
    fn inbox_entry<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<InboxEntry>, StoreError>> {
        let _ = (key, user);
        Box::pin(std::future::ready(Err(StoreError::Unavailable("this store keeps no inbox".into()))))
    }

    // --- revocations, erasure and idempotent sends under the send hook

    /// Stores that `user` of `ws` revoked every token issued (`iat`) at or
    /// before `revoked_ms`; a later revocation of the same user replaces an
    /// earlier one, an earlier one is ignored. Durable when it resolves.
    fn revoke<'a>(&'a self, ws: &'a str, user: &'a str, revoked_ms: i64) -> BoxFuture<'a, Result<(), StoreError>> {
        let _ = (ws, user, revoked_ms);
        Box::pin(std::future::ready(Err(StoreError::Unavailable("this store keeps no revocations".into()))))
    }

    /// The stored revocations: all of them with `within` `None`, else those
    /// stored in the last `within` by the store's own clock (so that nodes
    /// whose clocks differ read the same rows).
    fn revocations(&self, within: Option<std::time::Duration>) -> BoxFuture<'_, Result<Revoked, StoreError>> {
        let _ = within;
        Box::pin(std::future::ready(Err(StoreError::Unavailable("this store keeps no revocations".into()))))
    }

    /// A page of the `message` events that `user` sent in workspace `ws` and
    /// that are not deleted, as (chat, seq) in that order, those after
    /// `after` only, at most `limit`.
    fn user_messages<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<(&'a str, u64)>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
        let _ = (ws, user, after, limit);
        Box::pin(std::future::ready(Err(StoreError::Unavailable("this store cannot list a user's messages".into()))))
    }

    /// The seq of the event `user` already stored in `key` with `client_id`,
    /// if any. A backend that cannot tell answers `None` (the write's own
    /// check still keeps sends idempotent).
    fn client_id_seq<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
        client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let _ = (key, user, client_id);
        Box::pin(std::future::ready(Ok(None)))
    }

    /// Whether the backend answers now (for `/readyz`).
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Finishes every write already accepted, then refuses new ones.
    fn close(&self) -> BoxFuture<'_, ()>;

    /// Per-shard state, for backends with shards.
    fn shards(&self) -> Vec<ShardStatus> {
        Vec::new()
    }

    // --- webhook: delivery positions (backends without them answer `Unavailable`; the webhook retries)

    /// From now on, keep each chat's webhook position as writes store
    /// events. Called once at start, before any write, when a webhook is
    /// configured (a node without one does not pay for it).
    fn track_webhook(&self) {}

    /// Up to `chats` chats of shard `shard` (an index into
    /// [`Store::shards`]; 0 for a store without shards) with undelivered events, oldest
    /// first, each with up to `events` of them and, when it has at most
    /// `members_max` members, its member list.
    fn webhook_pending(
        &self,
        shard: usize,
        chats: u32,
        events: u32,
        members_max: u64,
    ) -> BoxFuture<'_, Result<Vec<Undelivered>, StoreError>> {
        let _ = (shard, chats, events, members_max);
        Box::pin(std::future::ready(Err(StoreError::Unavailable("this store keeps no webhook positions".into()))))
    }

    /// Stores acknowledged positions (a position never moves back).
    fn webhook_ack(&self, shard: usize, acks: Vec<WebhookAck>) -> BoxFuture<'_, Result<(), StoreError>> {
        let _ = (shard, acks);
        Box::pin(std::future::ready(Err(StoreError::Unavailable("this store keeps no webhook positions".into()))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unread_counts_others_live_messages_above_the_read_position() {
        // 10 messages, 4 at or below read; 3 of mine, 1 of them below read; 1 of another's above read deleted.
        assert_eq!(unread(10, 4, 3, 1, 1), 3);
        // Nothing read yet, nothing mine: all of them.
        assert_eq!(unread(7, 0, 0, 0, 0), 7);
        // Read to the end: nothing, whatever was deleted or sent before.
        assert_eq!(unread(7, 7, 2, 2, 0), 0);
        // Only my own messages above the read position: nothing unread.
        assert_eq!(unread(5, 2, 4, 1, 0), 0);
        // Every other message above read deleted.
        assert_eq!(unread(5, 2, 1, 0, 2), 0);
        // Counts never go negative, even from an inconsistent read.
        assert_eq!(unread(1, 3, 0, 0, 5), 0);
    }

    #[test]
    fn cursors_round_trip_and_refuse_what_they_did_not_make() {
        let c = InboxCursor { ts: 1732233600123, chat: "general:a.b".into() };
        assert_eq!(InboxCursor::decode(&c.encode()), Some(c));
        for bad in ["", "zz", "abc", "3a", &"00".repeat(400)] {
            assert_eq!(InboxCursor::decode(bad), None, "{bad}");
        }
        let not_an_id = InboxCursor { ts: 1, chat: "a b".into() }.encode();
        assert_eq!(InboxCursor::decode(&not_an_id), None);
    }
}
