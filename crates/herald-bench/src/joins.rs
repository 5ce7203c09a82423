//! The join flood (`sends --op join`): S*K distinct users each join the same
//! chat once, from S senders working through K users each, one join at a time
//! per sender. Clients connect and say hello before the clock starts, so the
//! figure is the chat's join rate, not connection setup. The chat's member
//! count through the HTTP API must then equal the joins acked.

use std::time::Instant;

use anyhow::Context;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{Client, sources_for};
use crate::fleet;
use crate::fleet::Failures;
use crate::latency::Latencies;
use crate::report::{self, Column, col};
use crate::sends::{REQUEST_TIMEOUT, SendsArgs, fresh_chat};
use crate::server::Server;
use crate::token::Signer;

/// Every joining user holds an open connection: stay well under the 20,000
/// open files of this one process.
const MAX_JOINS: usize = 15_000;

const COLUMNS: &[Column] = &[
    col("acked", "acked"),
    col("failed", "failed"),
    col("setup_s", "setup s"),
    col("elapsed_s", "seconds"),
    col("joins_per_s", "joins/s"),
    col("p50_ms", "p50 ms"),
    col("p99_ms", "p99 ms"),
    col("p999_ms", "p99.9 ms"),
    col("max_ms", "max ms"),
    col("members", "members"),
    col("members_match", "members = joins"),
];

/// Runs the join flood `args.run.runs` times and reports.
pub async fn run(args: SendsArgs) -> anyhow::Result<Vec<Value>> {
    let total = args.senders * args.messages;
    anyhow::ensure!(total <= MAX_JOINS, "at most {MAX_JOINS} joins per run (one open connection each)");
    let mut runs = Vec::new();
    for r in 0..args.run.runs {
        let out = run_once(&args, r).await.with_context(|| format!("run {}", r + 1))?;
        eprintln!("run {}/{} done", r + 1, args.run.runs);
        runs.push(out);
    }
    report::emit("joins", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

/// What one sender's joins did.
#[derive(Default)]
struct JoinOutcome {
    latencies: Latencies,
    acked: u64,
    failures: Failures,
    last_ack: Option<Instant>,
    /// Kept open until every sender is done, so closes do not overlap the flood.
    clients: Vec<Client>,
}

async fn run_once(args: &SendsArgs, run: u32) -> anyhow::Result<Value> {
    let server = Server::open(&args.target, &SendsArgs::server_flags()).await?;
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let chat = fresh_chat("joins", run);
    let total = args.senders * args.messages;
    let setup = Instant::now();
    let offset = run * sources_for(total);
    let (clients, mut failures) = fleet::open_clients(&server, &signer, total, offset, |i| format!("j{i}")).await;
    let setup_s = setup.elapsed().as_secs_f64();

    // Sender i works through its own slice of users.
    let (go_tx, go_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    let mut clients = clients.into_iter();
    for _ in 0..args.senders {
        let mine: Vec<Client> = clients.by_ref().take(args.messages).collect();
        let (chat, mut go) = (chat.clone(), go_rx.clone());
        tasks.push(tokio::spawn(async move {
            let mut out = JoinOutcome::default();
            let _ = go.wait_for(|g| *g).await;
            for mut client in mine {
                let t = Instant::now();
                match tokio::time::timeout(REQUEST_TIMEOUT, client.join(&chat)).await {
                    Ok(Ok(_)) => {
                        let now = Instant::now();
                        out.latencies.record(now - t);
                        out.acked += 1;
                        out.last_ack = Some(now);
                    }
                    Ok(Err(f)) => out.failures.add_failure(&f),
                    Err(_) => out.failures.add("timeout", || format!("no join ack in {REQUEST_TIMEOUT:?}")),
                }
                out.clients.push(client);
            }
            out
        }));
    }
    let started = Instant::now();
    let _ = go_tx.send(true);
    let mut latencies = Latencies::default();
    let (mut acked, mut last_ack) = (0, started);
    let mut held = Vec::new();
    for t in tasks {
        let mut out = t.await?;
        latencies.merge(&out.latencies);
        acked += out.acked;
        last_ack = last_ack.max(out.last_ack.unwrap_or(started));
        failures.merge(&out.failures);
        held.append(&mut out.clients);
    }
    let elapsed = last_ack - started;
    let members = match server.api_key {
        Some(_) => Some(server.chat(&args.target.workspace, &chat).await?.members),
        None => None,
    };
    drop(held);
    let log = server.stop().await?;
    let p = latencies.summary();
    Ok(json!({
        "joins": total,
        "acked": acked,
        "failed": failures.total,
        "failures": failures,
        "setup_s": setup_s,
        "elapsed_s": elapsed.as_secs_f64(),
        "joins_per_s": acked as f64 / elapsed.as_secs_f64().max(1e-9),
        "p50_ms": p.p50_ms,
        "p99_ms": p.p99_ms,
        "p999_ms": p.p999_ms,
        "max_ms": p.max_ms,
        "members": members,
        "members_match": members == Some(acked),
        "server_log": log,
    }))
}
