//! A shard's one writer: takes writes off a queue, applies a batch of them in
//! one transaction (with [`apply`]'s rules), and answers each.
//!
//! A batch whose connection was gone (`retry.rs`) before its COMMIT was
//! sent never committed: it runs once more on a new connection, as if its
//! senders had resent it at once. One that failed in its COMMIT may have
//! committed: its senders hear `unavailable` and resend with their `client_id`s.
//!
//! Not here: the transaction's statements (`tx.rs`, and `bulk.rs` for its bulk inserts).

use std::sync::Arc;
use std::time::Instant;

use deadpool_postgres::{Object, Pool};
use futures_util::FutureExt;
use tokio::sync::mpsc;

use super::lease::IDLE_CHECK_AFTER;
use super::retry::{Retries, gone};
use super::schema::ensure_schema;
use super::tx::PgTx;
use super::{BATCH_TIMEOUT, Checked, MAX_BATCH, shard_failed};
use crate::store::Write;
use crate::store::apply::{self, Reply};
use crate::store::shard_identity::IdentityError;
use crate::store::shard_spec::chain;

/// This node's writer for one shard.
pub(super) struct Writer {
    pub(super) shard: Arc<Checked>,
    pub(super) pool: Pool,
    /// The writer's connection, kept across batches; dropped after a failure.
    pub(super) conn: Option<Object>,
    /// When the last batch ended: a connection kept idle since
    /// [`IDLE_CHECK_AFTER`] goes back to the pool, to be checked before it is used.
    pub(super) last_batch: Instant,
    /// webhook: whether batches keep the webhook's positions.
    pub(super) webhook: Arc<std::sync::atomic::AtomicBool>,
    /// The highest seqs this node has seen (`heads.rs`).
    pub(super) heads: Arc<super::heads::SeenHeads>,
    /// Raised after a failed batch: the pool's older connections may reach the host that failed.
    pub(super) fence: Arc<super::lease::Fence>,
    /// Batches run again on a new connection (`retry.rs`).
    pub(super) retries: Arc<Retries>,
}

/// Why one try of a batch failed, and whether it may run again.
struct Failure {
    why: String,
    /// Set when the batch provably did not commit because its connection was
    /// gone (a reason of [`gone`]); `None` for any other failure, and for any in COMMIT.
    retry: Option<&'static str>,
}

impl Failure {
    /// A failure before COMMIT was sent.
    fn before_commit(e: &tokio_postgres::Error) -> Failure {
        Failure { why: chain(e), retry: gone(e) }
    }

    /// A failure that is not to be retried.
    fn last(why: String) -> Failure {
        Failure { why, retry: None }
    }
}

impl Writer {
    pub(super) async fn run(mut self, mut rx: mpsc::Receiver<(Write, Reply)>) {
        let mut batch = Vec::with_capacity(64);
        while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
            let started = Instant::now();
            let writes: Vec<&Write> = batch.iter().map(|(w, _)| w).collect();
            // A panic in a batch is caught like a failed batch: its
            // connection is dropped (rolling it back) and the writer goes on.
            let commit = std::panic::AssertUnwindSafe(self.commit(&writes)).catch_unwind();
            let result = match tokio::time::timeout(BATCH_TIMEOUT, commit).await {
                Ok(Ok(r)) => r,
                Ok(Err(_)) => {
                    metrics::counter!("herald_store_writer_restarts_total").increment(1);
                    Err(format!("batch of {} writes panicked", writes.len()))
                }
                Err(_) => Err(format!("batch of {} writes timed out", writes.len())),
            };
            match result {
                Ok(outcomes) => apply::answer_committed(&mut batch, outcomes, started),
                Err(e) => {
                    // The connection may be broken, hung or mid-transaction, and its host no longer the
                    // primary: it leaves the pool, the older pooled ones are retired, and the next batch
                    // finds the primary afresh. Whether a batch cut off in its commit was stored is not
                    // known: its writers hear `unavailable`, and a send resent with its `client_id` is
                    // either found (its seq answered again) or stored once.
                    if let Some(conn) = self.conn.take() {
                        super::lease::discard(conn);
                    }
                    self.fence.raise("write");
                    // What reads found lately may be what the failed host never passed on.
                    self.heads.forget_read();
                    let err = shard_failed(&self.shard.name, &e);
                    for (_, reply) in batch.drain(..) {
                        let _ = reply.send(Err(err.clone()));
                    }
                }
            }
        }
    }

    /// Runs the batch, on the writer's connection unless it sat idle too long.
    async fn commit(&mut self, writes: &[&Write]) -> Result<Vec<apply::Outcome>, String> {
        if self.last_batch.elapsed() >= IDLE_CHECK_AFTER {
            // Back to the pool, which checks it (`lease.rs`) as it lends it again.
            self.conn = None;
        }
        let result = self.commit_retried(writes).await;
        self.last_batch = Instant::now();
        result
    }

    /// Runs the batch; once more on a new connection if its connection was gone before COMMIT.
    async fn commit_retried(&mut self, writes: &[&Write]) -> Result<Vec<apply::Outcome>, String> {
        let failed = match self.try_commit(writes).await {
            Ok(outcomes) => return Ok(outcomes),
            Err(failed) => failed,
        };
        let Some(reason) = failed.retry else { return Err(failed.why) };
        self.retries.note("write", reason, &failed.why);
        // As after any failed batch (see `run`), but nobody hears of it: the
        // connection goes, the pool's older ones (dead too after a restart)
        // are retired, and heads read on the old connection are not trusted.
        if let Some(conn) = self.conn.take() {
            super::lease::discard(conn);
        }
        self.fence.raise("closed");
        self.heads.forget_read();
        self.try_commit(writes).await.map_err(|f| f.why)
    }

    async fn try_commit(&mut self, writes: &[&Write]) -> Result<Vec<apply::Outcome>, Failure> {
        if self.conn.is_none() {
            let conn = self.pool.get().await.map_err(|e| Failure::last(chain(&e)))?;
            match ensure_schema(&self.shard, &conn).await {
                Ok(()) => {}
                Err(IdentityError::Pg(e)) => return Err(Failure::before_commit(&e)),
                Err(e) => return Err(Failure::last(chain(&e))),
            }
            self.conn = Some(conn);
        }
        let conn = self.conn.as_mut().expect("connected above");
        let tx = conn.transaction().await.map_err(|e| Failure::before_commit(&e))?;
        let mut pg_tx = PgTx::new(&tx, &self.heads, self.shard.name.as_str());
        pg_tx.webhook = self.webhook.load(std::sync::atomic::Ordering::Relaxed);
        let outcomes = apply::apply(&mut pg_tx, writes).await.map_err(|e| Failure::before_commit(&e))?;
        let saved = std::mem::take(&mut pg_tx.saved);
        // Heads reads found before this commit record was written: once it is
        // acknowledged (on the standby, with one), so are they (`heads.rs`). A
        // transaction that wrote nothing has no commit record to wait for.
        let wrote = !saved.is_empty();
        let read_before = if wrote { self.heads.take_read() } else { Default::default() };
        drop(pg_tx);
        // From here the batch may have committed whatever the error: never retried.
        tx.commit().await.map_err(|e| Failure::last(chain(&e)))?;
        self.heads.saw(saved.into_iter().chain(read_before));
        Ok(outcomes)
    }
}
