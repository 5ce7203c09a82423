//! The tail check: the bound on how late a watcher hears of a stored event.
//!
//! A gap is repaired when a later event arrives, but the last event of a
//! burst has no later event: if its broker hint is lost (a NATS server dies
//! with it in flight), or its publisher dies between its commit and its
//! publish, or a shard commits a write after the caller stopped waiting for
//! it, nothing would ever announce it. So every [`TAIL_EVERY`] the hub asks
//! the log for the latest seq of every chat it watches, in batches of
//! [`TAIL_BATCH`] chats per store read, and catches up each chat whose
//! latest seq at the previous check has still not reached its sequencer.
//! Waiting one check before acting leaves events already on their way (a
//! publish a few microseconds behind its commit) to their push; an event
//! lost for good is caught up within two checks of its commit, about 1.5 s
//! plus one store read.
//!
//! Only brokers that can lose hints need it (NATS; the in-process broker
//! hands every commit to the hub on the committing task). It costs one store
//! read per [`TAIL_BATCH`] watched chats per check, and a catch-up read only
//! for chats that were really behind; catch-ups run at most
//! [`CATCH_UP_CONCURRENCY`] at a time, so a reconnect that makes every chat
//! suspect cannot flood the store. A failed read is simply tried again at
//! the next check.

use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;

use super::{Hub, Watched};
use crate::model::ChatKey;

/// How often the hub compares its chats with the log.
pub const TAIL_EVERY: Duration = Duration::from_millis(750);
/// Chats whose latest seq one store read asks for.
const TAIL_BATCH: usize = 500;
/// Chats caught up from the log at once.
const CATCH_UP_CONCURRENCY: usize = 8;

/// Starts the tail check of `hub`; it ends with the hub.
pub(super) fn spawn(hub: Weak<Hub>) {
    tokio::spawn(async move {
        loop {
            let Some(strong) = hub.upgrade() else { return };
            let wake = async {
                tokio::select! {
                    _ = tokio::time::sleep(TAIL_EVERY) => {}
                    _ = strong.tail_now.notified() => {}
                }
            };
            wake.await;
            strong.check_tails().await;
        }
    });
}

impl Hub {
    /// Reads the latest seq of every watched chat and catches up those whose
    /// previous latest has not arrived. Returns how many were caught up.
    pub(crate) async fn check_tails(&self) -> usize {
        let entries: Vec<Arc<Watched>> = self.entries();
        let mut behind = Vec::new();
        for batch in entries.chunks(TAIL_BATCH) {
            let keys: Vec<ChatKey> = batch.iter().map(|w| w.key.clone()).collect();
            let heads = match self.store.heads(&keys).await {
                Ok(heads) => heads,
                Err(e) => {
                    tracing::warn!(chats = keys.len(), error = %e, "tail check could not read the log; trying again next time");
                    metrics::counter!("herald_hub_tail_failures_total").increment(1);
                    continue;
                }
            };
            for (watched, head) in batch.iter().zip(heads) {
                let Some(head) = head else { continue };
                let mut state = watched.state.lock().expect("hub chat lock");
                let Some(next) = state.next else { continue };
                if next <= state.tail_seen {
                    behind.push(watched.clone());
                }
                state.tail_seen = head;
            }
        }
        let n = behind.len();
        if n > 0 {
            tracing::info!(chats = n, "catching up chats whose latest events were never announced");
            metrics::counter!("herald_hub_tail_repairs_total").increment(n as u64);
        }
        futures_util::stream::iter(behind)
            .for_each_concurrent(CATCH_UP_CONCURRENCY, |watched| async move {
                self.catch_up_entry(&watched).await;
            })
            .await;
        n
    }
}
