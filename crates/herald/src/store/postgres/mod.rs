//! One PostgreSQL shard: a database holding whole chats. Writes go through
//! one batching writer task per node and shard (group commit, the rules of
//! [`super::apply`]); chat rows are locked with `SELECT ... FOR UPDATE`
//! while a batch runs, so several nodes appending to one chat serialize on
//! that row and seq stays gap-free. Reads use a small pool. Inside a batch,
//! reads are made ahead and inserts sent in bulk (see [`writer`]).
//!
//! On its first connection a node applies the schema and confirms the
//! shard's identity (`shard_identity`); later connections must reach the
//! same database.
//!
//! Not here: routing between shards, bulkheads and breakers (`sharded`);
//! parsing `--store` entries (`shard_spec`); the TLS client (`pg_tls`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{
    Hook, HookError, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime, Transaction,
};
use herald_protocol::{Event, EventType};
use serde_json::value::RawValue;
use tokio::sync::{OnceCell, mpsc, oneshot};
use tokio_postgres::NoTls;

use super::apply::{self, ChatRow, Reply};
use super::pg_tls;
use super::shard_identity::{self, Claims, IdentityError};
use super::shard_spec::{ShardName, ShardSpec, TlsMode, chain};
use super::{
    Alive, BoxFuture, EventLog, Fetched, InboxCursor, Lifecycle, Member, Membership, Moderation, Revocation,
    RevocationList, Revoked, ShardStatus, StoreError, Undelivered, WebhookAck, WebhookPositions, Write, Written,
    sql_seq,
};
use crate::model::{ChatInfo, ChatKey};
use herald_protocol::reply::InboxEntry;

mod writer;
use writer::Writer;

/// The schema, applied on start when `herald_schema` lacks its version.
/// Version 2 added `herald_shard`: a shard from version 1 gets it on its
/// first start under version 2, recording the name that node gives it (see
/// [`shard_identity::check`]).
/// Version 3 added the message lifecycle, mutes, bans and the inbox's counts
/// (protocol v1.1), with the values of rows stored before. Version 4 added
/// the hooks' tables.
const SCHEMA: &str = include_str!("schema.sql");
const SCHEMA_VERSION: i32 = 4;
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
    /// webhook: whether writes keep the webhook's positions (shared with the writer).
    webhook: Arc<std::sync::atomic::AtomicBool>,
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
        let webhook = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writer = Writer { shard: shard.clone(), pool: pool.clone(), conn: None, webhook: webhook.clone() };
        let alive = Alive(writer_alive.clone(), "postgres");
        tokio::spawn(async move {
            let _alive = alive;
            writer.run(rx).await;
        });
        Ok(PgShard { shard, writer_alive, jobs: tx, pool, webhook })
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

impl EventLog for PgShard {
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
                    r#"SELECT seq, type, "user", ts, body, client_id, edited, deleted FROM events
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

    fn client_id_seq<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
        client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let stmt = conn
                .prepare_cached(
                    r#"SELECT e.seq FROM chats c JOIN events e ON e.chat_id = c.id
                        WHERE c.ws = $1 AND c.chat = $2 AND e."user" = $3 AND e.client_id = $4"#,
                )
                .await
                .map_err(fail)?;
            let row = conn.query_opt(&stmt, &[&&*key.ws, &&*key.chat, &user, &client_id]).await.map_err(fail)?;
            Ok(row.map(|r| r.get::<_, i64>(0) as u64))
        })
    }
}

impl Membership for PgShard {
    fn member<'a>(&'a self, key: &'a ChatKey, user: &'a str) -> BoxFuture<'a, Result<Option<Member>, StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let Some(row) = select_chat(&conn, key, false).await.map_err(fail)? else {
                return Err(StoreError::NotFound(format!("no chat {}", key.chat)));
            };
            let stmt = conn
                .prepare_cached(
                    r#"SELECT m.read_seq, mu.until_ms FROM members m
                       LEFT JOIN mutes mu ON mu.chat_id = m.chat_id AND mu."user" = m."user"
                       WHERE m.chat_id = $1 AND m."user" = $2"#,
                )
                .await
                .map_err(fail)?;
            let found = conn.query_opt(&stmt, &[&row.id, &user]).await.map_err(fail)?;
            Ok(found.map(|r| {
                let until: Option<i64> = r.get(1);
                Member {
                    read: r.get::<_, i64>(0) as u64,
                    muted_until_ms: until.filter(|_| apply::is_muted(until, apply::now_ms())),
                }
            }))
        })
    }

    fn inbox<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a InboxCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<InboxEntry>, StoreError>> {
        Box::pin(async move {
            let started = Instant::now();
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let (ts, chat) = after.map_or((i64::MAX, ""), |c| (c.ts, c.chat.as_str()));
            let sql = INBOX_SQL.replace(
                "{filter}",
                r#"m."user" = $1 AND c.ws = $2 AND (c.last_ts < $3 OR (c.last_ts = $3 AND c.chat > $4))
                   ORDER BY c.last_ts DESC, c.chat LIMIT $5"#,
            );
            let stmt = conn.prepare_cached(&sql).await.map_err(fail)?;
            let rows = conn.query(&stmt, &[&user, &ws, &ts, &chat, &(i64::from(limit) + 1)]).await.map_err(fail)?;
            metrics::histogram!("herald_store_read_seconds").record(started.elapsed().as_secs_f64());
            rows.iter().map(inbox_entry_from_row).collect()
        })
    }

    fn member_chats<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let stmt = conn
                .prepare_cached(
                    r#"SELECT c.chat, c.last_ts FROM members m JOIN chats c ON c.id = m.chat_id
                        WHERE m."user" = $1 AND c.ws = $2 ORDER BY c.last_ts DESC, c.chat LIMIT $3"#,
                )
                .await
                .map_err(fail)?;
            let rows = conn.query(&stmt, &[&user, &ws, &i64::from(limit)]).await.map_err(fail)?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn inbox_entry<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<InboxEntry>, StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let sql = INBOX_SQL.replace("{filter}", r#"m."user" = $1 AND c.ws = $2 AND c.chat = $3"#);
            let stmt = conn.prepare_cached(&sql).await.map_err(fail)?;
            let row = conn.query_opt(&stmt, &[&user, &&*key.ws, &&*key.chat]).await.map_err(fail)?;
            row.as_ref().map(inbox_entry_from_row).transpose()
        })
    }
}

impl Moderation for PgShard {
    fn user_messages<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<(&'a str, u64)>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let (chat, seq) = after.map_or(("", 0), |(c, s)| (c, sql_seq(s)));
            // Byte order (`COLLATE "C"`), as every shard and the merge in `sharded` compare.
            let stmt = conn
                .prepare_cached(
                    r#"SELECT c.chat, e.seq FROM chats c JOIN events e ON e.chat_id = c.id
                        WHERE c.ws = $1 AND e."user" = $2 AND e.ord IS NOT NULL AND NOT e.deleted
                          AND (c.chat COLLATE "C" > $3 OR (c.chat = $3 AND e.seq > $4))
                        ORDER BY c.chat COLLATE "C", e.seq LIMIT $5"#,
                )
                .await
                .map_err(fail)?;
            let rows = conn.query(&stmt, &[&ws, &user, &chat, &seq, &i64::from(limit)]).await.map_err(fail)?;
            Ok(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64)).collect())
        })
    }
}

// A revocation is one statement outside the writer's batches: it touches no chat row.
impl RevocationList for PgShard {
    fn revoke<'a>(&'a self, ws: &'a str, user: &'a str, revoked_ms: i64) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let stmt = conn
                .prepare_cached(
                    r#"INSERT INTO revocations (ws, "user", revoked_ms, stored_ms)
                       VALUES ($1, $2, $3, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                       ON CONFLICT (ws, "user") DO UPDATE
                          SET revoked_ms = excluded.revoked_ms, stored_ms = excluded.stored_ms
                        WHERE excluded.revoked_ms > revocations.revoked_ms"#,
                )
                .await
                .map_err(fail)?;
            conn.execute(&stmt, &[&ws, &user, &revoked_ms]).await.map_err(fail)?;
            Ok(())
        })
    }

    fn revocations(&self, within: Option<Duration>) -> BoxFuture<'_, Result<Revoked, StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let window_ms = within.map_or(i64::MAX, |w| w.as_millis() as i64);
            let stmt = conn
                .prepare_cached(
                    r#"SELECT ws, "user", revoked_ms FROM revocations
                        WHERE stored_ms >= (extract(epoch FROM clock_timestamp()) * 1000)::bigint - $1"#,
                )
                .await
                .map_err(fail)?;
            let rows = conn.query(&stmt, &[&window_ms]).await.map_err(fail)?;
            let rows = rows.iter().map(|r| Revocation { ws: r.get(0), user: r.get(1), revoked_ms: r.get(2) }).collect();
            Ok(Revoked { rows, complete: true })
        })
    }
}

impl WebhookPositions for PgShard {
    fn track_webhook(&self) {
        self.webhook.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn webhook_pending(
        &self,
        _shard: usize,
        chats: u32,
        events: u32,
        members_max: u64,
    ) -> BoxFuture<'_, Result<Vec<Undelivered>, StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let stmt = conn
                .prepare_cached(
                    "SELECT p.chat_id, c.ws, c.chat, p.delivered, p.since_ms, c.members, p.head
                       FROM webhook_positions p JOIN chats c ON c.id = p.chat_id
                      WHERE p.head > p.delivered ORDER BY p.since_ms, p.chat_id LIMIT $1",
                )
                .await
                .map_err(fail)?;
            let pending = conn.query(&stmt, &[&i64::from(chats)]).await.map_err(fail)?;
            let events_stmt = conn
                .prepare_cached(
                    r#"SELECT seq, type, "user", ts, body, client_id, edited, deleted FROM events
                       WHERE chat_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"#,
                )
                .await
                .map_err(fail)?;
            let members_stmt =
                conn.prepare_cached(r#"SELECT "user" FROM members WHERE chat_id = $1"#).await.map_err(fail)?;
            let mut out = Vec::with_capacity(pending.len());
            for p in &pending {
                let (chat_id, delivered, members): (i64, i64, i64) = (p.get(0), p.get(3), p.get(5));
                let rows = conn.query(&events_stmt, &[&chat_id, &delivered, &i64::from(events)]).await.map_err(fail)?;
                let events = rows.iter().map(event_from_row).collect::<Result<Vec<_>, _>>()?;
                let members = if members as u64 <= members_max {
                    let rows = conn.query(&members_stmt, &[&chat_id]).await.map_err(fail)?;
                    Some(rows.iter().map(|r| r.get::<_, String>(0)).collect())
                } else {
                    None
                };
                let (ws, chat): (String, String) = (p.get(1), p.get(2));
                out.push(Undelivered {
                    chat_id,
                    key: ChatKey::new(&ws, &chat),
                    delivered: delivered as u64,
                    head: p.get::<_, i64>(6) as u64,
                    since_ms: p.get(4),
                    events,
                    members,
                });
            }
            Ok(out)
        })
    }

    /// One row per statement, each its own transaction: a statement that
    /// locked several rows could wait on a writer that waits on it.
    fn webhook_ack(&self, _shard: usize, acks: Vec<WebhookAck>) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let conn = self.conn().await?;
            let fail = |e: tokio_postgres::Error| pg_unavailable(&self.shard.name, &e);
            let stmt = conn
                .prepare_cached(
                    "UPDATE webhook_positions SET delivered = GREATEST(delivered, $2), since_ms = GREATEST(since_ms, $3)
                      WHERE chat_id = $1",
                )
                .await
                .map_err(fail)?;
            let updates = acks.iter().map(|a| {
                let (stmt, conn) = (&stmt, &conn);
                async move { conn.execute(stmt, &[&a.chat_id, &sql_seq(a.seq), &a.since_ms]).await }
            });
            for done in futures_util::future::join_all(updates).await {
                done.map_err(fail)?;
            }
            Ok(())
        })
    }
}

impl Lifecycle for PgShard {
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

    /// A shard on its own: `Sharded` reports each shard's state.
    fn shards(&self) -> Vec<ShardStatus> {
        Vec::new()
    }
}

fn event_from_row(r: &tokio_postgres::Row) -> Result<Event, StoreError> {
    event_from_row_at(r, 0)
}

/// An event from the eight columns of a row starting at `at`, in fetch's order.
fn event_from_row_at(r: &tokio_postgres::Row, at: usize) -> Result<Event, StoreError> {
    let kind: String = r.get(at + 1);
    let body: String = r.get(at + 4);
    Ok(Event {
        seq: r.get::<_, i64>(at) as u64,
        kind: EventType::parse(&kind).unwrap_or(EventType::System),
        user: r.get(at + 2),
        ts: r.get(at + 3),
        body: RawValue::from_string(body).map_err(|e| StoreError::Unavailable(format!("corrupt event body: {e}")))?,
        client_id: r.get(at + 5),
        edited: r.get::<_, Option<i64>>(at + 6).map(|v| v as u64),
        deleted: r.get(at + 7),
    })
}

/// The inbox's query (see the SQLite store's, which this one mirrors): the
/// chats chosen by `{filter}`, each with the counts its unread number is
/// made of and its latest message as fetch shows it. Each count is an index
/// lookup; no chat's history is read.
const INBOX_SQL: &str = r#"
SELECT p.chat, p.seq, p.last_ts, p.read_seq, p.messages,
    coalesce((SELECT e.ord FROM events e WHERE e.chat_id = p.id AND e.seq <= p.read_seq AND e.ord IS NOT NULL
              ORDER BY e.seq DESC LIMIT 1), 0),
    coalesce((SELECT e.user_ord FROM events e WHERE e.chat_id = p.id AND e."user" = p."user" AND e.ord IS NOT NULL
              ORDER BY e.seq DESC LIMIT 1), 0),
    coalesce((SELECT e.user_ord FROM events e WHERE e.chat_id = p.id AND e."user" = p."user"
              AND e.seq <= p.read_seq AND e.ord IS NOT NULL ORDER BY e.seq DESC LIMIT 1), 0),
    (SELECT count(*) FROM events e WHERE e.chat_id = p.id AND e.deleted AND e.seq > p.read_seq
              AND e."user" IS DISTINCT FROM p."user"),
    l.seq, l.type, l."user", l.ts, l.body, l.client_id, l.edited, l.deleted
FROM (SELECT c.id, c.chat, c.seq, c.last_ts, c.messages, c.last_message, m.read_seq, m."user"
        FROM members m JOIN chats c ON c.id = m.chat_id
       WHERE {filter}) AS p
LEFT JOIN events l ON l.chat_id = p.id AND l.seq = p.last_message
ORDER BY p.last_ts DESC, p.chat
"#;

fn inbox_entry_from_row(r: &tokio_postgres::Row) -> Result<InboxEntry, StoreError> {
    let n = |i: usize| r.get::<_, i64>(i) as u64;
    let last = match r.get::<_, Option<i64>>(9) {
        None => None,
        Some(_) => Some(event_from_row_at(r, 9)?),
    };
    Ok(InboxEntry {
        chat: r.get(0),
        seq: n(1),
        ts: r.get(2),
        read: n(3),
        unread: super::unread(n(4), n(5), n(6), n(7), n(8)),
        last,
    })
}

async fn select_chat(
    conn: &impl std::ops::Deref<Target = deadpool_postgres::ClientWrapper>,
    key: &ChatKey,
    lock: bool,
) -> Result<Option<ChatRow>, tokio_postgres::Error> {
    let sql = if lock {
        "SELECT id, seq, members, open, messages, last_ts, last_message FROM chats WHERE ws = $1 AND chat = $2 FOR UPDATE"
    } else {
        "SELECT id, seq, members, open, messages, last_ts, last_message FROM chats WHERE ws = $1 AND chat = $2"
    };
    let stmt = conn.prepare_cached(sql).await?;
    let row = conn.query_opt(&stmt, &[&&*key.ws, &&*key.chat]).await?;
    Ok(row.as_ref().map(chat_row))
}

/// A chat row from `id, seq, members, open, messages, last_ts, last_message`.
pub(super) fn chat_row(r: &tokio_postgres::Row) -> ChatRow {
    ChatRow {
        id: r.get(0),
        seq: r.get::<_, i64>(1) as u64,
        members: r.get::<_, i64>(2) as u64,
        open: r.get(3),
        messages: r.get::<_, i64>(4) as u64,
        ts: r.get(5),
        last_message: r.get::<_, i64>(6) as u64,
    }
}

async fn read_position(
    conn: &impl std::ops::Deref<Target = deadpool_postgres::ClientWrapper>,
    chat: i64,
    user: &str,
) -> Result<Option<u64>, tokio_postgres::Error> {
    let stmt = conn.prepare_cached(r#"SELECT read_seq FROM members WHERE chat_id = $1 AND "user" = $2"#).await?;
    Ok(conn.query_opt(&stmt, &[&chat, &user]).await?.map(|r| r.get::<_, i64>(0) as u64))
}
