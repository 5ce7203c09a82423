//! The `cell` scenario: a whole cell on this machine under a modelled load.
//! It starts three routed NATS servers and the PostgreSQL shards (`spawn`),
//! N herald nodes joined over them, and load workers in processes of their
//! own (`worker`, each under the 20,000 open files a process may hold) whose
//! users follow the model of `workload`: direct messages, groups, a few large
//! channels, each user in several chats with one open, live inboxes, and
//! messages, typing, reads and reactions at a steady total rate. It reads
//! the cell before and during the load (`probe`) and reports (`report`):
//! connections held, send-to-delivery latency on the same node and across
//! nodes, server CPU per delivered push, memory per connection, NATS and
//! PostgreSQL rates, and whether every message reached every watcher once.
//! Everything it starts is stopped by pid at the end, on an error, and on
//! Ctrl-C, and its temp dirs removed. `--smoke` is a tiny cell that fails
//! unless delivery was exact. A bad day (`fault`): `--kill-node I` kills a
//! node under the load, `--roll` restarts every node in turn; the users
//! resume on other nodes and delivery must stay exact; `--smoke-bad-day` is
//! a small roll that fails unless it does. `--peer socketio` runs the same
//! model and load on Socket.IO nodes over Redis instead (`sio`).

mod fault;
mod follow;
mod members;
mod probe;
mod report;
mod resume;
mod session;
pub mod sio;
mod spawn;
mod tally;
mod timeline;
mod wire;
pub mod worker;
mod workload;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Args;
use serde::Serialize;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::client::{fresh_sources, sources_for};
use crate::machine::rss_kib;
use crate::peer::Peer;
use crate::preload;
use crate::server::{Server, TargetArgs};
use crate::worker::SECRET_ENV;
use spawn::Services;
use tally::Sum;
use worker::Line;
use workload::{ModelArgs, Plan};

/// Most users one worker holds: well under the 20,000 open files per process.
const MAX_PER_WORKER: usize = 15_000;
/// Most connections one node holds: its 20,000 files less its shards' pools, NATS and its own files.
const MAX_PER_NODE: usize = 19_000;
/// Nodes hear each other's announcements (every second) before the load starts.
const ANNOUNCE_SETTLE: Duration = Duration::from_millis(1500);
/// Memory settles this long after the last user opened its chat.
const SETTLE: Duration = Duration::from_secs(1);
/// A worker's step gets this long on top of its own bounds before it counts as hung.
const WORKER_SLACK: Duration = Duration::from_secs(60);
/// Joins per second the setup's bound assumes at the least (this machine did 1,150 to 1,800).
const JOIN_RATE_FLOOR: f64 = 500.0;
/// Time a worker gets to exit after `stop`.
const WORKER_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// The bad-day smoke's drain window: short, so that three drains fit a short load.
const SMOKE_DRAIN_MS: u64 = 2000;

/// `herald-bench cell`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct CellArgs {
    /// The servers: herald's cell, or Socket.IO nodes over one Redis (@socket.io/redis-adapter),
    /// the same model and load (see `cell/sio.rs` for what maps to what).
    #[arg(long, value_enum, default_value_t = Peer::Herald)]
    pub peer: Peer,
    /// herald nodes (each holds connections / nodes users, at most 19,000).
    #[arg(long, default_value_t = 3)]
    pub nodes: usize,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Messages per second, the whole cell (each after a typing; as many reads, a fifth as many reactions).
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Seconds of load.
    #[arg(long, default_value_t = 30.0)]
    pub secs: f64,
    /// PostgreSQL shards, a server each.
    #[arg(long, default_value_t = 2)]
    pub shards: usize,
    /// Seconds after the load for the last pushes to arrive.
    #[arg(long, default_value_t = 3.0)]
    pub drain_s: f64,
    /// Load processes [default: one per 15,000 users, at least 2].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Users connected (hello and joins) per second, all workers together.
    #[arg(long, default_value_t = 1000.0)]
    pub connect_rate: f64,
    /// Users connecting at once, all workers together.
    #[arg(long, default_value_t = 128)]
    pub concurrency: usize,
    /// Users opening their chat (watch, presence, live inbox) at once, all workers together
    /// [default: 32 per herald worker, 64 per Socket.IO worker].
    #[arg(long)]
    pub open_concurrency: Option<usize>,
    /// No user starts connecting after this many seconds [default: twice the connects at
    /// --connect-rate, plus the joins at 500/s, plus a minute].
    #[arg(long)]
    pub setup_s: Option<f64>,
    /// Writes every membership into the shards through herald's store API before the nodes start
    /// (`members`), so users only connect and open their chat: a large cell's setup.
    #[arg(long)]
    pub preload: bool,
    /// The repository's pg.sh, which starts and stops the PostgreSQL servers.
    #[arg(long, default_value = "scripts/pg.sh")]
    pub pg_script: PathBuf,
    /// A tiny cell (2 nodes, 200 users, 1 shard, 20 messages/s for 10 s) that fails unless every
    /// message reached every watcher once.
    #[arg(long)]
    pub smoke: bool,
    #[command(flatten)]
    pub fault: fault::FaultArgs,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    #[serde(skip)]
    pub json: bool,
    #[command(flatten)]
    pub target: TargetArgs,
}

impl CellArgs {
    fn apply_smoke(&mut self) {
        self.nodes = 2;
        self.model.connections = 200;
        self.model.channels = 1;
        self.shards = 1;
        self.rate = 20.0;
        self.secs = 10.0;
        self.drain_s = 2.0;
        self.workers = Some(2);
    }

    /// The bad-day smoke: three nodes (a drained node's users have two to go to), a roll with
    /// drains of 2 s, and the load long enough to span it.
    fn apply_smoke_bad_day(&mut self) {
        self.apply_smoke();
        self.nodes = 3;
        self.model.connections = 300;
        self.secs = 16.0;
        self.fault.roll = true;
        self.fault.kill_node = None;
        self.fault.fault_at_s = 2.0;
        self.fault.roll_pause_s = 1.0;
        self.target.server_args.push(format!("--drain-window-ms={SMOKE_DRAIN_MS}"));
    }

    fn workers(&self) -> usize {
        let users = self.model.connections;
        self.workers.unwrap_or(2).max(users.div_ceil(MAX_PER_WORKER)).min(users.max(1))
    }
}

/// Runs the cell once and reports.
pub async fn run(mut args: CellArgs) -> anyhow::Result<Vec<Value>> {
    if args.fault.smoke_bad_day {
        args.apply_smoke_bad_day();
    } else if args.smoke {
        args.apply_smoke();
    }
    if args.peer == Peer::Socketio {
        return sio::run(args).await;
    }
    ensure!(args.peer == Peer::Herald, "cell runs herald or --peer socketio");
    let users = args.model.connections;
    ensure!(args.target.starts_server(), "cell starts its own nodes");
    ensure!(args.nodes > 0 && users > 0, "--nodes and --connections must be positive");
    ensure!(users.div_ceil(args.nodes) <= MAX_PER_NODE, "at most {MAX_PER_NODE} connections per node: add --nodes");
    ensure!(users.div_ceil(args.workers()) <= MAX_PER_WORKER, "at most {MAX_PER_WORKER} users per worker");
    ensure!(args.shards > 0 && args.secs > 0.0 && args.secs <= 3600.0, "--shards positive, --secs up to 3600");
    ensure!(args.rate >= 0.0 && args.connect_rate > 0.0, "--rate and --connect-rate must not be negative");
    ensure!(!args.fault.any() || args.nodes > 1, "a bad day needs a second node for the users to go to");
    ensure!(args.fault.kill_node.is_none_or(|i| i < args.nodes), "--kill-node is past --nodes");
    ensure!((0.0..=1.0).contains(&args.model.active), "--active is a share of the users, 0 to 1");
    let out = tokio::select! {
        r = run_cell(&args) => r?,
        _ = interrupted() => bail!("interrupted: the cell's processes were stopped"),
    };
    report::emit(&args, &out);
    if !args.json {
        fault::print(&out);
    }
    if args.smoke || args.fault.smoke_bad_day {
        report::check_exact(&out).map_err(|why| anyhow::anyhow!("cell smoke failed: {why}"))?;
        eprintln!("cell smoke: every message reached every watcher once");
    }
    if args.fault.smoke_bad_day {
        fault::check_resumed(&out).map_err(|why| anyhow::anyhow!("cell bad-day smoke failed: {why}"))?;
        eprintln!("cell bad-day smoke: every session resumed on another node through the roll");
    }
    Ok(vec![out])
}

/// A started worker: its process and its stdout lines.
struct Worker {
    child: Child,
    pid: u32,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    async fn tell(&mut self, word: &str) -> anyhow::Result<()> {
        let stdin = self.child.stdin.as_mut().context("the worker's stdin")?;
        stdin.write_all(format!("{word}\n").as_bytes()).await?;
        Ok(stdin.flush().await?)
    }

    async fn line(&mut self, within: Duration) -> anyhow::Result<Line> {
        let line = tokio::time::timeout(within, self.lines.next_line())
            .await
            .with_context(|| format!("worker {} gave no answer in {within:?}", self.pid))??
            .with_context(|| format!("worker {} exited", self.pid))?;
        serde_json::from_str(&line).with_context(|| format!("worker {} said {line}", self.pid))
    }
}

/// Starts the cell, loads it, reads it, stops it; the run's figures.
async fn run_cell(args: &CellArgs) -> anyhow::Result<Value> {
    let t = Instant::now();
    let plan = Plan::build(&args.model);
    eprintln!(
        "cell: model of {} users: {} chats, {} memberships",
        args.model.connections,
        plan.chats.len(),
        plan.memberships()
    );
    let services = Services::start(&args.pg_script, args.shards).await?;
    if args.preload {
        let (n, secs) = members::preload(&services.stores, &args.target.workspace, &plan).await?;
        eprintln!("cell: {n} memberships preloaded in {secs:.1} s ({:.0}/s)", n as f64 / secs);
    }
    let flags: Vec<Vec<String>> = (0..args.nodes).map(|i| node_flags(&services, i)).collect();
    let (mut nodes, target) = start_nodes(args, &flags).await?;
    let pids: Vec<u32> = nodes.iter().map(|n| n.pid).collect();
    tokio::time::sleep(ANNOUNCE_SETTLE).await;
    let base = probe::read(&services, &pids).await;
    eprintln!(
        "cell: {} nodes, 3 NATS servers, {} shards up in {:.1} s",
        nodes.len(),
        args.shards,
        t.elapsed().as_secs_f64()
    );

    let addrs: Vec<String> = nodes.iter().map(|n| n.addr.to_string()).collect();
    let secret = &nodes[0].jwt_secret;
    let mut workers = spawn_workers(args, "cell-worker", &addrs, secret, connect_deadline_s(args, &plan))?;
    let connect_bound = Duration::from_secs_f64(connect_deadline_s(args, &plan)) + WORKER_SLACK;
    let mut joined = report::Setup::default();
    for w in &mut workers {
        match w.line(connect_bound).await? {
            Line::Joined { rss_start_kib, established, failures, secs } => {
                joined.add(established, &failures, secs, rss_start_kib)
            }
            other => bail!("worker {} said {other:?} before joining", w.pid),
        }
    }
    eprintln!("cell: {} users connected and joined in {:.1} s", joined.count, joined.secs);
    for w in &mut workers {
        w.tell("open").await?;
    }
    let mut opened = report::Setup::default();
    for w in &mut workers {
        match w.line(connect_bound).await? {
            Line::Opened { watching, failures, secs } => opened.add(watching, &failures, secs, 0),
            other => bail!("worker {} said {other:?} before opening", w.pid),
        }
    }
    eprintln!("cell: {} users watching their open chat in {:.1} s", opened.count, opened.secs);
    tokio::time::sleep(SETTLE).await;
    let held = probe::read(&services, &pids).await;
    let mut node_conns = Vec::new();
    for n in &nodes {
        node_conns.push(n.connections().await.ok().flatten().unwrap_or(0));
    }
    let client_rss_kib: u64 = workers.iter().filter_map(|w| rss_kib(w.pid)).sum();

    for w in &mut workers {
        w.tell("go").await?;
    }
    let (load_start, load_start_us) = (Instant::now(), follow::now_us());
    eprintln!("cell: load for {} s at {} messages/s", args.secs, args.rate);
    let start = probe::read(&services, &pids).await;
    let (faulted, ()) = tokio::join!(
        fault::drive(&args.fault, &mut nodes, &target, &flags, load_start),
        tokio::time::sleep(Duration::from_secs_f64(args.secs))
    );
    let faulted = faulted?;
    // A restarted node is another process: its CPU is not the one read at the start.
    let end = probe::read(&services, &pids).await;
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
    let mut logs = faulted.logs.clone();
    for n in nodes {
        logs.push(n.stop().await?);
    }
    drop(services);
    let readings = report::Readings { base: &base, held: &held, start: &start, end: &end };
    let inputs = report::Inputs {
        args,
        plan: &plan,
        joined: &joined,
        opened: &opened,
        node_conns: &node_conns,
        client_rss_kib,
        sum: &sum,
    };
    let mut out = report::figures(&inputs, &readings);
    out["bad_day"] = fault::figures(&faulted, &sum, load_start_us);
    out["server_logs"] = serde_json::to_value(logs)?;
    Ok(out)
}

/// The setup's bound, in seconds: `--setup-s`, or twice the planned connect time plus the joins
/// at [`JOIN_RATE_FLOOR`], plus a margin.
fn connect_deadline_s(args: &CellArgs, plan: &Plan) -> f64 {
    args.setup_s.unwrap_or_else(|| {
        let joins = if args.preload { 0 } else { plan.memberships() };
        args.model.connections as f64 / args.connect_rate * 2.0 + joins as f64 / JOIN_RATE_FLOOR + 60.0
    })
}

/// Node `i`'s flags: its name, on every shard and the NATS cluster (a restart uses them again).
fn node_flags(services: &Services, i: usize) -> Vec<String> {
    let mut flags =
        vec![format!("--node=cell-{i}"), "--rebalance=false".into(), format!("--broker={}", services.broker())];
    for s in &services.stores {
        flags.push(format!("--store={s}"));
    }
    flags
}

/// Starts the nodes with `flags`, with the first one's secrets; the nodes and the target that
/// carries those secrets (to restart one).
async fn start_nodes(args: &CellArgs, flags: &[Vec<String>]) -> anyhow::Result<(Vec<Server>, TargetArgs)> {
    let mut target = args.target.clone();
    let mut nodes: Vec<Server> = Vec::new();
    for (i, flags) in flags.iter().enumerate() {
        let node = Server::open(&target, flags).await.with_context(|| format!("starting node {i}"))?;
        target.jwt_secret = Some(node.jwt_secret.clone());
        target.api_key = node.api_key.clone();
        nodes.push(node);
    }
    for n in &nodes {
        preload::wait_ready(n).await?;
    }
    Ok((nodes, target))
}

/// Starts the load workers (`command`: herald's `cell-worker` or Socket.IO's `cell-sio-worker`),
/// each with a share of the users and sources of its own, towards the nodes at `addrs`.
fn spawn_workers(
    args: &CellArgs,
    command: &str,
    addrs: &[String],
    secret: &str,
    deadline_s: f64,
) -> anyhow::Result<Vec<Worker>> {
    let users = args.model.connections;
    let count = args.workers();
    let per = users.div_ceil(count);
    let base = fresh_sources(0, 0);
    let exe = std::env::current_exe()?;
    let m = &args.model;
    let mut out = Vec::new();
    for w in 0..count {
        let first = w * per;
        let n = per.min(users.saturating_sub(first));
        if n == 0 {
            break;
        }
        let share = n as f64 / users as f64;
        let mut child = Command::new(&exe)
            .arg(command)
            .args(["--connections", &users.to_string(), "--seed", &m.seed.to_string()])
            .args(["--dms-per-user", &m.dms_per_user.to_string(), "--groups-per-user", &m.groups_per_user.to_string()])
            .args(["--channels", &m.channels.to_string(), "--active", &m.active.to_string()])
            .args(["--nodes", &addrs.join(","), "--workspace", &args.target.workspace])
            .args(["--first", &first.to_string(), "--count", &n.to_string()])
            .args(["--rate", &(args.rate * share).to_string(), "--secs", &args.secs.to_string()])
            .args(["--drain-s", &args.drain_s.to_string()])
            .args(["--connect-rate", &(args.connect_rate * share).to_string()])
            .args(["--concurrency", &((args.concurrency as f64 * share).ceil() as usize).max(1).to_string()])
            .args(["--source-offset", &(base + w as u32 * sources_for(per)).to_string()])
            .args(["--deadline-s", &deadline_s.to_string()])
            .args((args.preload && args.peer == Peer::Herald).then_some("--preloaded"))
            .args(args.open_concurrency.map(|c| format!("--open-concurrency={}", (c as f64 * share).ceil().max(1.0))))
            .env(SECRET_ENV, secret)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting a load worker")?;
        let pid = child.id().context("a worker exited at once")?;
        let lines = BufReader::new(child.stdout.take().context("piped stdout")?).lines();
        out.push(Worker { child, pid, lines });
    }
    Ok(out)
}

/// Ctrl-C or SIGTERM: either stops the cell, so that nothing it started outlives it (the
/// processes and temp dirs are dropped with the run's future).
async fn interrupted() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
