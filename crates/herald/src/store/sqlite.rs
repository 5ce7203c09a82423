//! The embedded store: SQLite in WAL mode under `--data`.
//!
//! All writes go through one writer thread, which takes every write queued at
//! the moment it is free into one transaction (group commit): a flood of
//! joins into one chat costs one fsync per batch, not one per join. The
//! writer keeps each touched chat's row (id, seq, member count) in memory and
//! writes it back once per batch, so no counter row is updated per event.
//! Reads run on a small pool of read-only connections, which WAL lets proceed
//! beside the writer; they see only committed batches, i.e. what was
//! acknowledged.
//!
//! Not here: sharding, breakers (PostgreSQL's concern), or any cache of events.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use herald_protocol::{Event, EventType};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde_json::value::RawValue;
use tokio::sync::{Semaphore, oneshot};

use super::{Actor, BoxFuture, Fetched, Store, StoreError, Write, Written};
use crate::model::{ChatInfo, ChatKey};

/// Schema version kept in `PRAGMA user_version`.
const SCHEMA_VERSION: i64 = 1;

/// The schema. `events` is clustered by (chat, seq) so a fetch is one range scan.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS chats (
    id         INTEGER PRIMARY KEY,
    ws         TEXT NOT NULL,
    chat       TEXT NOT NULL,
    open       INTEGER NOT NULL,
    seq        INTEGER NOT NULL,   -- latest event's seq; written once per batch
    members    INTEGER NOT NULL,   -- member count; written once per batch
    created_ms INTEGER NOT NULL,
    UNIQUE (ws, chat)
);
CREATE TABLE IF NOT EXISTS members (
    chat_id   INTEGER NOT NULL,
    user      TEXT NOT NULL,
    read_seq  INTEGER NOT NULL,
    joined_ms INTEGER NOT NULL,
    PRIMARY KEY (chat_id, user)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    chat_id   INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    type      TEXT NOT NULL,
    user      TEXT,
    ts        INTEGER NOT NULL,
    body      TEXT NOT NULL,
    client_id TEXT,
    PRIMARY KEY (chat_id, seq)
) WITHOUT ROWID;
-- Idempotent sends: one event per (chat, user, client_id).
CREATE UNIQUE INDEX IF NOT EXISTS events_client_id ON events (chat_id, user, client_id)
    WHERE client_id IS NOT NULL;
";

/// Most writes taken into one transaction. Bounds a batch's latency and the
/// work lost to a batch that fails and is retried write by write.
const MAX_BATCH: usize = 1024;
/// Writes that may wait for the writer. Beyond it, writes fail fast with
/// `unavailable` instead of queueing without bound.
const WRITE_QUEUE: usize = 16 * 1024;
/// Concurrent reads; each holds one read-only connection.
const READERS: usize = 4;
/// Chat rows the writer keeps in memory before it forgets them all.
const MAX_CACHED_CHATS: usize = 100_000;

type Reply = oneshot::Sender<Result<Written, StoreError>>;

enum Job {
    Write(Write, Reply),
    Close(oneshot::Sender<()>),
}

/// The SQLite store. Cheap to share behind an `Arc`.
pub struct SqliteStore {
    jobs: SyncSender<Job>,
    readers: Arc<ReaderPool>,
}

struct ReaderPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

impl SqliteStore {
    /// Opens (creating if needed) the store in directory `dir` and starts its writer thread.
    pub fn open(dir: &Path) -> anyhow::Result<SqliteStore> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("herald.db");
        let conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // FULL: every commit is fsynced, so an acknowledged event survives a power cut too.
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "OFF")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if version > SCHEMA_VERSION {
            anyhow::bail!("{} has schema version {version}; this herald knows {SCHEMA_VERSION}", path.display());
        }
        conn.execute_batch(SCHEMA)?;
        conn.pragma_update(None, "user_version", SCHEMA_VERSION)?;

        let (tx, rx) = sync_channel(WRITE_QUEUE);
        std::thread::Builder::new()
            .name("herald-sqlite-writer".into())
            .spawn(move || Writer { conn, chats: HashMap::new() }.run(rx))?;
        Ok(SqliteStore {
            jobs: tx,
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
    Ok(conn)
}

fn unavailable(msg: &str) -> StoreError {
    StoreError::Unavailable(msg.to_string())
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

impl Store for SqliteStore {
    fn write(&self, write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            match self.jobs.try_send(Job::Write(write, tx)) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    metrics::counter!("herald_store_errors_total", "kind" => "queue_full").increment(1);
                    return Err(unavailable("the store's write queue is full"));
                }
                Err(TrySendError::Disconnected(_)) => {
                    return Err(unavailable("the store is closed"));
                }
            }
            rx.await.unwrap_or_else(|_| Err(unavailable("the store writer stopped")))
        })
    }

    fn chat(&self, key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
        let key = key.clone();
        Box::pin(self.read(move |conn| load_chat(conn, &key).map(|row| row.map(|r| r.info()))))
    }

    fn fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        let key = key.clone();
        let member = member.map(str::to_owned);
        Box::pin(async move {
            self.read(move |conn| {
                let tx = conn.transaction()?;
                let Some(row) = load_chat(&tx, &key)? else {
                    return Ok(Err(StoreError::NotFound(format!("no chat {}", key.chat))));
                };
                if let Some(user) = &member
                    && read_position(&tx, row.id, user)?.is_none()
                {
                    return Ok(Err(StoreError::Forbidden(format!("not a member of {}", key.chat))));
                }
                let mut stmt = tx.prepare_cached(
                    "SELECT seq, type, user, ts, body, client_id FROM events
                         WHERE chat_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )?;
                let events = stmt
                    .query_map(params![row.id, after as i64, limit as i64], event_from_row)?
                    .collect::<rusqlite::Result<Vec<Event>>>()?;
                drop(stmt);
                tx.commit()?;
                let last = events.last().map_or(after, |e| e.seq);
                Ok(Ok(Fetched { more: last < row.seq, events, info: row.info() }))
            })
            .await?
        })
    }

    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.read(|conn| conn.query_row("SELECT 1", [], |_| Ok(()))))
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
        })
    }
}

fn event_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    let kind: String = r.get(1)?;
    let body: String = r.get(4)?;
    Ok(Event {
        seq: r.get::<_, i64>(0)? as u64,
        kind: EventType::parse(&kind).unwrap_or(EventType::System),
        user: r.get(2)?,
        ts: r.get(3)?,
        body: RawValue::from_string(body).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?,
        client_id: r.get(5)?,
    })
}

/// A chat's row as the writer knows it.
#[derive(Debug, Clone, Copy)]
struct ChatRow {
    id: i64,
    seq: u64,
    members: u64,
    open: bool,
}

impl ChatRow {
    fn info(&self) -> ChatInfo {
        ChatInfo { seq: self.seq, members: self.members, open: self.open }
    }
}

fn load_chat(conn: &Connection, key: &ChatKey) -> rusqlite::Result<Option<ChatRow>> {
    conn.prepare_cached("SELECT id, seq, members, open FROM chats WHERE ws = ?1 AND chat = ?2")?
        .query_row(params![&*key.ws, &*key.chat], |r| {
            Ok(ChatRow {
                id: r.get(0)?,
                seq: r.get::<_, i64>(1)? as u64,
                members: r.get::<_, i64>(2)? as u64,
                open: r.get(3)?,
            })
        })
        .optional()
}

fn read_position(conn: &Connection, chat_id: i64, user: &str) -> rusqlite::Result<Option<u64>> {
    conn.prepare_cached("SELECT read_seq FROM members WHERE chat_id = ?1 AND user = ?2")?
        .query_row(params![chat_id, user], |r| r.get::<_, i64>(0).map(|v| v as u64))
        .optional()
}

/// The writer thread's state.
struct Writer {
    conn: Connection,
    /// Rows of chats touched recently. The truth for seq and counts while the
    /// writer runs; dropped whole after a failed batch and reloaded from disk.
    chats: HashMap<ChatKey, ChatRow>,
}

/// A write's result inside a batch: a logical refusal is the client's answer;
/// a database error fails the batch.
type OpResult = Result<Result<Written, StoreError>, rusqlite::Error>;

impl Writer {
    fn run(mut self, rx: Receiver<Job>) {
        let mut batch: Vec<(Write, Reply)> = Vec::with_capacity(64);
        loop {
            let mut close = None;
            match rx.recv() {
                Ok(Job::Write(w, r)) => batch.push((w, r)),
                Ok(Job::Close(done)) => close = Some(done),
                Err(_) => return,
            }
            while close.is_none() && batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(Job::Write(w, r)) => batch.push((w, r)),
                    Ok(Job::Close(done)) => close = Some(done),
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                self.commit_batch(&mut batch);
            }
            if let Some(done) = close {
                let _ = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)");
                tracing::info!("sqlite writer flushed and stopped");
                let _ = done.send(());
                return;
            }
        }
    }

    /// Commits `batch` as one transaction and answers every write in it. A
    /// failed batch is retried write by write, so one bad write cannot fail
    /// the others.
    fn commit_batch(&mut self, batch: &mut Vec<(Write, Reply)>) {
        if self.chats.len() > MAX_CACHED_CHATS {
            self.chats.clear();
        }
        let started = Instant::now();
        let writes: Vec<&Write> = batch.iter().map(|(w, _)| w).collect();
        match self.apply(&writes) {
            Ok(results) => {
                let secs = started.elapsed().as_secs_f64();
                metrics::histogram!("herald_store_commit_seconds").record(secs);
                metrics::histogram!("herald_store_batch_writes").record(batch.len() as f64);
                let stored = results.iter().filter(|r| matches!(r, Ok(w) if w.event.is_some())).count();
                metrics::counter!("herald_events_stored_total").increment(stored as u64);
                for ((_, reply), result) in batch.drain(..).zip(results) {
                    let _ = reply.send(result);
                }
            }
            Err(e) => {
                self.chats.clear();
                metrics::counter!("herald_store_errors_total", "kind" => "commit").increment(1);
                if batch.len() == 1 {
                    tracing::error!(error = %e, key = %batch[0].0.key(), "store write failed");
                    let (_, reply) = batch.pop().expect("one write");
                    let _ = reply.send(Err(unavailable("storage write failed")));
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
    fn apply(&mut self, writes: &[&Write]) -> rusqlite::Result<Vec<Result<Written, StoreError>>> {
        self.conn.execute_batch("BEGIN IMMEDIATE")?;
        let mut dirty: Vec<ChatKey> = Vec::new();
        let mut results = Vec::with_capacity(writes.len());
        let outcome = (|| {
            for w in writes {
                results.push(self.apply_one(w, &mut dirty)?);
            }
            let mut update =
                self.conn.prepare_cached("UPDATE chats SET seq = ?2, members = ?3, open = ?4 WHERE id = ?1")?;
            dirty.sort();
            dirty.dedup();
            for key in &dirty {
                let row = self.chats[key];
                update.execute(params![row.id, row.seq as i64, row.members as i64, row.open])?;
            }
            Ok(())
        })();
        match outcome.and_then(|()| self.conn.execute_batch("COMMIT")) {
            Ok(()) => Ok(results),
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    fn row(&mut self, key: &ChatKey) -> rusqlite::Result<Option<ChatRow>> {
        if let Some(row) = self.chats.get(key) {
            return Ok(Some(*row));
        }
        let row = load_chat(&self.conn, key)?;
        if let Some(row) = row {
            self.chats.insert(key.clone(), row);
        }
        Ok(row)
    }

    fn create_chat(&mut self, key: &ChatKey, open: bool) -> rusqlite::Result<ChatRow> {
        self.conn
            .prepare_cached(
                "INSERT INTO chats (ws, chat, open, seq, members, created_ms) VALUES (?1, ?2, ?3, 0, 0, ?4)",
            )?
            .execute(params![&*key.ws, &*key.chat, open, now_ms()])?;
        let row = ChatRow { id: self.conn.last_insert_rowid(), seq: 0, members: 0, open };
        self.chats.insert(key.clone(), row);
        Ok(row)
    }

    /// Stores the next event of `key`, updating the cached row.
    fn append(
        &mut self,
        key: &ChatKey,
        kind: EventType,
        user: Option<&str>,
        body: Box<RawValue>,
        client_id: Option<&str>,
        dirty: &mut Vec<ChatKey>,
    ) -> rusqlite::Result<Event> {
        let row = self.chats.get_mut(key).expect("row loaded before append");
        row.seq += 1;
        let (id, seq) = (row.id, row.seq);
        dirty.push(key.clone());
        let ts = now_ms();
        self.conn
            .prepare_cached(
                "INSERT INTO events (chat_id, seq, type, user, ts, body, client_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![id, seq as i64, kind.as_str(), user, ts, body.get(), client_id])?;
        Ok(Event { seq, kind, user: user.map(str::to_owned), ts, body, client_id: client_id.map(str::to_owned) })
    }

    fn apply_one(&mut self, write: &Write, dirty: &mut Vec<ChatKey>) -> OpResult {
        let key = write.key();
        let not_found = || StoreError::NotFound(format!("no chat {}", key.chat));
        let not_member = || StoreError::Forbidden(format!("not a member of {}", key.chat));
        let row = match (self.row(key)?, write) {
            (Some(row), _) => row,
            (None, Write::Join { actor: Actor::Client, .. }) => {
                dirty.push(key.clone());
                self.create_chat(key, true)?
            }
            (None, Write::PutChat { open, .. }) => {
                let row = self.create_chat(key, *open)?;
                return Ok(Ok(Written { event: None, seq: 0, info: row.info() }));
            }
            (None, _) => return Ok(Err(not_found())),
        };
        let unchanged = |row: ChatRow, seq: u64| Ok(Ok(Written { event: None, seq, info: row.info() }));
        let event = match write {
            Write::PutChat { open, .. } => {
                let row = self.chats.get_mut(key).expect("row loaded");
                row.open = *open;
                dirty.push(key.clone());
                return unchanged(*row, row.seq);
            }
            Write::Join { user, actor, .. } => {
                if read_position(&self.conn, row.id, user)?.is_some() {
                    return unchanged(row, row.seq);
                }
                if !row.open && *actor == Actor::Client {
                    return Ok(Err(StoreError::Forbidden(format!("{} is closed; ask to be added", key.chat))));
                }
                self.conn
                    .prepare_cached("INSERT INTO members (chat_id, user, read_seq, joined_ms) VALUES (?1, ?2, 0, ?3)")?
                    .execute(params![row.id, &**user, now_ms()])?;
                self.chats.get_mut(key).expect("row loaded").members += 1;
                self.append(key, EventType::Join, Some(user), empty_body(), None, dirty)?
            }
            Write::Leave { user, actor, .. } => {
                let removed = self
                    .conn
                    .prepare_cached("DELETE FROM members WHERE chat_id = ?1 AND user = ?2")?
                    .execute(params![row.id, &**user])?;
                if removed == 0 {
                    return match actor {
                        Actor::Client => unchanged(row, row.seq),
                        Actor::Admin => {
                            Ok(Err(StoreError::NotFound(format!("{user} is not a member of {}", key.chat))))
                        }
                    };
                }
                let r = self.chats.get_mut(key).expect("row loaded");
                r.members = r.members.saturating_sub(1);
                self.append(key, EventType::Leave, Some(user), empty_body(), None, dirty)?
            }
            Write::Append { user, system, body, client_id, member_only, .. } => {
                if *member_only {
                    let Some(u) = user else {
                        return Ok(Err(not_member()));
                    };
                    if read_position(&self.conn, row.id, u)?.is_none() {
                        return Ok(Err(not_member()));
                    }
                }
                if let Some(cid) = client_id {
                    let first: Option<i64> = self
                        .conn
                        .prepare_cached("SELECT seq FROM events WHERE chat_id = ?1 AND user IS ?2 AND client_id = ?3")?
                        .query_row(params![row.id, user.as_deref(), cid], |r| r.get(0))
                        .optional()?;
                    if let Some(seq) = first {
                        return unchanged(row, seq as u64);
                    }
                }
                let kind = if *system { EventType::System } else { EventType::Message };
                self.append(key, kind, user.as_deref(), body.clone(), client_id.as_deref(), dirty)?
            }
            Write::React { user, target, emoji, on, .. } => {
                if read_position(&self.conn, row.id, user)?.is_none() {
                    return Ok(Err(not_member()));
                }
                if *target == 0 || *target > row.seq {
                    return Ok(Err(StoreError::NotFound(format!("no event {target} in {}", key.chat))));
                }
                let body = serde_json::json!({"target": target, "emoji": emoji, "on": on});
                let body = serde_json::value::to_raw_value(&body).expect("reaction body serializes");
                self.append(key, EventType::Reaction, Some(user), body, None, dirty)?
            }
            Write::Read { user, seq, .. } => {
                let Some(position) = read_position(&self.conn, row.id, user)? else {
                    return Ok(Err(not_member()));
                };
                if *seq > row.seq {
                    return Ok(Err(StoreError::BadRequest(format!(
                        "seq {seq} is beyond the latest event of {} ({})",
                        key.chat, row.seq
                    ))));
                }
                if *seq <= position {
                    return unchanged(row, position);
                }
                self.conn
                    .prepare_cached("UPDATE members SET read_seq = ?3 WHERE chat_id = ?1 AND user = ?2")?
                    .execute(params![row.id, &**user, *seq as i64])?;
                let body = RawValue::from_string(format!("{{\"seq\":{seq}}}")).expect("read body is JSON");
                let event = self.append(key, EventType::Read, Some(user), body, None, dirty)?;
                let info = self.chats[key].info();
                return Ok(Ok(Written { event: Some(event), seq: *seq, info }));
            }
        };
        let info = self.chats[key].info();
        Ok(Ok(Written { seq: event.seq, event: Some(event), info }))
    }
}

fn empty_body() -> Box<RawValue> {
    RawValue::from_string("{}".to_string()).expect("{} is JSON")
}
