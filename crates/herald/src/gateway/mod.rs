//! The WebSocket side of a node: the node's registry of connections, drains
//! and rebalances, and the upgrade route. Knows sockets, not chats.
//!
//! - [`admission`]: who may open a WebSocket (origins, per-address rate,
//!   connection caps), checked at the upgrade;
//! - [`conn`]: one connection's task: `hello`, reading frames, limits,
//!   heartbeats, writing its outbound queue in batches;
//! - [`dispatch`]: running a request against the chat layer's parts (a
//!   connection's watches are the hub's, counted against its cap here);
//! - [`harness`]: a connection without a socket, for fuzzing (the node behind it: `harness.rs`);
//! - [`ws`]: the WebSocket layer: the upgrade's answer, frames read and written.
//!
//! The connections' deadlines wait in one table per node ([`crate::timers`]),
//! shared with the HTTP side (`crate::front`). The upgraded socket comes from
//! the front (`front::socket::upgraded_tcp`), which alone knows how it wraps
//! its sockets.
//!
//! Everything a connection is sent goes through its [`Outbox`]. Nothing in an
//! idle connection holds a buffer: its socket reads into a buffer its worker
//! thread shares, and writes frames straight from the outbox.

pub mod admission;
mod conn;
mod dispatch;
mod fences;
#[doc(hidden)]
pub mod harness;
pub mod settings;
mod ws;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::Response;
use herald_protocol::CloseCode;
use herald_protocol::frame::reconnect_push;
use herald_protocol::ids::{invalid_id, is_valid_id};
use hyper::upgrade::OnUpgrade;
use rand::RngExt;
use rand::seq::SliceRandom;
use tokio_util::task::TaskTracker;

use crate::auth::Tokens;
use crate::chat::Chats;
use crate::error::http_refusal;
use crate::outbox::{ConnId, Frame, Outbox};
use ws::{Message, ReadEnd, Socket};

/// What the gateway is given at start: its settings and the node's parts it asks.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub node: String,
    pub settings: settings::GatewaySettings,
    /// Which workspaces this node's cell serves.
    pub cells: Arc<crate::cluster::Cells>,
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
    /// Every connection's next deadline.
    timers: Arc<crate::timers::Timers>,
}

/// Open connections: each one's queue; and, after hello, each user's
/// connections, for what concerns a user wherever they are connected
/// (revoking them, telling who is offline, moving a workspace). A
/// connection's own entry is only its queue (16 bytes, in a table sized for
/// every connection of the node): the connection knows its user, and says
/// so when it leaves.
#[derive(Default)]
struct Registry {
    conns: HashMap<ConnId, Arc<Outbox>>,
    /// By workspace, then user: looked up with borrowed `&str`s, so asking
    /// about a user allocates nothing under the registry's lock.
    users: HashMap<Arc<str>, HashMap<Arc<str>, Vec<ConnId>>>,
}

impl Registry {
    fn insert(&mut self, id: ConnId, outbox: Arc<Outbox>) {
        self.conns.insert(id, outbox);
    }

    /// `id` said hello as `user` of `ws`.
    fn identify(&mut self, id: ConnId, ws: Arc<str>, user: Arc<str>) {
        if !self.conns.contains_key(&id) {
            return;
        }
        let ids = self.users.entry(ws).or_default().entry(user).or_default();
        // Most users have one connection: room for exactly one, then doubling.
        ids.reserve_exact(ids.len().max(1));
        ids.push(id);
    }

    /// `user` of `ws`'s connections, if any.
    fn of_user(&self, ws: &str, user: &str) -> Option<&Vec<ConnId>> {
        self.users.get(ws)?.get(user)
    }

    /// Forgets `id`, which said hello as `who` (workspace, user), if it did.
    fn remove(&mut self, id: ConnId, who: Option<(&str, &str)>) {
        self.conns.remove(&id);
        let Some((ws, user)) = who else { return };
        let Some(users) = self.users.get_mut(ws) else { return };
        if let Some(ids) = users.get_mut(user) {
            ids.retain(|c| *c != id);
            if ids.is_empty() {
                users.remove(user);
            }
        }
        if users.is_empty() {
            self.users.remove(ws);
        }
    }
}

#[derive(serde::Deserialize)]
pub struct WsQuery {
    ws: Option<String>,
}

impl Gateway {
    pub fn new(chats: Arc<Chats>, tokens: Arc<Tokens>, cfg: GatewayConfig) -> Arc<Gateway> {
        ws::set_read_chunk(cfg.settings.ws_read_buffer);
        let revoked = cfg.revocations.revoked_users();
        let gateway = Arc::new(Gateway {
            chats,
            tokens,
            next_id: AtomicU64::new(1),
            conns: Mutex::new(Registry::default()),
            draining: AtomicBool::new(false),
            tasks: TaskTracker::new(),
            counts: admission::Counts::default(),
            ip_rate: (cfg.settings.limits.ip_connect_rate > 0)
                .then(|| admission::IpRate::new(cfg.settings.limits.ip_connect_rate)),
            timers: crate::timers::Timers::new(),
            cfg,
        });
        if let Some(revoked) = revoked {
            spawn_revoked_closer(Arc::downgrade(&gateway), revoked);
        }
        gateway
    }

    /// The node's table of connection deadlines, which the HTTP side shares.
    pub(crate) fn timers(&self) -> Arc<crate::timers::Timers> {
        self.timers.clone()
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
        ids.iter().filter_map(|id| reg.conns.get(id).cloned()).collect()
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
        let conns: Vec<Arc<Outbox>> = self.conns.lock().expect("conns lock").conns.values().cloned().collect();
        tracing::info!(connections = conns.len(), window_ms = window.as_millis() as u64, "draining connections");
        send_away(&conns, window, reason);
    }

    /// Moves the connections whose workspace `moves` says should be elsewhere
    /// now (a node joined), spread over `window`. Returns how many.
    pub fn rebalance(&self, window: Duration, moves: impl Fn(&str) -> bool) -> usize {
        let conns: Vec<Arc<Outbox>> = {
            let reg = self.conns.lock().expect("conns lock");
            reg.users
                .iter()
                .filter(|(ws, _)| moves(ws))
                .flat_map(|(_, users)| users.values().flatten())
                .filter_map(|id| reg.conns.get(id).cloned())
                .collect()
        };
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
    mut req: Request,
) -> Response {
    let (on_upgrade, switching) = match upgrade(&mut req) {
        Ok(u) => u,
        Err((status, message)) => return http_refusal(status, message),
    };
    if let Some(ws) = &q.ws
        && !is_valid_id(ws)
    {
        return http_refusal(StatusCode::BAD_REQUEST, invalid_id("ws (the workspace)"));
    }
    let slot = match gw.admit(peer.ip(), req.headers()) {
        Ok(slot) => slot,
        Err(r) => {
            metrics::counter!("herald_upgrades_refused_total", "reason" => r.reason).increment(1);
            tracing::debug!(%peer, reason = r.reason, "upgrade refused");
            return http_refusal(r.status, r.message);
        }
    };
    tracing::trace!(%peer, "upgrading to a WebSocket");
    // The connection runs on a task of its own, not on the one that waits
    // for the upgrade: its future then holds nothing of the upgrade's.
    tokio::spawn(async move {
        let Some(socket) = upgraded(on_upgrade, gw.cfg.settings.frame_limit).await else { return };
        slot.taken();
        let tasks = gw.tasks.clone();
        let conn = conn::Conn::open(gw, q.ws.map(String::into_boxed_str));
        tokio::spawn(tasks.track_future(conn::serve(conn, socket)));
    });
    switching
}

/// Checks a WebSocket upgrade request: the pending upgrade and the `101` to
/// answer with, or the refusal.
fn upgrade(req: &mut Request) -> Result<(OnUpgrade, Response), (StatusCode, &'static str)> {
    if !req.headers().contains_key(header::UPGRADE) {
        return Err((
            StatusCode::UPGRADE_REQUIRED,
            "this is herald's WebSocket endpoint: open it with a WebSocket client \
             (new WebSocket(\"ws://host/v1/ws?ws=<workspace>\")), not a plain HTTP request",
        ));
    }
    let accept = ws::accept_key(req.headers())?;
    let Some(on_upgrade) = req.extensions_mut().remove::<OnUpgrade>() else {
        return Err((StatusCode::UPGRADE_REQUIRED, "this connection cannot be upgraded"));
    };
    let mut switching = Response::new(Body::empty());
    *switching.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = switching.headers_mut();
    h.insert(header::CONNECTION, header::HeaderValue::from_static("upgrade"));
    h.insert(header::UPGRADE, header::HeaderValue::from_static("websocket"));
    h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    Ok((on_upgrade, switching))
}

/// The socket of an upgraded connection, once its `101` was sent: the TCP
/// stream itself, as [`crate::front`] serves HTTP/1 straight over it, with
/// the bytes the HTTP side read past the request.
async fn upgraded(on_upgrade: OnUpgrade, limit: usize) -> Option<Socket> {
    let upgraded = match on_upgrade.await {
        Ok(u) => u,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade failed");
            return None;
        }
    };
    match crate::front::socket::upgraded_tcp(upgraded) {
        Ok((tcp, read_buf)) => Some(Socket::new(tcp, read_buf, limit)),
        Err(_) => {
            tracing::error!("an upgraded connection is not a TCP stream: serve the router with herald's front::Front");
            metrics::counter!("herald_upgrades_refused_total", "reason" => "transport").increment(1);
            None
        }
    }
}

/// `GET /diag/echo`: echoes every message through the gateway's WebSocket
/// layer, for the Autobahn conformance cases. Only routed when `--diag-echo`
/// is given. The size limit is raised to the suite's 16 MiB messages.
pub async fn echo_route(mut req: Request) -> Response {
    const SUITE_MAX: usize = 20 * 1024 * 1024;
    let (on_upgrade, switching) = match upgrade(&mut req) {
        Ok(u) => u,
        Err((status, message)) => return http_refusal(status, message),
    };
    tokio::spawn(async move {
        if let Some(socket) = upgraded(on_upgrade, SUITE_MAX).await {
            echo(socket).await;
        }
    });
    switching
}

async fn echo(mut ws: Socket) {
    loop {
        if std::future::poll_fn(|cx| ws.poll_readable(cx)).await.is_err() {
            return;
        }
        let read = ws.read(|msg| match msg {
            Message::Text(t) => (ws::frame::OP_TEXT, t.as_bytes().to_vec()),
            Message::Binary(b) => (ws::frame::OP_BINARY, b.to_vec()),
        });
        let sent = match read {
            Ok(Some((opcode, data))) => ws.send(opcode, &[data]).await,
            Ok(None) => ws.flush().await,
            Err(ReadEnd::Fail(fail)) => return conn::close(&mut ws, CloseCode(fail.code), fail.reason).await,
            Err(ReadEnd::Closed) => {
                let _ = ws.flush().await;
                return;
            }
            Err(ReadEnd::Gone) => return,
        };
        if sent.is_err() {
            return;
        }
    }
}

/// The webhook's "who is online" answers come from the registry of connections.
impl crate::hooks::webhook::online::Connected for Gateway {
    fn connected(&self, ws: &str, users: &[String]) -> Vec<String> {
        Gateway::connected(self, ws, users.iter().map(String::as_str)).into_iter().map(str::to_owned).collect()
    }
}

/// Closes the connections of each user a revocation new to this node names,
/// with 4001, for as long as the gateway lives (it holds the gateway weakly:
/// a task must not keep a stopped node's gateway alive).
fn spawn_revoked_closer(
    gateway: std::sync::Weak<Gateway>,
    mut revoked: tokio::sync::mpsc::UnboundedReceiver<crate::revoke::Revoked>,
) {
    tokio::spawn(async move {
        while let Some((ws, user)) = revoked.recv().await {
            let Some(gateway) = gateway.upgrade() else { return };
            gateway.close_user(&ws, &user, CloseCode::UNAUTHENTICATED, "token revoked");
        }
    });
}
