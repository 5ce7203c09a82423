//! The sweeper: deletes the bytes of files whose message was deleted (or that an edit removed)
//! and of files no message attached within a day, then forgets their rows. It runs every
//! [`SWEEP_EVERY`], so a deleted message's files are gone from the backend within that (the
//! embedded backend's URLs answer 404 at once: they look the row up).

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Blobs;
use crate::model::ChatKey;
use crate::store::{Store, Write, now_ms};

/// How often the sweeper looks.
pub const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// Files deleted per look, at most.
const SWEEP_BATCH: u32 = 500;

/// Starts the sweeper; it stops once the store is dropped.
pub fn spawn(store: Weak<dyn Store>, blobs: Arc<dyn Blobs>, orphan_after: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(store) = store.upgrade() else { return };
            sweep_once(&*store, &*blobs, orphan_after).await;
        }
    })
}

/// One look: returns how many files it deleted.
pub async fn sweep_once(store: &dyn Store, blobs: &dyn Blobs, orphan_after: Duration) -> usize {
    let before = now_ms() - orphan_after.as_millis() as i64;
    let keys = match store.sweepable(before, SWEEP_BATCH).await {
        Ok(keys) => keys,
        Err(e) => {
            tracing::warn!(error = %e, "finding files to delete failed; trying again later");
            metrics::counter!("herald_file_sweep_failures_total").increment(1);
            return 0;
        }
    };
    let mut deleted = 0;
    for key in keys {
        if let Err(e) = blobs.delete(&key).await {
            tracing::warn!(file = %key.id, error = %e, "deleting a file's bytes failed; trying again later");
            metrics::counter!("herald_file_sweep_failures_total").increment(1);
            continue;
        }
        let forget = Write::ForgetFile { key: ChatKey::new(&key.ws, &key.chat), id: key.id.clone() };
        match store.write(forget).await {
            Ok(_) => deleted += 1,
            Err(e) => {
                tracing::warn!(file = %key.id, error = %e, "forgetting a deleted file failed; trying again later");
                metrics::counter!("herald_file_sweep_failures_total").increment(1);
            }
        }
    }
    if deleted > 0 {
        metrics::counter!("herald_files_deleted_total").increment(deleted as u64);
        tracing::debug!(deleted, "files deleted");
    }
    deleted
}
