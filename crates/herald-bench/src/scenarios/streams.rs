//! `streams`: N streamed messages at once (1,000), each in its own chat with
//! W watchers (10), each stream appended to R times a second (25), all on one
//! node (the embedded store). Protocol v1.2's streams: a `send` with
//! `stream: true`, `append`s that are durable when answered, `append`
//! pushes coalesced by the server to one per 40 ms per stream, each with
//! `at` (the text's UTF-16 length before the chunk), and `done`, which
//! stores the final `edit`.
//!
//! Reported: appends acked and their rate; the latency from an append's
//! request to the `append` push at each watcher that carries its text
//! (matched by `at`: the push covers the append when the push's text ends
//! at or after the append's), p50 and p99; the server's CPU time per append
//! over the window (and 1 s after, so the last pushes count); pushes read
//! per append per watcher (1 when nothing is coalesced); appends lost (an
//! acked append some watcher never got pushed before `done`, counted once
//! per watcher); the log's growth per stream (events stored from the
//! stream's `message` on: 2, the message and its final `edit`); and
//! whether every watcher's text, built from its pushes, equals the stored
//! text after `done` (`texts_equal`, and `texts_differ` counts those that
//! do not). Not here: what the server does with a push (`chat/stream.rs`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use herald_protocol::EventType;
use herald_protocol::event::StreamState;
use herald_protocol::frame::utf16_len;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{Client, ClientError, bounded, fresh_chat, sources_for};
use crate::fleet::{self, Failures, for_each};
use crate::latency::Latencies;
use crate::peer::cpu_s;
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, Server, TargetArgs};
use crate::token::Signer;

/// Clients in this one process (streamers plus watchers): well under its 20,000 open files.
const MAX_CLIENTS: usize = 15_000;
/// After the window, pushes still coalescing (one per 40 ms per stream) get this long to arrive.
const SETTLE: Duration = Duration::from_secs(1);
/// After `done`, every watcher gets this long to see the stream's final `edit`.
const EDIT_WAIT: Duration = Duration::from_secs(10);
/// The server's default body limit (bytes): a stream's whole text must stay below it.
const BODY_LIMIT: usize = 16_384;
/// The longest chunk [`chunk`] makes, in bytes (kept below it by the argument check).
const CHUNK_MAX_BYTES: usize = 16;

/// `herald-bench streams`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct StreamsArgs {
    /// Streams at once, each in its own chat.
    #[arg(long, default_value_t = 1_000)]
    pub streams: usize,
    /// Appends per second to each stream.
    #[arg(long, default_value_t = 25.0)]
    pub rate: f64,
    /// Watchers of each chat (each on its own connection).
    #[arg(long, default_value_t = 10)]
    pub watchers: usize,
    /// Seconds of appending.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("streams", "streams"),
    col("appends", "appends"),
    col("appends_per_s", "appends/s"),
    col("append_p50_ms", "push p50 ms"),
    col("append_p99_ms", "push p99 ms"),
    col("ack_p99_ms", "ack p99 ms"),
    col("pushes_per_append", "pushes/append"),
    col("server_cpu_us_per_append", "server us/append"),
    col("events_per_stream", "events/stream"),
    col("lost", "lost"),
    col("texts_equal", "texts equal"),
    col("failed", "failed"),
];

/// Runs the scenario `args.run.runs` times and reports.
pub async fn run(args: StreamsArgs) -> anyhow::Result<Vec<Value>> {
    let clients = args.streams * (args.watchers + 1);
    anyhow::ensure!(args.streams > 0 && args.watchers > 0, "--streams and --watchers above 0");
    anyhow::ensure!(clients <= MAX_CLIENTS, "at most {MAX_CLIENTS} clients in one process ({clients} asked)");
    anyhow::ensure!(args.rate > 0.0 && args.rate.is_finite() && args.seconds > 0, "--rate and --seconds above 0");
    let longest = (args.rate * args.seconds as f64).ceil() as usize * CHUNK_MAX_BYTES;
    anyhow::ensure!(longest < BODY_LIMIT, "--rate x --seconds appends would pass the server's body limit");
    let runs = report::repeat(&args.run, |r| run_once(&args, r)).await?;
    report::emit("streams", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

async fn run_once(args: &StreamsArgs, run: u32) -> anyhow::Result<Value> {
    // Appends come back to back on each streamer: the per-connection request rate is raised, as for `sends`.
    Server::measured(&args.target, &server::raised_limits(), async |server| measure(args, run, server).await).await
}

/// Append `k`'s text: short, with characters of one, two and four UTF-8 bytes (`é` one UTF-16 unit,
/// `😀` two), so that `at` is counted in UTF-16 units, not bytes or characters.
fn chunk(k: usize) -> String {
    if k.is_multiple_of(10) { format!("t{k}😀 ") } else { format!("t{k}é ") }
}

/// One stream's appends as its streamer sent them: where each ends (UTF-16) and when its request left.
#[derive(Default)]
struct Sent {
    appends: Vec<(u64, Instant)>,
}

/// What one watcher saw of its stream.
struct Seen {
    text: String,
    pushes: u64,
    /// Appends covered by a push (the first `covered` of the streamer's), before `done`.
    covered: usize,
    /// A push whose `at` was not the text's length (a gap or a repeat).
    out_of_place: u64,
    /// The text of the stream's final `edit`, once seen.
    edited: Option<String>,
    latencies: Latencies,
    dropped: bool,
}

/// The `{"text": ...}` part of a body.
#[derive(Deserialize)]
struct TextBody {
    text: String,
}

/// The body of an `edit` event: `{"target", "body"}`.
#[derive(Deserialize)]
struct EditBody {
    body: TextBody,
}

async fn measure(args: &StreamsArgs, run: u32, server: &Server) -> anyhow::Result<Value> {
    let prefix = fresh_chat("streams", run);
    let chat_of = |c: usize| format!("{prefix}-{c:05}");
    let (n, w) = (args.streams, args.watchers);
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let offset = run * sources_for(n * (w + 1));
    let (streamers, mut failures) = fleet::open_clients(server, &signer, n, offset, |c| format!("s{c:05}")).await;
    anyhow::ensure!(streamers.len() == n, "streamers failed: {failures:?}");
    let (watchers, f) =
        fleet::open_clients(server, &signer, n * w, offset + sources_for(n), |i| format!("w{:05}x{}", i / w, i % w))
            .await;
    failures.merge(&f);
    anyhow::ensure!(watchers.len() == n * w, "watchers failed: {failures:?}");

    // Everyone joins their chat; watchers watch it from now on.
    let streamers = for_each(streamers.into_iter().enumerate().collect(), &mut failures, |(c, mut s)| {
        let chat = chat_of(c);
        async move {
            bounded(s.join(&chat)).await?;
            Ok((c, s))
        }
    })
    .await;
    let watchers = for_each(watchers.into_iter().enumerate().collect(), &mut failures, |(i, mut s)| {
        let chat = chat_of(i / w);
        async move {
            bounded(s.join(&chat)).await?;
            bounded(s.watch(&chat)).await?;
            Ok((i / w, s))
        }
    })
    .await;
    anyhow::ensure!(streamers.len() == n && watchers.len() == n * w, "joins failed: {failures:?}");

    // Each stream starts empty; its seq is what the watchers' pushes name.
    let body = RawValue::from_string(r#"{"text":""}"#.into())?;
    let opened = for_each(streamers, &mut failures, |(c, mut s)| {
        let (chat, body) = (chat_of(c), body.clone());
        async move {
            let seq = bounded(s.send_stream(&chat, &body)).await?.seq;
            Ok((c, s, seq))
        }
    })
    .await;
    anyhow::ensure!(opened.len() == n, "opening the streams failed: {failures:?}");
    let targets: Vec<u64> = opened.iter().map(|(_, _, seq)| *seq).collect();
    let sent: Vec<Arc<Mutex<Sent>>> = (0..n).map(|_| Arc::default()).collect();

    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, done_rx) = watch::channel(false);
    let readers: Vec<_> = watchers
        .into_iter()
        .map(|(c, client)| {
            let (sent, target) = (sent[c].clone(), targets[c]);
            let (stop, done) = (stop_rx.clone(), done_rx.clone());
            tokio::spawn(watch_stream(client, target, sent, stop, done))
        })
        .collect();

    let cpu0 = cpu_s(server.pid).unwrap_or(0.0);
    let began = Instant::now();
    let window = Duration::from_secs(args.seconds);
    let every = Duration::from_secs_f64(1.0 / args.rate);
    let appending: Vec<_> = opened
        .into_iter()
        .map(|(c, mut s, target)| {
            let (chat, sent) = (chat_of(c), sent[c].clone());
            tokio::spawn(async move {
                let mut pace = tokio::time::interval(every);
                pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                // Streams start spread over one interval, not all at once.
                tokio::time::sleep(every.mul_f64(c as f64 / n as f64)).await;
                let (mut acks, mut failures, mut at) = (Latencies::default(), Failures::default(), 0u64);
                let mut k = 0;
                while began.elapsed() < window {
                    pace.tick().await;
                    let text = chunk(k);
                    k += 1;
                    at += utf16_len(&text);
                    let t0 = Instant::now();
                    sent.lock().expect("sent lock").appends.push((at, t0));
                    match bounded(s.append(&chat, target, &text, false)).await {
                        Ok(()) => acks.record(t0.elapsed()),
                        Err(f) => {
                            failures.add_failure(&f);
                            // Not acked: not counted as sent (its text may or may not be stored).
                            sent.lock().expect("sent lock").appends.pop();
                            break;
                        }
                    }
                }
                (c, s, target, acks, failures)
            })
        })
        .collect();
    let mut acks = Latencies::default();
    let mut streamers = Vec::new();
    for t in appending {
        let (c, s, target, a, f) = t.await?;
        acks.merge(&a);
        failures.merge(&f);
        streamers.push((c, s, target));
    }
    let append_s = began.elapsed().as_secs_f64();
    tokio::time::sleep(SETTLE).await;
    let cpu = cpu_s(server.pid).unwrap_or(0.0) - cpu0;
    // What the watchers have by now is what was pushed before `done`.
    let _ = stop_tx.send(true);
    tokio::task::yield_now().await;
    let appends: usize = sent.iter().map(|s| s.lock().expect("sent lock").appends.len()).sum();

    // End every stream; each watcher then waits for its `edit`, and the stored view is read back.
    let _ = done_tx.send(true);
    let stored = for_each(streamers, &mut failures, |(c, mut s, target)| {
        let chat = chat_of(c);
        async move {
            bounded(s.append(&chat, target, "", true)).await?;
            let page = bounded(s.fetch(&chat, target - 1, 100)).await?;
            s.close().await;
            let view = page.events.iter().find(|e| e.seq == target);
            let text = view.and_then(|e| serde_json::from_str::<TextBody>(e.body.get()).ok()).map(|b| b.text);
            let done = view.is_some_and(|e| e.stream == Some(StreamState::Done));
            Ok((c, page.events.len() as u64, text, done))
        }
    })
    .await;

    let mut latencies = Latencies::default();
    let (mut lost, mut pushes, mut out_of_place, mut dropped, mut differ) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut first_difference = None;
    let mut texts: Vec<Option<String>> = vec![None; n];
    for (c, _, text, _) in &stored {
        texts[*c].clone_from(text);
    }
    for (i, r) in readers.into_iter().enumerate() {
        let seen = r.await?;
        let c = i / w;
        let acked = sent[c].lock().expect("sent lock").appends.len();
        lost += acked.saturating_sub(seen.covered) as u64;
        pushes += seen.pushes;
        out_of_place += seen.out_of_place;
        dropped += u64::from(seen.dropped);
        latencies.merge(&seen.latencies);
        let same = texts[c].as_ref().is_some_and(|t| *t == seen.text && seen.edited.as_ref() == Some(t));
        if !same {
            differ += 1;
            if first_difference.is_none() {
                first_difference = Some(format!(
                    "stream {c}: watcher built {} bytes, edit {:?} bytes, stored {:?} bytes",
                    seen.text.len(),
                    seen.edited.as_ref().map(String::len),
                    texts[c].as_ref().map(String::len)
                ));
            }
        }
    }
    let events: Vec<u64> = stored.iter().map(|(_, e, _, _)| *e).collect();
    let not_done = stored.iter().filter(|(_, _, _, done)| !done).count();
    let lat = latencies.summary();
    let ack = acks.summary();
    let a = appends as f64;
    Ok(json!({
        "streams": n,
        "watchers": w,
        "appends": appends,
        "appends_per_s": a / append_s,
        "append_p50_ms": lat.p50_ms,
        "append_p99_ms": lat.p99_ms,
        "append_p999_ms": lat.p999_ms,
        "append_max_ms": lat.max_ms,
        "ack_p50_ms": ack.p50_ms,
        "ack_p99_ms": ack.p99_ms,
        "pushes": pushes,
        "pushes_per_append": pushes as f64 / (a * w as f64).max(1.0),
        "server_cpu_s": cpu,
        "server_cpu_us_per_append": cpu * 1e6 / a.max(1.0),
        "server_rss_mib": server.rss_kib().unwrap_or(0) as f64 / 1024.0,
        "events_per_stream": if events.iter().all(|e| *e == 2) { json!(2) } else { json!(events.iter().max()) },
        "streams_checked": stored.len(),
        "not_done": not_done,
        "lost": lost,
        "out_of_place": out_of_place,
        "texts_equal": differ == 0 && stored.len() == n,
        "texts_differ": differ,
        "first_difference": first_difference,
        "dropped": dropped,
        "failed": failures.total,
        "failures": failures,
    }))
}

/// One watcher: applies its stream's `append` pushes in `at` order and times each append they
/// cover, until `stop`; then reads on to the stream's final `edit` once `done` is set.
async fn watch_stream(
    mut client: Client,
    target: u64,
    sent: Arc<Mutex<Sent>>,
    mut stop: watch::Receiver<bool>,
    mut done: watch::Receiver<bool>,
) -> Seen {
    let mut seen = Seen {
        text: String::new(),
        pushes: 0,
        covered: 0,
        out_of_place: 0,
        edited: None,
        latencies: Latencies::default(),
        dropped: false,
    };
    let mut len = 0u64;
    let mut stopped = false;
    let deadline = async {
        let _ = done.wait_for(|d| *d).await;
        tokio::time::sleep(EDIT_WAIT).await;
    };
    tokio::pin!(deadline);
    loop {
        let frame = tokio::select! {
            _ = stop.wait_for(|s| *s), if !stopped => { stopped = true; continue }
            _ = &mut deadline => break,
            frame = client.next_frame() => frame,
        };
        let f = match frame {
            Ok(f) => f,
            Err(ClientError::BadFrame(_)) => continue,
            Err(_) => {
                seen.dropped = true;
                break;
            }
        };
        match f.ev.as_deref() {
            Some("append") if f.target == Some(target) => {
                let now = Instant::now();
                let (Some(at), Some(text)) = (f.at, f.text) else { continue };
                seen.pushes += 1;
                if at != len {
                    seen.out_of_place += 1;
                    continue;
                }
                len += utf16_len(&text);
                seen.text.push_str(&text);
                if stopped {
                    continue;
                }
                let sent = sent.lock().expect("sent lock");
                while let Some((_, t0)) = sent.appends.get(seen.covered).filter(|(end, _)| *end <= len) {
                    seen.latencies.record(now.saturating_duration_since(*t0));
                    seen.covered += 1;
                }
            }
            Some("event") if f.kind == Some(EventType::Edit) => {
                // The edit's body is not in `Incoming`: fetch it once from the push's stored view.
                seen.edited = edit_text(&mut client, f.chat.as_deref(), f.seq).await;
                break;
            }
            _ => {}
        }
    }
    client.close().await;
    seen
}

/// The text of `edit` event `seq` of `chat`, fetched back (the push's body is not kept by the client).
async fn edit_text(client: &mut Client, chat: Option<&str>, seq: Option<u64>) -> Option<String> {
    let (chat, seq) = (chat?, seq?);
    let page = bounded(client.fetch(chat, seq - 1, 1)).await.ok()?;
    let edit = page.events.into_iter().find(|e| e.seq == seq)?;
    serde_json::from_str::<EditBody>(edit.body.get()).ok().map(|b| b.body.text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_count_utf16_units_not_bytes() {
        assert_eq!(chunk(0), "t0😀 ");
        assert_eq!(utf16_len(&chunk(0)), 5);
        assert_eq!(chunk(3), "t3é ");
        assert_eq!(utf16_len(&chunk(3)), 4);
        assert!((0..100_000).all(|k| chunk(k).len() <= CHUNK_MAX_BYTES));
    }
}
