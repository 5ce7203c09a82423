//! The SQLite store's webhook positions: the statement a batch runs to move
//! each chat's head (see `tx.rs`), acknowledgements stored by the writer
//! thread, and the pending chats read from the reader pool.
//!
//! Not here: calling the receiver (`hooks/webhook`).

use std::sync::atomic::Ordering;
use std::sync::mpsc::TrySendError;

use herald_protocol::Event;
use rusqlite::{Connection, TransactionBehavior, params};
use tokio::sync::oneshot;

use super::log::event_from_row;
use super::writer::Job;
use super::{SqliteStore, unavailable};
use crate::model::ChatKey;
use crate::store::{BoxFuture, StoreError, Undelivered, WebhookAck, WebhookPositions, sql_seq};

/// webhook: a batch's chats that stored events. A new row starts at the
/// seq before the batch (events stored before the webhook was on are not
/// delivered); a row that was caught up starts its lag at this batch.
pub(super) const UPSERT_POSITION: &str = "
INSERT INTO webhook_positions (chat_id, delivered, head, since_ms) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (chat_id) DO UPDATE SET
    since_ms = CASE WHEN webhook_positions.head <= webhook_positions.delivered THEN excluded.since_ms
                    ELSE webhook_positions.since_ms END,
    head = excluded.head";

/// webhook: where the writer answers a request to store positions.
pub(super) type AckReply = oneshot::Sender<Result<(), StoreError>>;

impl WebhookPositions for SqliteStore {
    fn track_webhook(&self) {
        self.webhook.store(true, Ordering::SeqCst);
    }

    fn webhook_pending(
        &self,
        _shard: usize,
        chats: u32,
        events: u32,
        members_max: u64,
    ) -> BoxFuture<'_, Result<Vec<Undelivered>, StoreError>> {
        Box::pin(self.read(move |conn| {
            let tx = conn.transaction()?;
            type Row = (i64, String, String, u64, i64, u64, u64);
            let pending: Vec<Row> = tx
                .prepare_cached(
                    "SELECT p.chat_id, c.ws, c.chat, p.delivered, p.since_ms, c.members, p.head
                       FROM webhook_positions p JOIN chats c ON c.id = p.chat_id
                      WHERE p.head > p.delivered ORDER BY p.since_ms, p.chat_id LIMIT ?1",
                )?
                .query_map(params![i64::from(chats)], |r| {
                    let n = |i: usize| r.get::<_, i64>(i).map(|v| v as u64);
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, n(3)?, r.get(4)?, n(5)?, n(6)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            let mut out = Vec::with_capacity(pending.len());
            for (chat_id, ws, chat, delivered, since_ms, members, head) in pending {
                let events = tx
                    .prepare_cached(&format!(
                        "SELECT {} FROM events WHERE chat_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                        crate::store::columns::event_columns("", false)
                    ))?
                    .query_map(params![chat_id, sql_seq(delivered), i64::from(events)], event_from_row)?
                    .collect::<rusqlite::Result<Vec<Event>>>()?;
                let members = if members <= members_max {
                    let users = tx
                        .prepare_cached("SELECT user FROM members WHERE chat_id = ?1")?
                        .query_map(params![chat_id], |r| r.get(0))?
                        .collect::<rusqlite::Result<Vec<String>>>()?;
                    Some(users)
                } else {
                    None
                };
                out.push(Undelivered {
                    chat_id,
                    key: ChatKey::new(&ws, &chat),
                    delivered,
                    head,
                    since_ms,
                    events,
                    members,
                });
            }
            tx.commit()?;
            Ok(out)
        }))
    }

    fn webhook_ack(&self, _shard: usize, acks: Vec<WebhookAck>) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            match self.jobs.try_send(Job::WebhookAck(acks, tx)) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => return Err(unavailable("the store's write queue is full")),
                Err(TrySendError::Disconnected(_)) => return Err(unavailable("the store is closed")),
            }
            rx.await.unwrap_or_else(|_| Err(unavailable("the store writer stopped")))
        })
    }
}

/// Stores acknowledged positions, all of them in one transaction, and
/// answers each request. The writer thread's part, on its read-write connection.
pub(super) fn store_acks(conn: &mut Connection, acks: Vec<(Vec<WebhookAck>, AckReply)>) {
    let store = |conn: &mut Connection| -> rusqlite::Result<()> {
        // Rolled back when dropped uncommitted.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut stmt = tx.prepare_cached(
                "UPDATE webhook_positions SET delivered = max(delivered, ?2), since_ms = max(since_ms, ?3)
                     WHERE chat_id = ?1",
            )?;
            for a in acks.iter().flat_map(|(a, _)| a) {
                stmt.execute(params![a.chat_id, sql_seq(a.seq), a.since_ms])?;
            }
        }
        tx.commit()
    };
    let result = store(conn).map_err(|e| {
        tracing::error!(error = %e, "storing webhook positions failed");
        metrics::counter!("herald_store_errors_total", "kind" => "webhook_ack").increment(1);
        unavailable("storing webhook positions failed")
    });
    for (_, reply) in acks {
        let _ = reply.send(result.clone());
    }
}
