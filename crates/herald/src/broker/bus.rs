//! The cell's bus: what nodes of one cell tell each other that is not a
//! chat's (those ride the [`Broker`](super::Broker)): liveness
//! announcements, revocations, the webhook's "who is online" asks and the
//! presence digests.
//!
//! The contract every backend keeps:
//! - a post reaches every other node following its [`Topic`], never the
//!   posting node itself, and is a hint: it may be lost (a NATS server
//!   dying with it in flight, a node not following yet). Each consumer
//!   repairs a loss its own way (liveness repeats every second, revocations
//!   are polled from the store, a missing answer counts its users offline);
//! - what one node posts on one topic reaches another in the order posted;
//! - an [`Bus::ask`] is a post carrying a reply address; the answers come
//!   back on [`Answers`] until the asker stops reading (it decides how long
//!   and how many: the bus does not know how many nodes will answer).
//!
//! Backends: the NATS broker's connection ([`super::nats`], one subject per
//! topic) and the in-process cell ([`super::memory`]), so a whole cell can run
//! in one test process. A node alone has no bus at all: nobody to tell.
//!
//! Not here: what the payloads mean (each consumer owns its JSON).

use std::pin::Pin;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use crate::model::BoxFuture;

/// A cell-wide topic. Each is one NATS subject, `herald.<cell>.<name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topic {
    /// Every node's announcement of itself, each second (`cluster`).
    Nodes,
    /// A revocation made on some node (`revoke`).
    Revocations,
    /// "Which of these users are connected to you?" (the webhook's `offline`).
    Online,
    /// Each node's presence digest, each second (`hub/presence/digest.rs`).
    Presence,
}

impl Topic {
    /// The last token of the topic's NATS subject: unchanged from the
    /// subjects nodes used before the bus, so old and new nodes still talk.
    pub fn name(self) -> &'static str {
        match self {
            Topic::Nodes => "nodes",
            Topic::Revocations => "revoke",
            Topic::Online => "online",
            Topic::Presence => "presence",
        }
    }
}

/// What went wrong posting or asking: the bus could not take it at all.
#[derive(Debug, thiserror::Error)]
#[error("cell bus: {0}")]
pub struct BusError(pub String);

/// One message another node posted.
#[derive(Debug, Clone)]
pub struct Note {
    pub payload: Bytes,
    /// Where answers go, when the note is an ask.
    pub reply: Option<String>,
}

/// The notes of one followed topic, in the order each node posted them.
pub struct Notes(Pin<Box<dyn Stream<Item = Note> + Send>>);

impl Notes {
    /// Wraps a backend's stream.
    pub fn new(stream: impl Stream<Item = Note> + Send + 'static) -> Notes {
        Notes(Box::pin(stream))
    }

    /// The next note; `None` once the bus is gone.
    pub async fn next(&mut self) -> Option<Note> {
        self.0.next().await
    }
}

/// The answers to one ask (or one [`Broker::gather`](super::Broker::gather)),
/// as they come. Dropping it stops listening.
pub struct Answers(Pin<Box<dyn Stream<Item = Bytes> + Send>>);

impl Answers {
    /// Wraps a backend's stream.
    pub fn new(stream: impl Stream<Item = Bytes> + Send + 'static) -> Answers {
        Answers(Box::pin(stream))
    }

    /// The next answer if one comes before `deadline`.
    pub async fn next_before(&mut self, deadline: tokio::time::Instant) -> Option<Bytes> {
        tokio::time::timeout_at(deadline, self.0.next()).await.ok().flatten()
    }
}

/// Messages between the nodes of a cell that are not a chat's. See the
/// module documentation for the contract.
pub trait Bus: Send + Sync + 'static {
    /// Sends `payload` on `topic` to every other node following it.
    fn post(&self, topic: Topic, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>>;
    /// What the other nodes post on `topic` from now on. Resolves once the
    /// interest is registered, retrying meanwhile: a node must not stay deaf.
    fn follow(&self, topic: Topic) -> BoxFuture<'_, Notes>;
    /// Posts `payload` on `topic` with a reply address and hands back the
    /// answers as they come ([`Bus::reply`] on the other nodes).
    fn ask(&self, topic: Topic, payload: Bytes) -> BoxFuture<'_, Result<Answers, BusError>>;
    /// Answers an ask: `to` is the [`Note::reply`] it carried.
    fn reply(&self, to: &str, payload: Bytes) -> BoxFuture<'_, Result<(), BusError>>;
}
