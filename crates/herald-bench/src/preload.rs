//! A store the bench builds before a server starts on it (`inbox`,
//! `threads`, `members`): which backend, a PostgreSQL database of the run's
//! own (created on the cluster at `--pg-admin`, dropped after), opening the
//! store through herald's own API, and waiting until a server started on it
//! is ready, and walking a paged list of it (an inbox, threads, members)
//! page by page. What goes into the store is each scenario's.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::ValueEnum;
use herald::store::postgres::PgShard;
use herald::store::shard_identity::Claims;
use herald::store::sqlite::SqliteStore;
use herald::store::{ShardSpec, Store};
use serde::Serialize;

use crate::http;
use crate::server::Server;

/// A started server opens (or migrates) its store within this.
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Which store the server under test uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

/// Where a preloaded store lives: the run's data directory (SQLite), or a database of its own.
pub struct Preloaded {
    /// The server's flags for this store (`--store URL` on PostgreSQL).
    pub flags: Vec<String>,
    pg: Option<PgDatabase>,
}

impl Preloaded {
    /// Makes room for a store of `kind` (a database on `pg_admin`'s cluster for PostgreSQL).
    pub async fn create(kind: StoreKind, pg_admin: Option<&str>, prefix: &str) -> anyhow::Result<Preloaded> {
        Ok(match kind {
            StoreKind::Sqlite => Preloaded { flags: Vec::new(), pg: None },
            StoreKind::Postgres => {
                let db = PgDatabase::create(pg_admin.context("--pg-admin")?, prefix).await?;
                Preloaded { flags: vec!["--store".to_string(), db.url.clone()], pg: Some(db) }
            }
        })
    }

    /// Opens the store through herald's API (in `dir` for SQLite); its name for progress lines.
    pub fn open(&self, dir: &Path) -> anyhow::Result<(Box<dyn Store>, &'static str)> {
        Ok(match &self.pg {
            None => (Box::new(SqliteStore::open(dir)?), "sqlite"),
            Some(db) => {
                let spec = ShardSpec::parse(&db.url)?;
                (Box::new(PgShard::open(&spec, &Claims::default())?), "postgres")
            }
        })
    }

    /// Drops the run's database, if it has one.
    pub async fn remove(self) {
        if let Some(db) = self.pg {
            db.drop_it().await;
        }
    }
}

/// Waits until the server answers `/readyz` with 200: its store is open.
pub async fn wait_ready(server: &Server) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(a) = http::get(server.addr, "/readyz", None).await
            && a.status == 200
        {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "the server was not ready in {READY_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A database of its own on the cluster at `--pg-admin`.
struct PgDatabase {
    admin: String,
    name: String,
    url: String,
}

impl PgDatabase {
    async fn create(admin: &str, prefix: &str) -> anyhow::Result<PgDatabase> {
        let client = pg_connect(admin).await?;
        let name = format!("herald_bench_{prefix}_{:08x}", std::process::id());
        client.batch_execute(&format!("DROP DATABASE IF EXISTS {name}")).await?;
        client.batch_execute(&format!("CREATE DATABASE {name}")).await?;
        let base = admin.rsplit_once('/').context("--pg-admin needs a database in its URL")?.0;
        Ok(PgDatabase { admin: admin.to_string(), url: format!("{base}/{name}"), name })
    }

    async fn drop_it(self) {
        if let Ok(client) = pg_connect(&self.admin).await {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name)).await;
        }
    }
}

async fn pg_connect(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, conn) =
        tokio_postgres::connect(url, tokio_postgres::NoTls).await.context("connecting to PostgreSQL")?;
    tokio::spawn(conn);
    Ok(client)
}

/// One page of a paged list: its entries, whether more follow, and the cursor of the next.
pub struct Page<T> {
    pub entries: Vec<T>,
    pub more: bool,
    pub cursor: Option<String>,
}

/// Walks a paged list from its start with `ask` (given the cursor, `None` first) until a page says
/// no more, recording each page's time in `times`; returns every entry and the number of pages.
pub async fn walk_pages<T>(
    times: &mut crate::latency::Latencies,
    mut ask: impl AsyncFnMut(Option<&str>) -> anyhow::Result<Page<T>>,
) -> anyhow::Result<(Vec<T>, u32)> {
    let (mut cursor, mut seen, mut pages) = (None::<String>, Vec::new(), 0u32);
    loop {
        let t = Instant::now();
        let page = ask(cursor.as_deref()).await?;
        times.record(t.elapsed());
        pages += 1;
        seen.extend(page.entries);
        match page.cursor {
            Some(c) if page.more => cursor = Some(c),
            _ => return Ok((seen, pages)),
        }
    }
}
