//! `presence`: the cost of presence changes in a chat of P present users.
//! P distinct users join one chat; P - C of them watch it and ask for its
//! presence (so they get its presence pushes, as a v1.1 client does) and
//! stay; C churners then watch and unwatch it in turn, each watch or unwatch
//! one presence change, `--changes` in all. Up to 100 present users every
//! change is pushed to every watcher; above, the count is, at most every 5 s.
//!
//! Reported, over the churn window only (setup and its pushes excluded):
//! presence changes and presence pushes as the server counts them
//! (`herald_presence_changes_total`, `herald_presence_pushes_total` at
//! GET /metrics), pushes per change, presence pushes the watchers read, and
//! the server's CPU time per change (from `/proc/PID/stat`; it includes the
//! `watch` and `unwatch` requests themselves, the store read of each `watch`
//! among them). The server runs with the per-connection request rate raised,
//! so that a churner's back-to-back requests are not throttled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{Client, Held, bounded, fresh_chat, sources_for};
use crate::fleet::{self, Failures, for_each};
use crate::http;
use crate::peer::cpu_s;
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, Server, TargetArgs};
use crate::token::Signer;

/// Clients in this one process: stay well under its 20,000 open files.
const MAX_PRESENT: usize = 15_000;

/// `herald-bench presence`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct PresenceArgs {
    /// Present users at most: P - C stay, C churn.
    #[arg(long, default_value_t = 100)]
    pub present: usize,
    /// Churners: users who watch and unwatch in turn.
    #[arg(long, default_value_t = 10)]
    pub churners: usize,
    /// Presence changes (watches plus unwatches) in the measured window.
    #[arg(long, default_value_t = 2000)]
    pub changes: usize,
    /// Changes per second offered, all churners together (0: each churner back to back).
    /// Above 100 present users the count is pushed at most every 5 s, so the window's length matters.
    #[arg(long, default_value_t = 0.0)]
    pub rate: f64,
    /// Wait after setup, before measuring, in ms (past the 5 s count window, so setup's pushes are done).
    #[arg(long, default_value_t = 5500)]
    pub settle_ms: u64,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("present", "present"),
    col("changes", "changes"),
    col("changes_per_s", "changes/s"),
    col("pushes", "pushes"),
    col("pushes_per_change", "pushes/change"),
    col("read_pushes", "pushes read"),
    col("server_cpu_us_per_change", "server us/change"),
    col("failed", "failed"),
];

/// Runs the scenario `args.run.runs` times and reports.
pub async fn run(args: PresenceArgs) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(
        args.churners >= 1 && args.churners < args.present && args.present <= MAX_PRESENT,
        "1 <= --churners < --present <= {MAX_PRESENT}"
    );
    anyhow::ensure!(args.changes >= 1, "--changes at least 1");
    anyhow::ensure!(args.rate >= 0.0 && args.rate.is_finite(), "--rate must be 0 or more");
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("presence", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

/// The server's presence counters from its /metrics: (changes, pushes).
async fn counters(server: &Server) -> anyhow::Result<(f64, f64)> {
    let answer = http::get(server.addr, "/metrics", None).await?;
    Ok(parse_counters(&answer.body))
}

fn parse_counters(body: &str) -> (f64, f64) {
    let (mut changes, mut pushes) = (0.0, 0.0);
    for l in body.lines() {
        let mut it = l.split_whitespace();
        let (Some(name), Some(v)) = (it.next(), it.next().and_then(|v| v.parse::<f64>().ok())) else { continue };
        match name {
            "herald_presence_changes_total" => changes = v,
            "herald_presence_pushes_total" => pushes = v,
            _ => {}
        }
    }
    (changes, pushes)
}

async fn run_once(args: &PresenceArgs, run: u32) -> anyhow::Result<Value> {
    // A churner's requests come back to back: the per-connection request rate is raised, as for `sends`.
    Server::measured(&args.target, &server::raised_limits(), async |server| measure(args, run, server).await).await
}

async fn measure(args: &PresenceArgs, run: u32, server: &Server) -> anyhow::Result<Value> {
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let chat: Arc<str> = fresh_chat("presence", run).into();
    let offset = run * sources_for(args.present);
    let (clients, mut failures) =
        fleet::open_clients(server, &signer, args.present, offset, |i| format!("p{i:05}")).await;
    anyhow::ensure!(clients.len() == args.present, "setup failed: {failures:?}");
    // Everyone joins before anyone watches: a join is an event every watcher would be pushed.
    let clients = for_each(clients, &mut failures, {
        let chat = chat.clone();
        move |mut c: Client| {
            let chat = chat.clone();
            async move {
                bounded(c.join(&chat)).await?;
                Ok(c)
            }
        }
    })
    .await;
    anyhow::ensure!(clients.len() == args.present, "joins failed: {failures:?}");
    let mut clients = clients.into_iter();
    let churners: Vec<Client> = clients.by_ref().take(args.churners).collect();
    let stayers = for_each(clients.collect(), &mut failures, {
        let chat = chat.clone();
        move |mut c: Client| {
            let chat = chat.clone();
            async move {
                bounded(c.watch(&chat)).await?;
                bounded(c.presence(&chat)).await?;
                Ok(c)
            }
        }
    })
    .await;

    // The stayers read what they are pushed, counting presence pushes.
    let (stop_tx, stop_rx) = watch::channel(false);
    let read = Arc::new(AtomicU64::new(0));
    let mut readers = Vec::new();
    for mut c in stayers {
        let (mut stop, read) = (stop_rx.clone(), read.clone());
        readers.push(tokio::spawn(async move {
            let held = c.count_pushes_until(&mut stop, "presence", &read).await;
            c.close().await;
            held
        }));
    }
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;

    let read0 = read.load(Ordering::Relaxed);
    let (changes0, pushes0) = counters(server).await?;
    let cpu0 = cpu_s(server.pid).unwrap_or(0.0);
    let started = Instant::now();
    // Churner k does its share of the changes: watch, unwatch, watch, ...
    let mut tasks = Vec::new();
    for (k, mut c) in churners.into_iter().enumerate() {
        let chat = chat.clone();
        let share = args.changes / args.churners + usize::from(k < args.changes % args.churners);
        let mut pace = (args.rate > 0.0).then(|| {
            let mut t = tokio::time::interval(Duration::from_secs_f64(args.churners as f64 / args.rate));
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            t
        });
        tasks.push(tokio::spawn(async move {
            let mut failures = Failures::default();
            for i in 0..share {
                if let Some(p) = pace.as_mut() {
                    p.tick().await;
                }
                let r =
                    if i % 2 == 0 { bounded(c.watch(&chat)).await.map(drop) } else { bounded(c.unwatch(&chat)).await };
                if let Err(f) = r {
                    failures.add_failure(&f);
                    break;
                }
            }
            // End unwatched, so the measured window holds whole watch/unwatch pairs' pushes.
            if share % 2 == 1 {
                let _ = bounded(c.unwatch(&chat)).await;
            }
            c.close().await;
            failures
        }));
    }
    for t in tasks {
        failures.merge(&t.await?);
    }
    let elapsed = started.elapsed().as_secs_f64().max(1e-9);
    let cpu = cpu_s(server.pid).unwrap_or(0.0) - cpu0;
    // Every change reached the watchers by the time the requests are answered,
    // except a count that waits for its 5 s window: not counted, on purpose.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (changes1, pushes1) = counters(server).await?;
    let read1 = read.load(Ordering::Relaxed);
    let _ = stop_tx.send(true);
    let mut dropped = 0;
    for r in readers {
        if r.await? == Held::Dropped {
            dropped += 1;
        }
    }
    let changes = changes1 - changes0;
    let pushes = pushes1 - pushes0;
    Ok(json!({
        "present": args.present,
        "watchers": args.present - args.churners,
        "churners": args.churners,
        "changes": changes,
        "changes_per_s": changes / elapsed,
        "pushes": pushes,
        "pushes_per_change": pushes / changes.max(1.0),
        "read_pushes": read1 - read0,
        "server_cpu_s": cpu,
        "server_cpu_us_per_change": cpu * 1e6 / changes.max(1.0),
        "elapsed_s": elapsed,
        "dropped": dropped,
        "failed": failures.total,
        "failures": failures,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_from_metrics() {
        let body = "herald_presence_changes_total 12\nherald_presence_pushes_total 340\nherald_pushes_total 9\n";
        assert_eq!(parse_counters(body), (12.0, 340.0));
        assert_eq!(parse_counters(""), (0.0, 0.0));
    }
}
