//! `herald-bench`: herald's load generator and benchmark driver. This file
//! only parses the command line and hands each scenario to its module:
//! `idle` (memory per idle connection, with `worker` processes holding the
//! clients) and `sends` (durable send throughput; `--op join` for the join
//! flood in `joins`). Shared pieces: `client` (one WebSocket client),
//! `handshake` (its upgrade), `fleet` (opening many, bounded), `server` (the
//! server under test), `report`, `latency`, `machine`, `token`, `http`.

mod client;
mod fleet;
mod handshake;
mod http;
mod idle;
mod joins;
mod latency;
mod machine;
mod report;
mod sends;
mod server;
mod token;
mod worker;

use clap::{Parser, Subcommand};

/// The server's allocator, only so that the clients' memory figures compare
/// with the server's like for like: it does not make the clients leaner
/// (measured at 10,000 idle clients, glibc's malloc was within 1 KB each).
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(name = "herald-bench", version, about = "Load generator and benchmark driver for herald")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Memory per idle connection: N clients hello, join and watch one of M chats, then hold.
    Idle(idle::IdleArgs),
    /// Durable sends/s into one chat with a watcher checking order; `--op join` floods joins instead.
    Sends(sends::SendsArgs),
    /// One client process of `idle` (started by it).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

fn main() -> anyhow::Result<()> {
    let command = Cli::parse().command;
    // A worker runs its own single-threaded runtime; scenarios use every core.
    if let Command::Worker(args) = command {
        return worker::run(args);
    }
    tokio::runtime::Builder::new_multi_thread().enable_all().build()?.block_on(async move {
        match command {
            Command::Idle(args) => idle::run(args).await,
            Command::Sends(args) => sends::run(args).await,
            Command::Worker(_) => unreachable!("handled above"),
        }
    })
}
