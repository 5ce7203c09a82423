//! `compare`: herald and its peers on the same scenario in one run, runs
//! interleaved (run 1 of each, then run 2 of each, ...) so that drift of a
//! shared machine spreads over all of them; medians per server, and each
//! figure beside herald's as a ratio (peer ÷ herald).

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{Value, json};

use crate::machine::Machine;
use crate::peer::Peer;
use crate::report;
use crate::scenarios::churn::{self, ChurnArgs};
use crate::scenarios::fanout::{self, FanoutArgs};
use crate::scenarios::idle::{self, IdleArgs};
use crate::scenarios::joinflood::{self, JoinfloodArgs};

/// `herald-bench compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The servers to run, herald first; each figure is shown as a ratio to herald's.
    #[arg(long, value_delimiter = ',', default_value = "herald,socketio,nats", global = true)]
    pub peers: Vec<Peer>,
    #[command(subcommand)]
    pub scenario: CompareScenario,
}

#[derive(Debug, Subcommand)]
pub enum CompareScenario {
    /// Memory per idle connection (see `idle`); `--peer` is set per server.
    Idle(IdleArgs),
    /// Fan-out to one chat at a rising rate (see `fanout`); `--peer` is set per server.
    Fanout(FanoutArgs),
    /// Joins into one chat at a rising rate (see `joinflood`); herald, socketio, sockudo.
    Joinflood(JoinfloodArgs),
    /// Short-lived connections at a set rate (see `churn`); `--peer` is set per server.
    Churn(ChurnArgs),
}

/// A figure compared: its key in a run object, its label, and which way is better.
struct Figure {
    key: &'static str,
    label: &'static str,
    lower_is_better: bool,
}

const fn fig(key: &'static str, label: &'static str, lower_is_better: bool) -> Figure {
    Figure { key, label, lower_is_better }
}

const IDLE_FIGURES: &[Figure] = &[
    fig("established", "connections held", false),
    fig("failed", "failed connects", true),
    fig("server_rss_before_kib", "server RSS before, KiB", true),
    fig("server_rss_after_kib", "server RSS after, KiB", true),
    fig("server_kb_per_conn", "server KB per connection", true),
    fig("client_kb_per_conn", "client KB per connection", true),
    fig("dropped", "dropped while held", true),
];

const FANOUT_FIGURES: &[Figure] = &[
    fig("watchers_ok", "watchers", false),
    fig("steps_passed", "rate steps passed", false),
    fig("max_deliveries_per_s", "max deliveries/s, no loss", false),
    fig("max_msgs_per_s", "max msgs/s published", false),
    fig("server_cores_at_max", "server cores at max", true),
    fig("server_us_per_delivery", "server CPU us per delivery", true),
    fig("latency_deliveries_per_s", "deliveries/s at half rate", false),
    fig("p50_ms", "p50 ms at half rate", true),
    fig("p99_ms", "p99 ms at half rate", true),
    fig("p999_ms", "p99.9 ms at half rate", true),
    fig("latency_lost", "lost at half rate", true),
];

const JOINFLOOD_FIGURES: &[Figure] = &[
    fig("steps_passed", "rate steps passed", false),
    fig("top_offered_per_s", "top joins/s offered, kept up", false),
    fig("top_acked_per_s", "joins/s acked there", false),
    fig("top_p50_ms", "join p50 ms there", true),
    fig("top_p99_ms", "join p99 ms there", true),
    fig("top_quiet_p50_ms", "quiet chat p50 ms there", true),
    fig("top_quiet_p99_ms", "quiet chat p99 ms there", true),
    fig("top_server_cores", "server cores there", true),
    fig("top_bench_cores", "bench (client) cores there", true),
    fig("seed_p99_ms", "join p99 ms at 2,000/s", true),
    fig("seed_quiet_p99_ms", "quiet chat p99 ms at 2,000/s", true),
    fig("joins_acked", "joins acked in all", false),
    fig("failed", "failed", true),
];

const CHURN_FIGURES: &[Figure] = &[
    fig("completed", "connections completed", false),
    fig("failed", "failed", true),
    fig("connects_per_s", "completed/s", false),
    fig("p50_ms", "setup p50 ms", true),
    fig("p99_ms", "setup p99 ms", true),
    fig("server_cores", "server cores", true),
    fig("server_cpu_us_per_socket", "server CPU us per socket", true),
];

/// Runs the comparison and prints it; returns each server's median.
pub async fn run(args: CompareArgs) -> anyhow::Result<Vec<(Peer, Value)>> {
    anyhow::ensure!(args.peers.first() == Some(&Peer::Herald), "--peers must start with herald");
    let mut per: Vec<Vec<Value>> = vec![Vec::new(); args.peers.len()];
    let peers = &args.peers;
    let (name, runs, json_out, params, figures) = match &args.scenario {
        CompareScenario::Idle(a) => {
            let per_run = interleave(peers, a.run.runs, "idle", &mut per, |peer, r| {
                let a = IdleArgs { peer, ..a.clone() };
                async move { idle::run_once(&a, idle::workers_for(&a)?, r).await }
            });
            per_run.await?;
            ("idle", a.run.runs, a.run.json, serde_json::to_value(a)?, IDLE_FIGURES)
        }
        CompareScenario::Fanout(a) => {
            fanout::check(a)?;
            let per_run = interleave(peers, a.run.runs, "fanout", &mut per, |peer, r| {
                let a = FanoutArgs { peer, ..a.clone() };
                async move { fanout::run_once(&a, r).await }
            });
            per_run.await?;
            ("fanout", a.run.runs, a.run.json, serde_json::to_value(a)?, FANOUT_FIGURES)
        }
        CompareScenario::Joinflood(a) => {
            anyhow::ensure!(
                !peers.contains(&Peer::Nats),
                "NATS has no members: compare joinflood with herald,socketio,sockudo"
            );
            joinflood::check(a)?;
            let per_run = interleave(peers, a.run.runs, "joinflood", &mut per, |peer, r| {
                let a = JoinfloodArgs { peer, ..a.clone() };
                async move { joinflood::run_once(&a, r).await }
            });
            per_run.await?;
            ("joinflood", a.run.runs, a.run.json, serde_json::to_value(a)?, JOINFLOOD_FIGURES)
        }
        CompareScenario::Churn(a) => {
            churn::check(a)?;
            let per_run = interleave(peers, a.run.runs, "churn", &mut per, |peer, r| {
                let a = ChurnArgs { peer, ..a.clone() };
                async move { churn::run_once(&a, r).await }
            });
            per_run.await?;
            ("churn", a.run.runs, a.run.json, serde_json::to_value(a)?, CHURN_FIGURES)
        }
    };
    let medians: Vec<Value> = per.iter().map(|r| report::median(r)).collect();
    let machine = Machine::detect();
    let herald = &medians[0];
    let ratio = |m: &Value, key: &str| -> Value {
        match (m.get(key).and_then(Value::as_f64), herald.get(key).and_then(Value::as_f64)) {
            (Some(p), Some(h)) if h != 0.0 => json!(p / h),
            _ => Value::Null,
        }
    };
    if json_out {
        let mut servers = serde_json::Map::new();
        for (i, peer) in args.peers.iter().enumerate() {
            let ratios: serde_json::Map<String, Value> =
                figures.iter().map(|f| (f.key.to_string(), ratio(&medians[i], f.key))).collect();
            servers
                .insert(peer.as_str().into(), json!({"runs": per[i], "median": medians[i], "ratio_to_herald": ratios}));
        }
        println!(
            "{}",
            json!({"scenario": name, "compare": true, "machine": machine, "params": params, "servers": servers})
        );
    }
    // The table goes to stdout, or to stderr beside the JSON.
    let mut text = String::new();
    {
        use std::fmt::Write;
        macro_rules! println {
            ($($t:tt)*) => { let _ = writeln!(text, $($t)*); };
        }
        println!("herald-bench compare {name}: {}, medians of {runs} run(s) each, interleaved", machine.summary());
        let mut header = vec!["figure".to_string(), "better".to_string()];
        for (i, p) in args.peers.iter().enumerate() {
            header.push(p.as_str().to_string());
            if i > 0 {
                header.push(format!("{} ÷ herald", p.as_str()));
            }
        }
        let mut rows = vec![header];
        for f in figures {
            let mut row = vec![f.label.to_string(), if f.lower_is_better { "lower" } else { "higher" }.to_string()];
            for (i, m) in medians.iter().enumerate() {
                row.push(report::cell(m.get(f.key)));
                if i > 0 {
                    row.push(match ratio(m, f.key).as_f64() {
                        Some(r) => format!("{r:.2}x"),
                        None => "-".into(),
                    });
                }
            }
            rows.push(row);
        }
        for line in format_rows(&rows) {
            println!("{line}");
        }
        for (i, p) in args.peers.iter().enumerate() {
            for (r, v) in per[i].iter().enumerate() {
                if let Some(f) = v.get("failures").filter(|f| f["total"].as_u64().unwrap_or(0) > 0) {
                    println!("{} run {}: {} failed; first: {}", p.as_str(), r + 1, f["total"], f["first"]);
                }
                if let Some(e) = v.get("first_watcher_error").and_then(Value::as_str) {
                    println!("{} run {}: a watcher stopped: {e}", p.as_str(), r + 1);
                }
                if let Some(e) = v.get("first_fail").and_then(Value::as_str) {
                    println!("{} run {}: first failing step {e}", p.as_str(), r + 1);
                }
            }
        }
    }
    if json_out {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
    Ok(args.peers.iter().copied().zip(medians).collect())
}

/// Runs `once(peer, run_number)` for run 1 of every server, then run 2 of each, ...;
/// `per[i]` gets server i's runs. The run number is distinct across the whole comparison
/// (it picks fresh source addresses and chat names).
async fn interleave<F, Fut>(
    peers: &[Peer],
    runs: u32,
    name: &str,
    per: &mut [Vec<Value>],
    once: F,
) -> anyhow::Result<()>
where
    F: Fn(Peer, u32) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Value>>,
{
    let n = peers.len() as u32;
    for r in 0..runs {
        for (i, &peer) in peers.iter().enumerate() {
            let v = once(peer, r * n + i as u32).await.with_context(|| format!("{} run {}", peer.as_str(), r + 1))?;
            eprintln!("{name} {} run {}/{runs} done", peer.as_str(), r + 1);
            per[i].push(v);
        }
    }
    Ok(())
}

fn format_rows(rows: &[Vec<String>]) -> Vec<String> {
    let cols = rows.first().map_or(0, |r| r.len());
    let widths: Vec<usize> = (0..cols).map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    rows.iter()
        .map(|row| {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, w))| {
                    let pad = w - c.chars().count();
                    if i == 0 { format!("{c}{}", " ".repeat(pad)) } else { format!("{}{c}", " ".repeat(pad)) }
                })
                .collect();
            line.join("  ")
        })
        .collect()
}
