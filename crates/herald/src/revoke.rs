//! Revoked tokens: `POST /v1/workspaces/{ws}/users/{user}/revoke` stores
//! that a user's tokens issued (`iat`) at or before now are refused, closes
//! the user's connections in the cell with 4001, and from then on `hello`
//! refuses such tokens (and tokens without `iat`) on every node.
//!
//! Each node keeps every revocation in memory ([`Revocations`]): `hello`'s
//! check is one hash lookup and never waits for storage. A node learns of
//! a revocation three ways: its own API call; a note on the cell's bus
//! ([`Topic::Revocations`], within milliseconds); and, should that
//! message be lost, a poll of the store every [`POLL_EVERY`] for the rows
//! stored in the last [`POLL_WINDOW`] by the store's clock (everything,
//! after a poll that failed or missed a shard, and at start). The cost of
//! the poll is one small indexed read per node and shard per second, not
//! one per `hello`.
//!
//! Memory: one entry per revoked user of the cell, kept for good (a token
//! without `iat` stays refused forever), about 100 bytes each; it grows only
//! with operators' revocations, like the table it mirrors.
//!
//! Lock order: the gateway's connection registry, then this set (`hello`
//! checks and registers a connection under the registry's lock; a new
//! revocation is noted here first and its connections closed after, so a
//! `hello` can never slip between the two).
//!
//! Not here: closing connections (the gateway's, through the callback given
//! to [`Revocations::revoked_users`]), erasing a user's messages (`chat`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::broker::bus::{Bus, Topic};
use crate::error::Error;
use crate::store::{Revocation, Store};

/// How often each node reads revocations from the store.
pub const POLL_EVERY: Duration = Duration::from_secs(1);
/// What an incremental poll reads: the rows stored this long ago or later.
/// Far more than a poll's interval, a commit's delay or a bus hiccup: a
/// row is seen by several polls, and a failed poll is followed by a full one.
const POLL_WINDOW: Duration = Duration::from_secs(30);
/// Longest a node waits at start for its first full read of revocations
/// before it serves anyway (and keeps reading in the background).
pub const FIRST_LOAD_WAIT: Duration = Duration::from_secs(5);
/// Wait before following the bus again after its stream ended (a closed connection).
const RESUBSCRIBE_AFTER: Duration = Duration::from_secs(1);

/// Revocation times (ms) by workspace, then user: looked up with borrowed
/// `&str`s, so a `hello` allocates nothing for its check.
type ByUser = HashMap<Box<str>, HashMap<Box<str>, i64>>;

/// What a revocation note carries.
#[derive(Serialize, Deserialize)]
struct Announce {
    ws: String,
    user: String,
    revoked_ms: i64,
}

/// A user (workspace, user) whose tokens a revocation new to this node refused.
pub type Revoked = (String, String);

/// Every revocation of the cell this node knows, and how it learns more.
pub struct Revocations {
    revoked: RwLock<ByUser>,
    /// Revoked users, for the gauge and `len`.
    users: std::sync::atomic::AtomicUsize,
    store: Arc<dyn Store>,
    /// Where each revocation new to this node is told, for the gateway to
    /// close the user's connections ([`Revocations::revoked_users`]).
    closes: OnceLock<tokio::sync::mpsc::UnboundedSender<Revoked>>,
    /// The cell's bus, in a cell.
    bus: OnceLock<Arc<dyn Bus>>,
}

impl std::fmt::Debug for Revocations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Revocations").field("users", &self.len()).finish()
    }
}

impl Revocations {
    pub fn new(store: Arc<dyn Store>) -> Arc<Revocations> {
        Arc::new(Revocations {
            revoked: RwLock::new(HashMap::new()),
            users: std::sync::atomic::AtomicUsize::new(0),
            store,
            closes: OnceLock::new(),
            bus: OnceLock::new(),
        })
    }

    /// The users of each revocation new to this node, from now on, in the
    /// order noted: the gateway takes them (once; `None` after) and closes
    /// their connections. Unbounded, since revocations are an operator's
    /// rare acts, and a close must never be dropped.
    pub fn revoked_users(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Revoked>> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        self.closes.set(tx).ok().map(|()| rx)
    }

    /// Revoked users known.
    pub fn len(&self) -> usize {
        self.users.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `hello` refuses a token of `user` in `ws` issued at `iat`
    /// (seconds): one issued at or before the user's revocation, or one
    /// without `iat`. JWT times are whole seconds, so a token issued in the
    /// same second as the revocation is refused too: the safe side.
    pub fn refuses(&self, ws: &str, user: &str, iat: Option<u64>) -> bool {
        let revoked = self.revoked.read().expect("revocations lock");
        let Some(&revoked_ms) = revoked.get(ws).and_then(|users| users.get(user)) else { return false };
        iat.is_none_or(|iat| i64::try_from(iat).unwrap_or(i64::MAX).saturating_mul(1000) <= revoked_ms)
    }

    /// Takes in a revocation; if it is new (or later than the one known),
    /// closes the user's connections to this node. Returns whether it was.
    pub fn note(&self, ws: &str, user: &str, revoked_ms: i64, source: &'static str) -> bool {
        {
            let mut revoked = self.revoked.write().expect("revocations lock");
            let users = revoked.entry(ws.into()).or_default();
            match users.get_mut(user) {
                Some(known) if *known >= revoked_ms => return false,
                Some(known) => *known = revoked_ms,
                None => {
                    users.insert(user.into(), revoked_ms);
                    let n = self.users.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    metrics::gauge!("herald_revoked_users").set(n as f64);
                }
            }
        }
        metrics::counter!("herald_revocations_noted_total", "source" => source).increment(1);
        tracing::info!(workspace = ws, user, source, "tokens revoked: closing the user's connections");
        // Told after the map holds it: a `hello` registered before this is
        // found by the close, one after it is refused (see the gateway's `identify`).
        if let Some(closes) = self.closes.get() {
            let _ = closes.send((ws.to_owned(), user.to_owned()));
        }
        true
    }

    /// The server API's revoke of `user` in `ws`: stored (durable when this
    /// returns `Ok`), then taken in here and announced to the cell. It is
    /// taken in and announced even when storing failed somewhere, so the
    /// connections close at once; the caller hears `unavailable` and should
    /// retry until it is stored.
    pub async fn revoke(&self, ws: &str, user: &str) -> Result<(), Error> {
        let revoked_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let stored = self.store.revoke(ws, user, revoked_ms).await;
        if let Err(e) = &stored {
            tracing::error!(workspace = ws, user, error = %e, "storing a revocation failed");
        }
        self.note(ws, user, revoked_ms, "api");
        self.announce(ws, user, revoked_ms).await;
        stored.map_err(Error::from)
    }

    async fn announce(&self, ws: &str, user: &str, revoked_ms: i64) {
        let Some(bus) = self.bus.get() else { return };
        let payload = serde_json::to_vec(&Announce { ws: ws.into(), user: user.into(), revoked_ms })
            .expect("an announcement serializes");
        if let Err(e) = bus.post(Topic::Revocations, payload.into()).await {
            // The other nodes' polls will find it in the store.
            tracing::warn!(error = %e, "cannot announce a revocation to the cell");
            metrics::counter!("herald_revocation_errors_total", "kind" => "announce").increment(1);
        }
    }

    /// Reads revocations from the store: all of them with `full`, else the
    /// recent ones. Returns whether the read was whole (every shard answered).
    async fn load(&self, full: bool) -> bool {
        let within = (!full).then_some(POLL_WINDOW);
        match self.store.revocations(within).await {
            Ok(read) => {
                for Revocation { ws, user, revoked_ms } in &read.rows {
                    self.note(ws, user, *revoked_ms, "store");
                }
                if !read.complete {
                    metrics::counter!("herald_revocation_errors_total", "kind" => "poll_partial").increment(1);
                }
                read.complete
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading revocations failed; reading them all on the next poll");
                metrics::counter!("herald_revocation_errors_total", "kind" => "poll").increment(1);
                false
            }
        }
    }

    /// Reads every stored revocation (waiting at most [`FIRST_LOAD_WAIT`]),
    /// then follows the cell: its bus when `bus` is given, and the store's poll.
    pub async fn follow(self: &Arc<Self>, bus: Option<Arc<dyn Bus>>) {
        let first = tokio::time::timeout(FIRST_LOAD_WAIT, self.load(true)).await.unwrap_or(false);
        if !first {
            tracing::error!("revocations not read at start: tokens revoked before are accepted until they are");
        }
        if let Some(bus) = bus {
            let _ = self.bus.set(bus.clone());
            let weak = Arc::downgrade(self);
            tokio::spawn(async move {
                loop {
                    let mut notes = bus.follow(Topic::Revocations).await;
                    while let Some(note) = notes.next().await {
                        let Some(me) = weak.upgrade() else { return };
                        match serde_json::from_slice::<Announce>(&note.payload) {
                            Ok(a) => {
                                // "nats": the label operators already chart, whatever carries the bus.
                                me.note(&a.ws, &a.user, a.revoked_ms, "nats");
                            }
                            Err(e) => tracing::warn!(error = %e, "bad revocation announcement"),
                        }
                    }
                    if weak.strong_count() == 0 {
                        return;
                    }
                    tokio::time::sleep(RESUBSCRIBE_AFTER).await;
                }
            });
        }
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(POLL_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut full = !first;
            loop {
                tick.tick().await;
                let Some(me) = weak.upgrade() else { return };
                full = !me.load(full).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;

    /// The users told so far, as `ws/user`.
    fn drain(closes: &mut tokio::sync::mpsc::UnboundedReceiver<Revoked>) -> Vec<String> {
        std::iter::from_fn(|| closes.try_recv().ok()).map(|(ws, user)| format!("{ws}/{user}")).collect()
    }

    #[tokio::test]
    async fn tokens_issued_at_or_before_a_revocation_or_without_iat_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let r = Revocations::new(Arc::new(SqliteStore::open(dir.path()).unwrap()));
        let mut closes = r.revoked_users().expect("the first taker");
        assert!(r.revoked_users().is_none(), "one taker");
        assert!(!r.refuses("acme", "bob", None), "nobody is revoked yet");
        assert!(r.note("acme", "bob", 1_700_000_000_500, "api"));
        assert!(r.refuses("acme", "bob", None));
        assert!(r.refuses("acme", "bob", Some(1_699_999_999)));
        assert!(r.refuses("acme", "bob", Some(1_700_000_000)), "same second: refused");
        assert!(!r.refuses("acme", "bob", Some(1_700_000_001)));
        assert!(!r.refuses("other", "bob", None), "workspaces are apart");
        // The same revocation again (a poll, the NATS echo) closes nothing more.
        assert!(!r.note("acme", "bob", 1_700_000_000_500, "store"));
        assert_eq!(drain(&mut closes), ["acme/bob"]);
        // A later revocation of the same user replaces the first; still one user.
        assert!(r.note("acme", "bob", 1_700_000_010_000, "nats"));
        assert!(r.refuses("acme", "bob", Some(1_700_000_001)));
        assert_eq!(r.len(), 1);
    }

    #[tokio::test]
    async fn a_node_learns_a_revocation_from_the_cells_bus_at_once() {
        use crate::broker::memory::{MemoryBroker, MemoryCell};
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let cell = MemoryCell::new();
        let writer = Revocations::new(Arc::new(SqliteStore::open(d1.path()).unwrap()));
        // A store of its own that never holds the revocation: only the bus can tell this node.
        let reader = Revocations::new(Arc::new(SqliteStore::open(d2.path()).unwrap()));
        let mut closes = reader.revoked_users().expect("the first taker");
        writer.follow(Some(MemoryBroker::join(&cell))).await;
        reader.follow(Some(MemoryBroker::join(&cell))).await;
        tokio::task::yield_now().await; // the reader's follower starts listening
        writer.revoke("acme", "bob").await.unwrap();
        let deadline = tokio::time::Instant::now() + POLL_EVERY;
        while !reader.refuses("acme", "bob", None) {
            assert!(tokio::time::Instant::now() < deadline, "the bus did not bring bob's revocation");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(drain(&mut closes), ["acme/bob"], "bob's connections here are closed");
    }

    #[tokio::test]
    async fn a_node_learns_a_revocation_from_the_store_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).unwrap());
        let writer = Revocations::new(store.clone());
        writer.revoke("acme", "bob").await.unwrap();
        // Another node's view over the same store, without NATS.
        let reader = Revocations::new(store);
        assert!(!reader.refuses("acme", "bob", None));
        reader.follow(None).await;
        assert!(reader.refuses("acme", "bob", None), "read at start");
        writer.revoke("acme", "carol").await.unwrap();
        let deadline = tokio::time::Instant::now() + POLL_EVERY * 3;
        while !reader.refuses("acme", "carol", None) {
            assert!(tokio::time::Instant::now() < deadline, "the poll did not find carol's revocation");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
