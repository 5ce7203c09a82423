//! Each watched chat's recent events (its window), kept by its entry so that `fetch` and
//! watch replays of what was just pushed (or announced by a `notify`) need no
//! store read.
//!
//! Only hot chats keep one (their notifies are what send watchers
//! fetching; any other chat's rare fetch reads the store): while a chat is
//! hot, the sequencer hands each of its events to [`Recent::push`] in seq
//! order, so the window is contiguous, and it is emptied when the chat
//! cools: it holds seqs `start..end`, and
//! `end - 1` is the sequencer's head. An event that does not follow (the
//! sequencer skipped a gap it could not repair) starts the window over.
//!
//! It holds each event's push frame, the very bytes already shared with the
//! watchers' outboxes, and keeps them as the store shows them now: an `edit`
//! gives its target message the new body and `"edited"`, a `delete` makes
//! the target `"body": null, "deleted": true` and nulls the new body in that
//! message's `edit` events (PROTOCOL v1.1's stored view, the same updates
//! the store's apply makes). v1.2's stored view too: a thread reply moves its
//! root's `replies`, a `reaction` its target's `reactions` (the window knows
//! who reacts with what, since every message it holds was born in it), a
//! `pin` its target's `pinned`, an edit's `mentions` replace the target's, a
//! stream's final edit makes it `done`, and a delete unpins, unmentions, ends
//! its target and drops its reaction counts, and takes it out of its root's
//! `replies`. Reads, joins,
//! leaves and profiles change no earlier event. A page from it is therefore
//! the stored view as of the window's head, with one exception it refuses to
//! serve: an open stream's text grows by appends, which are not events, so a
//! page or replay that would include an open stream is read from the store.
//!
//! An event read back from the log (a catch-up after a gap) shows the stored
//! view as of that read, which may already include the changes of events
//! after it. The window keeps it (edits and deletes are applied idempotently,
//! as before v1.2), but a later reply, reaction, pin or delete of a reply
//! that would change such a message's counts starts the window over after
//! that event, rather than count something twice.
//!
//! Bytes are bounded twice: per chat ([`Budget::chat`]) and per node
//! ([`Budget::node`]); a chat over either drops its oldest events first. A
//! chat's window is freed with its entry, when its last watcher goes.
//!
//! Plain data: no locks of its own, no I/O. The entry ([`super::entry`])
//! holds one under the chat's lock and decides when it is read (only for a
//! live watcher of the chat, or a replay the chat layer checked).

mod page;
pub use page::CachedPage;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};

use herald_protocol::frame::EventPush;
use herald_protocol::{Event, EventType, Replies, StreamState};
use serde_json::value::RawValue;

use crate::model::Published;
use crate::outbox::Frame;

/// Default node-wide bytes of cached events: a few hundred busy chats' last
/// minutes, small beside the outboxes of the connections watching them.
pub const DEFAULT_RECENT_BYTES: usize = 64 * 1024 * 1024;
/// Default bytes of cached events per chat: at 200 messages/s of 200 bytes,
/// about 100 s of it, far more than a `notify` period or a quick reconnect.
pub const DEFAULT_RECENT_CHAT_BYTES: usize = 4 * 1024 * 1024;

/// `{"ev":"event","chat":` opening every push frame, before the chat's name.
const PUSH_OPENING: usize = r#"{"ev":"event","chat":"#.len();

/// The node's byte budget for cached events.
pub(super) struct Budget {
    /// Bytes held by every chat's window together.
    used: AtomicUsize,
    /// Most bytes all windows may hold together.
    node: usize,
    /// Most bytes one chat's window may hold.
    chat: usize,
}

impl Budget {
    pub(super) fn new(node: usize, chat: usize) -> Budget {
        Budget { used: AtomicUsize::new(0), node, chat: chat.min(node) }
    }

    /// Bytes held now by every window.
    pub(super) fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn add(&self, n: usize) {
        self.used.fetch_add(n, Ordering::Relaxed);
        metrics::gauge!("herald_hub_cache_bytes").increment(n as f64);
    }

    fn sub(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::Relaxed);
        metrics::gauge!("herald_hub_cache_bytes").decrement(n as f64);
    }
}

/// One chat's window of recent events.
#[derive(Default)]
pub(super) struct Recent {
    /// The seq of `events[0]`, or of the next event when empty (0: nothing yet).
    start: u64,
    events: VecDeque<Cached>,
    bytes: usize,
    /// Where the event's own JSON begins in its push frame, after the chat's
    /// name: the same for every event of the chat.
    cut: usize,
    /// The budget its bytes count in, once it holds any.
    budget: Option<std::sync::Arc<Budget>>,
    /// v1.2: the streams it holds that are still open.
    open_streams: BTreeSet<u64>,
    /// How many of its events were read back from the log.
    from_log: usize,
}

struct Cached {
    frame: Frame,
    kind: EventType,
    /// `edit` events: the message they change.
    target: u64,
    /// v1.2, messages: the root of the thread they reply in, 0 if none.
    thread: u64,
    /// Messages: deleted.
    deleted: bool,
    /// v1.2, messages someone reacted to: who reacts with what now.
    reactors: Option<BTreeMap<String, BTreeSet<String>>>,
    /// Bytes of `reactors`, counted in the budget.
    extra: usize,
    /// Read back from the log: its view may include later events' changes.
    from_log: bool,
    /// v1.2: its frame carries file URLs signed no earlier than this (its event's ts), 0 if none.
    /// A page is served from the window only within the hour of that time, so every URL it carries
    /// is good for an hour more (see `crate::model::UrlWindow`).
    files_ms: i64,
}

impl Recent {
    /// The seq after the window's last event.
    fn end(&self) -> u64 {
        self.start + self.events.len() as u64
    }

    /// Appends `event`, the sequencer's next, and applies what it changes
    /// in earlier events; then drops the oldest events beyond the budget.
    pub(super) fn push(&mut self, budget: &std::sync::Arc<Budget>, chat: &str, event: &Published) {
        if self.budget.is_none() {
            self.budget = Some(budget.clone());
            self.cut = PUSH_OPENING + serde_json::to_string(chat).map_or(0, |s| s.len()) + 1;
        }
        if event.seq != self.end() || self.start == 0 {
            self.clear();
            self.start = event.seq;
        }
        if self.counts_on_log(event) {
            // It would change counts of a message whose view came from the log: start over after it.
            self.clear();
            self.start = event.seq + 1;
            metrics::counter!("herald_hub_cache_restarts_total").increment(1);
            return;
        }
        let mut cached = Cached {
            frame: event.frame.clone(),
            kind: event.kind,
            target: 0,
            thread: 0,
            deleted: false,
            reactors: None,
            extra: 0,
            from_log: event.from_log,
            files_ms: if carries_files(&event.frame) { event.ts } else { 0 },
        };
        if event.from_log {
            self.from_log += 1;
            if event.kind == EventType::Message {
                cached.deleted = parse(&event.frame).is_some_and(|e| e.deleted);
            }
        }
        match event.kind {
            EventType::Edit | EventType::Delete => cached.target = self.apply_lifecycle(chat, event),
            EventType::Message => self.apply_message(chat, event, &mut cached),
            EventType::Reaction => self.apply_reaction(chat, event),
            EventType::Pin => self.apply_pin(chat, event),
            _ => {}
        }
        let len = event.frame.as_str().len();
        self.events.push_back(cached);
        self.grow(len as isize);
        self.trim();
    }

    /// v1.2: a new message in a thread counts among its root's replies; a stream opens.
    fn apply_message(&mut self, chat: &str, event: &Published, cached: &mut Cached) {
        let frame = event.frame.as_str();
        if !frame.contains("\"thread\":") && !frame.contains("\"stream\":\"open\"") {
            return;
        }
        let Some(parsed) = parse(&event.frame) else { return };
        if parsed.stream == Some(StreamState::Open) {
            self.open_streams.insert(event.seq);
        }
        if let Some(root) = parsed.thread {
            cached.thread = root;
            self.rewrite(chat, root, |m| {
                if m.kind != EventType::Message {
                    return false;
                }
                let count = m.replies.map_or(0, |r| r.count) + 1;
                m.replies = Some(Replies { count, last: event.seq });
                true
            });
        }
    }

    /// v1.2: a `reaction` moves its target message's count of that emoji.
    fn apply_reaction(&mut self, chat: &str, event: &Published) {
        #[derive(serde::Deserialize)]
        struct React {
            target: u64,
            emoji: String,
            on: bool,
        }
        let Some(parsed) = parse(&event.frame) else { return };
        let (Ok(r), Some(user)) = (serde_json::from_str::<React>(parsed.body.get()), event.user.as_deref()) else {
            return;
        };
        let Some(i) = self.index(r.target) else { return };
        let cached = &mut self.events[i];
        if cached.kind != EventType::Message || cached.deleted {
            return;
        }
        let reactors = cached.reactors.get_or_insert_with(Default::default);
        let users = reactors.entry(r.emoji.clone()).or_default();
        let size = (r.emoji.len() + user.len() + 48) as isize;
        let changed = if r.on { users.insert(user.to_owned()) } else { users.remove(user) };
        if !changed {
            return;
        }
        let count = users.len() as u64;
        if count == 0 {
            reactors.remove(&r.emoji);
        }
        let delta = if r.on { size } else { -size };
        cached.extra = cached.extra.saturating_add_signed(delta);
        self.grow(delta);
        self.rewrite(chat, r.target, |m| {
            let counts = m.reactions.get_or_insert_with(BTreeMap::new);
            if count == 0 {
                counts.remove(&r.emoji);
            } else {
                counts.insert(r.emoji.clone(), count);
            }
            if counts.is_empty() {
                m.reactions = None;
            }
            true
        });
    }

    /// v1.2: a `pin` pins or unpins its target.
    fn apply_pin(&mut self, chat: &str, event: &Published) {
        #[derive(serde::Deserialize)]
        struct PinBody {
            target: u64,
            on: bool,
        }
        let Some(parsed) = parse(&event.frame) else { return };
        let Ok(p) = serde_json::from_str::<PinBody>(parsed.body.get()) else { return };
        self.rewrite(chat, p.target, |m| {
            if m.kind != EventType::Message || m.deleted {
                return false;
            }
            m.pinned = p.on;
            true
        });
    }

    /// Whether `event` would change the counts (replies, reactions, pin) of a message the window
    /// holds as read back from the log.
    fn counts_on_log(&self, event: &Published) -> bool {
        #[derive(serde::Deserialize)]
        struct Target {
            target: u64,
        }
        if self.from_log == 0 {
            return false;
        }
        let from_log = |seq: u64| self.index(seq).is_some_and(|i| self.events[i].from_log);
        let target = || parse(&event.frame).and_then(|e| serde_json::from_str::<Target>(e.body.get()).ok());
        match event.kind {
            EventType::Message if event.frame.as_str().contains("\"thread\":") => {
                parse(&event.frame).and_then(|e| e.thread).is_some_and(from_log)
            }
            EventType::Reaction | EventType::Pin => target().is_some_and(|t| from_log(t.target)),
            EventType::Delete => target().is_some_and(|t| {
                from_log(t.target) || self.index(t.target).is_some_and(|i| from_log(self.events[i].thread))
            }),
            _ => false,
        }
    }

    /// The place in `events` of `seq`, if the window holds it.
    fn index(&self, seq: u64) -> Option<usize> {
        seq.checked_sub(self.start).filter(|&i| i < self.events.len() as u64).map(|i| i as usize)
    }

    /// Changes `event`'s target as the store did; returns the target.
    fn apply_lifecycle(&mut self, chat: &str, event: &Published) -> u64 {
        #[derive(serde::Deserialize)]
        struct Change<'a> {
            target: u64,
            #[serde(borrow)]
            body: Option<&'a RawValue>,
        }
        let Some(parsed) = parse(&event.frame) else { return 0 };
        let Ok(change) = serde_json::from_str::<Change>(parsed.body.get()) else {
            tracing::warn!(seq = event.seq, "cached window: an edit or delete without a target; window dropped");
            self.clear();
            self.start = event.seq;
            return 0;
        };
        let t = change.target;
        match event.kind {
            EventType::Edit => {
                let Some(body) = change.body else { return t };
                let mentions = parsed.mentions.clone();
                let files = parsed.files.clone();
                self.open_streams.remove(&t);
                if let (Some(given), Some(i)) = (&files, self.index(t)) {
                    self.events[i].files_ms = if given.is_empty() { 0 } else { event.ts };
                }
                self.rewrite(chat, t, |m| {
                    // A view read later (a catch-up from the log) may already show this edit or a later one.
                    if m.kind != EventType::Message || m.deleted || m.edited.is_some_and(|e| e >= event.seq) {
                        return false;
                    }
                    m.body = body.to_owned();
                    m.edited = Some(event.seq);
                    if let Some(given) = mentions {
                        m.mentions = (!given.is_empty()).then_some(given);
                    }
                    if let Some(given) = files {
                        m.files = (!given.is_empty()).then_some(given);
                    }
                    if m.stream == Some(StreamState::Open) {
                        m.stream = Some(StreamState::Done);
                    }
                    true
                });
            }
            _ => {
                self.open_streams.remove(&t);
                self.rewrite(chat, t, |m| {
                    if m.kind != EventType::Message || m.deleted {
                        return false;
                    }
                    m.body = null();
                    m.deleted = true;
                    m.pinned = false;
                    m.mentions = None;
                    m.reactions = None;
                    m.files = None;
                    if m.stream == Some(StreamState::Open) {
                        m.stream = Some(StreamState::Done);
                    }
                    true
                });
                let root = match self.index(t) {
                    Some(i) => {
                        let cached = &mut self.events[i];
                        cached.deleted = true;
                        cached.reactors = None;
                        let extra = std::mem::take(&mut cached.extra);
                        let thread = cached.thread;
                        self.grow(-(extra as isize));
                        thread
                    }
                    None => 0,
                };
                if root != 0 {
                    // Every reply of a root the window holds is in the window (they came after it).
                    let last = (self.start..)
                        .zip(&self.events)
                        .filter(|(_, c)| c.kind == EventType::Message && c.thread == root && !c.deleted)
                        .map(|(seq, _)| seq)
                        .last();
                    self.rewrite(chat, root, |m| {
                        let count = m.replies.map_or(0, |r| r.count).saturating_sub(1);
                        m.replies = last.filter(|_| count > 0).map(|last| Replies { count, last });
                        true
                    });
                }
                let edits: Vec<u64> = (self.start..)
                    .zip(&self.events)
                    .filter(|(_, c)| c.kind == EventType::Edit && c.target == t)
                    .map(|(seq, _)| seq)
                    .collect();
                // What the store's erasure writes into them: the edit's shape, its new body null.
                let erased = RawValue::from_string(format!(r#"{{"target":{t},"body":null}}"#)).expect("JSON");
                for seq in edits {
                    self.rewrite(chat, seq, |e| {
                        e.body = erased.clone();
                        e.mentions = None;
                        true
                    });
                }
            }
        }
        t
    }

    /// Re-encodes the cached event `seq`, if the window holds it, after `change` (which says whether it changed it).
    fn rewrite(&mut self, chat: &str, seq: u64, change: impl FnOnce(&mut Event) -> bool) {
        let Some(i) = seq.checked_sub(self.start).filter(|&i| i < self.events.len() as u64) else { return };
        let cached = &mut self.events[i as usize];
        let Some(mut event) = parse(&cached.frame) else { return };
        if !change(&mut event) {
            return;
        }
        let frame = Frame::from(EventPush::new(chat, &event).encode());
        let delta = frame.as_str().len() as isize - cached.frame.as_str().len() as isize;
        cached.frame = frame;
        self.grow(delta);
    }

    fn grow(&mut self, delta: isize) {
        let budget = self.budget.as_ref().expect("set on the first push");
        if delta >= 0 {
            budget.add(delta as usize);
        } else {
            budget.sub(delta.unsigned_abs());
        }
        self.bytes = self.bytes.saturating_add_signed(delta);
    }

    /// Drops the oldest events while the chat is over its cap or the node over its budget.
    fn trim(&mut self) {
        let Some(budget) = self.budget.clone() else { return };
        let mut dropped = 0u64;
        while !self.events.is_empty() && (self.bytes > budget.chat || budget.used() > budget.node) {
            let old = self.events.pop_front().expect("not empty");
            self.from_log -= usize::from(old.from_log);
            self.open_streams.remove(&self.start);
            self.start += 1;
            self.grow(-((old.frame.as_str().len() + old.extra) as isize));
            dropped += 1;
        }
        if dropped > 0 {
            metrics::counter!("herald_hub_cache_evicted_total").increment(dropped);
        }
    }

    /// Empties the window (its next event starts it over).
    pub(super) fn clear(&mut self) {
        self.events.clear();
        self.open_streams.clear();
        self.from_log = 0;
        if let Some(budget) = &self.budget {
            budget.sub(self.bytes);
        }
        self.bytes = 0;
        self.start = 0;
    }

    /// Whether it holds no event.
    pub(super) fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Bytes held.
    #[cfg(test)]
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The seqs held, as `start..end`.
    #[cfg(test)]
    pub(super) fn span(&self) -> std::ops::Range<u64> {
        self.start..self.end()
    }
}

impl Drop for Recent {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget {
            budget.sub(self.bytes);
        }
    }
}

/// The event in a push frame.
/// Whether a push frame may carry files (a body that merely mentions the word costs only its
/// window hits).
fn carries_files(frame: &Frame) -> bool {
    frame.as_str().contains("\"files\":[{")
}

fn parse(frame: &Frame) -> Option<Event> {
    match serde_json::from_str(frame.as_str()) {
        Ok(event) => Some(event),
        Err(e) => {
            tracing::error!(error = %e, "a cached push frame does not parse");
            None
        }
    }
}

fn null() -> Box<RawValue> {
    RawValue::from_string("null".into()).expect("null is JSON")
}
