//! The hidden `worker` subcommand: one client process of the idle scenario.
//! A process may hold at most 20,000 open files, so the idle scenario re-execs
//! itself as several workers of at most about 15,000 clients each.
//!
//! Talks to its parent by lines: it prints one JSON [`Established`] line once
//! its clients are open (or have failed), holds them until a line (or EOF)
//! arrives on stdin, prints one [`Released`] line and exits. It exits by
//! itself after [`MAX_HOLD`] even if its parent never says so.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::watch;

use crate::client::{Client, Failure, Held, connect_tcp, hold_tcp, source_addr};
use crate::fleet::{self, Failures, Launch};
use crate::machine::rss_kib;
use crate::pclient::PeerClient;
use crate::peer::Peer;
use crate::token::Signer;

/// The environment variable through which the parent passes the JWT secret,
/// so that it never shows in a process list.
pub const SECRET_ENV: &str = "HERALD_BENCH_JWT_SECRET";
/// A worker whose parent vanished still ends.
const MAX_HOLD: Duration = Duration::from_secs(600);

/// One worker's share of the clients.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The server's address.
    #[arg(long)]
    pub server: SocketAddr,
    /// The path to upgrade at.
    #[arg(long)]
    pub path: String,
    #[arg(long)]
    pub workspace: String,
    /// Clients are spread over this many chats: client i watches chat c{i % chats}.
    #[arg(long)]
    pub chats: usize,
    /// The global index of this worker's first client (names its user and source address).
    #[arg(long)]
    pub first: usize,
    #[arg(long)]
    pub count: usize,
    /// Connects per second of this worker.
    #[arg(long)]
    pub rate: f64,
    /// Connects in flight in this worker.
    #[arg(long)]
    pub concurrency: usize,
    /// Source addresses start this many after 127.0.0.2.
    #[arg(long)]
    pub source_offset: u32,
    /// No connect starts after this many seconds.
    #[arg(long)]
    pub deadline_s: f64,
    #[arg(long, value_enum)]
    pub until: Until,
    /// The server's kind: herald, or a peer spoken by `pclient`.
    #[arg(long, value_enum, default_value_t = Peer::Herald)]
    pub peer: Peer,
}

/// How far each idle client goes before it holds: `watch` is the real
/// workload; the earlier stops attribute the server's memory to each step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Until {
    /// A bare TCP connection, never upgraded.
    Tcp,
    /// Upgraded to WebSocket, no `hello` (raise the server's --hello-timeout-ms to hold these).
    Upgrade,
    /// After `hello`.
    Hello,
    /// After `hello`, `join` and `watch`.
    Watch,
}

impl Until {
    pub fn as_str(self) -> &'static str {
        match self {
            Until::Tcp => "tcp",
            Until::Upgrade => "upgrade",
            Until::Hello => "hello",
            Until::Watch => "watch",
        }
    }
}

/// The first line a worker prints.
#[derive(Debug, Serialize, Deserialize)]
pub struct Established {
    /// This worker's RSS before its first client, in KiB: the part that is not per client.
    pub rss_start_kib: u64,
    pub established: u64,
    pub failures: Failures,
    pub connect_s: f64,
}

/// The last line a worker prints.
#[derive(Debug, Serialize, Deserialize)]
pub struct Released {
    /// Clients the server closed (or that broke) while they were held.
    pub dropped: u64,
}

/// Runs a worker to its end.
pub fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let secret = std::env::var(SECRET_ENV).map_err(|_| anyhow::anyhow!("{SECRET_ENV} is not set"))?;
    // One thread: the parent already runs a worker per core or more, so more
    // threads inside a worker would only contend with its siblings.
    tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(serve(args, secret))
}

async fn serve(args: WorkerArgs, secret: String) -> anyhow::Result<()> {
    let rss_start_kib = rss_kib(std::process::id()).unwrap_or(0);
    let signer = Signer::new(&secret, &args.workspace);
    let (stop_tx, stop_rx) = watch::channel(false);
    let dropped = Arc::new(AtomicU64::new(0));
    let spec = Launch {
        count: args.count,
        concurrency: args.concurrency,
        rate: Some(args.rate),
        deadline: Duration::from_secs_f64(args.deadline_s),
    };
    let path: Arc<str> = args.path.into();
    let launched = fleet::launch(spec, |i| {
        let global = args.first + i;
        let user = format!("u{global}");
        let chat = format!("c{}", global % args.chats.max(1));
        let token = signer.token(&user);
        let (path, server, source) = (path.clone(), args.server, source_addr(args.source_offset, global));
        let (stop, dropped) = (stop_rx.clone(), dropped.clone());
        let (until, peer) = (args.until, args.peer);
        async move {
            if peer != Peer::Herald {
                // A peer's client connects and joins its room (Socket.IO) or subscribes (NATS), then holds.
                let mut client = PeerClient::connect(peer, server, source).await?;
                client.join(&chat).await?;
                let mut stop = stop;
                tokio::spawn(async move {
                    if client.drain_until(&mut stop).await == Held::Dropped {
                        dropped.fetch_add(1, Ordering::Relaxed);
                    }
                });
                return Ok(());
            }
            let token = token.map_err(Failure::signing)?;
            let note = move |held: Held| {
                if held == Held::Dropped {
                    dropped.fetch_add(1, Ordering::Relaxed);
                }
            };
            // Each client is held on a task of its own, so it keeps reading (pushes, pings) while others connect.
            if until == Until::Tcp {
                let stream = connect_tcp(server, source).await?;
                tokio::spawn(async move { note(hold_tcp(stream, stop).await) });
                return Ok(());
            }
            let mut client = Client::connect(server, &path, source).await?;
            if until >= Until::Hello {
                client.hello(&token).await?;
            }
            if until >= Until::Watch {
                client.join(&chat).await?;
                client.watch(&chat).await?;
            }
            let mut stop = stop;
            tokio::spawn(async move { note(client.drain_until(&mut stop).await) });
            Ok(())
        }
    })
    .await;
    let line = Established {
        rss_start_kib,
        established: launched.ok.len() as u64,
        failures: launched.failures,
        connect_s: launched.elapsed.as_secs_f64(),
    };
    println!("{}", serde_json::to_string(&line)?);
    let mut stdin = BufReader::new(tokio::io::stdin()).lines();
    let _ = tokio::time::timeout(MAX_HOLD, stdin.next_line()).await;
    let released = Released { dropped: dropped.load(Ordering::Relaxed) };
    let _ = stop_tx.send(true);
    println!("{}", serde_json::to_string(&released)?);
    Ok(())
}
