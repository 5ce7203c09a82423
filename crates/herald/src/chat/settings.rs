//! The chat layer's flags, declared once: the body limit and the per-chat
//! join cap. Not here: the replay bounds, which follow from the gateway's
//! outbound queue (see [`super::ChatLimits`]).

use clap::Args;
use herald_protocol::limits;

/// Default cap on client joins into one chat per second on one node: a
/// flood of 2,000 joins/s into one chat (a large public chat whose invite
/// link spreads) passes at full speed on one node, a flood many times that
/// is told to come back, and the shard behind the chat (about 5,000 durable
/// joins/s into one chat on PostgreSQL here) keeps room for everything else.
pub const DEFAULT_CHAT_JOIN_RATE: u32 = 2_000;

/// What the chat layer is told at start.
#[derive(Debug, Clone, Args)]
pub struct ChatSettings {
    /// Largest serialized event body, in bytes.
    #[arg(long, env = "HERALD_BODY_LIMIT", default_value_t = limits::BODY_LIMIT)]
    pub body_limit: usize,
    /// Joins per second into one chat that this node admits from clients
    /// (0: no cap); the rest are told `throttled` with a time to retry.
    #[arg(long, env = "HERALD_CHAT_JOIN_RATE", default_value_t = DEFAULT_CHAT_JOIN_RATE)]
    pub chat_join_rate: u32,
}
