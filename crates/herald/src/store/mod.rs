//! The store: everything herald keeps on disk, behind one seam per
//! capability. The chat layer, the hub, the hooks and the revocation list
//! are its callers; `server.rs` opens one backend and hands it out as
//! `Arc<dyn Store>`.
//!
//! # Capabilities
//!
//! Each capability is a trait that every backend implements in full: none
//! has a default that answers "unavailable", so a backend that lacks a
//! feature does not compile. [`Store`] is their union, implemented for
//! every type that has them all.
//!
//! | capability | trait | seam file | SQLite | PostgreSQL |
//! |---|---|---|---|---|
//! | the event log: writes, chats, pages of events, heads, `client_id`s | [`EventLog`] | `log.rs` | `sqlite/log.rs` | `postgres/log.rs` |
//! | members and the inbox | [`Membership`] | `members.rs` | `sqlite/members.rs` | `postgres/members.rs` |
//! | moderation and erasure: a user's messages | [`Moderation`] | `moderation.rs` | `sqlite/moderation.rs` | `postgres/moderation.rs` |
//! | revocations | [`RevocationList`] | `revocations.rs` | `sqlite/revocations.rs` | `postgres/revocations.rs` |
//! | webhook positions | [`WebhookPositions`] | `webhook.rs` | `sqlite/webhook.rs` | `postgres/webhook.rs` |
//! | lifecycle: ready, close, shards | [`Lifecycle`] | `lifecycle.rs` | `sqlite/mod.rs` | `postgres/mod.rs` |
//! | v1.2 conversations: profiles, chat and member lists, threads, pins, reactions, streams | [`Conversations`] | `conversations.rs` | `sqlite/conversations.rs` | `postgres/conversations.rs` |
//! | v1.2 files: uploads' metadata (the bytes live outside the database) | [`Files`] | `files.rs` | `sqlite/files.rs` | `postgres/files.rs` |
//! | v1.2 a user's data: their memberships and messages, paged per part | [`Export`] | `export.rs` | `sqlite/export.rs` | `postgres/export.rs` |
//! | v1.2 search: messages by their words (an index kept after the commit) | [`Search`] | `search.rs` | `sqlite/search.rs`, `sqlite/search_index.rs` | `postgres/search.rs`, `postgres/search_index.rs` |
//!
//! [`sharded`] routes every capability over PostgreSQL shards (by chat, or
//! to every shard and merged), behind each shard's bulkhead and breaker.
//! Every write to the log follows one set of rules, [`apply`], through each
//! backend's transaction (`sqlite/tx.rs`, `postgres/tx.rs`); a
//! backend's schema is in `sqlite/schema.rs` and `postgres/schema.sql`.
//!
//! # Adding a capability
//!
//! A capability is a trait in a seam file here, one file per backend beside
//! the others, one more `impl` block in [`sharded`], and one more bound on
//! [`Store`] (so a backend that lacks one does not compile). What it stores
//! changes the schema: a new version in `sqlite/schema.rs` and
//! `postgres/schema.sql`. Its writes are [`Write`] variants whose rules go
//! in [`apply`], so they commit in the log's batches (v1.2's files: a file's
//! row, and attaching it, commit with the message that names it).
//!
//! # The contract every backend keeps
//!
//! - `write` resolves `Ok` only once the change is durable (on disk, fsynced);
//! - each chat's events get seq 1, 2, 3, ... in commit order, no gaps, no reuse;
//! - an `Append` with a `client_id` already stored for the same chat and user
//!   stores nothing and answers the first event's seq;
//! - member counts are kept as counts, never recounted on a request;
//! - many concurrent writes share few commits (group commit).

mod apply;
pub(crate) use apply::now_ms;
mod columns;
mod conversations;
mod export;
mod files;
mod lifecycle;
mod log;
mod members;
mod moderation;
mod pg_tls;
pub mod postgres;
mod revocations;
mod search;
pub mod search_pending;
pub mod search_text;
pub mod settings;
pub mod shard_identity;
pub mod shard_spec;
pub mod sharded;
pub mod sqlite;
mod webhook;

pub use conversations::{Conversations, ThreadCursor, id_cursor, id_from_cursor, thread_order};
pub use export::{Export, ExportCursor, Exported, export_order};
pub use files::{Files, NewFile, StoredFile};
pub use lifecycle::{Lifecycle, ShardStatus};
pub use log::{Actor, Conversation, EventLog, Fetched, Moved, Write, Written};
pub use members::{InboxCursor, Member, Membership, inbox_order, unread};
pub use moderation::Moderation;
pub use revocations::{Revocation, RevocationList, Revoked};
pub use search::{Hit, Search, SearchCursor, SearchQuery, search_order};
pub use shard_spec::{ShardName, ShardSpec};
pub use webhook::{Undelivered, WebhookAck, WebhookPositions};

use std::sync::Arc;

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

pub use crate::model::BoxFuture;

/// Why a store operation failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    BadRequest(String),
    /// v1.2: a streamed message's body would grow past the body limit.
    #[error("{0}")]
    TooLarge(String),
    /// The backend cannot take or finish the operation now; retrying later may work.
    #[error("{0}")]
    Unavailable(String),
    /// Refused without trying (an open breaker, a full bulkhead): retry after the given time.
    #[error("{message}")]
    Refused { message: String, retry_after_ms: u64 },
}

/// Everything a store keeps: the union of the capabilities, so that a
/// caller can hold one `Arc<dyn Store>` and call any of them. Implemented
/// for every type that has every capability; nothing implements it by hand.
pub trait Store:
    EventLog
    + Membership
    + Moderation
    + RevocationList
    + WebhookPositions
    + Lifecycle
    + Conversations
    + Files
    + Export
    + Search
{
}

impl<T> Store for T where
    T: EventLog
        + Membership
        + Moderation
        + RevocationList
        + WebhookPositions
        + Lifecycle
        + Conversations
        + Files
        + Export
        + Search
        + ?Sized
{
}

/// For test fakes of a store: implements whole capabilities the fake does
/// not keep, each method answering `Unavailable`, so a fake of the log
/// names what it leaves out (`not_kept!(Fake: Moderation, RevocationList)`)
/// instead of a default doing it for every backend. Tests only: a backend
/// implements every capability.
#[cfg(test)]
macro_rules! not_kept {
    (@answer $what:literal) => {
        Box::pin(std::future::ready(Err($crate::store::StoreError::Unavailable(
            concat!("this test fake keeps no ", $what).into(),
        ))))
    };
    (@ $ty:ty, Membership) => {
        impl $crate::store::Membership for $ty {
            fn member<'a>(
                &'a self,
                _: &'a $crate::model::ChatKey,
                _: &'a str,
            ) -> $crate::store::BoxFuture<'a, Result<Option<$crate::store::Member>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "members")
            }
            fn inbox<'a>(
                &'a self,
                _: &'a str,
                _: &'a str,
                _: Option<&'a $crate::store::InboxCursor>,
                _: u32,
            ) -> $crate::store::BoxFuture<'a, Result<Vec<herald_protocol::reply::InboxEntry>, $crate::store::StoreError>>
            {
                $crate::store::not_kept!(@answer "inboxes")
            }
            fn member_chats<'a>(
                &'a self,
                _: &'a str,
                _: &'a str,
                _: u32,
            ) -> $crate::store::BoxFuture<'a, Result<Vec<(String, i64)>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "members")
            }
            fn inbox_entry<'a>(
                &'a self,
                _: &'a $crate::model::ChatKey,
                _: &'a str,
            ) -> $crate::store::BoxFuture<
                'a,
                Result<Option<herald_protocol::reply::InboxEntry>, $crate::store::StoreError>,
            > {
                $crate::store::not_kept!(@answer "inboxes")
            }
        }
    };
    (@ $ty:ty, Moderation) => {
        impl $crate::store::Moderation for $ty {
            fn user_messages<'a>(
                &'a self,
                _: &'a str,
                _: &'a str,
                _: Option<(&'a str, u64)>,
                _: u32,
            ) -> $crate::store::BoxFuture<'a, Result<Vec<(String, u64)>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "users' messages")
            }
        }
    };
    (@ $ty:ty, RevocationList) => {
        impl $crate::store::RevocationList for $ty {
            fn revoke<'a>(
                &'a self,
                _: &'a str,
                _: &'a str,
                _: i64,
            ) -> $crate::store::BoxFuture<'a, Result<(), $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "revocations")
            }
            fn revocations(
                &self,
                _: Option<std::time::Duration>,
            ) -> $crate::store::BoxFuture<'_, Result<$crate::store::Revoked, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "revocations")
            }
        }
    };
    (@ $ty:ty, WebhookPositions) => {
        impl $crate::store::WebhookPositions for $ty {
            fn track_webhook(&self) {}
            fn webhook_pending(
                &self,
                _: usize,
                _: u32,
                _: u32,
                _: u64,
            ) -> $crate::store::BoxFuture<'_, Result<Vec<$crate::store::Undelivered>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "webhook positions")
            }
            fn webhook_ack(
                &self,
                _: usize,
                _: Vec<$crate::store::WebhookAck>,
            ) -> $crate::store::BoxFuture<'_, Result<(), $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "webhook positions")
            }
        }
    };
    (@ $ty:ty, Lifecycle) => {
        /// A fake has nothing to open or close: always ready, no shards.
        impl $crate::store::Lifecycle for $ty {
            fn ready(&self) -> $crate::store::BoxFuture<'_, Result<(), $crate::store::StoreError>> {
                Box::pin(std::future::ready(Ok(())))
            }
            fn close(&self) -> $crate::store::BoxFuture<'_, ()> {
                Box::pin(std::future::ready(()))
            }
            fn shards(&self) -> Vec<$crate::store::ShardStatus> {
                Vec::new()
            }
        }
    };
    (@ $ty:ty, Conversations) => {
        impl $crate::store::Conversations for $ty {
            fn chat_view<'a>(
                &'a self,
                _: &'a $crate::model::ChatKey,
            ) -> $crate::store::BoxFuture<
                'a,
                Result<Option<($crate::model::ChatInfo, herald_protocol::reply::Profile)>, $crate::store::StoreError>,
            > {
                $crate::store::not_kept!(@answer "profiles")
            }
            fn chat_list<'a>(
                &'a self,
                _: &'a str,
                _: Option<&'a str>,
                _: u32,
            ) -> $crate::store::BoxFuture<'a, Result<Vec<herald_protocol::reply::ChatView>, $crate::store::StoreError>>
            {
                $crate::store::not_kept!(@answer "chat lists")
            }
            fn member_list<'a>(
                &'a self,
                _: &'a $crate::model::ChatKey,
                _: Option<&'a str>,
                _: u32,
            ) -> $crate::store::BoxFuture<
                'a,
                Result<(Vec<herald_protocol::reply::MemberEntry>, u64), $crate::store::StoreError>,
            > {
                $crate::store::not_kept!(@answer "member lists")
            }
            fn thread_fetch<'a>(
                &'a self,
                _: &'a $crate::model::ChatKey,
                _: Option<&'a str>,
                _: u64,
                _: u64,
                _: u32,
            ) -> $crate::store::BoxFuture<'a, Result<$crate::store::Fetched, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "threads")
            }
            fn thread_list<'a>(
                &'a self,
                _: &'a str,
                _: &'a str,
                _: Option<&'a str>,
                _: Option<&'a $crate::store::ThreadCursor>,
                _: u32,
            ) -> $crate::store::BoxFuture<'a, Result<Vec<herald_protocol::reply::ThreadEntry>, $crate::store::StoreError>>
            {
                $crate::store::not_kept!(@answer "threads")
            }
            fn pin_list<'a>(
                &'a self,
                _: &'a $crate::model::ChatKey,
            ) -> $crate::store::BoxFuture<'a, Result<Vec<herald_protocol::reply::PinEntry>, $crate::store::StoreError>>
            {
                $crate::store::not_kept!(@answer "pins")
            }
            fn reaction_users<'a>(
                &'a self,
                _: &'a $crate::model::ChatKey,
                _: u64,
                _: usize,
            ) -> $crate::store::BoxFuture<
                'a,
                Result<std::collections::BTreeMap<String, Vec<String>>, $crate::store::StoreError>,
            > {
                $crate::store::not_kept!(@answer "reactions")
            }
            fn idle_streams(
                &self,
                _: i64,
                _: u32,
            ) -> $crate::store::BoxFuture<'_, Result<Vec<($crate::model::ChatKey, u64)>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "streams")
            }
        }
    };
    (@ $ty:ty, Files) => {
        impl $crate::store::Files for $ty {
            fn files<'a>(
                &'a self,
                _: &'a $crate::model::ChatKey,
                _: &'a [String],
            ) -> $crate::store::BoxFuture<'a, Result<Vec<$crate::store::StoredFile>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "files")
            }
            fn file_chats<'a>(
                &'a self,
                _: &'a str,
                _: &'a [String],
            ) -> $crate::store::BoxFuture<'a, Result<Vec<(String, String)>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "files")
            }
            fn sweepable(
                &self,
                _: i64,
                _: u32,
            ) -> $crate::store::BoxFuture<'_, Result<Vec<$crate::model::FileKey>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "files")
            }
        }
    };
    (@ $ty:ty, Export) => {
        impl $crate::store::Export for $ty {
            fn export_parts(&self) -> usize {
                1
            }
            fn export_members<'a>(
                &'a self,
                _: usize,
                _: &'a str,
                _: &'a str,
                _: Option<&'a str>,
                _: u32,
            ) -> $crate::store::BoxFuture<'a, Result<Vec<(String, u64)>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "exports")
            }
            fn export_messages<'a>(
                &'a self,
                _: usize,
                _: &'a str,
                _: &'a str,
                _: Option<&'a $crate::store::ExportCursor>,
                _: u32,
            ) -> $crate::store::BoxFuture<'a, Result<Vec<$crate::store::Exported>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "exports")
            }
        }
    };
    (@ $ty:ty, Search) => {
        impl $crate::store::Search for $ty {
            fn search<'a>(
                &'a self,
                _: &'a $crate::store::SearchQuery,
            ) -> $crate::store::BoxFuture<'a, Result<Vec<$crate::store::Hit>, $crate::store::StoreError>> {
                $crate::store::not_kept!(@answer "search index")
            }
        }
    };
    ($ty:ty: $($cap:ident),+ $(,)?) => { $( $crate::store::not_kept!(@ $ty, $cap); )+ };
}
#[cfg(test)]
pub(crate) use not_kept;
