//! The `idle` scenario: memory per idle connection. N clients hello, join and
//! watch one of M chats, then sit still; the server's RSS before any client
//! and after all are open and settled gives its cost per connection.
//!
//! The clients live in worker processes (see `worker`), each under the
//! 20,000 open files a process may hold, on loopback source addresses of
//! their own. This file spawns them, samples memory and tears everything down.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::client::sources_for;
use crate::fleet::{ATTEMPT_TIMEOUT, Failures};
use crate::machine::rss_kib;
use crate::peer::Peer;
use crate::report::{self, Column, RunArgs, col};
use crate::server::{Server, TargetArgs};
use crate::target::Target;
use crate::worker::{Established, Released, SECRET_ENV, Until};

/// Most clients one worker holds: well under the 20,000 open files per process.
const MAX_PER_WORKER: usize = 15_000;
/// A fresh server's memory settles this long before the first sample.
const BASELINE_SETTLE: Duration = Duration::from_secs(1);
/// Time a worker gets to answer "stop" and exit.
const WORKER_STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Slack on top of the connect phase's own bounds before a worker counts as hung.
const WORKER_SLACK: Duration = Duration::from_secs(10);
/// A running server (not started here) gets this long to close the previous run's clients.
const BETWEEN_RUNS: Duration = Duration::from_secs(3);

/// `herald-bench idle`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct IdleArgs {
    /// Clients to open.
    #[arg(long)]
    pub conns: usize,
    /// Chats the clients are spread over (each joins and watches one).
    #[arg(long, default_value_t = 100)]
    pub chats: usize,
    /// Client processes [default: one per 15,000 clients, and at least 2].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Connects per second, all workers together.
    #[arg(long, default_value_t = 2000.0)]
    pub connect_rate: f64,
    /// Connects in flight, all workers together.
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// How far each client goes before it holds.
    #[arg(long, value_enum, default_value_t = Until::Watch)]
    pub until: Until,
    /// Seconds between the last client opening and the memory sample.
    #[arg(long, default_value_t = 5.0)]
    pub settle_s: f64,
    /// The server measured: herald or a peer (see `bench/peers`).
    #[arg(long, value_enum, default_value_t = Peer::Herald)]
    pub peer: Peer,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("established", "conns"),
    col("failed", "failed"),
    col("server_conns", "srv conns"),
    col("connect_s", "connect s"),
    col("server_rss_before_kib", "srv RSS0 KiB"),
    col("server_rss_after_kib", "srv RSS KiB"),
    col("server_kb_per_conn", "srv KB/conn"),
    col("client_rss_kib", "client RSS KiB"),
    col("client_kb_per_conn", "client KB/conn"),
    col("dropped", "dropped"),
];

/// Runs the scenario `args.run.runs` times and reports.
pub async fn run(args: IdleArgs) -> anyhow::Result<Vec<Value>> {
    let workers = workers_for(&args)?;
    let runs = report::repeat(&args.run, |r| {
        let args = &args;
        async move {
            if r > 0 && !args.target.starts_server() {
                tokio::time::sleep(BETWEEN_RUNS).await;
            }
            run_once(args, workers, r).await
        }
    })
    .await?;
    let mut params = serde_json::to_value(&args)?;
    params["workers"] = json!(workers);
    report::emit("idle", &params, &runs, COLUMNS, args.run.json);
    if !args.run.json {
        println!(
            "KB = 1024 bytes, as /proc reports VmRSS. Per connection: the RSS growth divided by the clients established \
             (server: from before the first client; clients: from each worker's start)."
        );
    }
    Ok(runs)
}

/// Worker processes for `args`, checked.
pub fn workers_for(args: &IdleArgs) -> anyhow::Result<usize> {
    anyhow::ensure!(args.conns > 0 && args.chats > 0, "--conns and --chats must be positive");
    anyhow::ensure!(
        args.peer == Peer::Herald || args.until == Until::Watch,
        "--until is for herald only (a peer's clients always join a room)"
    );
    let workers = args.workers.unwrap_or(2).max(args.conns.div_ceil(MAX_PER_WORKER));
    anyhow::ensure!(
        args.conns.div_ceil(workers) <= MAX_PER_WORKER,
        "{workers} workers would hold more than {MAX_PER_WORKER} clients each"
    );
    Ok(workers)
}

/// A started worker: its process and its stdout lines.
struct Worker {
    child: Child,
    pid: u32,
    lines: Lines<BufReader<ChildStdout>>,
}

/// One run; `run` numbers it among all runs of the process (it picks the source addresses).
pub async fn run_once(args: &IdleArgs, workers: usize, run: u32) -> anyhow::Result<Value> {
    let server = Target::start(args.peer, &args.target, &[]).await?;
    let jwt_secret = server.jwt_secret();
    tokio::time::sleep(BASELINE_SETTLE).await;
    let rss_before = server.rss_kib()?;
    let path = Server::ws_path(&args.target.workspace);
    // Each run takes fresh source addresses: the last run's sockets may linger in TIME_WAIT.
    let source_offset = run * sources_for(args.conns);
    let per_worker = args.conns.div_ceil(workers);
    let connect_time = args.conns as f64 / args.connect_rate;
    // Twice the planned connect time, plus a margin: a slow server still gets its chance, but bounded.
    let deadline_s = connect_time * 2.0 + 30.0;
    let exe = std::env::current_exe()?;
    let mut pool = Vec::new();
    for w in 0..workers {
        let first = w * per_worker;
        let count = per_worker.min(args.conns.saturating_sub(first));
        if count == 0 {
            break;
        }
        let mut child = Command::new(&exe)
            .arg("worker")
            .args(["--server", &server.addr().to_string(), "--path", &path, "--workspace", &args.target.workspace])
            .args(["--chats", &args.chats.to_string(), "--first", &first.to_string(), "--count", &count.to_string()])
            .args(["--rate", &(args.connect_rate / workers as f64).to_string()])
            .args(["--concurrency", &(args.concurrency / workers).max(1).to_string()])
            .args(["--source-offset", &source_offset.to_string(), "--deadline-s", &deadline_s.to_string()])
            .args(["--until", args.until.as_str(), "--peer", args.peer.as_str()])
            .env(SECRET_ENV, &jwt_secret)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting a worker")?;
        let pid = child.id().context("worker exited at once")?;
        let lines = BufReader::new(child.stdout.take().context("piped stdout")?).lines();
        pool.push(Worker { child, pid, lines });
    }

    let mut established = 0;
    let mut failures = Failures::default();
    let mut connect_s: f64 = 0.0;
    let mut client_rss_start = 0;
    let wait = Duration::from_secs_f64(deadline_s) + ATTEMPT_TIMEOUT + WORKER_SLACK;
    for w in &mut pool {
        let line =
            tokio::time::timeout(wait, w.lines.next_line()).await.context("a worker hung while connecting")??;
        let e: Established = serde_json::from_str(&line.context("a worker exited while connecting")?)?;
        established += e.established;
        client_rss_start += e.rss_start_kib;
        failures.merge(&e.failures);
        connect_s = connect_s.max(e.connect_s);
    }
    tokio::time::sleep(Duration::from_secs_f64(args.settle_s)).await;
    let rss_after = server.rss_kib()?;
    let server_conns = match &server {
        Target::Herald(s) => s.connections().await.ok().flatten(),
        Target::Peer(_) => None,
    };
    let client_rss: u64 = pool.iter().filter_map(|w| rss_kib(w.pid)).sum();

    let mut dropped = 0;
    for mut w in pool {
        dropped += stop_worker(&mut w).await?.dropped;
    }
    let log = server.stop().await?;
    let per_conn = |kib: u64| if established == 0 { Value::Null } else { json!(kib as f64 / established as f64) };
    Ok(json!({
        "peer": args.peer.as_str(),
        "conns": args.conns,
        "established": established,
        "failed": failures.total,
        "failures": failures,
        "server_conns": server_conns,
        "connect_s": connect_s,
        "server_rss_before_kib": rss_before,
        "server_rss_after_kib": rss_after,
        "server_kb_per_conn": per_conn(rss_after.saturating_sub(rss_before)),
        "client_rss_kib": client_rss,
        "client_rss_start_kib": client_rss_start,
        "client_kb_per_conn": per_conn(client_rss.saturating_sub(client_rss_start)),
        "dropped": dropped,
        "server_log": log,
    }))
}

/// Tells a worker to let go, reads its last line and waits for it to exit (killing it if it does not).
async fn stop_worker(w: &mut Worker) -> anyhow::Result<Released> {
    if let Some(mut stdin) = w.child.stdin.take() {
        let _ = stdin.write_all(b"stop\n").await;
    }
    let line = tokio::time::timeout(WORKER_STOP_TIMEOUT, w.lines.next_line()).await;
    let released = match line {
        Ok(Ok(Some(l))) => serde_json::from_str(&l)?,
        _ => {
            w.child.kill().await?;
            bail!("worker {} did not answer stop", w.pid);
        }
    };
    if tokio::time::timeout(WORKER_STOP_TIMEOUT, w.child.wait()).await.is_err() {
        w.child.kill().await?;
    }
    Ok(released)
}
