//! The webhook: POSTs stored events to `--webhook-url`, batched and signed,
//! at least once, each chat's events in seq order.
//!
//! **The log is the outbox.** Sends never wait for the webhook: a write
//! batch only records, in its own transaction, that its chats stored events
//! (one upsert per chat per batch into `webhook_positions`, see the
//! stores). The webhook reads the stored events back and never touches the
//! write path otherwise.
//!
//! **Positions.** Each chat keeps `delivered` (the last seq its receiver
//! acknowledged) and `head` (its latest seq stored while the webhook was
//! on). A partial index holds only the rows with `head > delivered`, ordered
//! by when their oldest undelivered event was stored, so a round costs one
//! index range read of the chats that have something to deliver, whatever
//! the number of idle chats (100,000 chats, most idle, cost nothing). Per-chat
//! positions were chosen over one position per shard in an append order
//! because a shard has no gap-free append order: several nodes commit to one
//! PostgreSQL shard, and a sequence's values become visible out of order,
//! while a chat's seq is gap-free and commits in order under its row lock.
//! After a 2xx the positions of the batch's chats are stored; a restart or
//! a `kill -9` re-reads them and resumes after the last acknowledged batch.
//! A batch acknowledged by the receiver whose positions were not stored yet
//! is delivered again (at least once; receivers deduplicate by
//! (workspace, chat, seq)).
//!
//! **Several nodes.** Every shard (the SQLite store is one) has one owner:
//! the live node (cluster.rs) that rendezvous hashing picks for the shard's
//! name. An owner that sees a new owner stops within a second; a dead
//! owner's shards are taken over once the cell forgets it (3 s). A node
//! claims shards only after it has listened to the cell for that long, so
//! it does not take every shard at start. A handover can deliver a batch
//! twice, never skip one: positions only move forward, to what was acknowledged.
//!
//! **offline** comes from [`online`]: one ask on the cell's bus per batch,
//! answered by each node from its own connections.
//!
//! Not here: the signature and HTTP client ([`super`]), cutting batches and
//! their JSON ([`batch`]), the positions' SQL (the stores), the online asks' wire
//! format ([`online`]).

mod batch;
pub mod online;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use herald_protocol::EventType;
use serde::Serialize;

use super::{SIGNATURE_HEADER, WebhookSettings, client, signature_now};
use crate::cluster::Cluster;
use crate::hashing::rendezvous;
use crate::store::{Store, Undelivered, WebhookAck};
use batch::{Batch, OutBody, OutEvent, batches};
use online::Online;

/// Most events in one POST.
pub const BATCH_EVENTS: usize = 500;
/// Most bytes (about) in one POST; a single larger event goes alone.
pub const BATCH_BYTES: usize = 256 * 1024;
/// Chats read per round: enough to fill a batch from many quiet chats.
const ROUND_CHATS: u32 = 500;
/// How often an owner with nothing to deliver looks again: the delay a
/// receiver sees at most on an idle node, for one index read of an empty range.
const POLL: Duration = Duration::from_millis(100);
/// How often ownership is recomputed (the cell announces every second).
const OWNERSHIP_EVERY: Duration = Duration::from_secs(1);
/// How long a node of a cell listens before it claims shards: the time the
/// cell takes to forget a dead node, so that every live node is known.
const SETTLE: Duration = Duration::from_secs(3);

/// What the admin page shows of the webhook (no secret, no path or query of the URL).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct WebhookStatus {
    /// The receiver's host (and port when given).
    pub host: String,
    /// The event types delivered; absent: all.
    pub events: Option<Vec<String>>,
    /// Age in seconds of the oldest stored event this node owes and has
    /// not had acknowledged (0 when caught up).
    pub lag_seconds: f64,
    /// When a batch was last acknowledged (ms since the epoch).
    pub last_success_ms: Option<i64>,
    /// The latest failure, and when (ms since the epoch).
    pub last_error: Option<String>,
    pub last_error_ms: Option<i64>,
    /// Whether the latest try failed (the webhook is retrying).
    pub failing: bool,
    /// Undelivered events in the chats of the latest round: at least this many are pending.
    pub pending_estimate: u64,
    /// The shards this node delivers (labels: `local` for the embedded store).
    pub owned_shards: Vec<String>,
}

/// Per-shard figures, merged into [`WebhookStatus`].
#[derive(Debug, Default, Clone, Copy)]
struct ShardFigures {
    /// When the oldest undelivered event was stored (ms), if any is.
    oldest_ms: Option<i64>,
    pending: u64,
}

#[derive(Debug, Default)]
struct State {
    owned: BTreeSet<usize>,
    figures: HashMap<usize, ShardFigures>,
    last_success_ms: Option<i64>,
    last_error: Option<(i64, String)>,
    failing: bool,
}

impl State {
    /// Age in seconds of the oldest event owed on the owned shards (0 when caught up).
    fn lag_seconds(&self) -> f64 {
        let oldest = self.figures.values().filter_map(|f| f.oldest_ms).min();
        oldest.map_or(0.0, |t| (now_ms() - t).max(0) as f64 / 1000.0)
    }
}

/// The webhook of one node. See the module documentation.
pub struct Webhook {
    settings: WebhookSettings,
    secret: Vec<u8>,
    store: Arc<dyn Store>,
    client: reqwest::Client,
    online: Arc<Online>,
    cluster: Arc<Cluster>,
    /// Shard names (ownership keys) and labels (for people), by index.
    shards: Vec<(String, String)>,
    /// Whether the shards are shared by the cell's nodes (PostgreSQL); a
    /// node's own embedded store is delivered by that node alone.
    shared: bool,
    types: Option<HashSet<EventType>>,
    host: String,
    state: Mutex<State>,
    /// The task following ownership; its deliverers end with it.
    follower: Mutex<Option<Aborting>>,
}

/// A task aborted when its handle is dropped: a deliverer must not outlive
/// the webhook that started it (a test process runs several servers in turn).
struct Aborting(tokio::task::JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Webhook {
    /// Starts delivering: tells the store to keep positions (before the
    /// node takes any write), then follows shard ownership. `clustered`: the
    /// node is one of a cell of several (it then waits [`SETTLE`] before claiming).
    pub fn start(
        settings: WebhookSettings,
        secret: &str,
        store: Arc<dyn Store>,
        cluster: Arc<Cluster>,
        online: Arc<Online>,
        clustered: bool,
    ) -> Arc<Webhook> {
        store.track_webhook();
        // A sharded store's shards by routing name (the ownership key) and label;
        // the embedded store is one shard of its own.
        let shards: Vec<(String, String)> = store.shards().into_iter().map(|s| (s.name, s.label)).collect();
        let shared = !shards.is_empty();
        let shards = if shared { shards } else { vec![("local".into(), "local".into())] };
        let host = reqwest::Url::parse(&settings.url)
            .ok()
            .and_then(|u| u.host_str().map(|h| u.port().map_or(h.to_owned(), |p| format!("{h}:{p}"))))
            .unwrap_or_default();
        let types = settings.events.as_ref().map(|l| l.iter().filter_map(|t| EventType::parse(t)).collect());
        let webhook = Arc::new(Webhook {
            client: client(settings.timeout),
            settings,
            secret: secret.as_bytes().to_vec(),
            store,
            online,
            cluster,
            shards,
            shared,
            types,
            host,
            state: Mutex::new(State::default()),
            follower: Mutex::new(None),
        });
        metrics::gauge!("herald_webhook_lag_seconds").set(0.0);
        // The task holds the webhook weakly, so that `stop` (or dropping the webhook) ends it.
        let task = tokio::spawn(follow_ownership(Arc::downgrade(&webhook), clustered));
        *webhook.follower.lock().expect("follower lock") = Some(Aborting(task));
        webhook
    }

    /// Stops delivering (at shutdown, before the store closes). A batch in
    /// flight is abandoned: its events are delivered again after a restart.
    pub fn stop(&self) {
        self.follower.lock().expect("follower lock").take();
    }

    /// The admin page's view.
    pub fn status(&self) -> WebhookStatus {
        let state = self.state.lock().expect("webhook state lock");
        WebhookStatus {
            host: self.host.clone(),
            events: self.settings.events.clone(),
            lag_seconds: state.lag_seconds(),
            last_success_ms: state.last_success_ms,
            last_error: state.last_error.as_ref().map(|(_, e)| e.clone()),
            last_error_ms: state.last_error.as_ref().map(|(t, _)| *t),
            failing: state.failing,
            pending_estimate: state.figures.values().map(|f| f.pending).sum(),
            owned_shards: state.owned.iter().map(|&i| self.shards[i].1.clone()).collect(),
        }
    }

    /// Which shards this node owns now: those whose name rendezvous hashing
    /// gives to this node among the cell's live nodes (all of them for an
    /// embedded store, which is this node's alone).
    fn owned_now(&self) -> BTreeSet<usize> {
        if !self.shared {
            return (0..self.shards.len()).collect();
        }
        let nodes = self.cluster.nodes();
        let me = self.cluster.name();
        self.shards
            .iter()
            .enumerate()
            .filter(|(_, (name, _))| {
                rendezvous(&[b"webhook", name.as_bytes()], nodes.iter().map(|n| n.name.as_str()))
                    .is_some_and(|i| nodes[i].name == me)
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Delivers shard `shard`'s events, round after round, until aborted.
    async fn deliver(self: Arc<Self>, shard: usize) {
        let mut wait = self.settings.retry_first;
        loop {
            let round =
                self.store.webhook_pending(shard, ROUND_CHATS, BATCH_EVENTS as u32, self.settings.offline_max).await;
            let pending = match round {
                Ok(p) => {
                    wait = self.settings.retry_first;
                    p
                }
                Err(e) => {
                    self.failed(&format!("reading undelivered events: {e}"));
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(self.settings.retry_max);
                    continue;
                }
            };
            self.figures(shard, &pending);
            if pending.is_empty() {
                tokio::time::sleep(POLL).await;
                continue;
            }
            for batch in batches(pending, self.types.as_ref()) {
                self.send(shard, batch).await;
            }
        }
    }

    /// Records a round's figures: its oldest event and its pending count.
    fn figures(&self, shard: usize, pending: &[Undelivered]) {
        let figures = ShardFigures {
            oldest_ms: pending.iter().map(|u| u.since_ms).min(),
            pending: pending.iter().map(|u| u.head.saturating_sub(u.delivered)).sum(),
        };
        self.state.lock().expect("webhook state lock").figures.insert(shard, figures);
        self.publish_lag();
    }

    fn publish_lag(&self) {
        let lag = self.state.lock().expect("webhook state lock").lag_seconds();
        metrics::gauge!("herald_webhook_lag_seconds").set(lag);
    }

    /// Sends `batch` until its receiver acknowledges it, then stores its
    /// positions (retrying that too: a position lost would mean a redelivery).
    async fn send(&self, shard: usize, batch: Batch) {
        if !batch.items.is_empty() {
            let body = self.body(&batch).await;
            let mut wait = self.settings.retry_first;
            let mut tries = 0u64;
            loop {
                tries += 1;
                match self.post(&body).await {
                    Ok(()) => break,
                    Err(why) => {
                        self.failed(&why);
                        metrics::counter!("herald_webhook_retries_total").increment(1);
                        tracing::debug!(tries, wait_ms = wait.as_millis() as u64, "webhook batch failed: {why}");
                        self.publish_lag();
                        tokio::time::sleep(wait).await;
                        wait = (wait * 2).min(self.settings.retry_max);
                    }
                }
            }
            metrics::counter!("herald_webhook_events_total").increment(batch.items.len() as u64);
        }
        let acks: Vec<WebhookAck> = batch.acks.into_values().collect();
        let mut wait = self.settings.retry_first;
        while let Err(e) = self.store.webhook_ack(shard, acks.clone()).await {
            self.failed(&format!("storing delivered positions: {e}"));
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(self.settings.retry_max);
        }
        self.succeeded();
    }

    /// One try: POST `body`, signed now. `Err` says why it did not count.
    async fn post(&self, body: &Bytes) -> Result<(), String> {
        let started = Instant::now();
        let sent = self
            .client
            .post(&self.settings.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(SIGNATURE_HEADER, signature_now(&self.secret, body))
            .body(body.clone())
            .send()
            .await;
        let outcome = match &sent {
            Ok(r) if r.status().is_success() => "ok",
            Err(e) if e.is_timeout() => "timeout",
            _ => "error",
        };
        metrics::histogram!("herald_hook_seconds", "hook" => "webhook").record(started.elapsed().as_secs_f64());
        metrics::counter!("herald_webhook_deliveries_total", "outcome" => outcome).increment(1);
        match sent {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(format!("the receiver answered {}", r.status())),
            Err(e) if e.is_timeout() => Err(format!("no answer within {} ms", self.settings.timeout.as_millis())),
            Err(e) if e.is_connect() => Err("cannot connect to the receiver".to_string()),
            // Without the URL: its path or query may hold a token, and this text reaches the admin page.
            Err(e) => Err(format!("request failed: {}", crate::store::shard_spec::chain(&e.without_url()))),
        }
    }

    /// The batch's JSON, with each message's `offline` list as of now.
    async fn body(&self, batch: &Batch) -> Bytes {
        let mut candidates: HashMap<&str, HashSet<&str>> = HashMap::new();
        for (chat, event) in &batch.items {
            if event.kind == EventType::Message
                && let Some(members) = &chat.members
            {
                candidates.entry(&chat.key.ws).or_default().extend(members.iter().map(String::as_str));
            }
        }
        let online = if candidates.is_empty() {
            HashMap::new()
        } else {
            let asks: HashMap<String, Vec<String>> = candidates
                .into_iter()
                .map(|(ws, users)| (ws.to_owned(), users.into_iter().map(str::to_owned).collect()))
                .collect();
            self.online.online(&asks).await
        };
        let events: Vec<OutEvent<'_>> = batch
            .items
            .iter()
            .map(|(chat, e)| {
                let offline = match (&chat.members, e.kind) {
                    (Some(members), EventType::Message) => {
                        let here = online.get(&*chat.key.ws);
                        Some(
                            members
                                .iter()
                                .map(String::as_str)
                                .filter(|m| Some(*m) != e.user.as_deref())
                                .filter(|m| here.is_none_or(|h| !h.contains(*m)))
                                .collect(),
                        )
                    }
                    _ => None,
                };
                OutEvent { workspace: &chat.key.ws, chat: &chat.key.chat, event: e, offline }
            })
            .collect();
        Bytes::from(serde_json::to_vec(&OutBody { events }).expect("webhook batches serialize"))
    }

    /// Records a failure; logs it once per change from working to failing
    /// (or to another reason), not once per retry.
    fn failed(&self, why: &str) {
        let mut state = self.state.lock().expect("webhook state lock");
        let changed = !state.failing || state.last_error.as_ref().is_none_or(|(_, e)| e != why);
        state.failing = true;
        state.last_error = Some((now_ms(), why.to_owned()));
        drop(state);
        if changed {
            tracing::warn!(host = %self.host, "webhook failing, retrying with growing waits: {why}");
        }
    }

    fn succeeded(&self) {
        let mut state = self.state.lock().expect("webhook state lock");
        let was_failing = std::mem::replace(&mut state.failing, false);
        state.last_success_ms = Some(now_ms());
        drop(state);
        if was_failing {
            tracing::info!(host = %self.host, "webhook delivering again");
        }
    }
}

/// Starts a deliverer for each shard this node comes to own and stops it
/// when the node no longer does, for as long as the webhook lives.
async fn follow_ownership(webhook: std::sync::Weak<Webhook>, clustered: bool) {
    if clustered {
        tokio::time::sleep(SETTLE).await;
    }
    // Dropped with this task: every deliverer ends with it.
    let mut running: HashMap<usize, Aborting> = HashMap::new();
    let mut tick = tokio::time::interval(OWNERSHIP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(webhook) = webhook.upgrade() else { return };
        let owned = webhook.owned_now();
        running.retain(|shard, task| {
            let keep = owned.contains(shard) && !task.0.is_finished();
            if !keep {
                tracing::info!(shard = %webhook.shards[*shard].1, "webhook: another node delivers this shard now");
            }
            keep
        });
        for &shard in &owned {
            running.entry(shard).or_insert_with(|| {
                tracing::info!(shard = %webhook.shards[shard].1, "webhook: delivering this shard's events");
                Aborting(tokio::spawn(webhook.clone().deliver(shard)))
            });
        }
        let mut state = webhook.state.lock().expect("webhook state lock");
        state.figures.retain(|s, _| owned.contains(s));
        state.owned = owned;
        drop(state);
        webhook.publish_lag();
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
