//! Hot chats: a chat whose events times its local watchers pass
//! `--hot-chat-deliveries` within a second, at [`HOT_MIN_EVENTS`] events a
//! second or more, stops pushing each event. Every [`HOT_NOTIFY_EVERY`] each
//! of its watchers gets a `notify` with the latest seq (the watchers spread
//! over five slots of that period, so their fetches do not all come at
//! once) and fetches what it lacks, answered from the chat's window of recent events ([`super::cache`]),
//! so a client gets a few frames a second from it whatever its rate. It
//! cools after a whole second under half of either. `leave` events are still
//! pushed, since they end watches.
//!
//! Why on by default, and why the floor on events: a fetch costs the node a
//! request, a reply and its frame, shared by every event it carries, and a
//! push costs a frame (often a write) per event and watcher. Measured
//! (docs/benchmarks.md, "Hot chats"), notify + fetch from the window costs
//! less per delivered event than pushing once a notify period carries a few
//! events (from about 10 events/s), and more below that.

use std::sync::Arc;
use std::time::Duration;

use herald_protocol::frame::notify_push;

use super::{ChatState, Hub, Watched};
use crate::outbox::Frame;

/// How often a hot chat's watchers hear of its latest seq.
pub const HOT_NOTIFY_EVERY: Duration = Duration::from_millis(250);
/// Parts of [`HOT_NOTIFY_EVERY`] a hot chat's watchers are spread over (by
/// connection id): each still hears of the latest seq once a period, but
/// their fetches come a fifth at a time, not all in one burst (5,000
/// watchers fetching at once queued each other by hundreds of ms).
const NOTIFY_SLOTS: u64 = 5;
/// Events per second below which a chat is never hot, whatever its
/// watchers: under about two events per notify period, a notify and a fetch
/// per watcher cost more than the pushes they replace (measured at 5 and 10
/// events/s with 1,000 and 5,000 watchers).
pub const HOT_MIN_EVENTS: u32 = 10;

impl Hub {
    /// Counts one event of `watched` toward its heat and says whether the
    /// chat is hot now. A chat turns hot when its events times its local
    /// watchers pass [`Hub`]'s threshold within a second (and its events
    /// [`HOT_MIN_EVENTS`]), and cools after a whole second under half of either.
    pub(super) fn count_for_heat(&self, watched: &Watched, state: &mut ChatState) -> bool {
        if self.hot_deliveries == 0 {
            return false;
        }
        let window = self.started.elapsed().as_secs();
        let watchers = state.watchers.len() as u64;
        if state.window != window {
            let last = if window == state.window + 1 { u64::from(state.window_events) } else { 0 };
            if state.hot && (last * watchers < self.hot_deliveries / 2 || last < u64::from(HOT_MIN_EVENTS / 2)) {
                state.hot = false;
                tracing::info!(chat = %watched.key, watchers, "chat cooled down: pushing events again");
                metrics::counter!("herald_hub_hot_switches_total", "to" => "events").increment(1);
            }
            state.window = window;
            state.window_events = 0;
        }
        state.window_events = state.window_events.saturating_add(1);
        if !state.hot
            && state.window_events >= HOT_MIN_EVENTS
            && u64::from(state.window_events) * watchers >= self.hot_deliveries
        {
            state.hot = true;
            tracing::info!(chat = %watched.key, watchers, events_this_second = state.window_events,
                "chat is hot: pushing a coalesced notify instead of each event");
            metrics::counter!("herald_hub_hot_switches_total", "to" => "notify").increment(1);
        }
        state.hot
    }

    /// Starts the timer that announces a hot chat's latest seq to its next
    /// slot of watchers, unless one runs.
    pub(super) fn arm_notify_timer(&self, watched: &Arc<Watched>, state: &mut ChatState) {
        if state.notify_timer {
            return;
        }
        state.notify_timer = true;
        let tick = HOT_NOTIFY_EVERY / NOTIFY_SLOTS as u32;
        self.later(tick, watched, |hub, watched| async move { hub.announce(&watched) });
    }

    /// Pushes one shared `notify` with a hot chat's latest seq to the live
    /// watchers of this tick's slot that have not been pushed that far; they
    /// fetch the rest. Goes on to the next slot while any watcher is behind.
    fn announce(&self, watched: &Arc<Watched>) {
        let mut state = watched.state.lock().expect("hub chat lock");
        state.notify_timer = false;
        let Some(seq) = state.unannounced else { return };
        let slot = state.notify_slot;
        state.notify_slot = (slot + 1) % NOTIFY_SLOTS;
        let mut frame = None;
        let (mut pushed, mut behind) = (0u64, false);
        for (conn, w) in state.watchers.iter_mut() {
            if w.syncing.is_some() || w.next > seq {
                continue;
            }
            if conn % NOTIFY_SLOTS != slot {
                behind = true;
                continue;
            }
            w.next = seq + 1;
            let frame = frame.get_or_insert_with(|| Frame::from(notify_push(&watched.key.chat, seq)));
            if w.outbox.push(frame.clone()) {
                pushed += 1;
            }
        }
        metrics::counter!("herald_hub_notifies_total").increment(pushed);
        if behind {
            self.arm_notify_timer(watched, &mut state);
        } else {
            state.unannounced = None;
        }
    }
}
