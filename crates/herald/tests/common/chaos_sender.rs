//! A chaos sender: a user who sends as the protocol says a client should,
//! through every fault: the same `client_id` again after a refusal, a
//! timeout or a lost connection, until the send is acknowledged; now and then
//! once more to check that it answers the first seq. Busy senders send to
//! their workspace's busy chats until the load stops; a quiet chat's sender
//! sends bursts, each followed by a silence in which its last event must
//! reach every watcher (the bouncer aims faults at those bursts through
//! [`QuietCtl`]). Every send goes in the [`Ledger`] the auditor reads.
//!
//! Not here: the connection (`chaos_client.rs`), the faults (`chaos_faults.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::RngExt;
use rand::rngs::StdRng;
use serde_json::{Value, json};

use super::client::{Conn, End, backoff, pick_node, retry_after};
use super::run::Phase;
use super::watcher::WatcherView;
use super::{CONVERGE, QUIET_ROOM, QUIET_SILENCE, REPLY_WAIT, Run};

/// Every send of the run, for the audit.
#[derive(Default)]
pub struct Ledger {
    /// client_id to chat, for every send tried.
    pub tried: HashMap<String, usize>,
    /// client_id to (chat, seq, when acknowledged).
    pub acked: HashMap<String, (usize, u64, Instant)>,
    /// Sends never acknowledged (given up when the run ended).
    pub abandoned: HashSet<String>,
    /// Sends acknowledged on a resend: client_id to when (ms since the epoch) the last attempt went out.
    pub last_attempt_ms: HashMap<String, u64>,
    pub resends: u64,
    pub idempotent_checks: u64,
    pub throttled: u64,
    pub unavailable: u64,
    pub timeouts: u64,
    pub disconnects: u64,
}

/// A sender's task: who it is, where it is connected, and the ledger it records in.
pub struct Sender {
    run: Arc<Run>,
    ledger: Arc<Mutex<Ledger>>,
    name: String,
    ws: &'static str,
    token: String,
    rng: StdRng,
    conn: Option<Conn>,
    node: usize,
    /// The node it is connected to now (`usize::MAX`: none), for the bouncer's aim.
    at_node: Arc<AtomicUsize>,
    /// When the latest resend of the send in progress went out (ms since the epoch).
    resent_at_ms: Option<u64>,
}

/// A quiet chat's sender as the bouncer sees it: whether it waits for its
/// next burst, and where it is connected, so that a fault can be aimed at a
/// burst in flight or dealt right before one.
pub struct QuietCtl {
    /// The quiet chat (the run's index) and its shard.
    pub chat: usize,
    pub shard: usize,
    /// Whether the sender waits for its next burst (the bouncer takes it by setting it false).
    pub idle: AtomicBool,
    /// Starts the next burst.
    pub go: tokio::sync::Notify,
    /// Notified (to whoever waits) as the burst's last send goes out.
    pub last: tokio::sync::Notify,
    /// How long the quickest of the burst's sends before the last took (µs): the bouncer aims inside it.
    pub rtt_us: AtomicUsize,
    /// The node its sender is connected to now (`usize::MAX`: none).
    pub node: Arc<AtomicUsize>,
}

impl QuietCtl {
    /// The control of the run's quiet chat `chat` on `shard`, whose sender's node is `node`.
    pub fn new(chat: usize, shard: usize, node: Arc<AtomicUsize>) -> QuietCtl {
        QuietCtl {
            chat,
            shard,
            idle: AtomicBool::new(false),
            go: tokio::sync::Notify::new(),
            last: tokio::sync::Notify::new(),
            rtt_us: AtomicUsize::new(usize::MAX),
            node,
        }
    }
}

impl Sender {
    /// A sender `name` of workspace `ws`, connecting first to `node`.
    pub fn new(
        run: Arc<Run>,
        ledger: Arc<Mutex<Ledger>>,
        name: String,
        ws: &'static str,
        token: String,
        node: usize,
        rng: StdRng,
    ) -> Sender {
        let at_node = Arc::new(AtomicUsize::new(usize::MAX));
        Sender { run, ledger, name, ws, token, rng, conn: None, node, at_node, resent_at_ms: None }
    }

    /// The node it is connected to now (`usize::MAX`: none), as it changes.
    pub fn at_node(&self) -> Arc<AtomicUsize> {
        self.at_node.clone()
    }

    /// Sends until acknowledged, resending with the same `client_id` through
    /// refusals, timeouts and reconnects; `None` once the run gives it up.
    async fn send(&mut self, k: usize, client_id: &str, body: &Value) -> Option<u64> {
        let chat = self.run.chats[k].name.clone();
        let mut attempt = 0u32;
        let mut sent = false;
        self.resent_at_ms = None;
        loop {
            if self.run.gave_up() || self.run.done() {
                return None;
            }
            if self.conn.is_none() {
                match Conn::open(&self.run, self.node, self.ws, &self.token).await {
                    Ok(c) => {
                        self.conn = Some(c);
                        self.at_node.store(self.node, Ordering::SeqCst);
                        attempt = 0;
                    }
                    Err(e) => {
                        attempt += 1;
                        self.run.note(format!("{}: cannot connect to node-{}: {e}", self.name, self.node));
                        self.run.sleep(backoff(&mut self.rng, attempt)).await;
                        self.node = pick_node(&self.run, &mut self.rng, self.ws, Some(self.node)).await;
                    }
                }
                continue;
            }
            let conn = self.conn.as_mut().expect("connected above");
            if sent {
                self.ledger.lock().unwrap().resends += 1;
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
                self.resent_at_ms = Some(now.as_millis() as u64);
            }
            sent = true;
            let req = json!({"op": "send", "chat": chat, "body": body, "client_id": client_id});
            match conn.request(req, REPLY_WAIT).await {
                Ok(r) => {
                    if let Some(seq) = r["ok"]["seq"].as_u64() {
                        return Some(seq);
                    }
                    let err = &r["err"];
                    match err["code"].as_str() {
                        Some("throttled") => self.ledger.lock().unwrap().throttled += 1,
                        Some("unavailable") => {
                            self.ledger.lock().unwrap().unavailable += 1;
                            self.run.unavailable.lock().unwrap().push((k, Instant::now()));
                        }
                        _ => {
                            self.run.fail(format!(
                                "{} on node-{}: send {client_id} to {} refused: {r}",
                                self.name,
                                conn.node,
                                self.run.chat_label(k)
                            ));
                            return None;
                        }
                    }
                    let wait = retry_after(&mut self.rng, err);
                    self.run.note(format!(
                        "{} on node-{}: send {client_id} to {} refused ({}, retry_after_ms {}); again in {} ms",
                        self.name,
                        conn.node,
                        self.run.chat_label(k),
                        err["code"],
                        err["retry_after_ms"],
                        wait.as_millis()
                    ));
                    self.run.sleep(wait).await;
                }
                Err(end) => {
                    let node = conn.node;
                    self.conn = None;
                    self.at_node.store(usize::MAX, Ordering::SeqCst);
                    let wait = match &end {
                        End::Timeout(_) => {
                            self.ledger.lock().unwrap().timeouts += 1;
                            backoff(&mut self.rng, 0)
                        }
                        End::Closed(_, _, Some(ms)) => Duration::from_millis(*ms),
                        _ => {
                            self.ledger.lock().unwrap().disconnects += 1;
                            backoff(&mut self.rng, 0)
                        }
                    };
                    self.run.note(format!(
                        "{}: lost node-{node} sending {client_id} ({end}); resending in {} ms",
                        self.name,
                        wait.as_millis()
                    ));
                    self.run.sleep(wait).await;
                    let avoid = matches!(end, End::Broken(_) | End::Timeout(_)).then_some(node);
                    self.node = pick_node(&self.run, &mut self.rng, self.ws, avoid).await;
                }
            }
        }
    }

    /// One send, recorded in the ledger; now and then sent again with the
    /// same `client_id` to check that it answers the first seq.
    async fn send_one(&mut self, k: usize, i: u64) -> Option<u64> {
        let client_id = format!("{}-{i}", self.name);
        let pad = "x".repeat(self.rng.random_range(0..48));
        let body = json!({"from": self.name, "i": i, "pad": pad});
        self.ledger.lock().unwrap().tried.insert(client_id.clone(), k);
        let Some(seq) = self.send(k, &client_id, &body).await else {
            self.ledger.lock().unwrap().abandoned.insert(client_id);
            return None;
        };
        {
            let mut l = self.ledger.lock().unwrap();
            l.acked.insert(client_id.clone(), (k, seq, Instant::now()));
            if let Some(ms) = self.resent_at_ms {
                l.last_attempt_ms.insert(client_id.clone(), ms);
            }
        }
        if self.rng.random_bool(0.03)
            && let Some(again) = self.send(k, &client_id, &body).await
        {
            self.ledger.lock().unwrap().idempotent_checks += 1;
            if again != seq {
                self.run.fail(format!(
                    "{}: {client_id} to {} was acknowledged with seq {seq}, and sent again with seq {again}",
                    self.name,
                    self.run.chat_label(k)
                ));
            }
        }
        Some(seq)
    }

    /// Sends to a random one of `chats` until the load stops.
    pub async fn busy(mut self, chats: Vec<usize>) {
        let mut i = 0u64;
        while self.run.phase() == Phase::Load {
            let k = chats[self.rng.random_range(0..chats.len())];
            self.send_one(k, i).await;
            i += 1;
            let pause = Duration::from_millis(self.rng.random_range(5..60));
            self.run.sleep(pause).await;
        }
    }

    /// Bursts of a few sends to its quiet chat, each followed by a silence in
    /// which the burst's last event must reach every watcher of the chat. A
    /// burst starts when the bouncer asks (to aim a fault at it) or, failing
    /// that, on a timer of its own.
    pub async fn quiet(
        mut self,
        ctl: Arc<QuietCtl>,
        watchers: Vec<Arc<Mutex<WatcherView>>>,
        lags: Arc<Mutex<Vec<Duration>>>,
    ) {
        let k = ctl.chat;
        let label = self.run.chat_label(k);
        let mut fallback = self.run.t0 + Duration::from_millis(self.rng.random_range(3_000..8_000));
        let mut i = 0u64;
        // Each burst needs its whole silence inside the load, where the faults go on.
        while Instant::now() + QUIET_ROOM < self.run.load_ends {
            ctl.idle.store(true, Ordering::SeqCst);
            let mut phase = self.run.phases();
            let mut aimed = tokio::select! {
                _ = ctl.go.notified() => true,
                _ = tokio::time::sleep_until(fallback.into()) => false,
                _ = phase.wait_for(|p| *p != Phase::Load) => return,
            };
            if !aimed && !ctl.idle.swap(false, Ordering::SeqCst) {
                // The bouncer took this burst just as the timer fired: its call is on the way.
                ctl.go.notified().await;
                aimed = true;
            }
            ctl.idle.store(false, Ordering::SeqCst);
            let n = self.rng.random_range(3..=8);
            let mut last_seq = 0;
            self.run
                .note(format!("{label}: burst of {n} sends{}", if aimed { " (a fault is aimed at it)" } else { "" }));
            ctl.rtt_us.store(usize::MAX, Ordering::SeqCst);
            for j in 0..n {
                if j + 1 == n {
                    ctl.last.notify_waiters();
                }
                let sent = Instant::now();
                match self.send_one(k, i).await {
                    Some(seq) => last_seq = last_seq.max(seq),
                    None => return,
                }
                ctl.rtt_us.fetch_min(sent.elapsed().as_micros() as usize, Ordering::SeqCst);
                i += 1;
            }
            let acked = Instant::now();
            let silence_ends = acked + QUIET_SILENCE;
            self.run.note(format!("{label}: burst acknowledged up to seq {last_seq}; silence"));
            match converge(&watchers, k, last_seq, acked + CONVERGE).await {
                Ok(slowest) => {
                    let late = late_watchers(&self.run, &watchers, k, last_seq, acked);
                    self.run.note(format!(
                        "{label}: every watcher holds seq {last_seq} {} ms after its ack{late}",
                        slowest.as_millis()
                    ));
                    lags.lock().unwrap().push(slowest);
                }
                Err(behind) => {
                    // How long it takes after all, if the silence brings it at all.
                    let late = converge(&watchers, k, last_seq, silence_ends).await;
                    let after = match late {
                        Ok(_) => format!("all held it {:.1} s after the last ack", acked.elapsed().as_secs_f64()),
                        Err(_) => format!("still not after {} s of silence", QUIET_SILENCE.as_secs()),
                    };
                    self.run.fail(format!(
                        "quiet chat {label}: 10 s after its last acknowledged send (seq {last_seq}, at t={:.2}s) watchers were behind: {behind}; {after}",
                        self.run.at(acked)
                    ));
                }
            }
            self.run.sleep(silence_ends.saturating_duration_since(Instant::now())).await;
            fallback = Instant::now() + Duration::from_millis(self.rng.random_range(2_000..8_000));
        }
    }
}

/// The watchers of chat `k` that got `seq` more than a second after `acked`, with when and where they are now.
pub fn late_watchers(run: &Run, watchers: &[Arc<Mutex<WatcherView>>], k: usize, seq: u64, acked: Instant) -> String {
    let acked_ms = acked.saturating_duration_since(run.t0).as_millis() as u64;
    let mut late = Vec::new();
    for w in watchers {
        let v = w.lock().unwrap();
        let Some(slot) = v.chats.iter().position(|&c| c == k) else { continue };
        if let Some(&(_, _, at)) = v.held[slot].get(seq as usize - 1)
            && at > acked_ms + 1_000
        {
            let node = v.node.map_or("none".to_string(), |n| format!("node-{n}"));
            late.push(format!("{} after {} ms (now on {node})", v.name, at - acked_ms));
        }
    }
    if late.is_empty() { String::new() } else { format!("; late: {}", late.join(", ")) }
}

/// Waits until every watcher of chat `k` holds `seq`, at most until `deadline`.
/// Ok: how long after the call the slowest got it. Err: who is behind, with what.
pub async fn converge(
    watchers: &[Arc<Mutex<WatcherView>>],
    k: usize,
    seq: u64,
    deadline: Instant,
) -> Result<Duration, String> {
    let start = Instant::now();
    loop {
        let mut behind = Vec::new();
        for w in watchers {
            let v = w.lock().unwrap();
            if let Some(slot) = v.chats.iter().position(|&c| c == k)
                && v.last(slot) < seq
            {
                let node = v.node.map_or("none".to_string(), |n| format!("node-{n}"));
                behind.push(format!("{} holds up to {} (connected to {node})", v.name, v.last(slot)));
            }
        }
        if behind.is_empty() {
            return Ok(start.elapsed());
        }
        if Instant::now() >= deadline {
            return Err(behind.join(", "));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
