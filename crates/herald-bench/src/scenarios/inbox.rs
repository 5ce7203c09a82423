//! The `inbox` scenario: one user's inbox in a large store. It builds a
//! store of C chats and E events (100,000 and 10,000,000 by default) in
//! which one user, `me`, is a member of M chats (1,000) with read positions
//! spread over each chat's log, then reads that user's whole inbox (every
//! page) again and again over the WebSocket `inbox` op and reports the
//! latency of a whole inbox and of one page, p50 and p99.
//!
//! The store is built through herald's own store API (see `inbox/load`),
//! before any server starts on it: the bench hands herald's store the writes
//! a client's requests would make, and herald decides what its tables hold.
//! The store's shape and each chat's log are `inbox/plan`'s. On PostgreSQL
//! (`--store postgres --pg-admin URL`) the bench creates a database for the
//! run, loads it as one shard, and drops it after.
//!
//! The first read of each run is checked: every one of `me`'s chats once,
//! in the inbox's order, each `unread` equal to the count the generator
//! knows (messages above the read position, by others, not deleted).

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, ensure};
use clap::{Args, ValueEnum};
use herald::store::postgres::PgShard;
use herald::store::shard_identity::Claims;
use herald::store::sqlite::SqliteStore;
use herald::store::{ShardSpec, Store};
use serde::Serialize;
use serde_json::{Value, json};

use crate::client::Client;
use crate::http;
use crate::latency::Latencies;
use crate::report::{self, Column, RunArgs, col};
use crate::server::{Server, TargetArgs};
use crate::token::Signer;

mod load;
mod plan;

use plan::{ME, MEMBERS, Plan};

/// A started server opens (or migrates) its store within this.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Which store the server under test uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    Sqlite,
    Postgres,
}

/// `herald-bench inbox`.
#[derive(Debug, Args, Serialize)]
pub struct InboxArgs {
    /// Chats in the store.
    #[arg(long, default_value_t = 100_000)]
    pub chats: u64,
    /// Events in the store, spread evenly over the chats.
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// Chats `me` is a member of.
    #[arg(long, default_value_t = 1_000)]
    pub member_chats: u64,
    /// `limit` of each inbox page.
    #[arg(long, default_value_t = 200)]
    pub limit: u32,
    /// Whole-inbox reads per run.
    #[arg(long, default_value_t = 50)]
    pub reads: u32,
    #[arg(long, value_enum, default_value_t = StoreKind::Sqlite)]
    pub store: StoreKind,
    /// With `--store postgres`: a URL of the cluster on which the bench may create (and drop) a database.
    #[arg(long, required_if_eq("store", "postgres"))]
    #[serde(skip)]
    pub pg_admin: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("chats_listed", "chats"),
    col("pages", "pages"),
    col("reads", "reads"),
    col("inbox_p50_ms", "inbox p50 ms"),
    col("inbox_p99_ms", "inbox p99 ms"),
    col("page_p50_ms", "page p50 ms"),
    col("page_p99_ms", "page p99 ms"),
    col("exact", "exact"),
];

/// Builds the store, then runs the measurement `args.run.runs` times (each on a fresh server) and reports.
pub async fn run(args: InboxArgs) -> anyhow::Result<Vec<Value>> {
    ensure!(args.target.starts_server(), "inbox builds its own store: it starts its own server");
    ensure!(args.chats > 0 && args.member_chats <= args.chats, "--member-chats must be at most --chats");
    ensure!(args.events / args.chats > MEMBERS, "at least {} events per chat", MEMBERS + 1);
    ensure!((1..=200).contains(&args.limit) && args.reads > 0, "--limit 1 to 200, --reads at least 1");
    let plan = Plan::new(args.chats, args.events, args.member_chats);
    let data = tempfile::TempDir::with_prefix("herald-bench-inbox-")?;
    let (flags, pg) = match args.store {
        StoreKind::Sqlite => (Vec::new(), None),
        StoreKind::Postgres => {
            let admin = args.pg_admin.as_deref().context("--pg-admin")?;
            let db = PgDatabase::create(admin).await?;
            (vec!["--store".to_string(), db.url.clone()], Some(db))
        }
    };
    let built = Instant::now();
    // The database is dropped whether the build or a run fails.
    let result = match build(&plan, &args.target.workspace, data.path(), pg.as_ref()).await {
        Ok(expected) => {
            let build_s = built.elapsed().as_secs_f64();
            eprintln!("store built in {build_s:.0} s: {} chats, {} events", plan.chats, plan.chats * plan.per_chat);
            report::repeat(&args.run, |_| measure(&args, &flags, data.path(), &expected, build_s)).await
        }
        Err(e) => Err(e),
    };
    if let Some(db) = pg {
        db.drop_it().await;
    }
    let runs = result?;
    report::emit("inbox", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

/// Waits until the server answers `/readyz` with 200: its store is open.
async fn wait_ready(server: &Server) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(a) = http::get(server.addr, "/readyz", None).await
            && a.status == 200
        {
            return Ok(());
        }
        ensure!(Instant::now() < deadline, "the server was not ready in {READY_TIMEOUT:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// One run: a server on the built store, `reads` whole inboxes.
async fn measure(
    args: &InboxArgs,
    flags: &[String],
    data: &Path,
    expected: &HashMap<String, u64>,
    build_s: f64,
) -> anyhow::Result<Value> {
    let server = Server::start_in(&args.target, flags, data).await?;
    let outcome = match wait_ready(&server).await {
        Ok(()) => read_inboxes(args, &server, expected).await,
        Err(e) => Err(e),
    };
    let log = server.stop().await?;
    let mut out = outcome?;
    out["build_s"] = json!(build_s);
    out["server_warnings"] = json!(log.map(|l| l.warnings).unwrap_or(0));
    Ok(out)
}

async fn read_inboxes(args: &InboxArgs, server: &Server, expected: &HashMap<String, u64>) -> anyhow::Result<Value> {
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let path = Server::ws_path(&args.target.workspace);
    let mut me = Client::connect(server.addr, &path, std::net::Ipv4Addr::LOCALHOST).await?;
    me.hello(&signer.token(ME)?).await?;
    let (mut whole, mut page) = (Latencies::default(), Latencies::default());
    let (mut exact, mut listed, mut pages) = (true, 0usize, 0u32);
    for read in 0..args.reads {
        let started = Instant::now();
        let mut cursor: Option<String> = None;
        let mut seen = Vec::new();
        pages = 0;
        loop {
            let t = Instant::now();
            let got = me.inbox(args.limit, cursor.as_deref()).await?;
            page.record(t.elapsed());
            pages += 1;
            seen.extend(got.chats);
            match got.cursor {
                Some(c) if got.more => cursor = Some(c),
                _ => break,
            }
        }
        whole.record(started.elapsed());
        if read == 0 {
            listed = seen.len();
            let ordered = seen.windows(2).all(|w| (w[1].ts, &w[0].chat) < (w[0].ts, &w[1].chat));
            let counts = seen.iter().all(|e| expected.get(&e.chat) == Some(&e.unread));
            exact = ordered && counts && seen.len() == expected.len();
            if !exact {
                eprintln!(
                    "inbox: ordered {ordered}, counts as expected {counts}, {} of {}",
                    seen.len(),
                    expected.len()
                );
            }
        }
    }
    let (w, p) = (whole.summary(), page.summary());
    Ok(json!({
        "chats_listed": listed,
        "pages": pages,
        "reads": args.reads,
        "inbox_p50_ms": w.p50_ms,
        "inbox_p99_ms": w.p99_ms,
        "page_p50_ms": p.p50_ms,
        "page_p99_ms": p.p99_ms,
        "exact": exact,
        "failed": if exact { 0 } else { 1 },
    }))
}

/// Builds the planned store: in `dir` (SQLite), or in `pg`'s database as
/// one shard; answers `me`'s expected unread counts.
async fn build(plan: &Plan, ws: &str, dir: &Path, pg: Option<&PgDatabase>) -> anyhow::Result<HashMap<String, u64>> {
    let (store, label): (Box<dyn Store>, &str) = match pg {
        None => (Box::new(SqliteStore::open(dir)?), "sqlite"),
        Some(db) => {
            let spec = ShardSpec::parse(&db.url)?;
            (Box::new(PgShard::open(&spec, &Claims::default())?), "postgres")
        }
    };
    let loaded = load::load(store.as_ref(), plan, ws, label).await;
    // Every write is durable once answered; closing stops the writer (SQLite: and folds its log into the file).
    store.close().await;
    loaded
}

/// A database of its own on the cluster at `--pg-admin`.
struct PgDatabase {
    admin: String,
    name: String,
    url: String,
}

impl PgDatabase {
    async fn create(admin: &str) -> anyhow::Result<PgDatabase> {
        let client = pg_connect(admin).await?;
        let name = format!("herald_bench_inbox_{:08x}", std::process::id());
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
