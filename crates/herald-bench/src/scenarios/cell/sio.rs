//! `cell --peer socketio`: the cell's model and load on Socket.IO v4 nodes
//! joined by one Redis (@socket.io/redis-adapter), the largest peer setup a
//! chat server is usually built from. It starts a `redis-server` and
//! `--nodes` Node processes of `bench/peers/socketio/server.js` (each its own
//! port and its own single thread), and load workers (`cell-sio-worker`,
//! `worker`) whose users follow the same plan, seed and per-second mix as
//! herald's cell. What maps to what:
//!
//! - a membership (herald's `join`) is the room `m:CHAT`; the open chat's
//!   watch is the room `w:CHAT`. Both in memory only: Socket.IO has no
//!   storage, so nothing is durable, nothing replays, and a message's ack
//!   says that its node emitted it (into Redis), not that it was stored;
//! - a message is the event `cell` `msg` with an ack, emitted to every
//!   watcher (the sender's own connection too); typing goes to the other
//!   watchers; a read and a reaction are emitted to the watchers as herald
//!   pushes them as events (no read state, no reaction kept);
//! - the live inbox: a message, read or reaction marks its chat, and the
//!   node emits `inbox` to `m:CHAT` at most once per 250 ms per chat, as
//!   herald coalesces its inbox pushes (per chat per node here, herald per
//!   chat per connection). No unread counts: there is nothing to count from;
//! - presence is left out (Socket.IO has none): the users ask none.
//!
//! What it reports beside herald's cell: connections held, send-to-delivery
//! p50/p99/p99.9 same node and across nodes, send-to-ack, deliveries owed
//! (every acked message to every watcher) against those received once,
//! CPU of the nodes and of Redis per push and per message delivery, memory
//! per connection of the nodes, Redis, the kernel and the workers.
//! Everything it starts is stopped by pid. `--smoke` is herald's smoke size
//! (2 nodes, 200 users, 20 messages/s for 10 s) and fails unless every
//! message reached every watcher once; it needs Node, the peer's npm
//! packages and `redis-server`, which the test suite does not install.

mod report;
mod servers;
mod session;
pub mod worker;

use std::time::{Duration, Instant};

use anyhow::{bail, ensure};

use super::tally::Sum;
use super::worker::Line;
use super::workload::Plan;
use super::{CellArgs, MAX_PER_NODE, MAX_PER_WORKER, SETTLE, WORKER_SLACK, WORKER_STOP_TIMEOUT};
use super::{connect_deadline_s, report::Setup, spawn_workers};
use crate::machine::rss_kib;
use servers::Servers;

/// Nodes connect to Redis and settle before the users come.
const NODES_SETTLE: Duration = Duration::from_millis(500);

/// Runs the Socket.IO cell once and reports.
pub async fn run(mut args: CellArgs) -> anyhow::Result<Vec<serde_json::Value>> {
    ensure!(!args.fault.smoke_bad_day && !args.fault.any(), "--peer socketio has no bad day");
    if args.smoke {
        args.apply_smoke();
    }
    let users = args.model.connections;
    ensure!(args.nodes > 0 && users > 0, "--nodes and --connections must be positive");
    ensure!((0.0..=1.0).contains(&args.model.active), "--active is a share of the users, 0 to 1");
    ensure!(users.div_ceil(args.nodes) <= MAX_PER_NODE, "at most {MAX_PER_NODE} connections per node: add --nodes");
    ensure!(users.div_ceil(args.workers()) <= MAX_PER_WORKER, "at most {MAX_PER_WORKER} users per worker");
    ensure!(args.secs > 0.0 && args.secs <= 3600.0, "--secs up to 3600");
    ensure!(args.rate >= 0.0 && args.connect_rate > 0.0, "--rate and --connect-rate must not be negative");
    let out = tokio::select! {
        r = run_cell(&args) => r?,
        _ = super::interrupted() => bail!("interrupted: the cell's processes were stopped"),
    };
    report::emit(&args, &out);
    if args.smoke {
        report::check_exact(&out).map_err(|why| anyhow::anyhow!("socket.io cell smoke failed: {why}"))?;
        eprintln!("socket.io cell smoke: every message reached every watcher once");
    }
    Ok(vec![out])
}

async fn run_cell(args: &CellArgs) -> anyhow::Result<serde_json::Value> {
    let t = Instant::now();
    let plan = Plan::build(&args.model);
    eprintln!(
        "cell (socket.io): model of {} users: {} chats, {} memberships",
        args.model.connections,
        plan.chats.len(),
        plan.memberships()
    );
    let servers = Servers::start(args.nodes).await?;
    tokio::time::sleep(NODES_SETTLE).await;
    let base = servers.read();
    eprintln!("cell (socket.io): {} nodes and Redis up in {:.1} s", args.nodes, t.elapsed().as_secs_f64());

    let deadline = connect_deadline_s(args, &plan);
    let mut workers = spawn_workers(args, "cell-sio-worker", &servers.addrs(), "", deadline)?;
    let bound = Duration::from_secs_f64(deadline) + WORKER_SLACK;
    let mut joined = Setup::default();
    for w in &mut workers {
        match w.line(bound).await? {
            Line::Joined { rss_start_kib, established, failures, secs } => {
                joined.add(established, &failures, secs, rss_start_kib)
            }
            other => bail!("worker {} said {other:?} before joining", w.pid),
        }
    }
    eprintln!("cell (socket.io): {} users connected and in their rooms in {:.1} s", joined.count, joined.secs);
    for w in &mut workers {
        w.tell("open").await?;
    }
    let mut opened = Setup::default();
    for w in &mut workers {
        match w.line(bound).await? {
            Line::Opened { watching, failures, secs } => opened.add(watching, &failures, secs, 0),
            other => bail!("worker {} said {other:?} before opening", w.pid),
        }
    }
    eprintln!("cell (socket.io): {} users in their open chat's room in {:.1} s", opened.count, opened.secs);
    tokio::time::sleep(SETTLE).await;
    let held = servers.read();
    let client_rss_kib: u64 = workers.iter().filter_map(|w| rss_kib(w.pid)).sum();

    for w in &mut workers {
        w.tell("go").await?;
    }
    eprintln!("cell (socket.io): load for {} s at {} messages/s", args.secs, args.rate);
    let start = servers.read();
    tokio::time::sleep(Duration::from_secs_f64(args.secs)).await;
    let end = servers.read();
    let mut sum = Sum::default();
    let done_bound = Duration::from_secs_f64(args.drain_s) + WORKER_SLACK;
    for w in &mut workers {
        match w.line(done_bound).await? {
            Line::Done(c) => sum.add(*c),
            other => bail!("worker {} said {other:?} at the end", w.pid),
        }
    }
    for w in &mut workers {
        let _ = w.tell("stop").await;
        if tokio::time::timeout(WORKER_STOP_TIMEOUT, w.child.wait()).await.is_err() {
            w.child.kill().await?;
        }
    }
    let logs = servers.stop().await;
    let inputs = report::Inputs { args, plan: &plan, joined: &joined, opened: &opened, client_rss_kib, sum: &sum };
    let mut out = report::figures(&inputs, [&base, &held, &start, &end]);
    out["server_logs"] = serde_json::json!(logs);
    Ok(out)
}
