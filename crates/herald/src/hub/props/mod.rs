//! Property tests of the hub's sequencer and watch hand-off.
//!
//! A random program drives one hub over a model log: commits (messages,
//! joins, leaves), deliveries of committed events to the hub in any order,
//! duplicated or never (reordered and lost hints), watches with any `after`
//! split into their three real steps (`begin_watch`, the chat layer's read of
//! the log as `chat::Live::read_replay` does it, `finish_watch`) that other steps
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

use std::sync::Arc;
use std::time::Duration;

use herald_protocol::EventType;
use herald_protocol::frame::{EventPush, ok_reply};
use herald_protocol::limits::FETCH_MAX;
use herald_protocol::reply::WatchOk;
use proptest::prelude::*;

use super::{GAP_WAIT, HOT_NOTIFY_EVERY, Hub, Replay, TAIL_EVERY};
use crate::broker::Sink;
use crate::broker::memory::MemoryBroker;
use crate::model::{ChatKey, Published};
use crate::outbox::{Frame, Outbox};
use crate::store::{Store, StoreError};

/// Connections in a program; connection `c` is user `c % USERS`.
const CONNS: u8 = 3;
const USERS: u8 = 2;
const CHAT: &str = "c";

fn user_of(conn: u8) -> String {
    format!("u{}", conn % USERS)
}

mod cases;
mod model;
mod program;

use model::ModelLog;
use program::{Op, Settings, Swarm, plain_settings, program, stressed_settings};

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
                    // `chat::Members::leave`: the write (and its publish, here a later `Deliver`), then the unwatch.
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

/// `chat::Live::read_replay`, over `store`, with `settings`' limits.
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
