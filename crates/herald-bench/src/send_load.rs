//! The send workload that `sends` and `replication` measure: S senders (each
//! its own user) send K messages each into one chat, one at a time per
//! connection as the protocol wants (the next send waits for the last ack),
//! while one watcher checks that every event arrives once, in seq order,
//! without gaps (and, where pushes skipped some, that fetching the gaps gives
//! them all). It measures a server it is handed and stops it; which server,
//! which flags and how the runs are reported are the scenarios'.

use std::time::{Duration, Instant};

use anyhow::Context;
use herald_protocol::EventType;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{Client, ClientError, REQUEST_TIMEOUT, fresh_chat, sources_for};
use crate::fleet::{self, Failures};
use crate::latency::Latencies;
use crate::server::Server;
use crate::token::Signer;

/// After the last ack, the watcher gets this long to see the last event.
const WATCH_GRACE: Duration = Duration::from_secs(30);

/// What one sender did.
#[derive(Default)]
struct SenderOutcome {
    latencies: Latencies,
    acked: u64,
    failures: Failures,
    max_seq: u64,
    last_ack: Option<Instant>,
}

/// What the watcher saw.
#[derive(Debug, Default, Clone, Serialize)]
struct WatchOutcome {
    /// Event pushes of the chat received.
    events: u64,
    /// Of those, messages.
    messages: u64,
    /// Places where a push's seq jumped forward by more than one.
    gaps: u64,
    /// Events skipped by pushes (the sum of the gaps' widths).
    skipped: u64,
    /// Pushes at or below a seq already seen: a broken order.
    out_of_order: u64,
    notifies: u64,
    last_seq: u64,
    /// Events the watcher then fetched to fill the gaps, as a client must.
    fetched: u64,
    fetched_messages: u64,
    /// Every seq up to the chat's last was seen once, by push or fetch.
    complete: bool,
    /// Why the watcher stopped early, if it did.
    error: Option<String>,
}

/// Runs the workload once on `server` (already open and ready) for clients of
/// `workspace`: `senders` senders of `messages` messages each into a fresh
/// chat named after `prefix` and `run` (which also picks the clients' source
/// addresses); stops the server and returns the run's figures, with what it logged.
pub async fn measure(
    server: Server,
    workspace: &str,
    prefix: &str,
    senders: usize,
    messages: usize,
    run: u32,
) -> anyhow::Result<Value> {
    let signer = Signer::new(&server.jwt_secret, workspace);
    let chat = fresh_chat(prefix, run);
    let offset = run * sources_for(senders + 1);

    // The watcher comes first, so that it sees every event after its own join.
    let (mut watchers, f) = fleet::open_clients(&server, &signer, 1, offset, |_| "watcher".into()).await;
    let mut watcher = watchers.pop().with_context(|| format!("the watcher could not connect: {:?}", f.first))?;
    watcher.join(&chat).await?;
    let from = watcher.watch(&chat).await?.seq;
    let (target_tx, target_rx) = watch::channel(None);
    let watching = tokio::spawn(watch_chat(watcher, chat.clone(), from, target_rx));

    let (clients, mut failures) = fleet::open_clients(&server, &signer, senders, offset, |i| format!("s{i}")).await;
    let (go_tx, go_rx) = watch::channel(false);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut tasks = Vec::new();
    for (i, mut client) in clients.into_iter().enumerate() {
        let (chat, mut go, ready, k) = (chat.clone(), go_rx.clone(), ready_tx.clone(), messages);
        tasks.push(tokio::spawn(async move {
            let mut out = SenderOutcome::default();
            let joined = tokio::time::timeout(REQUEST_TIMEOUT, client.join(&chat)).await;
            let _ = ready.send(());
            match joined {
                Ok(Ok(_)) => {}
                Ok(Err(f)) => {
                    out.failures.add_failure(&f);
                    return out;
                }
                Err(_) => {
                    out.failures.add("timeout", || format!("no join ack in {REQUEST_TIMEOUT:?}"));
                    return out;
                }
            }
            let _ = go.wait_for(|g| *g).await;
            for n in 0..k {
                let body =
                    RawValue::from_string(format!(r#"{{"text":"bench message {n} from s{i}"}}"#)).expect("valid JSON");
                let t = Instant::now();
                match tokio::time::timeout(REQUEST_TIMEOUT, client.send(&chat, &body)).await {
                    Ok(Ok(ok)) => {
                        let now = Instant::now();
                        out.latencies.record(now - t);
                        out.acked += 1;
                        out.max_seq = out.max_seq.max(ok.seq);
                        out.last_ack = Some(now);
                    }
                    Ok(Err(f)) => {
                        out.failures.add_failure(&f);
                        // A refusal leaves the connection usable; anything else does not.
                        if !matches!(f.error, ClientError::Refused(_)) {
                            break;
                        }
                    }
                    Err(_) => {
                        out.failures.add("timeout", || format!("no ack in {REQUEST_TIMEOUT:?}"));
                        break;
                    }
                }
            }
            client.close().await;
            out
        }));
    }
    drop(ready_tx);
    // Every sender has joined (or failed to) before any sends: joins are not what this measures.
    // Each join is bounded by its timeout, so this loop is too.
    for _ in 0..tasks.len() {
        if ready_rx.recv().await.is_none() {
            break;
        }
    }
    let started = Instant::now();
    let _ = go_tx.send(true);
    let mut latencies = Latencies::default();
    let (mut acked, mut max_seq, mut last_ack) = (0, 0, started);
    for t in tasks {
        let out = t.await?;
        latencies.merge(&out.latencies);
        acked += out.acked;
        max_seq = max_seq.max(out.max_seq);
        last_ack = last_ack.max(out.last_ack.unwrap_or(started));
        failures.merge(&out.failures);
    }
    let elapsed = last_ack - started;
    let chat_seq = match server.api_key {
        Some(_) => Some(server.chat(workspace, &chat).await?.seq),
        None => None,
    };
    let _ = target_tx.send(Some((chat_seq.unwrap_or(max_seq), Instant::now() + WATCH_GRACE)));
    let seen = watching.await?;
    let log = server.stop().await?;
    let expected = (senders * messages) as u64;
    let p = latencies.summary();
    Ok(json!({
        "sent": expected,
        "acked": acked,
        "failed": failures.total,
        "failures": failures,
        "elapsed_s": elapsed.as_secs_f64(),
        "sends_per_s": acked as f64 / elapsed.as_secs_f64().max(1e-9),
        "p50_ms": p.p50_ms,
        "p99_ms": p.p99_ms,
        "p999_ms": p.p999_ms,
        "max_ms": p.max_ms,
        "chat_seq": chat_seq,
        "watcher_messages": seen.messages,
        "watcher_gaps": seen.gaps,
        "watcher_skipped": seen.skipped,
        // Every message arrived, by push in seq order with no gap.
        "all_pushed_in_order": seen.messages == expected && seen.gaps == 0 && seen.out_of_order == 0 && seen.error.is_none(),
        // Every message is there once the watcher fetched what pushes skipped.
        "all_delivered": seen.complete && seen.messages + seen.fetched_messages == expected,
        "watcher": seen,
        "server_log": log,
    }))
}

/// Reads `chat`'s pushes from seq `from` on, checking order, until the seq the
/// target names is seen or its deadline passes; then fetches what pushes
/// skipped, as the protocol tells a client to.
async fn watch_chat(
    mut client: Client,
    chat: String,
    from: u64,
    mut target: watch::Receiver<Option<(u64, Instant)>>,
) -> WatchOutcome {
    let mut out = WatchOutcome { last_seq: from, ..Default::default() };
    // Seq ranges (after, before) that pushes skipped.
    let mut holes: Vec<(u64, u64)> = Vec::new();
    let mut goal: Option<(u64, Instant)>;
    loop {
        goal = *target.borrow_and_update();
        if let Some((seq, _)) = goal
            && out.last_seq >= seq
        {
            break;
        }
        // Before the senders finish there is no deadline yet; the senders' own timeouts bound that phase.
        let deadline = goal.map(|(_, d)| d).unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
        tokio::select! {
            changed = target.changed() => if changed.is_err() { break },
            _ = tokio::time::sleep_until(deadline.into()) => break,
            frame = client.next_frame() => match frame {
                Err(e) => {
                    out.error = Some(e.to_string());
                    break;
                }
                Ok(f) if f.ev.as_deref() == Some("notify") => out.notifies += 1,
                Ok(f) if f.ev.as_deref() == Some("event") && f.chat.as_deref() == Some(chat.as_str()) => {
                    let seq = f.seq.unwrap_or(0);
                    out.events += 1;
                    if seq <= out.last_seq {
                        out.out_of_order += 1;
                        continue;
                    }
                    if seq > out.last_seq + 1 {
                        out.gaps += 1;
                        out.skipped += seq - out.last_seq - 1;
                        holes.push((out.last_seq, seq));
                    }
                    out.last_seq = seq;
                    if f.kind == Some(EventType::Message) {
                        out.messages += 1;
                    }
                }
                Ok(_) => {}
            },
        }
    }
    if out.error.is_none() {
        let end = goal.map_or(out.last_seq, |(seq, _)| seq);
        if out.last_seq < end {
            holes.push((out.last_seq, end + 1));
        }
        let filled = fill_holes(&mut client, &chat, &holes, &mut out).await;
        out.complete = filled && out.out_of_order == 0;
    }
    client.close().await;
    out
}

/// Fetches each hole's events; true if every one came back, in order.
async fn fill_holes(client: &mut Client, chat: &str, holes: &[(u64, u64)], out: &mut WatchOutcome) -> bool {
    /// The protocol's largest fetch page.
    const PAGE: u32 = herald_protocol::limits::FETCH_MAX;
    for &(after, before) in holes {
        let mut at = after;
        while at + 1 < before {
            let page = match tokio::time::timeout(REQUEST_TIMEOUT, client.fetch(chat, at, PAGE)).await {
                Ok(Ok(page)) => page,
                Ok(Err(f)) => {
                    out.error = Some(f.to_string());
                    return false;
                }
                Err(_) => {
                    out.error = Some(format!("no fetch reply in {REQUEST_TIMEOUT:?}"));
                    return false;
                }
            };
            let mut progressed = false;
            for e in page.events.iter().take_while(|e| e.seq < before) {
                if e.seq != at + 1 {
                    out.error = Some(format!("fetch after {at} returned seq {}", e.seq));
                    return false;
                }
                at = e.seq;
                progressed = true;
                out.fetched += 1;
                if e.kind == EventType::Message {
                    out.fetched_messages += 1;
                }
            }
            if !progressed {
                out.error = Some(format!("fetch after {at} returned nothing below {before}"));
                return false;
            }
        }
    }
    true
}
