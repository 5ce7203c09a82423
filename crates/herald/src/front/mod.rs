//! The node's HTTP side before a socket is a WebSocket or a request is in a
//! handler's hands: accepting sockets (and going on accepting when the
//! process runs out of files), the deadlines of a request's headers and body
//! and of an idle kept-alive connection, and the caps on sockets that have
//! not finished a request, per node and per client address, past which the
//! oldest is closed first. Serves HTTP/1 straight over each TCP stream (not
//! `axum::serve`, whose builder also detects HTTP/2 and wraps the stream in
//! a type of its own): an upgraded WebSocket gets the TCP stream itself back
//! ([`socket::Io::into_tcp`]), for the gateway's WebSocket layer.
//!
//! - [`socket`]: one socket's phases, its deadline, its task;
//! - [`waiting`]: the sockets waiting for a request to finish, by age and address;
//! - [`settings`]: the flags.
//!
//! Deadlines wait in the gateway's table of connection deadlines (one task
//! per node, no timer per socket); front sockets take ids from the top half
//! of the id space, so they never meet a WebSocket's there.

pub mod settings;
pub(crate) mod socket;
mod waiting;

use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;

use crate::log_every::LogEvery;
use crate::timers::Timers;
pub use settings::FrontSettings;
use socket::Tracked;
use waiting::Waiting;

/// The first id a front socket takes in the deadline table (WebSockets count up from 1).
const FIRST_ID: u64 = 1 << 63;
/// Sockets closed at once when `accept` finds no file free.
const SHED_BATCH: usize = 16;
/// Pause after shedding for a free file: the shed sockets' tasks close them meanwhile.
const SHED_PAUSE: Duration = Duration::from_millis(1);
/// Pause when no file is free and no socket could be shed (every one is a
/// WebSocket or has a request in a handler): short, so a freed file is used soon.
const NO_FILE_PAUSE: Duration = Duration::from_millis(20);
/// Pause after any other accept error that is not one connection's.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A node's HTTP side.
pub struct Front {
    settings: FrontSettings,
    timers: Arc<Timers>,
    epoch: Instant,
    waiting: Mutex<Waiting<Arc<Tracked>>>,
    next_id: AtomicU64,
    /// Accept failures, logged at most once a second with their count.
    failures: LogEvery,
}

impl Front {
    /// A node's front, waiting on `timers` (the gateway's table).
    pub(crate) fn new(settings: FrontSettings, timers: Arc<Timers>) -> Arc<Front> {
        Arc::new(Front {
            settings,
            timers,
            epoch: Instant::now(),
            waiting: Mutex::new(Waiting::default()),
            next_id: AtomicU64::new(FIRST_ID),
            failures: LogEvery::default(),
        })
    }

    /// Milliseconds on this front's clock (never 0, which means "no deadline").
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64 + 1
    }

    fn instant(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms.saturating_sub(1))
    }

    /// A socket from `ip` was accepted: it waits for its request's headers.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Arc<Tracked> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let tracked = Tracked::new(self.clone(), id, client_address(ip));
        metrics::gauge!("herald_http_sockets").increment(1.0);
        self.wait(&tracked);
        tracked
    }

    /// `t` starts waiting for a request to finish, as the youngest; past a
    /// cap, the oldest waiting socket (of its address, or of the node) is closed.
    fn wait(&self, t: &Arc<Tracked>) {
        let mut waiting = self.waiting.lock().expect("front lock");
        if t.shed.load(Ordering::Acquire) {
            return;
        }
        let old = t.since.swap(0, Ordering::Relaxed);
        if old != 0 {
            waiting.remove(old);
        }
        let per_ip = self.settings.max_pending_requests_per_ip;
        if per_ip > 0 && waiting.len_of(t.address) >= per_ip {
            shed(waiting.pop_oldest_of(t.address), "address_cap");
        }
        if waiting.len() >= self.settings.max_pending_requests {
            shed(waiting.pop_oldest(), "node_cap");
        }
        let since = waiting.insert(t.address, t.clone());
        t.since.store(since, Ordering::Relaxed);
    }

    /// `t` has a request in hand (or is closing): it no longer waits.
    fn stop_waiting(&self, t: &Tracked) {
        if t.since.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut waiting = self.waiting.lock().expect("front lock");
        let since = t.since.swap(0, Ordering::Relaxed);
        if since != 0 {
            waiting.remove(since);
        }
    }

    /// `t`'s task ended.
    fn ended(&self, t: &Tracked) {
        self.stop_waiting(t);
        metrics::gauge!("herald_http_sockets").decrement(1.0);
    }

    /// Closes up to `n` of the sockets that have waited longest; how many.
    fn shed_oldest(&self, n: usize) -> usize {
        let mut waiting = self.waiting.lock().expect("front lock");
        let mut shed_n = 0;
        while shed_n < n {
            let Some(t) = waiting.pop_oldest() else { break };
            shed(Some(t), "out_of_files");
            shed_n += 1;
        }
        shed_n
    }

    /// Sockets waiting for a request to finish.
    pub fn waiting(&self) -> usize {
        self.waiting.lock().expect("front lock").len()
    }

    /// Serves `app` on `listener` until `signal` resolves, then lets the
    /// requests in progress finish.
    pub async fn serve(self: &Arc<Self>, listener: TcpListener, app: Router, signal: impl Future<Output = ()>) {
        // Dropped at shutdown: every socket's receiver then sees it.
        let (stop, stopped) = tokio::sync::watch::channel(());
        let sockets = TaskTracker::new();
        tokio::pin!(signal);
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        self.accept_failed(&e).await;
                        continue;
                    }
                },
                () = &mut signal => break,
            };
            // Batched writes already fill packets; Nagle would only add delay.
            let _ = tcp.set_nodelay(true);
            sockets.spawn(socket::serve(self.clone(), tcp, peer, app.clone(), stopped.clone()));
        }
        drop(listener);
        drop(stop);
        sockets.close();
        sockets.wait().await;
    }

    /// An `accept` failed: one connection's trouble is passed over; with no
    /// file free, the oldest waiting sockets are closed to free some, and the
    /// loop goes straight on. Counted by kind, logged once a second.
    async fn accept_failed(&self, e: &std::io::Error) {
        use std::io::ErrorKind;
        if matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset)
        {
            return;
        }
        let kind = match e.raw_os_error() {
            Some(EMFILE) => "process_files",
            Some(ENFILE) => "system_files",
            Some(ENOBUFS | ENOMEM) => "memory",
            _ => "other",
        };
        metrics::counter!("herald_accept_failures_total", "kind" => kind).increment(1);
        let out_of_files = matches!(kind, "process_files" | "system_files");
        let shed = if out_of_files { self.shed_oldest(SHED_BATCH) } else { 0 };
        self.log_failure(e, kind, shed);
        let pause = match (out_of_files, shed) {
            (true, 0) => NO_FILE_PAUSE,
            (true, _) => SHED_PAUSE,
            (false, _) => ACCEPT_ERROR_PAUSE,
        };
        tokio::time::sleep(pause).await;
    }

    fn log_failure(&self, e: &std::io::Error, kind: &'static str, shed: usize) {
        let Some(failures) = self.failures.note() else { return };
        tracing::error!(error = %e, kind, failures, shed, "accept failed (counted once a second)");
    }
}

/// Closes `t`, shed by a cap or for a file, counted under `reason`.
fn shed(t: Option<Arc<Tracked>>, reason: &'static str) {
    let Some(t) = t else { return };
    t.since.store(0, Ordering::Relaxed);
    t.close();
    metrics::counter!("herald_http_shed_total", "reason" => reason).increment(1);
}

/// Linux's error numbers for what `accept` can run out of.
const EMFILE: i32 = 24;
const ENFILE: i32 = 23;
const ENOMEM: i32 = 12;
const ENOBUFS: i32 = 105;

/// A client's address as herald's per-address limits count it: IPv6 per
/// /64, the block one host usually holds, so rotating addresses in it gains
/// nothing; an IPv4-mapped IPv6 address as its IPv4 address.
pub(crate) fn client_address(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut octets = v6.octets();
                octets[8..].fill(0);
                IpAddr::from(octets)
            }
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests;
