//! Property tests of the hub's sequencer and watch hand-off.
//!
//! A random program drives one hub over a model log: commits (messages,
//! joins, leaves), deliveries of committed events to the hub in any order,
//! duplicated or never (reordered and lost hints), watches with any `after`
//! split into their three real steps (`begin_watch`, the chat layer's read of
//! the log as `Chats::read_replay` does it, `finish_watch`) that other steps
//! interleave with, unwatches, backfills, tail checks and time passing
//! (paused tokio time, so the hub's gap timers and hot `notify`s run). Each
//! program leaves out a random few kinds of step (swarm testing).
//!
//! Each connection's outbox is read as a client following the protocol
//! would, as it fills. At checkpoints (some steps, and the end), time passes
//! and the tail check runs until every hint lost for good is repaired (the
//! hub's bound on how late a watcher hears of an event), and every watch must
//! then hold what it is owed. The rules:
//!
//! - a watch session starts at its reply `{"id":..,"ok":{"chat","seq":S}}`;
//!   the client then holds every event up to `after` (`S` without `after`,
//!   or when `after` is beyond the log's end: the reply says where it is);
//! - `event` pushes of a session come in strictly increasing seq, each above
//!   what the client already holds or was told to fetch (never twice);
//! - a push past a gap makes the client fetch the gap; `notify` with `N`
//!   makes it fetch up to `N`;
//! - a session the client did not end owes it every event up to its end:
//!   the first `leave` of its user after the watch read the log, or else the
//!   log's last event; a session the client ended (unwatch, a new watch of
//!   the same connection, its own `leave`) owes nothing after that, and gets
//!   no frame after it either;
//! - every pushed event is the log's event of that seq;
//! - `finish_watch` refuses a watch only if it ended meanwhile: the
//!   connection unwatched it, or its user left after the watch began (or was
//!   no member then).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald_protocol::frame::{EventPush, ok_reply};
use herald_protocol::limits::FETCH_MAX;
use herald_protocol::reply::WatchOk;
use herald_protocol::{Event, EventType};
use proptest::prelude::*;
use serde_json::value::RawValue;

use super::{GAP_WAIT, HOT_NOTIFY_EVERY, Hub, Replay, TAIL_EVERY};
use crate::broker::Sink;
use crate::broker::memory::MemoryBroker;
use crate::model::{ChatInfo, ChatKey, Published};
use crate::outbox::{Frame, Outbox};
use crate::store::{BoxFuture, EventLog, Fetched, Store, StoreError, Write, Written};

/// Connections in a program; connection `c` is user `c % USERS`.
const CONNS: u8 = 3;
const USERS: u8 = 2;
const CHAT: &str = "c";

fn user_of(conn: u8) -> String {
    format!("u{}", conn % USERS)
}

// ---- the model log -------------------------------------------------------------------------

/// One chat's log: events 1..=N, and who is a member now. Reads by the chat
/// layer (with a member) check membership as the real stores do; reads by
/// the hub (no member) take `delay` of (paused) time, so that the program
/// goes on while a repair's read is in flight.
struct ModelLog {
    state: Mutex<LogState>,
    delay: Duration,
}

struct LogState {
    events: Vec<Event>,
    members: HashSet<String>,
}

impl ModelLog {
    fn new(delay: Duration) -> Arc<ModelLog> {
        let members = (0..USERS).map(|u| format!("u{u}")).collect();
        Arc::new(ModelLog { state: Mutex::new(LogState { events: Vec::new(), members }), delay })
    }

    fn latest(&self) -> u64 {
        self.state.lock().unwrap().events.len() as u64
    }

    fn event(&self, seq: u64) -> Event {
        self.state.lock().unwrap().events[seq as usize - 1].clone()
    }

    fn is_member(&self, user: &str) -> bool {
        self.state.lock().unwrap().members.contains(user)
    }

    /// Commits an event of `kind` by `user`; returns its seq.
    fn commit(&self, kind: EventType, user: &str) -> u64 {
        let mut s = self.state.lock().unwrap();
        match kind {
            EventType::Join => {
                s.members.insert(user.to_string());
            }
            EventType::Leave => {
                s.members.remove(user);
            }
            _ => {}
        }
        let seq = s.events.len() as u64 + 1;
        let body = RawValue::from_string(format!("{{\"n\":{seq}}}")).unwrap();
        s.events.push(Event::new(seq, kind, Some(user.to_string()), 0, body));
        seq
    }

    /// Seqs of the leaves of `user`.
    fn leaves_of(&self, user: &str) -> Vec<u64> {
        let s = self.state.lock().unwrap();
        s.events
            .iter()
            .filter(|e| e.kind == EventType::Leave && e.user.as_deref() == Some(user))
            .map(|e| e.seq)
            .collect()
    }

    fn info(s: &LogState) -> ChatInfo {
        ChatInfo { seq: s.events.len() as u64, members: s.members.len() as u64, open: true, profiled: false }
    }
}

impl EventLog for ModelLog {
    fn write(&self, _write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable("the test commits itself".into()))))
    }

    fn chat(&self, _key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
        let info = ModelLog::info(&self.state.lock().unwrap());
        Box::pin(std::future::ready(Ok(Some(info))))
    }

    fn fetch<'a>(
        &'a self,
        _key: &'a ChatKey,
        member: Option<&'a str>,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        Box::pin(async move {
            if member.is_none() && !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            let s = self.state.lock().unwrap();
            if let Some(user) = member
                && !s.members.contains(user)
            {
                return Err(StoreError::Forbidden(format!("{user} is not a member")));
            }
            let info = ModelLog::info(&s);
            let last = info.seq.min(after.saturating_add(u64::from(limit)));
            let events = if after >= last { Vec::new() } else { s.events[after as usize..last as usize].to_vec() };
            Ok(Fetched { events, info, more: last < info.seq })
        })
    }

    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
        Box::pin(async move {
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            let latest = self.latest();
            Ok(keys.iter().map(|_| Some(latest)).collect())
        })
    }

    /// The fake stores no `client_id`s.
    fn client_id_seq<'a>(
        &'a self,
        _key: &'a ChatKey,
        _user: &'a str,
        _client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

crate::store::not_kept!(ModelLog: Lifecycle, Membership, Moderation, RevocationList, WebhookPositions, Conversations, Files, Export);

// ---- programs ------------------------------------------------------------------------------

/// The hub's and the chat layer's settings for one program.
#[derive(Debug, Clone)]
struct Settings {
    /// `Hub::new`'s `hot_deliveries` (0: chats never turn hot).
    hot: u64,
    /// `Hub::new`'s `sync_bytes`.
    sync_bytes: usize,
    /// The chat layer's `replay_events` and `replay_bytes`.
    replay_events: usize,
    replay_bytes: usize,
    /// How long the hub's reads of the log take.
    store_delay: Duration,
    /// The kinds of step this program leaves out.
    swarm: Swarm,
}

/// Kinds of step a program leaves out (swarm testing: a program without,
/// say, deliveries or checkpoints explores what a mix of all rarely does).
#[derive(Clone, Copy)]
struct Swarm(u16);

impl Swarm {
    const KINDS: [&'static str; 10] =
        ["Deliver", "Redeliver", "Unwatch", "Leave", "Join", "Advance", "Yield", "Tail", "Backfill", "Checkpoint"];

    fn kind(op: &Op) -> Option<usize> {
        Some(match op {
            Op::Deliver(_) => 0,
            Op::Redeliver(_) => 1,
            Op::Unwatch(_) => 2,
            Op::Leave { .. } => 3,
            Op::Join(_) => 4,
            Op::Advance(_) => 5,
            Op::Yield => 6,
            Op::Tail => 7,
            Op::Backfill => 8,
            Op::Checkpoint => 9,
            Op::Commit | Op::Watch { .. } => return None,
        })
    }

    fn allows(self, op: &Op) -> bool {
        Swarm::kind(op).is_none_or(|k| self.0 & (1 << k) == 0)
    }
}

impl std::fmt::Debug for Swarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let off: Vec<&str> =
            Swarm::KINDS.iter().enumerate().filter(|(k, _)| self.0 & (1 << k) != 0).map(|(_, n)| *n).collect();
        write!(f, "without {off:?}")
    }
}

fn swarm() -> impl Strategy<Value = Swarm> {
    any::<u16>().prop_map(|m| Swarm(m & ((1 << Swarm::KINDS.len()) - 1)))
}

#[derive(Debug, Clone)]
enum Op {
    /// Commits a message (its hint is delivered by `Deliver`, or never).
    Commit,
    /// Hands the hub the `n`th (mod how many) committed event not handed yet.
    Deliver(u8),
    /// Hands the hub a committed event again (mod the log's length).
    Redeliver(u8),
    /// A watch request of `conn`, with `after` the log's latest seq plus this
    /// offset (floored at 0): `begin_watch` now, the chat layer's read of the
    /// log after `read_in` more steps, `finish_watch` `finish_in` steps after that.
    Watch { conn: u8, after: Option<i8>, read_in: u8, finish_in: u8 },
    /// `conn` unwatches (whether its watch is live, still starting, or none).
    Unwatch(u8),
    /// `conn`'s user leaves (a committed `leave`, delivered like any event);
    /// with `unwatch`, from `conn` itself, whose watch the chat layer ends.
    Leave { conn: u8, unwatch: bool },
    /// User `n` joins again (a committed `join`).
    Join(u8),
    /// Time passes (ms).
    Advance(u16),
    /// The hub's spawned tasks get to run a step.
    Yield,
    /// One tail check (`hub.check_tails()`, as the broker's `may_lose` would schedule).
    Tail,
    /// The broker asks for a catch-up (its subscription confirmed).
    Backfill,
    /// Time passes until every repair is done; then every live watch must hold every event it is owed.
    Checkpoint,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Commit),
        4 => any::<u8>().prop_map(Op::Deliver),
        1 => any::<u8>().prop_map(Op::Redeliver),
        6 => (0..CONNS, proptest::option::of(-4i8..=2), 0u8..12, 0u8..12)
            .prop_map(|(conn, after, read_in, finish_in)| Op::Watch { conn, after, read_in, finish_in }),
        2 => (0..CONNS).prop_map(Op::Unwatch),
        1 => (0..CONNS, any::<bool>()).prop_map(|(conn, unwatch)| Op::Leave { conn, unwatch }),
        1 => (0..USERS).prop_map(Op::Join),
        1 => (0u16..1000).prop_map(Op::Advance),
        1 => Just(Op::Yield),
        1 => Just(Op::Tail),
        1 => Just(Op::Backfill),
        2 => Just(Op::Checkpoint),
    ]
}

fn program() -> impl Strategy<Value = Vec<Op>> {
    // Mostly short programs (a quiet chat right after a race is where a
    // watcher left behind shows), some long ones.
    prop_oneof![2 => proptest::collection::vec(op(), 1..24), 1 => proptest::collection::vec(op(), 24..80)]
}

/// Hot chats off (the server's default), a sync buffer that never overflows,
/// replays of any length.
fn plain_settings() -> impl Strategy<Value = Settings> {
    (prop_oneof![Just(100_000usize), 1usize..4], prop_oneof![Just(0u64), Just(1), Just(5)], swarm()).prop_map(
        |(replay_events, delay_ms, swarm)| Settings {
            hot: 0,
            sync_bytes: 1 << 20,
            replay_events,
            replay_bytes: 1 << 20,
            store_delay: Duration::from_millis(delay_ms),
            swarm,
        },
    )
}

/// Hot chats, a sync buffer that overflows, replays cut short by bytes.
fn stressed_settings() -> impl Strategy<Value = Settings> {
    (
        prop_oneof![Just(0u64), 2u64..6],
        prop_oneof![Just(1usize << 20), 100usize..300],
        prop_oneof![Just(100_000usize), 1usize..4],
        prop_oneof![Just(1usize << 20), 100usize..300],
        prop_oneof![Just(0u64), Just(1), Just(5)],
        swarm(),
    )
        .prop_map(|(hot, sync_bytes, replay_events, replay_bytes, delay_ms, swarm)| Settings {
            hot,
            sync_bytes,
            replay_events,
            replay_bytes,
            store_delay: Duration::from_millis(delay_ms),
            swarm,
        })
}

// ---- the harness ---------------------------------------------------------------------------

/// A watch being started: between `begin_watch` and `finish_watch`.
struct Pending {
    id: u64,
    after: Option<u64>,
    /// The log's latest seq at `begin_watch`.
    begun_at: u64,
    member_at_begin: bool,
    /// The connection unwatched while it started.
    unwatched: bool,
    /// What the chat layer's read returned: latest, replay frames, truncated.
    read: Option<ReplayRead>,
    /// The step after which the log is read, then the steps from there to `finish_watch`.
    read_at: usize,
    finish_in: usize,
    /// The step after which `finish_watch` runs, once the log is read.
    finish_at: usize,
}

/// A watch that went live (its reply was pushed), as its client sees it.
struct Session {
    id: u64,
    after: Option<u64>,
    /// The reply's seq: the log's latest seq when the watch read the log.
    reply_seq: u64,
    /// What the client holds from the start: up to `after`, or up to the
    /// reply's seq without `after` or when `after` is beyond the log's end.
    base: u64,
    /// The highest seq it holds, by replay, pushes and the fetches they prescribe.
    last: u64,
    pushes: Vec<u64>,
    /// The client ended the watch (unwatch, a new watch, its own leave): nothing is owed after that.
    client_ended: bool,
    /// Found wrong at a checkpoint already (reported once).
    reported: bool,
}

struct Harness {
    hub: Arc<Hub>,
    log: Arc<ModelLog>,
    key: ChatKey,
    settings: Settings,
    outboxes: Vec<Arc<Outbox>>,
    /// Per seq (index seq - 1): whether its hint reached the hub.
    delivered: Vec<bool>,
    pending: Vec<Option<Pending>>,
    /// Per connection: a watch whose `finish_watch` pushed its reply, until the client reads it.
    replied: Vec<Option<Pending>>,
    /// Per connection: its latest live watch as the client sees it.
    sessions: Vec<Option<Session>>,
    next_watch_id: u64,
    violations: Vec<String>,
}

impl Harness {
    fn new(settings: Settings) -> Harness {
        let log = ModelLog::new(settings.store_delay);
        let hub = Hub::new(Arc::new(MemoryBroker::new()), log.clone(), settings.hot, settings.sync_bytes);
        Harness {
            hub,
            log,
            key: ChatKey::new("w", CHAT),
            settings,
            outboxes: (0..CONNS).map(|c| Arc::new(Outbox::new(u64::from(c) + 1, 1 << 30))).collect(),
            delivered: Vec::new(),
            pending: (0..CONNS).map(|_| None).collect(),
            replied: (0..CONNS).map(|_| None).collect(),
            sessions: (0..CONNS).map(|_| None).collect(),
            next_watch_id: 1,
            violations: Vec::new(),
        }
    }

    fn conn_id(conn: u8) -> u64 {
        u64::from(conn) + 1
    }

    /// Runs the reads and `finish_watch`es of watches being started that are
    /// due after step `now`, earliest first.
    async fn run_due(&mut self, now: usize) {
        loop {
            let due = (0..CONNS)
                .filter_map(|c| {
                    let p = self.pending[c as usize].as_ref()?;
                    let at = if p.read.is_none() { p.read_at } else { p.finish_at };
                    (at <= now).then_some((at, p.id, c))
                })
                .min();
            let Some((at, _, conn)) = due else { return };
            if self.pending[conn as usize].as_ref().expect("due").read.is_none() {
                self.read(conn, at).await;
            } else {
                self.finish(conn);
            }
        }
    }

    /// The chat layer's read of the log for `conn`'s watch being started, at step `at`.
    async fn read(&mut self, conn: u8, at: usize) {
        let after = self.pending[conn as usize].as_ref().expect("pending").after;
        match read_replay(&*self.log, &self.key, &user_of(conn), after, &self.settings).await {
            Ok(read) => {
                let p = self.pending[conn as usize].as_mut().expect("still pending");
                p.read = Some(read);
                p.finish_at = at.saturating_add(p.finish_in);
            }
            Err(_) => {
                // Not a member: the chat layer's `Starting` guard ends the half-started watch.
                self.pending[conn as usize] = None;
                self.hub.unwatch(&self.key, Self::conn_id(conn));
            }
        }
    }

    /// `finish_watch` of `conn`'s watch being started, with what its read returned.
    fn finish(&mut self, conn: u8) {
        let mut p = self.pending[conn as usize].take().expect("pending");
        let (latest, frames, truncated) = p.read.take().expect("read");
        let reply = Frame::from(ok_reply(p.id as i64, &WatchOk { chat: CHAT.into(), seq: latest }));
        let replay = Replay { reply, latest, frames, truncated };
        if self.hub.finish_watch(&self.key, Self::conn_id(conn), replay) {
            // The reply is in the outbox now: the client reads it and what follows.
            self.replied[conn as usize] = Some(p);
            self.drain();
            return;
        }
        let user = user_of(conn);
        let left_since = self.log.leaves_of(&user).into_iter().any(|l| l > p.begun_at);
        if !p.unwatched && !left_since && p.member_at_begin {
            self.violations.push(format!(
                "watch {} of conn {conn} ({user}, after {:?}, read at seq {latest}) was refused by finish_watch, \
                 though the connection did not unwatch, and {user} was a member at begin_watch (log at seq {}) \
                 and did not leave since; {user}'s leaves: {:?}",
                p.id,
                p.after,
                p.begun_at,
                self.log.leaves_of(&user)
            ));
        }
        // The chat layer's `Starting` guard.
        self.hub.unwatch(&self.key, Self::conn_id(conn));
    }

    /// Hands every connection what its outbox holds, in order.
    fn drain(&mut self) {
        for conn in 0..CONNS {
            let mut frames = Vec::new();
            self.outboxes[conn as usize].drain(usize::MAX, &mut frames);
            for f in frames {
                self.client_frame(conn, f.as_str());
            }
        }
    }

    /// The client ends `conn`'s live watch: nothing after this point is owed to it.
    fn client_ends(&mut self, conn: u8) {
        self.drain();
        if let Some(s) = &mut self.sessions[conn as usize] {
            s.client_ended = true;
        }
    }

    fn deliver(&self, seq: u64) {
        self.hub.deliver(Published::new(self.key.clone(), &self.log.event(seq)));
    }

    async fn settle(&self) {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    /// Runs `op`, step `now` of the program.
    async fn step(&mut self, now: usize, op: &Op) {
        match *op {
            Op::Commit => {
                self.log.commit(EventType::Message, "author");
                self.delivered.push(false);
            }
            Op::Deliver(n) => {
                let undelivered: Vec<u64> =
                    (1..=self.delivered.len() as u64).filter(|s| !self.delivered[*s as usize - 1]).collect();
                if !undelivered.is_empty() {
                    let seq = undelivered[n as usize % undelivered.len()];
                    self.delivered[seq as usize - 1] = true;
                    self.deliver(seq);
                }
            }
            Op::Redeliver(n) => {
                let latest = self.log.latest();
                if latest > 0 {
                    let seq = 1 + u64::from(n) % latest;
                    self.delivered[seq as usize - 1] = true;
                    self.deliver(seq);
                }
            }
            Op::Watch { conn, after, read_in, finish_in } => {
                if self.pending[conn as usize].is_some() {
                    return;
                }
                // A new watch of the same connection supersedes its live one.
                self.client_ends(conn);
                let latest = self.log.latest();
                let after = after.map(|d| latest.saturating_add_signed(i64::from(d)));
                let user: Arc<str> = user_of(conn).into();
                let id = self.next_watch_id;
                self.next_watch_id += 1;
                self.pending[conn as usize] = Some(Pending {
                    id,
                    after,
                    begun_at: latest,
                    member_at_begin: self.log.is_member(&user),
                    unwatched: false,
                    read: None,
                    read_at: now + usize::from(read_in),
                    finish_in: usize::from(finish_in),
                    finish_at: usize::MAX,
                });
                self.hub.begin_watch(&self.key, &user, &self.outboxes[conn as usize]);
            }
            Op::Unwatch(conn) => {
                self.hub.unwatch(&self.key, Self::conn_id(conn));
                if let Some(p) = &mut self.pending[conn as usize] {
                    p.unwatched = true;
                }
                self.client_ends(conn);
            }
            Op::Leave { conn, unwatch } => {
                let user = user_of(conn);
                if !self.log.is_member(&user) {
                    return;
                }
                self.log.commit(EventType::Leave, &user);
                self.delivered.push(false);
                if unwatch {
                    // chat.rs's `leave`: the write (and its publish, here a later `Deliver`), then the unwatch.
                    self.hub.unwatch(&self.key, Self::conn_id(conn));
                    if let Some(p) = &mut self.pending[conn as usize] {
                        p.unwatched = true;
                    }
                    self.client_ends(conn);
                }
            }
            Op::Join(u) => {
                let user = format!("u{u}");
                if self.log.is_member(&user) {
                    return;
                }
                self.log.commit(EventType::Join, &user);
                self.delivered.push(false);
            }
            Op::Advance(ms) => {
                tokio::time::sleep(Duration::from_millis(u64::from(ms))).await;
                self.settle().await;
            }
            Op::Yield => tokio::task::yield_now().await,
            Op::Tail => {
                self.hub.check_tails().await;
            }
            Op::Backfill => {
                self.hub.catch_up(&self.key);
                self.settle().await;
            }
            Op::Checkpoint => self.checkpoint().await,
        }
    }

    /// Lets every timer fire and the tail check repair every hint lost for
    /// good (the hub's bound on how late a watcher hears of an event), then
    /// checks that every live watch holds what it is owed.
    async fn checkpoint(&mut self) {
        for _ in 0..3 {
            tokio::time::sleep(GAP_WAIT * 2).await;
            self.settle().await;
            self.hub.check_tails().await;
            self.settle().await;
            tokio::time::sleep(TAIL_EVERY).await;
            self.hub.check_tails().await;
            self.settle().await;
            tokio::time::sleep(HOT_NOTIFY_EVERY * 2).await;
            self.settle().await;
        }
        self.drain();
        for conn in 0..CONNS {
            self.check_owed(conn);
        }
    }

    /// A frame of `conn`'s outbox, read as a client following the protocol would.
    fn client_frame(&mut self, conn: u8, text: &str) {
        let v: serde_json::Value = serde_json::from_str(text).expect("frames are JSON");
        if let Some(id) = v["id"].as_u64() {
            let p = self.replied[conn as usize].take().expect("a reply of a watch that finished");
            assert_eq!(p.id, id);
            let reply_seq = v["ok"]["seq"].as_u64().expect("watch reply seq");
            let base = p.after.unwrap_or(reply_seq).min(reply_seq);
            self.sessions[conn as usize] = Some(Session {
                id,
                after: p.after,
                reply_seq,
                base,
                last: base,
                pushes: Vec::new(),
                client_ended: false,
                reported: false,
            });
            return;
        }
        let ev = v["ev"].as_str().unwrap_or("?");
        let seq = v["seq"].as_u64().expect("pushes carry a seq");
        let latest = self.log.latest();
        let Some(s) = &mut self.sessions[conn as usize] else {
            self.violations.push(format!("conn {conn} got {text} before any watch reply"));
            return;
        };
        if s.client_ended {
            self.violations.push(format!("watch {} of conn {conn} got {text} after the client ended it", s.id));
            return;
        }
        match ev {
            "event" => {
                s.pushes.push(seq);
                if seq <= s.last {
                    self.violations.push(format!(
                        "watch {} of conn {conn} (start {}) was pushed seq {seq} while holding (or told to fetch) \
                         up to {}: pushes {:?}",
                        s.id, s.base, s.last, s.pushes
                    ));
                    return;
                }
                if seq > latest {
                    self.violations.push(format!("watch {} was pushed seq {seq}, never committed", s.id));
                    return;
                }
                let stored = self.log.event(seq);
                if v["type"].as_str() != Some(stored.kind.as_str())
                    || v["user"].as_str() != stored.user.as_deref()
                    || v["body"] != serde_json::from_str::<serde_json::Value>(stored.body.get()).unwrap()
                {
                    self.violations.push(format!("watch {} was pushed {text}, not the log's event {seq}", s.id));
                }
                // The gap (last, seq), if any, is fetched: the client holds up to seq now.
                s.last = seq;
            }
            "notify" => {
                if seq > latest {
                    self.violations.push(format!("watch {} was notified of seq {seq}, never committed", s.id));
                }
                // The client fetches up to seq.
                s.last = s.last.max(seq);
            }
            _ => self.violations.push(format!("conn {conn}: unexpected frame {text}")),
        }
    }

    /// Checks that `conn`'s live watch holds (by pushes and the fetches they
    /// prescribe) what it is owed now: everything up to its user's first
    /// leave after the watch read the log, or else up to the log's end.
    fn check_owed(&mut self, conn: u8) {
        let latest = self.log.latest();
        let user = user_of(conn);
        let leaves = self.log.leaves_of(&user);
        let Some(s) = &mut self.sessions[conn as usize] else { return };
        if s.client_ended || s.reported {
            return;
        }
        let leave = leaves.iter().copied().find(|&l| l > s.reply_seq);
        let owed = leave.unwrap_or(latest);
        if s.last < owed {
            s.reported = true;
            self.violations.push(format!(
                "watch {} of conn {conn} ({user}, after {:?}, reply seq {}) holds events up to {} only, after \
                 pushes {:?} and the fetches they prescribe; it is owed everything up to {owed} ({}); {user}'s \
                 leaves: {leaves:?}",
                s.id,
                s.after,
                s.reply_seq,
                s.last,
                s.pushes,
                if leave.is_some() { "its user's leave" } else { "the log's end" },
            ));
        } else if s.last > owed {
            s.reported = true;
            self.violations.push(format!(
                "watch {} of conn {conn} ({user}) was told of events up to {}, past its end at its user's leave \
                 {owed}",
                s.id, s.last
            ));
        }
    }
}

/// What a watch's read of the log gives: the latest seq, the replay, whether it was cut short.
type ReplayRead = (u64, Vec<(u64, Frame)>, bool);

/// `Chats::read_replay`, over `store`, with `settings`' limits.
async fn read_replay(
    store: &dyn Store,
    key: &ChatKey,
    user: &str,
    after: Option<u64>,
    settings: &Settings,
) -> Result<ReplayRead, StoreError> {
    let Some(mut after) = after else {
        let f = store.fetch(key, Some(user), 0, 0).await?;
        return Ok((f.info.seq, Vec::new(), false));
    };
    let (mut frames, mut bytes) = (Vec::new(), 0usize);
    loop {
        let f = store.fetch(key, Some(user), after, FETCH_MAX).await?;
        for e in &f.events {
            let frame = Frame::from(EventPush::new(&key.chat, e).encode());
            bytes += frame.as_str().len();
            if frames.len() >= settings.replay_events || bytes > settings.replay_bytes {
                return Ok((f.info.seq, frames, true));
            }
            frames.push((e.seq, frame));
        }
        match f.events.last() {
            Some(last) if f.more => after = last.seq,
            _ => return Ok((f.info.seq, frames, false)),
        }
    }
}

thread_local! {
    /// While a [`run`] is on this thread, the panics on it (the hub's spawned
    /// tasks run here too, and tokio would swallow theirs); `None` otherwise.
    static PANICS: std::cell::RefCell<Option<Vec<String>>> = const { std::cell::RefCell::new(None) };
}

/// Installs (once) a panic hook that records the panics of a [`run`] in
/// [`PANICS`] instead of printing them, and leaves every other panic as it was.
fn record_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
            let message = format!("{}{at}", info.payload_as_str().unwrap_or("?"));
            let recorded =
                PANICS.try_with(|p| p.borrow_mut().as_mut().map(|p| p.push(message)).is_some()).unwrap_or(false);
            if !recorded {
                previous(info);
            }
        }));
    });
}

/// Runs `ops` on a fresh hub in a paused-time runtime; returns the violations
/// found, a panic of the hub's included.
fn run(settings: Settings, ops: &[Op]) -> Vec<String> {
    record_panics();
    PANICS.with(|p| *p.borrow_mut() = Some(Vec::new()));
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
        rt.block_on(async {
            let mut h = Harness::new(settings.clone());
            for (now, op) in ops.iter().filter(|op| settings.swarm.allows(op)).enumerate() {
                h.step(now, op).await;
                h.run_due(now).await;
            }
            // The requests still running finish.
            h.run_due(usize::MAX).await;
            h.checkpoint().await;
            h.violations
        })
    }));
    let panics = PANICS.with(|p| p.borrow_mut().take()).unwrap_or_default();
    let mut violations = outcome.unwrap_or_default();
    violations.extend(panics.into_iter().map(|m| format!("panicked: {m}")));
    violations
}

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    /// Hot chats off, sync buffers that never overflow (the defaults).
    #[test]
    fn every_watcher_gets_every_event_once_in_order(settings in plain_settings(), ops in program()) {
        let violations = run(settings, &ops);
        prop_assert!(violations.is_empty(), "{:#?}", violations);
    }

    /// Hot chats, overflowing sync buffers and replays cut short by bytes too.
    #[test]
    fn every_watcher_gets_every_event_once_in_order_hot_and_cramped(
        settings in stressed_settings(),
        ops in program(),
    ) {
        let violations = run(settings, &ops);
        prop_assert!(violations.is_empty(), "{:#?}", violations);
    }
}

// ---- minimal cases the properties found ------------------------------------------------------

fn plain() -> Settings {
    Settings {
        hot: 0,
        sync_bytes: 1 << 20,
        replay_events: 100_000,
        replay_bytes: 1 << 20,
        store_delay: Duration::ZERO,
        swarm: Swarm(0),
    }
}

fn watch(conn: u8, read_in: u8, finish_in: u8) -> Op {
    Op::Watch { conn, after: None, read_in, finish_in }
}

/// The first watch of a chat reads the log; its user's `leave` is committed
/// and reaches the hub (held: the sequencer has no start yet) before
/// `finish_watch`, which starts the sequencer, releases the `leave`, which
/// ends the watch being finished; `finish_watch` then panics on it.
#[test]
fn a_leave_released_by_the_first_finish_watch_ends_that_watch_without_a_panic() {
    let ops = [watch(1, 0, 2), Op::Leave { conn: 1, unwatch: false }, Op::Deliver(0)];
    assert_eq!(run(plain(), &ops), Vec::<String>::new());
}

/// Two first watches of a chat: A reads the log (latest 0), event 1 is
/// committed, B reads (latest 1) and finishes first, starting the sequencer
/// at 2 (1's hint is dropped as old); A finishes with nothing telling it of 1.
#[test]
fn a_watch_that_read_the_log_before_another_finished_first_misses_nothing() {
    let ops = [watch(0, 0, 4), watch(1, 1, 0), Op::Commit, Op::Deliver(0), Op::Yield];
    assert_eq!(run(plain(), &ops), Vec::<String>::new());
}

/// As above, with the event between the two reads a `leave` of A's user: A
/// never sees it end its watch, and is pushed the chat's later events.
#[test]
fn a_leave_after_a_watch_read_the_log_ends_it_even_if_another_watch_finished_first() {
    let ops = [watch(2, 2, 0), watch(1, 0, 1), Op::Leave { conn: 1, unwatch: false }, Op::Commit];
    assert_eq!(run(plain(), &ops), Vec::<String>::new());
}

/// u1 leaves (seq 1) and joins again (seq 2); then conn 1 (u1) watches, live
/// from seq 3. The hub, behind on the log (hints lost), catches up 1..=3:
/// the old `leave` ends the new watch, which gets nothing more.
#[test]
fn a_leave_from_before_a_rejoin_does_not_end_a_later_watch() {
    let ops = [watch(0, 0, 0), Op::Leave { conn: 1, unwatch: false }, Op::Join(1), watch(1, 0, 0), Op::Commit];
    assert_eq!(run(plain(), &ops), Vec::<String>::new());
}

/// As above, the old `leave` arriving while the new watch starts: it is refused.
#[test]
fn a_leave_from_before_a_rejoin_does_not_refuse_a_later_watch() {
    let ops = [watch(0, 0, 0), Op::Leave { conn: 1, unwatch: false }, Op::Join(1), watch(1, 0, 1), Op::Deliver(0)];
    assert_eq!(run(plain(), &ops), Vec::<String>::new());
}
