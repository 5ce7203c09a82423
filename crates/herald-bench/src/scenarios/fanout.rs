//! The `fanout` scenario: one chat (herald chat, Socket.IO room, NATS subject),
//! S watchers, P publishers publishing at a rising rate in steps. A step passes
//! when every watcher got every message of the step (herald: by seq, no gap;
//! peers: by a per-publisher counter in the payload, none missing or out of
//! order), the publishers kept the offered rate, and the last delivery came
//! within `--drain-ms` of the last publish (the server kept up). The figure is
//! the delivered msgs/s (messages × watchers per second) of the highest step
//! that passed; then a phase at half that rate gives publish-to-receive
//! latency (the publish time travels in the payload; every client lives in
//! this process, so one clock). Server CPU comes from `/proc/PID/stat`.
//!
//! Herald's publishers `send` (durable, acked) and wait for each ack;
//! Socket.IO's emit with an ack and wait for it; NATS has no ack (PUB and go).
//! The publishers, watchers and phases are the shared `pubsub`'s; the ladder,
//! its verdicts and the store's times are this file's.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{fresh_chat, sources_for};
use crate::conn::Conn;
use crate::fleet::Failures;
use crate::peer::{Peer, PeerServer};
use crate::pubsub::{Crowd, LATENCY_STEP, MAX_STEPS, Shared, open_all, phase, watch_loop};
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, Server, TargetArgs};
use crate::target::Target;

/// Pause between steps, so one step's backlog is not the next one's.
const BETWEEN_STEPS: Duration = Duration::from_millis(300);
/// Most watchers: one process, under its 20,000 open files.
const MAX_WATCHERS: usize = 15_000;

/// `herald-bench fanout`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct FanoutArgs {
    /// Watchers of the one chat.
    #[arg(long, default_value_t = 1000)]
    pub watchers: usize,
    /// Publishers (connections), sharing the rate. Each waits for its last
    /// publish's ack (herald, Socket.IO), so enough of them that ack latency
    /// does not cap the rate offered.
    #[arg(long, default_value_t = 16)]
    pub publishers: usize,
    /// Deliveries/s (msgs/s × watchers) offered in the first step.
    #[arg(long, default_value_t = 10_000.0)]
    pub start: f64,
    /// Each step offers this many times the last.
    #[arg(long, default_value_t = 1.4)]
    pub factor: f64,
    /// Most steps.
    #[arg(long, default_value_t = 14)]
    pub steps: usize,
    /// Seconds each step publishes.
    #[arg(long, default_value_t = 2.0)]
    pub step_s: f64,
    /// Seconds of the latency phase (at half the highest passing rate).
    #[arg(long, default_value_t = 4.0)]
    pub latency_s: f64,
    /// Messages/s of the latency phase instead of half the highest passing
    /// rate (with `--steps 0`: latency at a given load, no ladder).
    #[arg(long)]
    pub latency_rate: Option<f64>,
    /// A step fails when its last delivery comes later than this after its last publish.
    #[arg(long, default_value_t = 500)]
    pub drain_ms: u64,
    /// The server measured: herald or a peer.
    #[arg(long, value_enum, default_value_t = Peer::Herald)]
    pub peer: Peer,
    /// herald: a watcher that gets `notify`, or sees a gap, fetches the
    /// events it lacks and counts them as delivered. For runs with hot-chat
    /// coalescing on (`--server-arg=--hot-chat-deliveries=N`); without it a
    /// gap counts as loss.
    #[arg(long)]
    pub fetch_on_notify: bool,
    /// Server nodes: 2 puts the publishers on node A and the watchers on node B (cross-node fan-out).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub nodes: u8,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("watchers_ok", "watchers"),
    col("failed", "failed"),
    col("steps_passed", "steps ok"),
    col("max_msgs_per_s", "msgs/s"),
    col("max_deliveries_per_s", "deliveries/s"),
    col("server_cores_at_max", "srv cores"),
    col("server_us_per_delivery", "srv us/deliv"),
    col("first_fail", "first failing step"),
    col("latency_deliveries_per_s", "half rate deliv/s"),
    col("p50_ms", "p50 ms"),
    col("p99_ms", "p99 ms"),
    col("p999_ms", "p99.9 ms"),
    col("latency_lost", "lost at half"),
    col("store_write_ms", "store wait ms"),
    col("store_commit_ms", "commit ms"),
];

/// Runs the scenario `args.run.runs` times and reports.
pub async fn run(args: FanoutArgs) -> anyhow::Result<Vec<Value>> {
    check(&args)?;
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("fanout", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

pub fn check(args: &FanoutArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.watchers > 0 && args.watchers <= MAX_WATCHERS, "--watchers must be 1..={MAX_WATCHERS}");
    anyhow::ensure!(args.publishers > 0 && args.publishers <= 64, "--publishers must be 1..=64");
    anyhow::ensure!(args.steps <= MAX_STEPS, "--steps must be 0..={MAX_STEPS}");
    anyhow::ensure!(args.steps > 0 || args.latency_rate.is_some(), "--steps 0 needs --latency-rate");
    anyhow::ensure!(args.latency_rate.is_none_or(|r| r > 0.0), "--latency-rate must be positive");
    anyhow::ensure!(args.start > 0.0 && args.factor > 1.0, "--start must be positive and --factor above 1");
    anyhow::ensure!(args.step_s > 0.0 && args.step_s <= 30.0 && args.latency_s <= 60.0, "steps of at most 30 s");
    Ok(())
}

/// One run; `run` numbers it among the process's runs (it picks the source addresses).
pub async fn run_once(args: &FanoutArgs, run: u32) -> anyhow::Result<Value> {
    // Two nodes: named apart, and no rebalance (the bench pins publishers to A and watchers to B on purpose).
    let node_flag = |n: &str| {
        if args.nodes > 1 { vec![format!("--node=bench-{n}-{run}"), "--rebalance=false".into()] } else { Vec::new() }
    };
    let server = Target::start(args.peer, &args.target, &[server::raised_limits(), node_flag("a")].concat()).await?;
    let second = if args.nodes > 1 {
        let started = match (&server, args.peer) {
            (Target::Herald(a), _) => {
                let mut t = args.target.clone();
                t.jwt_secret = Some(a.jwt_secret.clone());
                t.api_key = a.api_key.clone();
                let flags = [server::raised_limits(), node_flag("b")].concat();
                Server::open(&t, &flags).await.map(Target::Herald)
            }
            (_, peer) => PeerServer::start(peer).await.map(Target::Peer),
        };
        match started {
            Ok(t) => Some(t),
            Err(e) => {
                let _ = server.stop().await;
                return Err(e);
            }
        }
    } else {
        None
    };
    // Nodes find each other over the broker (herald announces every second).
    if second.is_some() {
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let out = measure(args, run, &server, second.as_ref()).await;
    let log = server.stop().await?;
    let log_b = match second {
        Some(t) => t.stop().await?,
        None => Value::Null,
    };
    let mut out = out?;
    out["server_log"] = log;
    out["server_b_log"] = log_b;
    Ok(out)
}

async fn measure(args: &FanoutArgs, run: u32, server: &Target, second: Option<&Target>) -> anyhow::Result<Value> {
    let chat = fresh_chat("fanout", run);
    let offset = run * sources_for(args.watchers + args.publishers);
    let (s, p) = (args.watchers, args.publishers);
    let crowd = Crowd { watchers: s, publishers: p, workspace: &args.target.workspace };
    let (watchers, publishers, mut failures) = open_all(&crowd, server, second, &chat, offset).await?;
    anyhow::ensure!(!watchers.is_empty() && publishers.len() == p, "setup failed: {:?}", failures.first);
    let n_watch = watchers.len() as u64;
    let shared = Shared::new();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let fetch: Option<Arc<str>> = (args.fetch_on_notify && args.peer == Peer::Herald).then(|| chat.as_str().into());
    for w in watchers {
        tasks.push(tokio::spawn(watch_loop(w, p, fetch.clone(), shared.clone(), stop_rx.clone())));
    }
    let mut pubs: Vec<Option<Conn>> = publishers.into_iter().map(Some).collect();
    let pid: Vec<u32> = std::iter::once(server.pid()).chain(second.map(Target::pid)).collect();
    let pid = &pid[..];
    let mut counters = vec![0u64; p];
    let chat = args.peer.room(&chat, true);
    let mut steps = Vec::new();
    let mut best: Option<Value> = None;
    let mut first_fail = Value::Null;
    for step in 0..args.steps {
        let msgs_per_s = args.start / s as f64 * args.factor.powi(step as i32);
        let r = phase(&mut pubs, &mut counters, &chat, step, msgs_per_s, args.step_s, n_watch, &shared, pid).await;
        let pass = r["lost"] == 0
            && r["publish_errors"] == 0
            && r["achieved_msgs_per_s"].as_f64().unwrap_or(0.0) >= 0.9 * msgs_per_s
            && r["drain_ms"].as_f64().unwrap_or(f64::MAX) <= args.drain_ms as f64
            && shared.out_of_order.load(Ordering::Relaxed) == 0
            && shared.errors.load(Ordering::Relaxed) == 0;
        steps.push(r.clone());
        if !pass {
            first_fail = r;
            break;
        }
        best = Some(r);
        tokio::time::sleep(BETWEEN_STEPS).await;
    }
    // Latency at the rate asked, else at half the best rate (or at the first step's rate when none passed).
    let half = args
        .latency_rate
        .unwrap_or_else(|| best.as_ref().and_then(|b| b["msgs_per_s"].as_f64()).unwrap_or(args.start / s as f64) / 2.0);
    tokio::time::sleep(BETWEEN_STEPS).await;
    let store0 = StoreTimes::read(server).await;
    let lat = phase(&mut pubs, &mut counters, &chat, LATENCY_STEP, half, args.latency_s, n_watch, &shared, pid).await;
    let store = StoreTimes::read(server).await.zip(store0).map(|(b, a)| b.since(&a));
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    for c in pubs.into_iter().flatten() {
        c.close().await;
    }
    let pct = shared.latency.lock().expect("lock").summary();
    let ff = |k: &str| first_fail.get(k).cloned().unwrap_or(Value::Null);
    let first_fail_note = if first_fail.is_null() {
        Value::Null
    } else {
        json!(format!(
            "{:.0}/s: lost {} drain {} ms kept {:.0}/s",
            ff("deliveries_offered_per_s").as_f64().unwrap_or(0.0),
            ff("lost"),
            ff("drain_ms").as_f64().map_or("-".into(), |d| format!("{d:.0}")),
            ff("achieved_msgs_per_s").as_f64().unwrap_or(0.0) * n_watch as f64,
        ))
    };
    failures.merge(&Failures::default());
    let b = |k: &str| best.as_ref().and_then(|b| b.get(k).cloned()).unwrap_or(Value::Null);
    Ok(json!({
        "peer": args.peer.as_str(),
        "watchers": s,
        "watchers_ok": n_watch,
        "failed": failures.total,
        "failures": failures,
        "steps_passed": steps.len() - usize::from(!first_fail.is_null()),
        "max_msgs_per_s": b("msgs_per_s"),
        "max_deliveries_per_s": b("delivered_per_s"),
        "server_cores_at_max": b("server_cores"),
        "server_us_per_delivery": b("server_us_per_delivery"),
        "first_fail": first_fail_note,
        "latency_msgs_per_s": half,
        "latency_deliveries_per_s": lat["delivered_per_s"],
        "latency_lost": lat["lost"],
        "latency_server_cores": lat["server_cores"],
        "store_write_ms": store.map(|t| t.0),
        "store_commit_ms": store.map(|t| t.1),
        "writes_per_batch": store.map(|t| t.2),
        "p50_ms": pct.p50_ms,
        "p99_ms": pct.p99_ms,
        "p999_ms": pct.p999_ms,
        "max_ms": pct.max_ms,
        "out_of_order": shared.out_of_order.load(Ordering::Relaxed),
        "gaps": shared.gaps.load(Ordering::Relaxed),
        "notifies": shared.notifies.load(Ordering::Relaxed),
        "fetched": shared.fetched.load(Ordering::Relaxed),
        "watcher_errors": shared.errors.load(Ordering::Relaxed),
        "first_watcher_error": shared.first_error.lock().expect("lock").clone(),
        "steps": steps,
        "latency_phase": lat,
    }))
}

/// Where a send's time went in herald's store during the latency phase (the
/// publishers' node): sums and counts of its store histograms, read from
/// `/metrics` before and after.
#[derive(Debug, Clone, Copy, Default)]
struct StoreTimes {
    /// Submission to durable commit, per write.
    write_s: f64,
    writes: f64,
    /// Applying and committing one batch.
    commit_s: f64,
    batches: f64,
}

impl StoreTimes {
    async fn read(target: &Target) -> Option<StoreTimes> {
        let Target::Herald(server) = target else { return None };
        let get = async |name: &str| server.metric(name).await.ok().flatten();
        Some(StoreTimes {
            write_s: get("herald_store_write_seconds_sum").await?,
            writes: get("herald_store_write_seconds_count").await?,
            commit_s: get("herald_store_commit_seconds_sum").await?,
            batches: get("herald_store_commit_seconds_count").await?,
        })
    }

    /// The phase's means: a write's wait for durability (ms), a batch's commit (ms), writes per batch.
    fn since(&self, before: &StoreTimes) -> (f64, f64, f64) {
        let (writes, batches) = (self.writes - before.writes, self.batches - before.batches);
        let mean_ms = |s: f64, n: f64| if n > 0.0 { s * 1000.0 / n } else { 0.0 };
        (
            mean_ms(self.write_s - before.write_s, writes),
            mean_ms(self.commit_s - before.commit_s, batches),
            if batches > 0.0 { writes / batches } else { 0.0 },
        )
    }
}
