//! The embedded store: SQLite in WAL mode under `--data`.
//!
//! All writes go through one writer thread, which takes every write queued at
//! the moment it is free into one transaction (group commit): a flood of
//! joins into one chat costs one fsync per batch, not one per join. The rules
//! of a batch are in [`super::apply`]; this file supplies SQLite's statements.
//! Reads run on a small pool of read-only connections, which WAL lets proceed
//! beside the writer; they see only committed batches, i.e. what was
//! acknowledged.
//!
//! Not here: sharding, breakers (PostgreSQL's concern), or any cache of events.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use herald_protocol::{Event, EventType};
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use serde_json::value::RawValue;
use tokio::sync::{Semaphore, oneshot};

use super::apply::{self, ChatRow, EventMeta, MessageRow, Outcome, Reply, Stored, Tx};
use super::{
    Alive, BoxFuture, EventLog, Fetched, InboxCursor, Lifecycle, Member, Membership, Moderation, Revocation,
    RevocationList, Revoked, ShardStatus, StoreError, Undelivered, WebhookAck, WebhookPositions, Write, Written,
    sql_seq,
};
use crate::model::{ChatInfo, ChatKey};
use herald_protocol::reply::InboxEntry;

/// The database file in `--data` (beside it, SQLite's `-wal` and `-shm`).
pub const DB_FILE: &str = "herald.db";

/// Schema version kept in `PRAGMA user_version`. Version 2 (protocol v1.1)
/// added the message lifecycle, mutes, bans and the inbox's counts
/// ([`SCHEMA_V2`]); a version 1 file is migrated at start. Version 3 added
/// the hooks' tables ([`SCHEMA_V3`]).
const SCHEMA_VERSION: i64 = 3;

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

/// Version 2, from version 1: columns, then their values for rows stored
/// before (counts kept as counts start from the log once, here).
const MIGRATE_V2: &str = "
ALTER TABLE chats ADD COLUMN messages INTEGER NOT NULL DEFAULT 0;     -- message events, kept as a count
ALTER TABLE chats ADD COLUMN last_ts INTEGER NOT NULL DEFAULT 0;      -- the latest event's ts
ALTER TABLE chats ADD COLUMN last_message INTEGER NOT NULL DEFAULT 0; -- the latest message's seq
ALTER TABLE events ADD COLUMN ord INTEGER;       -- a message's place among the chat's messages
ALTER TABLE events ADD COLUMN user_ord INTEGER;  -- a message's place among its sender's messages in the chat
ALTER TABLE events ADD COLUMN target INTEGER;    -- edit and delete events: the message they change
ALTER TABLE events ADD COLUMN edited INTEGER;    -- messages: the seq of the latest edit
ALTER TABLE events ADD COLUMN deleted INTEGER NOT NULL DEFAULT 0;
UPDATE events SET ord = n.o, user_ord = n.uo FROM (
    SELECT chat_id, seq,
           row_number() OVER (PARTITION BY chat_id ORDER BY seq) AS o,
           row_number() OVER (PARTITION BY chat_id, user ORDER BY seq) AS uo
      FROM events WHERE type = 'message') AS n
 WHERE events.chat_id = n.chat_id AND events.seq = n.seq;
UPDATE chats SET
    messages = (SELECT count(*) FROM events e WHERE e.chat_id = chats.id AND e.type = 'message'),
    last_message = coalesce((SELECT max(seq) FROM events e WHERE e.chat_id = chats.id AND e.type = 'message'), 0),
    last_ts = coalesce((SELECT ts FROM events e WHERE e.chat_id = chats.id ORDER BY seq DESC LIMIT 1), created_ms);
";

/// Version 2's tables and indexes. The partial indexes hold only message
/// rows (or deleted ones, which are rare): an unread count is a few lookups
/// in them, never a scan of a chat's history.
const SCHEMA_V2: &str = "
CREATE INDEX IF NOT EXISTS members_user ON members (user, chat_id);
CREATE INDEX IF NOT EXISTS events_messages ON events (chat_id, seq, ord) WHERE ord IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_own ON events (chat_id, user, seq, user_ord) WHERE ord IS NOT NULL;
CREATE INDEX IF NOT EXISTS events_deleted ON events (chat_id, seq, user) WHERE deleted = 1;
CREATE INDEX IF NOT EXISTS events_target ON events (chat_id, target) WHERE target IS NOT NULL;
CREATE TABLE IF NOT EXISTS bans (
    chat_id INTEGER NOT NULL,
    user    TEXT NOT NULL,
    PRIMARY KEY (chat_id, user)
) WITHOUT ROWID;
-- Mutes outlive a membership: leaving and joining again does not end one.
CREATE TABLE IF NOT EXISTS mutes (
    chat_id  INTEGER NOT NULL,
    user     TEXT NOT NULL,
    until_ms INTEGER NOT NULL,   -- 9223372036854775807: until unmuted
    PRIMARY KEY (chat_id, user)
) WITHOUT ROWID;
";

/// Version 3: the hooks' state (new tables only, so applying it is the migration).
const SCHEMA_V3: &str = "
-- webhook: delivery positions. One row per chat that stored an event while
-- a webhook was configured; the partial index holds only the chats with
-- events not acknowledged yet, oldest first, so finding them reads no idle chat.
CREATE TABLE IF NOT EXISTS webhook_positions (
    chat_id   INTEGER PRIMARY KEY,
    delivered INTEGER NOT NULL,   -- the last seq the receiver acknowledged
    head      INTEGER NOT NULL,   -- the latest seq stored while the webhook was on
    since_ms  INTEGER NOT NULL    -- when the oldest event not acknowledged was stored (or a moment before)
);
CREATE INDEX IF NOT EXISTS webhook_pending ON webhook_positions (since_ms, chat_id) WHERE head > delivered;
-- revocations
-- A user's tokens issued (iat) at or before revoked_ms are refused. stored_ms:
-- when the row was written, by this store's clock, which nodes poll by.
CREATE TABLE IF NOT EXISTS revocations (
    ws         TEXT NOT NULL,
    user       TEXT NOT NULL,
    revoked_ms INTEGER NOT NULL,
    stored_ms  INTEGER NOT NULL,
    PRIMARY KEY (ws, user)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS revocations_stored ON revocations (stored_ms);
";

/// webhook: a batch's chats that stored events. A new row starts at the
/// seq before the batch (events stored before the webhook was on are not
/// delivered); a row that was caught up starts its lag at this batch.
const UPSERT_POSITION: &str = "
INSERT INTO webhook_positions (chat_id, delivered, head, since_ms) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (chat_id) DO UPDATE SET
    since_ms = CASE WHEN webhook_positions.head <= webhook_positions.delivered THEN excluded.since_ms
                    ELSE webhook_positions.since_ms END,
    head = excluded.head";

/// How often the writer retries a WAL checkpoint that readers held up, after
/// a batch that erased a body: the erased bytes must leave the files soon.
const ERASE_CHECKPOINT_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// Most writes taken into one transaction. Bounds a batch's latency and the
/// work lost to a batch that fails and is retried write by write.
const MAX_BATCH: usize = 1024;
/// Writes that may wait for the writer. Beyond it, writes fail fast with
/// `unavailable` instead of queueing without bound.
const WRITE_QUEUE: usize = 16 * 1024;
/// Concurrent reads; each holds one read-only connection.
const READERS: usize = 4;

/// webhook: where the writer answers a request to store positions.
type AckReply = oneshot::Sender<Result<(), StoreError>>;

enum Job {
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
enum Failure {
    /// A panic inside a batch: the writer rolls back and goes on.
    Panic,
    /// The writer thread ends.
    Exit,
}

/// A revocation for the writer to store.
struct RevokeJob {
    ws: String,
    user: String,
    revoked_ms: i64,
    reply: oneshot::Sender<Result<(), StoreError>>,
}

/// The SQLite store. Cheap to share behind an `Arc`.
pub struct SqliteStore {
    jobs: SyncSender<Job>,
    /// False once the writer thread has ended: the store is then not ready.
    writer_alive: Arc<AtomicBool>,
    readers: Arc<ReaderPool>,
    /// webhook: whether writes keep the webhook's positions (shared with the writer).
    webhook: Arc<AtomicBool>,
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
        let path = dir.join(DB_FILE);
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
        // Erased bodies are overwritten with zeros in the file, not just unlinked.
        conn.pragma_update(None, "secure_delete", "ON")?;
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(SCHEMA)?;
        if version < 2 {
            tx.execute_batch(MIGRATE_V2)?;
            if version == 1 {
                tracing::info!(path = %path.display(), "sqlite store migrated from schema 1 to 2");
            }
        }
        tx.execute_batch(SCHEMA_V2)?;
        tx.execute_batch(SCHEMA_V3)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.commit()?;

        let (tx, rx) = sync_channel(WRITE_QUEUE);
        let writer_alive = Arc::new(AtomicBool::new(true));
        let alive = Alive(writer_alive.clone(), "sqlite");
        let webhook = Arc::new(AtomicBool::new(false));
        let tracked = webhook.clone();
        std::thread::Builder::new()
            .name("herald-sqlite-writer".into())
            .spawn(move || Writer { conn, checkpoint_due: false, webhook: tracked }.run(rx, alive))?;
        Ok(SqliteStore {
            jobs: tx,
            writer_alive,
            webhook,
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

impl EventLog for SqliteStore {
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
                    "SELECT seq, type, user, ts, body, client_id, edited, deleted FROM events
                         WHERE chat_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )?;
                let events = stmt
                    .query_map(params![row.id, sql_seq(after), limit as i64], event_from_row)?
                    .collect::<rusqlite::Result<Vec<Event>>>()?;
                drop(stmt);
                tx.commit()?;
                let last = events.last().map_or(after, |e| e.seq);
                Ok(Ok(Fetched { more: last < row.seq, events, info: row.info() }))
            })
            .await?
        })
    }

    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
        let keys = keys.to_vec();
        Box::pin(
            self.read(move |conn| keys.iter().map(|key| load_chat(conn, key).map(|row| row.map(|r| r.seq))).collect()),
        )
    }

    fn client_id_seq<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
        client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let (key, user, client_id) = (key.clone(), user.to_owned(), client_id.to_owned());
        Box::pin(self.read(move |conn| {
            conn.prepare_cached(
                "SELECT e.seq FROM chats c JOIN events e ON e.chat_id = c.id
                  WHERE c.ws = ?1 AND c.chat = ?2 AND e.user = ?3 AND e.client_id = ?4",
            )?
            .query_row(params![&*key.ws, &*key.chat, user, client_id], |r| r.get::<_, i64>(0).map(|v| v as u64))
            .optional()
        }))
    }
}

impl Membership for SqliteStore {
    fn member<'a>(&'a self, key: &'a ChatKey, user: &'a str) -> BoxFuture<'a, Result<Option<Member>, StoreError>> {
        let (key, user) = (key.clone(), user.to_owned());
        Box::pin(async move {
            self.read(move |conn| {
                let Some(row) = load_chat(conn, &key)? else {
                    return Ok(Err(StoreError::NotFound(format!("no chat {}", key.chat))));
                };
                Ok(Ok(member_of(conn, row.id, &user, apply::now_ms())?))
            })
            .await?
        })
    }

    fn inbox<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a InboxCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<InboxEntry>, StoreError>> {
        let (ws, user) = (ws.to_owned(), user.to_owned());
        let (ts, chat) = after.map_or((i64::MAX, String::new()), |c| (c.ts, c.chat.clone()));
        Box::pin(self.read(move |conn| {
            let sql = INBOX_SQL.replace(
                "{filter}",
                "m.user = ?1 AND c.ws = ?2 AND (c.last_ts < ?3 OR (c.last_ts = ?3 AND c.chat > ?4))
                 ORDER BY c.last_ts DESC, c.chat LIMIT ?5",
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            stmt.query_map(params![user, ws, ts, chat, i64::from(limit) + 1], inbox_entry_from_row)?.collect()
        }))
    }

    fn member_chats<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>> {
        let (ws, user) = (ws.to_owned(), user.to_owned());
        Box::pin(self.read(move |conn| {
            conn.prepare_cached(
                "SELECT c.chat, c.last_ts FROM members m JOIN chats c ON c.id = m.chat_id
                  WHERE m.user = ?1 AND c.ws = ?2 ORDER BY c.last_ts DESC, c.chat LIMIT ?3",
            )?
            .query_map(params![user, ws, i64::from(limit)], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect()
        }))
    }

    fn inbox_entry<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<InboxEntry>, StoreError>> {
        let (key, user) = (key.clone(), user.to_owned());
        Box::pin(self.read(move |conn| {
            let sql = INBOX_SQL.replace("{filter}", "m.user = ?1 AND c.ws = ?2 AND c.chat = ?3");
            conn.prepare_cached(&sql)?.query_row(params![user, &*key.ws, &*key.chat], inbox_entry_from_row).optional()
        }))
    }
}

impl Moderation for SqliteStore {
    fn user_messages<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<(&'a str, u64)>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
        let (ws, user) = (ws.to_owned(), user.to_owned());
        let (chat, seq) = after.map_or((String::new(), 0), |(c, s)| (c.to_owned(), sql_seq(s)));
        Box::pin(self.read(move |conn| {
            // The workspace's chats in name order, and in each the user's
            // messages through `events_own`: no other user's events are read.
            conn.prepare_cached(
                "SELECT c.chat, e.seq FROM chats c JOIN events e ON e.chat_id = c.id
                  WHERE c.ws = ?1 AND e.user = ?2 AND e.ord IS NOT NULL AND e.deleted = 0
                    AND (c.chat > ?3 OR (c.chat = ?3 AND e.seq > ?4))
                  ORDER BY c.chat, e.seq LIMIT ?5",
            )?
            .query_map(params![ws, user, chat, seq, i64::from(limit)], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })?
            .collect()
        }))
    }
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
                    .prepare_cached(
                        "SELECT seq, type, user, ts, body, client_id, edited, deleted FROM events
                          WHERE chat_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                    )?
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

impl Lifecycle for SqliteStore {
    /// Ready while the writer runs and a reader answers: a node whose
    /// writer is gone cannot acknowledge anything and must leave rotation.
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            if !self.writer_alive.load(Ordering::SeqCst) {
                return Err(unavailable("the store's writer stopped"));
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
        })
    }

    /// No shards: one database.
    fn shards(&self) -> Vec<ShardStatus> {
        Vec::new()
    }
}

fn event_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    event_from_row_at(r, 0)
}

fn load_chat(conn: &Connection, key: &ChatKey) -> rusqlite::Result<Option<ChatRow>> {
    conn.prepare_cached(
        "SELECT id, seq, members, open, messages, last_ts, last_message FROM chats WHERE ws = ?1 AND chat = ?2",
    )?
    .query_row(params![&*key.ws, &*key.chat], |r| {
        Ok(ChatRow {
            id: r.get(0)?,
            seq: r.get::<_, i64>(1)? as u64,
            members: r.get::<_, i64>(2)? as u64,
            open: r.get(3)?,
            messages: r.get::<_, i64>(4)? as u64,
            ts: r.get(5)?,
            last_message: r.get::<_, i64>(6)? as u64,
        })
    })
    .optional()
}

/// The inbox's query: the chats chosen by `{filter}` (a page of a user's
/// chats, or one chat), each with the counts its unread number is made of
/// (see [`super::unread`]) and its latest message as fetch shows it. Every
/// count is an index lookup (`events_messages`, `events_own`,
/// `events_deleted`); no chat's history is read.
const INBOX_SQL: &str = "
SELECT p.chat, p.seq, p.last_ts, p.read_seq, p.messages,
    coalesce((SELECT e.ord FROM events e WHERE e.chat_id = p.id AND e.seq <= p.read_seq AND e.ord IS NOT NULL
              ORDER BY e.seq DESC LIMIT 1), 0),
    coalesce((SELECT e.user_ord FROM events e WHERE e.chat_id = p.id AND e.user = p.user AND e.ord IS NOT NULL
              ORDER BY e.seq DESC LIMIT 1), 0),
    coalesce((SELECT e.user_ord FROM events e WHERE e.chat_id = p.id AND e.user = p.user AND e.seq <= p.read_seq
              AND e.ord IS NOT NULL ORDER BY e.seq DESC LIMIT 1), 0),
    (SELECT count(*) FROM events e WHERE e.chat_id = p.id AND e.deleted = 1 AND e.seq > p.read_seq
              AND e.user IS NOT p.user),
    l.seq, l.type, l.user, l.ts, l.body, l.client_id, l.edited, l.deleted
FROM (SELECT c.id, c.chat, c.seq, c.last_ts, c.messages, c.last_message, m.read_seq, m.user
        FROM members m JOIN chats c ON c.id = m.chat_id
       WHERE {filter}) AS p
LEFT JOIN events l ON l.chat_id = p.id AND l.seq = p.last_message
ORDER BY p.last_ts DESC, p.chat
";

fn inbox_entry_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<InboxEntry> {
    let n = |i: usize| r.get::<_, i64>(i).map(|v| v as u64);
    let read = n(3)?;
    let last = match r.get::<_, Option<i64>>(9)? {
        None => None,
        Some(_) => Some(event_from_row_at(r, 9)?),
    };
    Ok(InboxEntry {
        chat: r.get(0)?,
        seq: n(1)?,
        ts: r.get(2)?,
        read,
        unread: super::unread(n(4)?, n(5)?, n(6)?, n(7)?, n(8)?),
        last,
    })
}

/// An event from the eight columns of a row starting at `at`, in fetch's order.
fn event_from_row_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Event> {
    let kind: String = r.get(at + 1)?;
    let body: String = r.get(at + 4)?;
    Ok(Event {
        seq: r.get::<_, i64>(at)? as u64,
        kind: EventType::parse(&kind).unwrap_or(EventType::System),
        user: r.get(at + 2)?,
        ts: r.get(at + 3)?,
        body: RawValue::from_string(body).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?,
        client_id: r.get(at + 5)?,
        edited: r.get::<_, Option<i64>>(at + 6)?.map(|v| v as u64),
        deleted: r.get(at + 7)?,
    })
}

fn member_of(conn: &Connection, chat_id: i64, user: &str, now_ms: i64) -> rusqlite::Result<Option<Member>> {
    let Some(read) = read_position(conn, chat_id, user)? else { return Ok(None) };
    let until = mute_of(conn, chat_id, user)?;
    Ok(Some(Member { read, muted_until_ms: until.filter(|_| apply::is_muted(until, now_ms)) }))
}

fn mute_of(conn: &Connection, chat_id: i64, user: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT until_ms FROM mutes WHERE chat_id = ?1 AND user = ?2")?
        .query_row(params![chat_id, user], |r| r.get(0))
        .optional()
}

fn read_position(conn: &Connection, chat_id: i64, user: &str) -> rusqlite::Result<Option<u64>> {
    conn.prepare_cached("SELECT read_seq FROM members WHERE chat_id = ?1 AND user = ?2")?
        .query_row(params![chat_id, user], |r| r.get::<_, i64>(0).map(|v| v as u64))
        .optional()
}

/// The writer thread's state: the one read-write connection.
struct Writer {
    conn: Connection,
    /// A batch erased a body and the WAL still holds it: checkpoint (and
    /// truncate) the WAL as soon as readers let it.
    checkpoint_due: bool,
    /// webhook: whether batches keep the webhook's positions.
    webhook: Arc<AtomicBool>,
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
                self.revoke(job);
            }
            if !acks.is_empty() {
                self.webhook_ack(acks);
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

    /// Stores a revocation (a later one of the same user wins) and answers it.
    fn revoke(&mut self, job: RevokeJob) {
        let stored = self.conn.prepare_cached(
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
                let erased =
                    batch.iter().zip(&outcomes).any(|((w, _), o)| matches!(w, Write::Delete { .. }) && o.is_ok());
                self.checkpoint_due |= erased;
                apply::answer_committed(batch, outcomes, started)
            }
            Err(e) => {
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

    /// webhook: stores acknowledged positions, all of them in one
    /// transaction, and answers each request.
    fn webhook_ack(&mut self, acks: Vec<(Vec<WebhookAck>, AckReply)>) {
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
        let result = store(&mut self.conn).map_err(|e| {
            tracing::error!(error = %e, "storing webhook positions failed");
            metrics::counter!("herald_store_errors_total", "kind" => "webhook_ack").increment(1);
            unavailable("storing webhook positions failed")
        });
        for (_, reply) in acks {
            let _ = reply.send(result.clone());
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

/// One SQLite write transaction. The single writer needs no row locks.
/// The flag: whether the transaction keeps the webhook's positions.
struct SqliteTx<'a>(&'a Connection, bool);

impl Tx for SqliteTx<'_> {
    type Error = rusqlite::Error;

    async fn load_chat(&mut self, key: &ChatKey) -> rusqlite::Result<Option<ChatRow>> {
        load_chat(self.0, key)
    }

    async fn create_chat(&mut self, key: &ChatKey, open: bool, now_ms: i64) -> rusqlite::Result<ChatRow> {
        self.0
            .prepare_cached(
                "INSERT INTO chats (ws, chat, open, seq, members, created_ms, last_ts) VALUES (?1, ?2, ?3, 0, 0, ?4, ?4)",
            )?
            .execute(params![&*key.ws, &*key.chat, open, now_ms])?;
        Ok(ChatRow {
            id: self.0.last_insert_rowid(),
            seq: 0,
            members: 0,
            open,
            messages: 0,
            ts: now_ms,
            last_message: 0,
        })
    }

    async fn read_position(&mut self, chat: i64, user: &str) -> rusqlite::Result<Option<u64>> {
        read_position(self.0, chat, user)
    }

    async fn add_member(&mut self, chat: i64, user: &str, now_ms: i64) -> rusqlite::Result<()> {
        self.0
            .prepare_cached("INSERT INTO members (chat_id, user, read_seq, joined_ms) VALUES (?1, ?2, 0, ?3)")?
            .execute(params![chat, user, now_ms])?;
        Ok(())
    }

    async fn remove_member(&mut self, chat: i64, user: &str) -> rusqlite::Result<bool> {
        let n = self
            .0
            .prepare_cached("DELETE FROM members WHERE chat_id = ?1 AND user = ?2")?
            .execute(params![chat, user])?;
        Ok(n > 0)
    }

    async fn set_read_position(&mut self, chat: i64, user: &str, seq: u64) -> rusqlite::Result<()> {
        self.0
            .prepare_cached("UPDATE members SET read_seq = ?3 WHERE chat_id = ?1 AND user = ?2")?
            .execute(params![chat, user, seq as i64])?;
        Ok(())
    }

    async fn find_client_id(
        &mut self,
        chat: i64,
        user: Option<&str>,
        client_id: &str,
    ) -> rusqlite::Result<Option<u64>> {
        self.0
            .prepare_cached("SELECT seq FROM events WHERE chat_id = ?1 AND user IS ?2 AND client_id = ?3")?
            .query_row(params![chat, user, client_id], |r| r.get::<_, i64>(0).map(|v| v as u64))
            .optional()
    }

    async fn insert_event(&mut self, chat: i64, e: &Event, meta: EventMeta) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "INSERT INTO events (chat_id, seq, type, user, ts, body, client_id, ord, user_ord, target)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?
            .execute(params![
                chat,
                e.seq as i64,
                e.kind.as_str(),
                e.user,
                e.ts,
                e.body.get(),
                e.client_id,
                meta.ord.map(|v| v as i64),
                meta.user_ord.map(|v| v as i64),
                meta.target.map(sql_seq),
            ])?;
        Ok(())
    }

    async fn save_chat(&mut self, row: &ChatRow) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "UPDATE chats SET seq = ?2, members = ?3, open = ?4, messages = ?5, last_ts = ?6, last_message = ?7
                 WHERE id = ?1",
            )?
            .execute(params![
                row.id,
                row.seq as i64,
                row.members as i64,
                row.open,
                row.messages as i64,
                row.ts,
                row.last_message as i64
            ])?;
        Ok(())
    }

    async fn is_banned(&mut self, chat: i64, user: &str) -> rusqlite::Result<bool> {
        self.0
            .prepare_cached("SELECT 1 FROM bans WHERE chat_id = ?1 AND user = ?2")?
            .query_row(params![chat, user], |_| Ok(()))
            .optional()
            .map(|found| found.is_some())
    }

    async fn set_banned(&mut self, chat: i64, user: &str, banned: bool) -> rusqlite::Result<()> {
        let sql = if banned {
            "INSERT OR IGNORE INTO bans (chat_id, user) VALUES (?1, ?2)"
        } else {
            "DELETE FROM bans WHERE chat_id = ?1 AND user = ?2"
        };
        self.0.prepare_cached(sql)?.execute(params![chat, user])?;
        Ok(())
    }

    async fn mute(&mut self, chat: i64, user: &str) -> rusqlite::Result<Option<i64>> {
        mute_of(self.0, chat, user)
    }

    async fn set_mute(&mut self, chat: i64, user: &str, until_ms: Option<i64>) -> rusqlite::Result<()> {
        match until_ms {
            Some(until) => self
                .0
                .prepare_cached("INSERT OR REPLACE INTO mutes (chat_id, user, until_ms) VALUES (?1, ?2, ?3)")?
                .execute(params![chat, user, until])?,
            None => self
                .0
                .prepare_cached("DELETE FROM mutes WHERE chat_id = ?1 AND user = ?2")?
                .execute(params![chat, user])?,
        };
        Ok(())
    }

    async fn own_messages(&mut self, chat: i64, user: &str) -> rusqlite::Result<u64> {
        self.0
            .prepare_cached(
                "SELECT user_ord FROM events WHERE chat_id = ?1 AND user = ?2 AND ord IS NOT NULL
                 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![chat, user], |r| r.get::<_, i64>(0))
            .optional()
            .map(|n| n.unwrap_or(0) as u64)
    }

    async fn load_message(&mut self, chat: i64, seq: u64) -> rusqlite::Result<Option<MessageRow>> {
        self.0
            .prepare_cached("SELECT user, deleted FROM events WHERE chat_id = ?1 AND seq = ?2 AND type = 'message'")?
            .query_row(params![chat, sql_seq(seq)], |r| Ok(MessageRow { user: r.get(0)?, deleted: r.get(1)? }))
            .optional()
    }

    async fn edit_message(&mut self, chat: i64, target: u64, body: &RawValue, edit: u64) -> rusqlite::Result<()> {
        self.0
            .prepare_cached("UPDATE events SET body = ?3, edited = ?4 WHERE chat_id = ?1 AND seq = ?2")?
            .execute(params![chat, sql_seq(target), body.get(), sql_seq(edit)])?;
        Ok(())
    }

    fn keeps_webhook_positions(&self) -> bool {
        self.1
    }

    async fn mark_undelivered(&mut self, marks: &[Stored]) -> rusqlite::Result<()> {
        let mut stmt = self.0.prepare_cached(UPSERT_POSITION)?;
        for m in marks {
            stmt.execute(params![m.chat, m.before as i64, m.head as i64, m.ts])?;
        }
        Ok(())
    }

    async fn erase_message(&mut self, chat: i64, target: u64) -> rusqlite::Result<()> {
        self.0
            .prepare_cached("UPDATE events SET body = 'null', deleted = 1 WHERE chat_id = ?1 AND seq = ?2")?
            .execute(params![chat, sql_seq(target)])?;
        let erased_edit = apply::edit_body(target, &RawValue::from_string("null".into()).expect("null is JSON"));
        self.0
            .prepare_cached("UPDATE events SET body = ?3 WHERE chat_id = ?1 AND target = ?2 AND type = 'edit'")?
            .execute(params![chat, sql_seq(target), erased_edit.get()])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A file written by a herald of schema 1 (the v1 schema as it was, with
    /// its rows): the store opens it, migrates it, and counts as if it had
    /// always kept the counts.
    #[tokio::test]
    async fn a_schema_1_file_is_migrated_with_its_counts() {
        let dir = tempfile::tempdir().unwrap();
        {
            let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
            conn.execute_batch(SCHEMA).unwrap();
            conn.execute_batch(
                r#"INSERT INTO chats VALUES (1, 'w', 'g', 1, 6, 2, 1000);
                   INSERT INTO members VALUES (1, 'alice', 3, 1000), (1, 'bob', 0, 1001);
                   INSERT INTO events VALUES
                     (1, 1, 'join', 'alice', 1000, '{}', NULL),
                     (1, 2, 'join', 'bob', 1001, '{}', NULL),
                     (1, 3, 'message', 'bob', 1002, '{"t":1}', 'c1'),
                     (1, 4, 'message', 'alice', 1003, '{"t":2}', NULL),
                     (1, 5, 'message', 'bob', 1004, '{"t":3}', NULL),
                     (1, 6, 'reaction', 'alice', 1005, '{"target":5,"emoji":"+1","on":true}', NULL);
                   PRAGMA user_version = 1;"#,
            )
            .unwrap();
        }
        let store = SqliteStore::open(dir.path()).unwrap();
        let key = ChatKey::new("w", "g");
        let alice = store.inbox_entry(&key, "alice").await.unwrap().unwrap();
        assert_eq!((alice.seq, alice.ts, alice.read, alice.unread), (6, 1005, 3, 1), "bob's 5 only: {alice:?}");
        assert_eq!(alice.last.as_ref().map(|e| e.seq), Some(5));
        let bob = store.inbox_entry(&key, "bob").await.unwrap().unwrap();
        assert_eq!(bob.unread, 1, "alice's 4 only");
        // New messages continue the migrated counts.
        let sent = store
            .write(Write::Append {
                key: key.clone(),
                user: Some("bob".into()),
                system: false,
                body: RawValue::from_string("1".into()).unwrap(),
                client_id: Some("c1".into()),
                member_only: true,
            })
            .await
            .unwrap();
        assert_eq!(sent.seq, 3, "the migrated client_id still answers its first seq");
        store
            .write(Write::Append {
                key: key.clone(),
                user: Some("bob".into()),
                system: false,
                body: RawValue::from_string("2".into()).unwrap(),
                client_id: None,
                member_only: true,
            })
            .await
            .unwrap();
        assert_eq!(store.inbox_entry(&key, "alice").await.unwrap().unwrap().unread, 2);
        store.close().await;
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap();
        assert_eq!(version, SCHEMA_VERSION);
    }

    #[tokio::test]
    async fn member_tells_members_mutes_and_missing_chats_apart() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let key = ChatKey::new("w", "g");
        assert!(matches!(store.member(&key, "alice").await, Err(StoreError::NotFound(_))));
        store
            .write(Write::Join { key: key.clone(), user: "alice".into(), actor: super::super::Actor::Client })
            .await
            .unwrap();
        assert_eq!(store.member(&key, "alice").await.unwrap(), Some(Member { read: 0, muted_until_ms: None }));
        assert_eq!(store.member(&key, "bob").await.unwrap(), None);
        let mute = |muted, until_ms| Write::Mute { key: key.clone(), user: "alice".into(), muted, until_ms };
        store.write(mute(true, None)).await.unwrap();
        assert_eq!(store.member(&key, "alice").await.unwrap().unwrap().muted_until_ms, Some(i64::MAX));
        let until = apply::now_ms() + 60_000;
        store.write(mute(true, Some(until))).await.unwrap();
        assert_eq!(store.member(&key, "alice").await.unwrap().unwrap().muted_until_ms, Some(until));
        store.write(mute(true, Some(1))).await.unwrap();
        assert_eq!(store.member(&key, "alice").await.unwrap().unwrap().muted_until_ms, None, "a mute that ended");
        store.write(mute(false, None)).await.unwrap();
        assert_eq!(store.member(&key, "alice").await.unwrap().unwrap().muted_until_ms, None);
    }
}
