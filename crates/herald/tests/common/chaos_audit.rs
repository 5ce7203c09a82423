//! The chaos run's checks, and its report. After the load: every watcher
//! reaches each chat's latest seq by itself within [`CONVERGE`]; then each
//! chat's whole log, read over the HTTP API, against the senders' ledger
//! (every acknowledged send stored once, at its seq; seqs 1, 2, 3, ... without
//! a gap) and against what every watcher holds (the same events, in order).
//! Every breach is a failure of the run ([`Run::fail`]).
//!
//! Not here: the checks made while the load runs (duplicate pushes, fetches
//! that skip, quiet chats' bursts: `chaos_watcher.rs`, `chaos_sender.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{ident, seq_of};
use super::faults::{Fault, fault_name};
use super::load::Load;
use super::presence::Presence;
use super::sender::{Ledger, converge};
use super::watcher::{WatcherStats, WatcherView};
use super::{CONVERGE, NODES, Run, Settings, WORKSPACES};
use crate::common::try_http;

/// What the convergence after the load found.
pub struct Converged {
    /// Each chat's latest seq once the load stopped and every fault was mended.
    pub targets: Vec<u64>,
    /// The slowest watcher to reach its chat's latest seq, and who it was.
    pub slowest: Option<(Duration, String)>,
}

/// Convergence: every watcher reaches each chat's latest seq within 10 s of the
/// load stopping (`stopped`), or of the chat's last ack if that came later, by
/// itself: through pushes and the fetches the protocol prescribes, never an
/// unconditional final fetch.
pub async fn converge_after_load(run: &Run, load: &Load, ledger: &Ledger, stopped: Instant) -> Converged {
    let mut targets = Vec::new();
    for k in 0..run.chats.len() {
        targets.push(latest(run, k).await.unwrap_or_else(|e| {
            run.fail(format!("the auditor cannot read {}: {e}", run.chat_label(k)));
            0
        }));
    }
    let since: Vec<Instant> = (0..run.chats.len())
        .map(|k| ledger.acked.values().filter(|a| a.0 == k).map(|a| a.2).max().unwrap_or(stopped).max(stopped))
        .collect();
    let slowest = converge_all(run, &load.views, &targets, &since).await;
    Converged { targets, slowest }
}

/// The audit of the logs: each chat's whole log against the ledger and every watcher.
pub async fn check_logs(run: &Run, ledger: &Ledger, load: &Load, targets: &[u64]) -> Audit {
    let mut audit = Audit::default();
    for (k, &target) in targets.iter().enumerate() {
        match read_log(run, k).await {
            Ok(log) => audit_chat(run, ledger, &load.views, k, target, &log, &mut audit),
            Err(e) => run.fail(format!("the auditor cannot read the log of {}: {e}", run.chat_label(k))),
        }
    }
    audit
}

/// Reads the whole log of chat `k` over the HTTP API, paging, from whichever node answers.
async fn read_log(run: &Run, k: usize) -> Result<Vec<Value>, String> {
    let c = &run.chats[k];
    let ws = WORKSPACES[c.ws];
    let mut events: Vec<Value> = Vec::new();
    let mut after = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut node = 0;
    loop {
        let path = format!("/v1/workspaces/{ws}/chats/{}/events?after={after}&limit=500", c.name);
        match try_http(run.cell.addrs[node], "GET", &path, None, Duration::from_secs(5)).await {
            Some((200, v)) => {
                let page = v["events"].as_array().cloned().unwrap_or_default();
                if let Some(last) = page.last().and_then(seq_of) {
                    after = last;
                }
                let more = v["more"] == true && !page.is_empty();
                events.extend(page);
                if !more {
                    return Ok(events);
                }
            }
            other => {
                if Instant::now() >= deadline {
                    return Err(format!("reading {} after {after}: {other:?}", run.chat_label(k)));
                }
                node = (node + 1) % NODES;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The chat's latest seq, from whichever node answers.
async fn latest(run: &Run, k: usize) -> Result<u64, String> {
    let c = &run.chats[k];
    let path = format!("/v1/workspaces/{}/chats/{}", WORKSPACES[c.ws], c.name);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut node = 0;
    loop {
        match try_http(run.cell.addrs[node], "GET", &path, None, Duration::from_secs(5)).await {
            Some((200, v)) if v["seq"].as_u64().is_some() => return Ok(v["seq"].as_u64().unwrap()),
            other => {
                if Instant::now() >= deadline {
                    return Err(format!("reading {}: {other:?}", run.chat_label(k)));
                }
                node = (node + 1) % NODES;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn converge_all(
    run: &Run,
    views: &[(usize, Arc<Mutex<WatcherView>>)],
    targets: &[u64],
    since: &[Instant],
) -> Option<(Duration, String)> {
    let mut slowest: Option<(Duration, String)> = None;
    for (_, view) in views {
        let chats = view.lock().unwrap().chats.clone();
        for (slot, &k) in chats.iter().enumerate() {
            let reached = converge(std::slice::from_ref(view), k, targets[k], since[k] + CONVERGE).await;
            let v = view.lock().unwrap();
            match reached {
                Ok(_) => {
                    let at_ms = v.held[slot].get(targets[k] as usize - 1).map_or(0, |e| e.2);
                    let lag = (run.t0 + Duration::from_millis(at_ms)).saturating_duration_since(since[k]);
                    if slowest.as_ref().is_none_or(|(d, _)| lag > *d) {
                        slowest = Some((lag, format!("{} in {}", v.name, run.chat_label(k))));
                    }
                }
                Err(behind) => {
                    let missing: Vec<u64> = (v.last(slot) + 1..=targets[k]).take(20).collect();
                    run.fail(format!(
                        "{}: 10 s after the load stopped (last ack t={:.2}s) {behind}; latest is {}; missing {:?}{}",
                        run.chat_label(k),
                        run.at(since[k]),
                        targets[k],
                        missing,
                        if targets[k] - v.last(slot) > 20 { " ..." } else { "" }
                    ));
                }
            }
        }
    }
    slowest
}

/// What the audit of the logs counts.
#[derive(Default)]
pub struct Audit {
    pub stored: u64,
    pub lost: u64,
    pub duplicates: u64,
    /// Sends given up at the end that are stored all the same.
    pub stored_unacked: u64,
    /// Sends acknowledged on a resend with the seq an earlier attempt stored.
    pub earlier_store: u64,
}

/// Checks chat `k`'s whole `log` against the ledger and every watcher of it.
fn audit_chat(
    run: &Run,
    ledger: &Ledger,
    views: &[(usize, Arc<Mutex<WatcherView>>)],
    k: usize,
    target: u64,
    log: &[Value],
    a: &mut Audit,
) {
    let label = run.chat_label(k);
    a.stored += log.len() as u64;
    // Seqs 1..latest, no gap.
    if let Some((i, e)) = log.iter().enumerate().find(|(i, e)| seq_of(e) != Some(*i as u64 + 1)) {
        run.fail(format!("{label}: the log's event #{} has seq {:?}: seqs are not 1, 2, 3, ...", i + 1, e["seq"]));
    }
    if (log.len() as u64) < target {
        run.fail(format!("{label}: the log holds {} events, but the chat's latest seq was {target}", log.len()));
    }
    if (log.len() as u64) > target {
        run.note(format!(
            "{label}: {} events stored after the auditor read its latest seq {target}",
            log.len() as u64 - target
        ));
    }
    // Each client_id once, sent to this chat, at its acknowledged seq.
    let mut by_cid: HashMap<&str, Vec<u64>> = HashMap::new();
    for e in log {
        if let (Some(cid), Some(seq)) = (e["client_id"].as_str(), seq_of(e)) {
            by_cid.entry(cid).or_default().push(seq);
        }
    }
    for (cid, seqs) in &by_cid {
        if seqs.len() > 1 {
            a.duplicates += seqs.len() as u64 - 1;
            run.fail(format!("{label}: client_id {cid} is stored {} times, at seqs {seqs:?}", seqs.len()));
        }
        match ledger.tried.get(*cid) {
            None => run.fail(format!("{label}: client_id {cid} is stored, but no client sent it")),
            Some(&other) if other != k => {
                run.fail(format!("{label}: client_id {cid} is stored here, but was sent to {}", run.chat_label(other)))
            }
            _ => {}
        }
        if ledger.abandoned.contains(*cid) {
            a.stored_unacked += 1;
        }
    }
    for (cid, &(chat, seq, _)) in &ledger.acked {
        if chat != k {
            continue;
        }
        match by_cid.get(cid.as_str()) {
            None => {
                a.lost += 1;
                run.fail(format!("{label}: {cid} was acknowledged with seq {seq} but is not stored"));
            }
            Some(seqs) if !seqs.contains(&seq) => {
                a.lost += 1;
                run.fail(format!("{label}: {cid} was acknowledged with seq {seq} but is stored at {seqs:?}"));
            }
            _ => {}
        }
    }
    // Resends answered with the seq an earlier attempt stored: the server kept the write, the client lost the answer.
    for e in log {
        if let (Some(cid), Some(ts)) = (e["client_id"].as_str(), e["ts"].as_u64())
            && ledger.acked.contains_key(cid)
            && ledger.last_attempt_ms.get(cid).is_some_and(|&last| ts + 1 < last)
        {
            a.earlier_store += 1;
            run.note(format!("{label}: {cid} (seq {}) was stored by an attempt before the one acknowledged", e["seq"]));
        }
    }
    // Every watcher holds the log, event for event (fewer is a convergence failure, reported already).
    let want: Vec<(u64, u64)> = log.iter().filter_map(|e| Some((seq_of(e)?, ident(e)))).collect();
    for (_, view) in views {
        let v = view.lock().unwrap();
        let Some(slot) = v.chats.iter().position(|&c| c == k) else { continue };
        let held: Vec<(u64, u64)> = v.held[slot].iter().map(|e| (e.0, e.1)).collect();
        if let Some(i) = (0..want.len().min(held.len())).find(|&i| want[i] != held[i]) {
            if held[i].0 != want[i].0 {
                run.fail(format!("{label}: {} holds seq {} where the log has seq {}", v.name, held[i].0, want[i].0));
            } else {
                let e = &log[i];
                run.fail(format!(
                    "{label}: {} holds at seq {} an event unlike the log's ({} by {} with client_id {})",
                    v.name, held[i].0, e["type"], e["user"], e["client_id"]
                ));
            }
        } else if held.len() > want.len() {
            run.fail(format!("{label}: {} holds {} events, the log {}", v.name, held.len(), want.len()));
        }
    }
}

/// How long clients were still refused after a shard was back: for each
/// outage of `what` (stops, or failovers), the last `unavailable` for a chat
/// of that shard after it was back (started again, or its standby promoted)
/// and before the shard's next fault of any kind.
fn shard_recovery(run: &Run, what: &[(usize, Instant, Instant)], back_as: &str) -> String {
    let all: Vec<(usize, Instant, Instant)> =
        run.shard_outages.lock().unwrap().iter().chain(run.failovers.lock().unwrap().iter()).copied().collect();
    let refused = run.unavailable.lock().unwrap();
    let mut recoveries: Vec<Duration> = what
        .iter()
        .map(|&(shard, _, back)| {
            let next = all.iter().filter(|o| o.0 == shard && o.1 > back).map(|o| o.1).min();
            refused
                .iter()
                .filter(|(k, t)| run.chats[*k].shard == shard && *t > back && next.is_none_or(|n| *t < n))
                .map(|(_, t)| *t - back)
                .max()
                .unwrap_or(Duration::ZERO)
        })
        .collect();
    recoveries.sort();
    match recoveries.last() {
        None => "none".to_string(),
        Some(slowest) => format!(
            "{}; refusals after {back_as}: median {} ms, slowest {} ms",
            recoveries.len(),
            recoveries[recoveries.len() / 2].as_millis(),
            slowest.as_millis()
        ),
    }
}

/// The figures of the run, as printed at its end.
#[allow(clippy::too_many_arguments)]
pub fn report(
    run: &Run,
    settings: &Settings,
    ledger: &Ledger,
    load: &Load,
    audit: &Audit,
    converged: &Converged,
    faults: HashMap<&'static str, u64>,
    presence: &Presence,
) -> String {
    let mut w = WatcherStats::default();
    for (_, view) in &load.views {
        let s = view.lock().unwrap().stats;
        w.pushes += s.pushes;
        w.duplicate_pushes += s.duplicate_pushes;
        w.gap_fetches += s.gap_fetches;
        w.notifies += s.notifies;
        w.fetches += s.fetches;
        w.reconnects += s.reconnects;
        w.refusals += s.refusals;
    }
    let quiet = load.quiet_lags.lock().unwrap().clone();
    let mut faults: Vec<_> = faults.into_iter().collect();
    faults.sort();
    // Each list is copied out first: shard_recovery reads both under their locks.
    let (stopped, failed_over) = (run.shard_outages.lock().unwrap().clone(), run.failovers.lock().unwrap().clone());
    let stops = shard_recovery(run, &stopped, "the shard was back");
    let failovers = shard_recovery(run, &failed_over, "the promotion");
    let slowest = converged.slowest.as_ref().map_or("none".into(), |(d, who)| format!("{} ms ({who})", d.as_millis()));
    let (seed, secs, l) = (settings.seed, settings.secs, ledger);
    let frozen = faults.iter().find(|(k, _)| *k == fault_name(Fault::FreezeNode)).map_or(0, |(_, n)| *n);
    format!(
        "chaos seed {seed}: {secs} s of load on {NODES} nodes, 3 NATS servers, 2 PostgreSQL shards\n\
         \x20 sends acknowledged {}; given up at the end {} (of them stored {}); events stored {}\n\
         \x20 resends {}, of which answered with an earlier attempt's stored seq {}; idempotent resends checked {}; \
         throttled {}, unavailable {}, timeouts {}, disconnects {}\n\
         \x20 faults: {}\n\
         \x20 frozen nodes (SIGSTOP, 5 to 30 s): {frozen}\n\
         \x20 lost {}; stored twice {}; duplicate pushes {}\n\
         \x20 watchers: {} pushes, {} fetches ({} for gaps), {} notifies, {} reconnects, {} refusals\n\
         \x20 slowest convergence after the load stopped: {slowest}\n\
         \x20 quiet-chat bursts {}, slowest {} ms\n\
         \x20 shard stops: {}\n\
         \x20 failovers: {}\n\
         \x20 {}\n\
         \x20 failures: {}",
        l.acked.len(),
        l.abandoned.len(),
        audit.stored_unacked,
        audit.stored,
        l.resends,
        audit.earlier_store,
        l.idempotent_checks,
        l.throttled,
        l.unavailable,
        l.timeouts,
        l.disconnects,
        faults.iter().map(|(k, n)| format!("{n} x {k}")).collect::<Vec<_>>().join(", "),
        audit.lost,
        audit.duplicates,
        w.duplicate_pushes,
        w.pushes,
        w.fetches,
        w.gap_fetches,
        w.notifies,
        w.reconnects,
        w.refusals,
        quiet.len(),
        quiet.iter().max().map_or(0, |d| d.as_millis()),
        stops,
        failovers,
        presence.figures(),
        run.failure_count(),
    )
}
