//! The default limits of protocol v1. Servers may be configured otherwise.

/// Largest WebSocket frame (and message) a server accepts: close 1009 beyond it.
pub const FRAME_LIMIT: usize = 64 * 1024;
/// Largest serialized `body` of an event: `too_large` beyond it.
pub const BODY_LIMIT: usize = 16 * 1024;
/// Time from the upgrade to a valid `hello`.
pub const HELLO_TIMEOUT_MS: u64 = 10_000;
/// Interval of server pings, announced to clients as `heartbeat_ms`.
pub const HEARTBEAT_MS: u64 = 25_000;
/// A connection on which nothing arrives for this long is closed.
pub const IDLE_TIMEOUT_MS: u64 = 60_000;
/// Sustained requests per second per connection.
pub const REQUEST_RATE: u32 = 100;
/// Requests a connection may send at once above the sustained rate.
pub const REQUEST_BURST: u32 = 200;
/// Default and largest `limit` of `fetch`.
pub const FETCH_DEFAULT: u32 = 100;
pub const FETCH_MAX: u32 = 500;
/// Default and largest `limit` of `inbox` (v1.1).
pub const INBOX_DEFAULT: u32 = 50;
pub const INBOX_MAX: u32 = 200;
