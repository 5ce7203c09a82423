//! `inbox-live`: U users (10,000) each keep a live inbox (`inbox` with
//! `live: true`) on their own connection, while their chats receive R
//! messages per second (1,000) for a while. Chats have M members (10): chat
//! `c`'s members are users `c + j·U/M` (mod U), so there are U chats and
//! each user is in M of them. One sender per chat (users `0..U/M`, each on a
//! second connection, so it is a member) sends durable messages round-robin
//! into its M chats, all senders together at R per second.
//!
//! Reported: messages sent and their rate; `inbox` pushes (the server's
//! `herald_inbox_pushes_total` over the window) and pushes per message; the
//! latency from a send to the first push of its chat, at each of its other
//! members, that covers it (seq at least its own), p50 and p99; the server's
//! CPU time per message over the window and 1 s after it (so the last pushes
//! count); its RSS at the end. Then every live inbox is checked: its last
//! push of each chat (or its reply, for a chat never pushed) must match a
//! fresh `inbox` read exactly (seq and unread): `inexact` counts those that
//! do not.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{ClientError, Failure, bounded, fresh_chat, sources_for};
use crate::fleet::{self, Failures, for_each};
use crate::latency::Latencies;
use crate::peer::cpu_s;
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, Server, TargetArgs};
use crate::token::Signer;

/// Clients in this one process (live inboxes plus senders): stay well under its 20,000 open files.
const MAX_CLIENTS: usize = 15_000;

/// `herald-bench inbox-live`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct InboxLiveArgs {
    /// Users, each with a live inbox on its own connection (and as many chats).
    #[arg(long, default_value_t = 10_000)]
    pub users: usize,
    /// Members of each chat (and chats of each user); must divide --users.
    #[arg(long, default_value_t = 10)]
    pub members: usize,
    /// Messages per second into the chats, all senders together.
    #[arg(long, default_value_t = 1000.0)]
    pub rate: f64,
    /// Seconds of sending.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// `--live false`: the same users and sends, inboxes read once without
    /// `live` (the baseline: what the feed adds to the server's CPU).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub live: bool,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("users", "users"),
    col("live", "live"),
    col("sent", "messages"),
    col("sent_per_s", "msgs/s"),
    col("pushes", "pushes"),
    col("pushes_per_message", "pushes/msg"),
    col("push_p50_ms", "push p50 ms"),
    col("push_p99_ms", "push p99 ms"),
    col("server_cpu_us_per_message", "server us/msg"),
    col("server_rss_mib", "server MiB"),
    col("inexact", "inexact"),
    col("failed", "failed"),
];

/// Runs the scenario `args.run.runs` times and reports.
pub async fn run(args: InboxLiveArgs) -> anyhow::Result<Vec<Value>> {
    anyhow::ensure!(
        args.members >= 2 && args.users.is_multiple_of(args.members),
        "--members (2 or more) must divide --users"
    );
    anyhow::ensure!(args.users + args.users / args.members <= MAX_CLIENTS, "at most {MAX_CLIENTS} clients in all");
    anyhow::ensure!(args.rate > 0.0 && args.rate.is_finite() && args.seconds > 0, "--rate and --seconds above 0");
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("inbox-live", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

async fn run_once(args: &InboxLiveArgs, run: u32) -> anyhow::Result<Value> {
    // Senders' requests come back to back: the per-connection request rate is raised, as for `sends`.
    Server::measured(&args.target, &server::raised_limits(), async |server| measure(args, run, server).await).await
}

/// The chats of the scenario and who is in them.
struct Plan {
    users: usize,
    members: usize,
    prefix: String,
}

impl Plan {
    fn stride(&self) -> usize {
        self.users / self.members
    }
    fn chat(&self, c: usize) -> String {
        format!("{}-{c:05}", self.prefix)
    }
    fn user(i: usize) -> String {
        format!("u{i:05}")
    }
    /// The chats user `u` is in.
    fn chats_of(&self, u: usize) -> Vec<usize> {
        (0..self.members).map(|j| (u + self.users - j * self.stride()) % self.users).collect()
    }
}

/// One `inbox` push read: (chat, seq, unread, left, when).
type Push = (String, u64, u64, bool, Instant);

async fn measure(args: &InboxLiveArgs, run: u32, server: &Server) -> anyhow::Result<Value> {
    let plan = Arc::new(Plan { users: args.users, members: args.members, prefix: fresh_chat("inbox-live", run) });
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let offset = run * sources_for(args.users + plan.stride());
    let (clients, mut failures) = fleet::open_clients(server, &signer, args.users, offset, Plan::user).await;
    anyhow::ensure!(clients.len() == args.users, "setup failed: {failures:?}");
    // Each user joins its chats (in the clients' order: client i is user i).
    let joined = for_each(clients.into_iter().enumerate().collect(), &mut failures, |(u, mut c)| {
        let plan = plan.clone();
        async move {
            for chat in plan.chats_of(u) {
                bounded(c.join(&plan.chat(chat))).await?;
            }
            Ok((u, c))
        }
    })
    .await;
    anyhow::ensure!(joined.len() == args.users, "joins failed: {failures:?}");

    let (senders, sender_failures) =
        fleet::open_clients(server, &signer, plan.stride(), offset + sources_for(args.users), Plan::user).await;
    anyhow::ensure!(senders.len() == plan.stride(), "senders failed: {sender_failures:?}");

    // Every user asks for a live inbox; what its reply said is the starting point.
    let (members, live) = (args.members, args.live);
    let started = for_each(joined, &mut failures, |(u, mut c)| async move {
        let page = if live { bounded(c.inbox_live(200)).await? } else { bounded(c.inbox(200, None)).await? };
        if page.chats.len() != members {
            return Err(Failure::timeout(format!("inbox listed {} chats", page.chats.len())));
        }
        let known: HashMap<String, (u64, u64)> =
            page.chats.iter().map(|e| (e.chat.clone(), (e.seq, e.unread))).collect();
        Ok((u, c, known))
    })
    .await;
    anyhow::ensure!(started.len() == args.users, "live inboxes failed: {failures:?}");

    // Readers keep every inbox push with the time it was read.
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut readers = Vec::new();
    for (u, mut c, known) in started {
        let mut stop = stop_rx.clone();
        readers.push(tokio::spawn(async move {
            let mut pushes: Vec<Push> = Vec::new();
            let mut dropped = false;
            loop {
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => break,
                    frame = c.next_frame() => match frame {
                        Ok(f) if f.ev.as_deref() == Some("inbox") => {
                            let (Some(chat), Some(seq)) = (f.chat, f.seq) else { continue };
                            pushes.push((chat, seq, f.unread.unwrap_or(0), f.left.unwrap_or(false), Instant::now()));
                        }
                        Ok(_) => {}
                        Err(ClientError::BadFrame(_)) => {}
                        Err(_) => { dropped = true; break; }
                    },
                }
            }
            (u, c, known, pushes, dropped)
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    let pushes0 = server.metric("herald_inbox_pushes_total").await?.unwrap_or(0.0);
    let cpu0 = cpu_s(server.pid).unwrap_or(0.0);
    let began = Instant::now();
    let per_sender = args.rate / plan.stride() as f64;
    let window = Duration::from_secs(args.seconds);
    let mut sending = Vec::new();
    for (s, mut c) in senders.into_iter().enumerate() {
        let plan = plan.clone();
        sending.push(tokio::spawn(async move {
            let body = RawValue::from_string(r#"{"text":"inbox bench"}"#.into()).expect("JSON");
            let chats = plan.chats_of(s);
            let mut pace = tokio::time::interval(Duration::from_secs_f64(1.0 / per_sender));
            pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // Senders start spread over one interval, not all at once.
            tokio::time::sleep(Duration::from_secs_f64(rand_fraction(s) / per_sender)).await;
            let mut sent = Vec::new();
            let mut failures = Failures::default();
            let mut k = 0;
            while began.elapsed() < window {
                pace.tick().await;
                let chat = plan.chat(chats[k % chats.len()]);
                k += 1;
                let t0 = Instant::now();
                match bounded(c.send(&chat, &body)).await {
                    Ok(ok) => sent.push((chat, ok.seq, s, t0)),
                    Err(f) => {
                        failures.add_failure(&f);
                        break;
                    }
                }
            }
            c.close().await;
            (sent, failures)
        }));
    }
    let mut sent = Vec::new();
    for t in sending {
        let (s, f) = t.await?;
        sent.extend(s);
        failures.merge(&f);
    }
    let send_s = began.elapsed().as_secs_f64();
    // The last pushes come within a quarter second of the last change.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let cpu = cpu_s(server.pid).unwrap_or(0.0) - cpu0;
    let pushes = server.metric("herald_inbox_pushes_total").await?.unwrap_or(0.0) - pushes0;
    let rss_kib = server.rss_kib().unwrap_or(0);
    let _ = stop_tx.send(true);

    // Latency: each message, at each other member, to the first push of its chat covering it.
    let mut by_chat: HashMap<&str, Vec<(u64, usize, Instant)>> = HashMap::new();
    for (chat, seq, sender, t0) in &sent {
        by_chat.entry(chat.as_str()).or_default().push((*seq, *sender, *t0));
    }
    for v in by_chat.values_mut() {
        v.sort_by_key(|e| e.0);
    }
    let mut latencies = Latencies::default();
    let (mut uncovered, mut dropped, mut read) = (0u64, 0u64, 0u64);
    let mut checks = Vec::new();
    for r in readers {
        let (u, c, known, pushes, was_dropped) = r.await?;
        dropped += u64::from(was_dropped);
        read += pushes.len() as u64;
        let mut last: HashMap<String, (u64, u64)> = known;
        let mut covered: HashMap<&str, u64> = HashMap::new();
        for (chat, seq, unread, _left, at) in &pushes {
            let from = covered.get(chat.as_str()).copied().unwrap_or(0);
            if let Some(events) = by_chat.get(chat.as_str()) {
                for (_, sender, t0) in events.iter().filter(|e| e.0 > from && e.0 <= *seq) {
                    if *sender != u {
                        latencies.record(at.saturating_duration_since(*t0));
                    }
                }
            }
            covered.insert(chat.as_str(), from.max(*seq));
            last.insert(chat.clone(), (*seq, *unread));
        }
        for chat in plan.chats_of(u).into_iter().map(|c| plan.chat(c)).filter(|_| args.live) {
            let top = by_chat.get(chat.as_str()).and_then(|e| e.last()).map_or(0, |e| e.0);
            if covered.get(chat.as_str()).copied().unwrap_or(0) < top {
                uncovered += 1;
            }
        }
        checks.push((c, last));
    }
    // Every inbox's last word on each chat against a fresh read (a failed read counts as inexact).
    let checked = for_each(checks, &mut failures, |(mut c, last)| async move {
        let page = bounded(c.inbox(200, None)).await;
        c.close().await;
        Ok(match page {
            Ok(_) if !live => (0, None),
            Ok(page) => {
                let wrong: Vec<String> = page
                    .chats
                    .iter()
                    .filter(|e| last.get(&e.chat) != Some(&(e.seq, e.unread)))
                    .map(|e| format!("{}: read {:?}, pushed {:?}", e.chat, (e.seq, e.unread), last.get(&e.chat)))
                    .collect();
                (wrong.len() as u64, wrong.into_iter().next())
            }
            Err(f) => (1, Some(f.to_string())),
        })
    })
    .await;
    let inexact: u64 = checked.iter().map(|(n, _)| n).sum();
    let first_inexact = checked.into_iter().find_map(|(_, example)| example);
    let lat = latencies.summary();
    let n = sent.len() as f64;
    Ok(json!({
        "users": args.users,
        "live": args.live,
        "chats": args.users,
        "members": args.members,
        "sent": sent.len(),
        "sent_per_s": n / send_s,
        "pushes": pushes,
        "pushes_per_message": pushes / n.max(1.0),
        "pushes_read": read,
        "push_p50_ms": lat.p50_ms,
        "push_p99_ms": lat.p99_ms,
        "push_max_ms": lat.max_ms,
        "uncovered": uncovered,
        "server_cpu_s": cpu,
        "server_cpu_us_per_message": cpu * 1e6 / n.max(1.0),
        "server_rss_mib": rss_kib as f64 / 1024.0,
        "inexact": inexact,
        "first_inexact": first_inexact,
        "dropped": dropped,
        "failed": failures.total,
        "failures": failures,
    }))
}

/// A fixed spread in [0, 1) for sender `s` (no randomness needed, only spacing).
fn rand_fraction(s: usize) -> f64 {
    ((s as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_user_is_in_members_chats_and_every_chat_has_one_sender() {
        let plan = Plan { users: 100, members: 10, prefix: "p".into() };
        let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
        for u in 0..100 {
            let chats = plan.chats_of(u);
            assert_eq!(chats.len(), 10);
            for c in chats {
                members.entry(c).or_default().push(u);
            }
        }
        assert_eq!(members.len(), 100);
        for (c, m) in &members {
            assert_eq!(m.len(), 10, "chat {c}");
            assert_eq!(m.iter().filter(|u| **u < plan.stride()).count(), 1, "one sender in chat {c}");
        }
    }
}
