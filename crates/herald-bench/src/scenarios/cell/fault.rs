//! The cell's bad day, done to it while the load runs: `--kill-node I`
//! SIGKILLs one node `--fault-at-s` seconds in and leaves it dead; `--roll`
//! upgrades every node in turn (SIGTERM: it drains, pushing `reconnect`
//! spread over its window; its exit; the same binary and flags started on
//! the same port; ready; a pause). It times each step on the machine's clock
//! (the workers' clock too) and reads from the workers' timelines what the
//! users went through: how many each node held, how long until each was
//! resumed elsewhere, the reconnects per second, and the live delivery p99
//! around the fault against the quiet before it. How sessions resume is
//! `session`'s and `resume`'s; the other figures are `report`'s.

use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};

use super::follow::now_us;
use super::tally::Sum;
use super::timeline::{Losses, window};
use crate::latency::Latencies;
use crate::preload;
use crate::server::{LogSummary, Server, TargetArgs};

/// The live p99 after a kill is read over this long.
const AFTER_KILL: Duration = Duration::from_secs(10);
/// The quiet window leaves out the load's first seconds (connections warming up).
const QUIET_SKIP_S: u64 = 2;
/// A restarted node gets this long to bind the port its predecessor held.
const REBIND_TIMEOUT: Duration = Duration::from_secs(10);

/// The bad day's flags.
#[derive(Debug, Clone, Args, Serialize)]
pub struct FaultArgs {
    /// SIGKILL this node (0-based) --fault-at-s seconds into the load, and leave it dead.
    #[arg(long, conflicts_with = "roll")]
    pub kill_node: Option<usize>,
    /// Seconds into the load when the kill or the roll begins.
    #[arg(long, default_value_t = 10.0)]
    pub fault_at_s: f64,
    /// A rolling upgrade under the load: each node in turn SIGTERMed (it drains), restarted on its
    /// port with the same flags, ready, then --roll-pause-s.
    #[arg(long)]
    pub roll: bool,
    /// Seconds between a restarted node's ready and the next node's SIGTERM.
    #[arg(long, default_value_t = 3.0)]
    pub roll_pause_s: f64,
    /// A small cell through a quick roll (3 nodes, 300 users, 2 s drains) that fails unless every
    /// session resumed and every message reached every watcher once.
    #[arg(long)]
    pub smoke_bad_day: bool,
}

impl FaultArgs {
    /// Whether a fault is asked for.
    pub fn any(&self) -> bool {
        self.kill_node.is_some() || self.roll
    }
}

/// One node's fault as the parent timed it (µs since the epoch).
#[derive(Debug, Serialize)]
pub struct Step {
    pub node: usize,
    /// "kill" or "drain".
    pub kind: &'static str,
    /// Connections the node counted just before.
    pub held: u64,
    /// The signal.
    pub at_us: u64,
    /// The process exited (a drain).
    pub exited_us: Option<u64>,
    /// Its successor was ready (a drain).
    pub ready_us: Option<u64>,
}

/// What [`drive`] did: its steps, and the logs of the processes it stopped.
#[derive(Default)]
pub struct Done {
    pub steps: Vec<Step>,
    pub logs: Vec<Option<LogSummary>>,
}

/// Does the fault `f` asks for to `nodes` (each restarted with `flags[i]` and `target`), starting
/// `f.fault_at_s` after `load_start`.
pub async fn drive(
    f: &FaultArgs,
    nodes: &mut Vec<Server>,
    target: &TargetArgs,
    flags: &[Vec<String>],
    load_start: Instant,
) -> anyhow::Result<Done> {
    let mut done = Done::default();
    if !f.any() {
        return Ok(done);
    }
    tokio::time::sleep_until((load_start + Duration::from_secs_f64(f.fault_at_s)).into()).await;
    if let Some(i) = f.kill_node {
        let node = nodes.get(i).context("--kill-node is past the nodes")?;
        let held = node.connections().await.ok().flatten().unwrap_or(0);
        let at_us = now_us();
        // SAFETY: kill(2) with the pid of a child this process started and has not reaped.
        unsafe { libc::kill(node.pid as libc::pid_t, libc::SIGKILL) };
        eprintln!("cell: node {i} killed (it held {held} connections)");
        done.steps.push(Step { node: i, kind: "kill", held, at_us, exited_us: None, ready_us: None });
        return Ok(done);
    }
    for i in 0..nodes.len() {
        let held = nodes[i].connections().await.ok().flatten().unwrap_or(0);
        let addr = nodes[i].addr;
        let at_us = now_us();
        let old = nodes.remove(i);
        done.logs.push(old.stop().await?);
        let exited_us = now_us();
        let next = restart(target, &flags[i], addr).await.with_context(|| format!("restarting node {i}"))?;
        preload::wait_ready(&next).await?;
        let ready_us = now_us();
        nodes.insert(i, next);
        eprintln!(
            "cell: node {i} drained ({held} connections) in {:.1} s, back and ready {:.1} s later",
            (exited_us - at_us) as f64 / 1e6,
            (ready_us - exited_us) as f64 / 1e6
        );
        done.steps.push(Step {
            node: i,
            kind: "drain",
            held,
            at_us,
            exited_us: Some(exited_us),
            ready_us: Some(ready_us),
        });
        tokio::time::sleep(Duration::from_secs_f64(f.roll_pause_s)).await;
    }
    Ok(done)
}

/// Starts a node on `addr` again: the port its predecessor just left may take a moment to be free.
async fn restart(target: &TargetArgs, flags: &[String], addr: std::net::SocketAddr) -> anyhow::Result<Server> {
    let until = Instant::now() + REBIND_TIMEOUT;
    loop {
        match Server::open_at(target, flags, addr).await {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= until => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// The bad day's figures: per step, the users of the node and how they came back, and the live
/// p99 around it against the quiet before.
pub fn figures(done: &Done, sum: &Sum, load_start_us: u64) -> Value {
    let Some(first) = done.steps.first() else { return Value::Null };
    let quiet = window(&sum.live, load_start_us / 1_000_000 + QUIET_SKIP_S, first.at_us / 1_000_000);
    // A roll lasts until its last node is ready and the last of its users resumed.
    let last = done
        .steps
        .iter()
        .flat_map(|s| [s.ready_us, sum.losses.get(&(s.node as u32)).and_then(|l| l.last_resumed_us)])
        .flatten()
        .max()
        .unwrap_or(first.at_us);
    let during = match first.kind {
        "kill" => window(&sum.live, first.at_us / 1_000_000, (first.at_us + AFTER_KILL.as_micros() as u64) / 1_000_000),
        _ => window(&sum.live, first.at_us / 1_000_000, last / 1_000_000 + 1),
    };
    let empty = Losses::default();
    let steps: Vec<Value> = done
        .steps
        .iter()
        .map(|s| {
            let l = sum.losses.get(&(s.node as u32)).unwrap_or(&empty);
            let resume = Latencies::from_counts(&l.resume).summary();
            let secs = |us: Option<u64>| us.map(|u| round(u.saturating_sub(s.at_us) as f64 / 1e6));
            let per_s: Vec<u64> = l.reconnects_per_s.values().copied().collect();
            let spread = match (l.reconnects_per_s.keys().next(), l.reconnects_per_s.keys().last()) {
                (Some(a), Some(b)) => b - a + 1,
                _ => 0,
            };
            json!({
                "node": s.node,
                "kind": s.kind,
                "held": s.held,
                "sessions_lost": l.lost,
                "resumed": l.resumed,
                "never_resumed": l.never,
                "resume_p50_ms": resume.p50_ms,
                "resume_p99_ms": resume.p99_ms,
                "resume_max_ms": resume.max_ms,
                "last_resumed_s": secs(l.last_resumed_us),
                "drain_s": secs(s.exited_us),
                "back_ready_s": secs(s.ready_us),
                "reconnects_over_s": spread,
                "reconnects_per_s_peak": per_s.iter().max().copied().unwrap_or(0),
                "reconnects_per_s_mean": if spread == 0 { 0.0 } else { round(l.resumed as f64 / spread as f64) },
                "reconnects_per_s": l.reconnects_per_s,
            })
        })
        .collect();
    let c = &sum.counted;
    let replay = sum.replay.summary();
    json!({
        "steps": steps,
        "live_p99_quiet_ms": quiet.quantile_ms(0.99),
        "live_p99_during_ms": during.quantile_ms(0.99),
        "live_p50_quiet_ms": quiet.quantile_ms(0.50),
        "live_p50_during_ms": during.quantile_ms(0.50),
        "live_samples_quiet": quiet.count(),
        "live_samples_during": during.count(),
        "during_s": round((if first.kind == "kill" { first.at_us + AFTER_KILL.as_micros() as u64 } else { last })
            .saturating_sub(first.at_us) as f64 / 1e6),
        "reconnects": c.reconnects,
        "reconnect_pushes": c.reconnect_pushes,
        "stalls": c.stalls,
        "resends": c.resends,
        "replayed": c.replayed,
        "replay_p50_ms": replay.p50_ms,
        "replay_p99_ms": replay.p99_ms,
        "still_resuming": c.resuming,
    })
}

/// The bad-day smoke's verdict on top of the exact one: a fault happened, sessions moved, and
/// every one of them resumed.
pub fn check_resumed(out: &Value) -> Result<(), String> {
    let b = &out["bad_day"];
    let n = |k: &str| b[k].as_i64().unwrap_or(-1);
    let steps = b["steps"].as_array().map_or(0, Vec::len);
    let never: i64 =
        b["steps"].as_array().into_iter().flatten().map(|s| s["never_resumed"].as_i64().unwrap_or(0)).sum();
    let checks = [
        ("a fault happened", steps > 0),
        ("sessions reconnected", n("reconnects") > 0),
        ("every session resumed", never == 0 && n("still_resuming") == 0),
    ];
    let failed: Vec<&str> = checks.iter().filter(|(_, ok)| !ok).map(|(name, _)| *name).collect();
    if failed.is_empty() {
        return Ok(());
    }
    Err(format!("{}: {b}", failed.join(", ")))
}

/// Prints the bad day for people.
pub fn print(out: &Value) {
    let b = &out["bad_day"];
    if b.is_null() {
        return;
    }
    let g = |p: &str| crate::report::cell(b.pointer(p));
    println!(
        "bad day: {} reconnects ({} asked by a drain), {} stalled requests, {} sends resent, {} messages by replay \
         (p50 {} ms, p99 {} ms), {} sessions still resuming at the end",
        g("/reconnects"),
        g("/reconnect_pushes"),
        g("/stalls"),
        g("/resends"),
        g("/replayed"),
        g("/replay_p50_ms"),
        g("/replay_p99_ms"),
        g("/still_resuming")
    );
    for s in b["steps"].as_array().into_iter().flatten() {
        let f = |k: &str| crate::report::cell(s.get(k));
        println!(
            "  {} node {}: held {}, {} sessions lost, {} resumed, {} never; resume p50 {} ms, p99 {} ms, max {} ms, \
             last {} s after; exit {} s, ready {} s after; reconnects over {} s, peak {}/s, mean {}/s",
            f("kind"),
            f("node"),
            f("held"),
            f("sessions_lost"),
            f("resumed"),
            f("never_resumed"),
            f("resume_p50_ms"),
            f("resume_p99_ms"),
            f("resume_max_ms"),
            f("last_resumed_s"),
            f("drain_s"),
            f("back_ready_s"),
            f("reconnects_over_s"),
            f("reconnects_per_s_peak"),
            f("reconnects_per_s_mean")
        );
    }
    println!(
        "  live delivery p99: {} ms quiet before, {} ms during ({} s); p50 {} ms, {} ms; lost {}, duplicates {}",
        g("/live_p99_quiet_ms"),
        g("/live_p99_during_ms"),
        g("/during_s"),
        g("/live_p50_quiet_ms"),
        g("/live_p50_during_ms"),
        crate::report::cell(out.get("lost")),
        crate::report::cell(out.get("duplicates"))
    );
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
