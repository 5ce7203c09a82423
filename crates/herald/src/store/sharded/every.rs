//! The capabilities a node asks of all its shards together rather than of
//! one chat's shard: a user's export (each shard a part of its own), the
//! revocation list (written to every shard, read back as the union), the
//! webhook's positions (the shard the webhook names), and the node's
//! readiness, shutdown and status.
//!
//! Not here: the routing by chat and the guard around each call (`sharded.rs`).

use std::time::Duration;

use super::{OP_TIMEOUT, Sharded};
use crate::store::{
    BoxFuture, Export, ExportCursor, Exported, Lifecycle, RevocationList, Revoked, ShardStatus, StoreError,
    Undelivered, WebhookAck, WebhookPositions,
};

/// Each shard is a part of its own, paged with its own cursor: the export merges the shards'
/// pages (`chat/export.rs`), so no shard is asked for rows another one's page then throws away.
impl Export for Sharded {
    fn export_parts(&self) -> usize {
        self.shards.len()
    }

    fn export_members<'a>(
        &'a self,
        part: usize,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
        match self.shards.get(part) {
            Some(s) => Box::pin(s.guarded(s.store.export_members(0, ws, user, after, limit))),
            None => Box::pin(std::future::ready(Err(StoreError::Unavailable(format!("no shard #{part}"))))),
        }
    }

    fn export_messages<'a>(
        &'a self,
        part: usize,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a ExportCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<Exported>, StoreError>> {
        match self.shards.get(part) {
            Some(s) => Box::pin(s.guarded(s.store.export_messages(0, ws, user, after, limit))),
            None => Box::pin(std::future::ready(Err(StoreError::Unavailable(format!("no shard #{part}"))))),
        }
    }
}

impl RevocationList for Sharded {
    /// Stored on every shard: a node then knows every revocation as long as
    /// any one shard answers, so a shard that is down at a node's start
    /// cannot let a revoked token in. Fails (`unavailable`) unless every
    /// shard stored it; those that did keep it, and a retry completes it.
    fn revoke<'a>(&'a self, ws: &'a str, user: &'a str, revoked_ms: i64) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let results = futures_util::future::join_all(
                self.shards.iter().map(|s| s.guarded(s.store.revoke(ws, user, revoked_ms))),
            )
            .await;
            results.into_iter().collect::<Result<Vec<()>, _>>().map(|_| ())
        })
    }

    /// The union of every shard's rows; `complete` only if every shard
    /// answered. Fails only when none did.
    fn revocations(&self, within: Option<Duration>) -> BoxFuture<'_, Result<Revoked, StoreError>> {
        Box::pin(async move {
            let results =
                futures_util::future::join_all(self.shards.iter().map(|s| s.guarded(s.store.revocations(within))))
                    .await;
            let mut all = Revoked { rows: Vec::new(), complete: true };
            let mut last_error = None;
            let mut answered = false;
            for r in results {
                match r {
                    Ok(part) => {
                        answered = true;
                        all.complete &= part.complete;
                        all.rows.extend(part.rows);
                    }
                    Err(e) => {
                        all.complete = false;
                        last_error = Some(e);
                    }
                }
            }
            match (answered, last_error) {
                (false, Some(e)) => Err(e),
                _ => Ok(all),
            }
        })
    }
}

// Each shard keeps its own chats' webhook positions. Not through the
// bulkhead and breaker: the webhook is one caller with its own backoff.
impl WebhookPositions for Sharded {
    fn track_webhook(&self) {
        for s in self.shards.iter() {
            s.store.track_webhook();
        }
    }

    fn webhook_pending(
        &self,
        shard: usize,
        chats: u32,
        events: u32,
        members_max: u64,
    ) -> BoxFuture<'_, Result<Vec<Undelivered>, StoreError>> {
        match self.shards.get(shard) {
            Some(s) => s.store.webhook_pending(0, chats, events, members_max),
            None => Box::pin(std::future::ready(Err(StoreError::NotFound(format!("no shard {shard}"))))),
        }
    }

    fn webhook_ack(&self, shard: usize, acks: Vec<WebhookAck>) -> BoxFuture<'_, Result<(), StoreError>> {
        match self.shards.get(shard) {
            Some(s) => s.store.webhook_ack(0, acks),
            None => Box::pin(std::future::ready(Err(StoreError::NotFound(format!("no shard {shard}"))))),
        }
    }
}

impl Lifecycle for Sharded {
    /// Ready while at least one shard answers: a node with one shard down still
    /// serves every other shard's chats, and taking it out of rotation would not help.
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut last = None;
            for s in self.shards.iter() {
                match tokio::time::timeout(OP_TIMEOUT, s.store.ready()).await {
                    Ok(Ok(())) => return Ok(()),
                    Ok(Err(e)) => last = Some(e),
                    Err(_) => last = Some(StoreError::Unavailable(s.name.public("timed out"))),
                }
            }
            Err(last.unwrap_or_else(|| StoreError::Unavailable("no shards".into())))
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            for s in self.shards.iter() {
                s.store.close().await;
            }
        })
    }

    fn shards(&self) -> Vec<ShardStatus> {
        self.shards
            .iter()
            .map(|s| ShardStatus {
                name: s.name.to_string(),
                label: s.label.clone(),
                breaker: s.breaker.state().as_str(),
                in_flight: s.bulkhead.in_flight(),
                waiting: s.bulkhead.waiting(),
            })
            .collect()
    }
}
