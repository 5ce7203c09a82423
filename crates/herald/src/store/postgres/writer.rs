//! A shard's one writer: takes writes off a queue, applies a batch of them in
//! one transaction (with [`apply`]'s rules), and answers each.
//!
//! Not here: the transaction's statements (`tx.rs`, and `bulk.rs` for its bulk inserts).

use std::sync::Arc;
use std::time::Instant;

use deadpool_postgres::{Object, Pool};
use futures_util::FutureExt;
use tokio::sync::mpsc;

use super::schema::ensure_schema;
use super::tx::PgTx;
use super::{BATCH_TIMEOUT, Checked, MAX_BATCH, shard_failed};
use crate::store::Write;
use crate::store::apply::{self, Reply};
use crate::store::shard_spec::chain;

/// This node's writer for one shard.
pub(super) struct Writer {
    pub(super) shard: Arc<Checked>,
    pub(super) pool: Pool,
    /// The writer's connection, kept across batches; dropped after a failure.
    pub(super) conn: Option<Object>,
    /// webhook: whether batches keep the webhook's positions.
    pub(super) webhook: Arc<std::sync::atomic::AtomicBool>,
    /// The highest seqs this node has seen (`heads.rs`).
    pub(super) heads: Arc<super::heads::SeenHeads>,
    /// Raised after a failed batch: the pool's older connections may reach the host that failed.
    pub(super) fence: Arc<super::lease::Fence>,
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

    async fn commit(&mut self, writes: &[&Write]) -> Result<Vec<apply::Outcome>, String> {
        if self.conn.is_none() {
            let conn = self.pool.get().await.map_err(|e| chain(&e))?;
            ensure_schema(&self.shard, &conn).await.map_err(|e| chain(&e))?;
            self.conn = Some(conn);
        }
        let conn = self.conn.as_mut().expect("connected above");
        let tx = conn.transaction().await.map_err(|e| chain(&e))?;
        let mut pg_tx = PgTx::new(&tx, &self.heads, self.shard.name.as_str());
        pg_tx.webhook = self.webhook.load(std::sync::atomic::Ordering::Relaxed);
        let outcomes = apply::apply(&mut pg_tx, writes).await.map_err(|e| chain(&e))?;
        let saved = std::mem::take(&mut pg_tx.saved);
        // Heads reads found before this commit record was written: once it is
        // acknowledged (on the standby, with one), so are they (`heads.rs`). A
        // transaction that wrote nothing has no commit record to wait for.
        let wrote = !saved.is_empty();
        let read_before = if wrote { self.heads.take_read() } else { Default::default() };
        drop(pg_tx);
        tx.commit().await.map_err(|e| chain(&e))?;
        self.heads.saw(saved.into_iter().chain(read_before));
        Ok(outcomes)
    }
}
