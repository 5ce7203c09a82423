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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{ClientError, Failure, source_addr, sources_for};
use crate::conn::{Conn, Received};
use crate::fleet::{self, Failures, Launch};
use crate::latency::Latencies;
use crate::pclient::PeerClient;
use crate::peer::{Peer, PeerServer, cpu_s};
use crate::report::{self, Column, RunArgs, col};
use crate::sends::{REQUEST_TIMEOUT, SendsArgs, fresh_chat};
use crate::server::{Server, TargetArgs};
use crate::target::Target;
use crate::token::Signer;

/// Most rate steps; the latency phase counts as one more.
pub(crate) const MAX_STEPS: usize = 32;
/// The step index that marks the latency phase's messages.
pub(crate) const LATENCY_STEP: usize = MAX_STEPS;
/// After a step's last publish, its deliveries get this long at most.
const GRACE: Duration = Duration::from_secs(3);
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

/// What travels in each message: publish time (us since the run's base), publisher, its counter, step.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Payload {
    #[serde(default)]
    t: u64,
    #[serde(default)]
    p: usize,
    #[serde(default)]
    n: u64,
    #[serde(default)]
    s: usize,
}

/// What every watcher adds to.
pub(crate) struct Shared {
    pub base: Instant,
    pub received: Vec<AtomicU64>,
    /// Per step, the latest arrival, in us since `base`.
    pub last_rx_us: Vec<AtomicU64>,
    pub out_of_order: AtomicU64,
    pub gaps: AtomicU64,
    pub notifies: AtomicU64,
    /// Messages a watcher fetched rather than had pushed.
    pub fetched: AtomicU64,
    pub errors: AtomicU64,
    pub first_error: Mutex<Option<String>>,
    pub latency: Mutex<Latencies>,
}

impl Shared {
    pub(crate) fn new() -> Arc<Shared> {
        Arc::new(Shared {
            base: Instant::now(),
            received: (0..=MAX_STEPS).map(|_| AtomicU64::new(0)).collect(),
            last_rx_us: (0..=MAX_STEPS).map(|_| AtomicU64::new(0)).collect(),
            out_of_order: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            notifies: AtomicU64::new(0),
            fetched: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_error: Mutex::new(None),
            latency: Mutex::new(Latencies::default()),
        })
    }

    pub(crate) fn now_us(&self) -> u64 {
        self.base.elapsed().as_micros() as u64
    }
    pub(crate) fn error(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.first_error.lock().expect("lock").get_or_insert(e);
    }
}

/// One run; `run` numbers it among the process's runs (it picks the source addresses).
pub async fn run_once(args: &FanoutArgs, run: u32) -> anyhow::Result<Value> {
    // Two nodes: named apart, and no rebalance (the bench pins publishers to A and watchers to B on purpose).
    let node_flag = |n: &str| {
        if args.nodes > 1 { vec![format!("--node=bench-{n}-{run}"), "--rebalance=false".into()] } else { Vec::new() }
    };
    let server = Target::start(args.peer, &args.target, &[SendsArgs::server_flags(), node_flag("a")].concat()).await?;
    let second = if args.nodes > 1 {
        let started = match (&server, args.peer) {
            (Target::Herald(a), _) => {
                let mut t = args.target.clone();
                t.jwt_secret = Some(a.jwt_secret.clone());
                t.api_key = a.api_key.clone();
                let flags = [SendsArgs::server_flags(), node_flag("b")].concat();
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
    let (watchers, publishers, mut failures) = open_all(args, server, second.unwrap_or(server), &chat, offset).await?;
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

/// Opens the watchers (joined and watching) and the publishers.
pub(crate) async fn open_all(
    args: &FanoutArgs,
    server: &Target,
    watch_server: &Target,
    chat: &str,
    offset: u32,
) -> anyhow::Result<(Vec<Conn>, Vec<Conn>, Failures)> {
    let (s, p) = (args.watchers, args.publishers);
    let addr = server.addr();
    let watch_addr = watch_server.addr();
    let spec = |count| Launch { count, concurrency: 100, rate: None, deadline: Duration::from_secs(120) };
    match server {
        Target::Herald(srv) => {
            let signer = Signer::new(&srv.jwt_secret, &args.target.workspace);
            // Everyone joins first and the watchers watch last, so no join is pushed to a watcher.
            let (mut all, mut failures) = match watch_server {
                Target::Herald(wsrv) if args.nodes > 1 => {
                    // Watchers on node B, publishers on node A; the same user names as on one node.
                    let (mut w, mut f) = fleet::open_clients(wsrv, &signer, s, offset, |i| format!("f{i}")).await;
                    let (mut pb, fp) =
                        fleet::open_clients(srv, &signer, p, offset + sources_for(s), |j| format!("f{}", s + j)).await;
                    f.merge(&fp);
                    w.append(&mut pb);
                    (w, f)
                }
                _ => fleet::open_clients(srv, &signer, s + p, offset, |i| format!("f{i}")).await,
            };
            anyhow::ensure!(
                all.len() == s + p,
                "only {} of {} clients connected: {:?}",
                all.len(),
                s + p,
                failures.first
            );
            let joined = futures_util::future::join_all(
                all.iter_mut().map(|c| async { tokio::time::timeout(REQUEST_TIMEOUT, c.join(chat)).await }),
            )
            .await;
            for j in joined {
                match j {
                    Ok(Ok(_)) => {}
                    Ok(Err(f)) => failures.add_failure(&f),
                    Err(_) => failures.add("timeout", || "no join ack".into()),
                }
            }
            anyhow::ensure!(failures.total == 0, "joins failed: {:?}", failures.first);
            let publishers: Vec<Conn> = all.drain(s..).map(Conn::Herald).collect();
            let watched = futures_util::future::join_all(
                all.iter_mut().map(|c| async { tokio::time::timeout(REQUEST_TIMEOUT, c.watch(chat)).await }),
            )
            .await;
            for w in watched {
                match w {
                    Ok(Ok(_)) => {}
                    Ok(Err(f)) => failures.add_failure(&f),
                    Err(_) => failures.add("timeout", || "no watch ack".into()),
                }
            }
            anyhow::ensure!(failures.total == 0, "watches failed: {:?}", failures.first);
            Ok((all.into_iter().map(Conn::Herald).collect(), publishers, failures))
        }
        Target::Peer(ps) => {
            let peer = args.peer;
            let _ = ps;
            let room: Arc<str> = peer.room(chat, true).into();
            let w = fleet::launch(spec(s), |i| {
                let room = room.clone();
                async move {
                    let mut c = PeerClient::connect(peer, watch_addr, source_addr(offset, i)).await?;
                    c.join(&room).await?;
                    Ok(c)
                }
            })
            .await;
            let mut failures = w.failures;
            let pubs = fleet::launch(spec(p), |j| {
                let room = room.clone();
                async move {
                    let mut c = PeerClient::connect(peer, addr, source_addr(offset, s + j)).await?;
                    // Sockudo: a client event goes only to a channel its sender subscribed to.
                    if peer == Peer::Sockudo {
                        c.join(&room).await?;
                    }
                    Ok(c)
                }
            })
            .await;
            failures.merge(&pubs.failures);
            Ok((
                w.ok.into_iter().map(|(_, c)| Conn::Peer(c)).collect(),
                pubs.ok.into_iter().map(|(_, c)| Conn::Peer(c)).collect(),
                failures,
            ))
        }
    }
}

/// One watcher: reads until told to stop, counting each message under its
/// step; with `fetch` (a chat name), fetches what a `notify` or a gap says it lacks.
pub(crate) async fn watch_loop(
    mut conn: Conn,
    publishers: usize,
    fetch: Option<Arc<str>>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_n = vec![None::<u64>; publishers];
    let mut last_seq: Option<u64> = None;
    let mut latencies = Latencies::default();
    loop {
        let got: Result<Received<Payload>, ClientError> = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            r = conn.next_received::<Payload>() => r,
        };
        // With `fetch`: where the pushes fall short (a notify past what we
        // hold, or a gap before this push), fetch the rest first.
        let behind_to = match (&got, last_seq) {
            (Ok(Received::Notify { seq: Some(s) }), Some(last)) if *s > last => Some(*s),
            (Ok(Received::Msg { seq: Some(s), .. } | Received::Event { seq: s }), Some(last)) if *s > last + 1 => {
                Some(*s - 1)
            }
            _ => None,
        };
        if let (Some(chat), Some(upto), Some(last)) = (&fetch, behind_to, last_seq) {
            match conn.fetch_messages::<Payload>(chat, last, upto).await {
                Ok(msgs) => {
                    shared.fetched.fetch_add(msgs.len() as u64, Ordering::Relaxed);
                    for (_, m) in msgs {
                        record(m, &shared, &mut last_n, &mut latencies);
                    }
                    last_seq = Some(upto);
                }
                Err(e) => {
                    shared.error(e.to_string());
                    break;
                }
            }
        }
        match got {
            Ok(Received::Notify { .. }) => {
                shared.notifies.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Received::Msg { seq, body }) => {
                check_seq(seq, &mut last_seq, &shared);
                record(body, &shared, &mut last_n, &mut latencies);
            }
            Ok(Received::Event { seq }) => check_seq(Some(seq), &mut last_seq, &shared),
            Ok(Received::Other) => {}
            Err(e) => {
                shared.error(e.to_string());
                break;
            }
        }
    }
    shared.latency.lock().expect("lock").merge(&latencies);
    conn.close().await;
}

/// Counts one delivered message under its step, checks its publisher's order, and times it.
fn record(m: Payload, shared: &Shared, last_n: &mut [Option<u64>], latencies: &mut Latencies) {
    let now = shared.now_us();
    if m.s <= MAX_STEPS {
        shared.received[m.s].fetch_add(1, Ordering::Relaxed);
        shared.last_rx_us[m.s].fetch_max(now, Ordering::Relaxed);
    }
    if let Some(slot) = last_n.get_mut(m.p) {
        if slot.is_some_and(|l| m.n <= l) {
            shared.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        *slot = Some(m.n);
    }
    if m.s == LATENCY_STEP {
        latencies.record(Duration::from_micros(now.saturating_sub(m.t)));
    }
}

/// herald: a push's seq must be the last + 1 (a larger one is a gap, a smaller one out of order).
fn check_seq(seq: Option<u64>, last_seq: &mut Option<u64>, shared: &Shared) {
    let Some(seq) = seq else { return };
    if let Some(last) = *last_seq {
        if seq <= last {
            shared.out_of_order.fetch_add(1, Ordering::Relaxed);
        } else if seq > last + 1 {
            shared.gaps.fetch_add(1, Ordering::Relaxed);
        }
    }
    *last_seq = Some(seq);
}

/// Publishes at `msgs_per_s` (all publishers together) for `secs`, then waits
/// for the deliveries; returns the step's figures.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn phase(
    pubs: &mut [Option<Conn>],
    counters: &mut [u64],
    chat: &str,
    step: usize,
    msgs_per_s: f64,
    secs: f64,
    watchers: u64,
    shared: &Arc<Shared>,
    pids: &[u32],
) -> Value {
    let cpu_all = || pids.iter().map(|p| cpu_s(*p).unwrap_or(0.0)).sum::<f64>();
    let cpu0 = cpu_all();
    let own0 = cpu_s(std::process::id()).unwrap_or(0.0);
    let started = Instant::now();
    let first_pub_us = shared.now_us();
    let until = started + Duration::from_secs_f64(secs);
    let per_pub = msgs_per_s / pubs.len() as f64;
    let n_pubs = pubs.len();
    let mut handles = Vec::new();
    for (j, slot) in pubs.iter_mut().enumerate() {
        let Some(conn) = slot.take() else { continue };
        let (chat, shared, start_n) = (chat.to_string(), shared.clone(), counters[j]);
        handles.push(tokio::spawn(async move {
            publish_loop(conn, j, n_pubs, start_n, &chat, step, per_pub, until, &shared).await
        }));
    }
    let mut published = 0u64;
    let mut errors = 0u64;
    let mut first_error = None;
    let mut last_pub = started;
    for (j, h) in handles.into_iter().enumerate() {
        match h.await {
            Ok((conn, sent, err, last)) => {
                counters[j] += sent;
                published += sent;
                last_pub = last_pub.max(last);
                if let Some(e) = err {
                    errors += 1;
                    first_error.get_or_insert(e);
                } else {
                    pubs[j] = Some(conn);
                }
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    let expected = published * watchers;
    let deadline = last_pub + GRACE;
    while shared.received[step].load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delivered = shared.received[step].load(Ordering::Relaxed);
    let done = Instant::now();
    let cpu = cpu_all() - cpu0;
    let own = cpu_s(std::process::id()).unwrap_or(0.0) - own0;
    let last_rx_us = shared.last_rx_us[step].load(Ordering::Relaxed);
    let last_pub_us = (last_pub - shared.base).as_micros() as u64;
    let span_s = (last_rx_us.saturating_sub(first_pub_us)) as f64 / 1e6;
    let elapsed = (done - started).as_secs_f64();
    json!({
        "step": step,
        "msgs_per_s": msgs_per_s,
        "deliveries_offered_per_s": msgs_per_s * watchers as f64,
        "published": published,
        "achieved_msgs_per_s": published as f64 / secs,
        "expected": expected,
        "delivered": delivered,
        "lost": expected.saturating_sub(delivered),
        "delivered_per_s": if span_s > 0.0 { delivered as f64 / span_s } else { 0.0 },
        "drain_ms": if delivered > 0 { Some(last_rx_us.saturating_sub(last_pub_us) as f64 / 1000.0) } else { None },
        "server_cores": cpu / elapsed,
        "server_us_per_delivery": if delivered > 0 { cpu * 1e6 / delivered as f64 } else { 0.0 },
        "bench_cores": own / elapsed,
        "publish_errors": errors,
        "first_publish_error": first_error,
    })
}

/// One publisher's share of a phase: paced sends until `until`.
#[allow(clippy::too_many_arguments)]
async fn publish_loop(
    mut conn: Conn,
    p: usize,
    publishers: usize,
    start_n: u64,
    chat: &str,
    step: usize,
    rate: f64,
    until: Instant,
    shared: &Shared,
) -> (Conn, u64, Option<String>, Instant) {
    let period = Duration::from_secs_f64(1.0 / rate.max(0.01));
    // Publishers take turns evenly over the period rather than all at once.
    let first = tokio::time::Instant::now() + period.mul_f64(p as f64 / publishers as f64);
    let mut tick = tokio::time::interval_at(first, period);
    // A publisher that falls behind does not burst to catch up: the achieved rate shows it.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u64;
    let mut last = Instant::now();
    loop {
        tick.tick().await;
        if Instant::now() >= until {
            break;
        }
        let payload = format!(r#"{{"t":{},"p":{p},"n":{},"s":{step}}}"#, shared.now_us(), start_n + sent + 1);
        let r: Result<(), Failure> = match tokio::time::timeout(REQUEST_TIMEOUT, conn.publish(chat, payload)).await {
            Ok(r) => r,
            Err(_) => return (conn, sent, Some("no publish ack in time".into()), last),
        };
        if let Err(e) = r {
            return (conn, sent, Some(e.to_string()), last);
        }
        sent += 1;
        last = Instant::now();
    }
    (conn, sent, None, last)
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
