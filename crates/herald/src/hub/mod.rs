//! The node's fan-out: which local connections watch which chat, and the
//! pushing of each chat's events to them in seq order.
//!
//! One owner per concern:
//!
//! - this file: the chat registry and routing. A chat has an [`entry`] only
//!   while it has local watchers; the first watcher makes the node want the
//!   chat at the broker and the last one stops wanting it, both under the
//!   registry's lock, so the broker sees a chat's interest change in the
//!   order the watches did. The broker's [`Sink`] lands here and is routed:
//!   events to the chat's entry and to the live inbox [`feed`], signals to
//!   the entry's presence ([`live`]), resyncs to the [`repair`]s.
//! - [`interest`]: the only caller of the broker's subscribe and
//!   unsubscribe, counting the node's interest over watchers and live inboxes.
//! - [`entry`]: one chat's entry, composing its parts under one lock; its
//!   `deliver` is order -> heat -> window -> fan-out.
//! - plain data, no I/O, no timers: [`sequencer`] (the order of a chat's
//!   events), [`heat`] (hot chats, pushed as coalesced `notify` frames),
//!   [`recent`] (the window of recent events that serves `fetch` and watch
//!   replays without the store where it is exact), [`watchers`] (who
//!   watches, sync buffers, the fan-out of one event, going live),
//!   [`presence`] (a chat's presence bookkeeping), [`conns`] (each
//!   connection's watches: its cap and its close).
//! - [`repair`]: the only part that waits: gap reads, catch-ups, tail checks.
//! - [`live`]: typing and presence, the node's side and each chat's;
//!   [`digest`]: the full check's beats of every chat, node-wide.
//! - [`feed`]: live inboxes, a second consumer of deliveries beside the
//!   entries, sharing the node's interest.
//!
//! Starting a watch takes two steps around the chat layer's read of the log
//! ([`Hub::begin_watch`], [`Hub::finish_watch`]), so that no event falls
//! between replay and live. The hub reads the log through the [`Store`],
//! never through the chat layer, and knows a connection only as its
//! [`Outbox`].
//!
//! Lock order: shard map, then a chat's entry, then an outbox; the
//! connection index ([`conns`]) is taken under an entry's lock and under
//! nothing else's, last. The interest map is taken under the shard map (and
//! under the feed's chat map, itself under a listener's state), and the
//! broker's own subscription map under it (subscribe and unsubscribe are
//! called with it held), never the other way round. The typing gate is
//! taken alone. No lock is held across an `.await`.

mod conns;
mod entry;
mod feed;
mod heat;
mod interest;
mod presence;
mod recent;
mod repair;
mod sequencer;
mod settings;
mod watchers;

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use herald_protocol::reply::PresenceOk;

use crate::broker::bus::Bus;
use crate::broker::{Broker, Sink};
use crate::model::{ChatKey, Published, Signal};
use crate::outbox::{ConnId, Frame, Outbox};
use crate::store::Store;

use entry::Entry;
pub use feed::{Counts, Feed, INBOX_FOLLOW_MAX, INBOX_PUSH_EVERY, INBOX_TAIL_EVERY, Listener};
pub use heat::{HOT_MIN_EVENTS, HOT_NOTIFY_EVERY};
pub use presence::live::{COUNT_EVERY, TYPING_EVERY};
pub use recent::{CachedPage, DEFAULT_RECENT_BYTES, DEFAULT_RECENT_CHAT_BYTES};
pub use repair::TAIL_EVERY;
pub use sequencer::GAP_WAIT;
pub use settings::{DEFAULT_HOT_CHAT_DELIVERIES, HubSettings};

/// Shards of the chat map: enough that watch churn on many cores rarely contends.
const SHARDS: usize = 64;

/// The node's fan-out.
pub struct Hub {
    /// Itself, for the timers and reads it starts.
    me: Weak<Hub>,
    shards: Box<[Mutex<Shard>]>,
    hasher: std::hash::RandomState,
    settings: HubSettings,
    started: tokio::time::Instant,
    /// The node's interest in chats at the broker, shared with the feed.
    interest: Arc<interest::Interest>,
    /// Each connection's watches.
    conns: conns::Conns,
    /// Reads of the log.
    repair: repair::Repair,
    /// Typing and presence, the node's side.
    live: presence::live::Live,
    /// Live inboxes.
    feed: Arc<Feed>,
    /// The byte budget of the chats' windows of recent events.
    budget: Arc<recent::Budget>,
}

/// Part of the chat map.
type Shard = HashMap<ChatKey, Arc<Entry>>;

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
        let interest = Arc::new(interest::Interest::new(broker.clone()));
        let may_lose = broker.may_lose();
        let hub = Arc::new_cyclic(|me| Hub {
            me: me.clone(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            hasher: std::hash::RandomState::new(),
            settings,
            started: tokio::time::Instant::now(),
            interest: interest.clone(),
            conns: conns::Conns::new(),
            repair: repair::Repair::new(store.clone()),
            live: presence::live::Live::new(broker.clone()),
            feed: Feed::new(store, interest),
            budget: Arc::new(recent::Budget::new(settings.recent_bytes, settings.recent_chat_bytes)),
        });
        let sink: Arc<dyn Sink> = hub.clone();
        broker.attach(Arc::downgrade(&sink));
        if may_lose {
            repair::spawn_tail(Arc::downgrade(&hub));
            presence::sweep::spawn(Arc::downgrade(&hub));
        }
        hub
    }

    /// The live inboxes.
    pub fn feed(&self) -> &Arc<Feed> {
        &self.feed
    }

    /// Process-local map: a per-process hash seed is fine here (never for routing).
    fn shard(&self, key: &ChatKey) -> &Mutex<Shard> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// The entry of `key`, if this node watches it.
    fn entry(&self, key: &ChatKey) -> Option<Arc<Entry>> {
        self.shard(key).lock().expect("hub shard lock").get(key).cloned()
    }

    /// Registers `outbox`'s connection as a syncing watcher of `key` (live
    /// events are buffered for it while the chat layer reads the log),
    /// replacing a previous watch of the same connection.
    pub fn begin_watch(&self, key: &ChatKey, user: &Arc<str>, outbox: &Arc<Outbox>) {
        let mut shard = self.shard(key).lock().expect("hub shard lock");
        let mut created = false;
        let entry = shard
            .entry(key.clone())
            .or_insert_with(|| {
                created = true;
                Arc::new(Entry::new(key.clone(), self.live.new_chat()))
            })
            .clone();
        entry.begin(self, user, outbox);
        if created {
            metrics::gauge!("herald_hub_chats").increment(1.0);
            self.interest.want(key);
        }
    }

    /// Completes a watch begun with [`Hub::begin_watch`]: pushes the reply,
    /// the replay and the live events buffered meanwhile, then goes live
    /// (after a gap read, if the chat's sequencer had moved past this
    /// watch's read). Returns false, pushing nothing, if the watch ended meanwhile.
    pub fn finish_watch(&self, key: &ChatKey, conn: ConnId, replay: Replay) -> bool {
        let Some(entry) = self.entry(key) else { return false };
        entry.finish(self, conn, replay)
    }

    /// Ends `conn`'s watch of `key`, if any.
    pub fn unwatch(&self, key: &ChatKey, conn: ConnId) {
        let mut shard = self.shard(key).lock().expect("hub shard lock");
        let Some(entry) = shard.get(key).cloned() else { return };
        if entry.unwatch(self, conn) == Some(true) {
            self.forget(&mut shard, key);
        }
    }

    /// Whether connection `conn` may watch `key` with at most `max` watches:
    /// it watches fewer chats (a watch ended by a `leave` on another device
    /// no longer counts), or watches `key` already.
    pub fn has_room(&self, conn: ConnId, key: &ChatKey, max: usize) -> bool {
        self.conns.has_room(conn, key, max)
    }

    /// Ends every watch of connection `conn` (it closed).
    pub fn unwatch_conn(&self, conn: ConnId) {
        for key in self.conns.take(conn) {
            self.unwatch(&key, conn);
        }
    }

    /// Drops the entry of `key` if its last watcher left while only its own lock was held.
    fn remove_if_empty(&self, key: &ChatKey) {
        let mut shard = self.shard(key).lock().expect("hub shard lock");
        if shard.get(key).is_some_and(|entry| entry.is_empty()) {
            self.forget(&mut shard, key);
        }
    }

    /// Removes `key`'s entry and its interest in the chat, under the shard lock.
    fn forget(&self, shard: &mut Shard, key: &ChatKey) {
        shard.remove(key);
        metrics::gauge!("herald_hub_chats").decrement(1.0);
        self.interest.unwant(key);
    }

    /// Chats with local watchers now.
    pub fn chats(&self) -> usize {
        self.shards.iter().map(|s| s.lock().expect("hub shard lock").len()).sum()
    }

    /// Every chat entry, for the tail check and resyncs.
    fn entries(&self) -> Vec<Arc<Entry>> {
        self.shards
            .iter()
            .flat_map(|s| s.lock().expect("hub shard lock").values().cloned().collect::<Vec<_>>())
            .collect()
    }

    /// A `fetch` page of `key` after `after` for connection `conn` of
    /// `user`, from the chat's window, when that is exact (see
    /// [`Entry::cached_fetch`]). `None`: ask the store.
    pub fn cached_fetch(
        &self,
        key: &ChatKey,
        conn: ConnId,
        user: &str,
        after: u64,
        limit: u32,
        max_bytes: usize,
    ) -> Option<CachedPage> {
        let page = self.entry(key).and_then(|entry| entry.cached_fetch(conn, user, after, limit, max_bytes));
        let outcome = if page.is_some() { "hit" } else { "miss" };
        metrics::counter!("herald_hub_cache_reads_total", "read" => "fetch", "outcome" => outcome).increment(1);
        page
    }

    /// The push frames of `key`'s events in `(after, upto]` for a watch's
    /// replay, if this node watches the chat and its window holds them all.
    /// Membership is the caller's to check (the chat layer reads it from the
    /// store with the chat's head `upto`).
    pub fn cached_replay(&self, key: &ChatKey, after: u64, upto: u64) -> Option<Vec<(u64, Frame)>> {
        let frames = self.entry(key).and_then(|entry| entry.cached_replay(after, upto));
        let outcome = if frames.is_some() { "hit" } else { "miss" };
        metrics::counter!("herald_hub_cache_reads_total", "read" => "replay", "outcome" => outcome).increment(1);
        frames
    }

    /// Tells the hub who this node is in its cell and how to know whether
    /// another node is alive. Set once, before serving; a node alone never calls it.
    /// `bus`: the cell's, which carries the full check's digests ([`digest`]).
    pub fn set_cell(self: &Arc<Self>, me: String, live: Arc<dyn Fn(&str) -> bool + Send + Sync>, bus: Arc<dyn Bus>) {
        presence::digest::follow(Arc::downgrade(self), bus.clone());
        self.live.set_cell(me, live, bus);
    }

    /// Whether `user`'s typing in `key` is pushed now: once per [`TYPING_EVERY`].
    pub fn admit_typing(&self, key: &ChatKey, user: &Arc<str>, now: Instant) -> bool {
        self.live.admit_typing(key, user, now)
    }

    /// v1.2: streamed message `target` of `key` grew by `text` (its text `at` long before): pushes
    /// it to this node's live watchers and tells the other nodes.
    pub fn append(&self, key: &ChatKey, target: u64, text: &str, at: u64) {
        self.live.send_signal(key, &Signal::Append { target, text: text.to_owned(), at });
        if let Some(entry) = self.entry(key) {
            entry.push_append(target, text, at);
        }
    }

    /// `user` types in `key`: pushes it to this node's watchers and tells the others.
    pub fn typing(&self, key: &ChatKey, user: &str) {
        self.live.send_typing(key, user);
        if let Some(entry) = self.entry(key) {
            entry.push_typing(user);
        }
    }

    /// The present users of `key`: this node's view when it watches the
    /// chat, else what the other nodes answer within a short wait. When
    /// `follower` (a connection) watches the chat, it gets presence pushes from now on.
    pub async fn presence(&self, key: &ChatKey, follower: Option<ConnId>) -> PresenceOk {
        if let Some(entry) = self.entry(key) {
            return entry.presence(follower);
        }
        self.live.gather(key).await
    }

    /// Reads the latest seq of every watched chat and catches up those
    /// whose previous latest has not arrived (see [`repair`]). Returns how
    /// many were caught up. Tests run it by hand; the node's own tail check
    /// runs it on its timer.
    #[cfg(test)]
    pub(crate) async fn check_tails(&self) -> usize {
        self.repair.check_tails(self).await
    }

    // ---- what the entries and repairs use of the node ---------------------------------------

    fn live(&self) -> &presence::live::Live {
        &self.live
    }

    fn repair(&self) -> &repair::Repair {
        &self.repair
    }

    fn budget(&self) -> &Arc<recent::Budget> {
        &self.budget
    }

    fn hot_deliveries(&self) -> u64 {
        self.settings.hot_deliveries
    }

    fn sync_bytes(&self) -> usize {
        self.settings.sync_bytes
    }

    /// The second since the hub started (heat counts per second).
    fn second(&self) -> u64 {
        self.started.elapsed().as_secs()
    }

    /// `conn`'s watch of `key` began (see [`conns`]).
    fn conn_started(&self, conn: ConnId, key: &ChatKey) {
        self.conns.add(conn, key);
    }

    /// `conn`'s watch of `key` ended.
    fn conn_ended(&self, conn: ConnId, key: &ChatKey) {
        self.conns.remove(conn, key);
    }

    /// Runs `then` with this hub and `entry` after `delay`, unless the hub is gone by then.
    fn later<F, Fut>(&self, delay: Duration, entry: &Arc<Entry>, then: F)
    where
        F: FnOnce(Arc<Hub>, Arc<Entry>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        let (hub, entry) = (self.me.clone(), entry.clone());
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(hub) = hub.upgrade() {
                then(hub, entry).await;
            }
        });
    }
}

impl Sink for Hub {
    /// Messages may have been lost everywhere: the tail checks run now
    /// instead of at their next tick, and catch up every chat that is
    /// behind; every chat's presence is asked for again.
    fn resync(&self) {
        tracing::info!(chats = self.chats(), "checking every watched chat against the log");
        self.repair.check_now();
        for entry in self.entries() {
            entry.resync_presence(&self.live);
        }
    }

    fn joined(&self, event: Arc<Published>) {
        self.feed.joined(&event);
    }

    fn signal(&self, key: &ChatKey, signal: Signal, reply: Option<String>) {
        metrics::counter!("herald_signals_received_total", "kind" => signal.label()).increment(1);
        let entry = self.entry(key);
        match &signal {
            Signal::Typing { user } => {
                if let Some(entry) = entry {
                    entry.push_typing(user);
                }
            }
            Signal::Append { target, text, at } => {
                if let Some(entry) = entry {
                    entry.push_append(*target, text, *at);
                }
            }
            Signal::Ask { of } if self.live.asked(of.as_deref()) => {
                let answer = self.live.answer_to(key, reply.as_deref());
                match entry {
                    Some(entry) => entry.answer_presence(&self.live, of.is_some(), &answer),
                    // Nothing here; a node asking this one by name learns its set is empty.
                    None if of.is_some() => self.live.answer_empty(&answer),
                    None => {}
                }
            }
            Signal::Ask { .. } => {}
            Signal::Delta { .. } | Signal::Beat { .. } | Signal::State { .. } => {
                if let Some(entry) = entry {
                    entry.receive(self, &signal);
                }
            }
        }
    }

    fn catch_up(&self, key: &ChatKey) {
        if self.feed.follows(key) {
            let (feed, key) = (Arc::downgrade(&self.feed), key.clone());
            tokio::spawn(async move {
                if let Some(feed) = feed.upgrade() {
                    feed.check(std::slice::from_ref(&key)).await;
                }
            });
        }
        let Some(entry) = self.entry(key) else { return };
        self.later(Duration::ZERO, &entry, |hub, entry| async move {
            hub.repair.catch_up(&hub, &entry).await;
        });
    }

    /// Hands `event` to the live inboxes and to its chat's entry.
    fn deliver(&self, event: Arc<Published>) {
        self.feed.event(&event);
        let Some(entry) = self.entry(&event.key) else { return };
        if entry.deliver(self, event) {
            self.remove_if_empty(entry.key());
        }
    }
}

#[cfg(test)]
mod parts_props;
#[cfg(test)]
mod props;
#[cfg(test)]
mod recent_tests;
#[cfg(test)]
pub(crate) mod tests;
