//! `churn`: short-lived connections at a set rate. Each one connects, says
//! hello, joins and watches one of M chats, holds for `--hold-ms`, and closes.
//! New sockets start at `--rate` per second for `--duration-s` (bounded: at
//! most [`MAX_CONNS`] per run, and every attempt has its own timeout).
//!
//! Reported: connections completed per second, failures, the server's CPU (in
//! cores, from `/proc/PID/stat`) and, when the server runs with `--broker`,
//! the broker subscription operations per second (deltas of
//! `herald_broker_subscribes_total` + `herald_broker_unsubscribes_total` at
//! GET /metrics over the same window) beside the socket churn per second.
//! With per-node interest and `--broker-linger-ms`, a node subscribes to a
//! chat's subject once, however many of its watchers come and go.
//!
//! `--peer` measures a peer instead: its clients connect, join a room
//! (Socket.IO), subscribe to a subject (NATS) or to a public channel
//! (Sockudo), hold and close; there are no broker counters then.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};

use crate::client::{fresh_chat, fresh_sources, source_addr};
use crate::conn::{Conn, Dial};
use crate::fleet::{self, Launch};
use crate::http;
use crate::latency::Latencies;
use crate::peer::{Peer, cpu_s};
use crate::report::{self, Column, RunArgs, col};
use crate::server::{Server, TargetArgs};
use crate::target::Target;

/// Connections per run at most (they come and go, so open files stay at
/// rate x hold; this bounds source addresses and the run's length).
const MAX_CONNS: usize = 200_000;
/// Connections in flight at once at most: well under 20,000 open files.
const MAX_IN_FLIGHT: usize = 8_000;
/// Source addresses a run may use: 5,000 connections each, so up to 240,000 connections.
const SOURCES_PER_RUN: u32 = 48;

/// `herald-bench churn`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct ChurnArgs {
    /// New connections started per second.
    #[arg(long, default_value_t = 500.0)]
    pub rate: f64,
    /// Seconds during which new connections start.
    #[arg(long, default_value_t = 10.0)]
    pub duration_s: f64,
    /// How long each connection stays after its watch is acked, in ms.
    #[arg(long, default_value_t = 200)]
    pub hold_ms: u64,
    /// Chats the connections spread over (connection i joins chat i mod M).
    #[arg(long, default_value_t = 100)]
    pub chats: usize,
    /// The server measured: herald, or a peer (its clients connect, join a room, hold and close).
    #[arg(long, value_enum, default_value_t = Peer::Herald)]
    pub peer: Peer,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("completed", "completed"),
    col("failed", "failed"),
    col("connects_per_s", "connects/s"),
    col("p50_ms", "setup p50 ms"),
    col("p99_ms", "setup p99 ms"),
    col("server_cores", "server cores"),
    col("server_cpu_us_per_socket", "server us/socket"),
    col("broker_sub_ops_per_s", "broker sub ops/s"),
    col("sub_ops_per_socket", "sub ops per socket"),
    col("broker_subjects", "subjects"),
];

/// Runs churn `args.run.runs` times and reports.
pub async fn run(args: ChurnArgs) -> anyhow::Result<Vec<Value>> {
    check(&args)?;
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("churn", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

pub fn check(args: &ChurnArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.rate > 0.0 && args.duration_s > 0.0 && args.chats > 0,
        "positive --rate, --duration-s, --chats"
    );
    let count = (args.rate * args.duration_s).round() as usize;
    anyhow::ensure!((1..=MAX_CONNS).contains(&count), "rate x duration must be 1..={MAX_CONNS}");
    anyhow::ensure!(args.duration_s <= 300.0, "--duration-s at most 300");
    Ok(())
}

/// Broker counters of a herald node, from its /metrics (absent without --broker).
#[derive(Debug, Default, Clone, Copy)]
struct BrokerCounters {
    subscribes: f64,
    unsubscribes: f64,
    subjects: f64,
    present: bool,
}

async fn broker_counters(server: &Server) -> BrokerCounters {
    let Ok(answer) = http::get(server.addr, "/metrics", None).await else { return BrokerCounters::default() };
    parse_counters(&answer.body)
}

fn parse_counters(body: &str) -> BrokerCounters {
    let mut c = BrokerCounters::default();
    for l in body.lines() {
        let mut it = l.split_whitespace();
        let (Some(name), Some(v)) = (it.next(), it.next()) else { continue };
        let Ok(v) = v.parse::<f64>() else { continue };
        match name {
            "herald_broker_subscribes_total" => (c.subscribes, c.present) = (v, true),
            "herald_broker_unsubscribes_total" => (c.unsubscribes, c.present) = (v, true),
            "herald_broker_subjects" => (c.subjects, c.present) = (v, true),
            _ => {}
        }
    }
    c
}

/// One run; `run` numbers it among the process's runs (it picks the source addresses).
pub async fn run_once(args: &ChurnArgs, run: u32) -> anyhow::Result<Value> {
    let server = Target::start(args.peer, &args.target, &[]).await?;
    let out = measure(args, run, &server).await;
    let log = server.stop().await?;
    let mut out = out?;
    out["server_log"] = log;
    Ok(out)
}

/// One run against a started server: herald's clients hello, join and watch;
/// a peer's connect and join a room (Sockudo: subscribe to a public channel).
async fn measure(args: &ChurnArgs, run: u32, server: &Target) -> anyhow::Result<Value> {
    let dial = Arc::new(Dial::to(server, &args.target.workspace));
    let prefix = fresh_chat("churn", run);
    let rooms: Arc<Vec<String>> =
        Arc::new((0..args.chats).map(|c| args.peer.room(&format!("{prefix}-{c}"), false)).collect());
    let count = (args.rate * args.duration_s).round() as usize;
    let base = fresh_sources(run, SOURCES_PER_RUN);
    let hold = Duration::from_millis(args.hold_ms);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let herald = match server {
        Target::Herald(s) => Some(s),
        Target::Peer(_) => None,
    };
    let before = match herald {
        Some(s) => broker_counters(s).await,
        None => BrokerCounters::default(),
    };
    let cpu0 = cpu_s(server.pid()).unwrap_or(0.0);
    let t0 = Instant::now();
    let spec = Launch {
        count,
        concurrency: MAX_IN_FLIGHT,
        rate: Some(args.rate),
        deadline: Duration::from_secs_f64(args.duration_s * 1.5 + 5.0),
    };
    let out = fleet::launch(spec, |i| {
        let (dial, rooms) = (dial.clone(), rooms.clone());
        async move {
            let started = Instant::now();
            let mut c = Conn::open(&dial, &format!("c{i}"), source_addr(base, i)).await?;
            c.enter(&rooms[i % rooms.len()]).await?;
            let setup = started.elapsed();
            let done = Instant::now();
            tokio::time::sleep(hold).await;
            c.close().await;
            Ok((setup, done))
        }
    })
    .await;
    // The window: from the first start to the last watch acked.
    let last = out.ok.iter().map(|(_, (_, d))| *d).max().unwrap_or(t0);
    let window = (last - t0).as_secs_f64().max(1e-9);
    let cpu = cpu_s(server.pid()).unwrap_or(0.0) - cpu0;
    let cpu_window = out.elapsed.as_secs_f64().max(1e-9);
    let after = match herald {
        Some(s) => broker_counters(s).await,
        None => BrokerCounters::default(),
    };
    let mut latencies = Latencies::default();
    for (_, (setup, _)) in &out.ok {
        latencies.record(*setup);
    }
    let completed = out.ok.len();
    // Subscription ops over the whole launch (starts to last close), against its socket churn.
    let (sub_ops, sub_ops_per_s, per_socket) = if before.present || after.present {
        let ops = (after.subscribes - before.subscribes) + (after.unsubscribes - before.unsubscribes);
        (Some(ops), Some(ops / cpu_window), Some(ops / completed.max(1) as f64))
    } else {
        (None, None, None)
    };
    let p = latencies.summary();
    Ok(json!({
        "peer": args.peer.as_str(),
        "planned": count,
        "completed": completed,
        "failed": out.failures.total,
        "failures": out.failures,
        "window_s": window,
        "connects_per_s": completed as f64 / window,
        "p50_ms": p.p50_ms,
        "p99_ms": p.p99_ms,
        "server_cpu_s": cpu,
        "server_cores": cpu / cpu_window,
        "server_cpu_us_per_socket": cpu * 1e6 / completed.max(1) as f64,
        "broker_subscribes": after.present.then_some(after.subscribes - before.subscribes),
        "broker_unsubscribes": after.present.then_some(after.unsubscribes - before.unsubscribes),
        "broker_sub_ops": sub_ops,
        "broker_sub_ops_per_s": sub_ops_per_s,
        "sub_ops_per_socket": per_socket,
        "broker_subjects": after.present.then_some(after.subjects),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_from_metrics() {
        let body = "# HELP x\nherald_broker_subscribes_total 12\nherald_broker_unsubscribes_total 3\nherald_broker_subjects 9\nherald_connections 4\n";
        let c = parse_counters(body);
        assert!(c.present);
        assert_eq!((c.subscribes, c.unsubscribes, c.subjects), (12.0, 3.0, 9.0));
        assert!(!parse_counters("herald_connections 1\n").present);
    }
}
