//! The closed-loop join flood (`sends --op join`), the `sends` scenario's
//! second mode: S*K distinct users each join the same chat once, from S
//! senders working through K users each, one join at a time per sender.
//! Clients connect and say hello before the clock starts, so the figure is
//! the chat's join rate, not connection setup. The chat's member count
//! through the HTTP API must then equal the joins acked. What a join is and
//! how joins are counted is the shared `join_tally`'s.

use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::watch;

use super::SendsArgs;
use crate::client::{fresh_chat, sources_for};
use crate::conn::Conn;
use crate::fleet;
use crate::join_tally::{JoinTally, timed_join};
use crate::report::{self, Column, col};
use crate::server::{self, Server};
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
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("joins", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

async fn run_once(args: &SendsArgs, run: u32) -> anyhow::Result<Value> {
    let server = Server::open(&args.target, &server::raised_limits()).await?;
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
    let mut clients = clients.into_iter().map(Conn::Herald);
    for s in 0..args.senders {
        let mine: Vec<Conn> = clients.by_ref().take(args.messages).collect();
        let (chat, mut go) = (chat.clone(), go_rx.clone());
        tasks.push(tokio::spawn(async move {
            let mut tally = JoinTally::default();
            // Kept open until every sender is done, so closes do not overlap the flood.
            let mut held = Vec::new();
            let _ = go.wait_for(|g| *g).await;
            for (k, mut conn) in mine.into_iter().enumerate() {
                let t = Instant::now();
                tally.record(t, timed_join(&mut conn, &chat, &format!("j{s}-{k}")).await);
                held.push(conn);
            }
            (tally, held)
        }));
    }
    let started = Instant::now();
    let _ = go_tx.send(true);
    let mut tally = JoinTally::default();
    let mut held = Vec::new();
    for t in tasks {
        let (out, mut conns) = t.await?;
        tally.merge(&out);
        held.append(&mut conns);
    }
    failures.merge(&tally.failures);
    let acked = tally.acked;
    let elapsed = tally.last_ack.unwrap_or(started) - started;
    let members = server.members(&args.target.workspace, &chat).await?;
    drop(held);
    let log = server.stop().await?;
    let p = tally.latencies.summary();
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
