//! The webhook positions capability: per chat, how far the webhook's
//! receiver has acknowledged, so that a webhook delivers every event at
//! least once across restarts, from any node.
//!
//! Not here: calling the receiver, batching and backoff (`hooks/webhook`);
//! the statements that move a chat's head as writes store events (each
//! backend's `Tx::mark_undelivered`, called by [`super::apply`]).

use herald_protocol::Event;

use super::{BoxFuture, StoreError};
use crate::model::ChatKey;

/// A chat holding events the webhook has not delivered yet, with the first of
/// them. Backends keep, per chat, the last acknowledged seq (`delivered`)
/// beside the latest seq stored while the webhook was on (`head`); only
/// chats with `head > delivered` sit in the index the webhook reads, so an
/// idle chat costs nothing.
#[derive(Debug, Clone)]
pub struct Undelivered {
    /// The backend's row id of the chat: what [`WebhookPositions::webhook_ack`] takes.
    pub chat_id: i64,
    pub key: ChatKey,
    /// The last seq the webhook's receiver acknowledged.
    pub delivered: u64,
    /// The chat's latest seq stored while the webhook was on.
    pub head: u64,
    /// When (ms since the epoch) the oldest event not acknowledged was
    /// stored, or a moment before it: what the lag is measured from.
    pub since_ms: i64,
    /// Events with seq > `delivered`, in seq order, at most the limit asked.
    pub events: Vec<Event>,
    /// The chat's members when it has at most the number asked; `None` above.
    pub members: Option<Vec<String>>,
}

/// A position the webhook's receiver acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookAck {
    pub chat_id: i64,
    /// The last seq delivered.
    pub seq: u64,
    /// When the first event after `seq` was stored, or a lower bound of it.
    pub since_ms: i64,
}

/// Where the webhook stands in each chat.
pub trait WebhookPositions: Send + Sync + 'static {
    /// From now on, keep each chat's webhook position as writes store
    /// events. Called once at start, before any write, when a webhook is
    /// configured (a node without one does not pay for it).
    fn track_webhook(&self);

    /// Up to `chats` chats of shard `shard` (an index into
    /// [`super::Lifecycle::shards`]; 0 for a store without shards) with
    /// undelivered events, oldest first, each with up to `events` of them
    /// and, when it has at most `members_max` members, its member list.
    fn webhook_pending(
        &self,
        shard: usize,
        chats: u32,
        events: u32,
        members_max: u64,
    ) -> BoxFuture<'_, Result<Vec<Undelivered>, StoreError>>;

    /// Stores acknowledged positions (a position never moves back).
    fn webhook_ack(&self, shard: usize, acks: Vec<WebhookAck>) -> BoxFuture<'_, Result<(), StoreError>>;
}
