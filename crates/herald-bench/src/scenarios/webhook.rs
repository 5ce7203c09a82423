//! The `webhook` scenario: herald with `--webhook-url` pointing at a local
//! receiver this bench runs (a small HTTP/1.1 server that checks each
//! request's signature and counts distinct events). In one run, on one
//! server: S senders send at a steady total rate for T seconds with the
//! receiver up, then T seconds more with the receiver down (connections
//! refused), then the receiver comes back and the backlog drains. It reports
//! the send latency with the receiver up and down (sends must not wait for
//! the webhook), the events stored and delivered per second while up, and
//! how fast a backlog is delivered (the webhook's throughput).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use hmac::{Hmac, Mac};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::io::{AsyncWriteExt, BufReader};

use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::client::{Client, REQUEST_TIMEOUT, fresh_chat, sources_for};
use crate::fleet;
use crate::http::{HookRequest, read_request};
use crate::latency::Latencies;
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, Server, TargetArgs};
use crate::token::Signer;

/// The secret herald signs with in this scenario (the receiver checks it).
const HOOK_SECRET: &str = "bench-hook-secret-0123456789abcdef0123456789";
/// How long the backlog may take to drain before the run fails.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// `herald-bench webhook`.
#[derive(Debug, Args, Serialize)]
pub struct WebhookArgs {
    /// Concurrent senders (connections), each in one of `--chats` chats.
    #[arg(long, default_value_t = 20)]
    pub senders: usize,
    /// Chats the senders share.
    #[arg(long, default_value_t = 10)]
    pub chats: usize,
    /// Total sends per second, spread evenly over the senders.
    #[arg(long, default_value_t = 1000)]
    pub rate: u32,
    /// Seconds of each phase (receiver up, then down).
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("stored_per_s", "stored/s"),
    col("delivered_per_s", "delivered/s (up)"),
    col("up_p50_ms", "send p50 up"),
    col("up_p99_ms", "send p99 up"),
    col("down_p50_ms", "send p50 down"),
    col("down_p99_ms", "send p99 down"),
    col("backlog", "backlog"),
    col("drain_per_s", "drain events/s"),
    col("complete", "all delivered"),
];

pub async fn run(args: WebhookArgs) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(
        args.senders > 0 && args.chats > 0 && args.rate > 0,
        "--senders, --chats and --rate must be positive"
    );
    anyhow::ensure!(args.target.starts_server(), "the webhook scenario starts its own server");
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("webhook", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

/// What the receiver saw.
#[derive(Default)]
struct Tally {
    /// Distinct events: (chat, seq) seen for the first time.
    events: AtomicU64,
    /// Events delivered again (at least once).
    repeated: AtomicU64,
    requests: AtomicU64,
    bad_signatures: AtomicU64,
    /// Per chat, the seqs seen (a chat's events come in order, so a max would
    /// do; a set is kept to count repeats after a redelivery exactly).
    seen: Mutex<HashMap<String, std::collections::HashSet<u64>>>,
    /// The first request since the receiver was (re)started, and the latest new event.
    first_at: Mutex<Option<Instant>>,
    last_at: Mutex<Option<Instant>>,
}

/// The local receiver: a listener and its connections, all closed by `close`.
struct Receiver {
    addr: SocketAddr,
    tasks: Option<JoinSet<()>>,
}

impl Receiver {
    async fn start(addr: SocketAddr, tally: Arc<Tally>) -> anyhow::Result<Receiver> {
        let listener = TcpListener::bind(addr).await.context("binding the receiver")?;
        let addr = listener.local_addr()?;
        let mut tasks = JoinSet::new();
        let t = tally;
        tasks.spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((sock, _)) = listener.accept().await {
                let _ = sock.set_nodelay(true);
                conns.spawn(serve(sock, t.clone()));
            }
        });
        Ok(Receiver { addr, tasks: Some(tasks) })
    }

    /// Closes the listener and every connection: herald's next tries are refused.
    async fn close(&mut self) {
        if let Some(mut tasks) = self.tasks.take() {
            tasks.shutdown().await;
        }
    }
}

/// Serves one keep-alive connection: reads requests, checks, answers 200.
async fn serve(sock: tokio::net::TcpStream, tally: Arc<Tally>) {
    let (read, mut write) = sock.into_split();
    let mut read = BufReader::new(read);
    while let Some(HookRequest { signature, body }) = read_request(&mut read).await {
        tally.requests.fetch_add(1, Ordering::Relaxed);
        tally.first_at.lock().expect("tally lock").get_or_insert_with(Instant::now);
        if !verify(&signature, &body) {
            tally.bad_signatures.fetch_add(1, Ordering::Relaxed);
        }
        if let Ok(v) = serde_json::from_slice::<Value>(&body) {
            let mut seen = tally.seen.lock().expect("tally lock");
            for e in v["events"].as_array().into_iter().flatten() {
                let chat = e["chat"].as_str().unwrap_or_default();
                let seq = e["seq"].as_u64().unwrap_or_default();
                if seen.entry(chat.to_owned()).or_default().insert(seq) {
                    tally.events.fetch_add(1, Ordering::Relaxed);
                    *tally.last_at.lock().expect("tally lock") = Some(Instant::now());
                } else {
                    tally.repeated.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        if write.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await.is_err() {
            return;
        }
    }
}

/// Whether `header` signs `body` with [`HOOK_SECRET`].
fn verify(header: &str, body: &[u8]) -> bool {
    let Some((t, v1)) = header.strip_prefix("t=").and_then(|r| r.split_once(",v1=")) else { return false };
    let mut mac = Hmac::<Sha256>::new_from_slice(HOOK_SECRET.as_bytes()).expect("any key length");
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    let want: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    want == v1
}

/// What one phase of sends did.
struct Phase {
    clients: Vec<Client>,
    latencies: Latencies,
    acked: u64,
    failed: u64,
    elapsed: Duration,
}

/// Sends from every client at the steady total `rate` for `seconds` (each
/// client one send at a time, as the protocol wants; ticks a client misses
/// while waiting for an ack are skipped, not bunched).
async fn phase(clients: Vec<Client>, chats: &[String], rate: u32, seconds: f64) -> Phase {
    let n = clients.len();
    let every = Duration::from_secs_f64(n as f64 / f64::from(rate));
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::with_capacity(n);
    for (i, mut client) in clients.into_iter().enumerate() {
        let chat = chats[i % chats.len()].clone();
        tasks.push(tokio::spawn(async move {
            let (mut latencies, mut acked, mut failed) = (Latencies::default(), 0u64, 0u64);
            // Staggered, so that the senders do not all tick at once.
            let first = Instant::now() + every.mul_f64(i as f64 / n as f64);
            let mut tick = tokio::time::interval_at(first.into(), every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            for k in 0u64.. {
                tick.tick().await;
                if Instant::now() >= until {
                    break;
                }
                let body =
                    RawValue::from_string(format!(r#"{{"text":"webhook bench {k} from s{i}"}}"#)).expect("valid JSON");
                let t = Instant::now();
                match tokio::time::timeout(REQUEST_TIMEOUT, client.send(&chat, &body)).await {
                    Ok(Ok(_)) => {
                        latencies.record(t.elapsed());
                        acked += 1;
                    }
                    _ => failed += 1,
                }
            }
            (client, latencies, acked, failed)
        }));
    }
    let mut out =
        Phase { clients: Vec::new(), latencies: Latencies::default(), acked: 0, failed: 0, elapsed: Duration::ZERO };
    for t in tasks {
        if let Ok((client, latencies, acked, failed)) = t.await {
            out.clients.push(client);
            out.latencies.merge(&latencies);
            out.acked += acked;
            out.failed += failed;
        }
    }
    out.elapsed = started.elapsed();
    out
}

/// Waits until the receiver has `n` distinct events, at most `limit`; whether it got them.
async fn wait_events(tally: &Tally, n: u64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while tally.events.load(Ordering::Relaxed) < n {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

async fn run_once(args: &WebhookArgs, run: u32) -> anyhow::Result<Value> {
    let tally = Arc::new(Tally::default());
    let mut receiver = Receiver::start(SocketAddr::from(([127, 0, 0, 1], 0)), tally.clone()).await?;
    let mut flags = server::raised_limits();
    flags.extend(["--hook-secret".into(), HOOK_SECRET.into(), "--webhook-url".into()]);
    flags.push(format!("http://{}/hook", receiver.addr));
    let server = Server::open(&args.target, &flags).await?;
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let chats: Vec<String> = (0..args.chats).map(|c| fresh_chat(&format!("webhook{c}"), run)).collect();
    let offset = run * sources_for(args.senders);
    let (mut clients, failures) =
        fleet::open_clients(&server, &signer, args.senders, offset, |i| format!("s{i}")).await;
    anyhow::ensure!(clients.len() == args.senders, "senders could not connect: {:?}", failures.first);
    for (i, c) in clients.iter_mut().enumerate() {
        c.join(&chats[i % chats.len()]).await.map_err(|e| anyhow::anyhow!("join: {e}"))?;
    }
    let joins = args.senders as u64;

    // Receiver up.
    let at_start = tally.events.load(Ordering::Relaxed);
    let up = phase(clients, &chats, args.rate, args.seconds).await;
    let delivered_up = tally.events.load(Ordering::Relaxed) - at_start;
    let caught_up = wait_events(&tally, joins + up.acked, Duration::from_secs(30)).await;

    // Receiver down: connections refused.
    receiver.close().await;
    let down = phase(up.clients, &chats, args.rate, args.seconds).await;

    // Back up: the backlog drains.
    let stored = joins + up.acked + down.acked;
    let backlog = stored - tally.events.load(Ordering::Relaxed);
    *tally.first_at.lock().expect("tally lock") = None;
    let addr = receiver.addr;
    let _receiver = Receiver::start(addr, tally.clone()).await?;
    let complete = caught_up && wait_events(&tally, stored, DRAIN_LIMIT).await;
    let drain_s = match (*tally.first_at.lock().expect("tally lock"), *tally.last_at.lock().expect("tally lock")) {
        (Some(first), Some(last)) if last > first => (last - first).as_secs_f64(),
        _ => f64::NAN,
    };
    for c in down.clients {
        c.close().await;
    }
    let log = server.stop().await?;
    let (u, d) = (up.latencies.summary(), down.latencies.summary());
    Ok(json!({
        "failed": up.failed + down.failed,
        "stored_per_s": up.acked as f64 / up.elapsed.as_secs_f64(),
        "delivered_per_s": delivered_up as f64 / up.elapsed.as_secs_f64(),
        "up_acked": up.acked,
        "up_failed": up.failed,
        "up_p50_ms": u.p50_ms,
        "up_p99_ms": u.p99_ms,
        "down_acked": down.acked,
        "down_failed": down.failed,
        "down_p50_ms": d.p50_ms,
        "down_p99_ms": d.p99_ms,
        "backlog": backlog,
        "drain_s": drain_s,
        "drain_per_s": backlog as f64 / drain_s,
        "requests": tally.requests.load(Ordering::Relaxed),
        "repeated": tally.repeated.load(Ordering::Relaxed),
        "bad_signatures": tally.bad_signatures.load(Ordering::Relaxed),
        "complete": complete && tally.bad_signatures.load(Ordering::Relaxed) == 0,
        "server_log": log,
    }))
}
