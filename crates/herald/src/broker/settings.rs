//! How this node reaches the others: the broker's flags, declared once.
//! Not here: connecting ([`super::nats`]).

use std::time::Duration;

use clap::Args;

/// Default linger of a chat's broker subscription: longer than a reconnect
/// storm's return, so the storm causes no subject churn.
pub const DEFAULT_BROKER_LINGER_MS: u64 = 5_000;

/// The broker's flags.
#[derive(Debug, Clone, Args)]
pub struct BrokerSettings {
    /// NATS servers of this cell's cluster (`nats://host:port`), comma-separated
    /// or repeated. With none, fan-out stays in this process (one node).
    #[arg(long = "broker", env = "HERALD_BROKER", value_delimiter = ',')]
    pub brokers: Vec<String>,
    /// Milliseconds a chat's NATS subscription outlives its last local watcher.
    #[arg(long, env = "HERALD_BROKER_LINGER_MS", default_value_t = DEFAULT_BROKER_LINGER_MS)]
    pub broker_linger_ms: u64,
}

impl BrokerSettings {
    pub fn linger(&self) -> Duration {
        Duration::from_millis(self.broker_linger_ms)
    }
}
