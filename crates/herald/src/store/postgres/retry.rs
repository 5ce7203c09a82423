//! A request that failed because its pooled connection was gone runs once
//! more on a fresh connection before anyone hears `unavailable`.
//!
//! A connection the server closed (a restart, `pg_terminate_backend`, an
//! idle timeout, a failover) is noticed by the pool only when the client
//! has read the close; until then it is handed out, and the request on it
//! fails having done nothing. Such a failure ([`gone`]: the client saw the
//! connection closed, or the server said it is shutting the session down,
//! SQLSTATE 57P01, 57P02, 57P03, 57P05, 25P03, or class 08) is retried once:
//!
//! - a read ([`PgShard::read`]) always: reads change nothing, and the few
//!   statements run as reads that do write (a revocation, a webhook
//!   acknowledgement, the lock that waits for a standby) are idempotent;
//! - a write batch only when it failed before its COMMIT was sent, so that it
//!   provably never committed (`writer.rs`); a failure in COMMIT stays in doubt.
//!
//! Before the retry the shard's fence is raised (`lease.rs`): after a restart
//! every pooled connection is dead, and the retry must get a new one, not
//! the next dead one. Retries are counted (`herald_store_pg_retries_total`)
//! and logged at warn at most once a second per shard, with how many the log
//! passed over.
//!
//! Not here: the check of connections that sat idle (`lease.rs`), the
//! writer's batch (`writer.rs`).

use std::future::Future;

use super::lease::Lease;
use super::{PgShard, pg_unavailable};
use crate::log_every::LogEvery;
use crate::store::StoreError;
use crate::store::shard_spec::ShardName;

/// Why a read failed: the database's error (which [`gone`] may find worth a
/// retry) or the store's answer (not found, forbidden, a corrupt row).
pub(super) enum Failed {
    Pg(tokio_postgres::Error),
    Store(StoreError),
}

impl From<tokio_postgres::Error> for Failed {
    fn from(e: tokio_postgres::Error) -> Failed {
        Failed::Pg(e)
    }
}

impl From<StoreError> for Failed {
    fn from(e: StoreError) -> Failed {
        Failed::Store(e)
    }
}

/// Whether `e` says the connection is gone and the request did nothing on
/// it; its reason for the metric if so.
pub(super) fn gone(e: &tokio_postgres::Error) -> Option<&'static str> {
    if e.is_closed() {
        return Some("closed");
    }
    let code = e.code()?.code();
    // admin_shutdown, crash_shutdown, cannot_connect_now, idle_session_timeout, and
    // idle_in_transaction_session_timeout (its transaction was rolled back: `connect.rs`).
    if matches!(code, "57P01" | "57P02" | "57P03" | "57P05" | "25P03") {
        return Some("shutdown");
    }
    code.starts_with("08").then_some("connection")
}

/// A shard's retries: counted, and logged at most once a second.
pub(super) struct Retries {
    shard: ShardName,
    log: LogEvery,
}

impl Retries {
    pub(super) fn new(shard: ShardName) -> Retries {
        Retries { shard, log: LogEvery::default() }
    }

    /// Counts a retry of `op` (read or write) for `reason`, logging `error` unless a line went out lately.
    pub(super) fn note(&self, op: &'static str, reason: &'static str, error: &str) {
        metrics::counter!("herald_store_pg_retries_total", "shard" => self.shard.to_string(), "op" => op, "reason" => reason)
            .increment(1);
        let Some(retries) = self.log.note() else { return };
        tracing::warn!(
            shard = %self.shard,
            op,
            reason,
            error,
            retries,
            "a postgres connection was gone: retried on a new one (logged at most once a second)"
        );
    }
}

impl PgShard {
    /// Runs `run` on a pooled connection; if that fails because the
    /// connection was gone, runs it once more on a new one (see the module
    /// documentation). Any other database error, or the second, answers
    /// `unavailable`; a store error is answered as it is.
    pub(super) async fn read<T, F, Fut>(&self, run: F) -> Result<T, StoreError>
    where
        F: Fn(Lease) -> Fut,
        Fut: Future<Output = Result<T, Failed>>,
    {
        let mut retried = false;
        loop {
            let failed = match self.lease().await {
                Ok(conn) => match run(conn).await {
                    Ok(found) => return Ok(found),
                    Err(failed) => failed,
                },
                Err(failed) => failed,
            };
            let e = match failed {
                Failed::Store(e) => return Err(e),
                Failed::Pg(e) => e,
            };
            match gone(&e) {
                Some(reason) if !retried => {
                    retried = true;
                    self.retries.note("read", reason, &crate::store::shard_spec::chain(&e));
                    self.fence.raise("closed");
                }
                _ => return Err(pg_unavailable(&self.shard.name, &e)),
            }
        }
    }

    /// The rows of one statement, read as [`PgShard::read`] reads (once more
    /// on a new connection if the first was gone); a database error fails it
    /// as the shard's unavailability.
    pub(super) async fn read_rows(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        self.read(|conn| async move {
            let stmt = conn.prepare_cached(sql).await?;
            Ok(conn.query(&stmt, params).await?)
        })
        .await
    }
}
