//! The NATS broker: nodes of one cell joined over a NATS cluster, one subject
//! per chat (`herald.<cell>.chat.<ws>.<chat>`).
//!
//! Interest is per node, not per socket: the hub subscribes a chat on its
//! first local watcher and unsubscribes after its last, and this broker keeps
//! the subscription for a linger time after that, so a reconnect storm (every
//! watcher gone and back within seconds) costs the NATS cluster no subject
//! churn at all. A publish is delivered to this node's hub directly and sent
//! to NATS with echo off, so a node never hears its own events twice.
//!
//! Every NATS message is a hint (async-nats drops messages beyond a
//! subscription's capacity, and nothing is delivered while disconnected): the
//! hub orders by seq and repairs gaps from the log. After a reconnect or a
//! slow-consumer drop, this broker asks the hub to catch up every chat; after
//! a new subscription, it asks again for that chat once the interest has had
//! time to reach every server of the cluster.
//!
//! A `join` is also announced on the cell's `herald.<cell>.joins.<ws>.<chat>`,
//! which every node subscribes to once: a live inbox of the joiner on a node
//! that does not follow the chat yet starts following it
//! ([`Sink::joined`]). Joins are rare next to messages, so every node
//! hearing every join of its cell costs little, and no subject per user or
//! per socket is needed.
//!
//! Signals (typing, presence) share the chat's subject; a `Herald-Signal`
//! header tells them from events, so the event decoder never sees one. They
//! leave through one queue and one task, in the order the hub sent them.
//!
//! The same connection is the cell's [`Bus`](super::bus::Bus) ([`bus`]):
//! one subject per topic, `herald.<cell>.<topic>`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, ServerAddr};
use axum::extract::ws::Utf8Bytes;
use futures_util::StreamExt;
use herald_protocol::EventType;
use serde::Deserialize;
use tokio::sync::watch;

mod bus;

use super::{Broker, Sink};
use crate::model::BoxFuture;
use crate::model::{ChatKey, Published, Signal};

/// The header that marks a message on a chat's subject as a signal, not an event.
const SIGNAL_HEADER: &str = "Herald-Signal";

/// Time for a new subscription's interest to travel the cluster's routes;
/// the chat is caught up from the log once this has passed.
const ROUTE_SETTLE: Duration = Duration::from_millis(300);
/// First and longest wait between attempts of a failed subscribe.
const SUBSCRIBE_RETRY_FIRST: Duration = Duration::from_millis(100);
const SUBSCRIBE_RETRY_MAX: Duration = Duration::from_secs(2);
/// Messages one subscription may buffer before async-nats drops them.
const SUBSCRIPTION_CAPACITY: usize = 65_536;

/// A node's connection to its cell's NATS cluster.
pub struct NatsBroker {
    client: Client,
    prefix: String,
    linger: Duration,
    sink: Arc<OnceLock<Weak<dyn Sink>>>,
    subs: Mutex<HashMap<ChatKey, Sub>>,
    connected: Arc<AtomicBool>,
    me: Weak<NatsBroker>,
    /// Signals to send, in order: (subject, reply subject, payload).
    signals: tokio::sync::mpsc::UnboundedSender<(String, Option<String>, bytes::Bytes)>,
}

struct Sub {
    /// A local watcher wants it; false while lingering.
    wanted: bool,
    /// Bumped on each change of `wanted`, so a linger timer knows it is stale.
    epoch: u64,
    task: tokio::task::JoinHandle<()>,
    /// True once the subscription is registered at the server.
    live: watch::Receiver<bool>,
}

/// The fields of an event push the hub needs; the body is skipped, not parsed.
#[derive(Deserialize)]
struct Meta {
    seq: u64,
    #[serde(rename = "type")]
    kind: EventType,
    user: Option<String>,
    ts: i64,
}

impl NatsBroker {
    /// Connects to `urls` (servers of one NATS cluster) for cell `cell`. Does not
    /// wait for a server: the client keeps retrying, and `/readyz` says so meanwhile.
    pub async fn connect(urls: &[String], cell: &str, linger: Duration) -> anyhow::Result<Arc<NatsBroker>> {
        let addrs = urls.iter().map(|u| u.parse::<ServerAddr>()).collect::<Result<Vec<_>, _>>()?;
        let sink: Arc<OnceLock<Weak<dyn Sink>>> = Arc::new(OnceLock::new());
        let connected = Arc::new(AtomicBool::new(false));
        let (events_tx, mut events_rx) = tokio::sync::mpsc::unbounded_channel::<Event>();
        let options = ConnectOptions::new()
            .name(format!("herald-{cell}"))
            .no_echo()
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connection_timeout(Duration::from_secs(2))
            .subscription_capacity(SUBSCRIPTION_CAPACITY)
            .event_callback(move |event| {
                let tx = events_tx.clone();
                async move {
                    let _ = tx.send(event);
                }
            });
        let client = async_nats::connect_with_options(addrs, options).await?;
        let (sink2, connected2) = (sink.clone(), connected.clone());
        tokio::spawn(async move {
            let mut was_connected = false;
            while let Some(event) = events_rx.recv().await {
                let resync = match &event {
                    Event::Connected => {
                        connected2.store(true, Ordering::SeqCst);
                        let again = was_connected;
                        was_connected = true;
                        tracing::info!(reconnect = again, "connected to NATS");
                        if again {
                            metrics::counter!("herald_broker_reconnects_total").increment(1);
                        }
                        again
                    }
                    Event::Disconnected => {
                        connected2.store(false, Ordering::SeqCst);
                        tracing::warn!("disconnected from NATS; events from other nodes wait for the reconnect");
                        false
                    }
                    Event::SlowConsumer(sid) => {
                        tracing::warn!(sid, "NATS dropped messages of a slow subscription");
                        metrics::counter!("herald_broker_dropped_total").increment(1);
                        true
                    }
                    other => {
                        tracing::info!(event = %other, "NATS event");
                        false
                    }
                };
                if resync && let Some(sink) = sink2.get().and_then(Weak::upgrade) {
                    sink.resync();
                }
            }
        });
        let (signals, mut signals_rx) =
            tokio::sync::mpsc::unbounded_channel::<(String, Option<String>, bytes::Bytes)>();
        let signal_client = client.clone();
        tokio::spawn(async move {
            while let Some((subject, reply, payload)) = signals_rx.recv().await {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(SIGNAL_HEADER, "1");
                let sent = match reply {
                    Some(reply) => signal_client.publish_with_reply_and_headers(subject, reply, headers, payload).await,
                    None => signal_client.publish_with_headers(subject, headers, payload).await,
                };
                if let Err(e) = sent {
                    metrics::counter!("herald_broker_errors_total", "kind" => "signal").increment(1);
                    tracing::debug!(error = %e, "NATS signal publish failed; presence repairs it");
                }
            }
        });
        let prefix = format!("herald.{cell}");
        spawn_joins(client.clone(), format!("{prefix}.joins.>"), sink.clone());
        Ok(Arc::new_cyclic(|me| NatsBroker {
            signals,
            connected: connected.clone(),
            client,
            prefix,
            linger,
            sink,
            subs: Mutex::new(HashMap::new()),
            me: me.clone(),
        }))
    }

    /// The subject of a chat. Ids may contain `.`, NATS's token separator, so
    /// it is written as `~`, which ids never contain: distinct chats, distinct subjects.
    pub fn subject(&self, key: &ChatKey) -> String {
        format!("{}.chat.{}", self.prefix, self.subject_tail(key))
    }

    /// `<ws>.<chat>`, dots written as `~`.
    fn subject_tail(&self, key: &ChatKey) -> String {
        format!("{}.{}", key.ws.replace('.', "~"), key.chat.replace('.', "~"))
    }

    fn sink(&self) -> Option<Arc<dyn Sink>> {
        self.sink.get().and_then(Weak::upgrade)
    }

    /// The task that owns one chat's subscription and feeds its messages to the hub.
    fn spawn_subscription(&self, key: ChatKey, live: watch::Sender<bool>) -> tokio::task::JoinHandle<()> {
        let (client, subject, sink, me) = (self.client.clone(), self.subject(&key), self.sink.clone(), self.me.clone());
        tokio::spawn(async move {
            // Retried until it works: this task lives exactly as long as the
            // node's interest (unsubscribe aborts it), and a chat whose
            // subscription failed once must not stay deaf to other nodes.
            let mut sub = subscribe_retrying(&client, &subject).await;
            // The server has the subscription once the flush returns.
            let _ = client.flush().await;
            let _ = live.send(true);
            let (settle_key, settle_sink) = (key.clone(), sink.clone());
            tokio::spawn(async move {
                tokio::time::sleep(ROUTE_SETTLE).await;
                if me.upgrade().is_some()
                    && let Some(sink) = settle_sink.get().and_then(Weak::upgrade)
                {
                    sink.catch_up(&settle_key);
                }
            });
            while let Some(msg) = sub.next().await {
                metrics::counter!("herald_broker_received_total").increment(1);
                if msg.headers.as_ref().is_some_and(|h| h.get(SIGNAL_HEADER).is_some()) {
                    match serde_json::from_slice::<Signal>(&msg.payload) {
                        Ok(signal) => {
                            if let Some(sink) = sink.get().and_then(Weak::upgrade) {
                                sink.signal(&key, signal, msg.reply.map(|r| r.to_string()));
                            }
                        }
                        Err(e) => {
                            metrics::counter!("herald_broker_errors_total", "kind" => "decode").increment(1);
                            tracing::warn!(%subject, error = %e, "undecodable NATS signal dropped");
                        }
                    }
                    continue;
                }
                match decode(&key, msg.payload) {
                    Some(event) => {
                        if let Some(sink) = sink.get().and_then(Weak::upgrade) {
                            sink.deliver(event);
                        }
                    }
                    None => {
                        metrics::counter!("herald_broker_errors_total", "kind" => "decode").increment(1);
                        tracing::warn!(%subject, "undecodable NATS message dropped");
                    }
                }
            }
        })
    }
}

/// Subscribes to `subject`, trying again with growing waits until it works.
pub(crate) async fn subscribe_retrying(client: &Client, subject: &str) -> async_nats::Subscriber {
    let mut wait = SUBSCRIBE_RETRY_FIRST;
    loop {
        match client.subscribe(subject.to_owned()).await {
            Ok(sub) => return sub,
            Err(e) => {
                tracing::error!(%subject, error = %e, retry_ms = wait.as_millis() as u64, "NATS subscribe failed; retrying");
                metrics::counter!("herald_broker_errors_total", "kind" => "subscribe").increment(1);
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(SUBSCRIBE_RETRY_MAX);
            }
        }
    }
}

/// Hands every `join` announced in the cell to the sink (see the module documentation).
fn spawn_joins(client: Client, subject: String, sink: Arc<OnceLock<Weak<dyn Sink>>>) {
    tokio::spawn(async move {
        let mut sub = subscribe_retrying(&client, &subject).await;
        while let Some(msg) = sub.next().await {
            // herald.<cell>.joins.<ws>.<chat>, ids' dots written as `~`.
            let mut tokens = msg.subject.split('.').skip(3);
            let (Some(ws), Some(chat), None) = (tokens.next(), tokens.next(), tokens.next()) else { continue };
            let key = ChatKey { ws: ws.replace('~', ".").into(), chat: chat.replace('~', ".").into() };
            let Some(event) = decode(&key, msg.payload) else {
                tracing::warn!(subject = %msg.subject, "undecodable NATS join notice dropped");
                continue;
            };
            if let Some(sink) = sink.get().and_then(Weak::upgrade) {
                sink.joined(event);
            }
        }
    });
}

fn decode(key: &ChatKey, payload: bytes::Bytes) -> Option<Arc<Published>> {
    let meta: Meta = serde_json::from_slice(&payload).ok()?;
    let frame = Utf8Bytes::try_from(payload).ok()?;
    Some(Arc::new(Published {
        key: key.clone(),
        seq: meta.seq,
        kind: meta.kind,
        user: meta.user.map(Arc::from),
        ts: meta.ts,
        frame,
        from_log: false,
    }))
}

impl Broker for NatsBroker {
    fn attach(&self, sink: Weak<dyn Sink>) {
        let _ = self.sink.set(sink);
    }

    fn publish(&self, event: Arc<Published>) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(sink) = self.sink() {
                sink.deliver(event.clone());
            }
            let payload = bytes::Bytes::from(event.frame.clone());
            if event.kind == EventType::Join {
                let subject = format!("{}.joins.{}", self.prefix, self.subject_tail(&event.key));
                if let Err(e) = self.client.publish(subject, payload.clone()).await {
                    metrics::counter!("herald_broker_errors_total", "kind" => "publish").increment(1);
                    tracing::warn!(chat = %event.key, error = %e, "NATS join notice failed; live inboxes elsewhere miss this join");
                }
            }
            match self.client.publish(self.subject(&event.key), payload).await {
                Ok(()) => metrics::counter!("herald_broker_published_total").increment(1),
                Err(e) => {
                    metrics::counter!("herald_broker_errors_total", "kind" => "publish").increment(1);
                    tracing::warn!(chat = %event.key, error = %e, "NATS publish failed; other nodes will catch up from the log");
                }
            }
        })
    }

    fn subscribe(&self, key: &ChatKey) {
        let mut subs = self.subs.lock().expect("subs lock");
        if let Some(sub) = subs.get_mut(key) {
            // Back before the linger ran out: the subscription never left.
            sub.wanted = true;
            sub.epoch += 1;
            return;
        }
        let (tx, rx) = watch::channel(false);
        let task = self.spawn_subscription(key.clone(), tx);
        subs.insert(key.clone(), Sub { wanted: true, epoch: 0, task, live: rx });
        metrics::counter!("herald_broker_subscribes_total").increment(1);
        metrics::gauge!("herald_broker_subjects").increment(1.0);
    }

    fn subscribed(&self, key: &ChatKey) -> BoxFuture<'_, ()> {
        let live = self.subs.lock().expect("subs lock").get(key).map(|s| s.live.clone());
        Box::pin(async move {
            if let Some(mut live) = live {
                let _ = live.wait_for(|v| *v).await;
            }
        })
    }

    fn unsubscribe(&self, key: &ChatKey) {
        let epoch = {
            let mut subs = self.subs.lock().expect("subs lock");
            let Some(sub) = subs.get_mut(key) else { return };
            sub.wanted = false;
            sub.epoch += 1;
            sub.epoch
        };
        let (me, key, linger) = (self.me.clone(), key.clone(), self.linger);
        tokio::spawn(async move {
            tokio::time::sleep(linger).await;
            let Some(me) = me.upgrade() else { return };
            let mut subs = me.subs.lock().expect("subs lock");
            if subs.get(&key).is_some_and(|s| !s.wanted && s.epoch == epoch) {
                let sub = subs.remove(&key).expect("checked");
                // Dropping the subscriber sends UNSUB.
                sub.task.abort();
                metrics::counter!("herald_broker_unsubscribes_total").increment(1);
                metrics::gauge!("herald_broker_subjects").decrement(1.0);
            }
        });
    }

    fn ready(&self) -> bool {
        self.connected.load(Ordering::SeqCst)
    }

    fn may_lose(&self) -> bool {
        true
    }

    fn signal(&self, key: &ChatKey, signal: &Signal) {
        self.send_signal(self.subject(key), None, signal);
    }

    fn answer(&self, to: &str, signal: &Signal) {
        self.send_signal(to.to_string(), None, signal);
    }

    fn gather(&self, key: &ChatKey, ask: &Signal, wait: Duration) -> BoxFuture<'_, Vec<Signal>> {
        let (subject, payload) = (self.subject(key), serde_json::to_vec(ask));
        Box::pin(async move {
            let Ok(payload) = payload else { return Vec::new() };
            // Through the signals' queue, so the ask leaves after the chat's signals sent before it.
            let send = |inbox| {
                let _ = self.signals.send((subject, Some(inbox), payload.into()));
                std::future::ready(Ok(()))
            };
            match bus::scatter(&self.client, send).await {
                Ok(answers) => super::gather_signals(answers, wait).await,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot ask the other nodes");
                    Vec::new()
                }
            }
        })
    }
}

impl NatsBroker {
    fn send_signal(&self, subject: String, reply: Option<String>, signal: &Signal) {
        match serde_json::to_vec(signal) {
            Ok(payload) => {
                metrics::counter!("herald_signals_sent_total", "kind" => signal.label()).increment(1);
                let _ = self.signals.send((subject, reply, payload.into()));
            }
            Err(e) => tracing::error!(error = %e, "a signal did not serialize"),
        }
    }
}
