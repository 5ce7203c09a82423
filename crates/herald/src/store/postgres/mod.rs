//! One PostgreSQL shard: a database holding whole chats. Writes go through
//! one batching writer task per node and shard (group commit, the rules of
//! [`super::apply`]); chat rows are locked with `SELECT ... FOR UPDATE`
//! while a batch runs, so several nodes appending to one chat serialize on
//! that row and seq stays gap-free. Reads use a small pool. Inside a batch,
//! reads are made ahead and inserts sent in bulk (see [`writer`]).
//!
//! This file opens a shard, keeps its read pool and its lifecycle; the rest
//! is one file per idea: `schema.rs` (applying `schema.sql` and confirming
//! the shard's identity), `writer.rs` (the batching writer and its `Tx`),
//! `connect.rs` (finding the primary among a shard's hosts, each within a
//! bound), `lease.rs` (taking connections that went bad out of the pool),
//! `retry.rs` (running a request again when its connection was gone),
//! `heads.rs` (never handing a seq out twice after a standby promoted
//! without every commit), and one file per capability's reads: `log.rs`,
//! `members.rs`, `moderation.rs`, `revocations.rs`, `webhook.rs`.
//!
//! On its first connection a node applies the schema and confirms the
//! shard's identity (`shard_identity`); later connections must reach the
//! same database.
//!
//! Not here: routing between shards, bulkheads and breakers (`sharded`);
//! parsing `--store` entries (`shard_spec`); the TLS client (`pg_tls`).

mod bulk;
mod changes;
mod connect;
mod conversations;
mod export;
mod files;
mod heads;
mod lease;
mod log;
mod members;
mod moderation;
mod retry;
mod revocations;
mod schema;
mod search;
mod search_index;
mod tx;
mod webhook;
mod writer;

use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::{
    Hook, HookError, Manager, ManagerConfig, Pool, PoolError, QueueMode, RecyclingMethod, Runtime,
};
use tokio::sync::{OnceCell, mpsc};
use tokio_postgres::NoTls;

use super::apply::Reply;
use super::pg_tls;
use super::shard_identity::{Claims, IdentityError};
use super::shard_spec::{ShardName, ShardSpec, TlsMode, chain};
use super::{Alive, BoxFuture, Lifecycle, ShardStatus, StoreError, Write};
use connect::{HOST_TIMEOUT, PrimaryConnect};
use lease::{Fence, Lease};
use retry::{Failed, Retries};
use schema::ensure_schema;
use writer::Writer;

/// Most writes per transaction: bounds a batch's latency and lock time.
const MAX_BATCH: usize = 512;
/// Writes waiting for this shard's writer before new ones are refused.
const WRITE_QUEUE: usize = 16 * 1024;
/// Pooled connections for reads.
const READ_POOL: usize = 8;
/// A TCP connect to a host that is down fails within this.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// A new pooled connection is made within this: the host that was the
/// primary, then the others at once (see `connect.rs`).
const CREATE_TIMEOUT: Duration = Duration::from_millis(2 * HOST_TIMEOUT.as_millis() as u64 + 100);
/// A batch that takes longer is abandoned (its connection dropped, which
/// rolls it back if it had not committed): a primary that hangs holds the
/// shard's writes this long at most before herald looks for another.
const BATCH_TIMEOUT: Duration = Duration::from_secs(3);

/// A PostgreSQL shard.
pub struct PgShard {
    shard: Arc<Checked>,
    /// False once the writer task has ended: the shard is then not ready.
    writer_alive: Arc<std::sync::atomic::AtomicBool>,
    jobs: mpsc::Sender<(Write, Reply)>,
    pool: Pool,
    /// webhook: whether writes keep the webhook's positions (shared with the writer).
    webhook: Arc<std::sync::atomic::AtomicBool>,
    /// v1.2 search: the chats this node wrote since its indexer last looked (`search_index.rs`).
    search: Arc<crate::store::search_pending::Pending>,
    /// Retires pooled connections after a failure (`lease.rs`).
    fence: Arc<Fence>,
    /// The highest seq this node has seen per chat (`heads.rs`).
    heads: Arc<heads::SeenHeads>,
    /// Requests run again on a new connection (`retry.rs`), shared with the writer.
    retries: Arc<Retries>,
    /// This node's place in the shard's `chat_changes` (`changes.rs`).
    changes: tokio::sync::Mutex<changes::Cursor>,
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
        let mut hosts = spec.hosts.clone();
        for h in &mut hosts {
            h.connect_timeout(CONNECT_TIMEOUT);
        }
        let recycling = ManagerConfig { recycling_method: RecyclingMethod::Fast };
        let name = spec.name.clone();
        let mgr = match spec.tls {
            TlsMode::Off => Manager::from_connect(pg.clone(), PrimaryConnect::new(pg, hosts, NoTls, name), recycling),
            TlsMode::Prefer | TlsMode::Require => {
                let tls = pg_tls::client(&spec.roots)?;
                Manager::from_connect(pg.clone(), PrimaryConnect::new(pg, hosts, tls, name), recycling)
            }
        };
        let fence = Arc::new(Fence::new(spec.name.clone()));
        let shard = Arc::new(Checked {
            name: spec.name.clone(),
            shown: spec.shown.clone(),
            claims: claims.clone(),
            done: OnceCell::new(),
            id: std::sync::OnceLock::new(),
        });
        let pool = Pool::builder(mgr)
            // The writer's connection, and the search indexer's.
            .max_size(READ_POOL + 2)
            // The connection returned last is lent first: the few a light load
            // needs stay warm, and the rest sit idle until a burst, when the
            // idle check (`lease.rs`) finds any that went bad meanwhile. First in,
            // first out would pass each connection around (a node reads its
            // revocations every second) and none would ever count as idle.
            .queue_mode(QueueMode::Lifo)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(CREATE_TIMEOUT))
            .wait_timeout(Some(Duration::from_secs(2)))
            .post_create(same_shard(shard.clone()))
            .pre_recycle(lease::recycle_check(fence.clone()))
            .post_recycle(lease::idle_check(fence.clone()))
            .build()?;
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        let writer_alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let webhook = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let heads = Arc::new(heads::SeenHeads::default());
        let retries = Arc::new(Retries::new(spec.name.clone()));
        let writer = Writer {
            shard: shard.clone(),
            pool: pool.clone(),
            conn: None,
            last_batch: Instant::now(),
            webhook: webhook.clone(),
            fence: fence.clone(),
            heads: heads.clone(),
            retries: retries.clone(),
        };
        let alive = Alive(writer_alive.clone(), "postgres");
        tokio::spawn(async move {
            let _alive = alive;
            writer.run(rx).await;
        });
        let search = Arc::new(crate::store::search_pending::Pending::new());
        if crate::store::search_pending::indexing_on() {
            tokio::spawn(search_index::run(shard.clone(), pool.clone(), search.clone()));
        }
        Ok(PgShard {
            shard,
            writer_alive,
            jobs: tx,
            pool,
            webhook,
            search,
            fence,
            heads,
            retries,
            changes: Default::default(),
        })
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

    /// A pooled connection to the shard's primary, for one read (see
    /// `lease.rs`); reads take it through [`PgShard::read`].
    async fn lease(&self) -> Result<Lease, Failed> {
        let conn =
            Lease::new(self.pool.get().await.map_err(|e| pg_unavailable(&self.shard.name, &e))?, self.fence.clone());
        match ensure_schema(&self.shard, &conn).await {
            Ok(()) => Ok(conn),
            Err(IdentityError::Pg(e)) => Err(Failed::Pg(e)),
            Err(e) => Err(Failed::Store(self.shard.not_confirmed(&e))),
        }
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

impl Lifecycle for PgShard {
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            if !self.writer_alive.load(std::sync::atomic::Ordering::SeqCst) {
                tracing::error!(shard = %self.shard.name, "the shard's writer stopped");
                return Err(StoreError::Unavailable(self.shard.name.public("has no writer")));
            }
            self.read(|conn| async move {
                conn.simple_query("SELECT 1").await?;
                Ok(())
            })
            .await
        })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // Queued writes are finished by the writer; wait until its queue is empty.
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.jobs.capacity() < self.jobs.max_capacity() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            self.search.close();
        })
    }

    /// A shard on its own: `Sharded` reports each shard's state.
    fn shards(&self) -> Vec<ShardStatus> {
        Vec::new()
    }
}
