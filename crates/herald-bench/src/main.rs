//! `herald-bench`: herald's load generator and benchmark driver. This file
//! only parses the command line and hands each command to its module, in
//! three layers, each using only the ones below it:
//!
//! - drivers: `compare` (herald beside its peers on one scenario, runs
//!   interleaved) and `smoke` (every scenario tiny, for the test suite);
//! - `scenarios/`, one module each: `idle` (memory per idle connection),
//!   `sends` (durable send throughput; `--op join`: the closed-loop join
//!   flood), `fanout` (one chat, many watchers, a rising rate), `hot` (one
//!   hot chat, pushed vs coalesced), `churn` (short-lived connections),
//!   `joinflood` (joins at a rising rate, a quiet chat beside), `presence`
//!   (presence changes), `inbox` (one inbox in a large store, loaded through
//!   herald's store API) and `inbox_live` (live inboxes under a message
//!   rate), `sendhook` (what a send hook adds), `webhook` (delivery to a
//!   local receiver), `slowloris` (sockets that never finish a request, with
//!   real clients timed meanwhile); v1.2's `streams` (streamed messages and
//!   their `append` pushes), `threads` (inbox's store with threads, in
//!   `inbox/threads`), `members` (one chat of 100,000 members, paged) and
//!   `files` (uploads and downloads through a files backend's signed URLs);
//!   `search` (a user's searches in a store of 10,000,000 messages);
//!   `replication` (sends on PostgreSQL alone and with a synchronous or an
//!   asynchronous standby, started with `scripts/pg.sh`); `cell` (a whole
//!   cell on this machine: nodes, NATS, PostgreSQL shards, load workers in
//!   processes of their own under a modelled load; `--peer socketio`: the
//!   same on Socket.IO nodes over Redis);
//! - shared modules: the clients (`client` for herald, `handshake`,
//!   `pclient` for the peers, `conn` for either), the servers (`server` for
//!   herald, `peer`, `target` for either), opening many (`fleet`, and
//!   `worker`, the client process `idle` starts), what several scenarios
//!   measure with (`pubsub`, `join_tally`, `quiet`, `latency`, `send_load`:
//!   the send workload of `sends` and `replication`), and the
//!   report (`report`, `machine`), plus `token`, `http` and `preload` (a
//!   store built through herald's API before its server starts).

mod client;
mod compare;
mod conn;
mod fleet;
mod handshake;
mod http;
mod join_tally;
mod latency;
mod machine;
mod pclient;
mod peer;
mod pg_script;
mod preload;
mod procstat;
mod pubsub;
mod quiet;
mod report;
mod scenarios;
mod send_load;
mod server;
mod smoke;
mod target;
mod token;
mod worker;

use clap::{Parser, Subcommand};
use scenarios::{
    cell, churn, fanout, files, hot, idle, inbox, inbox_live, joinflood, members, presence, replication, search,
    sendhook, sends, slowloris, streams, webhook,
};

/// The server's allocator, only so that the clients' memory figures compare
/// with the server's like for like: it does not make the clients leaner
/// (measured at 10,000 idle clients, glibc's malloc was within 1 KB each).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "herald-bench", version, about = "Load generator and benchmark driver for herald")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Memory per idle connection: N clients hello, join and watch one of M chats, then hold.
    Idle(idle::IdleArgs),
    /// Durable sends/s into one chat with a watcher checking order; `--op join` floods joins instead.
    Sends(sends::SendsArgs),
    /// Fan-out: S watchers of one chat, publishers at a rising rate; highest loss-free rate, latency at half.
    Fanout(fanout::FanoutArgs),
    /// One hot chat (5,000 watchers, 200 msgs/s): herald pushing vs its default (notify + fetch), peers beside.
    Hot(hot::HotArgs),
    /// herald and its peers (Socket.IO, NATS WebSocket, Sockudo) on one scenario, side by side, with ratios.
    Compare(compare::CompareArgs),
    /// Joins into one chat at a rising rate, each a distinct user on its own connection; a quiet chat's latency meanwhile.
    Joinflood(joinflood::JoinfloodArgs),
    /// Short-lived connections at a set rate (connect, hello, join+watch, hold, close); broker subscription ops vs churn.
    Churn(churn::ChurnArgs),
    /// Presence changes in a chat of P present users (watch/unwatch churn): pushes and server CPU per change.
    Presence(presence::PresenceArgs),
    /// A send's latency without and with a send hook that accepts at once (loopback): p50, p99, the difference.
    Sendhook(sendhook::SendhookArgs),
    /// One user's inbox in a large store (bulk-loaded): latency of reading every page, p50 and p99.
    Inbox(inbox::InboxArgs),
    /// U live inboxes whose chats receive R messages/s: pushes, latency, server CPU, exactness.
    InboxLive(inbox_live::InboxLiveArgs),
    /// The webhook to a local receiver: events/s delivered, and send latency with the receiver up vs down.
    Webhook(webhook::WebhookArgs),
    /// Sockets that never finish a request (slowloris) against a node with a set file limit; real clients' time to an acked send meanwhile.
    Slowloris(slowloris::SlowlorisArgs),
    /// v1.2: one user following 1,000 threads in 200 chats of a large store: `threads` and `inbox` pages, p50 and p99.
    Threads(inbox::threads::ThreadsArgs),
    /// v1.2: one chat of 100,000 members (bulk-loaded), listed with `members` page by page: p50 and p99.
    Members(members::MembersArgs),
    /// v1.2: `search` in a store of 10,000,000 messages in 100,000 chats (bulk-loaded), as a user in
    /// 1,000 of them: p50 and p99 of Latin and Korean one- and two-term queries, the index's size.
    Search(search::SearchArgs),
    /// v1.2: N streamed messages at once, W watchers each, R appends/s each: append-to-push latency, CPU, exactness.
    Streams(streams::StreamsArgs),
    /// v1.2: F files of S bytes uploaded at once and downloaded at once through signed URLs: MiB/s, signing µs.
    Files(files::FilesArgs),
    /// The cost of a synchronous standby: sends against PostgreSQL alone, with a synchronous and an
    /// asynchronous standby (started with scripts/pg.sh), runs alternating; medians and ratios.
    Replication(replication::ReplicationArgs),
    /// A whole cell on this machine (N nodes, 3 NATS servers, PostgreSQL shards) under a modelled load of
    /// direct messages, groups and channels: latency same node and cross node, CPU, memory, NATS and
    /// PostgreSQL rates; `--smoke`: a tiny cell that fails unless delivery was exact; `--peer socketio`: the
    /// same model and load on Socket.IO nodes over Redis.
    Cell(cell::CellArgs),
    /// Every herald scenario at a tiny size, one run each; exits non-zero on a failure.
    Smoke(smoke::SmokeArgs),
    /// One client process of `idle` (started by it).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
    /// One load process of `cell` (started by it).
    #[command(hide = true)]
    CellWorker(cell::worker::CellWorkerArgs),
    /// One load process of `cell --peer socketio` (started by it).
    #[command(hide = true)]
    CellSioWorker(cell::worker::CellWorkerArgs),
    /// One attacker process of `slowloris` (started by it).
    #[command(hide = true)]
    SlowlorisAttacker(slowloris::AttackerArgs),
}

fn main() -> anyhow::Result<()> {
    let command = Cli::parse().command;
    // A worker runs its own single-threaded runtime; scenarios use every core.
    if let Command::Worker(args) = command {
        return worker::run(args);
    }
    if let Command::CellWorker(args) = command {
        return cell::worker::run(args);
    }
    if let Command::CellSioWorker(args) = command {
        return cell::sio::worker::run(args);
    }
    if let Command::SlowlorisAttacker(args) = command {
        return scenarios::slowloris::attacker_run(args);
    }
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(dispatch(command)).map(|_| ())
}

/// Runs a scenario command; returns its runs (nothing for `compare` and `smoke`).
pub(crate) async fn dispatch(command: Command) -> anyhow::Result<Vec<serde_json::Value>> {
    match command {
        Command::Idle(args) => idle::run(args).await,
        Command::Sends(args) => sends::run(args).await,
        Command::Fanout(args) => fanout::run(args).await,
        Command::Hot(args) => hot::run(args).await,
        Command::Churn(args) => churn::run(args).await,
        Command::Joinflood(args) => joinflood::run(args).await,
        Command::Presence(args) => presence::run(args).await,
        Command::Inbox(args) => inbox::run(args).await,
        Command::InboxLive(args) => inbox_live::run(args).await,
        Command::Sendhook(args) => sendhook::run(args).await,
        Command::Webhook(args) => webhook::run(args).await,
        Command::Compare(args) => compare::run(args).await.map(|_| Vec::new()),
        Command::Smoke(args) => smoke::run(args).await.map(|_| Vec::new()),
        Command::Slowloris(args) => slowloris::run(args).await,
        Command::Streams(args) => streams::run(args).await,
        Command::Files(args) => files::run(args).await,
        Command::Members(args) => members::run(args).await,
        Command::Search(args) => search::run(args).await,
        Command::Replication(args) => replication::run(args).await,
        Command::Threads(args) => inbox::threads::run(args).await,
        Command::Cell(args) => cell::run(args).await,
        Command::Worker(_) | Command::CellWorker(_) | Command::CellSioWorker(_) | Command::SlowlorisAttacker(_) => {
            anyhow::bail!("a worker runs on its own")
        }
    }
}
