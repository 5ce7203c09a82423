//! The SQLite store's one writer thread: takes the jobs queued for it
//! (writes, revocations, webhook acknowledgements, close), applies every
//! write queued at the moment it is free as one transaction (group commit,
//! with [`apply`]'s rules over [`SqliteTx`]) and answers each. A panic in a
//! batch rolls it back and the thread goes on; if the thread ends anyway,
//! the store is no longer ready.
//!
//! Not here: the statements of a batch (`tx.rs`), or of a revocation and a
//! webhook acknowledgement (`revocations.rs`, `webhook.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Instant;

use rusqlite::Connection;
use tokio::sync::oneshot;

use super::health::{self, Health};
use super::revocations::{self, RevokeJob};
use super::tx::SqliteTx;
use super::unavailable;
use super::webhook::{self, AckReply};
use crate::store::apply::{self, Outcome, Reply};
use crate::store::{Alive, WebhookAck, Write};

/// How often the writer retries a WAL checkpoint that readers held up, after
/// a batch that erased a body: the erased bytes must leave the files soon.
const ERASE_CHECKPOINT_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// Most writes taken into one transaction. Bounds a batch's latency and the
/// work lost to a batch that fails and is retried write by write.
const MAX_BATCH: usize = 1024;
/// Writes that may wait for the writer. Beyond it, writes fail fast with
/// `unavailable` instead of queueing without bound.
const WRITE_QUEUE: usize = 16 * 1024;

/// What the writer is asked to do.
pub(super) enum Job {
    Write(Write, Reply),
    /// A revocation, in a transaction of its own after the batch it came with.
    Revoke(RevokeJob),
    /// webhook: acknowledged positions, stored in a transaction of their own.
    WebhookAck(Vec<WebhookAck>, AckReply),
    Close(oneshot::Sender<()>),
    /// Makes the writer fail, for the tests of its supervision.
    #[cfg(test)]
    Fail(Failure),
}

#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub(super) enum Failure {
    /// A panic inside a batch: the writer rolls back and goes on.
    Panic,
    /// The writer thread ends.
    Exit,
}

/// Starts the writer thread on the read-write connection `conn`. Answers
/// where to send it jobs, and a flag that turns false when the thread ends.
pub(super) fn spawn(
    conn: Connection,
    webhook: Arc<AtomicBool>,
    health: Arc<Health>,
) -> std::io::Result<(SyncSender<Job>, Arc<AtomicBool>)> {
    let (tx, rx) = sync_channel(WRITE_QUEUE);
    let writer_alive = Arc::new(AtomicBool::new(true));
    let alive = Alive(writer_alive.clone(), "sqlite");
    std::thread::Builder::new()
        .name("herald-sqlite-writer".into())
        .spawn(move || Writer { conn, checkpoint_due: false, webhook, health }.run(rx, alive))?;
    Ok((tx, writer_alive))
}

/// The writer thread's state: the one read-write connection.
struct Writer {
    conn: Connection,
    /// A batch erased a body and the WAL still holds it: checkpoint (and
    /// truncate) the WAL as soon as readers let it.
    checkpoint_due: bool,
    /// webhook: whether batches keep the webhook's positions.
    webhook: Arc<AtomicBool>,
    /// Whether commits succeed (`health.rs`).
    health: Arc<Health>,
}

impl Writer {
    fn run(mut self, rx: Receiver<Job>, _alive: Alive) {
        let mut batch: Vec<(Write, Reply)> = Vec::with_capacity(64);
        loop {
            let mut close = None;
            let mut revoke = None;
            let job = if self.checkpoint_due {
                match rx.recv_timeout(ERASE_CHECKPOINT_RETRY) {
                    Ok(job) => Ok(job),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        self.checkpoint_erased();
                        continue;
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Err(()),
                }
            } else {
                rx.recv().map_err(|_| ())
            };
            let mut acks = Vec::new();
            match job {
                Ok(Job::Write(w, r)) => batch.push((w, r)),
                Ok(Job::Revoke(job)) => revoke = Some(job),
                Ok(Job::WebhookAck(a, r)) => acks.push((a, r)),
                Ok(Job::Close(done)) => close = Some(done),
                #[cfg(test)]
                Ok(Job::Fail(Failure::Exit)) => return,
                #[cfg(test)]
                Ok(Job::Fail(Failure::Panic)) => self.supervised(&mut batch, |_, _| panic!("injected writer failure")),
                Err(()) => return,
            }
            while close.is_none() && revoke.is_none() && batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(Job::Write(w, r)) => batch.push((w, r)),
                    Ok(Job::Revoke(job)) => revoke = Some(job),
                    Ok(Job::WebhookAck(a, r)) => acks.push((a, r)),
                    Ok(Job::Close(done)) => close = Some(done),
                    #[cfg(test)]
                    Ok(Job::Fail(_)) => {}
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                self.supervised(&mut batch, Writer::commit_batch);
            }
            if let Some(job) = revoke {
                revocations::store(&self.conn, job);
            }
            if !acks.is_empty() {
                webhook::store_acks(&mut self.conn, acks);
            }
            if self.checkpoint_due {
                self.checkpoint_erased();
            }
            if let Some(done) = close {
                let _ = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
                tracing::info!("sqlite writer flushed and stopped");
                let _ = done.send(());
                return;
            }
        }
    }

    /// Copies the WAL into the database and truncates it, so that a body a
    /// delete erased (zeroed in the database by `secure_delete`) is in no
    /// file any more. Readers still on an older snapshot hold the WAL: then
    /// it is tried again shortly.
    fn checkpoint_erased(&mut self) {
        let busy: rusqlite::Result<i64> = self.conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0));
        match busy {
            Ok(0) => self.checkpoint_due = false,
            Ok(_) => metrics::counter!("herald_store_checkpoints_retried_total").increment(1),
            Err(e) => {
                tracing::warn!(error = %e, "wal checkpoint after an erasure failed; retrying");
                metrics::counter!("herald_store_errors_total", "kind" => "checkpoint").increment(1);
            }
        }
    }

    /// Runs `work` on `batch`, surviving a panic in it: the transaction is
    /// rolled back, the batch's writers hear `unavailable` (a retry with
    /// the same `client_id` is safe either way), and the writer goes on with the next batch, so
    /// one bad batch cannot leave the node unable to write.
    fn supervised(&mut self, batch: &mut Vec<(Write, Reply)>, work: fn(&mut Writer, &mut Vec<(Write, Reply)>)) {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(self, batch)));
        if run.is_err() {
            tracing::error!(writes = batch.len(), "the sqlite writer panicked in a batch; rolled back, going on");
            metrics::counter!("herald_store_writer_restarts_total").increment(1);
            let _ = self.conn.execute_batch("ROLLBACK");
            for (_, reply) in batch.drain(..) {
                let _ = reply.send(Err(unavailable("storage write failed")));
            }
        }
    }

    /// Commits `batch` as one transaction and answers every write in it. A
    /// failed batch is retried write by write, so one bad write cannot fail
    /// the others.
    fn commit_batch(&mut self, batch: &mut Vec<(Write, Reply)>) {
        let started = Instant::now();
        let writes: Vec<&Write> = batch.iter().map(|(w, _)| w).collect();
        match self.apply(&writes) {
            Ok(outcomes) => {
                let erased = batch
                    .iter()
                    .zip(&outcomes)
                    .any(|((w, _), o)| matches!(w, Write::Delete { .. } | Write::ForgetFile { .. }) && o.is_ok());
                self.checkpoint_due |= erased;
                self.health.committed();
                apply::answer_committed(batch, outcomes, started)
            }
            Err(e) => {
                self.health.failed(&e, batch.len());
                // A full disk fails every write alike: no point retrying them one by one.
                if batch.len() == 1 || health::kind_of(&e) == "disk_full" {
                    for (_, reply) in batch.drain(..) {
                        let _ = reply.send(Err(unavailable("storage write failed")));
                    }
                    return;
                }
                tracing::warn!(error = %e, writes = batch.len(), "store batch failed; retrying its writes one by one");
                for one in batch.drain(..) {
                    self.commit_batch(&mut vec![one]);
                }
            }
        }
    }

    /// Applies `writes` in one transaction and commits it.
    fn apply(&mut self, writes: &[&Write]) -> rusqlite::Result<Vec<Outcome>> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        let webhook = self.webhook.load(Ordering::Relaxed);
        let result = now_or_never(apply::apply(&mut SqliteTx(&self.conn, webhook), writes));
        match result.and_then(|outcomes| self.conn.execute_batch("COMMIT").map(|()| outcomes)) {
            Ok(outcomes) => Ok(outcomes),
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }
}

/// Runs a future whose every step is synchronous (SQLite's are) to completion.
fn now_or_never<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => unreachable!("SQLite operations never wait"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ChatKey;
    use crate::store::sqlite::SqliteStore;
    use crate::store::{EventLog, Lifecycle, StoreError};

    fn put(chat: &str) -> Write {
        Write::PutChat { key: ChatKey::new("w", chat), open: true }
    }

    #[tokio::test]
    async fn a_writer_that_panics_in_a_batch_rolls_back_and_keeps_writing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        store.write(put("a")).await.unwrap();
        store.jobs.send(Job::Fail(Failure::Panic)).unwrap();
        store.write(put("b")).await.expect("the writer survived the panic");
        assert!(store.ready().await.is_ok());
        assert!(store.chat(&ChatKey::new("w", "b")).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn a_dead_writer_makes_the_store_unready() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        assert!(store.ready().await.is_ok());
        store.jobs.send(Job::Fail(Failure::Exit)).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        while store.ready().await.is_ok() {
            assert!(Instant::now() < deadline, "still ready 5 s after its writer ended");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(matches!(store.write(put("c")).await, Err(StoreError::Unavailable(_))));
    }
}
