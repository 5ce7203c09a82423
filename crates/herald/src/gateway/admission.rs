//! Who may open a WebSocket: the checks made at the upgrade, before a
//! connection costs anything. In order: a draining node refuses (503); an
//! `Origin` not in `--allowed-origins` is refused (403); an address past
//! `--ip-connect-rate` is refused (429); past `--max-connections` or
//! `--max-pending-hellos` open connections the node refuses (503).
//!
//! A connection holds its place from the upgrade to its end, and its place
//! among the connections that have not said `hello` until it does (or ends).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode, header};

use super::Gateway;
pub use super::settings::{Limits, normalize_origin};
use crate::guard::TokenBucket;

/// Addresses tracked by the per-address rate at most; past it, those whose
/// bucket has refilled (idle for a while) are forgotten first.
const MAX_TRACKED: usize = 100_000;

/// Why an upgrade was refused: its status, its body, its metrics label.
pub struct Refusal {
    pub status: StatusCode,
    pub message: &'static str,
    pub reason: &'static str,
}

/// The node's count of open connections and of those without a `hello`.
#[derive(Default)]
pub(super) struct Counts {
    open: AtomicUsize,
    unhello: AtomicUsize,
}

/// Upgrades per second per client address. IPv6 addresses count per /64,
/// the block one host usually holds, so rotating addresses in it gains nothing.
pub(super) struct IpRate {
    rate: u32,
    buckets: Mutex<HashMap<IpAddr, TokenBucket>>,
}

impl IpRate {
    pub(super) fn new(rate: u32) -> IpRate {
        IpRate { rate, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one upgrade for `ip` now; false if it is past its rate.
    fn take(&self, ip: IpAddr, now: Instant) -> bool {
        let key = crate::front::client_address(ip);
        let mut buckets = self.buckets.lock().expect("ip rate lock");
        if buckets.len() >= MAX_TRACKED && !buckets.contains_key(&key) {
            // A bucket idle for its whole refill time is full again: forgetting it changes nothing.
            let refill = Duration::from_secs_f64(4.0 + 1.0 / f64::from(self.rate));
            buckets.retain(|_, b| !b.idle_for(refill, now));
            if buckets.len() >= MAX_TRACKED {
                metrics::counter!("herald_ip_rate_table_full_total").increment(1);
                return false;
            }
        }
        let burst = self.rate.saturating_mul(4);
        buckets.entry(key).or_insert_with(|| TokenBucket::new(self.rate, burst, now)).take(now).is_ok()
    }
}

impl Gateway {
    /// Runs the upgrade-time checks for a client at `ip` with `headers`,
    /// and takes a connection's place if they pass.
    pub(super) fn admit(self: &Arc<Self>, ip: IpAddr, headers: &HeaderMap) -> Result<Slot, Refusal> {
        let refuse = |status, message, reason| Err(Refusal { status, message, reason });
        if self.draining.load(Ordering::SeqCst) {
            return refuse(StatusCode::SERVICE_UNAVAILABLE, "draining", "draining");
        }
        let limits = &self.cfg.settings.limits;
        if !limits.allowed_origins.is_empty()
            && let Some(origin) = headers.get(header::ORIGIN)
        {
            let allowed = origin
                .to_str()
                .ok()
                .and_then(|o| normalize_origin(o).ok())
                .is_some_and(|o| limits.allowed_origins.contains(&o));
            if !allowed {
                return refuse(StatusCode::FORBIDDEN, "this origin may not open a WebSocket here", "origin");
            }
        }
        if let Some(rate) = &self.ip_rate
            && !rate.take(ip, Instant::now())
        {
            return refuse(StatusCode::TOO_MANY_REQUESTS, "too many connections from this address", "ip_rate");
        }
        self.take_place().map_err(|(message, reason)| Refusal {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message,
            reason,
        })
    }

    /// Takes a connection's place (and one among those without a `hello`), within the limits.
    pub(super) fn take_place(self: &Arc<Self>) -> Result<Slot, (&'static str, &'static str)> {
        let limits = &self.cfg.settings.limits;
        if self.counts.open.fetch_add(1, Ordering::AcqRel) >= limits.max_connections {
            self.counts.open.fetch_sub(1, Ordering::AcqRel);
            return Err(("this node has as many connections as it takes", "max_connections"));
        }
        if self.counts.unhello.fetch_add(1, Ordering::AcqRel) >= limits.max_pending_hellos {
            self.counts.unhello.fetch_sub(1, Ordering::AcqRel);
            self.counts.open.fetch_sub(1, Ordering::AcqRel);
            return Err(("too many connections are waiting to say hello", "max_pending_hellos"));
        }
        Ok(Slot { gw: Some(self.clone()) })
    }

    /// A connection that held a place said `hello`.
    pub(super) fn said_hello(&self) {
        self.counts.unhello.fetch_sub(1, Ordering::AcqRel);
    }

    /// A connection that held a place ended (`hello_pending`: without a `hello`).
    pub(super) fn release(&self, hello_pending: bool) {
        if hello_pending {
            self.counts.unhello.fetch_sub(1, Ordering::AcqRel);
        }
        self.counts.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's place between the upgrade check and its connection's
/// start; dropped unused (the upgrade failed), it gives the place back.
pub struct Slot {
    gw: Option<Arc<Gateway>>,
}

impl Slot {
    /// The connection starts: from now on it gives the place back when it ends.
    pub(super) fn taken(mut self) {
        self.gw = None;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(gw) = self.gw.take() {
            gw.release(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_compared_in_normal_form() {
        assert_eq!(normalize_origin("HTTPS://Chat.Example.com:443").unwrap(), "https://chat.example.com");
        assert_eq!(normalize_origin("http://localhost:5173").unwrap(), "http://localhost:5173");
        assert_eq!(normalize_origin("http://example.com:80").unwrap(), "http://example.com");
        for bad in ["example.com", "https://example.com/", "ftp://x", "https://", "https://a/b"] {
            assert!(normalize_origin(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_ip_rate_allows_bursts_of_four_times_the_rate_per_address() {
        let r = IpRate::new(2);
        let t0 = Instant::now();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert!((0..8).all(|_| r.take(a, t0)));
        assert!(!r.take(a, t0));
        assert!(r.take("10.0.0.2".parse().unwrap(), t0), "another address has its own bucket");
        assert!(r.take(a, t0 + Duration::from_millis(600)), "refilled at 2/s");
        // One IPv6 /64 is one client.
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!((0..8).all(|i| r.take(v6(&format!("2001:db8::{i}")), t0)));
        assert!(!r.take(v6("2001:db8::ffff:1"), t0));
        assert!(r.take(v6("2001:db8:0:1::1"), t0));
    }
}
