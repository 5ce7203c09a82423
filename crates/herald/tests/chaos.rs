//! Chaos, with real servers: three nats-servers, two PostgreSQL shards and
//! three herald binaries, while a seeded bouncer kills a node with SIGKILL,
//! restarts a NATS server or stops a PostgreSQL shard every 1 to 3 seconds,
//! and clients behave as the protocol says: patient on `throttled` and
//! `unavailable`, reconnecting and resuming each chat with `watch` `after`
//! the last seq held, fetching on a gap and on `notify`, and resending with
//! the same `client_id` until the send is acknowledged.
//!
//! The auditor then checks what a user would see:
//! - every acknowledged send is stored exactly once, at the seq it was acknowledged with;
//! - each chat's seqs are 1, 2, 3, ... without a gap;
//! - every watcher holds every event of its chats, in order, as stored, and was never pushed a seq twice;
//! - within 10 s after the load stops, every watcher holds its chats' latest seq, through pushes and the
//!   fetches the protocol prescribes (a gap, a `notify`), never an unconditional final fetch;
//! - a quiet chat (a burst of sends, then silence while the faults go on) reaches all its watchers within
//!   10 s of its last acknowledged send: a lost hint must not wait for a next event that never comes.
//!
//! Many faults are aimed at a quiet chat's burst: they strike the node, the NATS server or the shard its
//! last send goes through while that send is in flight, or the burst starts as a fault is mended.
//!
//! `HERALD_CHAOS_SEED` replays a seed (the bouncer's choices and timings and the clients' choices; real
//! timing stays the machine's). `HERALD_CHAOS_SECS` sets the length of the load (default 30 s). The run
//! prints its seed and figures; `cargo test -p herald --test chaos -- --include-ignored --nocapture` shows them when it
//! passes. A failed run keeps the node logs and a timeline (`HERALD_CHAOS_KEEP=1`: a passed one too).
//! docs/reliability.md has the long run's figures.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::chaos::Cell;
use common::try_http;
use futures_util::{SinkExt, StreamExt};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

const NODES: usize = 3;
const WORKSPACES: [&str; 2] = ["w0", "w1"];
/// Chats with steady traffic, per workspace.
const BUSY_CHATS: usize = 3;
/// Quiet chats per workspace: bursts of sends, then silence.
const QUIET_CHATS: usize = 2;
/// Watchers per workspace; each watches every chat of its workspace.
const WATCHERS: usize = 4;
/// Senders per workspace; each sends to the busy chats of its workspace.
const SENDERS: usize = 3;
/// The auditor's bound on convergence.
const CONVERGE: Duration = Duration::from_secs(10);
/// A quiet chat's silence after each burst: longer than [`CONVERGE`], so
/// nothing but the protocol can bring its last events to its watchers.
const QUIET_SILENCE: Duration = Duration::from_secs(12);
/// A burst starts only this long before the load stops, or sooner: room for the burst and its silence.
const QUIET_ROOM: Duration = Duration::from_secs(15);
/// How long a client waits for a reply before it takes the connection for dead.
const REPLY_WAIT: Duration = Duration::from_secs(10);
/// After the load stops, senders keep resending a pending send this long, then give it up.
const SEND_GIVE_UP: Duration = Duration::from_secs(10);
/// Events per `fetch` (the protocol's most).
const FETCH_LIMIT: u64 = 500;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Senders send, the bouncer deals faults.
    Load,
    /// Senders finish what they have in flight; watchers run on.
    Drain,
    /// Everyone stops.
    Done,
}

/// One chat of the run.
struct ChatSpec {
    ws: usize,
    name: String,
    quiet: bool,
    shard: usize,
}

/// What the whole run shares: the cell, the phase, the timeline and the failures.
struct Run {
    t0: Instant,
    load_ends: Instant,
    cell: Arc<Cell>,
    chats: Vec<ChatSpec>,
    phase: watch::Receiver<Phase>,
    /// Set when the load stops: pending sends are given up after it.
    give_up: Mutex<Option<Instant>>,
    timeline: Mutex<Vec<(Duration, String)>>,
    /// Every `unavailable` a client got: (chat, when).
    unavailable: Mutex<Vec<(usize, Instant)>>,
    /// Every shard outage: (shard, stopped, started again).
    shard_outages: Mutex<Vec<(usize, Instant, Instant)>>,
    failures: Mutex<Vec<String>>,
}

impl Run {
    fn secs(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn at(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.t0).as_secs_f64()
    }

    fn note(&self, what: String) {
        self.timeline.lock().unwrap().push((self.t0.elapsed(), what));
    }

    fn fail(&self, what: String) {
        let line = format!("t={:.2}s {what}", self.secs());
        self.note(format!("FAILURE {what}"));
        self.failures.lock().unwrap().push(line);
    }

    fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    fn done(&self) -> bool {
        self.phase() == Phase::Done
    }

    fn gave_up(&self) -> bool {
        self.give_up.lock().unwrap().is_some_and(|t| Instant::now() >= t)
    }

    fn chat_label(&self, k: usize) -> String {
        let c = &self.chats[k];
        format!("{}/{}", WORKSPACES[c.ws], c.name)
    }

    /// Sleeps `d`, or less if the run is done meanwhile.
    async fn sleep(&self, d: Duration) {
        let mut phase = self.phase.clone();
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = phase.wait_for(|p| *p == Phase::Done) => {}
        }
    }
}

/// Now as UTC `YYYY-MM-DDTHH:MM:SS.mmmZ`, the form of the nodes' log lines, so the timeline reads against them.
fn utc_now() -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let (secs, ms) = (now.as_secs() as i64, now.subsec_millis());
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{ms:03}Z", rest / 3_600, rest / 60 % 60, rest % 60)
}

/// A stable fingerprint of an event as stored: type, user, client_id, body.
fn ident(e: &Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    e["type"].to_string().hash(&mut h);
    e["user"].to_string().hash(&mut h);
    e["client_id"].to_string().hash(&mut h);
    e["body"].to_string().hash(&mut h);
    h.finish()
}

fn seq_of(e: &Value) -> Option<u64> {
    e["seq"].as_u64()
}

/// Full jitter: a random wait below `min(cap, base * 2^attempt)`.
fn backoff(rng: &mut StdRng, attempt: u32) -> Duration {
    let ceiling = (50u64 << attempt.min(5)).min(1_000);
    Duration::from_millis(rng.random_range(10..=ceiling))
}

/// `retry_after_ms` of an error reply, with a little jitter of the client's own.
fn retry_after(rng: &mut StdRng, err: &Value) -> Duration {
    let ms = err["retry_after_ms"].as_u64().unwrap_or(100);
    Duration::from_millis(ms + rng.random_range(0..=50))
}

// ---------------------------------------------------------------- connection

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Why a connection ended.
#[derive(Debug)]
enum End {
    /// The server closed (code, reason); `after_ms` of a `reconnect` push before it, if any.
    Closed(u16, String, Option<u64>),
    /// No reply in time.
    Timeout,
    /// The socket failed (a killed node, mostly).
    Broken(String),
    /// The run is over.
    Done,
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Closed(code, reason, Some(ms)) => write!(f, "closed {code} {reason:?} after reconnect in {ms} ms"),
            End::Closed(code, reason, None) => write!(f, "closed {code} {reason:?}"),
            End::Timeout => write!(f, "no reply in {} s", REPLY_WAIT.as_secs()),
            End::Broken(e) => write!(f, "broken: {e}"),
            End::Done => write!(f, "run over"),
        }
    }
}

/// One WebSocket: one request in flight at a time, pushes queued aside.
struct Conn {
    ws: Ws,
    node: usize,
    next_id: i64,
    replies: HashMap<i64, Value>,
    pushes: VecDeque<Value>,
    reconnect_after: Option<u64>,
}

impl Conn {
    /// Connects to `node` for workspace `ws` and says hello.
    async fn open(run: &Run, node: usize, ws: &str, token: &str) -> Result<Conn, String> {
        let url = format!("ws://{}/v1/ws?ws={ws}", run.cell.addrs[node]);
        let ws = match tokio::time::timeout(Duration::from_secs(2), tokio_tungstenite::connect_async(url)).await {
            Ok(Ok((ws, _))) => ws,
            Ok(Err(e)) => return Err(format!("connect: {e}")),
            Err(_) => return Err("connect: timed out".into()),
        };
        let mut c =
            Conn { ws, node, next_id: 1, replies: HashMap::new(), pushes: VecDeque::new(), reconnect_after: None };
        match c.request(json!({"op": "hello", "token": token}), Duration::from_secs(5)).await {
            Ok(r) if r.get("ok").is_some() => Ok(c),
            Ok(r) => Err(format!("hello refused: {r}")),
            Err(e) => Err(format!("hello: {e}")),
        }
    }

    /// Sends `req` with a fresh id and waits at most `within` for its reply.
    async fn request(&mut self, mut req: Value, within: Duration) -> Result<Value, End> {
        let id = self.next_id;
        self.next_id += 1;
        req["id"] = json!(id);
        if let Err(e) = self.ws.send(Message::Text(req.to_string().into())).await {
            return Err(End::Broken(format!("send: {e}")));
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(r) = self.replies.remove(&id) {
                return Ok(r);
            }
            if !self.read(deadline).await? {
                return Err(End::Timeout);
            }
        }
    }

    /// The next push, waiting until `deadline`; `None` if none came.
    async fn push_until(&mut self, deadline: tokio::time::Instant) -> Result<Option<Value>, End> {
        loop {
            if let Some(p) = self.pushes.pop_front() {
                return Ok(Some(p));
            }
            if !self.read(deadline).await? {
                return Ok(None);
            }
        }
    }

    /// Reads one frame; false when `deadline` passed first.
    async fn read(&mut self, deadline: tokio::time::Instant) -> Result<bool, End> {
        let msg = match tokio::time::timeout_at(deadline, self.ws.next()).await {
            Err(_) => return Ok(false),
            Ok(None) => return Err(End::Broken("end of stream".into())),
            Ok(Some(Err(e))) => return Err(End::Broken(e.to_string())),
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) => {
                let v: Value = match serde_json::from_str(t.as_str()) {
                    Ok(v) => v,
                    Err(e) => return Err(End::Broken(format!("a frame that is not JSON ({e}): {t}"))),
                };
                if v.get("ev").is_some() {
                    if v["ev"] == "reconnect" {
                        self.reconnect_after = v["after_ms"].as_u64();
                    } else {
                        self.pushes.push_back(v);
                    }
                } else if let Some(id) = v.get("id").and_then(Value::as_i64) {
                    self.replies.insert(id, v);
                } else {
                    return Err(End::Broken(format!("a reply without an id: {v}")));
                }
            }
            Message::Close(frame) => {
                let (code, reason) =
                    frame.map(|f| (u16::from(f.code), f.reason.to_string())).unwrap_or((1005, String::new()));
                return Err(End::Closed(code, reason, self.reconnect_after));
            }
            _ => {}
        }
        Ok(true)
    }
}

/// Where a client goes next: half the time the node `/v1/gateway` (asked of a
/// random node) names, otherwise a random node, not `avoid` if it can help it.
async fn pick_node(run: &Run, rng: &mut StdRng, ws: &str, avoid: Option<usize>) -> usize {
    if rng.random_bool(0.5) {
        let via = rng.random_range(0..NODES);
        let path = format!("/v1/gateway?ws={ws}");
        if let Some((200, v)) = try_http(run.cell.addrs[via], "GET", &path, None, Duration::from_secs(1)).await
            && let Some(url) = v["url"].as_str()
            && let Some(i) = run.cell.addrs.iter().position(|a| url.contains(&a.to_string()))
            && Some(i) != avoid
        {
            return i;
        }
    }
    let mut i = rng.random_range(0..NODES);
    if Some(i) == avoid {
        i = (i + rng.random_range(1..NODES)) % NODES;
    }
    i
}

// ------------------------------------------------------------------ watchers

/// A watcher as the auditor sees it.
struct WatcherView {
    name: String,
    /// The run's chat indices this watcher watches.
    chats: Vec<usize>,
    /// Per watched chat: every event held, in order: (seq, fingerprint, ms since the start when it came).
    held: Vec<Vec<(u64, u64, u64)>>,
    /// The node it is connected to now.
    node: Option<usize>,
    stats: WatcherStats,
}

#[derive(Default, Clone, Copy)]
struct WatcherStats {
    pushes: u64,
    duplicate_pushes: u64,
    gap_fetches: u64,
    notifies: u64,
    fetches: u64,
    reconnects: u64,
    refusals: u64,
}

impl WatcherView {
    fn last(&self, slot: usize) -> u64 {
        self.held[slot].last().map_or(0, |e| e.0)
    }
}

/// A watched chat's state on one connection.
#[derive(Default)]
struct ChatConn {
    watching: bool,
    /// The highest seq pushed for this chat on this connection.
    last_pushed: u64,
    /// Pushed events beyond a gap: seq to fingerprint.
    ahead: BTreeMap<u64, u64>,
    /// A seq a `notify` named: fetch up to it.
    want: u64,
    /// No request for this chat before then (after `throttled` or `unavailable`).
    not_before: Option<Instant>,
}

impl ChatConn {
    fn target(&self) -> u64 {
        self.want.max(self.ahead.keys().next().map_or(0, |s| s - 1))
    }
}

struct Watcher {
    run: Arc<Run>,
    view: Arc<Mutex<WatcherView>>,
    ws: &'static str,
    token: String,
    rng: StdRng,
}

impl Watcher {
    async fn run(mut self, first: usize) {
        let mut node = first;
        let mut attempt = 0u32;
        let mut first_conn = true;
        loop {
            if self.run.done() {
                return;
            }
            let name = self.view.lock().unwrap().name.clone();
            let mut conn = match Conn::open(&self.run, node, self.ws, &self.token).await {
                Ok(c) => c,
                Err(e) => {
                    attempt += 1;
                    self.run.note(format!("{name}: cannot connect to node-{node}: {e}"));
                    let wait = backoff(&mut self.rng, attempt);
                    self.run.sleep(wait).await;
                    node = pick_node(&self.run, &mut self.rng, self.ws, Some(node)).await;
                    continue;
                }
            };
            attempt = 0;
            {
                let mut v = self.view.lock().unwrap();
                v.node = Some(node);
                if !first_conn {
                    v.stats.reconnects += 1;
                }
            }
            first_conn = false;
            let end = self.serve(&mut conn).await;
            self.view.lock().unwrap().node = None;
            let wait = match &end {
                End::Done => return,
                End::Closed(_, _, Some(after_ms)) => Duration::from_millis(*after_ms),
                _ => backoff(&mut self.rng, 0),
            };
            self.run.note(format!("{name}: left node-{node} ({end}), back in {} ms", wait.as_millis()));
            self.run.sleep(wait).await;
            let avoid = matches!(end, End::Broken(_) | End::Timeout).then_some(node);
            node = pick_node(&self.run, &mut self.rng, self.ws, avoid).await;
        }
    }

    /// One connection: watch every chat after the last seq held, then follow pushes, fetching gaps and notifies.
    async fn serve(&mut self, conn: &mut Conn) -> End {
        let n = self.view.lock().unwrap().chats.len();
        let mut st: Vec<ChatConn> = (0..n).map(|_| ChatConn::default()).collect();
        loop {
            if self.run.done() {
                return End::Done;
            }
            // Requests that are due: watches not yet in place, gaps and notifies to fetch.
            let now = Instant::now();
            for slot in 0..n {
                if st[slot].not_before.is_some_and(|t| t > now) {
                    continue;
                }
                st[slot].not_before = None;
                let result = if !st[slot].watching {
                    self.watch(conn, &mut st, slot).await
                } else if st[slot].target() > self.view.lock().unwrap().last(slot) {
                    self.fetch(conn, &mut st, slot).await
                } else {
                    Ok(())
                };
                if let Err(end) = result {
                    return end;
                }
            }
            // Pushes that came meanwhile, then wait for the next one.
            while let Some(p) = conn.pushes.pop_front() {
                self.on_push(&mut st, conn.node, p);
            }
            let last: Vec<u64> = {
                let v = self.view.lock().unwrap();
                (0..n).map(|s| v.last(s)).collect()
            };
            let busy = (0..n).any(|s| st[s].not_before.is_none() && (!st[s].watching || st[s].target() > last[s]));
            let now = Instant::now();
            let deadline = if busy {
                now
            } else {
                let cap = now + Duration::from_millis(250);
                st.iter().filter_map(|c| c.not_before).min().map_or(cap, |t| t.min(cap)).max(now)
            };
            match conn.push_until(deadline.into()).await {
                Ok(Some(p)) => self.on_push(&mut st, conn.node, p),
                Ok(None) => {}
                Err(end) => return end,
            }
        }
    }

    async fn watch(&mut self, conn: &mut Conn, st: &mut [ChatConn], slot: usize) -> Result<(), End> {
        let (k, after) = {
            let v = self.view.lock().unwrap();
            (v.chats[slot], v.last(slot))
        };
        let chat = self.run.chats[k].name.clone();
        let r = conn.request(json!({"op": "watch", "chat": chat, "after": after}), REPLY_WAIT).await?;
        if r.get("ok").is_some() {
            st[slot] = ChatConn { watching: true, ..ChatConn::default() };
        } else {
            self.refused(st, slot, conn.node, "watch", &r);
        }
        Ok(())
    }

    /// One page of the chat's log after the last seq held.
    async fn fetch(&mut self, conn: &mut Conn, st: &mut [ChatConn], slot: usize) -> Result<(), End> {
        let (k, after, name) = {
            let v = self.view.lock().unwrap();
            (v.chats[slot], v.last(slot), v.name.clone())
        };
        let chat = self.run.chats[k].name.clone();
        let target = st[slot].target();
        {
            let mut v = self.view.lock().unwrap();
            v.stats.fetches += 1;
            if !st[slot].ahead.is_empty() {
                v.stats.gap_fetches += 1;
            }
        }
        let r = conn
            .request(json!({"op": "fetch", "chat": chat, "after": after, "limit": FETCH_LIMIT}), REPLY_WAIT)
            .await?;
        let Some(ok) = r.get("ok") else {
            self.refused(st, slot, conn.node, "fetch", &r);
            return Ok(());
        };
        let events = ok["events"].as_array().cloned().unwrap_or_default();
        let mut expect = after + 1;
        for e in &events {
            let Some(seq) = seq_of(e) else { continue };
            if seq != expect {
                self.run.fail(format!(
                    "{name} on node-{}: fetch of {} after {after} returned seq {seq} where {expect} was due",
                    conn.node,
                    self.run.chat_label(k)
                ));
                break;
            }
            self.hold(slot, seq, ident(e));
            expect += 1;
        }
        self.release_ahead(st, slot);
        let now_last = self.view.lock().unwrap().last(slot);
        if ok["more"] != true && now_last < target {
            self.run.fail(format!(
                "{name} on node-{}: {} was pushed or notified up to seq {target}, but fetch after {after} ends at {now_last} (chat's latest {})",
                conn.node,
                self.run.chat_label(k),
                ok["seq"]
            ));
            // Drop what cannot be had; the audit will show what is missing.
            st[slot].want = 0;
            st[slot].ahead.clear();
        }
        Ok(())
    }

    fn refused(&mut self, st: &mut [ChatConn], slot: usize, node: usize, op: &str, r: &Value) {
        let err = &r["err"];
        let code = err["code"].as_str().unwrap_or("?");
        let (name, k) = {
            let mut v = self.view.lock().unwrap();
            v.stats.refusals += 1;
            (v.name.clone(), v.chats[slot])
        };
        if code != "throttled" && code != "unavailable" {
            self.run.fail(format!("{name} on node-{node}: {op} of {} refused: {r}", self.run.chat_label(k)));
            st[slot].not_before = Some(Instant::now() + Duration::from_secs(1));
            return;
        }
        if code == "unavailable" {
            self.run.unavailable.lock().unwrap().push((k, Instant::now()));
        }
        let wait = retry_after(&mut self.rng, err);
        self.run.note(format!(
            "{name} on node-{node}: {op} of {} refused ({code}, retry_after_ms {}); again in {} ms",
            self.run.chat_label(k),
            err["retry_after_ms"],
            wait.as_millis()
        ));
        st[slot].not_before = Some(Instant::now() + wait);
    }

    fn on_push(&mut self, st: &mut [ChatConn], node: usize, p: Value) {
        let ev = p["ev"].as_str().unwrap_or("");
        if ev != "event" && ev != "notify" {
            return;
        }
        let (slot, name) = {
            let v = self.view.lock().unwrap();
            let slot = v.chats.iter().position(|&k| Some(self.run.chats[k].name.as_str()) == p["chat"].as_str());
            (slot, v.name.clone())
        };
        let Some(slot) = slot else {
            self.run.fail(format!("{name} on node-{node}: a push for a chat it does not watch: {p}"));
            return;
        };
        let k = self.view.lock().unwrap().chats[slot];
        let Some(seq) = seq_of(&p) else {
            self.run.fail(format!("{name} on node-{node}: a push without a seq: {p}"));
            return;
        };
        if ev == "notify" {
            self.view.lock().unwrap().stats.notifies += 1;
            st[slot].want = st[slot].want.max(seq);
            return;
        }
        let c = &mut st[slot];
        if seq <= c.last_pushed {
            self.view.lock().unwrap().stats.duplicate_pushes += 1;
            self.run.fail(format!(
                "{name} on node-{node}: {} pushed seq {seq} after seq {} on the same connection (a duplicate or out of order)",
                self.run.chat_label(k),
                c.last_pushed
            ));
            return;
        }
        c.last_pushed = seq;
        self.view.lock().unwrap().stats.pushes += 1;
        let fp = ident(&p);
        let last = self.view.lock().unwrap().last(slot);
        if seq == last + 1 {
            self.hold(slot, seq, fp);
            self.release_ahead(st, slot);
        } else if seq > last + 1 {
            st[slot].ahead.insert(seq, fp);
        } else {
            self.check_held(slot, seq, fp, node, "push");
        }
    }

    /// Appends `seq` to what the watcher holds (the caller checked it is next).
    fn hold(&self, slot: usize, seq: u64, fp: u64) {
        let ms = self.run.t0.elapsed().as_millis() as u64;
        let mut v = self.view.lock().unwrap();
        if v.last(slot) + 1 == seq {
            v.held[slot].push((seq, fp, ms));
        } else {
            drop(v);
            self.check_held(slot, seq, fp, usize::MAX, "fetch");
        }
    }

    /// An event the watcher already holds came again (by push after a fetch): it must be the same event.
    fn check_held(&self, slot: usize, seq: u64, fp: u64, node: usize, how: &str) {
        let v = self.view.lock().unwrap();
        let Some(&(_, held_fp, _)) = v.held[slot].get(seq as usize - 1) else { return };
        if held_fp != fp {
            let (name, k) = (v.name.clone(), v.chats[slot]);
            drop(v);
            self.run.fail(format!(
                "{name} (node-{node}): {} seq {seq} by {how} differs from the event held at that seq",
                self.run.chat_label(k)
            ));
        }
    }

    /// Moves pushed events that are next now from `ahead` into what the watcher holds.
    fn release_ahead(&self, st: &mut [ChatConn], slot: usize) {
        loop {
            let last = self.view.lock().unwrap().last(slot);
            let Some((&seq, &fp)) = st[slot].ahead.first_key_value() else { return };
            if seq > last + 1 {
                return;
            }
            st[slot].ahead.remove(&seq);
            if seq == last + 1 {
                self.hold(slot, seq, fp);
            } else {
                self.check_held(slot, seq, fp, usize::MAX, "push");
            }
        }
    }
}

// ------------------------------------------------------------------- senders

/// Every send of the run, for the audit.
#[derive(Default)]
struct Ledger {
    /// client_id to chat, for every send tried.
    tried: HashMap<String, usize>,
    /// client_id to (chat, seq, when acknowledged).
    acked: HashMap<String, (usize, u64, Instant)>,
    /// Sends never acknowledged (given up when the run ended).
    abandoned: HashSet<String>,
    /// Sends acknowledged on a resend: client_id to when (ms since the epoch) the last attempt went out.
    last_attempt_ms: HashMap<String, u64>,
    resends: u64,
    idempotent_checks: u64,
    throttled: u64,
    unavailable: u64,
    timeouts: u64,
    disconnects: u64,
}

struct Sender {
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
struct QuietCtl {
    chat: usize,
    shard: usize,
    idle: AtomicBool,
    go: tokio::sync::Notify,
    /// Notified (to whoever waits) as the burst's last send goes out.
    last: tokio::sync::Notify,
    /// How long the quickest of the burst's sends before the last took (µs): the bouncer aims inside it.
    rtt_us: AtomicUsize,
    node: Arc<AtomicUsize>,
}

impl Sender {
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
                        End::Timeout => {
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
                    let avoid = matches!(end, End::Broken(_) | End::Timeout).then_some(node);
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
    async fn busy(mut self, chats: Vec<usize>) {
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
    async fn quiet(
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
            let mut phase = self.run.phase.clone();
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
fn late_watchers(run: &Run, watchers: &[Arc<Mutex<WatcherView>>], k: usize, seq: u64, acked: Instant) -> String {
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
async fn converge(
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

// ------------------------------------------------------------------- bouncer

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    KillNode,
    RestartNats,
    StopShard,
}

const FAULTS: [Fault; 3] = [Fault::KillNode, Fault::RestartNats, Fault::StopShard];

/// Deals a fault every 1 to 3 s until the load stops, never two of one kind
/// at once (so one node, one NATS server, one shard at most is down), and
/// waits until every fault has been undone. Most faults are aimed at a quiet
/// chat: its burst starts just before the fault (a send in flight on the
/// killed node or the stopped shard) or right as the fault is mended.
async fn bouncer(run: Arc<Run>, quiet: Vec<Arc<QuietCtl>>, mut rng: StdRng) -> HashMap<&'static str, u64> {
    let down: Arc<[AtomicBool; 3]> = Arc::new(Default::default());
    let mut dealt: HashMap<&'static str, u64> = HashMap::new();
    let mut tasks = Vec::new();
    loop {
        let pause = Duration::from_millis(rng.random_range(1_000..=3_000));
        if Instant::now() + pause >= run.load_ends {
            break;
        }
        tokio::time::sleep(pause).await;
        // Every choice is drawn whether it is used or not, so a seed replays the same choices.
        let kind_pick: usize = rng.random_range(0..FAULTS.len());
        let node = rng.random_range(0..NODES);
        let nats = rng.random_range(0..3);
        let shard = rng.random_range(0..2);
        let outage = [rng.random_range(500..2_000), rng.random_range(200..2_000), rng.random_range(500..3_000)];
        let (aim, aim_at_mend, lead, quiet_pick) =
            (rng.random_bool(0.7), rng.random_bool(0.3), rng.random::<f64>(), rng.random::<u64>() as usize);
        let free: Vec<usize> = (0..FAULTS.len()).filter(|&i| !down[i].load(Ordering::SeqCst)).collect();
        if free.is_empty() {
            run.note("bouncer: one of each kind is down already; skipped".into());
            continue;
        }
        let kind = free[kind_pick % free.len()];
        let fault = FAULTS[kind];
        let target = match fault {
            Fault::KillNode => node,
            Fault::RestartNats => nats,
            Fault::StopShard => shard,
        };
        // The quiet chat to aim at: one whose sender is on the node, or whose chat is on the shard, if any waits.
        let mut target_chat = None;
        if aim && Instant::now() + QUIET_ROOM < run.load_ends {
            let idle: Vec<&Arc<QuietCtl>> = quiet.iter().filter(|q| q.idle.load(Ordering::SeqCst)).collect();
            let fits: Vec<&Arc<QuietCtl>> = idle
                .iter()
                .copied()
                .filter(|q| match fault {
                    Fault::KillNode => q.node.load(Ordering::SeqCst) == target,
                    Fault::StopShard => q.shard == target,
                    Fault::RestartNats => true,
                })
                .collect();
            let pool = if fits.is_empty() { idle } else { fits };
            if !pool.is_empty() {
                let q = pool[quiet_pick % pool.len()];
                if q.idle.compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
                    target_chat = Some(q.clone());
                }
            }
        }
        // A fault aimed at a burst takes down what its last send goes through: its sender's
        // node, the NATS server that node publishes through, or its chat's shard.
        let mut target = target;
        if let Some(q) = &target_chat {
            let node = q.node.load(Ordering::SeqCst);
            match fault {
                Fault::KillNode if node != usize::MAX => target = node,
                Fault::RestartNats if node != usize::MAX => {
                    if let Some(server) = run.cell.nats_server_of_node(node).await {
                        target = server;
                    }
                }
                Fault::StopShard => target = q.shard,
                _ => {}
            }
        }
        down[kind].store(true, Ordering::SeqCst);
        *dealt.entry(fault_name(fault)).or_default() += 1;
        let mut at_mend = None;
        if let Some(q) = target_chat {
            let label = run.chat_label(q.chat);
            if aim_at_mend {
                run.note(format!("bouncer: {label}'s burst will start as the next fault is mended"));
                at_mend = Some(q);
            } else {
                // The fault lands on the tail of the burst: somewhere in the last send's round trip
                // (as long as the quickest send before it took) or just after it, when the node has
                // stored it (a write that commits as its node dies or its shard stops may never be
                // announced) or published it (a message inside a NATS server that dies is lost).
                let sent = q.last.notified();
                tokio::pin!(sent);
                sent.as_mut().enable();
                q.go.notify_one();
                let came = tokio::time::timeout(Duration::from_secs(10), sent).await.is_ok();
                let window_us = q.rtt_us.load(Ordering::SeqCst).clamp(500, 50_000) + 2_000;
                let lead = (lead * window_us as f64) as u64;
                tokio::time::sleep(Duration::from_micros(lead)).await;
                let on = q.node.load(Ordering::SeqCst);
                run.note(format!(
                    "bouncer: {label}'s last send {} (its sender on {}); the fault comes {lead} µs later",
                    if came { "went out" } else { "did not go out in 10 s" },
                    if on == usize::MAX { "no node".to_string() } else { format!("node-{on}") }
                ));
            }
        }
        let outage = Duration::from_millis(outage[kind]);
        let struck = Instant::now();
        strike(&run, fault, target, outage).await;
        let (run2, down2) = (run.clone(), down.clone());
        tasks.push(tokio::spawn(async move {
            mend(&run2, fault, target, struck, outage, at_mend).await;
            down2[kind].store(false, Ordering::SeqCst);
        }));
    }
    for t in tasks {
        t.await.expect("fault task");
    }
    dealt
}

fn fault_name(f: Fault) -> &'static str {
    match f {
        Fault::KillNode => "node SIGKILL",
        Fault::RestartNats => "NATS server restart",
        Fault::StopShard => "PostgreSQL shard stop",
    }
}

/// The breaking half of a fault, done at once (the bouncer may have aimed it
/// at a send in flight): SIGKILL a node, kill a NATS server, or signal a
/// shard's fast shutdown.
async fn strike(run: &Run, fault: Fault, i: usize, outage: Duration) {
    let cell = &run.cell;
    let ms = outage.as_millis();
    match fault {
        Fault::KillNode => {
            cell.kill_node(i, &format!("SIGKILL at t={:.3}s", run.secs()));
            run.note(format!("FAULT kill -9 node-{i} for {ms} ms"));
        }
        Fault::RestartNats => {
            cell.kill_nats(i).await;
            run.note(format!("FAULT NATS server {i} down for {ms} ms"));
        }
        Fault::StopShard => {
            cell.signal_shard_stop(i);
            run.note(format!("FAULT stop PostgreSQL shard {i} for {ms} ms"));
        }
    }
}

/// The rest of a fault: wait `outage`, mend (starting `at_mend`'s burst right
/// then), and wait until it is mended.
async fn mend(run: &Run, fault: Fault, i: usize, struck: Instant, outage: Duration, at_mend: Option<Arc<QuietCtl>>) {
    let cell = &run.cell;
    let mended = || {
        if let Some(q) = &at_mend {
            q.go.notify_one();
        }
    };
    match fault {
        Fault::KillNode => {
            tokio::time::sleep(outage).await;
            cell.restart_node(i, &format!("started again at t={:.3}s", run.secs()));
            mended();
            let started = Instant::now();
            if cell.wait_serving(i, Duration::from_secs(20)).await {
                run.note(format!("MENDED node-{i} serving after {} ms", started.elapsed().as_millis()));
            } else {
                run.fail(format!("node-{i} did not serve HTTP within 20 s of its restart"));
            }
        }
        Fault::RestartNats => {
            tokio::time::sleep(outage).await;
            cell.start_nats(i).await;
            mended();
            let started = Instant::now();
            if cell.nats_formed(Duration::from_secs(20)).await {
                run.note(format!("MENDED NATS cluster whole again after {} ms", started.elapsed().as_millis()));
            } else {
                run.note(format!("NATS cluster not whole 20 s after server {i} restarted"));
            }
        }
        Fault::StopShard => {
            cell.stop_shard(i).await;
            run.note(format!("shard {i} stopped"));
            tokio::time::sleep(outage).await;
            cell.start_shard(i).await;
            mended();
            run.shard_outages.lock().unwrap().push((i, struck, Instant::now()));
            run.note(format!("MENDED shard {i} started again"));
        }
    }
}

// ------------------------------------------------------------------- auditor

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

/// Chat names of one workspace: `BUSY_CHATS` busy ones and `QUIET_CHATS` quiet ones, each kind over both shards.
fn pick_chats(shard_names: &[String], ws: usize) -> Vec<ChatSpec> {
    let shard_of = |name: &str| {
        herald::hashing::rendezvous(
            &[WORKSPACES[ws].as_bytes(), name.as_bytes()],
            shard_names.iter().map(String::as_str),
        )
        .unwrap()
    };
    let mut out = Vec::new();
    let mut i = 0;
    for j in 0..BUSY_CHATS {
        let want = (j + ws) % 2;
        loop {
            let name = format!("busy{i}");
            i += 1;
            if shard_of(&name) == want {
                out.push(ChatSpec { ws, name, quiet: false, shard: want });
                break;
            }
        }
    }
    for j in 0..QUIET_CHATS {
        let want = (j + ws) % 2;
        loop {
            let name = format!("quiet{i}");
            i += 1;
            if shard_of(&name) == want {
                out.push(ChatSpec { ws, name, quiet: true, shard: want });
                break;
            }
        }
    }
    out
}

async fn admin(run: &Run, method: &str, path: &str, body: Option<Value>) -> Value {
    let (status, v) = try_http(run.cell.addrs[0], method, path, body, Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("{method} {path}: no answer"));
    assert_eq!(status, 200, "{method} {path}: {v}");
    v
}

/// The users of workspace `ws`: its watchers, busy senders and quiet senders.
fn user_names(ws: usize) -> Vec<String> {
    (0..WATCHERS)
        .map(|i| format!("watcher{ws}-{i}"))
        .chain((0..SENDERS).map(|i| format!("sender{ws}-{i}")))
        .chain((0..QUIET_CHATS).map(|i| format!("quiet{ws}-{i}")))
        .collect()
}

/// Chats and their members through the server API; returns every user's token.
async fn set_up(run: &Run, secs: u64) -> HashMap<String, String> {
    for (k, c) in run.chats.iter().enumerate() {
        let ws = WORKSPACES[c.ws];
        admin(run, "PUT", &format!("/v1/workspaces/{ws}/chats/{}", c.name), Some(json!({"open": true}))).await;
        for u in user_names(c.ws) {
            admin(run, "PUT", &format!("/v1/workspaces/{ws}/chats/{}/members/{u}", c.name), None).await;
        }
        eprintln!("chaos: chat {} on shard {}{}", run.chat_label(k), c.shard, if c.quiet { " (quiet)" } else { "" });
    }
    let mut tokens = HashMap::new();
    for (ws, ws_name) in WORKSPACES.iter().enumerate() {
        for u in user_names(ws) {
            let body = json!({"workspace": ws_name, "user": u, "ttl_s": secs + 3_600});
            let v = admin(run, "POST", "/v1/tokens", Some(body)).await;
            tokens.insert(u, v["token"].as_str().unwrap().to_string());
        }
    }
    tokens
}

/// The clients of the run, started.
struct Clients {
    /// Each watcher's view, with its workspace.
    views: Vec<(usize, Arc<Mutex<WatcherView>>)>,
    watchers: Vec<tokio::task::JoinHandle<()>>,
    senders: Vec<tokio::task::JoinHandle<()>>,
    ledger: Arc<Mutex<Ledger>>,
    quiet: Vec<Arc<QuietCtl>>,
    quiet_lags: Arc<Mutex<Vec<Duration>>>,
}

/// Starts the watchers (first, so that they hold every chat from its first
/// event), then the busy and quiet senders, each on a node of its own to start
/// with, so that events cross NATS.
fn start_clients(run: &Arc<Run>, tokens: &HashMap<String, String>, seeds: &mut StdRng) -> Clients {
    let mut c = Clients {
        views: Vec::new(),
        watchers: Vec::new(),
        senders: Vec::new(),
        ledger: Arc::new(Mutex::new(Ledger::default())),
        quiet: Vec::new(),
        quiet_lags: Arc::new(Mutex::new(Vec::new())),
    };
    for (ws, &ws_name) in WORKSPACES.iter().enumerate() {
        let chats: Vec<usize> = (0..run.chats.len()).filter(|&k| run.chats[k].ws == ws).collect();
        for i in 0..WATCHERS {
            let name = format!("watcher{ws}-{i}");
            let view = Arc::new(Mutex::new(WatcherView {
                name: name.clone(),
                chats: chats.clone(),
                held: vec![Vec::new(); chats.len()],
                node: None,
                stats: WatcherStats::default(),
            }));
            c.views.push((ws, view.clone()));
            let w = Watcher {
                run: run.clone(),
                view,
                ws: ws_name,
                token: tokens[&name].clone(),
                rng: StdRng::seed_from_u64(seeds.random()),
            };
            c.watchers.push(tokio::spawn(w.run((i + ws) % NODES)));
        }
    }
    for (ws, &ws_name) in WORKSPACES.iter().enumerate() {
        let of_ws = |quiet: bool| -> Vec<usize> {
            (0..run.chats.len()).filter(|&k| run.chats[k].ws == ws && run.chats[k].quiet == quiet).collect()
        };
        let sender = |name: String, node: usize, rng: StdRng| Sender {
            run: run.clone(),
            ledger: c.ledger.clone(),
            token: tokens[&name].clone(),
            name,
            ws: ws_name,
            rng,
            conn: None,
            node,
            at_node: Arc::new(AtomicUsize::new(usize::MAX)),
            resent_at_ms: None,
        };
        let busy = of_ws(false);
        for i in 0..SENDERS {
            let s = sender(format!("sender{ws}-{i}"), (i + ws + 1) % NODES, StdRng::seed_from_u64(seeds.random()));
            c.senders.push(tokio::spawn(s.busy(busy.clone())));
        }
        for (i, k) in of_ws(true).into_iter().enumerate() {
            let s = sender(format!("quiet{ws}-{i}"), (ws + i + 2) % NODES, StdRng::seed_from_u64(seeds.random()));
            let watchers: Vec<_> = c.views.iter().filter(|(w, _)| *w == ws).map(|(_, v)| v.clone()).collect();
            let ctl = Arc::new(QuietCtl {
                chat: k,
                shard: run.chats[k].shard,
                idle: AtomicBool::new(false),
                go: tokio::sync::Notify::new(),
                last: tokio::sync::Notify::new(),
                rtt_us: AtomicUsize::new(usize::MAX),
                node: s.at_node.clone(),
            });
            c.quiet.push(ctl.clone());
            c.senders.push(tokio::spawn(s.quiet(ctl, watchers, c.quiet_lags.clone())));
        }
    }
    c
}

/// Waits until every watcher holds each of its chats' latest seq (`targets`),
/// each within 10 s of `since[chat]`; returns the slowest, reports the others.
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
struct Audit {
    stored: u64,
    lost: u64,
    duplicates: u64,
    /// Sends given up at the end that are stored all the same.
    stored_unacked: u64,
    /// Sends acknowledged on a resend with the seq an earlier attempt stored.
    earlier_store: u64,
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

/// How long clients were still refused after a shard was started again: for each
/// outage, the last `unavailable` for a chat of that shard before its next outage.
fn shard_recovery(run: &Run) -> String {
    let outages = run.shard_outages.lock().unwrap();
    let refused = run.unavailable.lock().unwrap();
    let mut recoveries: Vec<Duration> = outages
        .iter()
        .map(|&(shard, _, back)| {
            let next = outages.iter().filter(|o| o.0 == shard && o.1 > back).map(|o| o.1).min();
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
        None => "no shard outage".to_string(),
        Some(slowest) => format!(
            "{} outages; refusals after the shard was back: median {} ms, slowest {} ms",
            recoveries.len(),
            recoveries[recoveries.len() / 2].as_millis(),
            slowest.as_millis()
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server and PostgreSQL (Debian packages); scripts/test.sh runs it"]
async fn under_kills_restarts_and_stopped_shards_every_acked_send_is_stored_once_and_reaches_every_watcher_in_order() {
    let seed: u64 = match std::env::var("HERALD_CHAOS_SEED") {
        Ok(s) => s.trim().parse().expect("HERALD_CHAOS_SEED is a u64"),
        Err(_) => rand::random(),
    };
    let secs: u64 = std::env::var("HERALD_CHAOS_SECS").map_or(30, |s| s.trim().parse().expect("HERALD_CHAOS_SECS"));
    eprintln!("chaos: seed {seed} (replay with HERALD_CHAOS_SEED={seed}), {secs} s of load");
    let started = Instant::now();
    let cell = Arc::new(Cell::start(NODES).await);
    eprintln!("chaos: cell up in {:.1} s; logs in {}", started.elapsed().as_secs_f64(), cell.dir.display());

    let chats = (0..WORKSPACES.len()).flat_map(|ws| pick_chats(&cell.shard_names, ws)).collect();
    let (phase_tx, phase_rx) = watch::channel(Phase::Load);
    let mut run = Run {
        t0: Instant::now(),
        load_ends: Instant::now(),
        cell: cell.clone(),
        chats,
        phase: phase_rx,
        give_up: Mutex::new(None),
        timeline: Mutex::new(Vec::new()),
        unavailable: Mutex::new(Vec::new()),
        shard_outages: Mutex::new(Vec::new()),
        failures: Mutex::new(Vec::new()),
    };
    let tokens = set_up(&run, secs).await;
    // The clock of the run starts now that the cell is set up.
    run.t0 = Instant::now();
    run.load_ends = run.t0 + Duration::from_secs(secs);
    run.note(format!("t=0 is {} (the nodes' logs are in UTC)", utc_now()));
    let run = Arc::new(run);
    let mut seeds = StdRng::seed_from_u64(seed);
    let clients = start_clients(&run, &tokens, &mut seeds);
    let bouncer = tokio::spawn(bouncer(run.clone(), clients.quiet.clone(), StdRng::seed_from_u64(seeds.random())));

    // The load runs its time; then pending sends get their last chance and every fault is mended.
    tokio::time::sleep_until(run.load_ends.into()).await;
    let stopped = Instant::now();
    *run.give_up.lock().unwrap() = Some(stopped + SEND_GIVE_UP);
    phase_tx.send(Phase::Drain).unwrap();
    run.note("LOAD STOPPED".into());
    for t in clients.senders {
        t.await.expect("sender");
    }
    let faults = bouncer.await.expect("bouncer");
    run.note("every fault mended; senders done".into());

    // Convergence: every watcher reaches each chat's latest seq within 10 s of the
    // load stopping (or of the chat's last ack, if that came later), by itself.
    let mut targets = Vec::new();
    for k in 0..run.chats.len() {
        targets.push(latest(&run, k).await.unwrap_or_else(|e| {
            run.fail(format!("the auditor cannot read {}: {e}", run.chat_label(k)));
            0
        }));
    }
    let since: Vec<Instant> = {
        let l = clients.ledger.lock().unwrap();
        (0..run.chats.len())
            .map(|k| l.acked.values().filter(|a| a.0 == k).map(|a| a.2).max().unwrap_or(stopped).max(stopped))
            .collect()
    };
    let slowest = converge_all(&run, &clients.views, &targets, &since).await;
    phase_tx.send(Phase::Done).unwrap();
    for t in clients.watchers {
        t.await.expect("watcher");
    }

    // The audit of the logs.
    let ledger = Arc::try_unwrap(clients.ledger).ok().expect("senders are done").into_inner().unwrap();
    let mut audit = Audit::default();
    for (k, &target) in targets.iter().enumerate() {
        match read_log(&run, k).await {
            Ok(log) => audit_chat(&run, &ledger, &clients.views, k, target, &log, &mut audit),
            Err(e) => run.fail(format!("the auditor cannot read the log of {}: {e}", run.chat_label(k))),
        }
    }

    // Figures.
    let mut w = WatcherStats::default();
    for (_, view) in &clients.views {
        let s = view.lock().unwrap().stats;
        w.pushes += s.pushes;
        w.duplicate_pushes += s.duplicate_pushes;
        w.gap_fetches += s.gap_fetches;
        w.notifies += s.notifies;
        w.fetches += s.fetches;
        w.reconnects += s.reconnects;
        w.refusals += s.refusals;
    }
    let quiet = clients.quiet_lags.lock().unwrap().clone();
    let mut faults: Vec<_> = faults.into_iter().collect();
    faults.sort();
    let slowest = slowest.map_or("none".into(), |(d, who)| format!("{} ms ({who})", d.as_millis()));
    let l = &ledger;
    let report = format!(
        "chaos seed {seed}: {secs} s of load on {NODES} nodes, 3 NATS servers, 2 PostgreSQL shards\n\
         \x20 sends acknowledged {}; given up at the end {} (of them stored {}); events stored {}\n\
         \x20 resends {}, of which answered with an earlier attempt's stored seq {}; idempotent resends checked {}; \
         throttled {}, unavailable {}, timeouts {}, disconnects {}\n\
         \x20 faults: {}\n\
         \x20 lost {}; stored twice {}; duplicate pushes {}\n\
         \x20 watchers: {} pushes, {} fetches ({} for gaps), {} notifies, {} reconnects, {} refusals\n\
         \x20 slowest convergence after the load stopped: {slowest}\n\
         \x20 quiet-chat bursts {}, slowest {} ms\n\
         \x20 shard recovery: {}\n\
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
        shard_recovery(&run),
        run.failures.lock().unwrap().len(),
    );
    eprintln!("{report}");
    finish(&run, seed, secs);
}

/// Writes the timeline next to the node logs; removes them if the run passed
/// (unless `HERALD_CHAOS_KEEP` is set), fails loudly with the evidence if not.
fn finish(run: &Run, seed: u64, secs: u64) {
    let cell = &run.cell;
    let timeline: String =
        run.timeline.lock().unwrap().iter().map(|(t, s)| format!("{:8.3} {s}\n", t.as_secs_f64())).collect();
    let _ = std::fs::write(cell.dir.join("timeline.txt"), &timeline);
    let failures = run.failures.lock().unwrap().clone();
    if failures.is_empty() {
        if std::env::var_os("HERALD_CHAOS_KEEP").is_none() {
            cell.remove_dir();
        }
        return;
    }
    let faults: String = timeline
        .lines()
        .filter(|l| l.contains("FAULT") || l.contains("MENDED") || l.contains("LOAD STOPPED") || l.contains("burst"))
        .map(|l| format!("{l}\n"))
        .collect();
    let shown: Vec<String> = failures.iter().take(60).map(|s| format!("  {s}")).collect();
    panic!(
        "chaos seed {seed} failed ({} failures; replay with HERALD_CHAOS_SEED={seed} HERALD_CHAOS_SECS={secs}):\n{}\n\n\
         faults:\n{faults}\nfull timeline: {dir}/timeline.txt; node logs kept in {dir}\n{}",
        failures.len(),
        shown.join("\n"),
        cell.log_tails(15),
        dir = cell.dir.display(),
    );
}
