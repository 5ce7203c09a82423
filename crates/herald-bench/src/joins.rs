//! The closed-loop join flood (`sends --op join`): S*K distinct users each join the same
//! chat once, from S senders working through K users each, one join at a time
//! per sender. Clients connect and say hello before the clock starts, so the
//! figure is the chat's join rate, not connection setup. The chat's member
//! count through the HTTP API must then equal the joins acked. What a join is
//! and how joins are counted ([`JoinTally`], [`timed_join`]) is shared with
//! the open-loop, rising-rate `joinflood`.

use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{Failure, sources_for};
use crate::conn::Conn;
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
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("joins", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

/// What a set of timed joins did; both join floods (this one and `joinflood`) count with it.
#[derive(Default)]
pub struct JoinTally {
    pub latencies: Latencies,
    pub acked: u64,
    pub failures: Failures,
    /// When the last ack came.
    pub last_ack: Option<Instant>,
    /// The largest member count an answer gave.
    pub members_seen: u64,
}

impl JoinTally {
    /// Counts one join that started at `started`, with its outcome.
    pub fn record(&mut self, started: Instant, outcome: Result<Option<u64>, Failure>) {
        match outcome {
            Ok(members) => {
                let now = Instant::now();
                self.latencies.record(now - started);
                self.acked += 1;
                self.last_ack = Some(self.last_ack.map_or(now, |l| l.max(now)));
                self.members_seen = self.members_seen.max(members.unwrap_or(0));
            }
            Err(f) => self.failures.add_failure(&f),
        }
    }

    pub fn merge(&mut self, other: &JoinTally) {
        self.latencies.merge(&other.latencies);
        self.acked += other.acked;
        self.failures.merge(&other.failures);
        self.last_ack = self.last_ack.max(other.last_ack);
        self.members_seen = self.members_seen.max(other.members_seen);
    }
}

/// `conn` joins `room` as `user`, bounded by [`REQUEST_TIMEOUT`]; the member count the answer gave.
pub async fn timed_join(conn: &mut Conn, room: &str, user: &str) -> Result<Option<u64>, Failure> {
    match tokio::time::timeout(REQUEST_TIMEOUT, conn.join_as(room, user)).await {
        Ok(r) => r,
        Err(_) => Err(Failure::timeout(format!("no join ack in {REQUEST_TIMEOUT:?}"))),
    }
}

/// The member count of `chat` through herald's HTTP API (None without an api key).
pub async fn herald_members(server: &Server, workspace: &str, chat: &str) -> anyhow::Result<Option<u64>> {
    Ok(match server.api_key {
        Some(_) => Some(server.chat(workspace, chat).await?.members),
        None => None,
    })
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
    let members = herald_members(&server, &args.target.workspace, &chat).await?;
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
