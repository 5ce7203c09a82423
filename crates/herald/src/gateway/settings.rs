//! The connection settings the gateway reads: each declared once, here, as
//! the flag, environment variable and `--config` key it is set by (see
//! `config.rs` for how those three merge), with its default and its
//! reason. Not here: what the gateway is handed at start that is not a
//! setting (the node's name, its cells, its revocations).

use std::time::Duration;

use clap::Args;
use herald_protocol::limits;

/// Default outbound queue: room for a full replay and a few fetch replies,
/// small enough that a thousand stalled readers cost at most a gigabyte.
pub const DEFAULT_OUTBOX_LIMIT: usize = 1024 * 1024;
/// Default read size: one buffer of it per worker thread, not per
/// connection, so it can hold a whole burst (a socket's receive queue is
/// rarely larger) and a connection reads it in one call.
pub const DEFAULT_WS_READ_BUFFER: usize = 64 * 1024;
/// Default cap on open connections per node: what a node of the size we
/// test (docs/memory.md) holds with room to spare; raise it with the box.
pub const DEFAULT_MAX_CONNECTIONS: usize = 100_000;
/// Default cap on connections that have not said `hello`: a client says it
/// within milliseconds, so even a reconnect storm of the whole node stays
/// far below this; what is above it is someone holding sockets open.
pub const DEFAULT_MAX_PENDING_HELLOS: usize = 10_000;
/// Default cap on chats watched by one connection: more than a chat app's
/// sidebar; a client that follows more chats uses the inbox feed.
pub const DEFAULT_MAX_WATCHES: usize = 1_000;

/// How the node's WebSocket connections are served.
#[derive(Debug, Clone, Args)]
pub struct GatewaySettings {
    /// Largest WebSocket frame accepted, in bytes.
    #[arg(long, env = "HERALD_FRAME_LIMIT", default_value_t = limits::FRAME_LIMIT)]
    pub frame_limit: usize,
    /// Milliseconds from upgrade to `hello`.
    #[arg(long, env = "HERALD_HELLO_TIMEOUT_MS", default_value_t = limits::HELLO_TIMEOUT_MS)]
    pub hello_timeout_ms: u64,
    /// Milliseconds between server pings.
    #[arg(long, env = "HERALD_HEARTBEAT_MS", default_value_t = limits::HEARTBEAT_MS)]
    pub heartbeat_ms: u64,
    /// Milliseconds without anything from a client before it is closed.
    #[arg(long, env = "HERALD_IDLE_TIMEOUT_MS", default_value_t = limits::IDLE_TIMEOUT_MS)]
    pub idle_timeout_ms: u64,
    /// Requests per second per connection.
    #[arg(long, env = "HERALD_RATE", default_value_t = limits::REQUEST_RATE)]
    pub rate: u32,
    /// Requests per connection allowed at once above the rate.
    #[arg(long, env = "HERALD_BURST", default_value_t = limits::REQUEST_BURST)]
    pub burst: u32,
    /// Bytes a connection's outbound queue may hold before it is closed with 4008.
    #[arg(long, env = "HERALD_OUTBOX_LIMIT", default_value_t = DEFAULT_OUTBOX_LIMIT)]
    pub outbox_limit: usize,
    /// Bytes read from a WebSocket at once, into a buffer each worker thread
    /// shares among its connections (no connection keeps one while idle).
    #[arg(long, env = "HERALD_WS_READ_BUFFER", default_value_t = DEFAULT_WS_READ_BUFFER)]
    pub ws_read_buffer: usize,
    /// Chats one connection may watch at once; past it, `watch` gets `throttled`.
    #[arg(long, env = "HERALD_MAX_WATCHES", default_value_t = DEFAULT_MAX_WATCHES)]
    pub max_watches: usize,
    /// Who may open a WebSocket at all.
    #[command(flatten)]
    pub limits: Limits,
}

/// The upgrade-time limits of a node.
#[derive(Debug, Clone, Args)]
pub struct Limits {
    /// Web origins (`scheme://host[:port]`) whose pages may open a WebSocket
    /// here, comma-separated; an upgrade with another `Origin` gets 403.
    /// Unset: every origin.
    #[arg(long, env = "HERALD_ALLOWED_ORIGINS", value_delimiter = ',', value_parser = origin)]
    pub allowed_origins: Vec<String>,
    /// Open connections per node; past it, upgrades get 503.
    #[arg(long, env = "HERALD_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Connections per node that have not said `hello` yet; past it, upgrades get 503.
    #[arg(long, env = "HERALD_MAX_PENDING_HELLOS", default_value_t = DEFAULT_MAX_PENDING_HELLOS)]
    pub max_pending_hellos: usize,
    /// WebSocket upgrades per second from one address (bursts of four times
    /// that); past it, 429. 0: no limit (behind a load balancer every client
    /// is one address).
    #[arg(long, env = "HERALD_IP_CONNECT_RATE", default_value_t = 0)]
    pub ip_connect_rate: u32,
}

impl GatewaySettings {
    pub fn hello_timeout(&self) -> Duration {
        Duration::from_millis(self.hello_timeout_ms)
    }

    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms)
    }

    pub fn idle_timeout(&self) -> Duration {
        Duration::from_millis(self.idle_timeout_ms)
    }

    /// Refuses settings that cannot work together, naming the flag; drops blank origins.
    pub fn check(&mut self) -> anyhow::Result<()> {
        self.limits.allowed_origins.retain(|o| !o.is_empty());
        anyhow::ensure!(self.frame_limit >= 1024, "frame-limit must be at least 1024 bytes");
        anyhow::ensure!(self.heartbeat_ms > 0, "heartbeat-ms must be above 0");
        anyhow::ensure!(self.hello_timeout_ms > 0, "hello-timeout-ms must be above 0");
        anyhow::ensure!(self.limits.max_connections >= 1, "max-connections must be at least 1");
        anyhow::ensure!(self.limits.max_pending_hellos >= 1, "max-pending-hellos must be at least 1");
        anyhow::ensure!(self.max_watches >= 1, "max-watches must be at least 1");
        anyhow::ensure!(self.rate >= 1 && self.burst >= 1, "rate and burst must be at least 1");
        anyhow::ensure!(self.heartbeat_ms < self.idle_timeout_ms, "heartbeat-ms must be below idle-timeout-ms");
        anyhow::ensure!(self.outbox_limit >= 64 * 1024, "outbox-limit must be at least 64 KiB");
        anyhow::ensure!(self.ws_read_buffer >= 1024, "ws-read-buffer must be at least 1024 bytes");
        Ok(())
    }
}

/// `--allowed-origins`' parser: an origin, normalized (lowercase, no default
/// port), or why it is not one. A blank entry (`HERALD_ALLOWED_ORIGINS=` in
/// an env file) stands for none and is dropped by [`GatewaySettings::check`].
fn origin(s: &str) -> Result<String, String> {
    if s.trim().is_empty() { Ok(String::new()) } else { normalize_origin(s) }
}

/// The normalized form of an origin (`scheme://host[:port]`), or why it is not one.
pub fn normalize_origin(origin: &str) -> Result<String, String> {
    let lower = origin.trim().to_ascii_lowercase();
    let (scheme, rest) = lower.split_once("://").ok_or_else(|| format!("{origin:?} has no scheme://"))?;
    if !matches!(scheme, "http" | "https") {
        return Err(format!("{origin:?}: an origin's scheme is http or https"));
    }
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(format!("{origin:?}: an origin is scheme://host[:port], nothing more"));
    }
    let default_port = if scheme == "https" { ":443" } else { ":80" };
    Ok(format!("{scheme}://{}", rest.strip_suffix(default_port).unwrap_or(rest)))
}
