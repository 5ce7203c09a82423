//! Each watched chat's sequencer: pushes its events to local watchers in seq
//! order, whatever order they arrive in.
//!
//! Events may reach the hub out of order (two sends of one chat finishing on
//! different tasks, a broker hint arriving late) or not at all (a hint lost).
//! An event ahead of the next expected seq is held until the gap fills, for
//! at most [`GAP_WAIT`]; then the gap is read from the log. A gap left after
//! a successful read opened after it and gets another round; only when the
//! log cannot be read does the hub move on, and watchers, seeing the gap,
//! fetch it as the protocol tells them to.

use std::sync::Arc;
use std::time::Duration;

use herald_protocol::EventType;

use super::{ChatState, Hub, Watched};
use crate::model::Published;

/// How long an event ahead of a gap is held before the gap is read from the
/// log. Re-ordered publishes of one node fill a gap in microseconds; a lost
/// broker hint never does.
pub const GAP_WAIT: Duration = Duration::from_millis(250);
/// Events held per chat while waiting for a gap. Beyond it the hub moves on at once.
const MAX_HELD: usize = 1024;
/// Events read per catch-up page, and pages per catch-up before it stops
/// (the next tail check or gap goes on from there).
const CATCH_UP_PAGE: u32 = 500;
const CATCH_UP_PAGES: usize = 10;

impl Hub {
    /// Takes `event` into `watched`'s sequence: pushes it (and whatever it
    /// releases) if it is next, holds it if it is ahead, drops it if it is
    /// old. Returns true if a `leave` removed the last watcher.
    pub(super) fn sequence(&self, watched: &Arc<Watched>, state: &mut ChatState, event: Arc<Published>) -> bool {
        match state.next {
            Some(next) if event.seq == next => {
                let mut emptied = self.fan_out(watched, state, &event);
                state.next = Some(next + 1);
                emptied |= self.release_held(watched, state);
                emptied
            }
            Some(next) if event.seq < next => false,
            _ => {
                // Ahead of a gap, or before the first watch set the start: hold it.
                state.held.insert(event.seq, event);
                if state.held.len() > MAX_HELD && state.next.is_none() {
                    // Not started yet: the first watch's own read covers the oldest.
                    state.held.pop_first();
                    false
                } else if state.held.len() > MAX_HELD {
                    let first = *state.held.keys().next().expect("not empty");
                    metrics::counter!("herald_hub_gaps_skipped_total").increment(1);
                    state.next = Some(first);
                    self.release_held(watched, state)
                } else {
                    self.arm_gap_timer(watched, state);
                    false
                }
            }
        }
    }

    /// Pushes `event` to every live watcher and buffers it for syncing ones;
    /// in a hot chat, keeps it in the chat's recent window and only notes it
    /// for the next coalesced `notify`.
    /// Returns true if a `leave` removed the last watcher.
    fn fan_out(&self, watched: &Arc<Watched>, state: &mut ChatState, event: &Arc<Published>) -> bool {
        let hot = self.count_for_heat(watched, state);
        // Only a hot chat keeps a window: its notifies are what send its
        // watchers fetching. Any other chat's rare fetch (a gap) reads the
        // store, and its events cost no memory once pushed.
        if hot {
            state.recent.push(&self.recent, &watched.key.chat, event);
        } else if !state.recent.is_empty() {
            state.recent.clear();
        }
        if hot && event.kind != EventType::Leave {
            for w in state.watchers.values_mut() {
                w.buffer_if_syncing(event, self.sync_bytes);
            }
            state.unannounced = Some(event.seq);
            self.arm_notify_timer(watched, state);
            return false;
        }
        let mut pushed = 0u64;
        // A `leave` ends the live watches of its user that it reaches; one
        // from before a watch's start is history. Syncing watches decide at
        // their finish, when their start is known.
        let mut ended = Vec::new();
        for (conn, w) in state.watchers.iter_mut() {
            if w.buffer_if_syncing(event, self.sync_bytes) || event.seq < w.next {
                continue;
            }
            w.next = event.seq + 1;
            if w.outbox.push(event.frame.clone()) {
                pushed += 1;
            }
            if super::start::ends(event, &w.user) {
                ended.push(*conn);
            }
        }
        metrics::counter!("herald_pushes_total").increment(pushed);
        if ended.is_empty() {
            return false;
        }
        for conn in &ended {
            if let Some(gone) = state.watchers.remove(conn)
                && gone.present
            {
                self.watch_absent(watched, state, &gone.user);
            }
        }
        metrics::gauge!("herald_watches").decrement(ended.len() as f64);
        state.watchers.is_empty()
    }

    /// Fans out held events from `state.next` on while they are contiguous.
    pub(super) fn release_held(&self, watched: &Arc<Watched>, state: &mut ChatState) -> bool {
        let mut emptied = false;
        while let Some(entry) = state.held.first_entry() {
            let next = state.next.expect("released only once started");
            if *entry.key() < next {
                entry.remove();
                continue;
            }
            if *entry.key() > next {
                break;
            }
            let event = entry.remove();
            emptied |= self.fan_out(watched, state, &event);
            state.next = Some(next + 1);
        }
        emptied
    }

    /// Starts the timer that repairs `watched`'s gap, unless one runs or there is no gap.
    pub(super) fn arm_gap_timer(&self, watched: &Arc<Watched>, state: &mut ChatState) {
        if state.gap_timer || state.next.is_none() || state.held.is_empty() {
            return;
        }
        state.gap_timer = true;
        self.later(GAP_WAIT, watched, |hub, watched| async move { hub.repair(&watched).await });
    }

    /// Fills `watched`'s gap from the log. A gap left after a successful read
    /// opened after it (events reordered under load): it is given another
    /// round, never skipped, because the log has every published event. Only
    /// when the log cannot be read does the hub move on, and clients fetch.
    async fn repair(&self, watched: &Arc<Watched>) {
        let caught_up = self.catch_up_entry(watched).await;
        let mut state = watched.state.lock().expect("hub chat lock");
        state.gap_timer = false;
        let Some((&first, _)) = state.held.first_key_value() else { return };
        if caught_up {
            self.arm_gap_timer(watched, &mut state);
            return;
        }
        let missing = first - state.next.unwrap_or(first);
        tracing::warn!(chat = %watched.key, missing, "gap not repaired: the log could not be read; watchers will fetch it");
        metrics::counter!("herald_hub_gaps_skipped_total").increment(1);
        state.next = Some(first);
        let emptied = self.release_held(watched, &mut state);
        self.arm_gap_timer(watched, &mut state);
        drop(state);
        if emptied {
            self.remove_if_empty(&watched.key);
        }
    }

    /// Delivers, in order, every stored event of `watched` after the
    /// sequencer's position. Returns false if the log could not be read.
    pub(super) async fn catch_up_entry(&self, watched: &Arc<Watched>) -> bool {
        for _ in 0..CATCH_UP_PAGES {
            let Some(next) = watched.state.lock().expect("hub chat lock").next else { return true };
            let fetched = match self.store.fetch(&watched.key, None, next - 1, CATCH_UP_PAGE).await {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(chat = %watched.key, error = %e, "catch-up read failed; the next tail check retries");
                    metrics::counter!("herald_hub_catch_up_failures_total").increment(1);
                    return false;
                }
            };
            let n = fetched.events.len();
            if n > 0 {
                metrics::counter!("herald_hub_backfilled_total").increment(n as u64);
            }
            for event in &fetched.events {
                self.deliver_published(Published::new(watched.key.clone(), event));
            }
            if !fetched.more {
                return true;
            }
        }
        true
    }

    /// [`crate::broker::Sink::deliver`], callable from inside the hub.
    fn deliver_published(&self, event: Arc<Published>) {
        crate::broker::Sink::deliver(self, event);
    }
}
