//! How the hub is tuned: its flags, declared once (`--hot-chat-deliveries`,
//! `--recent-events-bytes`, `--recent-events-chat-bytes`), and the one
//! figure the wiring derives from the gateway's outbound queue.

use clap::Args;

use super::{DEFAULT_RECENT_BYTES, DEFAULT_RECENT_CHAT_BYTES};

/// Default heat at which a chat switches to coalesced `notify` pushes:
/// 250,000 deliveries/s (1,000 watchers at 250 events/s, 5,000 at 50).
/// Measured with the watchers fetching from the node's window of recent
/// events (docs/benchmarks.md, "Hot chats"): notify + fetch costs the server
/// less than pushing from about 25 events/s (2.83 against 9.23 us per
/// delivered event at 1,000 watchers and 50 events/s), but it adds about
/// 200 ms at the median (a notify every 250 ms). Below a quarter of what one
/// node pushes on the 2-core machine (about 1,000,000 deliveries/s), pushes
/// keep deliveries within milliseconds with CPU to spare, so a busy small
/// chat (100 watchers at 1,000-2,000 events/s) keeps them. Chats under 10
/// events/s are never hot (`hub::HOT_MIN_EVENTS`).
pub const DEFAULT_HOT_CHAT_DELIVERIES: u64 = 250_000;

/// How a [`super::Hub`] is tuned.
#[derive(Debug, Clone, Copy, Args)]
pub struct HubSettings {
    /// Deliveries per second into one chat's watchers on this node (events
    /// times watchers) at which the chat turns hot: its watchers then get a
    /// `notify` with the latest seq every 250 ms instead of each event, and
    /// fetch (0: never).
    #[arg(long = "hot-chat-deliveries", env = "HERALD_HOT_CHAT_DELIVERIES", default_value_t = DEFAULT_HOT_CHAT_DELIVERIES)]
    pub hot_deliveries: u64,
    /// Bytes of recent events this node keeps over all its watched chats,
    /// to answer `fetch` and watch replays without reading the store; a chat
    /// over it drops its oldest first.
    #[arg(long = "recent-events-bytes", env = "HERALD_RECENT_EVENTS_BYTES", default_value_t = DEFAULT_RECENT_BYTES)]
    pub recent_bytes: usize,
    /// Bytes of recent events kept for one chat (at most the node's).
    #[arg(long = "recent-events-chat-bytes", env = "HERALD_RECENT_EVENTS_CHAT_BYTES", default_value_t = DEFAULT_RECENT_CHAT_BYTES)]
    pub recent_chat_bytes: usize,
    /// Bytes of live events buffered for one watcher while its replay is
    /// read. Not a flag: the wiring sets it to a quarter of the outbound
    /// queue ([`HubSettings::for_outbox`]), so a watch's start never closes
    /// its connection with 4008.
    #[arg(skip = 0usize)]
    pub sync_bytes: usize,
}

impl HubSettings {
    /// These settings on a node whose connections queue at most
    /// `outbox_limit` bytes: a watch's replay takes half of it (the chat
    /// layer's bound), the live events meanwhile a quarter.
    pub fn for_outbox(self, outbox_limit: usize) -> HubSettings {
        HubSettings { sync_bytes: outbox_limit / 4, ..self }
    }
}
