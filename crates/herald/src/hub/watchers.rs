//! A chat's local watchers: who watches it on this node, how far each was
//! pushed, and the buffer of a watch being started.
//!
//! A watch starts syncing ([`Watchers::begin`]): live events are buffered
//! for it while the chat layer reads its replay from the log. Its finish
//! ([`Watchers::finish`]) pushes the reply, the replay, then what the
//! buffer kept, unless the sequencer had moved past
//! the watch's read before it could buffer (another watch of the chat
//! started the sequencer): then those events are read from the log first (a
//! gap read, [`super::repair`]) and handed in with [`Watchers::gap_read`].
//!
//! A `leave` ends a watch only if it comes after the watch's start: one from
//! before it (an earlier membership, the user has joined again since) is
//! history, and the watch stays.
//!
//! Plain data: pushes go into the watchers' outboxes (queues, never
//! waiting); no lock, no timer, no store. Owns the `herald_watches` gauge:
//! a watcher counts from its begin to its removal.

use std::collections::HashMap;
use std::sync::Arc;

use herald_protocol::EventType;
use herald_protocol::frame::notify_push;

use super::Replay;
use super::heat::NOTIFY_SLOTS;
use crate::model::{ChatKey, Published};
use crate::outbox::{ConnId, Frame, Outbox};

/// One chat's local watchers, by connection.
#[derive(Default)]
pub(super) struct Watchers {
    by_conn: HashMap<ConnId, Watcher>,
}

struct Watcher {
    outbox: Arc<Outbox>,
    user: Arc<str>,
    /// The lowest seq this connection may still be pushed; pushes only go up.
    next: u64,
    /// `Some` while the watch's replay is being read: live events wait here.
    /// Boxed: every watcher carries this field, few carry a buffer, so a
    /// pointer (8 bytes) beats an inline buffer in every idle watch.
    syncing: Option<Box<SyncBuffer>>,
    /// Counted in the chat's presence: set once the watch is live.
    present: bool,
    /// Gets presence pushes: the connection asked `presence` for this chat
    /// while watching it (a v1 client, which never does, gets none).
    follows: bool,
}

/// Live events kept for a watcher while its replay is read.
#[derive(Default)]
struct SyncBuffer {
    events: Vec<Arc<Published>>,
    bytes: usize,
    /// Events were dropped for lack of room: the watcher gets `notify` instead.
    /// Once set, every later event is dropped too, so what is kept has no hole.
    overflowed: bool,
    /// The seq of the first event offered, kept or not: where this watcher's
    /// share of the sequencer's fan-out begins.
    first: Option<u64>,
    /// Seqs of this watcher's user's `leave`s offered, kept or not. Whether
    /// one ends the watch depends on where the watch starts, known only at
    /// its finish (a `leave` older than the read is from an earlier membership).
    leaves: Vec<u64>,
    /// Set once the watch finished and the events the sequencer moved past
    /// before this watcher saw them are being read: that read's token.
    reading_gap: Option<u64>,
}

/// A watcher removed from the chat.
pub(super) struct Gone {
    pub(super) conn: ConnId,
    pub(super) user: Arc<str>,
    /// It counted in the chat's presence.
    pub(super) present: bool,
}

/// What [`Watchers::begin`] replaced.
pub(super) struct Begun {
    /// The connection watched the chat already (the gauge counts it once).
    pub(super) replaced: bool,
    /// The replaced watch was present as another user: they are absent now.
    pub(super) absent: Option<Arc<str>>,
}

/// How a finish went.
pub(super) enum Finished {
    /// The watch ended meanwhile (unwatched, or a `leave` it was handed): nothing pushed.
    Gone,
    /// Live now.
    Live,
    /// Its user's `leave` after its start ended it: remove it ([`Watchers::remove`]).
    Ended,
    /// The events `[from, to)` must be read from the log first (gap read `token`).
    ReadGap { token: u64, from: u64, to: u64 },
}

impl Watcher {
    /// While the watch's replay is read, keeps `event` for after it (or notes
    /// that there was no room). Returns whether the watcher is still syncing.
    fn buffer_if_syncing(&mut self, event: &Arc<Published>, limit: usize) -> bool {
        let Some(buf) = &mut self.syncing else { return false };
        buf.first.get_or_insert(event.seq);
        if ends(event, &self.user) {
            buf.leaves.push(event.seq);
        }
        let len = event.frame.as_str().len();
        if !buf.overflowed && buf.bytes + len <= limit {
            buf.bytes += len;
            buf.events.push(event.clone());
        } else {
            buf.overflowed = true;
        }
        true
    }
}

impl Watchers {
    pub(super) fn len(&self) -> usize {
        self.by_conn.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.by_conn.is_empty()
    }

    /// Registers `outbox`'s connection as a syncing watcher of `user`,
    /// replacing a previous watch of the same connection (which stays
    /// present meanwhile when it is the same user: no flicker).
    pub(super) fn begin(&mut self, outbox: &Arc<Outbox>, user: &Arc<str>) -> Begun {
        let mut watcher = Watcher {
            outbox: outbox.clone(),
            user: user.clone(),
            next: 0,
            syncing: Some(Box::default()),
            present: false,
            follows: false,
        };
        let previous = self.by_conn.remove(&outbox.id());
        let mut absent = None;
        if let Some(p) = &previous {
            if p.user == watcher.user {
                (watcher.present, watcher.follows) = (p.present, p.follows);
            } else if p.present {
                absent = Some(p.user.clone());
            }
        }
        self.by_conn.insert(outbox.id(), watcher);
        if previous.is_none() {
            metrics::gauge!("herald_watches").increment(1.0);
        }
        Begun { replaced: previous.is_some(), absent }
    }

    /// Removes `conn`'s watcher, if any.
    pub(super) fn remove(&mut self, conn: ConnId) -> Option<Gone> {
        let gone = self.by_conn.remove(&conn)?;
        metrics::gauge!("herald_watches").decrement(1.0);
        Some(Gone { conn, user: gone.user, present: gone.present })
    }

    /// Whether `conn`'s watch is syncing and not finished yet.
    pub(super) fn finishable(&self, conn: ConnId) -> bool {
        self.by_conn.get(&conn).and_then(|w| w.syncing.as_ref()).is_some_and(|b| b.reading_gap.is_none())
    }

    /// Counts `conn`'s watch in presence; returns its user if it was not yet.
    pub(super) fn make_present(&mut self, conn: ConnId) -> Option<Arc<str>> {
        let w = self.by_conn.get_mut(&conn).filter(|w| !w.present)?;
        w.present = true;
        Some(w.user.clone())
    }

    /// Pushes `conn`'s reply and replay (the sequencer is at `chat_next`),
    /// then takes the watch live, unless events it lacks must be read from
    /// the log first (`token` names that read).
    pub(super) fn finish(
        &mut self,
        key: &ChatKey,
        conn: ConnId,
        replay: Replay,
        chat_next: u64,
        token: impl FnOnce() -> u64,
    ) -> Finished {
        let Some(w) = self.by_conn.get_mut(&conn) else { return Finished::Gone };
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
            let token = token();
            buffer.reading_gap = Some(token);
            metrics::counter!("herald_hub_gap_reads_total").increment(1);
            return Finished::ReadGap { token, from: w.next, to: gap_end };
        }
        if go_live(key, w, chat_next) { Finished::Ended } else { Finished::Live }
    }

    /// Hands `conn`'s watch the events of its gap read `token` (`[from, to)`
    /// of the log, as far as it could be read) and takes it live. `None`:
    /// the watch ended or was replaced meanwhile; else whether its user's
    /// `leave` ended it (remove it).
    pub(super) fn gap_read(
        &mut self,
        key: &ChatKey,
        conn: ConnId,
        token: u64,
        (from, to): (u64, u64),
        events: &[Arc<Published>],
        chat_next: u64,
    ) -> Option<bool> {
        let w = self.by_conn.get_mut(&conn)?;
        if w.syncing.as_ref().and_then(|b| b.reading_gap) != Some(token) {
            // Ended, or replaced by a newer watch of the same connection.
            return None;
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
            w.outbox.push(Frame::from(notify_push(&key.chat, to - 1)));
            w.next = to;
        }
        Some(ended || go_live(key, w, chat_next))
    }

    /// Fans `event`, the sequencer's next, out: pushes it to every live
    /// watcher not pushed past it and buffers it for syncing ones. A `leave`
    /// ends the live watches of its user it reaches (one from before a
    /// watch's start is history; syncing watches decide at their finish,
    /// when their start is known): they are removed and returned.
    pub(super) fn push(&mut self, event: &Arc<Published>, sync_bytes: usize) -> Vec<Gone> {
        let mut pushed = 0u64;
        let mut ended = Vec::new();
        for (conn, w) in self.by_conn.iter_mut() {
            if w.buffer_if_syncing(event, sync_bytes) || event.seq < w.next {
                continue;
            }
            w.next = event.seq + 1;
            if w.outbox.push(event.frame.clone()) {
                pushed += 1;
            }
            if ends(event, &w.user) {
                ended.push(*conn);
            }
        }
        metrics::counter!("herald_pushes_total").increment(pushed);
        ended.into_iter().filter_map(|conn| self.remove(conn)).collect()
    }

    /// In a hot chat, `event` is announced later, not pushed: only syncing
    /// watchers take it (into their buffers).
    pub(super) fn buffer(&mut self, event: &Arc<Published>, sync_bytes: usize) {
        for w in self.by_conn.values_mut() {
            w.buffer_if_syncing(event, sync_bytes);
        }
    }

    /// Pushes one shared `notify` of `seq` to the live watchers of `slot`
    /// not pushed that far; they fetch the rest. Returns whether watchers of
    /// other slots are still behind.
    pub(super) fn announce(&mut self, key: &ChatKey, seq: u64, slot: u64) -> bool {
        let mut frame = None;
        let (mut pushed, mut behind) = (0u64, false);
        for (conn, w) in self.by_conn.iter_mut() {
            if w.syncing.is_some() || w.next > seq {
                continue;
            }
            if conn % NOTIFY_SLOTS != slot {
                behind = true;
                continue;
            }
            w.next = seq + 1;
            let frame = frame.get_or_insert_with(|| Frame::from(notify_push(&key.chat, seq)));
            if w.outbox.push(frame.clone()) {
                pushed += 1;
            }
        }
        metrics::counter!("herald_hub_notifies_total").increment(pushed);
        behind
    }

    /// Whether `conn` watches the chat live as `user`: it is a member, and
    /// every event the sequencer passed is older than its end.
    pub(super) fn live_as(&self, conn: ConnId, user: &str) -> bool {
        self.by_conn.get(&conn).is_some_and(|w| w.syncing.is_none() && *w.user == *user)
    }

    /// `conn`'s watch (if any) gets presence pushes from now on.
    pub(super) fn follow_presence(&mut self, conn: ConnId) {
        if let Some(w) = self.by_conn.get_mut(&conn) {
            w.follows = true;
        }
    }

    /// Pushes `user`'s typing `frame` to the live watchers but `user`'s own connections.
    pub(super) fn push_typing(&self, frame: &Frame, user: &str) -> u64 {
        let mut pushed = 0u64;
        for w in self.by_conn.values() {
            if w.syncing.is_none() && &*w.user != user && w.outbox.push(frame.clone()) {
                pushed += 1;
            }
        }
        pushed
    }

    /// Pushes `frame` to every live watcher (not one still syncing: its replay reads the store
    /// after this); returns how many took it.
    pub(super) fn push_live(&self, frame: &Frame) -> u64 {
        let mut pushed = 0;
        for w in self.by_conn.values() {
            if w.syncing.is_none() && w.outbox.push(frame.clone()) {
                pushed += 1;
            }
        }
        pushed
    }

    /// Pushes a presence `frame` to every live watcher that follows
    /// presence; returns how many took it.
    pub(super) fn push_presence(&self, frame: &Frame) -> u64 {
        let mut pushed = 0;
        for w in self.by_conn.values() {
            if w.follows && w.syncing.is_none() && w.outbox.push(frame.clone()) {
                pushed += 1;
            }
        }
        pushed
    }
}

/// Whether `event` is a `leave` of `user`.
fn ends(event: &Published, user: &str) -> bool {
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
