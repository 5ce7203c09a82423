//! The lifecycle every backend has: whether it answers (for `/readyz`),
//! closing it on shutdown, and its shards' health.
//!
//! Not here: opening a backend (each has its own `open`, called by `server.rs`).

use super::{BoxFuture, StoreError};

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

/// A backend's lifecycle.
pub trait Lifecycle: Send + Sync + 'static {
    /// Whether the backend answers now (for `/readyz`).
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Finishes every write already accepted, then refuses new ones.
    fn close(&self) -> BoxFuture<'_, ()>;

    /// Per-shard state: one entry per shard, in the order `--store` gave
    /// them; empty for a backend without shards.
    fn shards(&self) -> Vec<ShardStatus>;
}
