//! Node-to-node fan-out. The chat layer publishes each stored event once; the
//! broker hands it to every node that has watchers of its chat, this one
//! included, through that node's [`Sink`] (the hub).
//!
//! The contract every backend keeps:
//! - `publish` delivers to this node's hub at once and never fails the
//!   request: delivery to other nodes is a hint. Order and completeness come
//!   from seq numbers and the hub's backfill from the store, not from here;
//! - `subscribe`/`unsubscribe` express this node's interest in a chat. They are
//!   called on a chat's first local watcher and after its last one left, never
//!   per socket, so socket churn does not become broker churn;
//! - incoming events reach the sink in the order the broker received them.
//!
//! - after a reconnect or a dropped message it calls [`Sink::resync`], so the
//!   hub catches up every chat it watches from the store;
//! - `subscribe` and `unsubscribe` are called with the hub's registry lock
//!   held, so they must not block or call back into the hub; a subscription
//!   that fails is retried by the broker itself until it is unsubscribed.
//!
//! Signals ([`Signal`]: typing, presence) ride the same per-chat subjects as
//! events but never reach the event path: [`Broker::signal`] sends one to the
//! other nodes watching the chat (this node handles its own part itself),
//! in the order this node sent them, and [`Sink::signal`] hands one received
//! to the hub. Like events, signals are hints: presence repairs a lost one.
//!
//! Backends: [`memory`] (one node, or several nodes of one process joined
//! into a cell), [`nats`] (nodes joined over NATS). Each backend is also the
//! cell's [`bus::Bus`] for what is not a chat's (liveness, revocations,
//! presence asks), over the same connection.

pub mod bus;
pub mod memory;
pub mod nats;
pub mod settings;

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::model::BoxFuture;
use crate::model::{ChatKey, Published, Signal};

use bus::Answers;

/// Where a broker delivers events: the node's hub.
pub trait Sink: Send + Sync + 'static {
    fn deliver(&self, event: Arc<Published>);
    /// Messages may have been lost (a reconnect, a slow consumer): catch up from the store.
    fn resync(&self);
    /// Catch up one chat from the store (after its subscription reached every broker server).
    fn catch_up(&self, key: &ChatKey);
    /// A signal from another node about `key`; `reply`, when set, is where
    /// an answer goes (a [`Broker::gather`] waiting for it).
    fn signal(&self, key: &ChatKey, signal: Signal, reply: Option<String>);
    /// A `join` stored by another node, announced to the whole cell (not
    /// only to the nodes subscribed to its chat): the joiner's live inboxes
    /// here start following the chat. Never sequenced: the chat's own
    /// subject carries the event to its watchers.
    fn joined(&self, event: Arc<Published>);
}

/// Node-to-node fan-out. See the module documentation for the contract.
pub trait Broker: Send + Sync + 'static {
    /// Connects the broker to the node's hub. Called once, before any publish.
    fn attach(&self, sink: Weak<dyn Sink>);
    /// Delivers `event` to this node's hub and sends it to every other node watching its chat.
    fn publish(&self, event: Arc<Published>) -> BoxFuture<'_, ()>;
    /// This node now has watchers of `key`.
    fn subscribe(&self, key: &ChatKey);
    /// Resolves once this node's subscription to `key` receives what is published from now on.
    fn subscribed(&self, key: &ChatKey) -> BoxFuture<'_, ()>;
    /// This node no longer has watchers of `key`.
    fn unsubscribe(&self, key: &ChatKey);
    /// Whether the broker can deliver now (for `/readyz`).
    fn ready(&self) -> bool;
    /// Whether hints to this node can be lost (a broker server dying with a
    /// message in flight, a publisher dying after its commit): then the hub
    /// checks its chats against the log now and then (`hub::tail`).
    fn may_lose(&self) -> bool {
        false
    }
    /// Sends `signal` about `key` to the other nodes watching it, never to
    /// this one. Signals of one chat leave in the order of these calls. Must
    /// not block: the hub calls it with a chat's lock held.
    fn signal(&self, _key: &ChatKey, _signal: &Signal) {}
    /// Sends `signal` to `to`, the reply address of a [`Broker::gather`].
    fn answer(&self, _to: &str, _signal: &Signal) {}
    /// Sends `ask` to the other nodes watching `key` and collects what they
    /// answer within `wait`. One node: nobody else to ask.
    fn gather(&self, _key: &ChatKey, _ask: &Signal, _wait: Duration) -> BoxFuture<'_, Vec<Signal>> {
        Box::pin(std::future::ready(Vec::new()))
    }
}

/// The signals that come back on `answers` within `wait`: the end of every
/// backend's [`Broker::gather`]. A node may answer in several parts, so it
/// waits the whole time rather than for a count of nodes.
async fn gather_signals(mut answers: Answers, wait: Duration) -> Vec<Signal> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut signals = Vec::new();
    while let Some(payload) = answers.next_before(deadline).await {
        match serde_json::from_slice::<Signal>(&payload) {
            Ok(signal) => signals.push(signal),
            Err(e) => tracing::debug!(error = %e, "an undecodable answer dropped"),
        }
    }
    signals
}
