//! Hot chats: a chat's heat. A chat whose events times its local watchers pass
//! `--hot-chat-deliveries` within a second, at [`HOT_MIN_EVENTS`] events a
//! second or more, stops pushing each event. Every [`HOT_NOTIFY_EVERY`] each
//! of its watchers gets a `notify` with the latest seq (the watchers spread
//! over five slots of that period, so their fetches do not all come at
//! once) and fetches what it lacks, answered from the chat's window of recent events ([`super::recent`]),
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
//!
//! Plain data: [`Heat`] counts a chat's events and keeps its notify
//! slots; the entry ([`super::entry`]) runs the timer it asks for and the
//! watchers ([`super::watchers`]) take the notifies.

use std::time::Duration;

use crate::model::ChatKey;

/// How often a hot chat's watchers hear of its latest seq.
pub const HOT_NOTIFY_EVERY: Duration = Duration::from_millis(250);
/// Parts of [`HOT_NOTIFY_EVERY`] a hot chat's watchers are spread over (by
/// connection id): each still hears of the latest seq once a period, but
/// their fetches come a fifth at a time, not all in one burst (5,000
/// watchers fetching at once queued each other by hundreds of ms).
pub(super) const NOTIFY_SLOTS: u64 = 5;
/// The notify timer's period: one slot of watchers per tick.
pub(super) const NOTIFY_TICK: Duration = Duration::from_millis(HOT_NOTIFY_EVERY.as_millis() as u64 / NOTIFY_SLOTS);
/// Events per second below which a chat is never hot, whatever its
/// watchers: under about two events per notify period, a notify and a fetch
/// per watcher cost more than the pushes they replace (measured at 5 and 10
/// events/s with 1,000 and 5,000 watchers).
pub const HOT_MIN_EVENTS: u32 = 10;

/// One chat's heat and, while it is hot, what its watchers have not heard of.
#[derive(Default)]
pub(super) struct Heat {
    /// The second (since the hub started) whose events `window_events` counts.
    window: u64,
    window_events: u32,
    /// Hot: watchers get a coalesced `notify` now and then, not each event.
    hot: bool,
    /// While hot: the latest seq not yet announced.
    unannounced: Option<u64>,
    /// Whether the timer that announces it is running.
    notify_timer: bool,
    /// Which slot of watchers the timer's next tick announces to.
    notify_slot: u64,
}

impl Heat {
    /// Counts one event of chat `key`, in second `second` (since the hub
    /// started), toward its heat and says whether the chat is hot now. A chat
    /// turns hot when its events times its `watchers` pass `threshold`
    /// within a second (and its events [`HOT_MIN_EVENTS`]), and cools after
    /// a whole second under half of either. A `threshold` of 0: never hot.
    pub(super) fn count(&mut self, key: &ChatKey, second: u64, watchers: u64, threshold: u64) -> bool {
        if threshold == 0 {
            return false;
        }
        if self.window != second {
            let last = if second == self.window + 1 { u64::from(self.window_events) } else { 0 };
            if self.hot && (last * watchers < threshold / 2 || last < u64::from(HOT_MIN_EVENTS / 2)) {
                self.hot = false;
                tracing::info!(chat = %key, watchers, "chat cooled down: pushing events again");
                metrics::counter!("herald_hub_hot_switches_total", "to" => "events").increment(1);
            }
            self.window = second;
            self.window_events = 0;
        }
        self.window_events = self.window_events.saturating_add(1);
        if !self.hot && self.window_events >= HOT_MIN_EVENTS && u64::from(self.window_events) * watchers >= threshold {
            self.hot = true;
            tracing::info!(chat = %key, watchers, events_this_second = self.window_events,
                "chat is hot: pushing a coalesced notify instead of each event");
            metrics::counter!("herald_hub_hot_switches_total", "to" => "notify").increment(1);
        }
        self.hot
    }

    /// A hot chat's event `seq` was not pushed: the next notify announces it.
    /// Returns true when the notify timer must be started (none runs).
    #[must_use]
    pub(super) fn unannounced(&mut self, seq: u64) -> bool {
        self.unannounced = Some(seq);
        self.arm()
    }

    fn arm(&mut self) -> bool {
        !std::mem::replace(&mut self.notify_timer, true)
    }

    /// The notify timer fired: the seq to announce and the slot of watchers
    /// to announce it to, if anything is unannounced.
    pub(super) fn tick(&mut self) -> Option<(u64, u64)> {
        self.notify_timer = false;
        let seq = self.unannounced?;
        let slot = self.notify_slot;
        self.notify_slot = (slot + 1) % NOTIFY_SLOTS;
        Some((seq, slot))
    }

    /// A tick's notifies went out; with watchers of other slots still
    /// `behind`, returns true: the timer runs again for the next slot.
    #[must_use]
    pub(super) fn announced(&mut self, behind: bool) -> bool {
        if behind {
            return self.arm();
        }
        self.unannounced = None;
        false
    }
}
