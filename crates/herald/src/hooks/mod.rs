//! Hooks: herald calling the app's HTTP endpoints. The webhook receives
//! stored events; the send hook decides on a client's `send` or `edit`
//! before it is stored. Both sign every request the same way
//! ([`signature`]) and reuse connections (HTTP keep-alive) through one
//! [`client`] per hook.

pub mod send;
pub mod settings;
pub mod webhook;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The header that carries a hook request's signature.
pub const SIGNATURE_HEADER: &str = "Herald-Signature";
/// Shortest `--hook-secret` accepted, in bytes.
pub const MIN_HOOK_SECRET_BYTES: usize = 32;
/// How long the webhook waits for an answer before it retries the batch.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest wait between two tries of one webhook batch.
pub const WEBHOOK_RETRY_MAX: Duration = Duration::from_secs(60);
/// The first wait before a webhook batch is tried again; it doubles per failure.
pub const WEBHOOK_RETRY_FIRST: Duration = Duration::from_millis(500);
/// Default of `--webhook-offline-max`.
pub const DEFAULT_WEBHOOK_OFFLINE_MAX: u64 = 1000;
/// Default of `--send-hook-timeout-ms`.
pub const DEFAULT_SEND_HOOK_TIMEOUT_MS: u64 = 1000;

/// What happens to a client's send when the send hook gives no valid answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailMode {
    /// The client gets `unavailable` with `retry_after_ms` (the default).
    Closed,
    /// The event is stored as sent.
    Open,
}

/// The hooks' settings, resolved and checked (`--hook-secret`, `--webhook-*`, `--send-hook-*`).
#[derive(Debug, Clone, Default)]
pub struct HookSettings {
    /// Signs both hooks' requests; set whenever a hook is.
    pub secret: Option<String>,
    pub webhook: Option<WebhookSettings>,
    pub send_hook: Option<SendHookSettings>,
}

#[derive(Debug, Clone)]
pub struct WebhookSettings {
    pub url: String,
    /// Event types to deliver (`message`, `join`, ...); `None`: all.
    pub events: Option<Vec<String>>,
    /// Chats with more members get no `offline` list.
    pub offline_max: u64,
    /// How long a POST may take before it counts as failed ([`WEBHOOK_TIMEOUT`]).
    pub timeout: Duration,
    /// The first wait before a failed batch is tried again; doubles per failure.
    pub retry_first: Duration,
    /// The longest wait between two tries ([`WEBHOOK_RETRY_MAX`]).
    pub retry_max: Duration,
}

#[derive(Debug, Clone)]
pub struct SendHookSettings {
    pub url: String,
    pub timeout: Duration,
    pub fail: FailMode,
}

/// The `Herald-Signature` value of a request with `body` sent at `t`
/// (unix seconds): `t=<t>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
pub fn signature(secret: &[u8], t: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut hex = String::with_capacity(digest.len() * 2);
    for b in digest {
        hex.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        hex.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    format!("t={t},v1={hex}")
}

/// [`signature`] at the current time.
pub fn signature_now(secret: &[u8], body: &[u8]) -> String {
    let t = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    signature(secret, t, body)
}

/// An HTTP client for one hook: keeps connections open between requests
/// (keep-alive, a few idle per host), gives up on a request after `timeout`.
pub fn client(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(Duration::from_secs(5)))
        .pool_idle_timeout(Duration::from_secs(60))
        .pool_max_idle_per_host(32)
        .tcp_nodelay(true)
        .user_agent(concat!("herald/", env!("CARGO_PKG_VERSION")))
        .build()
        .expect("the hook client's settings are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_time_dot_body_with_the_secret() {
        // Computed independently: printf '1700000000.{"a":1}' | openssl dgst -sha256 -hmac 'k'
        let sig = signature(b"k", 1_700_000_000, br#"{"a":1}"#);
        assert_eq!(sig, "t=1700000000,v1=1b6ad1bc9bf48c52ce01939866d5877c6cc4e87ddad27e16673cb8c4964394a3");
        assert_ne!(sig, signature(b"k2", 1_700_000_000, br#"{"a":1}"#));
        assert_ne!(sig, signature(b"k", 1_700_000_001, br#"{"a":1}"#));
    }
}
