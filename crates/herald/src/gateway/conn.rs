//! One connection's task, from upgrade to close: `hello`, reading one request
//! at a time, the per-connection rate limit, heartbeats, and writing whatever
//! its [`Outbox`] holds in batches. A request runs on a task of its own (see
//! [`super::dispatch`]) so a slow store never stops pushes; the connection
//! owns that task and ends it when it closes.

use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use herald_protocol::frame::{err_reply, ok_reply};
use herald_protocol::reply::{EmptyOk, HelloOk};
use herald_protocol::{BadFrame, CloseCode, ErrorCode, Op, Request, request::parse_frame};
use rand::RngExt;
use tokio::task::JoinHandle;
use tokio::time::Instant as TokioInstant;

use super::Gateway;
use super::dispatch::{Session, handle};
use super::ws::frame::OP_TEXT;
use super::ws::{Fail, Message, ReadEnd, Sent, Socket};
use crate::chat::Caller;
use crate::error::Error;
use crate::guard::TokenBucket;
use crate::outbox::{ConnId, Frame, Outbox};
use crate::timers::{Tick, Timers};

/// Most frames written per flush: enough to amortize the syscall, few enough
/// to come back to reading soon.
const MAX_FRAMES_PER_WRITE: usize = 64;
/// A write that makes no progress for this long means the peer stopped reading.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time given to a close frame and the peer's answer.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);
/// Refused requests in a row after which the connection is closed with 4029:
/// a client that keeps sending a whole burst's worth into a throttle is not listening.
const THROTTLED_IN_A_ROW_LIMIT: u32 = 200;

/// What ends a connection.
enum End {
    /// Close with this code.
    Close(CloseCode, &'static str),
    /// The peer sent a close: answer it (queued by the socket), then drop the socket.
    Answer,
    /// The peer is gone or broken: just drop the socket.
    Drop,
}

/// One connection, from upgrade to close. Its future is most of an idle
/// connection's memory, so it is written to stay small: an `async move`
/// block, not an `async fn`, because an `async fn` keeps its arguments twice
/// (once as arguments, once as the locals they move into); and it is given
/// the connection already open, so nothing it captures is kept twice.
#[allow(clippy::manual_async_fn)] // on purpose: see above
pub(super) fn serve(mut conn: Conn, mut ws: Socket) -> impl Future<Output = ()> + Send + 'static {
    async move {
        let end = conn.run(&mut ws).await;
        // Boxed, like the write path: the close handshake is rare, so the
        // task of every idle connection should not be sized for it.
        match end {
            End::Close(code, reason) => {
                tracing::debug!(conn = conn.outbox.id(), code = code.0, reason, "closing connection");
                Box::pin(close(&mut ws, code, reason)).await;
                metrics::counter!("herald_closes_total", "code" => close_label(code)).increment(1);
            }
            End::Answer => {
                let _ = Box::pin(tokio::time::timeout(CLOSE_TIMEOUT, ws.flush())).await;
            }
            End::Drop => {}
        }
        conn.end();
    }
}

/// Sends a close frame and reads until the peer's, so our socket is not reset under our close frame.
pub(super) async fn close(ws: &mut Socket, code: CloseCode, reason: &str) {
    ws.queue_close(code.0, reason);
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        if ws.flush().await.is_err() {
            return;
        }
        loop {
            if poll_fn(|cx| ws.poll_readable(cx)).await.is_err() {
                return;
            }
            match ws.read(|_| ()) {
                Ok(_) => {}
                Err(_) => return,
            }
        }
    })
    .await;
}

fn close_label(code: CloseCode) -> &'static str {
    match code.0 {
        1000 => "1000",
        1001 => "1001",
        1002 => "1002",
        1007 => "1007",
        1009 => "1009",
        4000 => "4000",
        4001 => "4001",
        4008 => "4008",
        4012 => "4012",
        4029 => "4029",
        _ => "other",
    }
}

/// A connection's state outside the socket: everything but the bytes.
pub(super) struct Conn {
    gw: Arc<Gateway>,
    outbox: Arc<Outbox>,
    route_ws: Option<Box<str>>,
    session: Option<Arc<Session>>,
    bucket: TokenBucket,
    throttled_in_a_row: u32,
    clock: Clock,
    /// The request being served; no other frame is read until it is done.
    inflight: Option<JoinHandle<()>>,
}

/// When a connection must act by itself: close without `hello`, ping, close
/// when silent. Waited for in the node's table (see [`super::timers`]), not
/// with a timer of the connection's own: an idle connection's task is mostly
/// its loop's state, and a timer would be 112 bytes more. Everything the wait
/// needs is here, so the loop's wait borrows one thing.
struct Clock {
    timers: Arc<Timers>,
    id: ConnId,
    /// Until `hello`: the hello deadline. Then: the next heartbeat ping.
    next_ping: TokioInstant,
    /// After `hello`: when the connection closes unless it hears from its peer.
    idle_at: TokioInstant,
    /// The connection's entry in the table.
    tick: Tick,
    said_hello: bool,
}

impl Clock {
    fn deadline(&self) -> TokioInstant {
        if self.said_hello { self.next_ping.min(self.idle_at) } else { self.next_ping }
    }

    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let deadline = self.deadline();
        self.timers.poll_at(self.id, deadline, &mut self.tick, cx)
    }
}

impl Conn {
    /// Registers a new connection with the node, which has given it its
    /// place ([`Gateway::take_place`]); [`Conn::end`] gives it back.
    pub(super) fn open(gw: Arc<Gateway>, route_ws: Option<Box<str>>) -> Conn {
        let id = gw.next_id.fetch_add(1, Ordering::Relaxed);
        let outbox = Arc::new(Outbox::new(id, gw.cfg.settings.outbox_limit));
        gw.conns.lock().expect("conns lock").insert(id, outbox.clone());
        metrics::gauge!("herald_connections").increment(1.0);
        metrics::counter!("herald_connections_total").increment(1);
        let bucket = TokenBucket::new(gw.cfg.settings.rate, gw.cfg.settings.burst, Instant::now());
        let hello_by = TokioInstant::now() + gw.cfg.settings.hello_timeout();
        let clock =
            Clock { timers: gw.timers.clone(), id, next_ping: hello_by, idle_at: hello_by, tick: 0, said_hello: false };
        Conn { gw, outbox, route_ws, session: None, bucket, throttled_in_a_row: 0, clock, inflight: None }
    }

    pub(super) fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// The request running now, if any: the harness waits for it.
    pub(super) fn inflight(&mut self) -> Option<&mut JoinHandle<()>> {
        self.inflight.as_mut()
    }

    /// Marks the running request as done.
    pub(super) fn request_done(&mut self) {
        self.inflight = None;
    }

    /// Ends the connection: its request still running is stopped (a write in
    /// it finishes and is published on a task of its own), every watch it
    /// owns ends, and the node forgets it.
    pub(super) fn end(mut self) {
        if let Some(task) = self.inflight.take() {
            task.abort();
        }
        let session = self.session.take();
        match &session {
            Some(s) => s.end_watches(&self.gw.chats),
            None => self.gw.said_hello(),
        }
        self.clock.timers.cancel(self.clock.id, self.clock.tick);
        self.gw.release(false);
        let who = session.as_ref().map(|s| (&*s.caller().ws, &*s.caller().user));
        self.gw.conns.lock().expect("conns lock").remove(self.outbox.id(), who);
        metrics::gauge!("herald_connections").decrement(1.0);
    }

    async fn run(&mut self, ws: &mut Socket) -> End {
        loop {
            // Write first: whatever is queued, then any close that waits behind it.
            // The write future is boxed: an idle connection's task then carries
            // only the small waiting state, not the write path's; and so are the
            // frames, which live only until written.
            let mut frames: Vec<Frame> = Vec::new();
            if let Some((code, reason)) = self.outbox.drain(MAX_FRAMES_PER_WRITE, &mut frames) {
                if (!frames.is_empty() || ws.has_output()) && Box::pin(self.write(ws, frames)).await.is_err() {
                    return End::Drop;
                }
                return End::Close(code, reason);
            }
            if !frames.is_empty() || ws.has_output() {
                // Tried at once first: a socket with room (nearly always) takes
                // the frames without the write path's future and timer, which
                // a fan-out would otherwise pay once per watcher. What the
                // socket does not take waits as its output, written below.
                // The frames are gone before any wait, so an idle
                // connection's task does not keep room for them.
                let sent = ws.try_send(OP_TEXT, &frames);
                metrics::counter!("herald_frames_written_total").increment(frames.len() as u64);
                drop(frames);
                match sent {
                    Ok(Sent::All) => {}
                    Ok(Sent::Rest) => {
                        if Box::pin(self.write(ws, Vec::new())).await.is_err() {
                            return End::Drop;
                        }
                    }
                    Err(_) => return End::Drop,
                }
                continue;
            }
            let reading = self.inflight.is_none();
            tokio::select! {
                () = poll_fn(|cx| self.outbox.poll_changed(cx)) => {}
                done = poll_fn(|cx| std::pin::Pin::new(self.inflight.as_mut().expect("guarded")).poll(cx)), if !reading => {
                    self.inflight = None;
                    if let Err(e) = done {
                        tracing::error!(error = %e, "request task failed");
                    }
                }
                readable = poll_fn(|cx| ws.poll_readable(cx)), if reading => {
                    if readable.is_err() {
                        return End::Drop;
                    }
                    // Pings are answered by the socket (queued, written at the
                    // top of the loop); pongs only prove life.
                    let read = ws.read(|msg| match msg {
                        Message::Text(text) => self.on_text(text),
                        Message::Binary(_) => self.on_binary(),
                    });
                    if let Err(end) = read {
                        return read_end(end);
                    }
                    let now = TokioInstant::now();
                    self.clock.idle_at = now + self.gw.cfg.settings.idle_timeout();
                    if !self.clock.said_hello && self.session.is_some() {
                        self.clock.said_hello = true;
                        self.clock.next_ping = now + self.gw.cfg.settings.heartbeat();
                    }
                }
                () = poll_fn(|cx| self.clock.poll(cx)) => {
                    let now = TokioInstant::now();
                    if self.session.is_none() {
                        self.reply_err(None, ErrorCode::Unauthenticated, "no hello in time");
                        self.refuse(CloseCode::UNAUTHENTICATED, "hello timeout");
                        continue;
                    }
                    if now >= self.clock.idle_at {
                        metrics::counter!("herald_idle_closes_total").increment(1);
                        return End::Close(CloseCode::GOING_AWAY, "idle");
                    }
                    if now >= self.clock.next_ping {
                        self.clock.next_ping = now + self.gw.cfg.settings.heartbeat();
                        ws.queue_ping();
                    }
                }
            }
        }
    }

    /// Writes `frames` with one flush. Fails if the peer errors, stops reading
    /// for [`WRITE_TIMEOUT`], or overflows its queue meanwhile.
    async fn write(&self, ws: &mut Socket, frames: Vec<Frame>) -> Result<(), ()> {
        let n = frames.len() as u64;
        let write = ws.send(OP_TEXT, &frames);
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

    /// A binary frame: not this protocol.
    pub(super) fn on_binary(&mut self) {
        self.reply_err(None, ErrorCode::BadRequest, "frames must be text");
        self.refuse(CloseCode::BAD_PROTOCOL, "binary frame");
    }

    /// Handles one text frame. A frame that ends the connection queues its close.
    pub(super) fn on_text(&mut self, text: &str) {
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
            if let Ok(Request { op: Op::Send { chat, client_id: Some(client_id), .. }, .. }) = &parsed {
                session.fence(chat, client_id, &err);
            }
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
        if let Some(asked) = self.route_ws.take().filter(|ws| **ws != *identity.workspace) {
            metrics::counter!("herald_requests_total", "op" => "hello", "outcome" => "unauthenticated").increment(1);
            let msg = format!(
                "the token is for workspace {}, but this socket was opened with ?ws={asked}",
                identity.workspace
            );
            self.reply_err(Some(id), ErrorCode::Unauthenticated, &msg);
            return self.refuse(CloseCode::UNAUTHENTICATED, "workspace mismatch");
        }
        let caller = Caller { ws: identity.workspace.as_str().into(), user: identity.user.as_str().into() };
        if !self.gw.identify(self.outbox.id(), caller.ws.clone(), caller.user.clone(), identity.iat) {
            metrics::counter!("herald_requests_total", "op" => "hello", "outcome" => "unauthenticated").increment(1);
            self.reply_err(Some(id), ErrorCode::Unauthenticated, "this token was revoked: ask for a new one");
            return self.refuse(CloseCode::UNAUTHENTICATED, "token revoked");
        }
        let session_id = format!("{:016x}", rand::rng().random::<u64>());
        let ok = HelloOk {
            user: identity.user.clone(),
            workspace: identity.workspace.clone(),
            node: self.gw.cfg.node.clone(),
            session: session_id,
            heartbeat_ms: self.gw.cfg.settings.heartbeat_ms,
            protocol: herald_protocol::reply::PROTOCOL_VERSION.to_string(),
        };
        self.outbox.push(Frame::from(ok_reply(id, &ok)));
        metrics::counter!("herald_requests_total", "op" => "hello", "outcome" => "ok").increment(1);
        self.session = Some(Arc::new(Session::new(caller, self.outbox.clone(), self.gw.cfg.settings.max_watches)));
        self.gw.said_hello();
    }
}

/// How a connection ends when reading stops.
fn read_end(end: ReadEnd) -> End {
    match end {
        ReadEnd::Gone => End::Drop,
        ReadEnd::Closed => End::Answer,
        ReadEnd::Fail(Fail { code, reason }) => {
            if code == super::ws::frame::TOO_BIG {
                metrics::counter!("herald_frames_too_large_total").increment(1);
                return End::Close(CloseCode::TOO_BIG, "frame too large");
            }
            tracing::debug!(code, reason, "websocket protocol error");
            End::Close(CloseCode(code), reason)
        }
    }
}
