//! v1.2's streamed messages in the chat layer: the `append` op, the coalescing of its pushes (at
//! most one per [`APPEND_EVERY`] per stream, in order, each with its `at`), and the timeout that
//! ends a stream nobody appended to for [`STREAM_IDLE`].
//!
//! An append is durable when answered: it is a write of the log's batches (`Write::StreamText`)
//! that stores no event. What watchers see of it are `append` pushes, which are not events: they
//! travel as broker signals ([`crate::hub::Hub::append`]) and carry `at`, the text's length before
//! the chunk, so a client that missed one (a push lost between nodes, a watch that started
//! mid-stream) sees a length that does not match and fetches the message again.
//!
//! Coalescing keeps each stream's chunks that arrive within [`APPEND_EVERY`] of its last push in
//! one buffer, in `at` order (writes answered out of order wait for the chunk before them), and
//! pushes the buffer when the period ends. The end of a stream drops what is buffered: its `edit`
//! event carries the whole text. Not here: the rules of the write (`store/apply/stream.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use herald_protocol::frame::utf16_len;
use herald_protocol::reply::EmptyOk;
use tokio::time::Instant;

use super::{Caller, Chats, Writes};
use crate::error::Error;
use crate::hub::Hub;
use crate::model::ChatKey;
use crate::store::{Actor, Write};

/// The least time between two `append` pushes of one stream.
pub const APPEND_EVERY: Duration = Duration::from_millis(40);
/// A stream with no append for this long is ended by the server.
pub const STREAM_IDLE: Duration = Duration::from_secs(60);
/// How often the server looks for idle streams: an idle stream ends within
/// `STREAM_IDLE + SWEEP_EVERY` of its last append (the contract's 90 s).
const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// Idle streams ended per sweep at most; the rest wait for the next one.
const SWEEP_BATCH: u32 = 500;

/// The node's streams with pushes pending.
pub(super) struct Streams {
    me: Weak<Streams>,
    hub: Arc<Hub>,
    pending: Mutex<HashMap<(ChatKey, u64), Pending>>,
}

/// One stream's text waiting for its push.
struct Pending {
    /// Where `buf` starts in the message's text (UTF-16 code units).
    buf_at: u64,
    buf: String,
    /// Where the next chunk must start: `buf_at` plus `buf`'s length.
    next: u64,
    /// Chunks answered before the one they follow, by their `at`.
    early: BTreeMap<u64, String>,
    /// When the last push of this stream went out.
    last_push: Option<Instant>,
    /// Whether a flush is scheduled.
    scheduled: bool,
}

impl Streams {
    pub(super) fn new(hub: Arc<Hub>) -> Arc<Streams> {
        Arc::new_cyclic(|me| Streams { me: me.clone(), hub, pending: Mutex::new(HashMap::new()) })
    }

    /// A durable append of `text` at `at` to stream `target` of `key`: pushed now if the stream's
    /// last push is [`APPEND_EVERY`] old, else with the next push.
    pub(super) fn offer(&self, key: &ChatKey, target: u64, text: &str, at: u64) {
        let slot = (key.clone(), target);
        let mut pending = self.pending.lock().expect("streams lock");
        let p = pending.entry(slot.clone()).or_insert_with(|| Pending {
            buf_at: at,
            buf: String::new(),
            next: at,
            early: BTreeMap::new(),
            last_push: None,
            scheduled: false,
        });
        match at.cmp(&p.next) {
            std::cmp::Ordering::Equal => {
                p.buf.push_str(text);
                p.next += utf16_len(text);
                while let Some(more) = p.early.remove(&p.next) {
                    p.next += utf16_len(&more);
                    p.buf.push_str(&more);
                }
            }
            std::cmp::Ordering::Greater => {
                p.early.insert(at, text.to_owned());
            }
            // Already pushed (a repeat): nothing new.
            std::cmp::Ordering::Less => return,
        }
        if !p.scheduled {
            p.scheduled = true;
            let when = p.last_push.map_or_else(Instant::now, |last| last + APPEND_EVERY);
            drop(pending);
            self.schedule(slot, when);
        }
    }

    /// Stream `target` of `key` ended: what is buffered is dropped (the end's `edit` carries it).
    pub(super) fn end(&self, key: &ChatKey, target: u64) {
        self.pending.lock().expect("streams lock").remove(&(key.clone(), target));
    }

    fn schedule(&self, slot: (ChatKey, u64), when: Instant) {
        let me = self.me.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(when).await;
            if let Some(me) = me.upgrade() {
                me.flush(slot);
            }
        });
    }

    /// Pushes what `slot` has buffered; forgets a stream with nothing left.
    fn flush(&self, slot: (ChatKey, u64)) {
        let mut pending = self.pending.lock().expect("streams lock");
        let Some(p) = pending.get_mut(&slot) else { return };
        p.scheduled = false;
        if p.buf.is_empty()
            && let Some((&at, _)) = p.early.first_key_value()
        {
            // A chunk before these never came (its write failed): go on from them; watchers see
            // the gap in `at` and fetch the message.
            p.buf_at = at;
            p.next = at;
            while let Some(more) = p.early.remove(&p.next) {
                p.next += utf16_len(&more);
                p.buf.push_str(&more);
            }
        }
        if p.buf.is_empty() {
            pending.remove(&slot);
            return;
        }
        let (text, at) = (std::mem::take(&mut p.buf), p.buf_at);
        p.buf_at = p.next;
        p.last_push = Some(Instant::now());
        if !p.early.is_empty() {
            p.scheduled = true;
            let when = Instant::now() + APPEND_EVERY;
            drop(pending);
            self.schedule(slot.clone(), when);
        } else {
            drop(pending);
        }
        self.hub.append(&slot.0, slot.1, &text, at);
        metrics::counter!("herald_append_flushes_total").increment(1);
    }
}

impl Writes<'_> {
    /// `append`: adds `text` to the end of `c`'s open stream `target`; with `done`, ends it.
    pub async fn append(
        &self,
        c: &Caller,
        chat: &str,
        target: u64,
        text: String,
        done: bool,
    ) -> Result<EmptyOk, Error> {
        self.stream_text(c.key(chat), Some(c.user.clone()), Actor::Client, target, text, done).await
    }

    /// The server API's append, as the message's sender.
    pub async fn admin_append(&self, key: ChatKey, target: u64, text: String, done: bool) -> Result<EmptyOk, Error> {
        self.stream_text(key, None, Actor::Admin, target, text, done).await
    }

    async fn stream_text(
        &self,
        key: ChatKey,
        user: Option<Arc<str>>,
        actor: Actor,
        target: u64,
        text: String,
        done: bool,
    ) -> Result<EmptyOk, Error> {
        let limit = self.g.limits.settings.body_limit;
        let write = Write::StreamText { key: key.clone(), user, actor, target, text: text.clone(), done, limit };
        let w = self.g.write(write).await?;
        metrics::counter!("herald_stream_appends_total").increment(1);
        if done {
            self.g.streams.end(&key, target);
        } else if let Some(at) = w.at {
            self.g.streams.offer(&key, target, &text, at);
        }
        Ok(EmptyOk {})
    }

    /// Ends the streams idle since before `idle_before_ms`; returns how many it ended.
    pub async fn end_idle_streams(&self, idle_before_ms: i64) -> usize {
        let idle = match self.g.store.idle_streams(idle_before_ms, SWEEP_BATCH).await {
            Ok(idle) => idle,
            Err(e) => {
                tracing::warn!(error = %e, "looking for idle streams failed; the next sweep tries again");
                return 0;
            }
        };
        let mut ended = 0;
        for (key, target) in idle {
            match self.stream_text(key.clone(), None, Actor::Admin, target, String::new(), true).await {
                Ok(_) => ended += 1,
                Err(e) => tracing::warn!(chat = %key, target, error = %e, "ending an idle stream failed"),
            }
        }
        if ended > 0 {
            metrics::counter!("herald_streams_timed_out_total").increment(ended as u64);
        }
        ended
    }
}

impl Chats {
    /// Ends, every [`SWEEP_EVERY`], the streams nobody appended to for [`STREAM_IDLE`]. Runs
    /// until these chats are dropped. Every node of a cell sweeps; ending a stream twice stores
    /// one `edit`.
    pub fn spawn_stream_timeouts(self: &Arc<Self>) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(chats) = me.upgrade() else { return };
                chats.writes().end_idle_streams(crate::store::now_ms() - STREAM_IDLE.as_millis() as i64).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Broker;
    use crate::broker::memory::MemoryBroker;
    use crate::chat::{ChatLimits, ChatSettings};
    use crate::store::sqlite::SqliteStore;
    use crate::store::{Conversation, Store};
    use serde_json::value::RawValue;

    #[tokio::test]
    async fn the_server_ends_a_stream_nobody_appended_to() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).unwrap());
        let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::new());
        let hub = Hub::new(broker.clone(), store.clone(), 0, 1 << 20);
        let settings = ChatSettings { body_limit: 1024, chat_join_rate: 0 };
        let chats = Chats::new(store.clone(), broker, hub, ChatLimits::new(settings, 1 << 20));
        let key = ChatKey::new("w", "g");
        chats.members().put_chat(key.clone(), true, None).await.unwrap();
        let body = RawValue::from_string(r#"{"text":"half"}"#.into()).unwrap();
        let conv = Conversation { stream: true, ..Conversation::default() };
        let seq = chats.writes().post_event(key.clone(), false, Some("bot"), body, None, conv).await.unwrap().seq;
        chats.writes().admin_append(key.clone(), seq, " a reply".into(), false).await.unwrap();

        // Not idle yet: nothing ends.
        assert_eq!(chats.writes().end_idle_streams(crate::store::now_ms() - 60_000).await, 0);
        // Idle: ended with one edit of its text so far, once.
        assert_eq!(chats.writes().end_idle_streams(crate::store::now_ms() + 1).await, 1);
        assert_eq!(chats.writes().end_idle_streams(crate::store::now_ms() + 1).await, 0);
        let f = store.fetch(&key, None, 0, 10).await.unwrap();
        let edit = f.events.last().unwrap();
        assert_eq!(edit.kind, herald_protocol::EventType::Edit);
        assert_eq!(edit.user.as_deref(), Some("bot"));
        assert_eq!(edit.body.get(), format!(r#"{{"target":{seq},"body":{{"text":"half a reply"}}}}"#));
        let message = f.events.iter().find(|e| e.seq == seq).unwrap();
        assert_eq!(message.stream, Some(herald_protocol::StreamState::Done));
    }

    #[tokio::test]
    async fn appends_answered_out_of_order_are_pushed_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).unwrap());
        let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::new());
        let hub = Hub::new(broker, store, 0, 1 << 20);
        let streams = Streams::new(hub);
        let key = ChatKey::new("w", "g");
        streams.offer(&key, 5, "ab", 0);
        streams.offer(&key, 5, "ef", 4);
        streams.offer(&key, 5, "cd", 2);
        {
            let pending = streams.pending.lock().unwrap();
            let p = &pending[&(key.clone(), 5)];
            assert_eq!((p.buf.as_str(), p.buf_at, p.next), ("abcdef", 0, 6));
            assert!(p.early.is_empty());
        }
        streams.offer(&key, 5, "ab", 0);
        assert_eq!(streams.pending.lock().unwrap()[&(key.clone(), 5)].buf, "abcdef", "a repeat adds nothing");
        streams.end(&key, 5);
        assert!(streams.pending.lock().unwrap().is_empty());
    }
}
