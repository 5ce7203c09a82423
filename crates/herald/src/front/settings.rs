//! The settings of a node's HTTP side before a socket is a WebSocket: how
//! long a request may take to arrive, how long a connection may idle
//! between requests, and how many sockets may wait at once. Each declared
//! once, here, as its flag, environment variable and `--config` key (see
//! `config.rs`), with its default and its reason.

use std::time::Duration;

use clap::Args;

/// Default time for a request's line and headers: a real client sends them
/// in one packet, milliseconds after it connects; ten seconds is room for a
/// phone on a bad link, and the same as the time a WebSocket has for `hello`.
pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;
/// Default time for a request's body, before the allowance for its size.
pub const DEFAULT_BODY_TIMEOUT_MS: u64 = 10_000;
/// Default slowest body accepted, in bytes a second: each such many bytes
/// received add a second to the body's time. A 2G link manages twice this.
pub const DEFAULT_BODY_MIN_RATE: u64 = 16 * 1024;
/// Default idle time between two requests on a kept-alive connection.
pub const DEFAULT_KEEPALIVE_TIMEOUT_MS: u64 = 30_000;
/// Default cap on sockets per node waiting for a request to finish: the
/// same reasoning as `--max-pending-hellos`; a real client finishes its
/// request within milliseconds, so even a reconnect storm stays far below.
pub const DEFAULT_MAX_PENDING_REQUESTS: usize = 10_000;
/// Default cap on such sockets from one address (IPv6: one /64): far above
/// what browsers (six per host) or a busy office behind one NAT keep open.
pub const DEFAULT_MAX_PENDING_REQUESTS_PER_IP: usize = 256;

/// How the node's sockets are served until they are WebSockets or have a request in hand.
#[derive(Debug, Clone, Args)]
pub struct FrontSettings {
    /// Milliseconds from a connection's start (or its first byte after an
    /// idle time) to the end of its request's headers; past it, the socket is closed.
    #[arg(long, env = "HERALD_HEADER_TIMEOUT_MS", default_value_t = DEFAULT_HEADER_TIMEOUT_MS)]
    pub header_timeout_ms: u64,
    /// Milliseconds for a request's body, plus one second for every
    /// `--body-min-rate` bytes received; past it, the socket is closed.
    #[arg(long, env = "HERALD_BODY_TIMEOUT_MS", default_value_t = DEFAULT_BODY_TIMEOUT_MS)]
    pub body_timeout_ms: u64,
    /// Bytes per second a request's body must keep up, on average, beyond `--body-timeout-ms`.
    #[arg(long, env = "HERALD_BODY_MIN_RATE", default_value_t = DEFAULT_BODY_MIN_RATE)]
    pub body_min_rate: u64,
    /// Milliseconds a kept-alive connection may idle between requests (and a
    /// response may wait for its reader); past it, the socket is closed.
    #[arg(long, env = "HERALD_KEEPALIVE_TIMEOUT_MS", default_value_t = DEFAULT_KEEPALIVE_TIMEOUT_MS)]
    pub keepalive_timeout_ms: u64,
    /// Sockets per node that have not finished a request (new, mid-request,
    /// or idle between requests); past it, the oldest of them is closed.
    #[arg(long, env = "HERALD_MAX_PENDING_REQUESTS", default_value_t = DEFAULT_MAX_PENDING_REQUESTS)]
    pub max_pending_requests: usize,
    /// The same, per client address (IPv6: per /64); past it, that address's
    /// oldest is closed. 0: no cap per address.
    #[arg(long, env = "HERALD_MAX_PENDING_REQUESTS_PER_IP", default_value_t = DEFAULT_MAX_PENDING_REQUESTS_PER_IP)]
    pub max_pending_requests_per_ip: usize,
}

impl FrontSettings {
    pub fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms)
    }

    pub fn body_timeout(&self) -> Duration {
        Duration::from_millis(self.body_timeout_ms)
    }

    pub fn keepalive_timeout(&self) -> Duration {
        Duration::from_millis(self.keepalive_timeout_ms)
    }

    /// Refuses settings that cannot work, naming the flag.
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.header_timeout_ms > 0, "header-timeout-ms must be above 0");
        anyhow::ensure!(self.body_timeout_ms > 0, "body-timeout-ms must be above 0");
        anyhow::ensure!(self.body_min_rate > 0, "body-min-rate must be above 0");
        anyhow::ensure!(self.keepalive_timeout_ms > 0, "keepalive-timeout-ms must be above 0");
        anyhow::ensure!(self.max_pending_requests >= 1, "max-pending-requests must be at least 1");
        Ok(())
    }
}
