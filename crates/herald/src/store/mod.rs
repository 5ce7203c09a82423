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
mod pg_tls;
pub mod postgres;
pub mod shard_identity;
pub mod shard_spec;
pub mod sharded;
pub mod sqlite;

pub use shard_spec::{ShardName, ShardSpec};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use herald_protocol::Event;
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
}

impl Write {
    pub fn key(&self) -> &ChatKey {
        match self {
            Write::Join { key, .. }
            | Write::Leave { key, .. }
            | Write::Append { key, .. }
            | Write::React { key, .. }
            | Write::Read { key, .. }
            | Write::PutChat { key, .. } => key,
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

    /// Whether the backend answers now (for `/readyz`).
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Finishes every write already accepted, then refuses new ones.
    fn close(&self) -> BoxFuture<'_, ()>;

    /// Per-shard state, for backends with shards.
    fn shards(&self) -> Vec<ShardStatus> {
        Vec::new()
    }
}
