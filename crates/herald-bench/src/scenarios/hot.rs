//! The `hot` scenario: one chat, W watchers, M messages/s offered for N
//! seconds (W × M deliveries/s), against herald twice in the same run, once
//! pushing every event (`--hot-chat-deliveries 0`) and once with its
//! default (the chat turns hot: a coalesced `notify`, the watchers fetch),
//! and against the peers named in `--peers` (which push everything; there
//! is nothing else they can do).
//!
//! Every watcher must end with every event: herald's watchers count an
//! event only when its seq is the next they lack, by push or by fetch, so a
//! watcher's count is its contiguous prefix; the peers' by a per-publisher
//! counter (`pubsub`'s check). Latency is from the publisher's send to the
//! watcher holding the event (push read or fetch reply read). Closes with
//! 4008 (a watcher's outbound queue overflowed) are counted. Server CPU from
//! `/proc/PID/stat`, divided by the events delivered; the bench's own CPU
//! beside it, since one process holds every watcher.
//!
//! herald's watchers parse cheaply: a frame is classified by its opening
//! bytes, and a fetch reply is scanned for each event's `"seq":` and its
//! body's `"t":`, never built into values.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{Client, ClientError, fresh_chat, sources_for};
use crate::conn::Conn;
use crate::latency::Latencies;
use crate::peer::Peer;
use crate::pubsub::{self, Crowd, LATENCY_STEP, Shared};
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, TargetArgs};
use crate::target::Target;

/// Events a watcher asks for per fetch (the protocol's most).
const FETCH_LIMIT: u32 = herald_protocol::limits::FETCH_MAX;

/// `herald-bench hot`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct HotArgs {
    /// Watchers of the one chat.
    #[arg(long, default_value_t = 5000)]
    pub watchers: usize,
    /// Messages per second offered, over all publishers.
    #[arg(long, default_value_t = 200.0)]
    pub rate: f64,
    /// Seconds of publishing.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Publishers (connections), sharing the rate.
    #[arg(long, default_value_t = 16)]
    pub publishers: usize,
    /// herald's second run with this `--hot-chat-deliveries` instead of its
    /// default (to measure where notify + fetch starts to pay).
    #[arg(long)]
    pub threshold: Option<u64>,
    /// Servers besides herald's two runs: socketio, sockudo (they must be installed).
    #[arg(long, value_delimiter = ',')]
    pub peers: Vec<Peer>,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

/// What is measured: herald pushing, herald's default, or a peer.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Push,
    Default,
    Peer(Peer),
}

impl Mode {
    fn label(self) -> String {
        match self {
            Mode::Push => "herald push".into(),
            Mode::Default => "herald default".into(),
            Mode::Peer(p) => p.as_str().into(),
        }
    }
}

const COLUMNS: &[Column] = &[
    col("mode", "server"),
    col("watchers_ok", "watchers"),
    col("offered_deliveries_per_s", "offered/s"),
    col("delivered_per_s", "delivered/s"),
    col("lost", "lost"),
    col("watchers_short", "short watchers"),
    col("closed_4008", "4008"),
    col("drain_ms", "drain ms"),
    col("p50_ms", "p50 ms"),
    col("p99_ms", "p99 ms"),
    col("server_cores", "srv cores"),
    col("server_us_per_delivery", "srv us/deliv"),
    col("bench_cores", "bench cores"),
    col("notifies", "notifies"),
    col("fetched", "fetched"),
];

/// Runs herald twice and each peer, `--runs` times interleaved, and reports each.
pub async fn run(args: HotArgs) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(args.watchers > 0 && args.watchers <= 15_000, "--watchers must be 1..=15000");
    anyhow::ensure!(args.rate > 0.0 && args.seconds > 0.0 && args.seconds <= 120.0, "a positive rate, at most 120 s");
    anyhow::ensure!(args.publishers > 0 && args.publishers <= 64, "--publishers must be 1..=64");
    let mut modes = vec![Mode::Push, Mode::Default];
    modes.extend(args.peers.iter().filter(|p| **p != Peer::Herald).map(|p| Mode::Peer(*p)));
    let mut per: Vec<Vec<Value>> = vec![Vec::new(); modes.len()];
    for r in 0..args.run.runs {
        for (i, mode) in modes.iter().enumerate() {
            let out = run_once(&args, *mode, r * modes.len() as u32 + i as u32).await?;
            eprintln!("run {}/{} {} done", r + 1, args.run.runs, mode.label());
            per[i].push(out);
        }
    }
    for (mode, runs) in modes.iter().zip(&per) {
        report::emit(&format!("hot: {}", mode.label()), &args, runs, COLUMNS, args.run.json);
    }
    Ok(per.into_iter().flatten().collect())
}

async fn run_once(args: &HotArgs, mode: Mode, run: u32) -> anyhow::Result<Value> {
    let peer = match mode {
        Mode::Peer(p) => p,
        _ => Peer::Herald,
    };
    let mut target = args.target.clone();
    match mode {
        Mode::Push => target.server_args.push("--hot-chat-deliveries=0".into()),
        Mode::Default => match args.threshold {
            Some(t) => target.server_args.push(format!("--hot-chat-deliveries={t}")),
            None => target.hot_default = true,
        },
        Mode::Peer(_) => {}
    }
    let server = Target::start(peer, &target, &server::raised_limits()).await?;
    let out = measure(args, mode, run, &server).await;
    let log = server.stop().await?;
    let mut out = out?;
    out["server_log"] = log;
    Ok(out)
}

async fn measure(args: &HotArgs, mode: Mode, run: u32, server: &Target) -> anyhow::Result<Value> {
    let chat = fresh_chat("hot", run);
    let offset = run * sources_for(args.watchers + args.publishers);
    let crowd = Crowd { watchers: args.watchers, publishers: args.publishers, workspace: &args.target.workspace };
    let (mut watchers, publishers, failures) = pubsub::open_all(&crowd, server, None, &chat, offset).await?;
    anyhow::ensure!(watchers.len() == args.watchers, "setup failed: {:?}", failures.first);
    // Every watcher watched after every join and before any message: they
    // all start at the chat's head now, which one fetch tells.
    let start = match watchers.first_mut() {
        Some(Conn::Herald(c)) => Some(c.fetch(&chat, 0, 1).await.map_err(|e| anyhow::anyhow!("{e}"))?.seq),
        _ => None,
    };
    let shared = Shared::new();
    let ends = Arc::new(std::sync::Mutex::new(Ends::default()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    for w in watchers {
        let (shared, stop, ends) = (shared.clone(), stop_rx.clone(), ends.clone());
        tasks.push(match w {
            Conn::Herald(c) => tokio::spawn(herald_watcher(c, chat.clone(), start, shared, ends, stop)),
            peer => tokio::spawn(pubsub::watch_loop(peer, args.publishers, None, shared, stop)),
        });
    }
    let mut pubs: Vec<Option<Conn>> = publishers.into_iter().map(Some).collect();
    let mut counters = vec![0u64; args.publishers];
    let room = server.peer().room(&chat, true);
    let n = args.watchers as u64;
    let pid = [server.pid()];
    let r =
        pubsub::phase(&mut pubs, &mut counters, &room, LATENCY_STEP, args.rate, args.seconds, n, &shared, &pid).await;
    let _ = stop_tx.send(true);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    for c in pubs.into_iter().flatten() {
        c.close().await;
    }
    let published = r["published"].as_u64().unwrap_or(0);
    let ends = ends.lock().expect("lock");
    let pct = shared.latency.lock().expect("lock").summary();
    let errors = shared.errors.load(Ordering::Relaxed);
    Ok(json!({
        "mode": mode.label(),
        "watchers_ok": args.watchers,
        "offered_deliveries_per_s": args.rate * n as f64,
        "published": published,
        "delivered_per_s": r["delivered_per_s"],
        "lost": r["lost"],
        // herald: watchers whose contiguous prefix does not reach the last
        // event; the peers: every watcher that closed or erred.
        "watchers_short": match mode {
            Mode::Peer(_) => errors,
            _ => ends.counts.iter().filter(|&&c| c < published).count() as u64,
        },
        "closed_4008": ends.closed_4008,
        "drain_ms": r["drain_ms"],
        "p50_ms": pct.p50_ms,
        "p99_ms": pct.p99_ms,
        "p999_ms": pct.p999_ms,
        "max_ms": pct.max_ms,
        "server_cores": r["server_cores"],
        "server_us_per_delivery": r["server_us_per_delivery"],
        "bench_cores": r["bench_cores"],
        "notifies": shared.notifies.load(Ordering::Relaxed),
        "fetched": shared.fetched.load(Ordering::Relaxed),
        "gaps": shared.gaps.load(Ordering::Relaxed),
        "out_of_order": shared.out_of_order.load(Ordering::Relaxed),
        "watcher_errors": errors,
        "first_watcher_error": shared.first_error.lock().expect("lock").clone(),
        "publish_errors": r["publish_errors"],
        "phase": r,
    }))
}

/// How herald's watchers ended.
#[derive(Default)]
struct Ends {
    /// Per watcher, the events it held (its contiguous run from its start).
    counts: Vec<u64>,
    closed_4008: u64,
}

/// One herald watcher: counts each event once, when its seq is the next it
/// lacks, from pushes and from fetches; fetches (one at a time, page after
/// page) whatever a `notify` or a gap says it lacks, reading pushes meanwhile.
async fn herald_watcher(
    mut c: Client,
    chat: String,
    start: Option<u64>,
    shared: Arc<Shared>,
    ends: Arc<std::sync::Mutex<Ends>>,
    mut stop: watch::Receiver<bool>,
) {
    let mut w = Watcher {
        have: start,
        counted: 0,
        want: 0,
        fetching: false,
        next_id: 1 << 40,
        latencies: Latencies::default(),
    };
    let mut closed_4008 = false;
    loop {
        let text = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            t = c.next_text() => t,
        };
        let text = match text {
            Ok(t) => t,
            Err(e) => {
                if let ClientError::Closed(Some(f)) = &e {
                    closed_4008 = u16::from(f.code) == 4008;
                }
                shared.error(e.to_string());
                break;
            }
        };
        let fetch = w.take(&text, &shared);
        if let Some(after) = fetch {
            let req = format!(
                r#"{{"op":"fetch","id":{},"chat":{},"after":{after},"limit":{FETCH_LIMIT}}}"#,
                w.next_id,
                json!(chat)
            );
            w.next_id += 1;
            w.fetching = true;
            if let Err(e) = c.send_text(req).await {
                shared.error(e.to_string());
                break;
            }
        }
    }
    shared.latency.lock().expect("lock").merge(&w.latencies);
    {
        let mut ends = ends.lock().expect("lock");
        ends.counts.push(w.counted);
        ends.closed_4008 += u64::from(closed_4008);
    }
    c.close().await;
}

/// A herald watcher's position.
struct Watcher {
    /// The last seq held (counted); `None` before the first event.
    have: Option<u64>,
    counted: u64,
    /// The highest seq it knows exists (a notify, a gap's push).
    want: u64,
    fetching: bool,
    next_id: i64,
    latencies: Latencies,
}

impl Watcher {
    /// Takes one frame; returns the `after` of a fetch to send, if one is due.
    fn take(&mut self, text: &str, shared: &Shared) -> Option<u64> {
        if text.starts_with(r#"{"id":"#) {
            // A fetch reply (the only request this watcher sends after its watch).
            self.fetching = false;
            let mut rest = text;
            while let Some(i) = rest.find(r#"{"seq":"#) {
                rest = &rest[i + 7..];
                let seq = number(rest);
                let t = rest.find(r#""body":{"t":"#).map(|j| number(&rest[j + 12..]));
                if self.hold(seq, t, shared) {
                    shared.fetched.fetch_add(1, Ordering::Relaxed);
                }
            }
            if text.ends_with(r#""more":true}}"#) {
                self.want = self.want.max(self.have.unwrap_or(0) + 1);
            }
        } else if text.starts_with(r#"{"ev":"notify""#) {
            shared.notifies.fetch_add(1, Ordering::Relaxed);
            let seq = text.find(r#""seq":"#).map_or(0, |i| number(&text[i + 6..]));
            self.want = self.want.max(seq);
        } else if text.starts_with(r#"{"ev":"event""#) {
            let i = text.find(r#""seq":"#)?;
            let seq = number(&text[i + 6..]);
            match self.have {
                Some(h) if seq > h + 1 => {
                    // A gap before this push: fetch it (and this one again).
                    shared.gaps.fetch_add(1, Ordering::Relaxed);
                    self.want = self.want.max(seq);
                }
                _ => {
                    let t = text.find(r#""body":{"t":"#).map(|j| number(&text[j + 12..]));
                    self.hold(seq, t, shared);
                }
            }
        }
        let have = self.have?;
        (!self.fetching && self.want > have).then_some(have)
    }

    /// Counts event `seq` (published at `t`) if it is the next one lacked.
    fn hold(&mut self, seq: u64, t: Option<u64>, shared: &Shared) -> bool {
        if self.have.is_some_and(|h| seq != h + 1) {
            return false;
        }
        self.have = Some(seq);
        self.counted += 1;
        if let Some(t) = t {
            let now = shared.now_us();
            shared.received[LATENCY_STEP].fetch_add(1, Ordering::Relaxed);
            shared.last_rx_us[LATENCY_STEP].fetch_max(now, Ordering::Relaxed);
            self.latencies.record(Duration::from_micros(now.saturating_sub(t)));
        }
        true
    }
}

/// The decimal number at the start of `s` (0 if none).
fn number(s: &str) -> u64 {
    s.bytes().take_while(u8::is_ascii_digit).fold(0u64, |n, d| n * 10 + u64::from(d - b'0'))
}
