//! The WebSocket side of a node: the node's registry of connections, drains
//! and rebalances, and the upgrade route. Knows sockets, not chats.
//!
//! - [`admission`]: who may open a WebSocket (origins, per-address rate,
//!   connection caps), checked at the upgrade;
//! - [`conn`]: one connection's task: `hello`, reading frames, limits,
//!   heartbeats, writing its outbound queue in batches;
//! - [`dispatch`]: running a request against the chat layer, and the one
//!   owner of a connection's watches;
//! - [`harness`]: a connection without a socket, for fuzzing.
//!
//! Everything a connection is sent goes through its [`Outbox`]. Nothing in an
//! idle connection holds a buffer beyond the WebSocket's small, explicit ones.

pub mod admission;
mod conn;
mod dispatch;
#[doc(hidden)]
pub mod harness;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use herald_protocol::CloseCode;
use herald_protocol::frame::reconnect_push;
use herald_protocol::ids::is_valid_id;
use rand::RngExt;
use rand::seq::SliceRandom;
use tokio_util::task::TaskTracker;

use crate::auth::Tokens;
use crate::chat::Chats;
use crate::outbox::{ConnId, Frame, Outbox};

/// Connection settings; see `config` for their defaults and reasons.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub node: String,
    pub frame_limit: usize,
    pub hello_timeout: Duration,
    pub heartbeat: Duration,
    pub idle_timeout: Duration,
    pub rate: u32,
    pub burst: u32,
    pub outbox_limit: usize,
    pub read_buffer: usize,
    pub write_buffer: usize,
    /// Which workspaces this node's cell serves.
    pub cells: Arc<crate::cluster::Cells>,
    /// Upgrade-time limits.
    pub limits: admission::Limits,
    /// Chats one connection may watch at once.
    pub max_watches: usize,
    /// Revoked tokens, which `hello` refuses.
    pub revocations: Arc<crate::revoke::Revocations>,
}

/// The node's WebSocket gateway.
pub struct Gateway {
    chats: Arc<Chats>,
    tokens: Arc<Tokens>,
    cfg: GatewayConfig,
    next_id: AtomicU64,
    /// Open connections, with their workspace once they said hello.
    conns: Mutex<Registry>,
    draining: AtomicBool,
    tasks: TaskTracker,
    counts: admission::Counts,
    ip_rate: Option<admission::IpRate>,
}

/// Open connections: each one's queue and, after hello, its workspace and
/// user; and each user's connections, for what concerns a user wherever
/// they are connected (revoking them, telling who is offline).
#[derive(Default)]
struct Registry {
    conns: HashMap<ConnId, (Arc<Outbox>, Option<UserKey>)>,
    /// By workspace, then user: looked up with borrowed `&str`s, so asking
    /// about a user allocates nothing under the registry's lock.
    users: HashMap<Arc<str>, HashMap<Arc<str>, Vec<ConnId>>>,
}

/// A user of a workspace: (workspace, user).
type UserKey = (Arc<str>, Arc<str>);

impl Registry {
    fn insert(&mut self, id: ConnId, outbox: Arc<Outbox>) {
        self.conns.insert(id, (outbox, None));
    }

    /// `id` said hello as `user` of `ws`.
    fn identify(&mut self, id: ConnId, ws: Arc<str>, user: Arc<str>) {
        let Some(entry) = self.conns.get_mut(&id) else { return };
        entry.1 = Some((ws.clone(), user.clone()));
        self.users.entry(ws).or_default().entry(user).or_default().push(id);
    }

    /// `user` of `ws`'s connections, if any.
    fn of_user(&self, ws: &str, user: &str) -> Option<&Vec<ConnId>> {
        self.users.get(ws)?.get(user)
    }

    fn remove(&mut self, id: ConnId) {
        let Some((_, Some((ws, user)))) = self.conns.remove(&id) else { return };
        let Some(users) = self.users.get_mut(&ws) else { return };
        if let Some(ids) = users.get_mut(&user) {
            ids.retain(|c| *c != id);
            if ids.is_empty() {
                users.remove(&user);
            }
        }
        if users.is_empty() {
            self.users.remove(&ws);
        }
    }
}

#[derive(serde::Deserialize)]
pub struct WsQuery {
    ws: Option<String>,
}

impl Gateway {
    pub fn new(chats: Arc<Chats>, tokens: Arc<Tokens>, cfg: GatewayConfig) -> Arc<Gateway> {
        Arc::new(Gateway {
            chats,
            tokens,
            next_id: AtomicU64::new(1),
            conns: Mutex::new(Registry::default()),
            draining: AtomicBool::new(false),
            tasks: TaskTracker::new(),
            counts: admission::Counts::default(),
            ip_rate: (cfg.limits.ip_connect_rate > 0).then(|| admission::IpRate::new(cfg.limits.ip_connect_rate)),
            cfg,
        })
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.cfg
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.lock().expect("conns lock").conns.len()
    }

    /// The queues of `user`'s connections to this node in workspace `ws`.
    pub fn user_connections(&self, ws: &str, user: &str) -> Vec<Arc<Outbox>> {
        let reg = self.conns.lock().expect("conns lock");
        let Some(ids) = reg.of_user(ws, user) else { return Vec::new() };
        ids.iter().filter_map(|id| reg.conns.get(id).map(|(o, _)| o.clone())).collect()
    }

    /// Those of `users` (of workspace `ws`) with at least one connection to this node.
    pub fn connected<'a>(&self, ws: &str, users: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
        let reg = self.conns.lock().expect("conns lock");
        users.into_iter().filter(|u| reg.of_user(ws, u).is_some()).collect()
    }

    /// Registers connection `id` as `user` of `ws`, unless a revocation
    /// refuses their token (issued at `iat`): checked under the registry's
    /// lock, so a revocation noted meanwhile either refuses this `hello` or
    /// finds the connection to close (see `revoke`'s lock order).
    fn identify(&self, id: ConnId, ws: Arc<str>, user: Arc<str>, iat: Option<u64>) -> bool {
        let mut reg = self.conns.lock().expect("conns lock");
        if self.cfg.revocations.refuses(&ws, &user, iat) {
            return false;
        }
        reg.identify(id, ws, user);
        true
    }

    /// Closes every connection of `user` of `ws` to this node with `code`. Returns how many.
    pub fn close_user(&self, ws: &str, user: &str, code: CloseCode, reason: &'static str) -> usize {
        let conns = self.user_connections(ws, user);
        for outbox in &conns {
            outbox.close(code, reason);
        }
        conns.len()
    }

    /// Whether this node drains (by SIGTERM or `POST /v1/admin/drain`): it refuses new connections.
    pub fn draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Asks every connection to reconnect after a delay spread uniformly over
    /// `window`, then closes it with 4012; refuses new connections from now on.
    pub fn drain(&self, window: Duration, reason: &'static str) {
        self.draining.store(true, Ordering::SeqCst);
        let conns: Vec<Arc<Outbox>> =
            self.conns.lock().expect("conns lock").conns.values().map(|(o, _)| o.clone()).collect();
        tracing::info!(connections = conns.len(), window_ms = window.as_millis() as u64, "draining connections");
        send_away(&conns, window, reason);
    }

    /// Moves the connections whose workspace `moves` says should be elsewhere
    /// now (a node joined), spread over `window`. Returns how many.
    pub fn rebalance(&self, window: Duration, moves: impl Fn(&str) -> bool) -> usize {
        let conns: Vec<Arc<Outbox>> = self
            .conns
            .lock()
            .expect("conns lock")
            .conns
            .values()
            .filter(|(_, who)| who.as_ref().is_some_and(|(ws, _)| moves(ws)))
            .map(|(o, _)| o.clone())
            .collect();
        if !conns.is_empty() {
            tracing::info!(connections = conns.len(), "moving connections to a node that joined");
            metrics::counter!("herald_rebalanced_total").increment(conns.len() as u64);
        }
        send_away(&conns, window, "rebalance");
        conns.len()
    }

    /// Waits until every connection task has ended, at most `timeout`.
    pub async fn wait_closed(&self, timeout: Duration) -> bool {
        self.tasks.close();
        tokio::time::timeout(timeout, self.tasks.wait()).await.is_ok()
    }

    /// Applies the connection settings to an upgrade.
    fn configure(&self, upgrade: WebSocketUpgrade) -> WebSocketUpgrade {
        upgrade
            .read_buffer_size(self.cfg.read_buffer)
            .write_buffer_size(self.cfg.write_buffer)
            .max_message_size(self.cfg.frame_limit)
            .max_frame_size(self.cfg.frame_limit)
    }
}

/// Asks each connection to reconnect after a delay spread evenly over
/// `window`, then closes it with 4012. Each connection gets a random slot of
/// its own (the window cut into as many slots as connections) and a random
/// point in it: clients come back at a steady rate, never a bunch at once,
/// and no client can tell its place from its connection order.
fn send_away(conns: &[Arc<Outbox>], window: Duration, reason: &'static str) {
    let mut rng = rand::rng();
    let window_ms = window.as_millis() as f64;
    let mut slots: Vec<usize> = (0..conns.len()).collect();
    slots.shuffle(&mut rng);
    let slot_ms = window_ms / conns.len().max(1) as f64;
    for (outbox, slot) in conns.iter().zip(slots) {
        let after_ms = ((slot as f64 + rng.random::<f64>()) * slot_ms).min(window_ms) as u64;
        outbox.push(Frame::from(reconnect_push(after_ms, reason)));
        outbox.close(CloseCode::GOING_AWAY_RECONNECT, reason);
    }
}

/// `GET /v1/ws?ws={workspace}`.
pub async fn ws_route(
    State(gw): State<Arc<Gateway>>,
    Query(q): Query<WsQuery>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    if let Some(ws) = &q.ws
        && !is_valid_id(ws)
    {
        return (StatusCode::BAD_REQUEST, "ws must be a workspace id").into_response();
    }
    let slot = match gw.admit(peer.ip(), &headers) {
        Ok(slot) => slot,
        Err(r) => {
            metrics::counter!("herald_upgrades_refused_total", "reason" => r.reason).increment(1);
            tracing::debug!(%peer, reason = r.reason, "upgrade refused");
            return (r.status, r.message).into_response();
        }
    };
    tracing::trace!(%peer, "upgrading to a WebSocket");
    let tasks = gw.tasks.clone();
    // The connection runs on a task of its own, not inside axum's upgrade
    // task: that one also keeps the upgrade's own state (config, protocol,
    // callback) for as long as its callback runs, and ends at once this way.
    gw.configure(upgrade).on_upgrade(move |socket| {
        tokio::spawn(tasks.track_future(conn::serve(gw, socket, q.ws.map(String::into_boxed_str), slot)));
        std::future::ready(())
    })
}

/// `GET /diag/echo`: echoes every message with the gateway's buffers, for the
/// Autobahn conformance cases. Only routed when `--diag-echo` is given. The
/// size limits are raised to the suite's 16 MiB messages; the rest is the
/// gateway's own configuration.
pub async fn echo_route(State(gw): State<Arc<Gateway>>, upgrade: WebSocketUpgrade) -> Response {
    const SUITE_MAX: usize = 20 * 1024 * 1024;
    gw.configure(upgrade).max_message_size(SUITE_MAX).max_frame_size(SUITE_MAX).on_upgrade(|mut socket| async move {
        while let Some(Ok(msg)) = socket.recv().await {
            let reply = match msg {
                Message::Text(t) => Message::Text(t),
                Message::Binary(b) => Message::Binary(b),
                _ => continue,
            };
            if socket.send(reply).await.is_err() {
                break;
            }
        }
    })
}
