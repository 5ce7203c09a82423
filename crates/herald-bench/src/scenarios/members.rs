//! `members`: one chat of N members (100,000), listed page by page with
//! protocol v1.2's `members` op (`limit` 1,000, so 100 pages), `reads`
//! times per run; reported: each page's latency and each whole walk's, p50
//! and p99.
//!
//! The chat is built through herald's own store API before any server
//! starts on it (as `inbox` builds its store): N joins, handed to the store
//! [`CHUNK`] at a time so its batching writer commits full batches. The first
//! walk of each run is checked: every member once, in user-id order, and
//! each page's `count` equal to N.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, ensure};
use clap::Args;
use futures_util::StreamExt;
use herald::model::ChatKey;
use herald::store::{Actor, Store, Write};
use serde::Serialize;
use serde_json::{Value, json};

use crate::client::Client;
use crate::latency::Latencies;
use crate::preload::{self, Page, Preloaded, StoreKind, walk_pages};
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, Server, TargetArgs};
use crate::token::Signer;

/// The member who lists the chat (a member, as `members` requires).
const ME: &str = "me";
/// The chat.
const CHAT: &str = "big";
/// Joins handed to the store together: one of the SQLite writer's largest batches.
const CHUNK: usize = 1024;
/// Chunks in flight at once: below either backend's write queue (16,384 writes).
const CHUNKS_IN_FLIGHT: usize = 8;

/// `herald-bench members`.
#[derive(Debug, Args, Serialize)]
pub struct MembersArgs {
    /// Members of the chat (`me` and the others).
    #[arg(long, default_value_t = 100_000)]
    pub members: u64,
    /// `limit` of each `members` page (at most 1,000).
    #[arg(long, default_value_t = 1_000)]
    pub limit: u32,
    /// Whole walks of the member list per run.
    #[arg(long, default_value_t = 10)]
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
    col("members_listed", "members"),
    col("pages", "pages"),
    col("reads", "reads"),
    col("walk_p50_ms", "walk p50 ms"),
    col("walk_p99_ms", "walk p99 ms"),
    col("page_p50_ms", "page p50 ms"),
    col("page_p99_ms", "page p99 ms"),
    col("exact", "exact"),
];

/// Builds the chat, then runs the measurement `args.run.runs` times (each on a fresh server) and reports.
pub async fn run(args: MembersArgs) -> anyhow::Result<Vec<Value>> {
    ensure!(args.target.starts_server(), "members builds its own store: it starts its own server");
    ensure!(args.members >= 1, "--members at least 1");
    ensure!((1..=1000).contains(&args.limit) && args.reads > 0, "--limit 1 to 1000, --reads at least 1");
    let data = tempfile::TempDir::with_prefix("herald-bench-members-")?;
    let store = Preloaded::create(args.store, args.pg_admin.as_deref(), "members").await?;
    let built = Instant::now();
    let result = match build(&store, data.path(), &args.target.workspace, args.members).await {
        Ok(()) => {
            let build_s = built.elapsed().as_secs_f64();
            eprintln!("chat built in {build_s:.0} s: {} members", args.members);
            report::repeat(&args.run, |_| measure(&args, &store.flags, data.path(), build_s)).await
        }
        Err(e) => Err(e),
    };
    store.remove().await;
    let runs = result?;
    report::emit("members", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

/// Member `i`'s user id: `me` first, then ids that sort in their index's order.
fn member(i: u64) -> String {
    if i == 0 { ME.to_string() } else { format!("m{i:07}") }
}

/// Joins `members` users to the chat through herald's store API.
async fn build(at: &Preloaded, dir: &Path, ws: &str, members: u64) -> anyhow::Result<()> {
    let (store, label) = at.open(dir)?;
    let loaded = join_all(store.as_ref(), ws, members, label).await;
    // Every write is durable once answered; closing stops the writer.
    store.close().await;
    loaded
}

async fn join_all(store: &dyn Store, ws: &str, members: u64, label: &str) -> anyhow::Result<()> {
    let key = ChatKey::new(ws, CHAT);
    // `me` first, alone: its join creates the chat.
    store.write(join(&key, 0)).await.context("me's join")?;
    let chunks: Vec<(u64, u64)> =
        (1..members).step_by(CHUNK).map(|first| (first, (first + CHUNK as u64).min(members))).collect();
    let mut writes = futures_util::stream::iter(chunks)
        .map(|(first, end)| {
            let key = key.clone();
            async move {
                let written = futures_util::future::join_all((first..end).map(|i| store.write(join(&key, i)))).await;
                for (i, w) in (first..).zip(written) {
                    w.with_context(|| format!("{}'s join", member(i)))?;
                }
                anyhow::Ok(end - first)
            }
        })
        .buffer_unordered(CHUNKS_IN_FLIGHT);
    let mut joined = 1u64;
    while let Some(n) = writes.next().await {
        joined += n?;
        if joined.is_multiple_of(100 * CHUNK as u64) {
            eprintln!("{label}: {joined} members joined");
        }
    }
    Ok(())
}

fn join(key: &ChatKey, i: u64) -> Write {
    Write::Join { key: key.clone(), user: Arc::from(member(i).as_str()), actor: Actor::Client }
}

/// One run: a server on the built store, `reads` whole walks of the member list.
async fn measure(args: &MembersArgs, flags: &[String], data: &Path, build_s: f64) -> anyhow::Result<Value> {
    // Pages come back to back: the per-connection request rate is raised, so the limiter is not what is measured.
    let flags = [flags, &server::raised_limits()].concat();
    let server = Server::start_in(&args.target, &flags, data).await?;
    let outcome = match preload::wait_ready(&server).await {
        Ok(()) => walk(args, &server).await,
        Err(e) => Err(e),
    };
    let log = server.stop().await?;
    let mut out = outcome?;
    out["build_s"] = json!(build_s);
    out["server_log"] = serde_json::to_value(log)?;
    Ok(out)
}

async fn walk(args: &MembersArgs, server: &Server) -> anyhow::Result<Value> {
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let path = Server::ws_path(&args.target.workspace);
    let mut me = Client::connect(server.addr, &path, std::net::Ipv4Addr::LOCALHOST).await?;
    me.hello(&signer.token(ME)?).await?;
    let (mut whole, mut page) = (Latencies::default(), Latencies::default());
    let (mut exact, mut listed, mut pages) = (true, 0usize, 0u32);
    for read in 0..args.reads {
        let started = Instant::now();
        let mut counts_right = true;
        let seen;
        (seen, pages) = walk_pages(&mut page, async |cursor| {
            let got = me.members(CHAT, args.limit, cursor).await?;
            counts_right &= got.count == args.members;
            Ok(Page { entries: got.members.into_iter().map(|m| m.user).collect(), more: got.more, cursor: got.cursor })
        })
        .await?;
        whole.record(started.elapsed());
        if read == 0 {
            listed = seen.len();
            let mut planned: Vec<String> = (0..args.members).map(member).collect();
            planned.sort_unstable();
            exact = counts_right && seen == planned;
            if !exact {
                eprintln!("members: counts right {counts_right}, {} listed of {}", seen.len(), planned.len());
            }
        }
    }
    me.close().await;
    let (w, p) = (whole.summary(), page.summary());
    Ok(json!({
        "members": args.members,
        "members_listed": listed,
        "pages": pages,
        "reads": args.reads,
        "walk_p50_ms": w.p50_ms,
        "walk_p99_ms": w.p99_ms,
        "page_p50_ms": p.p50_ms,
        "page_p99_ms": p.p99_ms,
        "page_max_ms": p.max_ms,
        "exact": exact,
        "failed": if exact { 0 } else { 1 },
    }))
}
