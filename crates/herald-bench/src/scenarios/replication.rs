//! The `replication` scenario: what a synchronous standby costs a send. The
//! same workload as `sends` (`send_load`: S senders, K messages each, one at
//! a time per connection, a watcher checking every event) against herald on
//! a PostgreSQL store, in each setup of `replication/clusters` (a server
//! alone, a primary with a synchronous standby, one with an asynchronous
//! standby), all started by the bench with the repository's `scripts/pg.sh`.
//! Each run measures every setup once, on a fresh database and a fresh
//! herald, the order rotating from run to run so that none always goes first.
//! Reported: each run, each setup's medians over the runs, and the ratios of
//! each standby setup to the server alone (of the medians, and the median of
//! the ratios within each run).

mod clusters;

use std::path::PathBuf;

use anyhow::{Context, ensure};
use clap::Args;
use serde::Serialize;
use serde_json::{Map, Value, json};

use crate::machine::Machine;
use crate::preload::{self, Preloaded, StoreKind};
use crate::report::{self, RunArgs};
use crate::send_load;
use crate::server::{self, Server, TargetArgs};
use clusters::{Cluster, Setup, Setups};

/// Most S*K per measurement: 15 of them (5 runs of 3 setups) fit in minutes at a few thousand sends/s.
const MAX_SENDS: usize = 200_000;
/// The figures each setup's ratio to the server alone is taken of.
const RATIO_KEYS: &[&str] = &["sends_per_s", "p50_ms", "p99_ms", "p999_ms"];
/// The table's columns after the run and the setup: a run object's key and its header.
const COLUMNS: &[(&str, &str)] = &[
    ("acked", "acked"),
    ("failed", "failed"),
    ("sends_per_s", "sends/s"),
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("p999_ms", "p99.9 ms"),
    ("max_ms", "max ms"),
    ("pg_cpu_ms_per_1k", "pg CPU ms/1k sends"),
    ("all_delivered", "all delivered"),
];

/// `herald-bench replication`.
#[derive(Debug, Args, Serialize)]
#[command(mut_arg("runs", |a| a.default_value("3")))]
pub struct ReplicationArgs {
    /// Concurrent senders (connections).
    #[arg(long, default_value_t = 20)]
    pub senders: usize,
    /// Messages per sender.
    #[arg(long, default_value_t = 500)]
    pub messages: usize,
    /// The setups to compare, in the first run's order.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "alone,sync,async")]
    pub setups: Vec<Setup>,
    /// The repository's pg.sh, which starts and stops the PostgreSQL servers.
    #[arg(long, default_value = "scripts/pg.sh")]
    pub pg_script: PathBuf,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

/// Starts the setups, measures each `args.run.runs` times, stops them, reports.
pub async fn run(args: ReplicationArgs) -> anyhow::Result<Vec<Value>> {
    ensure!(args.target.starts_server(), "replication starts its own servers, on its own stores");
    ensure!(args.senders > 0 && args.messages > 0, "--senders and --messages must be positive");
    ensure!(args.senders * args.messages <= MAX_SENDS, "at most {MAX_SENDS} sends per measurement");
    ensure!(!args.setups.is_empty(), "--setups names none");
    ensure!((1..args.setups.len()).all(|i| !args.setups[..i].contains(&args.setups[i])), "--setups names one twice");
    ensure!(
        args.pg_script.is_file(),
        "no {} (run from the repository's root, or pass --pg-script PATH to scripts/pg.sh)",
        args.pg_script.display()
    );
    let setups = Setups::start(&args.pg_script, &args.setups).await?;
    let version = setups.list[0].version().await?;
    eprintln!("PostgreSQL {version}: {} setups ready", setups.list.len());
    let n = setups.list.len();
    let mut runs = Vec::new();
    for r in 0..args.run.runs {
        for i in 0..n {
            let cluster = &setups.list[(i + r as usize) % n];
            let index = r * n as u32 + i as u32;
            let name = cluster.setup.name();
            let mut out =
                measure(&args, cluster, index).await.with_context(|| format!("run {}, setup {name}", r + 1))?;
            out["run"] = json!(r + 1);
            out["setup"] = json!(name);
            out["order"] = json!(i + 1);
            eprintln!("run {}/{}: {name}: {} sends/s", r + 1, args.run.runs, report::cell(out.get("sends_per_s")));
            runs.push(out);
        }
    }
    drop(setups);
    emit(&args, &version, &runs);
    Ok(runs)
}

/// One measurement of one setup: a fresh database on it, a fresh herald on that.
async fn measure(args: &ReplicationArgs, cluster: &Cluster, index: u32) -> anyhow::Result<Value> {
    cluster.check().await?;
    let prefix = format!("repl_{}_{index}", cluster.setup.name());
    let db = Preloaded::create(StoreKind::Postgres, Some(&cluster.admin_url), &prefix).await?;
    let out = async {
        let mut flags = server::raised_limits();
        flags.extend(db.flags.iter().cloned());
        let server = Server::open(&args.target, &flags).await?;
        // herald listens before its store is open (and migrated): the sends start after.
        preload::wait_ready(&server).await?;
        let cpu = cluster.cpu_s();
        let mut out =
            send_load::measure(server, &args.target.workspace, "replication", args.senders, args.messages, index)
                .await?;
        // The whole measurement's: the joins, the sends, the watcher's fetches, the server's disconnects.
        let cpu = cluster.cpu_s() - cpu;
        let acked = out["acked"].as_f64().unwrap_or(0.0);
        out["pg_cpu_s"] = json!(cpu);
        // Whole milliseconds: the kernel counts CPU time in ticks of 10 ms.
        out["pg_cpu_ms_per_1k"] = json!(if acked > 0.0 { (cpu * 1e6 / acked).round() } else { 0.0 } as u64);
        anyhow::Ok(out)
    }
    .await;
    db.remove().await;
    out
}

/// Each setup's medians over the runs, and each standby setup's ratios to the server alone.
fn summarise(runs: &[Value]) -> (Map<String, Value>, Map<String, Value>) {
    let mut medians = Map::new();
    let mut names: Vec<&str> = Vec::new();
    for r in runs {
        if let Some(s) = r["setup"].as_str()
            && !names.contains(&s)
        {
            names.push(s);
        }
    }
    for name in &names {
        let of: Vec<Value> = runs.iter().filter(|r| r["setup"] == *name).cloned().collect();
        medians.insert(name.to_string(), report::median(&of));
    }
    let mut ratios = Map::new();
    let Some(alone) = medians.get("alone") else { return (medians, ratios) };
    for name in names.iter().filter(|n| **n != "alone") {
        let mut ratio = Map::new();
        for key in RATIO_KEYS {
            ratio.insert(key.to_string(), json!(divide(medians[*name].get(*key), alone.get(*key))));
            // Paired within each run (both measured minutes apart): the median of those ratios.
            let paired: Vec<Value> = runs
                .iter()
                .filter(|r| r["setup"] == *name)
                .filter_map(|r| {
                    let base = runs.iter().find(|b| b["setup"] == "alone" && b["run"] == r["run"])?;
                    divide(r.get(*key), base.get(*key)).map(|x| json!(x))
                })
                .collect();
            ratio.insert(format!("{key}_paired"), report::median(&paired));
        }
        ratios.insert(format!("{name}_over_alone"), Value::Object(ratio));
    }
    (medians, ratios)
}

fn divide(a: Option<&Value>, b: Option<&Value>) -> Option<f64> {
    let (a, b) = (a?.as_f64()?, b?.as_f64()?);
    (b != 0.0).then(|| a / b)
}

/// Prints the report: one JSON object with `--json`, else a table of every
/// measurement, each setup's medians, and the ratios.
fn emit(args: &ReplicationArgs, version: &str, runs: &[Value]) {
    let machine = Machine::detect();
    let (medians, ratios) = summarise(runs);
    if args.run.json {
        let out = json!({
            "scenario": "replication",
            "machine": machine,
            "postgres": version,
            "params": args,
            "runs": runs,
            "median": medians,
            "ratios": ratios,
        });
        println!("{out}");
        return;
    }
    println!("herald-bench replication: {}, PostgreSQL {version}", machine.summary());
    println!(
        "params: senders={} messages={} runs={} setups={}",
        args.senders,
        args.messages,
        args.run.runs,
        args.setups.iter().map(|s| s.name()).collect::<Vec<_>>().join(",")
    );
    let header = ["run", "setup"].into_iter().chain(COLUMNS.iter().map(|c| c.1)).map(String::from).collect();
    let mut rows: Vec<Vec<String>> = vec![header];
    let row = |label: String, v: &Value| -> Vec<String> {
        let cells = COLUMNS.iter().map(|c| report::cell(v.get(c.0)));
        [label, report::cell(v.get("setup"))].into_iter().chain(cells).collect()
    };
    for r in runs {
        rows.push(row(report::cell(r.get("run")), r));
    }
    for m in medians.values() {
        rows.push(row("median".into(), m));
    }
    report::print_rows(&rows);
    for (name, ratio) in &ratios {
        let shown: Vec<String> = RATIO_KEYS
            .iter()
            .map(|k| format!("{k} {} (paired {})", cell3(ratio.get(*k)), cell3(ratio.get(format!("{k}_paired")))))
            .collect();
        println!("{name}: {}", shown.join(", "));
    }
    for r in runs {
        let failed = r["failed"].as_u64().unwrap_or(0);
        if failed > 0 {
            println!("run {} {}: {failed} failed; first: {}", r["run"], r["setup"], r["failures"]["first"]);
        }
    }
}

/// A ratio with three decimals.
fn cell3(v: Option<&Value>) -> String {
    v.and_then(Value::as_f64).map_or("-".into(), |x| format!("{x:.3}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_are_of_medians_and_paired() {
        let runs = vec![
            json!({"run": 1, "setup": "alone", "sends_per_s": 1000.0, "p50_ms": 2.0}),
            json!({"run": 1, "setup": "sync", "sends_per_s": 500.0, "p50_ms": 4.0}),
            json!({"run": 2, "setup": "sync", "sends_per_s": 900.0, "p50_ms": 3.0}),
            json!({"run": 2, "setup": "alone", "sends_per_s": 1200.0, "p50_ms": 1.0}),
        ];
        let (medians, ratios) = summarise(&runs);
        assert_eq!(medians["alone"]["sends_per_s"], json!(1100));
        let r = &ratios["sync_over_alone"];
        assert!((r["sends_per_s"].as_f64().unwrap() - 700.0 / 1100.0).abs() < 1e-9);
        // Run 1: 0.5, run 2: 0.75.
        assert!((r["sends_per_s_paired"].as_f64().unwrap() - 0.625).abs() < 1e-9);
        assert!((r["p50_ms_paired"].as_f64().unwrap() - 2.5).abs() < 1e-9);
        assert!(r["p99_ms"].is_null());
    }
}
