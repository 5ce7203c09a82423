//! A chaos watcher: a user who watches every chat of its workspace as the
//! protocol says a client should, through every fault. On each connection it
//! watches each chat `after` the last seq it holds, follows pushes, fetches
//! on a gap and on `notify`, and waits out `throttled` and `unavailable`;
//! like the SDK, it pings a silent link and leaves a node that does not answer
//! ([`Conn::check_link`]: a frozen node keeps its socket open and says nothing).
//! What it holds ([`WatcherView`]) is what the auditor compares with the log;
//! a duplicate push, a fetch that skips a seq or a refusal the protocol does
//! not allow is a failure of the run.
//!
//! Not here: the connection itself (`chaos_client.rs`), the final checks (`chaos_audit.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use serde_json::{Value, json};

use super::client::{Conn, End, backoff, ident, pick_node, retry_after, seq_of};
use super::{FETCH_LIMIT, REPLY_WAIT, Run};

/// A watcher as the auditor sees it.
pub struct WatcherView {
    pub name: String,
    /// The run's chat indices this watcher watches.
    pub chats: Vec<usize>,
    /// Per watched chat: every event held, in order: (seq, fingerprint, ms since the start when it came).
    pub held: Vec<Vec<(u64, u64, u64)>>,
    /// The node it is connected to now.
    pub node: Option<usize>,
    pub stats: WatcherStats,
}

/// What a watcher did, for the report.
#[derive(Default, Clone, Copy)]
pub struct WatcherStats {
    pub pushes: u64,
    pub duplicate_pushes: u64,
    pub gap_fetches: u64,
    pub notifies: u64,
    pub fetches: u64,
    pub reconnects: u64,
    pub refusals: u64,
}

impl WatcherView {
    /// A fresh watcher of the run's chats `chats`, holding nothing yet.
    pub fn new(name: String, chats: Vec<usize>) -> WatcherView {
        let held = vec![Vec::new(); chats.len()];
        WatcherView { name, chats, held, node: None, stats: WatcherStats::default() }
    }

    /// The last seq held of the chat in `slot`, 0 for none.
    pub fn last(&self, slot: usize) -> u64 {
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

/// A watcher's task: its view, shared with the auditor, and what it connects with.
pub struct Watcher {
    pub run: Arc<Run>,
    pub view: Arc<Mutex<WatcherView>>,
    pub ws: &'static str,
    pub token: String,
    pub rng: StdRng,
}

impl Watcher {
    /// Connects to `first`, then wherever [`pick_node`] says after each end, until the run is done.
    pub async fn run(mut self, first: usize) {
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
            conn.check_link();
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
            let avoid = matches!(end, End::Broken(_) | End::Timeout(_)).then_some(node);
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
            while let Some(p) = conn.queued_push() {
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
