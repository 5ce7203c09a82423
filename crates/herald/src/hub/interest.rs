//! The node's interest in each chat at the broker: the only caller of
//! [`Broker::subscribe`] and [`Broker::unsubscribe`].
//!
//! Two parts of the node want a chat's events: its watchers (the hub's entry
//! for the chat) and its live inboxes (the feed's following of it). Each
//! says so with [`Interest::want`] and stops with [`Interest::unwant`]; the
//! broker hears of the first want and after the last unwant, never per
//! socket, so socket churn does not become broker churn.
//!
//! Both calls take this map's lock and call the broker under it, and their
//! callers hold their own registry's lock (the hub's shard, the feed's chat
//! shard) around them: the broker sees a chat's interest change in the order
//! the watches and followings did. Owns nothing else: not who watches, not
//! who follows.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

use crate::broker::Broker;
use crate::model::ChatKey;

/// Shards of the count map: enough that watch churn on many cores rarely contends.
const SHARDS: usize = 64;

/// How many parts of this node want each chat's events.
pub(super) struct Interest {
    broker: Arc<dyn Broker>,
    /// Chats wanted by at least one part, with how many.
    counts: Box<[Mutex<HashMap<ChatKey, u32>>]>,
    /// Process-local map: a per-process hash seed is fine here (never for routing).
    hasher: std::hash::RandomState,
}

impl Interest {
    /// No interest yet, told to `broker`.
    pub(super) fn new(broker: Arc<dyn Broker>) -> Interest {
        Interest {
            broker,
            counts: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::hash::RandomState::new(),
        }
    }

    fn shard(&self, key: &ChatKey) -> &Mutex<HashMap<ChatKey, u32>> {
        &self.counts[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// One more part of this node wants `key`'s events: the first subscribes at the broker.
    pub(super) fn want(&self, key: &ChatKey) {
        let mut counts = self.shard(key).lock().expect("hub interest lock");
        let n = counts.entry(key.clone()).or_insert(0);
        *n += 1;
        if *n == 1 {
            self.broker.subscribe(key);
        }
    }

    /// One part of this node no longer wants `key`'s events: after the last, the broker is told.
    pub(super) fn unwant(&self, key: &ChatKey) {
        let mut counts = self.shard(key).lock().expect("hub interest lock");
        let Some(n) = counts.get_mut(key) else { return };
        *n -= 1;
        if *n == 0 {
            counts.remove(key);
            self.broker.unsubscribe(key);
        }
    }
}
