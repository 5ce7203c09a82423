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
//! in the inbox's order, each `unread` (and v1.2's `threads` and
//! `mentions`) equal to the count the generator knows (messages above the
//! read position, by others, not deleted).
//!
//! With `--threads T` (the `threads` command, `inbox/threads`), the first T
//! messages of each of `me`'s chats are thread roots `me` follows, and each
//! run also walks `me`'s `threads`, every page, as often as its inbox.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use anyhow::ensure;
use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};

use crate::client::Client;
use crate::latency::Latencies;
use crate::preload::{self, Page, Preloaded, StoreKind, walk_pages};
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, Server, TargetArgs};
use crate::token::Signer;

mod load;
mod plan;
pub mod threads;

use plan::{Expected, ME, MEMBERS, Plan};

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
    /// Thread roots (sent by `me`, replied to by others) in each of `me`'s chats; 0: none.
    #[arg(long, default_value_t = 0)]
    pub threads: u64,
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

/// `threads`' columns: `inbox`'s, then the walks of `threads`.
const THREADS_COLUMNS: &[Column] = &[
    col("chats_listed", "chats"),
    col("pages", "pages"),
    col("page_p50_ms", "page p50 ms"),
    col("page_p99_ms", "page p99 ms"),
    col("exact", "exact"),
    col("threads_listed", "threads"),
    col("threads_pages", "thread pages"),
    col("threads_p50_ms", "threads p50 ms"),
    col("threads_p99_ms", "threads p99 ms"),
    col("threads_page_p50_ms", "thread page p50 ms"),
    col("threads_page_p99_ms", "thread page p99 ms"),
    col("threads_exact", "threads exact"),
];

/// Builds the store, then runs the measurement `args.run.runs` times (each on a fresh server) and reports.
pub async fn run(args: InboxArgs) -> anyhow::Result<Vec<Value>> {
    let (name, columns) = if args.threads > 0 { ("threads", THREADS_COLUMNS) } else { ("inbox", COLUMNS) };
    let runs = measure_runs(&args).await?;
    report::emit(name, &args, &runs, columns, args.run.json);
    Ok(runs)
}

async fn measure_runs(args: &InboxArgs) -> anyhow::Result<Vec<Value>> {
    ensure!(args.target.starts_server(), "inbox builds its own store: it starts its own server");
    ensure!(args.chats > 0 && args.member_chats <= args.chats, "--member-chats must be at most --chats");
    ensure!(args.events / args.chats > MEMBERS, "at least {} events per chat", MEMBERS + 1);
    ensure!((1..=200).contains(&args.limit) && args.reads > 0, "--limit 1 to 200, --reads at least 1");
    // Each root needs a reply after the roots: about two messages per root more.
    ensure!(
        args.threads == 0 || args.events / args.chats >= MEMBERS + 4 * args.threads + 2,
        "--threads {} needs at least {} events per chat",
        args.threads,
        MEMBERS + 4 * args.threads + 2
    );
    ensure!(args.threads == 0 || args.limit <= 100, "threads pages: --limit at most 100");
    let plan = Plan::new(args.chats, args.events, args.member_chats).with_threads(args.threads);
    let data = tempfile::TempDir::with_prefix("herald-bench-inbox-")?;
    let store = Preloaded::create(args.store, args.pg_admin.as_deref(), "inbox").await?;
    let built = Instant::now();
    // The database is dropped whether the build or a run fails.
    let result = match build(&plan, &args.target.workspace, data.path(), &store).await {
        Ok(expected) => {
            let build_s = built.elapsed().as_secs_f64();
            eprintln!("store built in {build_s:.0} s: {} chats, {} events", plan.chats, plan.chats * plan.per_chat);
            report::repeat(&args.run, |_| measure(args, &plan, &store.flags, data.path(), &expected, build_s)).await
        }
        Err(e) => Err(e),
    };
    store.remove().await;
    result
}

/// One run: a server on the built store, `reads` whole inboxes.
async fn measure(
    args: &InboxArgs,
    plan: &Plan,
    flags: &[String],
    data: &Path,
    expected: &HashMap<String, Expected>,
    build_s: f64,
) -> anyhow::Result<Value> {
    // Pages come back to back: the per-connection request rate is raised, so the limiter is not what is measured.
    let flags = [flags, &server::raised_limits()].concat();
    let server = Server::start_in(&args.target, &flags, data).await?;
    let outcome = match preload::wait_ready(&server).await {
        Ok(()) => read_inboxes(args, &server, expected).await,
        Err(e) => Err(e),
    };
    let outcome = match outcome {
        Ok(inbox) if args.threads > 0 => match threads::walk(args, plan, &server).await {
            Ok(walked) => Ok(merge(inbox, walked)),
            Err(e) => Err(e),
        },
        other => other,
    };
    let log = server.stop().await?;
    let mut out = outcome?;
    out["build_s"] = json!(build_s);
    out["server_warnings"] = json!(log.map(|l| l.warnings).unwrap_or(0));
    Ok(out)
}

/// `a`'s fields and `b`'s; a failure in either counts.
fn merge(mut a: Value, b: Value) -> Value {
    let failed = a["failed"].as_u64().unwrap_or(0) + b["failed"].as_u64().unwrap_or(0);
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a["failed"] = json!(failed);
    a
}

async fn read_inboxes(
    args: &InboxArgs,
    server: &Server,
    expected: &HashMap<String, Expected>,
) -> anyhow::Result<Value> {
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let path = Server::ws_path(&args.target.workspace);
    let mut me = Client::connect(server.addr, &path, std::net::Ipv4Addr::LOCALHOST).await?;
    me.hello(&signer.token(ME)?).await?;
    let (mut whole, mut page) = (Latencies::default(), Latencies::default());
    let (mut exact, mut listed, mut pages) = (true, 0usize, 0u32);
    for read in 0..args.reads {
        let started = Instant::now();
        let seen;
        (seen, pages) = walk_pages(&mut page, async |cursor| {
            let got = me.inbox(args.limit, cursor).await?;
            Ok(Page { entries: got.chats, more: got.more, cursor: got.cursor })
        })
        .await?;
        whole.record(started.elapsed());
        if read == 0 {
            listed = seen.len();
            let ordered = seen.windows(2).all(|w| (w[1].ts, &w[0].chat) < (w[0].ts, &w[1].chat));
            let said = |e: &herald_protocol::reply::InboxEntry| Expected {
                unread: e.unread,
                threads: e.threads.unwrap_or(0),
                mentions: e.mentions.unwrap_or(0),
            };
            let wrong = seen.iter().find(|e| expected.get(&e.chat) != Some(&said(e)));
            if let Some(e) = wrong {
                eprintln!("inbox: {} says {:?}, expected {:?}", e.chat, said(e), expected.get(&e.chat));
            }
            let counts = wrong.is_none();
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

/// Builds the planned store through herald's store API (in `dir` on SQLite);
/// answers what `me`'s inbox must say of each of its chats.
async fn build(plan: &Plan, ws: &str, dir: &Path, at: &Preloaded) -> anyhow::Result<HashMap<String, Expected>> {
    let (store, label) = at.open(dir)?;
    let loaded = load::load(store.as_ref(), plan, ws, label).await;
    // Every write is durable once answered; closing stops the writer (SQLite: and folds its log into the file).
    store.close().await;
    loaded
}
