//! `joinflood`: joins into one chat at a rising rate. Each step offers joins
//! at a fixed rate (500/s, then x`--factor`, ...) for `--step-s` seconds, at
//! most `--max-step-joins` per step (every joiner holds a connection, and one
//! process may hold 20,000 open files). Every joining user is a distinct user
//! on a connection of its own, opened (and, for herald, `hello`ed) before the
//! step's clock starts, so the figure is the chat's join rate, not connection
//! setup. Joins start open-loop at the step's rate (a slow answer does not
//! slow the offer); each joiner then holds its connection, reading, until the
//! step ends, when all close and the server gets to settle before the next.
//! Meanwhile a second, quiet chat carries `--quiet-rate` messages/s whose
//! publish-to-receive latency is measured (`quiet`).
//!
//! A step passes when every join was acked, none failed, no held connection
//! was dropped, and the acked rate (acks over the time from the first join to
//! the last ack) kept at least `--keep-up` of the offered rate; the ladder
//! stops at the first step that does not. The figure is the highest passing step.
//!
//! What a join is: herald `join` (durable; afterwards the chat's member count
//! through the HTTP API must equal the joins acked); Socket.IO the peer's
//! `join` event with a user (room join plus an in-memory member set, not
//! durable); Sockudo a presence-channel subscription (`presence-<chat>`, its
//! member list, in memory, not durable; members leave with their connection,
//! and each join's answer carries the whole member list and is announced to
//! every member already there).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{Failure, Held, fresh_chat, fresh_sources, source_addr, sources_for};
use crate::conn::{Conn, Dial};
use crate::fleet::{self, Failures, Launch};
use crate::join_tally::{JoinTally, timed_join};
use crate::peer::{Peer, cpu_s};
use crate::quiet::Quiet;
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, TargetArgs};
use crate::target::Target;

/// Most steps of one ladder.
const MAX_STEPS: usize = 16;
/// Most joins (connections) of one step: well under 20,000 open files.
const MAX_STEP_JOINS: usize = 15_000;
/// The reference flood: 2,000 joins/s into one chat (a large public chat whose invite link spreads).
/// The step at this rate is reported apart (its JSON fields are named `seed_*`).
const SEED_RATE: f64 = 2000.0;
/// After a step, the held connections get this long to stop and close.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(15);
/// Between steps, the server gets at most this long to go quiet.
const SETTLE_LIMIT: Duration = Duration::from_secs(30);

/// `herald-bench joinflood`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct JoinfloodArgs {
    /// Joins/s offered in the first step.
    #[arg(long, default_value_t = 500.0)]
    pub start: f64,
    /// Each step offers this many times the last.
    #[arg(long, default_value_t = 2.0)]
    pub factor: f64,
    /// Most steps.
    #[arg(long, default_value_t = 8)]
    pub steps: usize,
    /// Seconds each step offers joins (fewer where --max-step-joins is reached first).
    #[arg(long, default_value_t = 2.0)]
    pub step_s: f64,
    /// Most joins (each a connection) in one step.
    #[arg(long, default_value_t = 12_000)]
    pub max_step_joins: usize,
    /// Messages/s into the quiet chat.
    #[arg(long, default_value_t = 20.0)]
    pub quiet_rate: f64,
    /// A step passes when acked joins/s reach this share of the offered rate.
    #[arg(long, default_value_t = 0.95)]
    pub keep_up: f64,
    /// The server measured: herald, or a peer (socketio, sockudo).
    #[arg(long, value_enum, default_value_t = Peer::Herald)]
    pub peer: Peer,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("steps_passed", "steps ok"),
    col("top_offered_per_s", "top offered/s"),
    col("top_acked_per_s", "top acked/s"),
    col("top_p50_ms", "p50 ms"),
    col("top_p99_ms", "p99 ms"),
    col("top_quiet_p50_ms", "quiet p50 ms"),
    col("top_quiet_p99_ms", "quiet p99 ms"),
    col("top_server_cores", "srv cores"),
    col("top_bench_cores", "bench cores"),
    col("seed_p99_ms", "p99 ms at 2k/s"),
    col("joins_acked", "joins acked"),
    col("failed", "failed"),
    col("members_match", "members = joins"),
    col("first_fail", "first failing step"),
];

/// Runs the ladder `args.run.runs` times and reports.
pub async fn run(args: JoinfloodArgs) -> anyhow::Result<Vec<Value>> {
    check(&args)?;
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("joinflood", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

pub fn check(args: &JoinfloodArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.peer != Peer::Nats, "NATS has no members: joinflood is for herald, socketio and sockudo");
    anyhow::ensure!(args.steps > 0 && args.steps <= MAX_STEPS, "--steps must be 1..={MAX_STEPS}");
    anyhow::ensure!(args.start > 0.0 && args.factor > 1.0, "--start must be positive and --factor above 1");
    anyhow::ensure!(args.step_s > 0.0 && args.step_s <= 30.0, "--step-s must be in (0, 30]");
    anyhow::ensure!(
        (1..=MAX_STEP_JOINS).contains(&args.max_step_joins),
        "--max-step-joins must be 1..={MAX_STEP_JOINS}"
    );
    anyhow::ensure!(args.quiet_rate > 0.0 && args.quiet_rate <= 1000.0, "--quiet-rate must be in (0, 1000]");
    anyhow::ensure!(args.keep_up > 0.0 && args.keep_up <= 1.0, "--keep-up must be in (0, 1]");
    Ok(())
}

/// One run; `run` numbers it among the process's runs (it picks the source addresses).
pub async fn run_once(args: &JoinfloodArgs, run: u32) -> anyhow::Result<Value> {
    let server = Target::start(args.peer, &args.target, &server::raised_limits()).await?;
    let out = measure(args, run, &server).await;
    let log = server.stop().await?;
    let mut out = out?;
    out["server_log"] = log;
    Ok(out)
}

/// Source addresses one step takes.
fn step_sources(args: &JoinfloodArgs) -> u32 {
    sources_for(args.max_step_joins)
}

async fn measure(args: &JoinfloodArgs, run: u32, server: &Target) -> anyhow::Result<Value> {
    let peer = args.peer;
    let dial = Dial::to(server, &args.target.workspace);
    let chat = fresh_chat("joinflood", run);
    let room = peer.member_room(&chat);
    // One source for the quiet chat, then a block per step.
    let base = fresh_sources(run, 1 + args.steps as u32 * step_sources(args));
    let quiet = Quiet::start(&dial, &fresh_chat("quiet", run), args.quiet_rate, args.steps, base).await?;
    let mut steps: Vec<Value> = Vec::new();
    let mut totals = JoinTally::default();
    let mut planned = 0;
    let mut first_fail = Value::Null;
    for k in 0..args.steps {
        let rate = args.start * args.factor.powi(k as i32);
        let n = ((rate * args.step_s).round() as usize).clamp(1, args.max_step_joins);
        let offset = base + 1 + k as u32 * step_sources(args);
        let (r, tally) = step(args, &dial, server, &quiet, &room, k, rate, n, offset).await;
        planned += n;
        totals.merge(&tally);
        let pass = r["pass"].as_bool().unwrap_or(false);
        eprintln!(
            "joinflood {} step {}/{}: {rate:.0}/s offered, {n} joins: acked {} at {:.0}/s, p99 {} ms, quiet p99 {} ms, failed {}, dropped {}: {}",
            peer.as_str(),
            k + 1,
            args.steps,
            r["acked"],
            r["acked_per_s"].as_f64().unwrap_or(0.0),
            r["p99_ms"],
            r["quiet"]["p99_ms"],
            r["failed"],
            r["dropped"],
            if pass { "ok" } else { "FAILED" }
        );
        steps.push(r.clone());
        if !pass {
            first_fail = json!(format!(
                "{rate:.0}/s: acked {:.0}/s, failed {}, dropped {}",
                r["acked_per_s"].as_f64().unwrap_or(0.0),
                r["failed"],
                r["dropped"]
            ));
            break;
        }
        server.settle(SETTLE_LIMIT).await;
    }
    quiet.stop().await;
    // Members: herald's durable count through its API, against every join acked; Socket.IO's
    // in-memory set (the largest count its acks gave), likewise; Sockudo's presence members
    // leave with their connections, so each step's count against that step's joins.
    let (members, expected, members_match) = match server {
        Target::Herald(s) => {
            let m = s.members(&args.target.workspace, &chat).await?;
            (m, Some(totals.acked), m == Some(totals.acked))
        }
        Target::Peer(_) if peer == Peer::Sockudo => {
            let ok = steps.iter().all(|s| s["members"] == s["acked"]);
            let largest = steps.iter().filter_map(|s| s["acked"].as_u64()).max();
            (steps.iter().filter_map(|s| s["members"].as_u64()).max(), largest, ok)
        }
        Target::Peer(_) => (Some(totals.members_seen), Some(totals.acked), totals.members_seen == totals.acked),
    };
    let passed: Vec<&Value> = steps.iter().filter(|s| s["pass"] == true).collect();
    let top = passed.last().copied();
    let t = |k: &str| top.and_then(|s| s.pointer(k).cloned()).unwrap_or(Value::Null);
    let seed = steps.iter().find(|s| s["offered_per_s"].as_f64() == Some(SEED_RATE));
    let sd = |k: &str| seed.and_then(|s| s.pointer(k).cloned()).unwrap_or(Value::Null);
    let failures = steps.iter().fold(Failures::default(), |mut f, s| {
        if let Ok(sf) = serde_json::from_value::<Failures>(s["failures"].clone()) {
            f.merge(&sf);
        }
        f
    });
    Ok(json!({
        "peer": peer.as_str(),
        "steps_run": steps.len(),
        "steps_passed": passed.len(),
        "top_offered_per_s": t("/offered_per_s"),
        "top_acked_per_s": t("/acked_per_s"),
        "top_p50_ms": t("/p50_ms"),
        "top_p99_ms": t("/p99_ms"),
        "top_quiet_p50_ms": t("/quiet/p50_ms"),
        "top_quiet_p99_ms": t("/quiet/p99_ms"),
        "top_server_cores": t("/server_cores"),
        "top_bench_cores": t("/bench_cores"),
        "seed_acked_per_s": sd("/acked_per_s"),
        "seed_p99_ms": sd("/p99_ms"),
        "seed_quiet_p99_ms": sd("/quiet/p99_ms"),
        "first_fail": first_fail,
        "joins_planned": planned,
        "joins_acked": totals.acked,
        "failed": failures.total,
        "failures": failures,
        "members": members,
        "members_expected": expected,
        "members_match": members_match,
        "quiet_error": steps.iter().find_map(|s| s["quiet"]["error"].as_str().map(String::from)),
        "steps": steps,
    }))
}

/// One step: `n` joins at `rate`; its figures and its joins' tally.
#[allow(clippy::too_many_arguments)]
async fn step(
    args: &JoinfloodArgs,
    dial: &Dial,
    server: &Target,
    quiet: &Quiet,
    room: &str,
    k: usize,
    rate: f64,
    n: usize,
    offset: u32,
) -> (Value, JoinTally) {
    let setup = Instant::now();
    let (conns, setup_failures) = fleet::open_conns(dial, n, offset, |i| format!("j{k}-{i}")).await;
    let setup_s = setup.elapsed().as_secs_f64();
    let slots: Arc<Vec<Mutex<Option<Conn>>>> = Arc::new(conns.into_iter().map(|c| Mutex::new(Some(c))).collect());
    let room: Arc<str> = room.into();
    let (stop_tx, stop_rx) = watch::channel(false);
    let spec = Launch {
        count: slots.len(),
        concurrency: slots.len().max(1),
        rate: Some(rate),
        // Twice the planned offer time plus slack: a stalled offer is cut off, counted as not started.
        deadline: Duration::from_secs_f64(n as f64 / rate * 2.0 + 5.0),
    };
    quiet.begin(k);
    let cpu0 = cpu_s(server.pid()).unwrap_or(0.0);
    let own0 = cpu_s(std::process::id()).unwrap_or(0.0);
    let t0 = Instant::now();
    let out = fleet::launch(spec, |i| {
        let (slots, room, mut stop) = (slots.clone(), room.clone(), stop_rx.clone());
        async move {
            let taken = slots[i].lock().expect("slot lock").take();
            let mut conn = taken.ok_or_else(|| Failure::timeout("no connection for this join".into()))?;
            let started = Instant::now();
            let mut tally = JoinTally::default();
            tally.record(started, timed_join(&mut conn, &room, &format!("j{k}-{i}")).await);
            // The member stays until the step ends, reading what the server pushes (Sockudo announces
            // every later member to it); one the server drops counts against the step.
            let held = tokio::spawn(async move {
                let held = conn.drain_until(&mut stop).await;
                (conn, held)
            });
            Ok((started, tally, held))
        }
    })
    .await;
    let cpu = cpu_s(server.pid()).unwrap_or(0.0) - cpu0;
    // The bench shares the machine: when it is near a full core, the step measures the bench too.
    let own = cpu_s(std::process::id()).unwrap_or(0.0) - own0;
    let quiet_step = quiet.end(k).await;
    let mut tally = JoinTally::default();
    let mut last_start = t0;
    let mut holders = Vec::new();
    for (_, (started, t, held)) in out.ok {
        tally.merge(&t);
        last_start = last_start.max(started);
        holders.push(held);
    }
    tally.failures.merge(&out.failures);
    let window = (tally.last_ack.unwrap_or(t0) - t0).as_secs_f64().max(1e-9);
    let members = members_now(dial, &room, k, source_addr(offset, n)).await;
    // Release the members and close their connections, bounded.
    let _ = stop_tx.send(true);
    let closing = async {
        let mut dropped = 0u64;
        let mut closes = Vec::new();
        for h in holders {
            if let Ok((conn, held)) = h.await {
                dropped += u64::from(held == Held::Dropped);
                closes.push(conn.close());
            }
        }
        futures_util::future::join_all(closes).await;
        dropped
    };
    let dropped = tokio::time::timeout(CLOSE_TIMEOUT, closing).await.ok();
    let mut failures = setup_failures.clone();
    failures.merge(&tally.failures);
    let acked_per_s = tally.acked as f64 / window;
    let p = tally.latencies.summary();
    let pass =
        failures.total == 0 && tally.acked == n as u64 && dropped == Some(0) && acked_per_s >= args.keep_up * rate;
    let r = json!({
        "step": k,
        "offered_per_s": rate,
        "joins": n,
        "setup_s": setup_s,
        "setup_failed": setup_failures.total,
        "offer_s": (last_start - t0).as_secs_f64(),
        "offered_achieved_per_s": if n > 1 { (n - 1) as f64 / (last_start - t0).as_secs_f64().max(1e-9) } else { rate },
        "acked": tally.acked,
        "window_s": window,
        "acked_per_s": acked_per_s,
        "p50_ms": p.p50_ms,
        "p99_ms": p.p99_ms,
        "p999_ms": p.p999_ms,
        "max_ms": p.max_ms,
        "failed": failures.total,
        "failures": failures,
        "dropped": dropped,
        "members_seen": tally.members_seen,
        "members": members,
        "server_cores": cpu / window,
        "bench_cores": own / window,
        "quiet": quiet_step,
        "pass": pass,
    });
    (r, tally)
}

/// Sockudo: the presence channel's member count once every join of step `k` is answered, as one more
/// subscriber's answer gives it (less that subscriber). The joins' own answers cannot tell: two
/// concurrent subscriptions may each be answered before the other is counted. None for the others
/// (herald's count comes from its HTTP API, Socket.IO's from its acks, whose set is updated in order).
async fn members_now(dial: &Dial, room: &str, k: usize, source: std::net::Ipv4Addr) -> Option<u64> {
    if dial.peer != Peer::Sockudo {
        return None;
    }
    let mut c = Conn::open(dial, "counter", source).await.ok()?;
    let count = timed_join(&mut c, room, &format!("counter-{k}")).await.ok().flatten();
    c.close().await;
    count.map(|n| n.saturating_sub(1))
}
