//! The node's own fan-out: which local connections watch which chat, and the
//! pushing of each chat's events to them in seq order.
//!
//! - this file: the watch registry. A chat has an entry only while it has
//!   local watchers; the first watcher subscribes the node at the broker and
//!   the last one unsubscribes it, both under the registry's lock, so the
//!   broker sees a chat's interest change in the order the watches did.
//! - [`start`]: starting a watch, two steps around a store read
//!   ([`Hub::begin_watch`], [`Hub::finish_watch`]) so that no event falls
//!   between replay and live.
//! - [`sequencer`]: each chat's sequencer: events may arrive out of order or
//!   not at all (a lost broker hint); it pushes them in seq order and repairs
//!   gaps from the log.
//! - [`tail`]: the periodic check that no stored event stays unannounced
//!   (a hint lost for the last event of a burst, a publisher that died right
//!   after its commit): the bound on how late a watcher can hear of an event.
//! - [`hot`]: hot chats, pushed as coalesced `notify` frames.
//! - [`cache`]: each watched chat's recent events, which serve `fetch`
//!   and watch replays without the store where they are exact.
//! - [`live`]: typing and presence, ephemeral signals between nodes turned
//!   into pushes; [`presence`]: a chat's presence bookkeeping.
//! - [`inbox`]: live inboxes, which follow chats beside the watchers: the
//!   node's interest in a chat at the broker is counted over both
//!   ([`Hub::want`]), so the broker hears of the first and after the last.
//!
//! The hub reads the log through the [`Store`], never through the chat layer.
//!
//! Lock order: shard map, then a chat's state, then an outbox; the interest
//! map is taken under the shard map (and under the inbox feed's chat map),
//! and the broker's own subscription map under it (subscribe and
//! unsubscribe are called with it held), never the other way round. The
//! hub knows a connection only as its [`Outbox`].

mod cache;
mod hot;
mod inbox;
mod live;
mod presence;
mod sequencer;
mod settings;
mod start;
mod tail;

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::broker::{Broker, Sink};
use crate::model::{ChatKey, Published, Signal};
use crate::outbox::{ConnId, Frame, Outbox};
use crate::store::Store;

pub use cache::{CachedPage, DEFAULT_RECENT_BYTES, DEFAULT_RECENT_CHAT_BYTES};
pub use hot::{HOT_MIN_EVENTS, HOT_NOTIFY_EVERY};
pub use inbox::{INBOX_FOLLOW_MAX, INBOX_PUSH_EVERY, INBOX_TAIL_EVERY, Listener};
pub use live::{COUNT_EVERY, TYPING_EVERY};
pub use sequencer::GAP_WAIT;
pub use settings::{DEFAULT_HOT_CHAT_DELIVERIES, HubSettings};
pub use tail::TAIL_EVERY;

/// Shards of the chat map: enough that watch churn on many cores rarely contends.
const SHARDS: usize = 64;

/// The node's fan-out.
pub struct Hub {
    /// Itself, for the timers and catch-ups it starts.
    me: Weak<Hub>,
    shards: Box<[Mutex<Shard>]>,
    hasher: std::hash::RandomState,
    broker: Arc<dyn Broker>,
    /// The log, for repairs.
    store: Arc<dyn Store>,
    /// Wakes the tail check at once (after a broker reconnect).
    tail_now: tokio::sync::Notify,
    /// Deliveries per second into one chat's local watchers at which it
    /// turns hot; 0: never.
    hot_deliveries: u64,
    /// Bytes of live events buffered for one watcher while its replay is
    /// read; beyond it the watcher is told to fetch (`notify`) instead.
    sync_bytes: usize,
    /// Tokens of the gap reads of watches being started.
    gap_reads: std::sync::atomic::AtomicU64,
    started: tokio::time::Instant,
    /// This node in its cell, for presence (unset on a node alone).
    cell: std::sync::OnceLock<live::CellView>,
    /// The last presence epoch given to a chat entry.
    epochs: std::sync::atomic::AtomicU64,
    /// When each member last had a typing push, per chat.
    typing: live::Gate,
    /// How many of this node's parts want each chat's events (its watchers'
    /// entry, its live inboxes' following): the broker subscription lives
    /// while any does.
    interest: Box<[Mutex<HashMap<ChatKey, u32>>]>,
    /// Live inboxes.
    feeds: inbox::Feeds,
    /// The byte budget of the chats' windows of recent events.
    recent: Arc<cache::Budget>,
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
    /// The chat's latest seq in the log at the previous tail check.
    tail_seen: u64,
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
    /// Which slot of watchers the timer's next tick announces to (see `hot`).
    notify_slot: u64,
    /// Typing and presence.
    live: live::LiveState,
    /// The chat's recent events, as the store shows them.
    recent: cache::Recent,
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
    /// Set once [`Hub::finish_watch`] ran and the events the sequencer moved
    /// past before this watcher saw them are being read: that read's token.
    reading_gap: Option<u64>,
}

impl Watcher {
    /// While the watch's replay is read, keeps `event` for after it (or notes
    /// that there was no room). Returns whether the watcher is still syncing.
    fn buffer_if_syncing(&mut self, event: &Arc<Published>, limit: usize) -> bool {
        let Some(buf) = &mut self.syncing else { return false };
        buf.first.get_or_insert(event.seq);
        if start::ends(event, &self.user) {
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
    /// A hub whose chats turn hot at `hot_deliveries` deliveries per second
    /// (0: never), repairing from `store`, buffering at most `sync_bytes` of
    /// live events for a watch being started. Starts the tail check when the
    /// broker can lose hints.
    pub fn new(broker: Arc<dyn Broker>, store: Arc<dyn Store>, hot_deliveries: u64, sync_bytes: usize) -> Arc<Hub> {
        let settings = HubSettings {
            hot_deliveries,
            sync_bytes,
            recent_bytes: DEFAULT_RECENT_BYTES,
            recent_chat_bytes: DEFAULT_RECENT_CHAT_BYTES,
        };
        Hub::with_settings(broker, store, settings)
    }

    /// A hub tuned by `settings`, repairing from `store`.
    pub fn with_settings(broker: Arc<dyn Broker>, store: Arc<dyn Store>, settings: HubSettings) -> Arc<Hub> {
        let HubSettings { hot_deliveries, sync_bytes, .. } = settings;
        let hub = Arc::new_cyclic(|me| Hub {
            me: me.clone(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::hash::RandomState::new(),
            broker: broker.clone(),
            store,
            tail_now: tokio::sync::Notify::new(),
            hot_deliveries,
            sync_bytes,
            gap_reads: std::sync::atomic::AtomicU64::new(0),
            started: tokio::time::Instant::now(),
            cell: std::sync::OnceLock::new(),
            epochs: std::sync::atomic::AtomicU64::new(0),
            typing: live::Gate::default(),
            interest: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            feeds: inbox::Feeds::default(),
            recent: Arc::new(cache::Budget::new(settings.recent_bytes, settings.recent_chat_bytes)),
        });
        let sink: Arc<dyn Sink> = hub.clone();
        broker.attach(Arc::downgrade(&sink));
        if broker.may_lose() {
            tail::spawn(Arc::downgrade(&hub));
            live::spawn_sweep(Arc::downgrade(&hub));
            inbox::spawn_tail(Arc::downgrade(&hub));
        }
        hub
    }

    /// Which of the [`SHARDS`] of the hub's maps (chats, interest, the live
    /// inbox's chats) holds `key`. Process-local maps: a per-process hash
    /// seed is fine here (never for routing).
    fn shard_of(&self, key: &ChatKey) -> usize {
        (self.hasher.hash_one(key) as usize) % SHARDS
    }

    fn shard(&self, key: &ChatKey) -> &Mutex<Shard> {
        &self.shards[self.shard_of(key)]
    }

    /// The entry of `key`, if this node watches it.
    fn watched(&self, key: &ChatKey) -> Option<Arc<Watched>> {
        self.shard(key).lock().expect("hub shard lock").get(key).cloned()
    }

    /// Ends `conn`'s watch of `key`, if any.
    pub fn unwatch(&self, key: &ChatKey, conn: ConnId) {
        let mut shard = self.shard(key).lock().expect("hub shard lock");
        let Some(watched) = shard.get(key).cloned() else {
            return;
        };
        let mut state = watched.state.lock().expect("hub chat lock");
        let Some(gone) = state.watchers.remove(&conn) else {
            return;
        };
        if gone.present {
            self.watch_absent(&watched, &mut state, &gone.user);
        }
        metrics::gauge!("herald_watches").decrement(1.0);
        if state.watchers.is_empty() {
            drop(state);
            self.forget(&mut shard, key);
        }
    }

    /// Drops the entry of `key` if its last watcher left while only its own lock was held.
    fn remove_if_empty(&self, key: &ChatKey) {
        let mut shard = self.shard(key).lock().expect("hub shard lock");
        let Some(watched) = shard.get(key).cloned() else {
            return;
        };
        if watched.state.lock().expect("hub chat lock").watchers.is_empty() {
            self.forget(&mut shard, key);
        }
    }

    /// Removes `key`'s entry and its interest in the chat, under the shard lock.
    fn forget(&self, shard: &mut Shard, key: &ChatKey) {
        shard.remove(key);
        metrics::gauge!("herald_hub_chats").decrement(1.0);
        self.unwant(key);
    }

    /// One more part of this node wants `key`'s events: the first subscribes at the broker.
    fn want(&self, key: &ChatKey) {
        let mut interest = self.interest[self.shard_of(key)].lock().expect("hub interest lock");
        let n = interest.entry(key.clone()).or_insert(0);
        *n += 1;
        if *n == 1 {
            self.broker.subscribe(key);
        }
    }

    /// One part of this node no longer wants `key`'s events: after the last, the broker is told.
    fn unwant(&self, key: &ChatKey) {
        let mut interest = self.interest[self.shard_of(key)].lock().expect("hub interest lock");
        let Some(n) = interest.get_mut(key) else { return };
        *n -= 1;
        if *n == 0 {
            interest.remove(key);
            self.broker.unsubscribe(key);
        }
    }

    /// Chats with local watchers now.
    pub fn chats(&self) -> usize {
        self.shards.iter().map(|s| s.lock().expect("hub shard lock").len()).sum()
    }

    /// Every chat entry, for the tail check and resyncs.
    fn entries(&self) -> Vec<Arc<Watched>> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().expect("hub shard lock").values().cloned().collect::<Vec<_>>())
            .collect()
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
}

impl Sink for Hub {
    /// Messages may have been lost everywhere: the tail check runs now
    /// instead of at its next tick, and catches up every chat that is behind.
    fn resync(&self) {
        tracing::info!(chats = self.chats(), "checking every watched chat against the log");
        self.tail_now.notify_one();
        self.feeds.tail_now.notify_one();
        self.presence_resync();
    }

    fn joined(&self, event: Arc<Published>) {
        self.inbox_joined(&event);
    }

    fn signal(&self, key: &ChatKey, signal: Signal, reply: Option<String>) {
        self.on_signal(key, signal, reply);
    }

    fn catch_up(&self, key: &ChatKey) {
        if self.inbox_follows(key) {
            let (hub, key) = (self.me.clone(), key.clone());
            tokio::spawn(async move {
                if let Some(hub) = hub.upgrade() {
                    hub.inbox_check(std::slice::from_ref(&key)).await;
                }
            });
        }
        let Some(watched) = self.watched(key) else { return };
        self.later(Duration::ZERO, &watched, |hub, watched| async move {
            hub.catch_up_entry(&watched).await;
        });
    }

    fn deliver(&self, event: Arc<Published>) {
        self.inbox_event(&event);
        let Some(watched) = self.watched(&event.key) else { return };
        let mut state = watched.state.lock().expect("hub chat lock");
        let emptied = self.sequence(&watched, &mut state, event);
        drop(state);
        if emptied {
            self.remove_if_empty(&watched.key);
        }
    }
}

#[cfg(test)]
mod cache_tests;
#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
