//! The WebSocket side of a node: upgrade, `hello`, request parsing, limits,
//! heartbeats, and writing each connection's outbound queue in batches.
//! Knows sockets, not chats: requests go to the chat layer, and everything a
//! connection is sent goes through its [`Outbox`].
//!
//! One task per connection. It writes whatever is queued (many frames per
//! flush), reads one request at a time, and runs that request on a task of
//! its own so a slow store never stops pushes. Nothing in an idle connection
//! holds a buffer beyond the WebSocket's small, explicit ones.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{ConnectInfo, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use herald_protocol::frame::{err_reply, ok_reply, reconnect_push};
use herald_protocol::ids::is_valid_id;
use herald_protocol::reply::{EmptyOk, HelloOk, WatchOk};
use herald_protocol::{BadFrame, CloseCode, ErrorCode, Op, Request, request::parse_frame};
use rand::RngExt;
use rand::seq::SliceRandom;
use tokio::task::JoinHandle;
use tokio::time::{Instant as TokioInstant, sleep_until};
use tokio_util::task::TaskTracker;

use crate::auth::Tokens;
use crate::chat::{Caller, Chats};
use crate::error::Error;
use crate::guard::TokenBucket;
use crate::model::ChatKey;
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
}

/// Most frames written per flush: enough to amortize the syscall, few enough
/// to come back to reading soon.
const MAX_FRAMES_PER_WRITE: usize = 64;
/// A write that makes no progress for this long means the peer stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time given to a close frame and the peer's answer.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// A request that takes longer is answered `unavailable`; its write still finishes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Refused requests in a row after which the connection is closed with 4029:
/// a client that keeps sending a whole burst's worth into a throttle is not listening.
const THROTTLED_IN_A_ROW_LIMIT: u32 = 200;

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
}

/// Open connections: each one's queue and, after hello, its workspace.
type Registry = HashMap<ConnId, (Arc<Outbox>, Option<Arc<str>>)>;

#[derive(serde::Deserialize)]
pub struct WsQuery {
    ws: Option<String>,
}

impl Gateway {
    pub fn new(chats: Arc<Chats>, tokens: Arc<Tokens>, cfg: GatewayConfig) -> Arc<Gateway> {
        Arc::new(Gateway {
            chats,
            tokens,
            cfg,
            next_id: AtomicU64::new(1),
            conns: Mutex::new(HashMap::new()),
            draining: AtomicBool::new(false),
            tasks: TaskTracker::new(),
        })
    }

    pub fn config(&self) -> &GatewayConfig {
        &self.cfg
    }

    /// Open connections.
    pub fn connections(&self) -> usize {
        self.conns.lock().expect("conns lock").len()
    }

    /// Asks every connection to reconnect after a delay spread uniformly over
    /// `window`, then closes it with 4012; refuses new connections from now on.
    pub fn drain(&self, window: Duration, reason: &'static str) {
        self.draining.store(true, Ordering::SeqCst);
        let conns: Vec<Arc<Outbox>> = self.conns.lock().expect("conns lock").values().map(|(o, _)| o.clone()).collect();
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
            .values()
            .filter(|(_, ws)| ws.as_deref().is_some_and(&moves))
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
    upgrade: WebSocketUpgrade,
) -> Response {
    if gw.draining.load(Ordering::SeqCst) {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    if let Some(ws) = &q.ws
        && !is_valid_id(ws)
    {
        return (StatusCode::BAD_REQUEST, "ws must be a workspace id").into_response();
    }
    tracing::trace!(%peer, "upgrading to a WebSocket");
    let tasks = gw.tasks.clone();
    // The connection runs on a task of its own, not inside axum's upgrade
    // task: that one also keeps the upgrade's own state (config, protocol,
    // callback) for as long as its callback runs, and ends at once this way.
    gw.configure(upgrade).on_upgrade(move |socket| {
        tokio::spawn(tasks.track_future(serve(gw, socket, q.ws.map(String::into_boxed_str))));
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

/// A connection after `hello`.
struct Session {
    caller: Caller,
    outbox: Arc<Outbox>,
    /// Chats this connection watches, to end the watches when it closes.
    watches: Mutex<Vec<ChatKey>>,
}

/// What ends a connection.
enum End {
    /// Close with this code.
    Close(CloseCode, &'static str),
    /// The peer is gone or broken: just drop the socket.
    Drop,
}

/// One connection, from upgrade to close. Its future is most of an idle
/// connection's memory, so it is written to stay small: an `async move`
/// block, not an `async fn`, because an `async fn` keeps its arguments twice
/// (once as arguments, once as the locals they move into), and the socket
/// alone is 368 bytes.
#[allow(clippy::manual_async_fn)] // on purpose: see above
fn serve(gw: Arc<Gateway>, mut ws: WebSocket, route_ws: Option<Box<str>>) -> impl Future<Output = ()> + Send + 'static {
    async move {
        let id = gw.next_id.fetch_add(1, Ordering::Relaxed);
        let outbox = Arc::new(Outbox::new(id, gw.cfg.outbox_limit));
        gw.conns.lock().expect("conns lock").insert(id, (outbox.clone(), None));
        metrics::gauge!("herald_connections").increment(1.0);
        metrics::counter!("herald_connections_total").increment(1);

        let mut conn = Conn {
            gw: &gw,
            outbox: &outbox,
            route_ws,
            session: None,
            bucket: TokenBucket::new(gw.cfg.rate, gw.cfg.burst, Instant::now()),
            throttled_in_a_row: 0,
            inflight: None,
        };
        let end = conn.run(&mut ws).await;
        // A request still in flight finishes on its own task; its reply has nowhere to go.
        let session = conn.session.take();
        if let End::Close(code, reason) = end {
            tracing::debug!(conn = id, code = code.0, reason, "closing connection");
            // Boxed, like the write path: the close handshake is rare, so the
            // task of every idle connection should not be sized for it.
            Box::pin(close(&mut ws, code, reason)).await;
            metrics::counter!("herald_closes_total", "code" => close_label(code)).increment(1);
        }
        if let Some(s) = session {
            let keys = std::mem::take(&mut *s.watches.lock().expect("watches lock"));
            gw.chats.unwatch_all(&s.outbox, &keys);
        }
        gw.conns.lock().expect("conns lock").remove(&id);
        metrics::gauge!("herald_connections").decrement(1.0);
    }
}

/// Sends a close frame and reads until the peer's, so our socket is not reset under our close frame.
async fn close(ws: &mut WebSocket, code: CloseCode, reason: &'static str) {
    let frame = CloseFrame { code: code.0, reason: Utf8Bytes::from_static(reason) };
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        if ws.send(Message::Close(Some(frame))).await.is_ok() {
            while let Some(Ok(_)) = ws.recv().await {}
        }
    })
    .await;
}

fn close_label(code: CloseCode) -> &'static str {
    match code.0 {
        1000 => "1000",
        1001 => "1001",
        1009 => "1009",
        4000 => "4000",
        4001 => "4001",
        4008 => "4008",
        4012 => "4012",
        4029 => "4029",
        _ => "other",
    }
}

struct Conn<'a> {
    gw: &'a Arc<Gateway>,
    outbox: &'a Arc<Outbox>,
    route_ws: Option<Box<str>>,
    session: Option<Arc<Session>>,
    bucket: TokenBucket,
    throttled_in_a_row: u32,
    /// The request being served; no other frame is read until it is done.
    inflight: Option<JoinHandle<()>>,
}

impl Conn<'_> {
    async fn run(&mut self, ws: &mut WebSocket) -> End {
        let cfg = &self.gw.cfg;
        let started = TokioInstant::now();
        let mut last_rx = started;
        let mut next_ping = started + cfg.heartbeat;
        let mut frames: Vec<Frame> = Vec::new();
        // One timer for the connection's life, moved as its deadline moves:
        // boxed, because an idle connection's task is mostly this loop's
        // state, and a timer is 112 bytes of it.
        let mut timer = Box::pin(sleep_until(started + cfg.hello_timeout));
        loop {
            // Write first: whatever is queued, then any close that waits behind it.
            // The write future is boxed: an idle connection's task then carries
            // only the small waiting state, not the write path's.
            if let Some((code, reason)) = self.outbox.drain(MAX_FRAMES_PER_WRITE, &mut frames) {
                if !frames.is_empty() && Box::pin(self.write(ws, &mut frames)).await.is_err() {
                    return End::Drop;
                }
                return End::Close(code, reason);
            }
            if !frames.is_empty() {
                if Box::pin(self.write(ws, &mut frames)).await.is_err() {
                    return End::Drop;
                }
                frames = Vec::new();
                continue;
            }
            let deadline = if self.session.is_none() {
                started + cfg.hello_timeout
            } else {
                next_ping.min(last_rx + cfg.idle_timeout)
            };
            if timer.deadline() != deadline {
                timer.as_mut().reset(deadline);
            }
            let reading = self.inflight.is_none();
            tokio::select! {
                _ = self.outbox.changed() => {}
                done = async { self.inflight.as_mut().expect("guarded").await }, if !reading => {
                    self.inflight = None;
                    if let Err(e) = done {
                        tracing::error!(error = %e, "request task failed");
                    }
                }
                msg = ws.recv(), if reading => {
                    last_rx = TokioInstant::now();
                    match msg {
                        None => return End::Drop,
                        Some(Err(e)) => return read_error(e),
                        Some(Ok(Message::Text(text))) => self.on_text(text.as_str()),
                        Some(Ok(Message::Binary(_))) => {
                            self.reply_err(None, ErrorCode::BadRequest, "frames must be text");
                            self.refuse(CloseCode::BAD_PROTOCOL, "binary frame");
                        }
                        // Pings are answered by the WebSocket layer; pongs only prove life.
                        Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                        Some(Ok(Message::Close(_))) => return End::Drop,
                    }
                }
                _ = &mut timer => {
                    let now = TokioInstant::now();
                    if self.session.is_none() {
                        self.reply_err(None, ErrorCode::Unauthenticated, "no hello in time");
                        self.refuse(CloseCode::UNAUTHENTICATED, "hello timeout");
                        continue;
                    }
                    if now >= last_rx + cfg.idle_timeout {
                        metrics::counter!("herald_idle_closes_total").increment(1);
                        return End::Close(CloseCode::GOING_AWAY, "idle");
                    }
                    if now >= next_ping {
                        next_ping = now + cfg.heartbeat;
                        if Box::pin(ws.send(Message::Ping(Default::default()))).await.is_err() {
                            return End::Drop;
                        }
                    }
                }
            }
        }
    }

    /// Writes `frames` with one flush. Fails if the peer errors, stops reading
    /// for [`WRITE_TIMEOUT`], or overflows its queue meanwhile.
    async fn write(&self, ws: &mut WebSocket, frames: &mut Vec<Frame>) -> Result<(), ()> {
        use futures_util::SinkExt;
        let n = frames.len() as u64;
        let write = async {
            for f in frames.drain(..) {
                ws.feed(Message::Text(f)).await?;
            }
            ws.flush().await
        };
        tokio::pin!(write);
        let timeout = tokio::time::sleep(WRITE_TIMEOUT);
        tokio::pin!(timeout);
        loop {
            tokio::select! {
                r = &mut write => {
                    metrics::counter!("herald_frames_written_total").increment(n);
                    return r.map_err(|_| ());
                }
                _ = self.outbox.changed() => {
                    if self.outbox.overflowed() {
                        return Err(());
                    }
                }
                _ = &mut timeout => {
                    tracing::info!(conn = self.outbox.id(), "peer stopped reading; dropping connection");
                    metrics::counter!("herald_write_timeouts_total").increment(1);
                    return Err(());
                }
            }
        }
    }

    fn reply_err(&self, id: Option<i64>, code: ErrorCode, message: &str) {
        let body = herald_protocol::frame::ErrorBody { code, message: message.to_string(), retry_after_ms: None };
        self.outbox.push(Frame::from(err_reply(id, &body)));
    }

    /// Queues a close behind the replies already queued; the loop writes both.
    fn refuse(&self, code: CloseCode, reason: &'static str) {
        self.outbox.close(code, reason);
    }

    /// Handles one text frame. A frame that ends the connection queues its close.
    fn on_text(&mut self, text: &str) {
        let parsed = parse_frame(text);
        let Some(session) = self.session.clone() else {
            return self.on_hello(parsed);
        };
        if let Err(wait_ms) = self.bucket.take(Instant::now()) {
            self.throttled_in_a_row += 1;
            metrics::counter!("herald_requests_total", "op" => "any", "outcome" => "throttled").increment(1);
            if self.throttled_in_a_row > THROTTLED_IN_A_ROW_LIMIT {
                return self.refuse(CloseCode::TOO_MANY_REQUESTS, "too many requests");
            }
            let id = match &parsed {
                Ok(r) => Some(r.id),
                Err(BadFrame::BadRequest { id, .. }) => Some(*id),
                Err(BadFrame::NotRequest(_)) => None,
            };
            let err =
                Error::Throttled { message: "too many requests on this connection".into(), retry_after_ms: wait_ms };
            self.outbox.push(Frame::from(err_reply(id, &err.body())));
            return;
        }
        self.throttled_in_a_row = 0;
        match parsed {
            Err(BadFrame::NotRequest(message)) => {
                metrics::counter!("herald_requests_total", "op" => "none", "outcome" => "bad_request").increment(1);
                self.reply_err(None, ErrorCode::BadRequest, &message);
                self.refuse(CloseCode::BAD_PROTOCOL, "not a request");
            }
            Err(BadFrame::BadRequest { id, op, message }) => {
                metrics::counter!("herald_requests_total", "op" => op.unwrap_or("unknown"), "outcome" => "bad_request")
                    .increment(1);
                self.reply_err(Some(id), ErrorCode::BadRequest, &message);
            }
            Ok(Request { id, op: Op::Hello { .. } }) => {
                metrics::counter!("herald_requests_total", "op" => "hello", "outcome" => "bad_request").increment(1);
                self.reply_err(Some(id), ErrorCode::BadRequest, "hello was already said on this connection");
            }
            Ok(Request { id, op: Op::Ping }) => {
                metrics::counter!("herald_requests_total", "op" => "ping", "outcome" => "ok").increment(1);
                self.outbox.push(Frame::from(ok_reply(id, &EmptyOk {})));
            }
            Ok(req) => {
                let chats = self.gw.chats.clone();
                self.inflight = Some(tokio::spawn(handle(chats, session, req)));
            }
        }
    }

    fn on_hello(&mut self, parsed: Result<Request, BadFrame>) {
        let (id, token) = match parsed {
            Ok(Request { id, op: Op::Hello { token } }) => (id, token),
            Ok(Request { id, .. }) | Err(BadFrame::BadRequest { id, .. }) => {
                self.reply_err(Some(id), ErrorCode::Unauthenticated, "the first request must be hello");
                return self.refuse(CloseCode::UNAUTHENTICATED, "no hello");
            }
            Err(BadFrame::NotRequest(_)) => {
                self.reply_err(None, ErrorCode::Unauthenticated, "the first request must be hello");
                return self.refuse(CloseCode::UNAUTHENTICATED, "no hello");
            }
        };
        let identity = match self.gw.tokens.verify(&token) {
            Ok(identity) => identity,
            Err(e) => {
                metrics::counter!("herald_requests_total", "op" => "hello", "outcome" => "unauthenticated")
                    .increment(1);
                self.reply_err(Some(id), ErrorCode::Unauthenticated, &e.0);
                return self.refuse(CloseCode::UNAUTHENTICATED, "bad token");
            }
        };
        if let Some((cell, _)) = self.gw.cfg.cells.elsewhere(&identity.workspace) {
            metrics::counter!("herald_requests_total", "op" => "hello", "outcome" => "forbidden").increment(1);
            let msg = format!("workspace {} is served by cell {cell}; ask /v1/gateway", identity.workspace);
            self.reply_err(Some(id), ErrorCode::Forbidden, &msg);
            return self.refuse(CloseCode::GOING_AWAY_RECONNECT, "other cell");
        }
        // Only needed for this check: an idle connection should not keep it.
        if self.route_ws.take().is_some_and(|ws| *ws != *identity.workspace) {
            metrics::counter!("herald_requests_total", "op" => "hello", "outcome" => "unauthenticated").increment(1);
            self.reply_err(Some(id), ErrorCode::Unauthenticated, "the token is for another workspace than ?ws=");
            return self.refuse(CloseCode::UNAUTHENTICATED, "workspace mismatch");
        }
        let session_id = format!("{:016x}", rand::rng().random::<u64>());
        let ok = HelloOk {
            user: identity.user.clone(),
            workspace: identity.workspace.clone(),
            node: self.gw.cfg.node.clone(),
            session: session_id,
            heartbeat_ms: self.gw.cfg.heartbeat.as_millis() as u64,
        };
        self.outbox.push(Frame::from(ok_reply(id, &ok)));
        metrics::counter!("herald_requests_total", "op" => "hello", "outcome" => "ok").increment(1);
        let ws: Arc<str> = identity.workspace.into();
        if let Some(entry) = self.gw.conns.lock().expect("conns lock").get_mut(&self.outbox.id()) {
            entry.1 = Some(ws.clone());
        }
        self.session = Some(Arc::new(Session {
            caller: Caller { ws, user: identity.user.into() },
            outbox: self.outbox.clone(),
            watches: Mutex::new(Vec::new()),
        }));
    }
}

fn read_error(e: axum::Error) -> End {
    let inner = e.into_inner();
    if let Some(tungstenite::Error::Capacity(_)) = inner.downcast_ref::<tungstenite::Error>() {
        metrics::counter!("herald_frames_too_large_total").increment(1);
        return End::Close(CloseCode::TOO_BIG, "frame too large");
    }
    tracing::debug!(error = %inner, "websocket read failed");
    End::Drop
}

/// Serves one request and queues its reply.
async fn handle(chats: Arc<Chats>, session: Arc<Session>, req: Request) {
    let started = Instant::now();
    let op = req.op.name();
    let id = req.id;
    let result = tokio::time::timeout(REQUEST_TIMEOUT, run_op(&chats, &session, req))
        .await
        .unwrap_or_else(|_| Err(Error::Unavailable { message: "the request timed out".into(), retry_after_ms: 1000 }));
    let outcome = match &result {
        Ok(reply) => {
            if let Some(frame) = reply {
                session.outbox.push(frame.clone());
            }
            "ok"
        }
        Err(e) => {
            session.outbox.push(Frame::from(err_reply(Some(id), &e.body())));
            e.outcome()
        }
    };
    metrics::counter!("herald_requests_total", "op" => op, "outcome" => outcome).increment(1);
    metrics::histogram!("herald_request_seconds", "op" => op).record(started.elapsed().as_secs_f64());
}

/// Runs `req`; returns its `ok` reply, or `None` when the reply was already queued (watch).
async fn run_op(chats: &Chats, s: &Arc<Session>, req: Request) -> Result<Option<Frame>, Error> {
    let c = &s.caller;
    let id = req.id;
    let ok = |v: String| Ok(Some(Frame::from(v)));
    match req.op {
        Op::Join { chat } => ok(ok_reply(id, &chats.join(c, &chat).await?)),
        Op::Leave { chat } => {
            chats.leave(c, &s.outbox, &chat).await?;
            s.watches.lock().expect("watches lock").retain(|k| *k.chat != *chat);
            ok(ok_reply(id, &EmptyOk {}))
        }
        Op::Watch { chat, after } => {
            let reply = |latest| Frame::from(ok_reply(id, &WatchOk { chat: chat.clone(), seq: latest }));
            chats.watch(c, &s.outbox, &chat, after, reply).await?;
            let mut watches = s.watches.lock().expect("watches lock");
            if !watches.iter().any(|k| *k.chat == *chat) {
                watches.push(ChatKey { ws: c.ws.clone(), chat: chat.as_str().into() });
            }
            Ok(None)
        }
        Op::Unwatch { chat } => {
            chats.unwatch(c, &s.outbox, &chat);
            s.watches.lock().expect("watches lock").retain(|k| *k.chat != *chat);
            ok(ok_reply(id, &EmptyOk {}))
        }
        Op::Send { chat, body, client_id } => ok(ok_reply(id, &chats.send(c, &chat, body, client_id).await?)),
        Op::React { chat, target, emoji, on } => ok(ok_reply(id, &chats.react(c, &chat, target, emoji, on).await?)),
        Op::Read { chat, seq } => ok(ok_reply(id, &chats.read(c, &chat, seq).await?)),
        Op::Fetch { chat, after, limit } => ok(ok_reply(id, &chats.fetch(c, &chat, after, limit).await?)),
        Op::Hello { .. } | Op::Ping => unreachable!("answered by the connection itself"),
    }
}
