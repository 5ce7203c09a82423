//! Typing and presence: ephemeral, never stored, never sequenced. The hub
//! already knows who watches what on this node, so it turns them into pushes.
//!
//! - Typing: the typist's node pushes `{"ev":"typing"}` to its own watchers
//!   of the chat, except the typist's connections, and sends one `Typing`
//!   signal on the chat's subject; every other node with watchers does the
//!   same push. At most once per [`TYPING_EVERY`] per member and chat, decided
//!   by the typist's node ([`Hub::admit_typing`]).
//! - Presence: a watch counts once it is live; each node keeps its local set
//!   and what the others said ([`presence::Presence`]), sends a `Delta` per
//!   change of its local set and a `Beat` [`BEAT_AFTER`] a burst of them, and
//!   answers `Ask`s with its whole set. A node that starts watching a chat
//!   asks every node once its subscription is live. A node the cell stopped
//!   hearing of ([`crate::cluster::Cluster::live`]) loses its users after
//!   [`presence::REMOTE_TTL`], checked every [`SWEEP_EVERY`].
//!
//! Pushes: each user's change while the chat has at most
//! [`PRESENCE_USERS_MAX`] present users; above, the count, at most every
//! [`COUNT_EVERY`] and only when it changed, so a chat of thousands of users
//! coming and going costs its watchers one frame per 5 s, and this node
//! O(log n) per change.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use herald_protocol::frame::{presence_count_push, presence_user_push, typing_push};
use herald_protocol::reply::{PRESENCE_USERS_MAX, PresenceOk};

use super::presence::{Change, Presence};
use super::{ChatState, Hub, Watched};
use crate::model::{ChatKey, Signal};
use crate::outbox::{ConnId, Frame};

/// One member's typing in one chat is pushed at most once in this window.
pub const TYPING_EVERY: Duration = Duration::from_secs(2);
/// Above [`PRESENCE_USERS_MAX`] present users, the count is pushed at most this often.
pub const COUNT_EVERY: Duration = Duration::from_secs(5);
/// A beat follows a burst of deltas after this long: well inside the 2 s in
/// which every node must agree, long enough to cover a burst with one beat.
pub const BEAT_AFTER: Duration = Duration::from_millis(500);
/// How often nodes the cell no longer hears of are looked for.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// How long `presence` waits for other nodes' answers when no watcher of the
/// chat is on this node (every node with one answers within a NATS round trip).
pub const GATHER_WAIT: Duration = Duration::from_millis(200);
/// Typing gate entries kept before the gate drops expired ones.
const TYPING_GATE_MIN: usize = 1024;

/// This node within its cell, for presence.
pub(super) struct CellView {
    /// This node's incarnation, named in every presence signal.
    pub me: String,
    /// Whether the cell still hears of an incarnation.
    pub live: Arc<dyn Fn(&str) -> bool + Send + Sync>,
}

/// A chat's presence state on this node, kept in its [`ChatState`].
#[derive(Default)]
pub(super) struct LiveState {
    pub presence: Presence,
    /// This entry's presence epoch (numbers its deltas).
    pub epoch: u64,
    pub beat_timer: bool,
    /// The count last pushed, and when.
    pub count_pushed: Option<(u64, Instant)>,
    pub count_timer: bool,
}

/// When each (chat, member) last had a typing push.
#[derive(Default)]
pub(super) struct TypingGate {
    last: HashMap<(ChatKey, Arc<str>), Instant>,
    /// Size at which expired entries are dropped: the map never just grows.
    prune_at: usize,
}

impl Hub {
    /// Tells the hub who this node is in its cell and how to know whether
    /// another node is alive. Set once, before serving; a node alone never calls it.
    pub fn set_cell(&self, me: String, live: Arc<dyn Fn(&str) -> bool + Send + Sync>) {
        let _ = self.cell.set(CellView { me, live });
    }

    fn me(&self) -> &str {
        self.cell.get().map_or("local", |c| c.me.as_str())
    }

    /// Gives a new chat entry its presence epoch.
    pub(super) fn new_epoch(&self) -> u64 {
        self.epochs.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Whether `user`'s typing in `key` is pushed now: once per [`TYPING_EVERY`].
    pub fn admit_typing(&self, key: &ChatKey, user: &Arc<str>, now: Instant) -> bool {
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

    /// `user` types in `key`: pushes it to this node's watchers and tells the others.
    pub fn typing(&self, key: &ChatKey, user: &str) {
        self.broker.signal(key, &Signal::Typing { user: user.to_string() });
        self.push_typing(key, user);
    }

    /// Pushes `user`'s typing to this node's live watchers of `key` but their own connections.
    fn push_typing(&self, key: &ChatKey, user: &str) {
        let Some(watched) = self.watched(key) else { return };
        let frame = Frame::from(typing_push(&key.chat, user));
        let state = watched.state.lock().expect("hub chat lock");
        let mut pushed = 0u64;
        for w in state.watchers.values() {
            if w.syncing.is_none() && &*w.user != user && w.outbox.push(frame.clone()) {
                pushed += 1;
            }
        }
        metrics::counter!("herald_typing_pushes_total").increment(pushed);
    }

    /// The present users of `key`: this node's view when it watches the
    /// chat, else what the other nodes answer within [`GATHER_WAIT`]. When
    /// `follower` (a connection) watches the chat, it gets presence pushes from now on.
    pub async fn presence(&self, key: &ChatKey, follower: Option<ConnId>) -> PresenceOk {
        if let Some(watched) = self.watched(key) {
            let mut state = watched.state.lock().expect("hub chat lock");
            if let Some(w) = follower.and_then(|conn| state.watchers.get_mut(&conn)) {
                w.follows = true;
            }
            let p = &state.live.presence;
            return PresenceOk { count: p.count() as u64, users: p.users(PRESENCE_USERS_MAX) };
        }
        let answers = self.broker.gather(key, &Signal::Ask { of: None }, GATHER_WAIT).await;
        let mut users = BTreeSet::new();
        for answer in answers {
            if let Signal::State { users: part, .. } = answer {
                users.extend(part);
            }
        }
        PresenceOk { count: users.len() as u64, users: users.into_iter().take(PRESENCE_USERS_MAX).collect() }
    }

    /// A watch of `user` went live: one more of their connections here.
    pub(super) fn watch_present(&self, watched: &Arc<Watched>, state: &mut ChatState, user: &Arc<str>) {
        if let Some((n, change)) = state.live.presence.add_local(user) {
            self.local_changed(watched, state, user, n, true, change);
        }
    }

    /// A live watch of `user` ended.
    pub(super) fn watch_absent(&self, watched: &Arc<Watched>, state: &mut ChatState, user: &Arc<str>) {
        if let Some((n, change)) = state.live.presence.remove_local(user) {
            self.local_changed(watched, state, user, n, false, change);
        }
    }

    fn local_changed(
        &self,
        watched: &Arc<Watched>,
        state: &mut ChatState,
        user: &str,
        n: u64,
        present: bool,
        change: Option<Change>,
    ) {
        // A node alone has nobody to tell.
        let in_cell = self.cell.get().is_some();
        if in_cell {
            let delta =
                Signal::Delta { from: self.me().into(), epoch: state.live.epoch, n, user: user.into(), present };
            self.broker.signal(&watched.key, &delta);
        }
        if in_cell && !state.live.beat_timer {
            state.live.beat_timer = true;
            self.later(BEAT_AFTER, watched, |hub, watched| async move {
                let mut state = watched.state.lock().expect("hub chat lock");
                state.live.beat_timer = false;
                let beat =
                    Signal::Beat { from: hub.me().into(), epoch: state.live.epoch, n: state.live.presence.sent() };
                hub.broker.signal(&watched.key, &beat);
            });
        }
        self.apply(watched, state, change.into_iter().collect());
    }

    /// Turns changes of the union into pushes to this node's live watchers.
    fn apply(&self, watched: &Arc<Watched>, state: &mut ChatState, changes: Vec<Change>) {
        if changes.is_empty() {
            return;
        }
        metrics::counter!("herald_presence_changes_total").increment(changes.len() as u64);
        if state.live.presence.count() > PRESENCE_USERS_MAX {
            self.count_changed(watched, state);
            return;
        }
        let mut pushed = 0u64;
        for (user, present) in changes {
            let frame = Frame::from(presence_user_push(&watched.key.chat, &user, present));
            pushed += push_live(state, &frame);
        }
        metrics::counter!("herald_presence_pushes_total").increment(pushed);
    }

    /// Above [`PRESENCE_USERS_MAX`]: pushes the count now if the last push is
    /// [`COUNT_EVERY`] old, else once that much time has passed.
    fn count_changed(&self, watched: &Arc<Watched>, state: &mut ChatState) {
        let count = state.live.presence.count() as u64;
        let now = Instant::now();
        match state.live.count_pushed {
            Some((pushed, _)) if pushed == count => {}
            Some((_, at)) if now.duration_since(at) < COUNT_EVERY => {
                if !state.live.count_timer {
                    state.live.count_timer = true;
                    let wait = COUNT_EVERY - now.duration_since(at);
                    self.later(wait, watched, |_, watched| async move {
                        let mut state = watched.state.lock().expect("hub chat lock");
                        state.live.count_timer = false;
                        let count = state.live.presence.count() as u64;
                        if count as usize > PRESENCE_USERS_MAX && state.live.count_pushed.is_none_or(|p| p.0 != count) {
                            push_count(&watched, &mut state, count);
                        }
                    });
                }
            }
            _ => push_count(watched, state, count),
        }
    }

    /// A signal from another node about `key`.
    pub(super) fn on_signal(&self, key: &ChatKey, signal: Signal, reply: Option<String>) {
        metrics::counter!("herald_signals_received_total", "kind" => signal.label()).increment(1);
        let watched = self.watched(key);
        match &signal {
            Signal::Typing { user } => return self.push_typing(key, user),
            Signal::Ask { of } => {
                if of.as_deref().is_some_and(|of| of != self.me()) {
                    return;
                }
                let answer = |part: &Signal| match &reply {
                    Some(to) => self.broker.answer(to, part),
                    None => self.broker.signal(key, part),
                };
                let Some(watched) = watched else {
                    // Nothing here; a node asking this one by name learns its set is empty.
                    if of.is_some() {
                        answer(&Presence::default().state(self.me(), 0)[0]);
                    }
                    return;
                };
                // Sent under the chat's lock, so no delta of this node passes its state.
                let state = watched.state.lock().expect("hub chat lock");
                if of.is_some() || state.live.presence.has_local() {
                    for part in state.live.presence.state(self.me(), state.live.epoch) {
                        answer(&part);
                    }
                }
                return;
            }
            Signal::Delta { .. } | Signal::Beat { .. } | Signal::State { .. } => {}
        }
        let Some(watched) = watched else { return };
        let mut state = watched.state.lock().expect("hub chat lock");
        let outcome = state.live.presence.receive(&signal, Instant::now());
        if let Some(of) = outcome.ask {
            self.broker.signal(key, &Signal::Ask { of: Some(of) });
        }
        self.apply(&watched, &mut state, outcome.changes);
    }

    /// Asks every node for its present users of `key` (a new entry knows nobody's yet).
    pub(super) fn ask_everyone(&self, key: &ChatKey) {
        self.broker.signal(key, &Signal::Ask { of: None });
    }

    /// After a broker reconnect: every watched chat asks the others again and
    /// tells them its latest delta number, so both sides repair what was lost.
    pub(super) fn presence_resync(&self) {
        for watched in self.entries() {
            let state = watched.state.lock().expect("hub chat lock");
            self.broker.signal(&watched.key, &Signal::Ask { of: None });
            let beat = Signal::Beat { from: self.me().into(), epoch: state.live.epoch, n: state.live.presence.sent() };
            self.broker.signal(&watched.key, &beat);
        }
    }

    /// Drops the users of nodes the cell no longer hears of, from every chat.
    fn sweep(&self) {
        let Some(cell) = self.cell.get() else { return };
        let now = Instant::now();
        for watched in self.entries() {
            let mut state = watched.state.lock().expect("hub chat lock");
            let (changes, again) = state.live.presence.expire(|from| (cell.live)(from), now);
            for of in again {
                self.broker.signal(&watched.key, &Signal::Ask { of: Some(of) });
            }
            if !changes.is_empty() {
                metrics::counter!("herald_presence_expired_total").increment(changes.len() as u64);
            }
            self.apply(&watched, &mut state, changes);
        }
    }
}

/// Starts the sweep for dead nodes' users; it ends with the hub.
pub(super) fn spawn_sweep(hub: Weak<Hub>) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(hub) = hub.upgrade() else { return };
            hub.sweep();
        }
    });
}

/// Pushes a presence `frame` to every live watcher of a chat that follows
/// presence; returns how many took it.
fn push_live(state: &ChatState, frame: &Frame) -> u64 {
    let mut pushed = 0;
    for w in state.watchers.values() {
        if w.follows && w.syncing.is_none() && w.outbox.push(frame.clone()) {
            pushed += 1;
        }
    }
    pushed
}

fn push_count(watched: &Watched, state: &mut ChatState, count: u64) {
    let frame = Frame::from(presence_count_push(&watched.key.chat, count));
    let pushed = push_live(state, &frame);
    state.live.count_pushed = Some((count, Instant::now()));
    metrics::counter!("herald_presence_pushes_total").increment(pushed);
}

/// The gate's type as the hub holds it.
pub(super) type Gate = Mutex<TypingGate>;
