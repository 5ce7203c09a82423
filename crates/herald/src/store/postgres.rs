//! One PostgreSQL shard: a database holding whole chats. Writes go through
//! one batching writer task per node and shard (group commit, the rules of
//! [`super::apply`]); chat rows are locked with `SELECT ... FOR UPDATE`
//! while a batch runs, so several nodes appending to one chat serialize on
//! that row and seq stays gap-free. Reads use a small pool.
//!
//! Not here: routing between shards, bulkheads and breakers (`sharded`).

use std::time::{Duration, Instant};

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime, Transaction};
use herald_protocol::{Event, EventType};
use serde_json::value::RawValue;
use tokio::sync::{OnceCell, mpsc, oneshot};
use tokio_postgres::NoTls;

use super::apply::{self, ChatRow, Reply, Tx};
use super::{BoxFuture, Fetched, Store, StoreError, Write, Written};
use crate::model::{ChatInfo, ChatKey};

/// The schema, applied on start when `herald_schema` lacks its version.
const SCHEMA: &str = include_str!("postgres_schema.sql");
const SCHEMA_VERSION: i32 = 1;
/// Most writes per transaction: bounds a batch's latency and lock time.
const MAX_BATCH: usize = 512;
/// Writes waiting for this shard's writer before new ones are refused.
const WRITE_QUEUE: usize = 16 * 1024;
/// Pooled connections for reads.
const READ_POOL: usize = 8;
/// A connection attempt to a shard that is down fails within this.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// A batch that takes longer is abandoned (its connection dropped, which rolls it back).
const BATCH_TIMEOUT: Duration = Duration::from_secs(5);

/// A PostgreSQL shard.
pub struct PgShard {
    name: String,
    jobs: mpsc::Sender<(Write, Reply)>,
    pool: Pool,
    schema: std::sync::Arc<OnceCell<()>>,
}

impl PgShard {
    /// Connects to `url` (lazily: a shard that is down now is retried on use) and starts its writer.
    pub fn open(url: &str) -> anyhow::Result<PgShard> {
        let mut pg: tokio_postgres::Config = url.parse()?;
        pg.connect_timeout(CONNECT_TIMEOUT);
        let name = shard_name(&pg);
        let mgr = Manager::from_config(pg, NoTls, ManagerConfig { recycling_method: RecyclingMethod::Fast });
        let pool = Pool::builder(mgr)
            .max_size(READ_POOL + 1)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(CONNECT_TIMEOUT))
            .wait_timeout(Some(Duration::from_secs(2)))
            .build()?;
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let schema = std::sync::Arc::new(OnceCell::new());
        tokio::spawn(Writer { name: name.clone(), pool: pool.clone(), conn: None, schema: schema.clone() }.run(rx));
        Ok(PgShard { name, jobs: tx, pool, schema })
    }

    /// The shard's name: `host:port/database`, stable across password changes.
    pub fn name(&self) -> &str {
        &self.name
    }

    async fn conn(&self) -> Result<Object, StoreError> {
        let conn = self.pool.get().await.map_err(|e| pg_unavailable(&self.name, &e))?;
        ensure_schema(&self.schema, &conn, &self.name).await?;
        Ok(conn)
    }
}

fn shard_name(pg: &tokio_postgres::Config) -> String {
    let host = match pg.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = pg.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}/{}", pg.get_dbname().unwrap_or("postgres"))
}

fn pg_unavailable(shard: &str, e: &dyn std::fmt::Display) -> StoreError {
    tracing::warn!(shard, error = %e, "postgres shard failed");
    metrics::counter!("herald_store_errors_total", "kind" => "postgres").increment(1);
    StoreError::Unavailable(format!("storage shard {shard} is unavailable"))
}

/// Applies the schema once per process and shard, under an advisory lock so
/// that nodes starting together do not race.
async fn ensure_schema(cell: &OnceCell<()>, conn: &Object, shard: &str) -> Result<(), StoreError> {
    cell.get_or_try_init(|| async {
        let fail = |e: tokio_postgres::Error| pg_unavailable(shard, &e);
        conn.batch_execute("SELECT pg_advisory_lock(7424173)").await.map_err(fail)?;
        let applied = async {
            let have: Option<i32> = match conn.query_opt("SELECT max(version) FROM herald_schema", &[]).await {
                Ok(row) => row.and_then(|r| r.get(0)),
                Err(_) => None, // no table yet
            };
            if have.is_none_or(|v| v < SCHEMA_VERSION) {
                conn.batch_execute(SCHEMA).await?;
                tracing::info!(shard, version = SCHEMA_VERSION, "postgres schema applied");
            }
            Ok::<_, tokio_postgres::Error>(())
        }
        .await;
        let _ = conn.batch_execute("SELECT pg_advisory_unlock(7424173)").await;
        applied.map_err(fail)
    })
    .await
    .map(|_| ())
}

impl Store for PgShard {
    fn write(&self, write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            if self.jobs.try_send((write, tx)).is_err() {
                return Err(StoreError::Unavailable(format!("storage shard {} is overloaded", self.name)));
            }
            rx.await.unwrap_or_else(|_| Err(StoreError::Unavailable("the shard writer stopped".into())))
        })
    }

    fn chat(&self, key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
        let key = key.clone();
        Box::pin(async move {
            let conn = self.conn().await?;
            let row = select_chat(&conn, &key, false).await.map_err(|e| pg_unavailable(&self.name, &e))?;
            Ok(row.map(|r| r.info()))
        })
    }

    fn fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        Box::pin(async move {
            let started = Instant::now();
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.name, &e);
            let Some(row) = select_chat(&conn, key, false).await.map_err(fail)? else {
                return Err(StoreError::NotFound(format!("no chat {}", key.chat)));
            };
            if let Some(user) = member
                && read_position(&conn, row.id, user).await.map_err(fail)?.is_none()
            {
                return Err(StoreError::Forbidden(format!("not a member of {}", key.chat)));
            }
            let stmt = conn
                .prepare_cached(
                    r#"SELECT seq, type, "user", ts, body, client_id FROM events
                       WHERE chat_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"#,
                )
                .await
                .map_err(fail)?;
            let rows = conn.query(&stmt, &[&row.id, &(after as i64), &(limit as i64)]).await.map_err(fail)?;
            let events = rows.iter().map(event_from_row).collect::<Result<Vec<_>, _>>()?;
            metrics::histogram!("herald_store_read_seconds").record(started.elapsed().as_secs_f64());
            // The events were read after the row: the log may be ahead of it, never behind.
            let last = events.last().map_or(after, |e| e.seq);
            let mut info = row.info();
            info.seq = info.seq.max(last);
            Ok(Fetched { more: last < info.seq, events, info })
        })
    }

    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            conn.simple_query("SELECT 1").await.map_err(|e| pg_unavailable(&self.name, &e))?;
            Ok(())
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // Queued writes are finished by the writer; wait until its queue is empty.
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.jobs.capacity() < self.jobs.max_capacity() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    }
}

fn event_from_row(r: &tokio_postgres::Row) -> Result<Event, StoreError> {
    let kind: String = r.get(1);
    let body: String = r.get(4);
    Ok(Event {
        seq: r.get::<_, i64>(0) as u64,
        kind: EventType::parse(&kind).unwrap_or(EventType::System),
        user: r.get(2),
        ts: r.get(3),
        body: RawValue::from_string(body).map_err(|e| StoreError::Unavailable(format!("corrupt event body: {e}")))?,
        client_id: r.get(5),
    })
}

async fn select_chat(
    conn: &impl std::ops::Deref<Target = deadpool_postgres::ClientWrapper>,
    key: &ChatKey,
    lock: bool,
) -> Result<Option<ChatRow>, tokio_postgres::Error> {
    let sql = if lock {
        "SELECT id, seq, members, open FROM chats WHERE ws = $1 AND chat = $2 FOR UPDATE"
    } else {
        "SELECT id, seq, members, open FROM chats WHERE ws = $1 AND chat = $2"
    };
    let stmt = conn.prepare_cached(sql).await?;
    let row = conn.query_opt(&stmt, &[&&*key.ws, &&*key.chat]).await?;
    Ok(row.map(|r| ChatRow {
        id: r.get(0),
        seq: r.get::<_, i64>(1) as u64,
        members: r.get::<_, i64>(2) as u64,
        open: r.get(3),
    }))
}

async fn read_position(
    conn: &impl std::ops::Deref<Target = deadpool_postgres::ClientWrapper>,
    chat: i64,
    user: &str,
) -> Result<Option<u64>, tokio_postgres::Error> {
    let stmt = conn.prepare_cached(r#"SELECT read_seq FROM members WHERE chat_id = $1 AND "user" = $2"#).await?;
    Ok(conn.query_opt(&stmt, &[&chat, &user]).await?.map(|r| r.get::<_, i64>(0) as u64))
}

/// This node's writer for one shard.
struct Writer {
    name: String,
    pool: Pool,
    /// The writer's connection, kept across batches; dropped after a failure.
    conn: Option<Object>,
    schema: std::sync::Arc<OnceCell<()>>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<(Write, Reply)>) {
        let mut batch = Vec::with_capacity(64);
        while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
            let started = Instant::now();
            let writes: Vec<&Write> = batch.iter().map(|(w, _)| w).collect();
            let result = tokio::time::timeout(BATCH_TIMEOUT, self.commit(&writes)).await;
            let result = match result {
                Ok(r) => r,
                Err(_) => Err(format!("batch of {} writes timed out", writes.len())),
            };
            match result {
                Ok(outcomes) => apply::answer_committed(&mut batch, outcomes, started),
                Err(e) => {
                    // The connection may be broken or mid-transaction: start over with a fresh one.
                    self.conn = None;
                    let err = pg_unavailable(&self.name, &e);
                    for (_, reply) in batch.drain(..) {
                        let _ = reply.send(Err(err.clone()));
                    }
                }
            }
        }
    }

    async fn commit(&mut self, writes: &[&Write]) -> Result<Vec<apply::Outcome>, String> {
        if self.conn.is_none() {
            let conn = self.pool.get().await.map_err(|e| e.to_string())?;
            ensure_schema(&self.schema, &conn, &self.name).await.map_err(|e| e.to_string())?;
            self.conn = Some(conn);
        }
        let conn = self.conn.as_mut().expect("connected above");
        let tx = conn.transaction().await.map_err(|e| e.to_string())?;
        let outcomes = apply::apply(&mut PgTx(&tx), writes).await.map_err(|e| e.to_string())?;
        tx.commit().await.map_err(|e| e.to_string())?;
        Ok(outcomes)
    }
}

/// One PostgreSQL write transaction.
struct PgTx<'a, 'b>(&'a Transaction<'b>);

impl PgTx<'_, '_> {
    async fn exec(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let stmt = self.0.prepare_cached(sql).await?;
        self.0.execute(&stmt, params).await
    }
}

impl Tx for PgTx<'_, '_> {
    type Error = tokio_postgres::Error;

    async fn load_chat(&mut self, key: &ChatKey) -> Result<Option<ChatRow>, Self::Error> {
        let stmt = self
            .0
            .prepare_cached("SELECT id, seq, members, open FROM chats WHERE ws = $1 AND chat = $2 FOR UPDATE")
            .await?;
        let row = self.0.query_opt(&stmt, &[&&*key.ws, &&*key.chat]).await?;
        Ok(row.map(|r| ChatRow {
            id: r.get(0),
            seq: r.get::<_, i64>(1) as u64,
            members: r.get::<_, i64>(2) as u64,
            open: r.get(3),
        }))
    }

    async fn create_chat(&mut self, key: &ChatKey, open: bool, now_ms: i64) -> Result<ChatRow, Self::Error> {
        let stmt = self
            .0
            .prepare_cached(
                "INSERT INTO chats (ws, chat, open, seq, members, created_ms) VALUES ($1, $2, $3, 0, 0, $4)
                 ON CONFLICT (ws, chat) DO NOTHING RETURNING id",
            )
            .await?;
        if let Some(r) = self.0.query_opt(&stmt, &[&&*key.ws, &&*key.chat, &open, &now_ms]).await? {
            return Ok(ChatRow { id: r.get(0), seq: 0, members: 0, open });
        }
        // Another node created it a moment ago: take its row (and its lock).
        Ok(self.load_chat(key).await?.expect("the conflicting row exists"))
    }

    async fn read_position(&mut self, chat: i64, user: &str) -> Result<Option<u64>, Self::Error> {
        let stmt = self.0.prepare_cached(r#"SELECT read_seq FROM members WHERE chat_id = $1 AND "user" = $2"#).await?;
        Ok(self.0.query_opt(&stmt, &[&chat, &user]).await?.map(|r| r.get::<_, i64>(0) as u64))
    }

    async fn add_member(&mut self, chat: i64, user: &str, now_ms: i64) -> Result<(), Self::Error> {
        self.exec(
            r#"INSERT INTO members (chat_id, "user", read_seq, joined_ms) VALUES ($1, $2, 0, $3)"#,
            &[&chat, &user, &now_ms],
        )
        .await
        .map(|_| ())
    }

    async fn remove_member(&mut self, chat: i64, user: &str) -> Result<bool, Self::Error> {
        Ok(self.exec(r#"DELETE FROM members WHERE chat_id = $1 AND "user" = $2"#, &[&chat, &user]).await? > 0)
    }

    async fn set_read_position(&mut self, chat: i64, user: &str, seq: u64) -> Result<(), Self::Error> {
        self.exec(
            r#"UPDATE members SET read_seq = $3 WHERE chat_id = $1 AND "user" = $2"#,
            &[&chat, &user, &(seq as i64)],
        )
        .await
        .map(|_| ())
    }

    async fn find_client_id(
        &mut self,
        chat: i64,
        user: Option<&str>,
        client_id: &str,
    ) -> Result<Option<u64>, Self::Error> {
        let stmt = self
            .0
            .prepare_cached(
                r#"SELECT seq FROM events WHERE chat_id = $1 AND "user" IS NOT DISTINCT FROM $2 AND client_id = $3"#,
            )
            .await?;
        Ok(self.0.query_opt(&stmt, &[&chat, &user, &client_id]).await?.map(|r| r.get::<_, i64>(0) as u64))
    }

    async fn insert_event(&mut self, chat: i64, e: &Event) -> Result<(), Self::Error> {
        self.exec(
            r#"INSERT INTO events (chat_id, seq, type, "user", ts, body, client_id) VALUES ($1, $2, $3, $4, $5, $6, $7)"#,
            &[&chat, &(e.seq as i64), &e.kind.as_str(), &e.user, &e.ts, &e.body.get(), &e.client_id],
        )
        .await
        .map(|_| ())
    }

    async fn save_chat(&mut self, row: &ChatRow) -> Result<(), Self::Error> {
        self.exec(
            "UPDATE chats SET seq = $2, members = $3, open = $4 WHERE id = $1",
            &[&row.id, &(row.seq as i64), &(row.members as i64), &row.open],
        )
        .await
        .map(|_| ())
    }
}
