//! Each connection's watches on this node, by connection: what a
//! connection's watch cap counts, and what its close ends.
//!
//! The entries' watchers are the truth (a watch begins and ends there, a
//! `leave` on another device ends it there); this index follows them under
//! the entry's lock, so a connection's count is never stale: a watch ended
//! by a `leave` frees its place at once. Plain data behind its own locks,
//! taken last (under an entry's lock) and never held while taking another.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::model::ChatKey;
use crate::outbox::ConnId;

/// Shards of the index, by connection id.
const SHARDS: usize = 64;

/// The chats each connection watches (or is starting to watch) here.
pub(super) struct Conns {
    shards: Box<[Mutex<Shard>]>,
}

/// Part of the index.
type Shard = HashMap<ConnId, Vec<ChatKey>>;

impl Conns {
    pub(super) fn new() -> Conns {
        Conns { shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect() }
    }

    fn shard(&self, conn: ConnId) -> std::sync::MutexGuard<'_, Shard> {
        self.shards[(conn % SHARDS as u64) as usize].lock().expect("hub conns lock")
    }

    /// `conn` began watching `key`.
    pub(super) fn add(&self, conn: ConnId, key: &ChatKey) {
        let mut shard = self.shard(conn);
        let keys = shard.entry(conn).or_default();
        if !keys.contains(key) {
            // Most connections watch one chat or a few: room for exactly
            // one, then doubling, not the four a first push makes room for.
            let more = keys.len().max(1);
            keys.reserve_exact(more);
            keys.push(key.clone());
        }
    }

    /// `conn`'s watch of `key` ended.
    pub(super) fn remove(&self, conn: ConnId, key: &ChatKey) {
        let mut shard = self.shard(conn);
        let Some(keys) = shard.get_mut(&conn) else { return };
        keys.retain(|k| k != key);
        if keys.is_empty() {
            shard.remove(&conn);
        }
    }

    /// Whether `conn` may watch `key` with at most `max` watches: it has
    /// fewer, or watches `key` already (a new watch replaces that one).
    pub(super) fn has_room(&self, conn: ConnId, key: &ChatKey, max: usize) -> bool {
        let shard = self.shard(conn);
        shard.get(&conn).is_none_or(|keys| keys.len() < max || keys.contains(key))
    }

    /// The chats `conn` watches, forgotten here (its close ends them).
    pub(super) fn take(&self, conn: ConnId) -> Vec<ChatKey> {
        self.shard(conn).remove(&conn).unwrap_or_default()
    }
}
