//! Typing and presence: ephemeral, never stored, never sequenced. The hub
//! already knows who watches what on this node, so it turns them into pushes.
//!
//! - Typing: the typist's node pushes `{"ev":"typing"}` to its own watchers
//!   of the chat, except the typist's connections, and sends one `Typing`
//!   signal on the chat's subject; every other node with watchers does the
//!   same push. At most once per [`TYPING_EVERY`] per member and chat, decided
//!   by the typist's node ([`Live::admit_typing`]).
//! - Presence: a watch counts once it is live; each node keeps its local set
//!   and what the others said ([`super::book::Presence`]), sends a
//!   `Delta` per change of its local set and a `Beat` [`BEAT_AFTER`] a burst
//!   of them, and answers `Ask`s with its whole set. A node that starts
//!   watching a chat asks every node once its subscription is live. A node
//!   the cell stopped hearing of ([`crate::cluster::Cluster::live`]) loses
//!   its users after [`super::book::REMOTE_TTL`], checked every [`SWEEP_EVERY`].
//!   A departure another node tells of is held for
//!   [`super::book::LEAVE_GRACE`] and pushed only if the user is not
//!   back by then: a user moving between two other nodes is not flapped.
//!
//! Pushes: each user's change while the chat has at most
//! [`PRESENCE_USERS_MAX`] present users; above, the count, at most every
//! [`COUNT_EVERY`] and only when it changed, so a chat of thousands of users
//! coming and going costs its watchers one frame per 5 s, and this node
//! O(log n) per change.
//!
//! Two owners: [`Live`], the node's side (who it is in its cell, the
//! typing gate, the signals it sends), and [`ChatLive`], one chat's
//! presence, held by the chat's entry under its lock. Neither spawns: the
//! timers a change needs come back as [`Timers`], which the entry runs.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use herald_protocol::frame::{presence_count_push, presence_user_push};
use herald_protocol::reply::{PRESENCE_USERS_MAX, PresenceOk};

use super::book::{Change, FULL_CHECK_EVERY, Presence};
use super::digest::DigestBeat;
use crate::broker::Broker;
use crate::broker::bus::Bus;
use crate::hub::watchers::Watchers;
use crate::model::{ChatKey, Signal};
use crate::outbox::Frame;

/// One member's typing in one chat is pushed at most once in this window.
pub const TYPING_EVERY: Duration = Duration::from_secs(2);
/// Above [`PRESENCE_USERS_MAX`] present users, the count is pushed at most this often.
pub const COUNT_EVERY: Duration = Duration::from_secs(5);
/// A beat follows a burst of deltas after this long: well inside the 2 s in
/// which every node must agree, long enough to cover a burst with one beat.
pub const BEAT_AFTER: Duration = Duration::from_millis(500);
/// How often nodes the cell no longer hears of are looked for.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// Sweeps this far apart (twice the period) mean the node was paused or
/// starved: it distrusts its expiry and asks the cell instead
/// (`Hub::sweep`). A shorter pause cannot expire anyone: a node is expired
/// only when its last announcement (one a second) is 3 s old.
pub const PAUSED_AFTER: Duration = Duration::from_secs(2);
/// How long `presence` waits for other nodes' answers when no watcher of the
/// chat is on this node (every node with one answers within a NATS round trip).
pub const GATHER_WAIT: Duration = Duration::from_millis(200);
/// Typing gate entries kept before the gate drops expired ones.
const TYPING_GATE_MIN: usize = 1024;

/// The node's side of typing and presence.
pub(in crate::hub) struct Live {
    broker: Arc<dyn Broker>,
    /// This node in its cell (unset on a node alone).
    cell: OnceLock<CellView>,
    /// The last presence epoch given to a chat entry.
    epochs: AtomicU64,
    /// When each member last had a typing push, per chat.
    typing: Mutex<TypingGate>,
}

/// This node within its cell, for presence.
struct CellView {
    /// This node's incarnation, named in every presence signal.
    me: String,
    /// Whether the cell still hears of an incarnation.
    live: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    /// The cell's bus, for the full check's digests ([`super::digest`]).
    bus: Arc<dyn Bus>,
}

/// When each (chat, member) last had a typing push.
#[derive(Default)]
struct TypingGate {
    last: HashMap<(ChatKey, Arc<str>), Instant>,
    /// Size at which expired entries are dropped: the map never just grows.
    prune_at: usize,
}

/// A chat's presence state on this node, kept by its entry.
pub(in crate::hub) struct ChatLive {
    presence: Presence,
    /// This entry's presence epoch (numbers its deltas).
    epoch: u64,
    beat_timer: bool,
    /// The count last pushed, and when.
    count_pushed: Option<(u64, Instant)>,
    count_timer: bool,
    /// Whether a timer for the held departures ([`ChatLive::settle`]) runs.
    settle_timer: bool,
    /// When the sweep next beats for the full check (with local users).
    next_check: Instant,
}

/// Timers a presence change asks its entry to start.
#[must_use]
#[derive(Default)]
pub(in crate::hub) struct Timers {
    /// [`ChatLive::beat`] after [`BEAT_AFTER`].
    pub(in crate::hub) beat: bool,
    /// [`ChatLive::count_due`] after this long.
    pub(in crate::hub) count_in: Option<Duration>,
    /// [`ChatLive::settle`] after this long.
    pub(in crate::hub) settle_in: Option<Duration>,
}

impl Timers {
    fn and(mut self, other: Timers) -> Timers {
        self.beat |= other.beat;
        self.count_in = self.count_in.or(other.count_in);
        self.settle_in = self.settle_in.or(other.settle_in);
        self
    }
}

impl Live {
    pub(in crate::hub) fn new(broker: Arc<dyn Broker>) -> Live {
        Live { broker, cell: OnceLock::new(), epochs: AtomicU64::new(0), typing: Mutex::default() }
    }

    /// Who this node is in its cell, how to know whether another node is
    /// alive, and the cell's bus. Set once, before serving; a node alone never sets it.
    pub(in crate::hub) fn set_cell(
        &self,
        me: String,
        live: Arc<dyn Fn(&str) -> bool + Send + Sync>,
        bus: Arc<dyn Bus>,
    ) {
        let _ = self.cell.set(CellView { me, live, bus });
    }

    pub(in crate::hub) fn me(&self) -> &str {
        self.cell.get().map_or("local", |c| c.me.as_str())
    }

    /// Where the full check's digests go (a node in a cell).
    pub(in crate::hub) fn digest_bus(&self) -> Option<&Arc<dyn Bus>> {
        self.cell.get().map(|c| &c.bus)
    }

    /// A new chat entry's presence, with its own epoch.
    pub(in crate::hub) fn new_chat(&self) -> ChatLive {
        let epoch = self.epochs.fetch_add(1, Ordering::Relaxed) + 1;
        // Entries made together spread their full checks over the period.
        let spread = FULL_CHECK_EVERY.as_millis() as u64;
        let offset = Duration::from_millis(epoch.wrapping_mul(7_919) % spread);
        ChatLive {
            presence: Presence::default(),
            epoch,
            beat_timer: false,
            count_pushed: None,
            count_timer: false,
            settle_timer: false,
            next_check: Instant::now() + offset,
        }
    }

    /// Whether `user`'s typing in `key` is pushed now: once per [`TYPING_EVERY`].
    pub(in crate::hub) fn admit_typing(&self, key: &ChatKey, user: &Arc<str>, now: Instant) -> bool {
        let mut gate = self.typing.lock().expect("typing gate lock");
        let slot = (key.clone(), user.clone());
        if gate.last.get(&slot).is_some_and(|at| now.duration_since(*at) < TYPING_EVERY) {
            return false;
        }
        gate.last.insert(slot, now);
        if gate.last.len() >= gate.prune_at.max(TYPING_GATE_MIN) {
            gate.last.retain(|_, at| now.duration_since(*at) < TYPING_EVERY);
            gate.prune_at = gate.last.len() * 2;
        }
        true
    }

    /// Tells the other nodes `signal` about `key`.
    pub(in crate::hub) fn send_signal(&self, key: &ChatKey, signal: &Signal) {
        self.broker.signal(key, signal);
    }

    /// Tells the other nodes that `user` types in `key`.
    pub(in crate::hub) fn send_typing(&self, key: &ChatKey, user: &str) {
        self.broker.signal(key, &Signal::Typing { user: user.to_string() });
    }

    /// Asks every node for its present users of `key` (a new entry knows nobody's yet).
    pub(in crate::hub) fn ask_everyone(&self, key: &ChatKey) {
        self.broker.signal(key, &Signal::Ask { of: None });
    }

    /// The present users of `key` as the other nodes answer within
    /// [`GATHER_WAIT`] (this node has no watcher of it).
    pub(in crate::hub) async fn gather(&self, key: &ChatKey) -> PresenceOk {
        let answers = self.broker.gather(key, &Signal::Ask { of: None }, GATHER_WAIT).await;
        let mut users = BTreeSet::new();
        for answer in answers {
            if let Signal::State { users: part, .. } = answer {
                users.extend(part);
            }
        }
        PresenceOk { count: users.len() as u64, users: users.into_iter().take(PRESENCE_USERS_MAX).collect() }
    }

    /// Whether an `Ask` for `of` is this node's to answer: one naming no node is every node's.
    pub(in crate::hub) fn asked(&self, of: Option<&str>) -> bool {
        of.is_none_or(|of| of == self.me())
    }

    /// Sends an answer to an `Ask` about `key`: to `reply`, or on the chat's subject. The chat's
    /// entry, if this node has one, answers with it under its own lock ([`ChatLive::answer`]).
    pub(in crate::hub) fn answer_to<'a>(&'a self, key: &'a ChatKey, reply: Option<&'a str>) -> impl Fn(&Signal) + 'a {
        move |part: &Signal| match reply {
            Some(to) => self.broker.answer(to, part),
            None => self.broker.signal(key, part),
        }
    }

    /// The answer of a node with no entry of the chat, asked by name: its set is empty.
    pub(in crate::hub) fn answer_empty(&self, answer: &dyn Fn(&Signal)) {
        answer(&Presence::default().state(self.me(), 0)[0]);
    }

    /// Whether nodes the cell no longer hears of are to be swept (a node alone has none).
    pub(in crate::hub) fn in_cell(&self) -> bool {
        self.cell.get().is_some()
    }
}

impl ChatLive {
    /// The chat's present users; the count, and the first [`PRESENCE_USERS_MAX`].
    pub(in crate::hub) fn snapshot(&self) -> PresenceOk {
        PresenceOk { count: self.presence.count() as u64, users: self.presence.users(PRESENCE_USERS_MAX) }
    }

    /// Answers an `Ask` with this node's set (`named`: the ask named this
    /// node, which answers even with nobody present). Called under the
    /// chat's lock, so no delta of this node passes its state.
    pub(in crate::hub) fn answer(&self, live: &Live, named: bool, answer: &dyn Fn(&Signal)) {
        if named || self.presence.has_local() {
            for part in self.presence.state(live.me(), self.epoch) {
                answer(&part);
            }
        }
    }

    /// A watch of `user` went live: one more of their connections here.
    pub(in crate::hub) fn present(
        &mut self,
        live: &Live,
        key: &ChatKey,
        watchers: &Watchers,
        user: &Arc<str>,
    ) -> Timers {
        match self.presence.add_local(user) {
            Some((n, change)) => self.local_changed(live, key, watchers, user, n, true, change),
            None => Timers::default(),
        }
    }

    /// A live watch of `user` ended.
    pub(in crate::hub) fn absent(
        &mut self,
        live: &Live,
        key: &ChatKey,
        watchers: &Watchers,
        user: &Arc<str>,
    ) -> Timers {
        match self.presence.remove_local(user) {
            Some((n, change)) => self.local_changed(live, key, watchers, user, n, false, change),
            None => Timers::default(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn local_changed(
        &mut self,
        live: &Live,
        key: &ChatKey,
        watchers: &Watchers,
        user: &str,
        n: u64,
        present: bool,
        change: Option<Change>,
    ) -> Timers {
        // A node alone has nobody to tell.
        let in_cell = live.in_cell();
        if in_cell {
            let delta = Signal::Delta { from: live.me().into(), epoch: self.epoch, n, user: user.into(), present };
            live.broker.signal(key, &delta);
        }
        let beat = in_cell && !std::mem::replace(&mut self.beat_timer, true);
        Timers { beat, ..Timers::default() }.and(self.apply(key, watchers, change.into_iter().collect()))
    }

    /// The beat timer fired: tells the other nodes the latest delta number.
    pub(in crate::hub) fn beat(&mut self, live: &Live, key: &ChatKey) {
        self.beat_timer = false;
        let beat = Signal::Beat { from: live.me().into(), epoch: self.epoch, n: self.presence.sent() };
        live.broker.signal(key, &beat);
    }

    /// Turns changes of the union into pushes to this node's live watchers.
    fn apply(&mut self, key: &ChatKey, watchers: &Watchers, changes: Vec<Change>) -> Timers {
        if changes.is_empty() {
            return Timers::default();
        }
        metrics::counter!("herald_presence_changes_total").increment(changes.len() as u64);
        if self.presence.count() > PRESENCE_USERS_MAX {
            return Timers { count_in: self.count_changed(key, watchers), ..Timers::default() };
        }
        let mut pushed = 0u64;
        for (user, present) in changes {
            let frame = Frame::from(presence_user_push(&key.chat, &user, present));
            pushed += watchers.push_presence(&frame);
        }
        metrics::counter!("herald_presence_pushes_total").increment(pushed);
        Timers::default()
    }

    /// Above [`PRESENCE_USERS_MAX`]: pushes the count now if the last push is
    /// [`COUNT_EVERY`] old, else asks for [`ChatLive::count_due`] once that
    /// much time has passed.
    fn count_changed(&mut self, key: &ChatKey, watchers: &Watchers) -> Option<Duration> {
        let count = self.presence.count() as u64;
        let now = Instant::now();
        match self.count_pushed {
            Some((pushed, _)) if pushed == count => {}
            Some((_, at)) if now.duration_since(at) < COUNT_EVERY => {
                if !self.count_timer {
                    self.count_timer = true;
                    return Some(COUNT_EVERY - now.duration_since(at));
                }
            }
            _ => self.push_count(key, watchers, count),
        }
        None
    }

    /// The count timer fired: pushes the count if it is still above
    /// [`PRESENCE_USERS_MAX`] and not what was pushed last.
    pub(in crate::hub) fn count_due(&mut self, key: &ChatKey, watchers: &Watchers) {
        self.count_timer = false;
        let count = self.presence.count() as u64;
        if count as usize > PRESENCE_USERS_MAX && self.count_pushed.is_none_or(|p| p.0 != count) {
            self.push_count(key, watchers, count);
        }
    }

    fn push_count(&mut self, key: &ChatKey, watchers: &Watchers, count: u64) {
        let frame = Frame::from(presence_count_push(&key.chat, count));
        let pushed = watchers.push_presence(&frame);
        self.count_pushed = Some((count, Instant::now()));
        metrics::counter!("herald_presence_pushes_total").increment(pushed);
    }

    /// A presence signal (`Delta`, `Beat`, `State`) of another node.
    pub(in crate::hub) fn receive(
        &mut self,
        live: &Live,
        key: &ChatKey,
        watchers: &Watchers,
        signal: &Signal,
    ) -> Timers {
        let now = Instant::now();
        let outcome = self.presence.receive(signal, now);
        if let Some(of) = outcome.ask {
            live.broker.signal(key, &Signal::Ask { of: Some(of) });
        }
        self.apply(key, watchers, outcome.changes).and(self.settle_later(now))
    }

    /// A departure another node told of is held ([`super::book::LEAVE_GRACE`]): asks for
    /// [`ChatLive::settle`] when the first one ends, unless already asked.
    fn settle_later(&mut self, now: Instant) -> Timers {
        match self.presence.next_settle() {
            Some(at) if !self.settle_timer => {
                self.settle_timer = true;
                Timers { settle_in: Some(at.saturating_duration_since(now)), ..Timers::default() }
            }
            _ => Timers::default(),
        }
    }

    /// The held departures' timer fired: those due and not back stop being
    /// present now, pushed as any change; asks again for the rest.
    pub(in crate::hub) fn settle(&mut self, key: &ChatKey, watchers: &Watchers) -> Timers {
        self.settle_timer = false;
        let now = Instant::now();
        let changes = self.presence.settle(now);
        self.apply(key, watchers, changes).and(self.settle_later(now))
    }

    /// After a broker reconnect: asks the others again and tells them this
    /// node's latest delta number, so both sides repair what was lost.
    pub(in crate::hub) fn resync(&self, live: &Live, key: &ChatKey) {
        live.broker.signal(key, &Signal::Ask { of: None });
        let beat = Signal::Beat { from: live.me().into(), epoch: self.epoch, n: self.presence.sent() };
        live.broker.signal(key, &beat);
    }

    /// This node was paused (see [`Presence::distrust`]): asks every node it
    /// knows of here by name, and anyone else, for their sets, and tells
    /// them this node's latest delta number, instead of expiring them.
    pub(in crate::hub) fn after_pause(&mut self, live: &Live, key: &ChatKey, now: Instant) {
        for of in self.presence.distrust(now) {
            live.broker.signal(key, &Signal::Ask { of: Some(of) });
        }
        self.resync(live, key);
    }

    /// Drops the users of nodes the cell no longer hears of, asks again what
    /// went unanswered, and beats once per [`FULL_CHECK_EVERY`] while users
    /// are present here (the full check: a node whose set of this node's
    /// users differs learns it from the number and asks). The beat goes into
    /// `beats`, the node's digest; a burst's beat about to go stands for it.
    pub(in crate::hub) fn sweep(
        &mut self,
        live: &Live,
        key: &ChatKey,
        watchers: &Watchers,
        now: Instant,
        beats: &mut Vec<DigestBeat>,
    ) -> Timers {
        let Some(cell) = live.cell.get() else { return Timers::default() };
        if now >= self.next_check {
            self.next_check = now + FULL_CHECK_EVERY;
            if self.presence.has_local() && !self.beat_timer {
                beats.push((key.ws.clone(), key.chat.clone(), self.epoch, self.presence.sent()));
            }
        }
        let (changes, again) = self.presence.expire(|from| (cell.live)(from), now);
        for of in again {
            live.broker.signal(key, &Signal::Ask { of: Some(of) });
        }
        if !changes.is_empty() {
            metrics::counter!("herald_presence_expired_total").increment(changes.len() as u64);
        }
        self.apply(key, watchers, changes)
    }
}
