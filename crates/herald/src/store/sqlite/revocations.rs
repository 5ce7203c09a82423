//! The SQLite store's revocations: stored by the writer thread, in a
//! transaction of their own after the batch they came with, and read from
//! the reader pool.
//!
//! Not here: checking tokens against them (`revoke.rs`).

use std::sync::mpsc::TrySendError;

use rusqlite::{Connection, params};
use tokio::sync::oneshot;

use super::writer::Job;
use super::{SqliteStore, unavailable};
use crate::store::apply;
use crate::store::{BoxFuture, Revocation, RevocationList, Revoked, StoreError};

/// A revocation for the writer to store.
pub(super) struct RevokeJob {
    ws: String,
    user: String,
    revoked_ms: i64,
    reply: oneshot::Sender<Result<(), StoreError>>,
}

impl RevocationList for SqliteStore {
    fn revoke<'a>(&'a self, ws: &'a str, user: &'a str, revoked_ms: i64) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let (reply, rx) = oneshot::channel();
            let job = RevokeJob { ws: ws.to_owned(), user: user.to_owned(), revoked_ms, reply };
            match self.jobs.try_send(Job::Revoke(job)) {
                Ok(()) => rx.await.unwrap_or_else(|_| Err(unavailable("the store writer stopped"))),
                Err(TrySendError::Full(_)) => Err(unavailable("the store's write queue is full")),
                Err(TrySendError::Disconnected(_)) => Err(unavailable("the store is closed")),
            }
        })
    }

    fn revocations(&self, within: Option<std::time::Duration>) -> BoxFuture<'_, Result<Revoked, StoreError>> {
        let since = within.map_or(i64::MIN, |w| apply::now_ms().saturating_sub(w.as_millis() as i64));
        Box::pin(async move {
            let rows = self
                .read(move |conn| {
                    conn.prepare_cached("SELECT ws, user, revoked_ms FROM revocations WHERE stored_ms >= ?1")?
                        .query_map(params![since], |r| {
                            Ok(Revocation { ws: r.get(0)?, user: r.get(1)?, revoked_ms: r.get(2)? })
                        })?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .await?;
            Ok(Revoked { rows, complete: true })
        })
    }
}

/// Stores a revocation (a later one of the same user wins) and answers it.
/// The writer thread's part, on its read-write connection.
pub(super) fn store(conn: &Connection, job: RevokeJob) {
    let stored = conn.prepare_cached(
        "INSERT INTO revocations (ws, user, revoked_ms, stored_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (ws, user) DO UPDATE SET revoked_ms = excluded.revoked_ms, stored_ms = excluded.stored_ms
             WHERE excluded.revoked_ms > revocations.revoked_ms",
    );
    let result = stored
        .and_then(|mut stmt| stmt.execute(params![job.ws, job.user, job.revoked_ms, apply::now_ms()]))
        .map(|_| ())
        .map_err(|e| {
            tracing::error!(error = %e, "storing a revocation failed");
            metrics::counter!("herald_store_errors_total", "kind" => "revoke").increment(1);
            unavailable("storing the revocation failed")
        });
    let _ = job.reply.send(result);
}
