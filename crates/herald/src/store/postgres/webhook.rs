//! A shard's webhook positions: the pending chats and the acknowledgements.
//!
//! Not here: moving each chat's head as batches store events
//! (`PgTx::mark_undelivered` in `writer.rs`); calling the receiver (`hooks/webhook`).

use super::PgShard;
use super::log::event_from_row;
use crate::model::ChatKey;
use crate::store::{BoxFuture, StoreError, Undelivered, WebhookAck, WebhookPositions, sql_seq};

impl WebhookPositions for PgShard {
    fn track_webhook(&self) {
        self.webhook.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn webhook_pending(
        &self,
        _shard: usize,
        chats: u32,
        events: u32,
        members_max: u64,
    ) -> BoxFuture<'_, Result<Vec<Undelivered>, StoreError>> {
        Box::pin(async move {
            self.read(|conn| async move {
                let stmt = conn
                    .prepare_cached(
                        "SELECT p.chat_id, c.ws, c.chat, p.delivered, p.since_ms, c.members, p.head
                           FROM webhook_positions p JOIN chats c ON c.id = p.chat_id
                          WHERE p.head > p.delivered ORDER BY p.since_ms, p.chat_id LIMIT $1",
                    )
                    .await?;
                let pending = conn.query(&stmt, &[&i64::from(chats)]).await?;
                let events_stmt = conn
                    .prepare_cached(&format!(
                        "SELECT {} FROM events WHERE chat_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                        crate::store::columns::event_columns("", true)
                    ))
                    .await?;
                let members_stmt = conn.prepare_cached(r#"SELECT "user" FROM members WHERE chat_id = $1"#).await?;
                let mut out = Vec::with_capacity(pending.len());
                for p in &pending {
                    let (chat_id, delivered, members): (i64, i64, i64) = (p.get(0), p.get(3), p.get(5));
                    let rows = conn.query(&events_stmt, &[&chat_id, &delivered, &i64::from(events)]).await?;
                    let events = rows.iter().map(event_from_row).collect::<Result<Vec<_>, _>>()?;
                    let members = if members as u64 <= members_max {
                        let rows = conn.query(&members_stmt, &[&chat_id]).await?;
                        Some(rows.iter().map(|r| r.get::<_, String>(0)).collect())
                    } else {
                        None
                    };
                    let (ws, chat): (String, String) = (p.get(1), p.get(2));
                    out.push(Undelivered {
                        chat_id,
                        key: ChatKey::new(&ws, &chat),
                        delivered: delivered as u64,
                        head: p.get::<_, i64>(6) as u64,
                        since_ms: p.get(4),
                        events,
                        members,
                    });
                }
                Ok(out)
            })
            .await
        })
    }

    /// One row per statement, each its own transaction: a statement that
    /// locked several rows could wait on a writer that waits on it. Each only
    /// moves a position forward, so `read` may run them again.
    fn webhook_ack(&self, _shard: usize, acks: Vec<WebhookAck>) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let acks = &acks;
            self.read(|conn| async move {
                let stmt = conn
                    .prepare_cached(
                        "UPDATE webhook_positions SET delivered = GREATEST(delivered, $2), since_ms = GREATEST(since_ms, $3)
                          WHERE chat_id = $1",
                    )
                    .await
                    ?;
                let updates = acks.iter().map(|a| {
                    let (stmt, conn) = (&stmt, &conn);
                    async move { conn.execute(stmt, &[&a.chat_id, &sql_seq(a.seq), &a.since_ms]).await }
                });
                for done in futures_util::future::join_all(updates).await {
                    done?;
                }
                Ok(())
            })
            .await
        })
    }
}
