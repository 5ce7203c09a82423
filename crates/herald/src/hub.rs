//! The node's own fan-out: which local connections watch which chat, and the
//! pushing of each chat's events to them in seq order.
//!
//! A chat has an entry here only while it has local watchers; the first
//! watcher subscribes the node at the broker and the last one unsubscribes
//! it. Each entry runs a small sequencer: events may reach the hub out of
//! order (two sends of one chat finishing on different tasks, or a broker
//! hint arriving late), so an event ahead of the next expected seq is held
//! until the gap fills, for at most [`GAP_WAIT`]. After that the hub moves on
//! and watchers see the gap, which the protocol tells clients to fetch.
//!
//! A gap is first repaired from the store through [`Backfill`] (the chat
//! layer's read of the log); only if that fails too does the hub move on.
//! The broker asks for the same catch-up after a reconnect or a dropped
//! message ([`Sink::resync`]) and after a new subscription has had time to
//! reach every broker server ([`Sink::catch_up`]).
//!
//! Starting a watch is two steps around a store read, so that no event falls
//! between the replay and the live stream: [`Hub::begin_watch`] registers the
//! watcher in a syncing state that buffers live events; the chat layer then
//! reads the log; [`Hub::finish_watch`] pushes the reply, the replay, then the
//! buffered events with seq above the replay. Anything published before the
//! registration was stored before it, hence before the read.
//!
//! A hot chat (events times local watchers past `--hot-chat-deliveries`
//! within a second; off by default) stops pushing each event: every
//! [`HOT_NOTIFY_EVERY`] its watchers get one shared `notify` with the latest
//! seq and fetch what they lack, so a client gets a few frames a second from
//! it whatever its rate. It cools after a whole second under half the
//! threshold. `leave` events are still pushed, since they end watches. It
//! saves the clients frames, not the server work, when they fetch it all
//! (measured: docs/benchmarks.md), hence off unless an operator asks.
//!
//! Lock order: shard map, then a chat's state, then an outbox. The hub knows
//! a connection only as its [`Outbox`].

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use herald_protocol::EventType;
use herald_protocol::frame::notify_push;

use crate::broker::{Broker, Sink};
use crate::model::{ChatKey, Published};
use crate::outbox::{ConnId, Frame, Outbox};
use crate::store::BoxFuture;

/// How long an event ahead of a gap is held before the hub gives up on the
/// gap. Re-ordered publishes of one node fill a gap in microseconds; a lost
/// broker hint never does.
pub const GAP_WAIT: Duration = Duration::from_millis(250);
/// Events held per chat while waiting for a gap. Beyond it the hub moves on at once.
const MAX_HELD: usize = 1024;
/// Live events buffered for one watcher while its replay is read. Beyond it
/// the watcher is told to fetch (`notify`) instead.
const MAX_SYNC_BUFFER: usize = 1024;
/// Shards of the chat map: enough that watch churn on many cores rarely contends.
const SHARDS: usize = 64;
/// How often a hot chat's watchers hear of its latest seq.
pub const HOT_NOTIFY_EVERY: Duration = Duration::from_millis(250);
/// Events read per backfill page, and pages per catch-up before giving up on replaying.
const BACKFILL_PAGE: u32 = 500;
const BACKFILL_PAGES: usize = 10;

/// Reads a chat's events from the log, for the hub's repairs.
pub trait Backfill: Send + Sync + 'static {
    /// Events of `key` with seq > `after`, at most `limit`, encoded as pushes.
    fn events_after(&self, key: &ChatKey, after: u64, limit: u32) -> BoxFuture<'_, Option<Vec<Arc<Published>>>>;
}

/// The node's fan-out.
pub struct Hub {
    /// Itself, for the gap timers it starts.
    me: Weak<Hub>,
    shards: Box<[Mutex<Shard>]>,
    hasher: std::hash::RandomState,
    broker: Arc<dyn Broker>,
    backfill: OnceLock<Weak<dyn Backfill>>,
    /// Deliveries per second into one chat's local watchers at which it
    /// turns hot; 0: never.
    hot_deliveries: u64,
    started: tokio::time::Instant,
}

/// Part of the chat map.
type Shard = HashMap<ChatKey, Arc<Watched>>;

/// One chat's local watchers and sequencer.
struct Watched {
    key: ChatKey,
    state: Mutex<ChatState>,
}

#[derive(Default)]
struct ChatState {
    /// The next seq the sequencer expects; `None` until the first watch finishes.
    next: Option<u64>,
    /// Events ahead of `next`, waiting for the gap to fill.
    held: BTreeMap<u64, Arc<Published>>,
    /// Whether a gap timer is running.
    gap_timer: bool,
    watchers: HashMap<ConnId, Watcher>,
    /// The second (since the hub started) whose events `window_events` counts.
    window: u64,
    window_events: u32,
    /// Hot: watchers get a coalesced `notify` now and then, not each event.
    hot: bool,
    /// While hot: the latest seq not yet announced.
    unannounced: Option<u64>,
    /// Whether the timer that announces it is running.
    notify_timer: bool,
}

struct Watcher {
    outbox: Arc<Outbox>,
    user: Arc<str>,
    /// The lowest seq this connection may still be pushed; pushes only go up.
    next: u64,
    /// `Some` while the watch's replay is being read: live events wait here.
    /// Boxed: every watcher carries this field, few carry a buffer, so a
    /// pointer (8 bytes) beats an inline `Vec` (24) in every idle watch.
    #[allow(clippy::box_collection)]
    syncing: Option<Box<Vec<Arc<Published>>>>,
    /// Live events were dropped from `syncing` for lack of room.
    overflowed: bool,
}

impl Watcher {
    /// While the watch's replay is read, keeps `event` for after it (or notes
    /// that there was no room). Returns whether the watcher is still syncing.
    fn buffer_if_syncing(&mut self, event: &Arc<Published>) -> bool {
        let Some(buf) = &mut self.syncing else { return false };
        if buf.len() < MAX_SYNC_BUFFER {
            buf.push(event.clone());
        } else {
            self.overflowed = true;
        }
        true
    }
}

/// What the chat layer read for a watch, to be pushed by [`Hub::finish_watch`].
pub struct Replay {
    /// The `watch` reply.
    pub reply: Frame,
    /// The chat's latest seq when the log was read.
    pub latest: u64,
    /// The events to replay, in seq order (empty without `after`).
    pub frames: Vec<(u64, Frame)>,
    /// The replay was cut short: the watcher gets `notify` with `latest` instead of the rest.
    pub truncated: bool,
}

impl Hub {
    /// A hub whose chats turn hot at `hot_deliveries` deliveries per second (0: never).
    pub fn new(broker: Arc<dyn Broker>, hot_deliveries: u64) -> Arc<Hub> {
        let hub = Arc::new_cyclic(|me| Hub {
            me: me.clone(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::hash::RandomState::new(),
            broker: broker.clone(),
            backfill: OnceLock::new(),
            hot_deliveries,
            started: tokio::time::Instant::now(),
        });
        let sink: Arc<dyn Sink> = hub.clone();
        broker.attach(Arc::downgrade(&sink));
        hub
    }

    /// Connects the hub to the log it repairs gaps from. Called once, at start.
    pub fn set_backfill(&self, backfill: Weak<dyn Backfill>) {
        let _ = self.backfill.set(backfill);
    }

    fn shard(&self, key: &ChatKey) -> &Mutex<Shard> {
        // A process-local map: a per-process hash seed is fine here (never for routing).
        let h = self.hasher.hash_one(key);
        &self.shards[(h as usize) % SHARDS]
    }

    /// Registers `outbox`'s connection as a syncing watcher of `key`,
    /// replacing a previous watch of the same connection.
    pub fn begin_watch(&self, key: &ChatKey, user: &Arc<str>, outbox: &Arc<Outbox>) {
        let mut shard = self.shard(key).lock().expect("hub shard lock");
        let mut created = false;
        let watched = shard
            .entry(key.clone())
            .or_insert_with(|| {
                created = true;
                Arc::new(Watched { key: key.clone(), state: Mutex::new(ChatState::default()) })
            })
            .clone();
        let mut state = watched.state.lock().expect("hub chat lock");
        let previous = state.watchers.insert(
            outbox.id(),
            Watcher {
                outbox: outbox.clone(),
                user: user.clone(),
                next: 0,
                syncing: Some(Box::default()),
                overflowed: false,
            },
        );
        drop(state);
        drop(shard);
        if previous.is_none() {
            metrics::gauge!("herald_watches").increment(1.0);
        }
        if created {
            metrics::gauge!("herald_hub_chats").increment(1.0);
            self.broker.subscribe(key);
        }
    }

    /// Completes a watch begun with [`Hub::begin_watch`]: pushes the reply,
    /// the replay and the live events buffered meanwhile, then goes live.
    /// Returns false if the watch ended meanwhile (an `unwatch` or a `leave`).
    pub fn finish_watch(&self, key: &ChatKey, conn: ConnId, replay: Replay) -> bool {
        let Some(watched) = self.shard(key).lock().expect("hub shard lock").get(key).cloned() else {
            return false;
        };
        let mut state = watched.state.lock().expect("hub chat lock");
        if state.watchers.get(&conn).is_none_or(|w| w.syncing.is_none()) {
            return false;
        }
        if state.next.is_none() {
            state.next = Some(replay.latest + 1);
            self.release_held(&watched, &mut state);
            self.arm_gap_timer(&watched, &mut state);
        }
        let chat_next = state.next.unwrap_or(replay.latest + 1);
        let w = state.watchers.get_mut(&conn).expect("checked above");
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
        for ev in w.syncing.take().map(|b| *b).unwrap_or_default() {
            if ev.seq >= w.next {
                w.next = ev.seq + 1;
                w.outbox.push(ev.frame.clone());
                pushed += 1;
            }
        }
        if std::mem::take(&mut w.overflowed) && chat_next > w.next {
            w.outbox.push(Frame::from(notify_push(&key.chat, chat_next - 1)));
            w.next = chat_next;
        }
        metrics::counter!("herald_pushes_total").increment(pushed);
        true
    }

    /// Ends `conn`'s watch of `key`, if any.
    pub fn unwatch(&self, key: &ChatKey, conn: ConnId) {
        let mut shard = self.shard(key).lock().expect("hub shard lock");
        let Some(watched) = shard.get(key).cloned() else {
            return;
        };
        let mut state = watched.state.lock().expect("hub chat lock");
        if state.watchers.remove(&conn).is_none() {
            return;
        }
        metrics::gauge!("herald_watches").decrement(1.0);
        if state.watchers.is_empty() {
            shard.remove(key);
            drop(state);
            drop(shard);
            metrics::gauge!("herald_hub_chats").decrement(1.0);
            self.broker.unsubscribe(key);
        }
    }

    /// Chats with local watchers now.
    pub fn chats(&self) -> usize {
        self.shards.iter().map(|s| s.lock().expect("hub shard lock").len()).sum()
    }

    /// Drops the entry of `key` if its last watcher left while only its own lock was held.
    fn remove_if_empty(&self, key: &ChatKey) {
        let mut shard = self.shard(key).lock().expect("hub shard lock");
        let Some(watched) = shard.get(key).cloned() else {
            return;
        };
        if watched.state.lock().expect("hub chat lock").watchers.is_empty() {
            shard.remove(key);
            drop(shard);
            metrics::gauge!("herald_hub_chats").decrement(1.0);
            self.broker.unsubscribe(key);
        }
    }

    /// Runs `then` with this hub and `watched` after `delay`, unless the hub is gone by then.
    fn later<F, Fut>(&self, delay: Duration, watched: &Arc<Watched>, then: F)
    where
        F: FnOnce(Arc<Hub>, Arc<Watched>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let (hub, watched) = (self.me.clone(), watched.clone());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(hub) = hub.upgrade() {
                then(hub, watched).await;
            }
        });
    }

    /// Starts the timer that repairs `watched`'s gap, unless one runs or there is no gap.
    fn arm_gap_timer(&self, watched: &Arc<Watched>, state: &mut ChatState) {
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

    /// Delivers, in order, every stored event of `watched` after the sequencer's position.
    /// Returns false if the log could not be read.
    async fn catch_up_entry(&self, watched: &Arc<Watched>) -> bool {
        let Some(backfill) = self.backfill.get().and_then(Weak::upgrade) else { return false };
        for _ in 0..BACKFILL_PAGES {
            let Some(next) = watched.state.lock().expect("hub chat lock").next else { return true };
            let Some(events) = backfill.events_after(&watched.key, next - 1, BACKFILL_PAGE).await else {
                return false;
            };
            let n = events.len();
            if n > 0 {
                metrics::counter!("herald_hub_backfilled_total").increment(n as u64);
            }
            for event in events {
                self.deliver(event);
            }
            if n < BACKFILL_PAGE as usize {
                return true;
            }
        }
        true
    }

    /// Catches up chat `key` from the log, if this node watches it.
    fn catch_up_key(&self, key: &ChatKey) {
        let Some(watched) = self.shard(key).lock().expect("hub shard lock").get(key).cloned() else { return };
        let hub = self.me.clone();
        tokio::spawn(async move {
            if let Some(hub) = hub.upgrade() {
                hub.catch_up_entry(&watched).await;
            }
        });
    }
}

impl Sink for Hub {
    fn resync(&self) {
        let keys: Vec<ChatKey> = self
            .shards
            .iter()
            .flat_map(|s| s.lock().expect("hub shard lock").keys().cloned().collect::<Vec<_>>())
            .collect();
        tracing::info!(chats = keys.len(), "catching up every watched chat from the log");
        for key in keys {
            self.catch_up_key(&key);
        }
    }

    fn catch_up(&self, key: &ChatKey) {
        self.catch_up_key(key);
    }

    fn deliver(&self, event: Arc<Published>) {
        let Some(watched) = self.shard(&event.key).lock().expect("hub shard lock").get(&event.key).cloned() else {
            return;
        };
        let mut state = watched.state.lock().expect("hub chat lock");
        let emptied = match state.next {
            Some(next) if event.seq == next => {
                let mut emptied = self.fan_out(&watched, &mut state, &event);
                state.next = Some(next + 1);
                emptied |= self.release_held(&watched, &mut state);
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
                    state.next = Some(first);
                    self.release_held(&watched, &mut state)
                } else {
                    self.arm_gap_timer(&watched, &mut state);
                    false
                }
            }
        };
        drop(state);
        if emptied {
            self.remove_if_empty(&watched.key);
        }
    }
}

impl Hub {
    /// Pushes `event` to every live watcher and buffers it for syncing ones;
    /// in a hot chat, only notes it for the next coalesced `notify`.
    /// Returns true if a `leave` removed the last watcher.
    fn fan_out(&self, watched: &Arc<Watched>, state: &mut ChatState, event: &Arc<Published>) -> bool {
        if self.count_for_heat(watched, state) && event.kind != EventType::Leave {
            for w in state.watchers.values_mut() {
                w.buffer_if_syncing(event);
            }
            state.unannounced = Some(event.seq);
            self.arm_notify_timer(watched, state);
            return false;
        }
        let mut pushed = 0u64;
        for w in state.watchers.values_mut() {
            if w.buffer_if_syncing(event) || event.seq < w.next {
                continue;
            }
            w.next = event.seq + 1;
            if w.outbox.push(event.frame.clone()) {
                pushed += 1;
            }
        }
        metrics::counter!("herald_pushes_total").increment(pushed);
        if event.kind == EventType::Leave
            && let Some(user) = &event.user
        {
            let before = state.watchers.len();
            state.watchers.retain(|_, w| w.user != *user);
            let ended = before - state.watchers.len();
            metrics::gauge!("herald_watches").decrement(ended as f64);
            return ended > 0 && state.watchers.is_empty();
        }
        false
    }

    /// Counts one event of `watched` toward its heat and says whether the
    /// chat is hot now. A chat turns hot when its events times its local
    /// watchers pass [`Hub`]'s threshold within a second, and cools after a
    /// whole second under half of it.
    fn count_for_heat(&self, watched: &Watched, state: &mut ChatState) -> bool {
        if self.hot_deliveries == 0 {
            return false;
        }
        let window = self.started.elapsed().as_secs();
        let watchers = state.watchers.len() as u64;
        if state.window != window {
            let last = if window == state.window + 1 { u64::from(state.window_events) } else { 0 };
            if state.hot && last * watchers < self.hot_deliveries / 2 {
                state.hot = false;
                tracing::info!(chat = %watched.key, watchers, "chat cooled down: pushing events again");
                metrics::counter!("herald_hub_hot_switches_total", "to" => "events").increment(1);
            }
            state.window = window;
            state.window_events = 0;
        }
        state.window_events = state.window_events.saturating_add(1);
        if !state.hot && u64::from(state.window_events) * watchers >= self.hot_deliveries {
            state.hot = true;
            tracing::info!(chat = %watched.key, watchers, events_this_second = state.window_events,
                "chat is hot: pushing a coalesced notify instead of each event");
            metrics::counter!("herald_hub_hot_switches_total", "to" => "notify").increment(1);
        }
        state.hot
    }

    /// Starts the timer that announces a hot chat's latest seq, unless one runs.
    fn arm_notify_timer(&self, watched: &Arc<Watched>, state: &mut ChatState) {
        if state.notify_timer {
            return;
        }
        state.notify_timer = true;
        self.later(HOT_NOTIFY_EVERY, watched, |hub, watched| async move { hub.announce(&watched) });
    }

    /// Pushes one shared `notify` with a hot chat's latest seq to each live
    /// watcher that has not been pushed that far; they fetch the rest.
    fn announce(&self, watched: &Watched) {
        let mut state = watched.state.lock().expect("hub chat lock");
        state.notify_timer = false;
        let Some(seq) = state.unannounced.take() else { return };
        let frame = Frame::from(notify_push(&watched.key.chat, seq));
        let mut pushed = 0u64;
        for w in state.watchers.values_mut() {
            if w.syncing.is_none() && w.next <= seq {
                w.next = seq + 1;
                if w.outbox.push(frame.clone()) {
                    pushed += 1;
                }
            }
        }
        metrics::counter!("herald_hub_notifies_total").increment(pushed);
    }

    /// Fans out held events from `state.next` on while they are contiguous.
    fn release_held(&self, watched: &Arc<Watched>, state: &mut ChatState) -> bool {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::memory::MemoryBroker;
    use herald_protocol::Event;
    use serde_json::value::RawValue;

    fn event(key: &ChatKey, seq: u64) -> Arc<Published> {
        let body = RawValue::from_string("{}".into()).unwrap();
        let e = Event { seq, kind: EventType::Message, user: Some("u".into()), ts: 0, body, client_id: None };
        Published::new(key.clone(), &e)
    }

    /// A log holding seq 1..=`latest`; while it is read, it hands the hub the
    /// events in `meanwhile`, as reordered publishes would arrive.
    struct Log {
        hub: std::sync::Mutex<Weak<Hub>>,
        latest: u64,
        meanwhile: std::sync::Mutex<Vec<u64>>,
    }

    impl Backfill for Log {
        fn events_after(&self, key: &ChatKey, after: u64, limit: u32) -> BoxFuture<'_, Option<Vec<Arc<Published>>>> {
            let hub = self.hub.lock().unwrap().upgrade().unwrap();
            for seq in self.meanwhile.lock().unwrap().drain(..) {
                hub.deliver(event(key, seq));
            }
            let events = (after + 1..=self.latest.min(after + limit as u64)).map(|s| event(key, s)).collect();
            Box::pin(std::future::ready(Some(events)))
        }
    }

    fn pushed_seqs(outbox: &Outbox) -> Vec<u64> {
        pushed(outbox).iter().filter_map(|p| p.strip_prefix("event ")?.parse().ok()).collect()
    }

    fn pushed(outbox: &Outbox) -> Vec<String> {
        let mut frames = Vec::new();
        outbox.drain(usize::MAX, &mut frames);
        frames
            .iter()
            .map(|f| serde_json::from_str::<serde_json::Value>(f.as_str()).unwrap())
            .map(|v| format!("{} {}", v["ev"].as_str().unwrap_or("reply"), v["seq"]))
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_hot_chat_gets_coalesced_notifies_then_events_again_once_it_cools() {
        // Hot at 100 deliveries a second: with two watchers, the 50th event of a second.
        let hub = Hub::new(Arc::new(MemoryBroker::new()), 100);
        let key = ChatKey::new("w", "c");
        let outboxes: Vec<Arc<Outbox>> = (1..=2).map(|i| Arc::new(Outbox::new(i, 1 << 20))).collect();
        for o in &outboxes {
            hub.begin_watch(&key, &Arc::from("u"), o);
            hub.finish_watch(
                &key,
                o.id(),
                Replay { reply: Frame::from("{}"), latest: 0, frames: vec![], truncated: false },
            );
            pushed(o);
        }
        for seq in 1..=200 {
            hub.deliver(event(&key, seq));
        }
        tokio::time::sleep(HOT_NOTIFY_EVERY + Duration::from_millis(50)).await;
        let mut want: Vec<String> = (1..=49).map(|s| format!("event {s}")).collect();
        want.push("notify 200".into());
        for o in &outboxes {
            assert_eq!(pushed(o), want, "49 events, then one notify for the other 151");
        }
        // The next second is still hot: the last one was far above half the threshold.
        tokio::time::sleep(Duration::from_secs(1)).await;
        hub.deliver(event(&key, 201));
        tokio::time::sleep(HOT_NOTIFY_EVERY + Duration::from_millis(50)).await;
        for o in &outboxes {
            assert_eq!(pushed(o), vec!["notify 201".to_string()]);
        }
        // A quiet second later, events are pushed one by one again.
        tokio::time::sleep(Duration::from_secs(2)).await;
        hub.deliver(event(&key, 202));
        hub.deliver(event(&key, 203));
        for o in &outboxes {
            assert_eq!(pushed(o), vec!["event 202".to_string(), "event 203".to_string()]);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_gap_that_reopens_during_repair_is_repaired_again_not_skipped() {
        let hub = Hub::new(Arc::new(MemoryBroker::new()), 0);
        let key = ChatKey::new("w", "c");
        // The log has 1..=4 when first read; 6 arrives (ahead of 5) while it is read.
        let log = Arc::new(Log {
            hub: std::sync::Mutex::new(Arc::downgrade(&hub)),
            latest: 4,
            meanwhile: std::sync::Mutex::new(vec![6]),
        });
        let backfill: Arc<dyn Backfill> = log.clone();
        hub.set_backfill(Arc::downgrade(&backfill));
        let outbox = Arc::new(Outbox::new(1, 1 << 20));
        hub.begin_watch(&key, &Arc::from("u"), &outbox);
        hub.finish_watch(&key, 1, Replay { reply: Frame::from("{}"), latest: 0, frames: vec![], truncated: false });
        // 1 is lost on the way; 3 arrives: a gap at 1..=2.
        hub.deliver(event(&key, 3));
        tokio::time::sleep(GAP_WAIT * 2).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // Repaired 1..=4 from the log; 5 is still on its way, and 6 must wait for it.
        assert_eq!(pushed_seqs(&outbox), vec![1, 2, 3, 4]);
        hub.deliver(event(&key, 5));
        assert_eq!(pushed_seqs(&outbox), vec![5, 6], "5 arrived late and 6 was not skipped past it");
    }
}
