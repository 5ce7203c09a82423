//! What this node has seen of its chats' heads, so that a shard that comes
//! back with less than it had is not given seqs again.
//!
//! A standby promoted without every committed transaction (an asynchronous
//! standby, or an operator's forced promotion) holds chats whose latest seq
//! is lower than what watchers were already pushed. Writing on from there
//! would store new events at seqs clients hold as other events: a client
//! that has seq 41 takes the new 41 for one it has and never shows it. The
//! events the promotion lost are gone from the database whatever herald
//! does; what herald must not do is reuse their seqs. So each node keeps, in
//! bounded memory, the highest seq it has seen per chat (its own commits,
//! and every head and page it read, the tail check's heads included), and a
//! batch that finds a chat behind that moves the chat's seq up to it before
//! it stores the next event: the lost seqs stay a gap, new events come after
//! every seq any client may hold from this node. Each time is logged as an
//! error and counted (`herald_store_seq_rewinds_total`).
//!
//! A read can see a commit that is not on a synchronous standby yet (its
//! writer is still waiting for the standby); a primary lost right then takes
//! it along, unacknowledged, and a rewind past it would leave a needless gap.
//! So what reads find is held apart and counts as seen only once one of this
//! node's own commits, begun after the read, has been acknowledged (which,
//! with a synchronous standby, means the standby has everything the read
//! saw); a failed batch forgets it.
//!
//! The memory is a node's own: a chat no running node wrote or read since
//! its last event was lost is not protected (a node restarted after the
//! loss forgets). Synchronous standbys lose nothing acknowledged and do not
//! trigger it.
//!
//! Not here: where batches read chats (`tx.rs`).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use crate::model::ChatKey;

/// Chats remembered per generation; two generations at most (a few MiB).
const GENERATION: usize = 100_000;

/// The highest seq seen per chat, by a hash of the chat's key.
#[derive(Default)]
pub(super) struct SeenHeads {
    gens: Mutex<(HashMap<u64, u64>, HashMap<u64, u64>)>,
    /// Heads reads found, not yet confirmed by a commit.
    read: Mutex<HashMap<u64, u64>>,
}

/// A chat's key as [`SeenHeads`] keeps it.
pub(super) fn chat_hash(key: &ChatKey) -> u64 {
    // SipHash with fixed keys: the same chat hashes alike for the life of the process.
    let mut h = std::hash::DefaultHasher::new();
    key.ws.hash(&mut h);
    key.chat.hash(&mut h);
    h.finish()
}

impl SeenHeads {
    /// Notes chats' stored heads, `(hash, seq)`, under one lock.
    pub(super) fn saw(&self, heads: impl IntoIterator<Item = (u64, u64)>) {
        let mut g = self.gens.lock().expect("heads lock poisoned");
        let (now, old) = &mut *g;
        for (hash, seq) in heads.into_iter().filter(|&(_, seq)| seq > 0) {
            let known = now.entry(hash).or_insert(0);
            *known = (*known).max(seq);
            if now.len() >= GENERATION {
                *old = std::mem::take(now);
            }
        }
    }

    /// Notes heads a read found, `(hash, seq)`, held apart until [`Self::take_read`].
    pub(super) fn read(&self, heads: impl IntoIterator<Item = (u64, u64)>) {
        let mut read = self.read.lock().expect("heads lock poisoned");
        for (hash, seq) in heads {
            if read.len() >= GENERATION {
                read.clear();
            }
            let known = read.entry(hash).or_insert(0);
            *known = (*known).max(seq);
        }
    }

    /// What reads found so far, for a commit about to be written to confirm.
    pub(super) fn take_read(&self) -> HashMap<u64, u64> {
        std::mem::take(&mut *self.read.lock().expect("heads lock poisoned"))
    }

    /// Forgets what reads found (their host may have failed since).
    pub(super) fn forget_read(&self) {
        self.read.lock().expect("heads lock poisoned").clear();
    }

    /// The highest seq seen of the chat `hash`, if it is remembered.
    pub(super) fn seen(&self, hash: u64) -> Option<u64> {
        let g = self.gens.lock().expect("heads lock poisoned");
        g.0.get(&hash).copied().max(g.1.get(&hash).copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_highest_seq_is_kept_and_memory_stays_bounded() {
        let heads = SeenHeads::default();
        let a = chat_hash(&ChatKey::new("w", "a"));
        assert_ne!(a, chat_hash(&ChatKey::new("wa", "")));
        heads.saw([(a, 7), (a, 3)]);
        assert_eq!(heads.seen(a), Some(7));
        heads.read([(a, 9)]);
        assert_eq!(heads.seen(a), Some(7), "a read counts once a commit confirms it");
        heads.saw(heads.take_read());
        assert_eq!(heads.seen(a), Some(9));
        heads.saw((0..(2 * GENERATION as u64 + 5)).map(|i| (i.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1)));
        let g = heads.gens.lock().unwrap();
        assert!(g.0.len() + g.1.len() <= 2 * GENERATION);
    }
}
