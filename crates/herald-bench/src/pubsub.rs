//! One chat's publishers and watchers, for the scenarios that measure
//! delivery (`fanout`, `hot`): opening them on herald or a peer
//! ([`open_all`]), a watcher that counts each message under the step it was
//! published in and checks its order ([`watch_loop`]), and a phase of paced
//! publishing that waits for the deliveries and gives the step's figures
//! ([`phase`]). Each message carries its publish time, publisher, that
//! publisher's counter and its step; every client lives in this process, so
//! one clock times them. What a step's figures mean (pass, fail, the ladder)
//! is each scenario's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::client::{ClientError, Failure, REQUEST_TIMEOUT, source_addr, sources_for};
use crate::conn::{Conn, Received};
use crate::fleet::{self, Failures, Launch};
use crate::latency::Latencies;
use crate::pclient::PeerClient;
use crate::peer::{Peer, cpu_s};
use crate::target::Target;
use crate::token::Signer;

/// Most rate steps; the latency phase counts as one more.
pub const MAX_STEPS: usize = 32;
/// The step index that marks the latency phase's messages.
pub const LATENCY_STEP: usize = MAX_STEPS;
/// After a step's last publish, its deliveries get this long at most.
const GRACE: Duration = Duration::from_secs(3);

/// What travels in each message: publish time (us since the run's base), publisher, its counter, step.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Payload {
    #[serde(default)]
    t: u64,
    #[serde(default)]
    p: usize,
    #[serde(default)]
    n: u64,
    #[serde(default)]
    s: usize,
}

/// What every watcher adds to.
pub struct Shared {
    pub base: Instant,
    pub received: Vec<AtomicU64>,
    /// Per step, the latest arrival, in us since `base`.
    pub last_rx_us: Vec<AtomicU64>,
    pub out_of_order: AtomicU64,
    pub gaps: AtomicU64,
    pub notifies: AtomicU64,
    /// Messages a watcher fetched rather than had pushed.
    pub fetched: AtomicU64,
    pub errors: AtomicU64,
    pub first_error: Mutex<Option<String>>,
    pub latency: Mutex<Latencies>,
}

impl Shared {
    pub fn new() -> Arc<Shared> {
        Arc::new(Shared {
            base: Instant::now(),
            received: (0..=MAX_STEPS).map(|_| AtomicU64::new(0)).collect(),
            last_rx_us: (0..=MAX_STEPS).map(|_| AtomicU64::new(0)).collect(),
            out_of_order: AtomicU64::new(0),
            gaps: AtomicU64::new(0),
            notifies: AtomicU64::new(0),
            fetched: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            first_error: Mutex::new(None),
            latency: Mutex::new(Latencies::default()),
        })
    }

    pub fn now_us(&self) -> u64 {
        self.base.elapsed().as_micros() as u64
    }
    pub fn error(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.first_error.lock().expect("lock").get_or_insert(e);
    }
}

/// Who [`open_all`] opens.
pub struct Crowd<'a> {
    pub watchers: usize,
    pub publishers: usize,
    /// herald: the workspace the clients are users of.
    pub workspace: &'a str,
}

/// Opens the watchers (joined and watching) and the publishers of `chat` on
/// `server`; with `watch_server` (a second node), the watchers there.
pub async fn open_all(
    crowd: &Crowd<'_>,
    server: &Target,
    watch_server: Option<&Target>,
    chat: &str,
    offset: u32,
) -> anyhow::Result<(Vec<Conn>, Vec<Conn>, Failures)> {
    let (s, p) = (crowd.watchers, crowd.publishers);
    let addr = server.addr();
    let watch_addr = watch_server.unwrap_or(server).addr();
    let spec = |count| Launch { count, concurrency: 100, rate: None, deadline: Duration::from_secs(120) };
    match server {
        Target::Herald(srv) => {
            let signer = Signer::new(&srv.jwt_secret, crowd.workspace);
            // Everyone joins first and the watchers watch last, so no join is pushed to a watcher.
            let (mut all, mut failures) = match watch_server {
                Some(Target::Herald(wsrv)) => {
                    // Watchers on node B, publishers on node A; the same user names as on one node.
                    let (mut w, mut f) = fleet::open_clients(wsrv, &signer, s, offset, |i| format!("f{i}")).await;
                    let (mut pb, fp) =
                        fleet::open_clients(srv, &signer, p, offset + sources_for(s), |j| format!("f{}", s + j)).await;
                    f.merge(&fp);
                    w.append(&mut pb);
                    (w, f)
                }
                _ => fleet::open_clients(srv, &signer, s + p, offset, |i| format!("f{i}")).await,
            };
            anyhow::ensure!(
                all.len() == s + p,
                "only {} of {} clients connected: {:?}",
                all.len(),
                s + p,
                failures.first
            );
            let joined = futures_util::future::join_all(
                all.iter_mut().map(|c| async { tokio::time::timeout(REQUEST_TIMEOUT, c.join(chat)).await }),
            )
            .await;
            for j in joined {
                match j {
                    Ok(Ok(_)) => {}
                    Ok(Err(f)) => failures.add_failure(&f),
                    Err(_) => failures.add("timeout", || "no join ack".into()),
                }
            }
            anyhow::ensure!(failures.total == 0, "joins failed: {:?}", failures.first);
            let publishers: Vec<Conn> = all.drain(s..).map(Conn::Herald).collect();
            let watched = futures_util::future::join_all(
                all.iter_mut().map(|c| async { tokio::time::timeout(REQUEST_TIMEOUT, c.watch(chat)).await }),
            )
            .await;
            for w in watched {
                match w {
                    Ok(Ok(_)) => {}
                    Ok(Err(f)) => failures.add_failure(&f),
                    Err(_) => failures.add("timeout", || "no watch ack".into()),
                }
            }
            anyhow::ensure!(failures.total == 0, "watches failed: {:?}", failures.first);
            Ok((all.into_iter().map(Conn::Herald).collect(), publishers, failures))
        }
        Target::Peer(ps) => {
            let peer = ps.peer;
            let room: Arc<str> = peer.room(chat, true).into();
            let w = fleet::launch(spec(s), |i| {
                let room = room.clone();
                async move {
                    let mut c = PeerClient::connect(peer, watch_addr, source_addr(offset, i)).await?;
                    c.join(&room).await?;
                    Ok(c)
                }
            })
            .await;
            let mut failures = w.failures;
            let pubs = fleet::launch(spec(p), |j| {
                let room = room.clone();
                async move {
                    let mut c = PeerClient::connect(peer, addr, source_addr(offset, s + j)).await?;
                    // Sockudo: a client event goes only to a channel its sender subscribed to.
                    if peer == Peer::Sockudo {
                        c.join(&room).await?;
                    }
                    Ok(c)
                }
            })
            .await;
            failures.merge(&pubs.failures);
            Ok((
                w.ok.into_iter().map(|(_, c)| Conn::Peer(c)).collect(),
                pubs.ok.into_iter().map(|(_, c)| Conn::Peer(c)).collect(),
                failures,
            ))
        }
    }
}

/// One watcher: reads until told to stop, counting each message under its
/// step; with `fetch` (a chat name), fetches what a `notify` or a gap says it lacks.
pub async fn watch_loop(
    mut conn: Conn,
    publishers: usize,
    fetch: Option<Arc<str>>,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_n = vec![None::<u64>; publishers];
    let mut last_seq: Option<u64> = None;
    let mut latencies = Latencies::default();
    loop {
        let got: Result<Received<Payload>, ClientError> = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            r = conn.next_received::<Payload>() => r,
        };
        // With `fetch`: where the pushes fall short (a notify past what we
        // hold, or a gap before this push), fetch the rest first.
        let behind_to = match (&got, last_seq) {
            (Ok(Received::Notify { seq: Some(s) }), Some(last)) if *s > last => Some(*s),
            (Ok(Received::Msg { seq: Some(s), .. } | Received::Event { seq: s }), Some(last)) if *s > last + 1 => {
                Some(*s - 1)
            }
            _ => None,
        };
        if let (Some(chat), Some(upto), Some(last)) = (&fetch, behind_to, last_seq) {
            match conn.fetch_messages::<Payload>(chat, last, upto).await {
                Ok(msgs) => {
                    shared.fetched.fetch_add(msgs.len() as u64, Ordering::Relaxed);
                    for (_, m) in msgs {
                        record(m, &shared, &mut last_n, &mut latencies);
                    }
                    last_seq = Some(upto);
                }
                Err(e) => {
                    shared.error(e.to_string());
                    break;
                }
            }
        }
        match got {
            Ok(Received::Notify { .. }) => {
                shared.notifies.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Received::Msg { seq, body }) => {
                check_seq(seq, &mut last_seq, &shared);
                record(body, &shared, &mut last_n, &mut latencies);
            }
            Ok(Received::Event { seq }) => check_seq(Some(seq), &mut last_seq, &shared),
            Ok(Received::Other) => {}
            Err(e) => {
                shared.error(e.to_string());
                break;
            }
        }
    }
    shared.latency.lock().expect("lock").merge(&latencies);
    conn.close().await;
}

/// Counts one delivered message under its step, checks its publisher's order, and times it.
fn record(m: Payload, shared: &Shared, last_n: &mut [Option<u64>], latencies: &mut Latencies) {
    let now = shared.now_us();
    if m.s <= MAX_STEPS {
        shared.received[m.s].fetch_add(1, Ordering::Relaxed);
        shared.last_rx_us[m.s].fetch_max(now, Ordering::Relaxed);
    }
    if let Some(slot) = last_n.get_mut(m.p) {
        if slot.is_some_and(|l| m.n <= l) {
            shared.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        *slot = Some(m.n);
    }
    if m.s == LATENCY_STEP {
        latencies.record(Duration::from_micros(now.saturating_sub(m.t)));
    }
}

/// herald: a push's seq must be the last + 1 (a larger one is a gap, a smaller one out of order).
fn check_seq(seq: Option<u64>, last_seq: &mut Option<u64>, shared: &Shared) {
    let Some(seq) = seq else { return };
    if let Some(last) = *last_seq {
        if seq <= last {
            shared.out_of_order.fetch_add(1, Ordering::Relaxed);
        } else if seq > last + 1 {
            shared.gaps.fetch_add(1, Ordering::Relaxed);
        }
    }
    *last_seq = Some(seq);
}

/// Publishes at `msgs_per_s` (all publishers together) for `secs`, then waits
/// for the deliveries; returns the step's figures.
#[allow(clippy::too_many_arguments)]
pub async fn phase(
    pubs: &mut [Option<Conn>],
    counters: &mut [u64],
    chat: &str,
    step: usize,
    msgs_per_s: f64,
    secs: f64,
    watchers: u64,
    shared: &Arc<Shared>,
    pids: &[u32],
) -> Value {
    let cpu_all = || pids.iter().map(|p| cpu_s(*p).unwrap_or(0.0)).sum::<f64>();
    let cpu0 = cpu_all();
    let own0 = cpu_s(std::process::id()).unwrap_or(0.0);
    let started = Instant::now();
    let first_pub_us = shared.now_us();
    let until = started + Duration::from_secs_f64(secs);
    let per_pub = msgs_per_s / pubs.len() as f64;
    let n_pubs = pubs.len();
    let mut handles = Vec::new();
    for (j, slot) in pubs.iter_mut().enumerate() {
        let Some(conn) = slot.take() else { continue };
        let (chat, shared, start_n) = (chat.to_string(), shared.clone(), counters[j]);
        handles.push(tokio::spawn(async move {
            publish_loop(conn, j, n_pubs, start_n, &chat, step, per_pub, until, &shared).await
        }));
    }
    let mut published = 0u64;
    let mut errors = 0u64;
    let mut first_error = None;
    let mut last_pub = started;
    for (j, h) in handles.into_iter().enumerate() {
        match h.await {
            Ok((conn, sent, err, last)) => {
                counters[j] += sent;
                published += sent;
                last_pub = last_pub.max(last);
                if let Some(e) = err {
                    errors += 1;
                    first_error.get_or_insert(e);
                } else {
                    pubs[j] = Some(conn);
                }
            }
            Err(e) => {
                errors += 1;
                first_error.get_or_insert(e.to_string());
            }
        }
    }
    let expected = published * watchers;
    let deadline = last_pub + GRACE;
    while shared.received[step].load(Ordering::Relaxed) < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let delivered = shared.received[step].load(Ordering::Relaxed);
    let done = Instant::now();
    let cpu = cpu_all() - cpu0;
    let own = cpu_s(std::process::id()).unwrap_or(0.0) - own0;
    let last_rx_us = shared.last_rx_us[step].load(Ordering::Relaxed);
    let last_pub_us = (last_pub - shared.base).as_micros() as u64;
    let span_s = (last_rx_us.saturating_sub(first_pub_us)) as f64 / 1e6;
    let elapsed = (done - started).as_secs_f64();
    json!({
        "step": step,
        "msgs_per_s": msgs_per_s,
        "deliveries_offered_per_s": msgs_per_s * watchers as f64,
        "published": published,
        "achieved_msgs_per_s": published as f64 / secs,
        "expected": expected,
        "delivered": delivered,
        "lost": expected.saturating_sub(delivered),
        "delivered_per_s": if span_s > 0.0 { delivered as f64 / span_s } else { 0.0 },
        "drain_ms": if delivered > 0 { Some(last_rx_us.saturating_sub(last_pub_us) as f64 / 1000.0) } else { None },
        "server_cores": cpu / elapsed,
        "server_us_per_delivery": if delivered > 0 { cpu * 1e6 / delivered as f64 } else { 0.0 },
        "bench_cores": own / elapsed,
        "publish_errors": errors,
        "first_publish_error": first_error,
    })
}

/// One publisher's share of a phase: paced sends until `until`.
#[allow(clippy::too_many_arguments)]
async fn publish_loop(
    mut conn: Conn,
    p: usize,
    publishers: usize,
    start_n: u64,
    chat: &str,
    step: usize,
    rate: f64,
    until: Instant,
    shared: &Shared,
) -> (Conn, u64, Option<String>, Instant) {
    let period = Duration::from_secs_f64(1.0 / rate.max(0.01));
    // Publishers take turns evenly over the period rather than all at once.
    let first = tokio::time::Instant::now() + period.mul_f64(p as f64 / publishers as f64);
    let mut tick = tokio::time::interval_at(first, period);
    // A publisher that falls behind does not burst to catch up: the achieved rate shows it.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u64;
    let mut last = Instant::now();
    loop {
        tick.tick().await;
        if Instant::now() >= until {
            break;
        }
        let payload = format!(r#"{{"t":{},"p":{p},"n":{},"s":{step}}}"#, shared.now_us(), start_n + sent + 1);
        let r: Result<(), Failure> = match tokio::time::timeout(REQUEST_TIMEOUT, conn.publish(chat, payload)).await {
            Ok(r) => r,
            Err(_) => return (conn, sent, Some("no publish ack in time".into()), last),
        };
        if let Err(e) = r {
            return (conn, sent, Some(e.to_string()), last);
        }
        sent += 1;
        last = Instant::now();
    }
    (conn, sent, None, last)
}
