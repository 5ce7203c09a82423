//! The `sends` scenario: durable message throughput into one chat, the
//! workload of `send_load` (S senders, K messages each, one at a time per
//! connection, a watcher checking order and completeness) on a server of its
//! own each run. `--op join` switches to the join flood in `sends/joins`.

use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::Value;

use crate::report::{self, Column, RunArgs, col};
use crate::send_load;
use crate::server::{self, Server, TargetArgs};

mod joins;

/// Most S*K: keeps one run under a few minutes even at a few hundred sends/s.
const MAX_SENDS: usize = 200_000;

/// What each sender does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// K messages per sender.
    Send,
    /// K distinct users per sender, each joining the chat once.
    Join,
}

/// `herald-bench sends`.
#[derive(Debug, Args, Serialize)]
pub struct SendsArgs {
    /// Concurrent senders (connections).
    #[arg(long)]
    pub senders: usize,
    /// Requests per sender.
    #[arg(long)]
    pub messages: usize,
    #[arg(long, value_enum, default_value_t = Op::Send)]
    pub op: Op,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("acked", "acked"),
    col("failed", "failed"),
    col("elapsed_s", "seconds"),
    col("sends_per_s", "sends/s"),
    col("p50_ms", "p50 ms"),
    col("p99_ms", "p99 ms"),
    col("p999_ms", "p99.9 ms"),
    col("max_ms", "max ms"),
    col("watcher_messages", "watched"),
    col("watcher_gaps", "gaps"),
    col("watcher_skipped", "skipped"),
    col("all_pushed_in_order", "all pushed in order"),
    col("all_delivered", "all after fetch"),
];

/// Runs the scenario `args.run.runs` times and reports.
pub async fn run(args: SendsArgs) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(args.senders > 0 && args.messages > 0, "--senders and --messages must be positive");
    if args.op == Op::Join {
        return joins::run(args).await;
    }
    anyhow::ensure!(args.senders * args.messages <= MAX_SENDS, "at most {MAX_SENDS} sends per run");
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("sends", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

async fn run_once(args: &SendsArgs, run: u32) -> anyhow::Result<Value> {
    let server = Server::open(&args.target, &server::raised_limits()).await?;
    send_load::measure(server, &args.target.workspace, "sends", args.senders, args.messages, run).await
}
