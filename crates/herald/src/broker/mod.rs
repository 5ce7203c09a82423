//! Node-to-node fan-out. The chat layer publishes each stored event once; the
//! broker hands it to every node that has watchers of its chat, this one
//! included, through that node's [`Sink`] (the hub).
//!
//! The contract every backend keeps:
//! - `publish` never blocks and never fails the request: delivery is a hint.
//!   Order and completeness come from seq numbers and fetch, not from here;
//! - `subscribe`/`unsubscribe` express this node's interest in a chat. They are
//!   called on a chat's first local watcher and after its last one left, never
//!   per socket, so socket churn does not become broker churn;
//! - incoming events reach the sink in the order the broker received them.
//!
//! Backends: [`memory`] (one node, in process). NATS plugs in behind the same trait.

pub mod memory;

use std::sync::{Arc, Weak};

use crate::model::{ChatKey, Published};

/// Where a broker delivers events: the node's hub.
pub trait Sink: Send + Sync + 'static {
    fn deliver(&self, event: Arc<Published>);
}

/// Node-to-node fan-out. See the module documentation for the contract.
pub trait Broker: Send + Sync + 'static {
    /// Connects the broker to the node's hub. Called once, before any publish.
    fn attach(&self, sink: Weak<dyn Sink>);
    /// Sends `event` to every node watching its chat.
    fn publish(&self, event: Arc<Published>);
    /// This node now has watchers of `key`.
    fn subscribe(&self, key: &ChatKey);
    /// This node no longer has watchers of `key`.
    fn unsubscribe(&self, key: &ChatKey);
    /// Whether the broker can deliver now (for `/readyz`).
    fn ready(&self) -> bool;
}
