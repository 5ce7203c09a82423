//! `threads`: the `inbox` scenario's store with threads (protocol v1.2).
//! `me` is a member of M chats (200) of a store of C chats and E events
//! (100,000 and 10,000,000), with T thread roots in each of its chats
//! (1,000 threads in all: 5 per chat), sent by `me` and replied to by the
//! other members (some replies mentioning `me`), so `me` follows every one.
//! Each run reads `me`'s whole inbox (now with each chat's `threads` and
//! `mentions` counts) and walks its `threads`, every page, `reads` times
//! each, and reports both: per page and per whole walk, p50 and p99.
//!
//! The first walk of each run is checked: every planned thread once, in
//! `threads`' order (latest reply first, then chat, then root), each
//! `unread` equal to the generator's count (replies by others, not deleted).
//! The store, the inbox reads and their check are `inbox`'s.

use std::collections::HashMap;
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};

use super::plan::{ME, Plan};
use super::{InboxArgs, StoreKind};
use crate::client::Client;
use crate::latency::Latencies;
use crate::preload::{Page, walk_pages};
use crate::report::RunArgs;
use crate::server::{Server, TargetArgs};
use crate::token::Signer;

/// `herald-bench threads`.
#[derive(Debug, Args, Serialize)]
pub struct ThreadsArgs {
    /// Chats in the store.
    #[arg(long, default_value_t = 100_000)]
    pub chats: u64,
    /// Events in the store, spread evenly over the chats.
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// Chats `me` is a member of.
    #[arg(long, default_value_t = 200)]
    pub member_chats: u64,
    /// Threads `me` follows in all, spread evenly over its chats (a multiple of --member-chats).
    #[arg(long, default_value_t = 1_000)]
    pub threads: u64,
    /// `limit` of each `threads` and `inbox` page.
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// Whole walks of `threads`, and whole inbox reads, per run.
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

/// Builds the store with threads and measures as `inbox` does, plus the walks of `threads`.
pub async fn run(args: ThreadsArgs) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(
        args.member_chats > 0 && args.threads > 0 && args.threads.is_multiple_of(args.member_chats),
        "--threads must be a multiple of --member-chats (both above 0)"
    );
    super::run(InboxArgs {
        chats: args.chats,
        events: args.events,
        member_chats: args.member_chats,
        limit: args.limit,
        reads: args.reads,
        threads: args.threads / args.member_chats,
        store: args.store,
        pg_admin: args.pg_admin,
        run: args.run,
        target: args.target,
    })
    .await
}

/// One run's walks of `me`'s `threads` (a server on the built store), the first one checked.
pub(super) async fn walk(args: &InboxArgs, plan: &Plan, server: &Server) -> anyhow::Result<Value> {
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let path = Server::ws_path(&args.target.workspace);
    let mut me = Client::connect(server.addr, &path, std::net::Ipv4Addr::LOCALHOST).await?;
    me.hello(&signer.token(ME)?).await?;
    let expected: HashMap<(String, u64), u64> = (0..plan.chats)
        .filter(|&i| plan.mine(i))
        .flat_map(|i| plan.threads_of(i).into_iter().map(move |(root, unread)| ((Plan::name(i), root), unread)))
        .collect();
    let (mut whole, mut page) = (Latencies::default(), Latencies::default());
    let (mut exact, mut listed, mut pages) = (true, 0usize, 0u32);
    for read in 0..args.reads {
        let started = Instant::now();
        let seen;
        (seen, pages) = walk_pages(&mut page, async |cursor| {
            let got = me.threads(args.limit, cursor).await?;
            Ok(Page { entries: got.threads, more: got.more, cursor: got.cursor })
        })
        .await?;
        whole.record(started.elapsed());
        if read == 0 {
            listed = seen.len();
            let key =
                |e: &herald_protocol::reply::ThreadEntry| (std::cmp::Reverse(e.last.ts), e.chat.clone(), e.root.seq);
            let ordered = seen.windows(2).all(|w| key(&w[0]) < key(&w[1]));
            let wrong = seen.iter().find(|e| expected.get(&(e.chat.clone(), e.root.seq)) != Some(&e.unread));
            if let Some(e) = wrong {
                let planned = expected.get(&(e.chat.clone(), e.root.seq));
                eprintln!("threads: {} root {} says unread {}, planned {planned:?}", e.chat, e.root.seq, e.unread);
            }
            exact = ordered && wrong.is_none() && seen.len() == expected.len();
            if !exact {
                eprintln!("threads: ordered {ordered}, {} listed of {} planned", seen.len(), expected.len());
            }
        }
    }
    me.close().await;
    let (w, p) = (whole.summary(), page.summary());
    Ok(json!({
        "threads_listed": listed,
        "threads_pages": pages,
        "threads_p50_ms": w.p50_ms,
        "threads_p99_ms": w.p99_ms,
        "threads_page_p50_ms": p.p50_ms,
        "threads_page_p99_ms": p.p99_ms,
        "threads_exact": exact,
        "failed": if exact { 0 } else { 1 },
    }))
}
