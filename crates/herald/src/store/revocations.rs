//! The revocations capability: the durable list of users whose tokens issued
//! before a moment are refused. Nodes poll it (`revoke.rs`), so a revocation
//! stored on one node reaches every node, and survives restarts.
//!
//! Not here: checking tokens against the list, or telling other nodes at
//! once (`revoke.rs`); how a backend stores it (the backends' `revocations.rs`).

use std::time::Duration;

use super::{BoxFuture, StoreError};

/// One user's revocation: tokens of `user` in `ws` issued at or before
/// `revoked_ms` (ms since the epoch) are refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revocation {
    pub ws: String,
    pub user: String,
    pub revoked_ms: i64,
}

/// What [`RevocationList::revocations`] read.
#[derive(Debug, Clone, Default)]
pub struct Revoked {
    pub rows: Vec<Revocation>,
    /// False when some shard did not answer: its rows may be missing, and
    /// the reader should read everything again later.
    pub complete: bool,
}

/// The stored revocations (like a certificate revocation list, of users).
pub trait RevocationList: Send + Sync + 'static {
    /// Stores that `user` of `ws` revoked every token issued (`iat`) at or
    /// before `revoked_ms`; a later revocation of the same user replaces an
    /// earlier one, an earlier one is ignored. Durable when it resolves.
    fn revoke<'a>(&'a self, ws: &'a str, user: &'a str, revoked_ms: i64) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The stored revocations: all of them with `within` `None`, else those
    /// stored in the last `within` by the store's own clock (so that nodes
    /// whose clocks differ read the same rows).
    fn revocations(&self, within: Option<Duration>) -> BoxFuture<'_, Result<Revoked, StoreError>>;
}
