//! The `sendhook` scenario: what the send hook adds to a send's latency.
//! Two heralds run side by side, one without a send hook and one whose hook
//! is a receiver on loopback that accepts at once; one client of each sends
//! K messages one at a time (each waits for its ack), the two alternating
//! send by send so that the machine's other load weighs on both alike;
//! p50 and p99 of each, and their difference.
//! The receiver is this process's own minimal HTTP/1.1 server (keep-alive,
//! answers `{"action":"accept"}` as soon as a request's body is in), so what
//! is measured is herald's side: signing, the POST over a kept-alive
//! connection, reading and judging the answer.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use crate::client::{Client, REQUEST_TIMEOUT, fresh_chat};
use crate::http::read_request;
use crate::latency::Latencies;
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, Server, TargetArgs};
use crate::token::Signer;

/// Sends before the measured ones: connections, caches and the hook's pool warmed.
const WARMUP: usize = 200;
/// The hook's secret for a started server (any 32 bytes or more).
const HOOK_SECRET: &str = "herald-bench-send-hook-secret-0123456789";
/// The receiver's one answer.
const ACCEPT: &str =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 19\r\n\r\n{\"action\":\"accept\"}";

/// `herald-bench sendhook`.
#[derive(Debug, Args, Serialize)]
pub struct SendhookArgs {
    /// Measured sends per server (after a warm-up of 200).
    #[arg(long, default_value_t = 2000)]
    pub messages: usize,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("off_p50_ms", "no hook p50 ms"),
    col("off_p99_ms", "no hook p99 ms"),
    col("on_p50_ms", "hook p50 ms"),
    col("on_p99_ms", "hook p99 ms"),
    col("added_p50_ms", "added p50 ms"),
    col("added_p99_ms", "added p99 ms"),
    col("hook_requests", "hook requests"),
    col("hook_connections", "hook TCP conns"),
];

pub async fn run(args: SendhookArgs) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(args.messages > 0, "--messages must be positive");
    anyhow::ensure!(args.target.starts_server(), "sendhook starts its own servers (one with the hook, one without)");
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("sendhook", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

async fn run_once(args: &SendhookArgs, run: u32) -> anyhow::Result<Value> {
    let receiver = Receiver::start().await?;
    let hook_flags = vec![
        "--hook-secret".to_string(),
        HOOK_SECRET.to_string(),
        "--send-hook-url".to_string(),
        format!("http://{}/hook", receiver.addr),
    ];
    // Both servers run at once and the sends alternate between them, so
    // that whatever else the machine does weighs on both alike.
    let mut off = Sender::start(args, run, &[]).await.context("without the hook")?;
    let mut on = Sender::start(args, run, &hook_flags).await.context("with the hook")?;
    let (mut off_lat, mut on_lat) = (Latencies::default(), Latencies::default());
    for n in 0..WARMUP + args.messages {
        let measured = n >= WARMUP;
        let t = off.send(n).await.context("without the hook")?;
        if measured {
            off_lat.record(t);
        }
        let t = on.send(n).await.context("with the hook")?;
        if measured {
            on_lat.record(t);
        }
    }
    off.stop().await?;
    on.stop().await?;
    let (off, on) = (off_lat.summary(), on_lat.summary());
    let requests = receiver.requests.load(Ordering::SeqCst);
    anyhow::ensure!(requests as usize == WARMUP + args.messages, "the hook saw {requests} sends");
    Ok(json!({
        "off_p50_ms": off.p50_ms,
        "off_p99_ms": off.p99_ms,
        "on_p50_ms": on.p50_ms,
        "on_p99_ms": on.p99_ms,
        "added_p50_ms": round3(on.p50_ms - off.p50_ms),
        "added_p99_ms": round3(on.p99_ms - off.p99_ms),
        "hook_requests": requests,
        "hook_connections": receiver.connections.load(Ordering::SeqCst),
        // A send that fails ends the run with an error: a run that reports failed none.
        "failed": 0,
    }))
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// A started herald (with `flags`) and one client of it that has joined the run's chat.
struct Sender {
    server: Server,
    client: Client,
    chat: String,
}

impl Sender {
    async fn start(args: &SendhookArgs, run: u32, flags: &[String]) -> anyhow::Result<Sender> {
        let mut all_flags = server::raised_limits();
        all_flags.extend_from_slice(flags);
        let server = Server::open(&args.target, &all_flags).await?;
        let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
        let chat = fresh_chat("sendhook", run);
        let path = Server::ws_path(signer.workspace());
        let mut client = Client::connect(server.addr, &path, Ipv4Addr::LOCALHOST).await?;
        client.hello(&signer.token("sender")?).await?;
        client.join(&chat).await?;
        Ok(Sender { server, client, chat })
    }

    /// Sends message `n`; the time to its ack.
    async fn send(&mut self, n: usize) -> anyhow::Result<std::time::Duration> {
        let body = RawValue::from_string(format!(r#"{{"text":"bench message {n}"}}"#)).expect("valid JSON");
        let t = Instant::now();
        tokio::time::timeout(REQUEST_TIMEOUT, self.client.send(&self.chat, &body))
            .await
            .with_context(|| format!("no ack in {REQUEST_TIMEOUT:?}"))??;
        Ok(t.elapsed())
    }

    async fn stop(self) -> anyhow::Result<()> {
        self.client.close().await;
        if let Some(log) = self.server.stop().await?
            && log.errors > 0
        {
            anyhow::bail!("the server logged errors: {:?}", log.first);
        }
        Ok(())
    }
}

/// A send hook that accepts everything at once: HTTP/1.1 with keep-alive,
/// one task per connection, counting connections and requests.
struct Receiver {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    connections: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start() -> anyhow::Result<Receiver> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (requests, connections) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (r, c) = (requests.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let _ = stream.set_nodelay(true);
                tokio::spawn(serve(stream, r.clone()));
            }
        });
        Ok(Receiver { addr, requests, connections, task })
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers each request of one connection until it closes.
async fn serve(stream: TcpStream, requests: Arc<AtomicU64>) {
    let (read, mut write) = stream.into_split();
    let mut read = tokio::io::BufReader::new(read);
    while read_request(&mut read).await.is_some() {
        requests.fetch_add(1, Ordering::SeqCst);
        if write.write_all(ACCEPT.as_bytes()).await.is_err() {
            return;
        }
    }
}
