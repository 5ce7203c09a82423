//! The embedded store: SQLite in WAL mode under `--data`. This file opens
//! it, owns the pool of read-only connections and the store's lifecycle;
//! the rest is one file per idea:
//!
//! - `schema.rs`: the tables and their migrations;
//! - `writer.rs`: the one writer thread, which takes every write queued at
//!   the moment it is free into one transaction (group commit): a flood of
//!   joins into one chat costs one fsync per batch, not one per join;
//! - `tx.rs`: SQLite's statements for the rules of a batch ([`super::apply`]);
//! - one file per capability's reads (and its writes outside the log's
//!   batches): `log.rs`, `members.rs`, `moderation.rs`, `revocations.rs`,
//!   `webhook.rs`.
//!
//! Reads run on a small pool of read-only connections, which WAL lets
//! proceed beside the writer; they see only committed batches, i.e. what
//! was acknowledged.
//!
//! Not here: sharding, breakers (PostgreSQL's concern), or any cache of events.

mod conversations;
mod export;
mod files;
mod health;
mod log;
mod members;
mod moderation;
mod revocations;
mod schema;
mod search;
pub mod search_index;
mod tx;
mod webhook;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::{Semaphore, oneshot};

use super::{BoxFuture, Lifecycle, ShardStatus, StoreError};
use writer::Job;

/// The database file in `--data` (beside it, SQLite's `-wal` and `-shm`).
pub const DB_FILE: &str = "herald.db";

/// Concurrent reads; each holds one read-only connection.
const READERS: usize = 4;

/// The SQLite store. Cheap to share behind an `Arc`.
pub struct SqliteStore {
    jobs: SyncSender<Job>,
    /// False once the writer thread has ended: the store is then not ready.
    writer_alive: Arc<AtomicBool>,
    readers: Arc<ReaderPool>,
    /// webhook: whether writes keep the webhook's positions (shared with the writer).
    webhook: Arc<AtomicBool>,
    /// v1.2 search: the chats written since the indexer last looked (`search_index.rs`).
    search: Arc<search_index::SearchIndex>,
    /// Whether commits succeed (`health.rs`).
    health: Arc<health::Health>,
}

struct ReaderPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

impl SqliteStore {
    /// Opens (creating if needed) the store in directory `dir` and starts its
    /// writer thread. On a full disk it refuses with one line saying so.
    pub fn open(dir: &Path) -> anyhow::Result<SqliteStore> {
        SqliteStore::open_in(dir).map_err(|e| match health::free_bytes(dir) {
            Some(free) if health::is_full(free) || e.chain().any(|c| c.to_string().contains("disk is full")) => {
                anyhow::anyhow!(
                    "refusing to start: the disk of {} is full ({free} bytes free), so the store cannot write; \
                     free some space and start herald again",
                    dir.display()
                )
            }
            _ => e,
        })
    }

    fn open_in(dir: &Path) -> anyhow::Result<SqliteStore> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(DB_FILE);
        let conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // FULL: every commit is fsynced, so an acknowledged event survives a power cut too.
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "OFF")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let version = schema::version(&conn, &path)?;
        // Erased bodies are overwritten with zeros in the file, not just unlinked.
        conn.pragma_update(None, "secure_delete", "ON")?;
        schema::migrate(&conn, &path, version)?;

        let search = Arc::new(search_index::start(dir, &path));
        let webhook = Arc::new(AtomicBool::new(false));
        let health = Arc::new(health::Health::new(dir.to_path_buf()));
        let (jobs, writer_alive) = writer::spawn(conn, webhook.clone(), health.clone())?;
        Ok(SqliteStore {
            jobs,
            writer_alive,
            health,
            webhook,
            search,
            readers: Arc::new(ReaderPool { path, idle: Mutex::new(Vec::new()), permits: Semaphore::new(READERS) }),
        })
    }

    /// Runs `f` on a read-only connection on a blocking thread.
    async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let _permit = self.readers.permits.acquire().await.map_err(|_| unavailable("store closed"))?;
        let pool = self.readers.clone();
        let started = Instant::now();
        let result = tokio::task::spawn_blocking(move || {
            let mut conn = match pool.idle.lock().expect("reader pool lock").pop() {
                Some(c) => c,
                None => open_reader(&pool.path)?,
            };
            let out = f(&mut conn);
            pool.idle.lock().expect("reader pool lock").push(conn);
            out
        })
        .await
        .map_err(|e| unavailable(&format!("reader task failed: {e}")))?;
        metrics::histogram!("herald_store_read_seconds").record(started.elapsed().as_secs_f64());
        result.map_err(|e| {
            tracing::error!(error = %e, "store read failed");
            metrics::counter!("herald_store_errors_total", "kind" => "read").increment(1);
            unavailable("storage read failed")
        })
    }
}

fn open_reader(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    // v1.2 search: the index beside the log, read-only like the log.
    let index = path.with_file_name(search_index::SEARCH_FILE);
    if let Err(e) = conn.execute("ATTACH DATABASE ?1 AS search", [index.to_string_lossy()]) {
        // Searches fail on this connection; every other read goes on.
        tracing::error!(error = %e, "the search index could not be attached");
    }
    Ok(conn)
}

fn unavailable(msg: &str) -> StoreError {
    StoreError::Unavailable(msg.to_string())
}

impl Lifecycle for SqliteStore {
    /// Ready while the writer runs and a reader answers: a node whose
    /// writer is gone cannot acknowledge anything and must leave rotation.
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            if !self.writer_alive.load(Ordering::SeqCst) {
                return Err(unavailable("the store's writer stopped"));
            }
            if let Some(why) = self.health.cannot_commit() {
                return Err(unavailable(&why));
            }
            self.read(|conn| conn.query_row("SELECT 1", [], |_| Ok(()))).await
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            // The close job queues behind every write already accepted.
            let jobs = self.jobs.clone();
            let sent = tokio::task::spawn_blocking(move || jobs.send(Job::Close(tx)).is_ok()).await;
            if matches!(sent, Ok(true)) {
                let _ = rx.await;
            }
            // The indexer lets go of its file before the store counts as closed.
            let index = self.search.clone();
            let _ = tokio::task::spawn_blocking(move || index.close()).await;
        })
    }

    /// No shards: one database.
    fn shards(&self) -> Vec<ShardStatus> {
        Vec::new()
    }
}
