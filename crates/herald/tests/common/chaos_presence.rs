//! The presence audit: after every fault is mended, every node of the cell
//! must agree again on who is present. One probe per node, connected
//! directly to that node (never moved elsewhere): users `p0`, `p1`, `p2` of
//! workspace `w0`, the only members of a chat of their own ([`PRESENCE_CHAT`]),
//! each `watch`ing it and asking `presence` every [`POLL_EVERY`] (the first
//! answer, plus the `{"ev":"presence",...}` pushes that follow it, is the
//! probe's pushed view). A killed node's probe reconnects to the same node
//! once it serves again; a frozen node's probe just waits on its open socket.
//!
//! **Agreement** at an instant: every probe is connected; each node's latest
//! answer, asked for less than [`FRESH`] ago, is exactly {p0, p1, p2}; and
//! every probe's pushed view is that set too. It must **hold** for [`HOLD`]
//! (longer than a node's 1 s presence sweep, so that a node that wakes and
//! expires the others at its first sweep cannot pass on an answer given just
//! before). A fault's check starts when it is mended (a node serving again,
//! the NATS cluster whole, a shard started or its standby promoted); its
//! figure is the time from the mend to the start of the agreement that held.
//!
//! **The rule for overlapping faults.** Agreement needs every node up, so it
//! cannot be reached while another node is killed or frozen, and it may
//! rightly lag while a NATS server is down or the probes' chat's shard is
//! out (a reconnecting probe's `watch` and every `presence` read membership
//! from it). So a check fails the run only when agreement is not reached
//! within [`AGREE_BOUND`] of *presence-quiet time*: time after its mend in
//! which no such fault is down and none struck or was mended (each resets
//! the clock). A fault of the other shard does not touch presence and does
//! not stop the clock. Overlapping faults can thus delay a verdict but never
//! make one false; and since the bouncer stops before the end, every check is
//! decided once the last fault is mended ([`Presence::settle`]). The bug this
//! is here for (a node that wakes from SIGSTOP and expires every other node's
//! users for good) leaves the answers wrong for ever, so it fails the run at
//! the latest in the quiet time after the last fault.
//!
//! Not here: the faults (`chaos_faults.rs`), the connection (`chaos_client.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{Conn, End};
use super::{NODES, Run, WORKSPACES};

/// The probes' chat, in workspace [`PRESENCE_WS`].
pub const PRESENCE_CHAT: &str = "presence";
/// The probes' workspace, an index into [`WORKSPACES`].
pub const PRESENCE_WS: usize = 0;
/// How often each probe asks its node `presence`.
const POLL_EVERY: Duration = Duration::from_millis(200);
/// An answer counts for agreement only if it was asked for this recently (a
/// frozen node's last answer says nothing about it now).
const FRESH: Duration = Duration::from_secs(1);
/// How long agreement must hold to count: longer than a node's presence sweep (1 s).
const HOLD: Duration = Duration::from_millis(1_200);
/// The bound on agreement after a mend, in presence-quiet time. The contract
/// is 2 s for a change; after a fault a killed node's probe must first
/// reconnect and watch again (under a second), and an announcement lost in a
/// NATS server that died is found by the full check, which a node with
/// present users beats every 10 s. 10 s for that plus the 2 s of the
/// contract, the reconnect and [`HOLD`] make 15 s.
pub const AGREE_BOUND: Duration = Duration::from_secs(15);
/// A probe waits this long for an answer: longer than the longest freeze (30 s).
const ANSWER_WAIT: Duration = Duration::from_secs(45);

/// The probe user of node `i`.
pub fn probe_user(i: usize) -> String {
    format!("p{i}")
}

/// What one probe knows, shared with the monitor.
#[derive(Default)]
struct Probe {
    /// Connected and watching the chat.
    connected: bool,
    /// The latest `presence` answer: when it was asked for, and the users.
    answer: Option<(Instant, BTreeSet<String>)>,
    /// The first answer on this connection with every push applied since.
    pushed: Option<BTreeSet<String>>,
    reconnects: u64,
}

/// A fault's check, waiting for agreement.
struct Check {
    fault: &'static str,
    mended: Instant,
    /// Another presence fault was down at the mend or struck before agreement.
    overlapped: bool,
}

/// A decided check: how long after the mend agreement came (`None`: not within the bound).
struct Outcome {
    fault: &'static str,
    took: Option<Duration>,
    overlapped: bool,
}

#[derive(Default)]
struct Monitor {
    /// Presence faults down now.
    down: usize,
    /// Bumped by every presence fault's strike and end: resets the quiet clock.
    epoch: u64,
    pending: Vec<Check>,
    done: Vec<Outcome>,
}

/// The probes and the monitor that decides each fault's check.
pub struct Presence {
    run: Arc<Run>,
    probes: Vec<Arc<Mutex<Probe>>>,
    monitor: Mutex<Monitor>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Presence {
    /// Starts a probe on every node and the monitor, and a first check ("the start").
    pub fn start(run: &Arc<Run>, tokens: &HashMap<String, String>) -> Arc<Presence> {
        let probes: Vec<Arc<Mutex<Probe>>> = (0..NODES).map(|_| Arc::default()).collect();
        let p = Arc::new(Presence { run: run.clone(), probes, monitor: Mutex::default(), tasks: Mutex::default() });
        let mut tasks = Vec::new();
        for i in 0..NODES {
            let (run, probe, token) = (run.clone(), p.probes[i].clone(), tokens[&probe_user(i)].clone());
            tasks.push(tokio::spawn(probe_task(run, i, token, probe)));
        }
        p.mended("the start", false);
        tasks.push(tokio::spawn(p.clone().watch_over()));
        *p.tasks.lock().unwrap() = tasks;
        p
    }

    /// A fault that touches presence struck (`touches`: see the file's rule).
    pub fn struck(&self, touches: bool) {
        if touches {
            let mut m = self.monitor.lock().unwrap();
            m.down += 1;
            m.epoch += 1;
            m.pending.iter_mut().for_each(|c| c.overlapped = true);
        }
    }

    /// A fault that touches presence is over (mended and done with).
    pub fn cleared(&self, touches: bool) {
        if touches {
            let mut m = self.monitor.lock().unwrap();
            m.down -= 1;
            m.epoch += 1;
        }
    }

    /// `fault` is mended: its check starts now. `self_down`: the fault itself
    /// still counts as down (it touches presence: it is cleared only once
    /// the bouncer is done with it, a failed-over shard after its rebuild).
    pub fn mended(&self, fault: &'static str, self_down: bool) {
        let mut m = self.monitor.lock().unwrap();
        let overlapped = m.down > usize::from(self_down);
        m.pending.push(Check { fault, mended: Instant::now(), overlapped });
    }

    /// Waits until every check is decided (the bouncer is done: nothing strikes any more).
    pub async fn settle(&self) {
        let deadline = Instant::now() + AGREE_BOUND + Duration::from_secs(10);
        while !self.monitor.lock().unwrap().pending.is_empty() {
            if Instant::now() >= deadline {
                let m = self.monitor.lock().unwrap();
                self.run
                    .fail(format!("presence: {} checks still undecided after every fault was mended", m.pending.len()));
                return;
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// Stops the probes and the monitor.
    pub fn stop(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// The monitor: decides the pending checks, every [`POLL_EVERY`].
    async fn watch_over(self: Arc<Self>) {
        let mut agree_since: Option<Instant> = None;
        let mut quiet_since: Option<Instant> = None;
        let mut seen_epoch = 0;
        // The latest disagreement and when it was seen, for the timeline.
        let mut last_why = (Instant::now(), String::new());
        loop {
            tokio::time::sleep(POLL_EVERY).await;
            let now = Instant::now();
            let agreement = self.agreement(now);
            agree_since = match &agreement {
                Ok(()) => Some(agree_since.unwrap_or(now)),
                Err(why) => {
                    last_why = (now, why.clone());
                    None
                }
            };
            let mut m = self.monitor.lock().unwrap();
            if m.epoch != seen_epoch || m.down > 0 {
                seen_epoch = m.epoch;
                quiet_since = None;
            }
            if m.down == 0 && quiet_since.is_none() {
                quiet_since = Some(now);
            }
            let mut decided = Vec::new();
            m.pending.retain(|c| {
                if let Some(since) = agree_since {
                    let from = since.max(c.mended);
                    if now.saturating_duration_since(from) >= HOLD {
                        let took = from - c.mended;
                        decided.push(Outcome { fault: c.fault, took: Some(took), overlapped: c.overlapped });
                        return false;
                    }
                }
                let Some(quiet) = quiet_since else { return true };
                if now.saturating_duration_since(quiet.max(c.mended)) < AGREE_BOUND {
                    return true;
                }
                let why = agreement.as_ref().err().cloned().unwrap_or_else(|| "agreement did not hold".into());
                self.run.fail(format!(
                    "presence: no agreement {} s after {} was mended (t={:.2}s), {} s of them with no fault down: {why}",
                    c.mended.elapsed().as_secs(),
                    c.fault,
                    self.run.at(c.mended),
                    AGREE_BOUND.as_secs()
                ));
                decided.push(Outcome { fault: c.fault, took: None, overlapped: c.overlapped });
                false
            });
            for o in &decided {
                if let Some(took) = o.took {
                    self.run.note(format!(
                        "presence agrees {} ms after {} was mended (the last disagreement, at t={:.2}s: {})",
                        took.as_millis(),
                        o.fault,
                        self.run.at(last_why.0),
                        last_why.1
                    ));
                }
            }
            m.done.extend(decided);
        }
    }

    /// Whether every node agrees now, or why not (every probe that disagrees).
    fn agreement(&self, now: Instant) -> Result<(), String> {
        let all: BTreeSet<String> = (0..NODES).map(probe_user).collect();
        let mut why = Vec::new();
        for (i, p) in self.probes.iter().enumerate() {
            let p = p.lock().unwrap();
            if !p.connected {
                why.push(format!("p{i} is not connected to node-{i}"));
                continue;
            }
            match &p.answer {
                Some((asked, users)) if now.saturating_duration_since(*asked) <= FRESH => {
                    if *users != all {
                        why.push(format!("node-{i} answers {users:?}"));
                    }
                }
                Some((asked, _)) => {
                    why.push(format!("node-{i} gave no answer asked for after t={:.2}s", self.run.at(*asked)))
                }
                None => why.push(format!("node-{i} has not answered p{i} yet")),
            }
            if p.pushed.as_ref() != Some(&all) {
                why.push(format!("p{i}'s pushed view is {:?}", p.pushed));
            }
        }
        if why.is_empty() { Ok(()) } else { Err(why.join("; ")) }
    }

    /// The report's lines: per fault kind, checks, median and slowest time to agreement, failures.
    pub fn figures(&self) -> String {
        let m = self.monitor.lock().unwrap();
        // Per fault: every time to agreement, those of checks no other fault overlapped, failures.
        let mut by: BTreeMap<&str, (Vec<Duration>, Vec<Duration>, usize)> = BTreeMap::new();
        for o in &m.done {
            let e = by.entry(o.fault).or_default();
            match o.took {
                Some(d) if o.overlapped => e.0.push(d),
                Some(d) => {
                    e.0.push(d);
                    e.1.push(d);
                }
                None => e.2 += 1,
            }
        }
        let reconnects: u64 = self.probes.iter().map(|p| p.lock().unwrap().reconnects).sum();
        let mut out = format!(
            "presence agreement after each fault (every node answers {{p0,p1,p2}} and every probe's pushed view agrees, \
             held {} ms; bound {} s with no fault down; probe reconnects {reconnects}):",
            HOLD.as_millis(),
            AGREE_BOUND.as_secs()
        );
        for (fault, (all, alone, failed)) in by {
            out.push_str(&format!(
                "\n\x20   {fault}: {} checks, from the mend to agreement {}; of them {} with no other fault down meanwhile: {}; failures {failed}",
                all.len() + failed,
                spread(all),
                alone.len(),
                spread(alone),
            ));
        }
        if !m.pending.is_empty() {
            out.push_str(&format!("\n\x20   undecided: {}", m.pending.len()));
        }
        out
    }
}

/// `median M ms, max X ms` of `d`, or `-`.
fn spread(mut d: Vec<Duration>) -> String {
    d.sort();
    match d.last() {
        Some(max) => format!("median {} ms, max {} ms", d[(d.len() - 1) / 2].as_millis(), max.as_millis()),
        None => "-".into(),
    }
}

/// One probe: connects to node `i` (and only there) until the run is done.
async fn probe_task(run: Arc<Run>, i: usize, token: String, probe: Arc<Mutex<Probe>>) {
    let ws = WORKSPACES[PRESENCE_WS];
    let mut first = true;
    loop {
        if run.done() {
            return;
        }
        let mut conn = match Conn::open(&run, i, ws, &token).await {
            Ok(c) => c,
            Err(_) => {
                run.sleep(POLL_EVERY).await;
                continue;
            }
        };
        if !first {
            probe.lock().unwrap().reconnects += 1;
        }
        first = false;
        let end = serve(&run, &mut conn, &probe).await;
        {
            let mut p = probe.lock().unwrap();
            (p.connected, p.answer, p.pushed) = (false, None, None);
        }
        if matches!(end, End::Done) {
            return;
        }
        run.note(format!("presence probe p{i}: left node-{i} ({end})"));
        run.sleep(POLL_EVERY).await;
    }
}

/// One connection of a probe: watch, then ask `presence` every [`POLL_EVERY`], following the pushes.
async fn serve(run: &Run, conn: &mut Conn, probe: &Mutex<Probe>) -> End {
    loop {
        if run.done() {
            return End::Done;
        }
        match conn.request(json!({"op": "watch", "chat": PRESENCE_CHAT}), ANSWER_WAIT).await {
            Ok(r) if r.get("ok").is_some() => break,
            Ok(_) => run.sleep(POLL_EVERY).await,
            Err(end) => return end,
        }
    }
    probe.lock().unwrap().connected = true;
    let mut subscribed = false;
    loop {
        if run.done() {
            return End::Done;
        }
        let asked = Instant::now();
        let r = match conn.request(json!({"op": "presence", "chat": PRESENCE_CHAT}), ANSWER_WAIT).await {
            Ok(r) => r,
            Err(end) => return end,
        };
        // Pushes read before the reply came before it: before the first, the watch had no presence pushes.
        while let Some(p) = conn.queued_push() {
            if subscribed {
                apply(probe, &p);
            }
        }
        if let Some(users) = r["ok"]["users"].as_array() {
            let users: BTreeSet<String> = users.iter().filter_map(|u| u.as_str().map(String::from)).collect();
            let mut p = probe.lock().unwrap();
            if !subscribed {
                p.pushed = Some(users.clone());
                subscribed = true;
            }
            p.answer = Some((asked, users));
        }
        let next = tokio::time::Instant::now() + POLL_EVERY;
        loop {
            match conn.push_until(next).await {
                Ok(Some(p)) => apply(probe, &p),
                Ok(None) => break,
                Err(end) => return end,
            }
        }
    }
}

/// Applies a `{"ev":"presence","user":..,"present":..}` push to the probe's pushed view.
fn apply(probe: &Mutex<Probe>, p: &Value) {
    if p["ev"] != "presence" || p["chat"] != PRESENCE_CHAT {
        return;
    }
    let (Some(user), Some(present)) = (p["user"].as_str(), p["present"].as_bool()) else { return };
    if let Some(view) = probe.lock().unwrap().pushed.as_mut() {
        if present {
            view.insert(user.to_string());
        } else {
            view.remove(user);
        }
    }
}
