//! Starting a watch: [`Hub::begin_watch`] registers the connection as a
//! syncing watcher (live events are buffered for it), the chat layer reads
//! the log, and [`Hub::finish_watch`] pushes the reply, the replay and the
//! buffer, then goes live.
//!
//! Two watches of one chat can start at once, and the first to finish starts
//! the chat's sequencer at its own read. A watch that read the log earlier
//! but finishes later then lacks the events between its read and that start:
//! the sequencer had passed them before it could buffer them. Those are read
//! from the log for it (a gap read) before it goes live, so that it gets them
//! and, above all, sees a `leave` of its own user among them.
//!
//! A `leave` ends a watch only if it comes after the watch's start: one from
//! before it (an earlier membership, the user has joined again since) is
//! history, and the watch stays.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use herald_protocol::EventType;
use herald_protocol::frame::notify_push;

use super::{ChatState, Hub, Replay, SyncBuffer, Watched, Watcher};
use crate::model::{ChatKey, Published};
use crate::outbox::{ConnId, Frame, Outbox};

/// Events read per page of a gap read, and pages before it gives up and
/// tells the watcher to fetch the rest.
const GAP_PAGE: u32 = 500;
const GAP_PAGES: usize = 4;

impl Hub {
    /// Registers `outbox`'s connection as a syncing watcher of `key`,
    /// replacing a previous watch of the same connection.
    pub fn begin_watch(&self, key: &ChatKey, user: &Arc<str>, outbox: &Arc<Outbox>) {
        let mut shard = self.shard(key).lock().expect("hub shard lock");
        let mut created = false;
        let watched = shard
            .entry(key.clone())
            .or_insert_with(|| {
                created = true;
                Arc::new(Watched { key: key.clone(), state: std::sync::Mutex::new(ChatState::default()) })
            })
            .clone();
        let mut state = watched.state.lock().expect("hub chat lock");
        if created {
            state.live.epoch = self.new_epoch();
        }
        let mut watcher = Watcher {
            outbox: outbox.clone(),
            user: user.clone(),
            next: 0,
            syncing: Some(Box::default()),
            present: false,
            follows: false,
        };
        // A watch again on the same connection stays present meanwhile: no flicker.
        let previous = state.watchers.remove(&outbox.id());
        if let Some(p) = &previous {
            if p.user == watcher.user {
                (watcher.present, watcher.follows) = (p.present, p.follows);
            } else if p.present {
                self.watch_absent(&watched, &mut state, &p.user);
            }
        }
        state.watchers.insert(outbox.id(), watcher);
        drop(state);
        if created {
            metrics::gauge!("herald_hub_chats").increment(1.0);
            self.want(key);
        }
        drop(shard);
        if previous.is_none() {
            metrics::gauge!("herald_watches").increment(1.0);
        }
    }

    /// Completes a watch begun with [`Hub::begin_watch`]: pushes the reply,
    /// the replay and the live events buffered meanwhile, then goes live
    /// (after a gap read, if the sequencer had moved past this watch's read).
    /// Returns false, pushing nothing, if the watch ended meanwhile.
    pub fn finish_watch(&self, key: &ChatKey, conn: ConnId, replay: Replay) -> bool {
        let Some(watched) = self.watched(key) else { return false };
        let mut state = watched.state.lock().expect("hub chat lock");
        let finishable =
            state.watchers.get(&conn).and_then(|w| w.syncing.as_ref()).is_some_and(|b| b.reading_gap.is_none());
        if !finishable {
            return false;
        }
        if state.next.is_none() {
            // The entry's first watch to finish: the chat layer waited for the
            // subscription, so the other nodes' answers reach this node.
            self.ask_everyone(key);
            state.next = Some(replay.latest + 1);
            state.tail_seen = replay.latest;
            // Syncing watchers only buffer what this releases: this one stays.
            self.release_held(&watched, &mut state);
            self.arm_gap_timer(&watched, &mut state);
        }
        let chat_next = state.next.expect("started");
        if let Some(w) = state.watchers.get_mut(&conn)
            && !w.present
        {
            w.present = true;
            let user = w.user.clone();
            self.watch_present(&watched, &mut state, &user);
        }
        let Some(w) = state.watchers.get_mut(&conn) else { return false };
        w.outbox.push(replay.reply);
        w.next = replay.frames.first().map_or(replay.latest + 1, |(seq, _)| *seq);
        let mut pushed = 0u64;
        for (seq, frame) in replay.frames {
            if seq >= w.next {
                w.next = seq + 1;
                w.outbox.push(frame);
                pushed += 1;
            }
        }
        if replay.truncated || w.next <= replay.latest {
            w.outbox.push(Frame::from(notify_push(&key.chat, replay.latest)));
            w.next = w.next.max(replay.latest + 1);
        }
        metrics::counter!("herald_pushes_total").increment(pushed);
        let buffer = w.syncing.as_mut().expect("syncing");
        let gap_end = buffer.first.unwrap_or(chat_next);
        if gap_end > w.next {
            let token = self.gap_reads.fetch_add(1, Ordering::Relaxed);
            buffer.reading_gap = Some(token);
            let from = w.next;
            metrics::counter!("herald_hub_gap_reads_total").increment(1);
            self.later(Duration::ZERO, &watched, move |hub, watched| async move {
                hub.read_gap(&watched, conn, token, from, gap_end).await;
            });
            return true;
        }
        if go_live(key, w, chat_next) {
            self.end_watcher(&watched, state, conn);
        }
        true
    }

    /// Reads `[from, to)` of `watched`'s log for the watch of `conn` being
    /// started (gap read `token`), pushes it, then takes the watch live.
    async fn read_gap(&self, watched: &Arc<Watched>, conn: ConnId, token: u64, from: u64, to: u64) {
        let mut events = Vec::new();
        let mut after = from - 1;
        for _ in 0..GAP_PAGES {
            let fetched = match self.store.fetch(&watched.key, None, after, GAP_PAGE).await {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(chat = %watched.key, error = %e, "reading a starting watch's gap failed; it will fetch it");
                    metrics::counter!("herald_hub_catch_up_failures_total").increment(1);
                    break;
                }
            };
            for event in fetched.events.iter().take_while(|e| e.seq < to) {
                after = event.seq;
                events.push(Published::new(watched.key.clone(), event));
            }
            if !fetched.more || after + 1 >= to {
                break;
            }
        }
        let mut state = watched.state.lock().expect("hub chat lock");
        let chat_next = state.next.expect("started before any gap read");
        let Some(w) = state.watchers.get_mut(&conn) else { return };
        if w.syncing.as_ref().and_then(|b| b.reading_gap) != Some(token) {
            // Ended, or replaced by a newer watch of the same connection.
            return;
        }
        let mut pushed = 0u64;
        let mut ended = false;
        for event in events.iter().filter(|e| e.seq >= from) {
            if event.seq < w.next {
                continue;
            }
            w.next = event.seq + 1;
            w.outbox.push(event.frame.clone());
            pushed += 1;
            if ends(event, &w.user) {
                ended = true;
                break;
            }
        }
        metrics::counter!("herald_pushes_total").increment(pushed);
        if !ended && w.next < to {
            // The log could not be read (or the gap was too long): the client fetches it.
            w.outbox.push(Frame::from(notify_push(&watched.key.chat, to - 1)));
            w.next = to;
        }
        if ended || go_live(&watched.key, w, chat_next) {
            self.end_watcher(watched, state, conn);
        }
    }

    /// Removes `conn`'s watcher from `watched`, its `leave` having ended it,
    /// and the chat's entry if it was the last.
    fn end_watcher(&self, watched: &Arc<Watched>, mut state: std::sync::MutexGuard<'_, ChatState>, conn: ConnId) {
        if let Some(gone) = state.watchers.remove(&conn) {
            if gone.present {
                self.watch_absent(watched, &mut state, &gone.user);
            }
            metrics::gauge!("herald_watches").decrement(1.0);
        }
        let emptied = state.watchers.is_empty();
        drop(state);
        if emptied {
            self.remove_if_empty(&watched.key);
        }
    }
}

/// Whether `event` is a `leave` of `user`.
pub(super) fn ends(event: &Published, user: &str) -> bool {
    event.kind == EventType::Leave && event.user.as_deref() == Some(user)
}

/// Pushes what `w` buffered while it started, up to its user's first `leave`
/// after its start, and takes it live. Returns true if such a `leave` ended it.
fn go_live(key: &ChatKey, w: &mut Watcher, chat_next: u64) -> bool {
    let buffer: SyncBuffer = w.syncing.take().map(|b| *b).unwrap_or_default();
    let leave = buffer.leaves.iter().copied().filter(|&l| l >= w.next).min();
    let mut pushed = 0u64;
    for ev in buffer.events {
        if ev.seq >= w.next && leave.is_none_or(|l| ev.seq <= l) {
            w.next = ev.seq + 1;
            w.outbox.push(ev.frame.clone());
            pushed += 1;
        }
    }
    metrics::counter!("herald_pushes_total").increment(pushed);
    // What did not fit in the buffer is fetched: up to the `leave`, or to now.
    let until = leave.map_or(chat_next, |l| l + 1);
    if until > w.next {
        w.outbox.push(Frame::from(notify_push(&key.chat, until - 1)));
        w.next = until;
    }
    leave.is_some()
}
