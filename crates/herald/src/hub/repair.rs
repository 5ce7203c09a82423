//! Reading the log for the hub: the only part of it that waits. Three
//! reads, each handing what it found to the entry it repairs:
//!
//! - a gap's repair ([`Repair::gap`]): an event ahead of a gap was held for
//!   [`super::GAP_WAIT`]; the gap is read from the log ([`Repair::catch_up`]).
//! - a starting watch's gap read ([`Repair::read_gap`]): two watches of one
//!   chat can start at once, and the first to finish starts the chat's
//!   sequencer at its own read. A watch that read the log earlier but
//!   finishes later then lacks the events between its read and that start:
//!   the sequencer had passed them before it could buffer them. Those are
//!   read for it before it goes live, so that it gets them and, above all,
//!   sees a `leave` of its own user among them.
//! - the tail check ([`Repair::check_tails`]), the bound on how late a
//!   watcher hears of a stored event. A gap is repaired when a later event
//!   arrives, but the last event of a burst has no later event: if its
//!   broker hint is lost (a NATS server dies with it in flight), or its
//!   publisher dies between its commit and its publish, or a shard commits
//!   a write after the caller stopped waiting for it, nothing would ever
//!   announce it. So every [`TAIL_EVERY`] the hub asks the log which chats
//!   moved since its previous check ([`crate::store::EventLog::changed_heads`])
//!   and catches up each chat it watches whose latest seq at the previous
//!   check has still not reached its sequencer. Where the log cannot say
//!   (see there), and after a broker reconnect or a pause, it reads the
//!   latest seq of every chat it watches instead, [`TAIL_BATCH`] per store
//!   read. The live inboxes get the same heads one check later. Waiting one check
//!   before acting leaves events already on their way (a publish a few
//!   microseconds behind its commit) to their push; an event lost for good
//!   is caught up within two checks of its commit, about 1.5 s plus one
//!   store read.
//!
//! Only brokers that can lose hints need the tail check (NATS; the
//! in-process broker hands every commit to the hub on the committing task).
//! It costs a read of what moved per check (one store read per
//! [`TAIL_BATCH`] watched chats when the log cannot say), and a catch-up
//! read only for chats that were really behind; catch-ups run at
//! most [`CATCH_UP_CONCURRENCY`] at a time, so a reconnect that makes every
//! chat suspect cannot flood the store. A failed read is simply tried again
//! at the next check.
//!
//! No lock is held across a read: each read's result goes into its entry
//! under the entry's lock afterwards.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;

use super::Hub;
use super::entry::Entry;
use super::feed::INBOX_TAIL_EVERY;
use crate::broker::Sink;
use crate::model::{ChatKey, Published};
use crate::outbox::ConnId;
use crate::store::Store;

/// How often the hub compares its chats with the log.
pub const TAIL_EVERY: Duration = Duration::from_millis(750);
/// Chats whose latest seq one store read asks for.
const TAIL_BATCH: usize = 500;
/// Chats caught up from the log at once.
const CATCH_UP_CONCURRENCY: usize = 8;
/// Events read per catch-up page, and pages per catch-up before it stops
/// (the next tail check or gap goes on from there).
const CATCH_UP_PAGE: u32 = 500;
const CATCH_UP_PAGES: usize = 10;
/// Events read per page of a gap read, and pages before it gives up and
/// tells the watcher to fetch the rest.
const GAP_PAGE: u32 = 500;
const GAP_PAGES: usize = 4;

/// The hub's reads of the log.
pub(super) struct Repair {
    store: Arc<dyn Store>,
    /// Wakes the tail check at once (after a broker reconnect).
    tail_now: tokio::sync::Notify,
    /// Tokens of the gap reads of watches being started.
    gap_reads: AtomicU64,
    /// The next tail check reads every chat's head (after a broker reconnect or a pause).
    full_next: AtomicBool,
    /// What one tail check leaves the next (one check runs at a time).
    tail: Mutex<Tail>,
}

/// What one tail check leaves the next.
struct Tail {
    /// The chats it found moved or behind, with their heads.
    recent: Vec<(ChatKey, u64)>,
    /// Whether it knew which chats moved.
    known: bool,
    /// When the live inboxes' chats were last read all at once.
    feed_checked: tokio::time::Instant,
}

impl Repair {
    pub(super) fn new(store: Arc<dyn Store>) -> Repair {
        Repair {
            store,
            tail_now: tokio::sync::Notify::new(),
            gap_reads: AtomicU64::new(0),
            full_next: AtomicBool::new(false),
            tail: Mutex::new(Tail { recent: Vec::new(), known: false, feed_checked: tokio::time::Instant::now() }),
        }
    }

    /// A token for a new gap read.
    pub(super) fn token(&self) -> u64 {
        self.gap_reads.fetch_add(1, Ordering::Relaxed)
    }

    /// Runs the tail check now instead of at its next tick.
    pub(super) fn check_now(&self) {
        self.full_next.store(true, Ordering::Relaxed);
        self.tail_now.notify_one();
    }

    /// The gap timer of `entry` fired: fills its gap from the log.
    pub(super) async fn gap(&self, hub: &Hub, entry: &Arc<Entry>) {
        let caught_up = self.catch_up(hub, entry).await;
        entry.repaired(hub, caught_up);
    }

    /// Delivers, in order, every stored event of `entry` after its
    /// sequencer's position. Returns false if the log could not be read.
    pub(super) async fn catch_up(&self, hub: &Hub, entry: &Arc<Entry>) -> bool {
        let key = entry.key();
        for _ in 0..CATCH_UP_PAGES {
            let Some(next) = entry.next() else { return true };
            let fetched = match self.store.fetch(key, None, next - 1, CATCH_UP_PAGE).await {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(chat = %key, error = %e, "catch-up read failed; the next tail check retries");
                    metrics::counter!("herald_hub_catch_up_failures_total").increment(1);
                    return false;
                }
            };
            let n = fetched.events.len();
            if n > 0 {
                metrics::counter!("herald_hub_backfilled_total").increment(n as u64);
            }
            for event in &fetched.events {
                // As the broker would have delivered it: the live inboxes hear of it too.
                Sink::deliver(hub, Published::from_log(key.clone(), event));
            }
            if !fetched.more {
                return true;
            }
        }
        true
    }

    /// Reads `[from, to)` of `entry`'s log for the watch of `conn` being
    /// started (gap read `token`), then hands it to the watch, which goes live.
    pub(super) async fn read_gap(&self, hub: &Hub, entry: &Arc<Entry>, conn: ConnId, token: u64, span: (u64, u64)) {
        let (from, to) = span;
        let key = entry.key();
        let mut events = Vec::new();
        let mut after = from - 1;
        for _ in 0..GAP_PAGES {
            let fetched = match self.store.fetch(key, None, after, GAP_PAGE).await {
                Ok(f) => f,
                Err(e) => {
                    tracing::warn!(chat = %key, error = %e, "reading a starting watch's gap failed; it will fetch it");
                    metrics::counter!("herald_hub_catch_up_failures_total").increment(1);
                    break;
                }
            };
            for event in fetched.events.iter().take_while(|e| e.seq < to) {
                after = event.seq;
                events.push(Published::new(key.clone(), event));
            }
            if !fetched.more || after + 1 >= to {
                break;
            }
        }
        entry.gap_read(hub, conn, token, span, &events);
    }

    /// One tail check: the chats whose seq moved, or every watched chat when
    /// the store cannot say which moved; catches up those whose head at the
    /// previous check has still not reached their sequencer. The live inboxes
    /// hear of the heads one check later, once hints on their way have
    /// arrived. Returns how many chats were caught up.
    pub(super) async fn check_tails(&self, hub: &Hub) -> usize {
        let full = self.full_next.swap(false, Ordering::Relaxed);
        let changed = if full {
            None
        } else {
            match self.store.changed_heads().await {
                Ok(changed) => changed,
                Err(e) => {
                    // The store keeps its place: the next check reads from there.
                    tracing::warn!(error = %e, "tail check could not read the log; trying again next time");
                    metrics::counter!("herald_hub_tail_failures_total").increment(1);
                    Some(Vec::new())
                }
            }
        };
        let (previous, was_known, feed_checked) = {
            let mut tail = self.tail.lock().expect("tail lock");
            (std::mem::take(&mut tail.recent), tail.known, tail.feed_checked)
        };
        hub.feed().seen_heads(&previous);
        let known = changed.is_some();
        let (behind, recent) = match changed {
            Some(changed) => self.check_changed(hub, previous, changed),
            None => self.check_all(hub).await,
        };
        // The live inboxes' chats too where the log could not say: at once after a reconnect or
        // after it could, else every INBOX_TAIL_EVERY (a store that never can: this is its only check).
        let feed_due = !known && (full || was_known || feed_checked.elapsed() >= INBOX_TAIL_EVERY);
        {
            let mut tail = self.tail.lock().expect("tail lock");
            tail.recent = recent;
            tail.known = known;
            if feed_due {
                tail.feed_checked = tokio::time::Instant::now();
            }
        }
        if feed_due {
            let keys = hub.feed().followed_chats();
            metrics::counter!("herald_hub_tail_heads_total").increment(keys.len() as u64);
            if !keys.is_empty() {
                hub.feed().check(&keys).await;
            }
        }
        let n = behind.len();
        if n > 0 {
            tracing::info!(chats = n, "catching up chats whose latest events were never announced");
            metrics::counter!("herald_hub_tail_repairs_total").increment(n as u64);
        }
        futures_util::stream::iter(behind)
            .for_each_concurrent(CATCH_UP_CONCURRENCY, |entry| async move {
                self.catch_up(hub, &entry).await;
            })
            .await;
        n
    }

    /// The check of the chats the previous check found moved or behind, and
    /// of those that moved since; returns the chats behind and the next
    /// check's list (the moved ones and those behind, to see them caught up).
    fn check_changed(
        &self,
        hub: &Hub,
        previous: Vec<(ChatKey, u64)>,
        changed: Vec<(ChatKey, u64)>,
    ) -> (Vec<Arc<Entry>>, Vec<(ChatKey, u64)>) {
        let mut heads: HashMap<ChatKey, u64> = previous.into_iter().collect();
        for (key, head) in &changed {
            let known = heads.entry(key.clone()).or_insert(0);
            *known = (*known).max(*head);
        }
        let mut next: HashMap<ChatKey, u64> = changed.into_iter().collect();
        let mut behind = Vec::new();
        for (key, head) in heads {
            let Some(entry) = hub.entry(&key) else { continue };
            if entry.check_tail(head) {
                behind.push(entry);
                next.entry(key).or_insert(head);
            }
        }
        (behind, next.into_iter().collect())
    }

    /// The check of every watched chat, [`TAIL_BATCH`] per store read; the
    /// next check's list is every head it read.
    async fn check_all(&self, hub: &Hub) -> (Vec<Arc<Entry>>, Vec<(ChatKey, u64)>) {
        let entries: Vec<Arc<Entry>> = hub.entries();
        let mut behind = Vec::new();
        let mut read = Vec::new();
        metrics::counter!("herald_hub_tail_heads_total").increment(entries.len() as u64);
        for batch in entries.chunks(TAIL_BATCH) {
            let keys: Vec<ChatKey> = batch.iter().map(|e| e.key().clone()).collect();
            let heads = match self.store.heads(&keys).await {
                Ok(heads) => heads,
                Err(e) => {
                    tracing::warn!(chats = keys.len(), error = %e, "tail check could not read the log; trying again next time");
                    metrics::counter!("herald_hub_tail_failures_total").increment(1);
                    continue;
                }
            };
            for ((entry, key), head) in batch.iter().zip(keys).zip(heads) {
                if let Some(head) = head {
                    if entry.check_tail(head) {
                        behind.push(entry.clone());
                    }
                    read.push((key, head));
                }
            }
        }
        (behind, read)
    }
}

/// Starts the tail check of `hub`; it ends with the hub.
pub(super) fn spawn_tail(hub: Weak<Hub>) {
    tokio::spawn(async move {
        loop {
            let Some(strong) = hub.upgrade() else { return };
            let wake = async {
                tokio::select! {
                    _ = tokio::time::sleep(TAIL_EVERY) => {}
                    _ = strong.repair().tail_now.notified() => {}
                }
            };
            wake.await;
            strong.repair().check_tails(&strong).await;
        }
    });
}
