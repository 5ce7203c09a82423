//! The quiet chat beside a flood: one sender publishes into a second chat at
//! a low fixed rate while a watcher of that chat measures publish-to-receive
//! latency (both in this process: one clock). The flood marks which of its
//! steps is on ([`Quiet::begin`], [`Quiet::end`]); each message carries that
//! step, so its latency counts under the step it was sent in. herald's sender
//! `send`s durably (and waits for each ack); Socket.IO's emits `pub` with an
//! ack; Sockudo's sends a client event on a private channel (no ack).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::{REQUEST_TIMEOUT, source_addr};
use crate::conn::{Conn, Dial, Received};
use crate::latency::Latencies;
use crate::peer::Peer;

/// Marks messages sent between steps (not counted).
const NO_STEP: i64 = -1;
/// After a step, its last quiet messages get this long to arrive.
const GRACE: Duration = Duration::from_secs(2);

/// What each quiet message carries: its send time (us since the probe's base) and step.
#[derive(Deserialize)]
struct Stamp {
    t: u64,
    s: i64,
}

/// Counts shared by the sender and the watcher.
struct Counts {
    base: Instant,
    step: AtomicI64,
    sent: Vec<AtomicU64>,
    received: Vec<AtomicU64>,
    latencies: Mutex<Vec<Latencies>>,
    error: Mutex<Option<String>>,
}

impl Counts {
    fn fail(&self, e: String) {
        self.error.lock().expect("lock").get_or_insert(e);
    }
}

/// A running quiet-chat probe.
pub struct Quiet {
    counts: Arc<Counts>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Quiet {
    /// Opens the sender and the watcher of `chat` (from the source at `source_offset`)
    /// and starts publishing at `rate` per second; `steps` is the most steps it will count.
    pub async fn start(dial: &Dial, chat: &str, rate: f64, steps: usize, source_offset: u32) -> anyhow::Result<Quiet> {
        let room = dial.peer.room(chat, true);
        let mut watcher = Conn::open(dial, "quiet-watcher", source_addr(source_offset, 0)).await?;
        watcher.enter(&room).await.context("the quiet watcher")?;
        let mut sender = Conn::open(dial, "quiet-sender", source_addr(source_offset, 1)).await?;
        match dial.peer {
            // herald: only members send; Sockudo: a client event goes only to a channel its sender is in.
            Peer::Herald => sender.join_as(&room, "quiet-sender").await.map(|_| ()),
            Peer::Sockudo => sender.enter(&room).await,
            Peer::Socketio | Peer::Nats => Ok(()),
        }
        .context("the quiet sender")?;
        let counts = Arc::new(Counts {
            base: Instant::now(),
            step: AtomicI64::new(NO_STEP),
            sent: (0..steps).map(|_| AtomicU64::new(0)).collect(),
            received: (0..steps).map(|_| AtomicU64::new(0)).collect(),
            latencies: Mutex::new((0..steps).map(|_| Latencies::default()).collect()),
            error: Mutex::new(None),
        });
        let (stop, stop_rx) = watch::channel(false);
        let tasks = vec![
            tokio::spawn(send_loop(sender, room, rate, counts.clone(), stop_rx.clone())),
            tokio::spawn(watch_loop(watcher, counts.clone(), stop_rx)),
        ];
        Ok(Quiet { counts, stop, tasks })
    }

    /// Messages sent from now on count under `step`.
    pub fn begin(&self, step: usize) {
        self.counts.step.store(step as i64, Ordering::Relaxed);
    }

    /// Ends `step`: waits (bounded) for its messages, then gives its figures.
    pub async fn end(&self, step: usize) -> Value {
        let c = &self.counts;
        c.step.store(NO_STEP, Ordering::Relaxed);
        let deadline = Instant::now() + GRACE;
        while c.received[step].load(Ordering::Relaxed) < c.sent[step].load(Ordering::Relaxed)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let (sent, received) = (c.sent[step].load(Ordering::Relaxed), c.received[step].load(Ordering::Relaxed));
        let p = c.latencies.lock().expect("lock")[step].summary();
        json!({
            "sent": sent,
            "received": received,
            "lost": sent.saturating_sub(received),
            "p50_ms": (received > 0).then_some(p.p50_ms),
            "p99_ms": (received > 0).then_some(p.p99_ms),
            "max_ms": (received > 0).then_some(p.max_ms),
            "error": c.error.lock().expect("lock").clone(),
        })
    }

    /// Stops both clients (bounded).
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

async fn send_loop(mut conn: Conn, room: String, rate: f64, c: Arc<Counts>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate.max(0.1)));
    // A late ack delays the next send rather than bursting: the rate stays low.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            _ = tick.tick() => {}
        }
        let step = c.step.load(Ordering::Relaxed);
        if let Some(n) = usize::try_from(step).ok().and_then(|s| c.sent.get(s)) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        let payload = format!(r#"{{"t":{},"s":{step}}}"#, c.base.elapsed().as_micros());
        match tokio::time::timeout(REQUEST_TIMEOUT, conn.publish(&room, payload)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                c.fail(format!("quiet sender: {e}"));
                break;
            }
            Err(_) => {
                c.fail(format!("quiet sender: no ack in {REQUEST_TIMEOUT:?}"));
                break;
            }
        }
    }
    conn.close().await;
}

async fn watch_loop(mut conn: Conn, c: Arc<Counts>, mut stop: watch::Receiver<bool>) {
    loop {
        let got = tokio::select! {
            _ = stop.wait_for(|s| *s) => break,
            r = conn.next_received::<Stamp>() => r,
        };
        match got {
            Ok(Received::Msg { body, .. }) => {
                let Some(step) = usize::try_from(body.s).ok().filter(|s| *s < c.received.len()) else { continue };
                let now = c.base.elapsed().as_micros() as u64;
                c.latencies.lock().expect("lock")[step].record(Duration::from_micros(now.saturating_sub(body.t)));
                c.received[step].fetch_add(1, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(e) => {
                c.fail(format!("quiet watcher: {e}"));
                break;
            }
        }
    }
    conn.close().await;
}
