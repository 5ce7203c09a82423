//! A watched chat's entry: the one place its parts meet, under one lock.
//!
//! The parts are plain data, each with its own file: the order of its
//! events ([`Sequencer`]), its heat ([`Heat`]), its window of recent events
//! ([`Recent`]), its local watchers ([`Watchers`]) and its presence
//! ([`ChatLive`]). [`Entry::deliver`] is the path every event takes: order,
//! then heat, then window, then fan-out. The entry also runs the timers its
//! parts ask for (a gap's repair, a hot chat's notifies, presence beats and
//! counts) through the hub, and hands removals of its last watcher back to
//! the hub's registry.
//!
//! What it needs of the node (settings, the clock, the window budget, the
//! node's presence side, the repairs) it gets from the [`Hub`] it is given.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use herald_protocol::EventType;
use herald_protocol::frame::{append_push, typing_push};
use herald_protocol::reply::PresenceOk;

use super::heat::{Heat, NOTIFY_TICK};
use super::presence::digest::DigestBeat;
use super::presence::live::{BEAT_AFTER, ChatLive, Live, Timers};
use super::recent::{CachedPage, Recent};
use super::sequencer::{AfterRepair, GAP_WAIT, Offered, Sequencer};
use super::watchers::{Finished, Gone, Watchers};
use super::{Hub, Replay};
use crate::model::{ChatKey, Published, Signal};
use crate::outbox::{ConnId, Frame, Outbox};

/// One chat's local watchers and what serves them.
pub(super) struct Entry {
    key: ChatKey,
    state: Mutex<State>,
}

struct State {
    order: Sequencer,
    heat: Heat,
    recent: Recent,
    watchers: Watchers,
    live: ChatLive,
}

impl Entry {
    /// An entry of `key` with no watcher yet, its presence `live`.
    pub(super) fn new(key: ChatKey, live: ChatLive) -> Entry {
        let state = State {
            order: Sequencer::default(),
            heat: Heat::default(),
            recent: Recent::default(),
            watchers: Watchers::default(),
            live,
        };
        Entry { key, state: Mutex::new(state) }
    }

    pub(super) fn key(&self) -> &ChatKey {
        &self.key
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("hub chat lock")
    }

    /// Takes `event` into the chat: the sequencer orders it, then each
    /// event it releases counts toward the chat's heat, enters the window
    /// (while hot) and is fanned out to the watchers (pushed, or, while hot,
    /// announced by a later `notify`). Returns true if a `leave` removed the
    /// last watcher.
    pub(super) fn deliver(self: &Arc<Self>, hub: &Hub, event: Arc<Published>) -> bool {
        let mut state = self.lock();
        self.deliver_locked(hub, &mut state, Some(event))
    }

    /// [`Entry::deliver`] under the chat's lock; with `None`, only what the
    /// sequencer releases now.
    fn deliver_locked(self: &Arc<Self>, hub: &Hub, st: &mut State, event: Option<Arc<Published>>) -> bool {
        // Order: the event if it is next, and whatever it releases.
        let mut next = match event.map(|e| st.order.offer(e)) {
            Some(Offered::Ready(event)) => Some(event),
            Some(Offered::Old) => None,
            Some(Offered::Held { arm }) => {
                if arm {
                    self.start_gap_timer(hub);
                }
                None
            }
            Some(Offered::Skipped) | None => st.order.pop_ready(),
        };
        let mut emptied = false;
        while let Some(event) = next {
            // Heat (no clock read when chats never turn hot).
            let hot = match hub.hot_deliveries() {
                0 => false,
                threshold => st.heat.count(&self.key, hub.second(), st.watchers.len() as u64, threshold),
            };
            // Window: only a hot chat keeps one: its notifies are what send
            // its watchers fetching. Any other chat's rare fetch (a gap) reads
            // the store, and its events cost no memory once pushed.
            if hot {
                st.recent.push(hub.budget(), &self.key.chat, &event);
            } else if !st.recent.is_empty() {
                st.recent.clear();
            }
            // Fan-out: a hot chat's events are announced later (a `leave`
            // is still pushed: it ends watches).
            if hot && event.kind != EventType::Leave {
                st.watchers.buffer(&event, hub.sync_bytes());
                if st.heat.unannounced(event.seq) {
                    self.start_notify_timer(hub);
                }
            } else {
                let ended = st.watchers.push(&event, hub.sync_bytes());
                if !ended.is_empty() {
                    self.gone(hub, st, ended);
                    emptied |= st.watchers.is_empty();
                }
            }
            next = st.order.pop_ready();
        }
        emptied
    }

    /// Watchers were removed: those present are absent now.
    fn gone(self: &Arc<Self>, hub: &Hub, st: &mut State, gone: impl IntoIterator<Item = Gone>) {
        for g in gone {
            hub.conn_ended(g.conn, &self.key);
            if g.present {
                let timers = st.live.absent(hub.live(), &self.key, &st.watchers, &g.user);
                self.run(hub, timers);
            }
        }
    }

    /// Registers `outbox`'s connection as a syncing watcher of `user`.
    /// Returns true if the connection did not watch the chat already.
    pub(super) fn begin(self: &Arc<Self>, hub: &Hub, user: &Arc<str>, outbox: &Arc<Outbox>) -> bool {
        let mut guard = self.lock();
        let st = &mut *guard;
        let begun = st.watchers.begin(outbox, user);
        if !begun.replaced {
            hub.conn_started(outbox.id(), &self.key);
        }
        if let Some(user) = begun.absent {
            let timers = st.live.absent(hub.live(), &self.key, &st.watchers, &user);
            self.run(hub, timers);
        }
        !begun.replaced
    }

    /// Completes `conn`'s watch: the first to finish starts the sequencer at
    /// its read; then the watch counts in presence and gets its reply,
    /// replay and buffer (after a gap read, if the sequencer had moved past
    /// its read). Returns false, pushing nothing, if the watch ended meanwhile.
    pub(super) fn finish(self: &Arc<Self>, hub: &Hub, conn: ConnId, replay: Replay) -> bool {
        let mut guard = self.lock();
        let st = &mut *guard;
        if !st.watchers.finishable(conn) {
            return false;
        }
        if st.order.next().is_none() {
            // The entry's first watch to finish: the chat layer waited for the
            // subscription, so the other nodes' answers reach this node.
            hub.live().ask_everyone(&self.key);
            st.order.start(replay.latest);
            // Syncing watchers only buffer what this releases: this one stays.
            self.deliver_locked(hub, st, None);
            if st.order.arm_gap() {
                self.start_gap_timer(hub);
            }
        }
        let chat_next = st.order.next().expect("started");
        if let Some(user) = st.watchers.make_present(conn) {
            let timers = st.live.present(hub.live(), &self.key, &st.watchers, &user);
            self.run(hub, timers);
        }
        match st.watchers.finish(&self.key, conn, replay, chat_next, || hub.repair().token()) {
            Finished::Gone => false,
            Finished::Live => true,
            Finished::Ended => {
                self.end_watcher(hub, guard, conn);
                true
            }
            Finished::ReadGap { token, from, to } => {
                hub.later(Duration::ZERO, self, move |hub, entry| async move {
                    hub.repair().read_gap(&hub, &entry, conn, token, (from, to)).await;
                });
                true
            }
        }
    }

    /// Hands `conn`'s watch what its gap read `token` of `span` found, and takes it live.
    pub(super) fn gap_read(
        self: &Arc<Self>,
        hub: &Hub,
        conn: ConnId,
        token: u64,
        span: (u64, u64),
        events: &[Arc<Published>],
    ) {
        let mut guard = self.lock();
        let chat_next = guard.order.next().expect("started before any gap read");
        if guard.watchers.gap_read(&self.key, conn, token, span, events, chat_next) == Some(true) {
            self.end_watcher(hub, guard, conn);
        }
    }

    /// Removes `conn`'s watcher, its `leave` having ended it, and the
    /// chat's entry if it was the last.
    fn end_watcher(self: &Arc<Self>, hub: &Hub, mut guard: MutexGuard<'_, State>, conn: ConnId) {
        let st = &mut *guard;
        if let Some(gone) = st.watchers.remove(conn) {
            self.gone(hub, st, [gone]);
        }
        let emptied = st.watchers.is_empty();
        drop(guard);
        if emptied {
            hub.remove_if_empty(&self.key);
        }
    }

    /// Ends `conn`'s watch. `None`: it had none; else whether the chat has no watcher left.
    pub(super) fn unwatch(self: &Arc<Self>, hub: &Hub, conn: ConnId) -> Option<bool> {
        let mut guard = self.lock();
        let st = &mut *guard;
        let gone = st.watchers.remove(conn)?;
        self.gone(hub, st, [gone]);
        Some(st.watchers.is_empty())
    }

    /// Whether no watcher is left.
    pub(super) fn is_empty(&self) -> bool {
        self.lock().watchers.is_empty()
    }

    // ---- repairs --------------------------------------------------------------------------

    /// The sequencer's next seq, once started.
    pub(super) fn next(&self) -> Option<u64> {
        self.lock().order.next()
    }

    /// See [`Sequencer::check_tail`].
    pub(super) fn check_tail(&self, head: u64) -> bool {
        self.lock().order.check_tail(head)
    }

    fn start_gap_timer(self: &Arc<Self>, hub: &Hub) {
        hub.later(GAP_WAIT, self, |hub, entry| async move { hub.repair().gap(&hub, &entry).await });
    }

    /// The gap timer's catch-up is over (`caught_up`: the log was read).
    /// A gap left after a successful read opened after it (events reordered
    /// under load): it is given another round, never skipped, because the
    /// log has every published event. Only when the log cannot be read does
    /// the hub move on, and clients fetch.
    pub(super) fn repaired(self: &Arc<Self>, hub: &Hub, caught_up: bool) {
        let mut guard = self.lock();
        let st = &mut *guard;
        match st.order.repaired(caught_up) {
            AfterRepair::Closed => {}
            AfterRepair::Again { arm } => {
                if arm {
                    self.start_gap_timer(hub);
                }
            }
            AfterRepair::Skipped { missing } => {
                tracing::warn!(chat = %self.key, missing, "gap not repaired: the log could not be read; watchers will fetch it");
                let emptied = self.deliver_locked(hub, st, None);
                if st.order.arm_gap() {
                    self.start_gap_timer(hub);
                }
                drop(guard);
                if emptied {
                    hub.remove_if_empty(&self.key);
                }
            }
        }
    }

    // ---- hot chats -------------------------------------------------------------------------

    fn start_notify_timer(self: &Arc<Self>, hub: &Hub) {
        hub.later(NOTIFY_TICK, self, |hub, entry| async move { entry.announce(&hub) });
    }

    /// The notify timer fired: a hot chat's latest seq goes to this tick's
    /// slot of watchers; the timer goes on while any watcher is behind.
    fn announce(self: &Arc<Self>, hub: &Hub) {
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some((seq, slot)) = st.heat.tick() else { return };
        let behind = st.watchers.announce(&self.key, seq, slot);
        if st.heat.announced(behind) {
            self.start_notify_timer(hub);
        }
    }

    // ---- the window ------------------------------------------------------------------------

    /// A `fetch` page from the window for connection `conn` of `user`, when
    /// that is exact: `conn` watches the chat live as `user` (so a member:
    /// a `leave` or ban ends its watch when the sequencer reaches it, and
    /// every event in the window is older), and the window holds every
    /// event after `after`.
    pub(super) fn cached_fetch(
        &self,
        conn: ConnId,
        user: &str,
        after: u64,
        limit: u32,
        max_bytes: usize,
    ) -> Option<CachedPage> {
        let st = self.lock();
        if !st.watchers.live_as(conn, user) {
            return None;
        }
        st.recent.page(after, limit, max_bytes)
    }

    /// The push frames of the events in `(after, upto]`, if the window holds them all.
    pub(super) fn cached_replay(&self, after: u64, upto: u64) -> Option<Vec<(u64, Frame)>> {
        self.lock().recent.frames(after, upto)
    }

    // ---- typing and presence ---------------------------------------------------------------

    /// Pushes `user`'s typing to the live watchers but `user`'s own connections.
    pub(super) fn push_typing(&self, user: &str) {
        let frame = Frame::from(typing_push(&self.key.chat, user));
        let pushed = self.lock().watchers.push_typing(&frame, user);
        metrics::counter!("herald_typing_pushes_total").increment(pushed);
    }

    /// v1.2: pushes a stream's new text to every live watcher.
    pub(super) fn push_append(&self, target: u64, text: &str, at: u64) {
        let frame = Frame::from(append_push(&self.key.chat, target, text, at));
        let pushed = self.lock().watchers.push_live(&frame);
        metrics::counter!("herald_append_pushes_total").increment(pushed);
    }

    /// The chat's present users; `follower`'s watch, if any, gets presence pushes from now on.
    pub(super) fn presence(&self, follower: Option<ConnId>) -> PresenceOk {
        let mut st = self.lock();
        if let Some(conn) = follower {
            st.watchers.follow_presence(conn);
        }
        st.live.snapshot()
    }

    /// Answers a presence `Ask` under the chat's lock (see [`ChatLive::answer`]).
    pub(super) fn answer_presence(&self, live: &Live, named: bool, answer: &dyn Fn(&Signal)) {
        self.lock().live.answer(live, named, answer);
    }

    /// A presence signal of another node.
    pub(super) fn receive(self: &Arc<Self>, hub: &Hub, signal: &Signal) {
        let mut guard = self.lock();
        let st = &mut *guard;
        let timers = st.live.receive(hub.live(), &self.key, &st.watchers, signal);
        self.run(hub, timers);
    }

    /// After a broker reconnect (see [`ChatLive::resync`]).
    pub(super) fn resync_presence(&self, live: &Live) {
        self.lock().live.resync(live, &self.key);
    }

    /// After this node was paused (see [`ChatLive::after_pause`]).
    pub(super) fn presence_after_pause(&self, live: &Live, now: std::time::Instant) {
        self.lock().live.after_pause(live, &self.key, now);
    }

    /// Drops the users of nodes the cell no longer hears of.
    pub(super) fn sweep(self: &Arc<Self>, hub: &Hub, now: std::time::Instant, beats: &mut Vec<DigestBeat>) {
        let mut guard = self.lock();
        let st = &mut *guard;
        let timers = st.live.sweep(hub.live(), &self.key, &st.watchers, now, beats);
        self.run(hub, timers);
    }

    /// Starts the presence timers asked for.
    fn run(self: &Arc<Self>, hub: &Hub, timers: Timers) {
        if timers.beat {
            hub.later(BEAT_AFTER, self, |hub, entry| async move {
                entry.lock().live.beat(hub.live(), &entry.key);
            });
        }
        if let Some(wait) = timers.count_in {
            hub.later(wait, self, |_, entry| async move {
                let mut guard = entry.lock();
                let st = &mut *guard;
                st.live.count_due(&entry.key, &st.watchers);
            });
        }
        if let Some(wait) = timers.settle_in {
            hub.later(wait, self, |hub, entry| async move {
                let timers = {
                    let mut guard = entry.lock();
                    let st = &mut *guard;
                    st.live.settle(&entry.key, &st.watchers)
                };
                entry.run(&hub, timers);
            });
        }
    }
}
