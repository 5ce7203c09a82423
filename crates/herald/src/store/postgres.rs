//! One PostgreSQL shard: a database holding whole chats. Writes go through
//! one batching writer task per node and shard (group commit, the rules of
//! [`super::apply`]); chat rows are locked with `SELECT ... FOR UPDATE`
//! while a batch runs, so several nodes appending to one chat serialize on
//! that row and seq stays gap-free. Reads use a small pool. Inside a batch,
//! reads are made ahead and inserts sent in bulk (see [`PgTx`]).
//!
//! On its first connection a node applies the schema and confirms the
//! shard's identity (`shard_identity`); later connections must reach the
//! same database.
//!
//! Not here: routing between shards, bulkheads and breakers (`sharded`);
//! parsing `--store` entries (`shard_spec`); the TLS client (`pg_tls`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{
    Hook, HookError, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, Transaction,
};
use futures_util::FutureExt;
use herald_protocol::{Event, EventType};
use serde_json::value::RawValue;
use tokio::sync::{OnceCell, mpsc, oneshot};
use tokio_postgres::NoTls;

use super::apply::{self, ChatRow, Reply, Tx};
use super::pg_tls;
use super::shard_identity::{self, Claims, IdentityError};
use super::shard_spec::{ShardName, ShardSpec, TlsMode, chain};
use super::{Alive, BoxFuture, Fetched, Store, StoreError, Write, Written, sql_seq};
use crate::model::{ChatInfo, ChatKey};

/// The schema, applied on start when `herald_schema` lacks its version.
/// Version 2 added `herald_shard`: a shard from version 1 gets it on its
/// first start under version 2, recording the name that node gives it (see
/// [`shard_identity::check`]).
const SCHEMA: &str = include_str!("postgres_schema.sql");
const SCHEMA_VERSION: i32 = 2;
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
    shard: Arc<Checked>,
    /// False once the writer task has ended: the shard is then not ready.
    writer_alive: Arc<std::sync::atomic::AtomicBool>,
    jobs: mpsc::Sender<(Write, Reply)>,
    pool: Pool,
}

/// Who a shard is, shared by its reads and its writer, and whether this
/// process has applied the schema and confirmed the shard's identity.
struct Checked {
    name: ShardName,
    /// The URL without its password, for operators' messages.
    shown: String,
    claims: Claims,
    done: OnceCell<()>,
    /// The shard id recorded in the shard, once confirmed: every later
    /// connection must reach the same database (a host name moved to another
    /// database under a running node is refused, not written to).
    id: std::sync::OnceLock<String>,
}

/// Why a shard failed its check at start.
#[derive(Debug, thiserror::Error)]
pub enum ShardCheckError {
    /// It did not answer (down, unreachable, too slow): the node starts
    /// anyway and checks it when it first answers.
    #[error("{0}")]
    Unreachable(String),
    /// It answered but must not be used as given (another recorded name,
    /// a database given twice, a certificate not trusted): the node must not start.
    #[error("{0}")]
    Refused(String),
}

impl PgShard {
    /// Opens the shard `spec` (lazily: a shard that is down now is retried on
    /// use) and starts its writer. `claims` is shared by a node's shards.
    pub fn open(spec: &ShardSpec, claims: &Claims) -> anyhow::Result<PgShard> {
        let mut pg = spec.pg.clone();
        pg.connect_timeout(CONNECT_TIMEOUT);
        let recycling = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let mgr = match spec.tls {
            TlsMode::Off => Manager::from_config(pg, NoTls, recycling),
            TlsMode::Prefer | TlsMode::Require => Manager::from_config(pg, pg_tls::client(&spec.roots)?, recycling),
        };
        let shard = Arc::new(Checked {
            name: spec.name.clone(),
            shown: spec.shown.clone(),
            claims: claims.clone(),
            done: OnceCell::new(),
            id: std::sync::OnceLock::new(),
        });
        let pool = Pool::builder(mgr)
            .max_size(READ_POOL + 1)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(CONNECT_TIMEOUT))
            .wait_timeout(Some(Duration::from_secs(2)))
            .post_create(same_shard(shard.clone()))
            .build()?;
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let writer_alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let writer = Writer { shard: shard.clone(), pool: pool.clone(), conn: None };
        let alive = Alive(writer_alive.clone(), "postgres");
        tokio::spawn(async move {
            let _alive = alive;
            writer.run(rx).await;
        });
        Ok(PgShard { shard, writer_alive, jobs: tx, pool })
    }

    /// The shard's name: the one given with `NAME=`, else `host:port/database`.
    pub fn name(&self) -> &ShardName {
        &self.shard.name
    }

    /// Connects once, applies the schema and confirms the shard's identity
    /// (and on the way its TLS certificate): what a node does at start.
    pub async fn check(&self) -> Result<(), ShardCheckError> {
        let shown = &self.shard.shown;
        let conn = match self.pool.get().await {
            Ok(conn) => conn,
            Err(PoolError::Backend(e)) if pg_tls::is_tls_failure(&e) => {
                return Err(ShardCheckError::Refused(format!("{shown}: {}", chain(&e))));
            }
            Err(e) => return Err(ShardCheckError::Unreachable(format!("{shown}: {}", chain(&e)))),
        };
        match ensure_schema(&self.shard, &conn).await {
            Ok(()) => Ok(()),
            Err(IdentityError::Refused(why)) => Err(ShardCheckError::Refused(why)),
            Err(IdentityError::Pg(e)) => Err(ShardCheckError::Unreachable(format!("{shown}: {}", chain(&e)))),
        }
    }

    async fn conn(&self) -> Result<Object, StoreError> {
        let conn = self.pool.get().await.map_err(|e| pg_unavailable(&self.shard.name, &e))?;
        ensure_schema(&self.shard, &conn).await.map_err(|e| self.shard.not_confirmed(&e))?;
        Ok(conn)
    }
}

impl Checked {
    fn not_confirmed(&self, e: &IdentityError) -> StoreError {
        match e {
            IdentityError::Pg(e) => pg_unavailable(&self.name, e),
            IdentityError::Refused(why) => {
                tracing::error!(shard = %self.name, "{why}");
                metrics::counter!("herald_store_errors_total", "kind" => "shard_identity").increment(1);
                StoreError::Unavailable(self.name.public("unavailable"))
            }
        }
    }
}

/// Checks each new connection of a confirmed shard against the id it recorded.
fn same_shard(shard: Arc<Checked>) -> Hook {
    Hook::async_fn(move |client, _| {
        let shard = shard.clone();
        Box::pin(async move {
            let Some(id) = shard.id.get() else { return Ok(()) };
            let row = client.query_one("SELECT name, id FROM herald_shard", &[]).await.map_err(HookError::Backend)?;
            let (now_name, now_id): (String, String) = (row.get(0), row.get(1));
            if &now_id == id {
                return Ok(());
            }
            let why = format!(
                "{} now reaches another database (shard {now_name:?}, id {now_id}) than the one checked at start \
                 (id {id}): its connections are refused until the node is restarted",
                shard.shown
            );
            tracing::error!(shard = %shard.name, "{why}");
            metrics::counter!("herald_store_errors_total", "kind" => "shard_identity").increment(1);
            Err(HookError::message(why))
        })
    })
}

/// Logs why a shard failed (host and cause: logs are for operators) and
/// answers what a client may read: no host, no port, no URL.
fn shard_failed(shard: &ShardName, why: &str) -> StoreError {
    tracing::warn!(shard = %shard, error = why, "postgres shard failed");
    metrics::counter!("herald_store_errors_total", "kind" => "postgres").increment(1);
    StoreError::Unavailable(shard.public("unavailable"))
}

fn pg_unavailable(shard: &ShardName, e: &dyn std::error::Error) -> StoreError {
    shard_failed(shard, &chain(e))
}

/// Applies the schema and confirms the shard's identity, once per process
/// and shard, under an advisory lock so that nodes starting together do not race.
async fn ensure_schema(shard: &Checked, conn: &Object) -> Result<(), IdentityError> {
    shard
        .done
        .get_or_try_init(|| async {
            conn.batch_execute("SELECT pg_advisory_lock(7424173)").await?;
            let applied = async {
                let have: Option<i32> = match conn.query_opt("SELECT max(version) FROM herald_schema", &[]).await {
                    Ok(row) => row.and_then(|r| r.get(0)),
                    Err(_) => None, // no table yet
                };
                if have.is_none_or(|v| v < SCHEMA_VERSION) {
                    conn.batch_execute(SCHEMA).await?;
                    tracing::info!(shard = %shard.name, version = SCHEMA_VERSION, "postgres schema applied");
                }
                let id = shard_identity::check(conn, &shard.name, &shard.shown, &shard.claims).await?;
                let _ = shard.id.set(id);
                Ok(())
            }
            .await;
            let _ = conn.batch_execute("SELECT pg_advisory_unlock(7424173)").await;
            applied
        })
        .await
        .map(|_| ())
}

impl Store for PgShard {
    fn write(&self, write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            if self.jobs.try_send((write, tx)).is_err() {
                return Err(StoreError::Unavailable(self.shard.name.public("overloaded")));
            }
            rx.await.unwrap_or_else(|_| Err(StoreError::Unavailable("the shard writer stopped".into())))
        })
    }

    fn chat(&self, key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
        let key = key.clone();
        Box::pin(async move {
            let conn = self.conn().await?;
            let row = select_chat(&conn, &key, false).await.map_err(|e| pg_unavailable(&self.shard.name, &e))?;
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
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
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
            let rows = conn.query(&stmt, &[&row.id, &sql_seq(after), &(limit as i64)]).await.map_err(fail)?;
            let events = rows.iter().map(event_from_row).collect::<Result<Vec<_>, _>>()?;
            metrics::histogram!("herald_store_read_seconds").record(started.elapsed().as_secs_f64());
            // The events were read after the row: the log may be ahead of it, never behind.
            let mut info = row.info();
            let last = events.last().map(|e| e.seq);
            info.seq = info.seq.max(last.unwrap_or(0));
            Ok(Fetched { more: last.unwrap_or(after) < info.seq, events, info })
        })
    }

    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let stmt = conn
                .prepare_cached(
                    "SELECT k.i, c.seq FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(ws, chat, i)
                       JOIN chats c ON c.ws = k.ws AND c.chat = k.chat",
                )
                .await
                .map_err(fail)?;
            let ws: Vec<&str> = keys.iter().map(|k| &*k.ws).collect();
            let chats: Vec<&str> = keys.iter().map(|k| &*k.chat).collect();
            let mut heads = vec![None; keys.len()];
            for row in conn.query(&stmt, &[&ws, &chats]).await.map_err(fail)? {
                let i = row.get::<_, i64>(0) as usize;
                if let Some(slot) = i.checked_sub(1).and_then(|i| heads.get_mut(i)) {
                    *slot = Some(row.get::<_, i64>(1) as u64);
                }
            }
            Ok(heads)
        })
    }

    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            if !self.writer_alive.load(std::sync::atomic::Ordering::SeqCst) {
                tracing::error!(shard = %self.shard.name, "the shard's writer stopped");
                return Err(StoreError::Unavailable(self.shard.name.public("has no writer")));
            }
            let conn = self.conn().await?;
            conn.simple_query("SELECT 1").await.map_err(|e| pg_unavailable(&self.shard.name, &e))?;
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
    shard: Arc<Checked>,
    pool: Pool,
    /// The writer's connection, kept across batches; dropped after a failure.
    conn: Option<Object>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<(Write, Reply)>) {
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
                    // The connection may be broken or mid-transaction: start over with a fresh one.
                    self.conn = None;
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
        let outcomes = apply::apply(&mut PgTx::new(&tx), writes).await.map_err(|e| chain(&e))?;
        tx.commit().await.map_err(|e| chain(&e))?;
        Ok(outcomes)
    }
}

/// One PostgreSQL write transaction. A round trip to the server costs more
/// than the work of most writes, so a batch's reads are made ahead in two
/// queries ([`Tx::prefetch`]: the members and the `client_id`s its writes
/// ask about) and its new members and events go out as two bulk inserts at
/// the end ([`Tx::finish`]): a batch of any number of sends into one chat
/// costs about eight round trips, not three per send. Answers the batch
/// changes (a member added, a position moved) are kept up to date here.
struct PgTx<'a, 'b> {
    tx: &'a Transaction<'b>,
    /// Read positions of the (chat, user) pairs read ahead; `None`: not a member.
    members: HashMap<(i64, String), Option<u64>>,
    /// `client_id`s read ahead, and the seqs of those stored before this batch.
    client_ids: HashMap<(i64, String, String), Option<u64>>,
    new_members: Vec<(i64, String, i64)>,
    new_events: Vec<PendingEvent>,
}

/// An event of this batch, not sent yet.
struct PendingEvent {
    chat: i64,
    seq: i64,
    kind: &'static str,
    user: Option<String>,
    ts: i64,
    body: String,
    client_id: Option<String>,
}

impl<'a, 'b> PgTx<'a, 'b> {
    fn new(tx: &'a Transaction<'b>) -> Self {
        PgTx {
            tx,
            members: HashMap::new(),
            client_ids: HashMap::new(),
            new_members: Vec::new(),
            new_events: Vec::new(),
        }
    }

    async fn exec(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let stmt = self.tx.prepare_cached(sql).await?;
        self.tx.execute(&stmt, params).await
    }

    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let stmt = self.tx.prepare_cached(sql).await?;
        self.tx.query(&stmt, params).await
    }

    /// Sends the members added so far, in one statement.
    async fn flush_members(&mut self) -> Result<(), tokio_postgres::Error> {
        if self.new_members.is_empty() {
            return Ok(());
        }
        let (mut chats, mut users, mut joined) = (Vec::new(), Vec::new(), Vec::new());
        for (chat, user, ms) in self.new_members.drain(..) {
            chats.push(chat);
            users.push(user);
            joined.push(ms);
        }
        self.exec(
            r#"INSERT INTO members (chat_id, "user", read_seq, joined_ms)
               SELECT c, u, 0, j FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS t(c, u, j)"#,
            &[&chats, &users, &joined],
        )
        .await
        .map(|_| ())
    }

    /// Sends the events appended so far, in one statement.
    async fn flush_events(&mut self) -> Result<(), tokio_postgres::Error> {
        if self.new_events.is_empty() {
            return Ok(());
        }
        let n = self.new_events.len();
        let (mut chats, mut seqs, mut kinds, mut users) =
            (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut ts, mut bodies, mut cids) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        for e in self.new_events.drain(..) {
            chats.push(e.chat);
            seqs.push(e.seq);
            kinds.push(e.kind);
            users.push(e.user);
            ts.push(e.ts);
            bodies.push(e.body);
            cids.push(e.client_id);
        }
        self.exec(
            r#"INSERT INTO events (chat_id, seq, type, "user", ts, body, client_id)
               SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::text[])"#,
            &[&chats, &seqs, &kinds, &users, &ts, &bodies, &cids],
        )
        .await
        .map(|_| ())
    }
}

impl Tx for PgTx<'_, '_> {
    type Error = tokio_postgres::Error;

    async fn load_chat(&mut self, key: &ChatKey) -> Result<Option<ChatRow>, Self::Error> {
        let stmt = self
            .tx
            .prepare_cached("SELECT id, seq, members, open FROM chats WHERE ws = $1 AND chat = $2 FOR UPDATE")
            .await?;
        let row = self.tx.query_opt(&stmt, &[&&*key.ws, &&*key.chat]).await?;
        Ok(row.map(|r| ChatRow {
            id: r.get(0),
            seq: r.get::<_, i64>(1) as u64,
            members: r.get::<_, i64>(2) as u64,
            open: r.get(3),
        }))
    }

    async fn create_chat(&mut self, key: &ChatKey, open: bool, now_ms: i64) -> Result<ChatRow, Self::Error> {
        let stmt = self
            .tx
            .prepare_cached(
                "INSERT INTO chats (ws, chat, open, seq, members, created_ms) VALUES ($1, $2, $3, 0, 0, $4)
                 ON CONFLICT (ws, chat) DO NOTHING RETURNING id",
            )
            .await?;
        if let Some(r) = self.tx.query_opt(&stmt, &[&&*key.ws, &&*key.chat, &open, &now_ms]).await? {
            return Ok(ChatRow { id: r.get(0), seq: 0, members: 0, open });
        }
        // Another node created it a moment ago: take its row (and its lock).
        Ok(self.load_chat(key).await?.expect("the conflicting row exists"))
    }

    async fn read_position(&mut self, chat: i64, user: &str) -> Result<Option<u64>, Self::Error> {
        if let Some(known) = self.members.get(&(chat, user.to_owned())) {
            return Ok(*known);
        }
        let rows =
            self.query(r#"SELECT read_seq FROM members WHERE chat_id = $1 AND "user" = $2"#, &[&chat, &user]).await?;
        let known = rows.first().map(|r| r.get::<_, i64>(0) as u64);
        self.members.insert((chat, user.to_owned()), known);
        Ok(known)
    }

    async fn add_member(&mut self, chat: i64, user: &str, now_ms: i64) -> Result<(), Self::Error> {
        self.new_members.push((chat, user.to_owned(), now_ms));
        self.members.insert((chat, user.to_owned()), Some(0));
        Ok(())
    }

    async fn remove_member(&mut self, chat: i64, user: &str) -> Result<bool, Self::Error> {
        if let Some(None) = self.members.get(&(chat, user.to_owned())) {
            return Ok(false);
        }
        self.flush_members().await?;
        let removed =
            self.exec(r#"DELETE FROM members WHERE chat_id = $1 AND "user" = $2"#, &[&chat, &user]).await? > 0;
        self.members.insert((chat, user.to_owned()), None);
        Ok(removed)
    }

    async fn set_read_position(&mut self, chat: i64, user: &str, seq: u64) -> Result<(), Self::Error> {
        self.flush_members().await?;
        self.exec(
            r#"UPDATE members SET read_seq = $3 WHERE chat_id = $1 AND "user" = $2"#,
            &[&chat, &user, &(seq as i64)],
        )
        .await?;
        self.members.insert((chat, user.to_owned()), Some(seq));
        Ok(())
    }

    async fn find_client_id(
        &mut self,
        chat: i64,
        user: Option<&str>,
        client_id: &str,
    ) -> Result<Option<u64>, Self::Error> {
        // Sent earlier in this batch?
        if let Some(e) = self
            .new_events
            .iter()
            .find(|e| e.chat == chat && e.user.as_deref() == user && e.client_id.as_deref() == Some(client_id))
        {
            return Ok(Some(e.seq as u64));
        }
        if let Some(u) = user
            && let Some(known) = self.client_ids.get(&(chat, u.to_owned(), client_id.to_owned()))
        {
            return Ok(*known);
        }
        let rows = self
            .query(
                r#"SELECT seq FROM events WHERE chat_id = $1 AND "user" IS NOT DISTINCT FROM $2 AND client_id = $3"#,
                &[&chat, &user, &client_id],
            )
            .await?;
        Ok(rows.first().map(|r| r.get::<_, i64>(0) as u64))
    }

    async fn insert_event(&mut self, chat: i64, e: &Event) -> Result<(), Self::Error> {
        self.new_events.push(PendingEvent {
            chat,
            seq: e.seq as i64,
            kind: e.kind.as_str(),
            user: e.user.clone(),
            ts: e.ts,
            body: e.body.get().to_owned(),
            client_id: e.client_id.clone(),
        });
        Ok(())
    }

    async fn save_chat(&mut self, row: &ChatRow) -> Result<(), Self::Error> {
        self.exec(
            "UPDATE chats SET seq = $2, members = $3, open = $4 WHERE id = $1",
            &[&row.id, &(row.seq as i64), &(row.members as i64), &row.open],
        )
        .await
        .map(|_| ())
    }

    async fn prefetch(&mut self, writes: &[&Write], rows: &HashMap<ChatKey, ChatRow>) -> Result<(), Self::Error> {
        let (mut m_chats, mut m_users) = (Vec::new(), Vec::new());
        let (mut c_chats, mut c_users, mut c_ids) = (Vec::new(), Vec::new(), Vec::new());
        for w in writes {
            let Some(row) = rows.get(w.key()) else { continue };
            let user = match w {
                Write::Join { user, .. }
                | Write::Leave { user, .. }
                | Write::React { user, .. }
                | Write::Read { user, .. } => Some(user),
                Write::Append { user: Some(user), client_id, .. } => {
                    if let Some(cid) = client_id
                        && self.client_ids.insert((row.id, user.to_string(), cid.clone()), None).is_none()
                    {
                        c_chats.push(row.id);
                        c_users.push(user.to_string());
                        c_ids.push(cid.clone());
                    }
                    Some(user)
                }
                Write::Append { user: None, .. } | Write::PutChat { .. } => None,
            };
            if let Some(user) = user
                && self.members.insert((row.id, user.to_string()), None).is_none()
            {
                m_chats.push(row.id);
                m_users.push(user.to_string());
            }
        }
        if !m_chats.is_empty() {
            let found = self
                .query(
                    r#"SELECT m.chat_id, m."user", m.read_seq FROM members m
                       JOIN unnest($1::bigint[], $2::text[]) AS t(c, u) ON m.chat_id = t.c AND m."user" = t.u"#,
                    &[&m_chats, &m_users],
                )
                .await?;
            for r in found {
                self.members.insert((r.get(0), r.get(1)), Some(r.get::<_, i64>(2) as u64));
            }
        }
        if !c_chats.is_empty() {
            let found = self
                .query(
                    r#"SELECT e.chat_id, e."user", e.client_id, e.seq FROM events e
                       JOIN unnest($1::bigint[], $2::text[], $3::text[]) AS t(c, u, k)
                         ON e.chat_id = t.c AND e."user" = t.u AND e.client_id = t.k"#,
                    &[&c_chats, &c_users, &c_ids],
                )
                .await?;
            for r in found {
                self.client_ids.insert((r.get(0), r.get(1), r.get(2)), Some(r.get::<_, i64>(3) as u64));
            }
        }
        Ok(())
    }

    async fn finish(&mut self) -> Result<(), Self::Error> {
        self.flush_members().await?;
        self.flush_events().await
    }
}
