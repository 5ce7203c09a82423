//! The in-process broker: one node, no network. A publish is handed straight
//! to this node's hub on the publisher's task, which is also where the fan-out
//! work happens; there is nobody else to tell.

use std::sync::{OnceLock, Weak};

use super::{Broker, Sink};
use crate::model::{ChatKey, Published};
use crate::store::BoxFuture;
use std::sync::Arc;

/// The one-node broker.
#[derive(Default)]
pub struct MemoryBroker {
    sink: OnceLock<Weak<dyn Sink>>,
}

impl MemoryBroker {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Broker for MemoryBroker {
    fn attach(&self, sink: Weak<dyn Sink>) {
        let _ = self.sink.set(sink);
    }

    fn publish(&self, event: Arc<Published>) -> BoxFuture<'_, ()> {
        if let Some(sink) = self.sink.get().and_then(Weak::upgrade) {
            sink.deliver(event);
        }
        Box::pin(std::future::ready(()))
    }

    fn subscribed(&self, _key: &ChatKey) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn subscribe(&self, _key: &ChatKey) {
        metrics::counter!("herald_broker_subscribes_total").increment(1);
        metrics::gauge!("herald_broker_subjects").increment(1.0);
    }

    fn unsubscribe(&self, _key: &ChatKey) {
        metrics::counter!("herald_broker_unsubscribes_total").increment(1);
        metrics::gauge!("herald_broker_subjects").decrement(1.0);
    }

    fn ready(&self) -> bool {
        true
    }
}
