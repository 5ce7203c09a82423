//! `slowloris`: sockets that never finish a request, as an attacker holds
//! them, against a node with a set open-file limit, while real clients keep
//! coming. The attack comes from one loopback address, in attacker processes
//! of at most `--per-process` sockets each (a process holds at most 20,000
//! open files): a third silent, a third sending half a request's headers and
//! a byte every few seconds, a third sending one whole request and then
//! idling on the kept-alive connection; each socket the server closes is
//! re-opened at once. Meanwhile a real client starts every
//! `--probe-every-ms`, alternately from another loopback address and from
//! the attacker's own: connect, upgrade, `hello`, `join`, `send`, and the
//! time until its ack (10 s or more: failed). After the run every acked send
//! must be stored.
//!
//! Reported: attack sockets the server closed per second (seen by the
//! attackers, and the server's `herald_http_closed_total` +
//! `herald_http_shed_total`), accept failures, the server's open files at
//! their peak, and the real clients' time to an acked send, p50/p99/max,
//! over the steady part (after `--warmup-s`, past the first header
//! deadline) and over the whole attack.

mod attacker;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

pub use attacker::{AttackerArgs, run as attacker_run};

use crate::client::{Client, fresh_chat};
use crate::http;
use crate::latency::Latencies;
use crate::report::{self, Column, RunArgs, col};
use crate::server::{Server, TargetArgs};
use crate::token::Signer;

/// A real client's whole setup (connect to acked send) may take this long before it counts as failed.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// The loopback address the real clients that are not the attacker's neighbours come from.
const CLEAN_SOURCE: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// `herald-bench slowloris`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct SlowlorisArgs {
    /// Attack sockets held at once, over all attacker processes.
    #[arg(long, default_value_t = 25_000)]
    pub attack_sockets: usize,
    /// Attack sockets per attacker process at most (each under the 20,000-file limit).
    #[arg(long, default_value_t = 12_500)]
    pub per_process: usize,
    /// The attacker's (one) source address.
    #[arg(long, default_value = "127.0.0.1")]
    pub attack_source: Ipv4Addr,
    /// How long the attack lasts, in seconds.
    #[arg(long, default_value_t = 40.0)]
    pub seconds: f64,
    /// Seconds before the real clients' steady figures start (past the first header deadline).
    #[arg(long, default_value_t = 12.0)]
    pub warmup_s: f64,
    /// A real client starts this often, in ms.
    #[arg(long, default_value_t = 250)]
    pub probe_every_ms: u64,
    /// The server's open-file limit.
    #[arg(long, default_value_t = 20_000)]
    pub server_nofile: u64,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("probes_ok", "probes ok"),
    col("probes_failed", "failed"),
    col("steady_p50_ms", "steady p50 ms"),
    col("steady_p99_ms", "steady p99 ms"),
    col("steady_max_ms", "steady max ms"),
    col("all_p99_ms", "all p99 ms"),
    col("attack_closed_per_s", "attack closed/s"),
    col("server_closed_per_s", "server closed+shed/s"),
    col("accept_failures", "accept failures"),
    col("server_files_peak", "server files peak"),
];

/// Runs slowloris `args.run.runs` times and reports.
pub async fn run(args: SlowlorisArgs) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(args.seconds > 0.0 && args.seconds <= 600.0, "--seconds in (0, 600]");
    anyhow::ensure!(args.per_process >= 1 && args.per_process <= 18_000, "--per-process in 1..=18000");
    anyhow::ensure!(args.attack_sockets <= 60_000, "--attack-sockets at most 60000");
    anyhow::ensure!(args.target.starts_server(), "slowloris starts its own server (its file limit is part of the run)");
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("slowloris", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

/// Sets this process's soft open-file limit (children inherit it); the old one.
fn set_nofile(soft: u64) -> anyhow::Result<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain system calls on a local struct.
    unsafe {
        anyhow::ensure!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0, "getrlimit");
        let old = lim.rlim_cur;
        lim.rlim_cur = soft.min(lim.rlim_max);
        anyhow::ensure!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0, "setrlimit");
        Ok(old)
    }
}

async fn run_once(args: &SlowlorisArgs, run: u32) -> anyhow::Result<Value> {
    let old = set_nofile(args.server_nofile)?;
    let server = Server::open(&args.target, &[]).await;
    set_nofile(old)?;
    let server = server?;
    let out = measure(args, run, &server).await;
    let log = server.stop().await?;
    let mut out = out?;
    out["server_log"] = serde_json::to_value(log)?;
    Ok(out)
}

/// One real client's try: when it started (since the attack did), from which source, and its outcome.
struct Probe {
    at: Duration,
    clean: bool,
    outcome: Result<(Duration, u64), String>,
}

/// The server's counters that the attack moves.
#[derive(Default, Clone, Copy)]
struct Counters {
    closed: f64,
    shed: f64,
    accept_failures: f64,
    sockets: f64,
}

async fn counters(addr: SocketAddr) -> Option<Counters> {
    let answer = tokio::time::timeout(Duration::from_secs(2), http::get(addr, "/metrics", None)).await.ok()?.ok()?;
    let sum = |name: &str| -> f64 {
        answer
            .body
            .lines()
            .filter(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with(' ') || r.starts_with('{')))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    Some(Counters {
        closed: sum("herald_http_closed_total"),
        shed: sum("herald_http_shed_total"),
        accept_failures: sum("herald_accept_failures_total"),
        sockets: sum("herald_http_sockets"),
    })
}

fn open_files(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

async fn measure(args: &SlowlorisArgs, run: u32, server: &Server) -> anyhow::Result<Value> {
    let ws = args.target.workspace.clone();
    let chat = fresh_chat("slowloris", run);
    let signer = Signer::new(&server.jwt_secret, &ws);
    let path = Server::ws_path(&ws);
    let before = counters(server.addr).await.unwrap_or_default();
    let started = Instant::now();

    // The attackers: this binary again, as hidden `slowloris-attacker` processes.
    let exe = std::env::current_exe()?;
    let mut attackers = Vec::new();
    let mut left = args.attack_sockets;
    while left > 0 {
        let n = left.min(args.per_process);
        left -= n;
        let mut child = Command::new(&exe)
            .args(["slowloris-attacker", "--server", &server.addr.to_string(), "--source"])
            .arg(args.attack_source.to_string())
            .args(["--sockets", &n.to_string(), "--seconds", &args.seconds.to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("attacker stdout"))?;
        attackers.push((child, BufReader::new(stdout).lines()));
    }

    // The server's files and counters, once a second.
    let sampler = {
        let (addr, pid) = (server.addr, server.pid);
        let until = started + Duration::from_secs_f64(args.seconds);
        tokio::spawn(async move {
            let (mut files_peak, mut sockets_peak) = (0usize, 0f64);
            while Instant::now() < until {
                files_peak = files_peak.max(open_files(pid));
                if let Some(c) = counters(addr).await {
                    sockets_peak = sockets_peak.max(c.sockets);
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            (files_peak, sockets_peak)
        })
    };

    // The real clients.
    let probes = Arc::new(std::sync::Mutex::new(Vec::<Probe>::new()));
    let mut tasks = Vec::new();
    let mut i = 0u64;
    while started.elapsed().as_secs_f64() < args.seconds {
        i += 1;
        let clean = i % 2 == 1;
        let source = if clean { CLEAN_SOURCE } else { args.attack_source };
        let (token, path, chat, probes) =
            (signer.token(&format!("real{i}"))?, path.clone(), chat.clone(), probes.clone());
        let (addr, at) = (server.addr, started.elapsed());
        tasks.push(tokio::spawn(async move {
            let t0 = Instant::now();
            let attempt = async {
                let mut c = Client::connect(addr, &path, source).await.map_err(|e| e.to_string())?;
                c.hello(&token).await.map_err(|e| e.to_string())?;
                c.join(&chat).await.map_err(|e| e.to_string())?;
                let body = serde_json::value::to_raw_value(&json!({"n": i})).map_err(|e| e.to_string())?;
                let ok = c.send(&chat, &body).await.map_err(|e| e.to_string())?;
                c.close().await;
                Ok::<_, String>(ok.seq)
            };
            let outcome = match tokio::time::timeout(PROBE_TIMEOUT, attempt).await {
                Ok(Ok(seq)) => Ok((t0.elapsed(), seq)),
                Ok(Err(e)) => Err(e),
                Err(_) => Err("timed out".into()),
            };
            probes.lock().expect("probes").push(Probe { at, clean, outcome });
        }));
        tokio::time::sleep(Duration::from_millis(args.probe_every_ms)).await;
    }
    let mut attack = attacker::Tally::default();
    for (mut child, mut lines) in attackers {
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(t) = serde_json::from_str::<attacker::Tally>(&line) {
                attack.add(&t);
            }
        }
        let _ = child.wait().await;
    }
    let attack_s = started.elapsed().as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    let (files_peak, sockets_peak) = sampler.await.unwrap_or_default();
    let after = counters(server.addr).await.unwrap_or_default();

    let probes = std::mem::take(&mut *probes.lock().expect("probes"));
    let warmup = Duration::from_secs_f64(args.warmup_s);
    let (mut steady, mut all, mut clean, mut neighbour) =
        (Latencies::default(), Latencies::default(), Latencies::default(), Latencies::default());
    let (mut ok, mut failed, mut steady_failed) = (0usize, 0usize, 0usize);
    let mut acked = Vec::new();
    let mut first_failure = None;
    for p in &probes {
        match &p.outcome {
            Ok((took, seq)) => {
                ok += 1;
                acked.push(*seq);
                all.record(*took);
                if p.at >= warmup {
                    steady.record(*took);
                    if p.clean { clean.record(*took) } else { neighbour.record(*took) }
                }
            }
            Err(why) => {
                failed += 1;
                if p.at >= warmup {
                    steady_failed += 1;
                }
                first_failure.get_or_insert_with(|| format!("{:.1} s in: {why}", p.at.as_secs_f64()));
            }
        }
    }
    let lost = lost_acks(server, &ws, &chat, &acked).await?;
    let (s, a, c, n) = (steady.summary(), all.summary(), clean.summary(), neighbour.summary());
    Ok(json!({
        "attack_sockets": args.attack_sockets,
        "server_nofile": args.server_nofile,
        "probes_ok": ok,
        "probes_failed": failed,
        // What the smoke run checks: real clients that failed once the first deadline had passed.
        "failed": steady_failed,
        "first_failure": first_failure,
        "steady_p50_ms": s.p50_ms,
        "steady_p99_ms": s.p99_ms,
        "steady_max_ms": s.max_ms,
        "steady_clean_p99_ms": c.p99_ms,
        "steady_neighbour_p99_ms": n.p99_ms,
        "all_p50_ms": a.p50_ms,
        "all_p99_ms": a.p99_ms,
        "all_max_ms": a.max_ms,
        "attack_connects": attack.connects,
        "attack_connect_failures": attack.connect_failures,
        "attack_closed": attack.closed,
        "attack_closed_per_s": attack.closed as f64 / attack_s,
        "server_closed": after.closed - before.closed,
        "server_shed": after.shed - before.shed,
        "server_closed_per_s": (after.closed - before.closed + after.shed - before.shed) / attack_s,
        "accept_failures": after.accept_failures - before.accept_failures,
        "server_files_peak": files_peak,
        "http_sockets_peak": sockets_peak,
        "http_sockets_after": after.sockets,
        "acked_lost": lost,
    }))
}

/// Acked sends (by seq) that the chat does not hold as messages.
async fn lost_acks(server: &Server, ws: &str, chat: &str, acked: &[u64]) -> anyhow::Result<usize> {
    let key = server.api_key.as_deref();
    let mut stored = std::collections::HashSet::new();
    let mut after = 0u64;
    loop {
        let path = format!("/v1/workspaces/{ws}/chats/{chat}/events?after={after}&limit=1000");
        let page: Value = serde_json::from_str(&http::get(server.addr, &path, key).await?.body)?;
        let events = page["events"].as_array().cloned().unwrap_or_default();
        for e in &events {
            if e["type"] == "message" {
                stored.insert(e["seq"].as_u64().unwrap_or(0));
            }
            after = after.max(e["seq"].as_u64().unwrap_or(0));
        }
        if page["more"] != true || events.is_empty() {
            break;
        }
    }
    Ok(acked.iter().filter(|s| !stored.contains(s)).count())
}
