//! One socket on the HTTP side, from its accept until it is a WebSocket or
//! closed: what it is doing (a request's headers, its body, a handler, a
//! response, idling between requests), the one deadline that goes with it,
//! and its place among the waiting sockets (see [`super::waiting`]). The
//! socket's IO and the request's and response's bodies tell it where it is;
//! its task ([`serve`]) closes it when its deadline passes or it is shed.
//!
//! Not here: the accept loop and the caps (`super`), the WebSocket after the
//! upgrade (`gateway/`).

use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::ConnectInfo;
use axum::http::{Request, StatusCode};
use futures_util::task::AtomicWaker;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::Front;
use crate::outbox::ConnId;
use crate::timers::Tick;

/// How long a socket that is closed with part of a request unread (a body
/// over its limit, answered 413) keeps reading and discarding, so the client
/// reads the answer instead of a reset: some clients (Python's http.client)
/// send the whole body before they read anything.
const LINGER: Duration = Duration::from_secs(5);
/// Bytes discarded that way at most.
const LINGER_BYTES: usize = 64 * 1024 * 1024;

/// The reason a [`Closer`] gives for a shed socket.
const SHED: &str = "shed";

/// What a socket is doing.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Waiting for a request's line and headers (a new socket, or one that
    /// sent a byte after idling). Waiting; `--header-timeout-ms`.
    Head = 0,
    /// Reading a request's body. Waiting; `--body-timeout-ms` plus its size's allowance.
    Body = 1,
    /// A handler has the whole request (or an upgrade is under way): no deadline.
    Busy = 2,
    /// A response is being written; each write gives `--keepalive-timeout-ms` more.
    Sending = 3,
    /// Between two requests. Waiting; `--keepalive-timeout-ms`.
    Idle = 4,
    /// Closing with part of a request unread: discarding for [`LINGER`].
    /// Waiting (the oldest such socket may be closed first).
    Linger = 5,
}

impl Phase {
    fn of(n: u8) -> Phase {
        match n {
            0 => Phase::Head,
            1 => Phase::Body,
            2 => Phase::Busy,
            3 => Phase::Sending,
            4 => Phase::Idle,
            _ => Phase::Linger,
        }
    }

    /// The `reason` its deadline closes a socket with, in `herald_http_closed_total`.
    fn timeout_reason(self) -> &'static str {
        match self {
            Phase::Head => "header_timeout",
            Phase::Body => "body_timeout",
            Phase::Sending => "send_timeout",
            Phase::Idle => "idle_timeout",
            Phase::Busy | Phase::Linger => "linger",
        }
    }
}

/// A socket's state, shared by its task, its IO, its bodies and the node's
/// list of waiting sockets.
pub(crate) struct Tracked {
    id: ConnId,
    /// The client's address as the caps count it (IPv6: its /64).
    pub(super) address: IpAddr,
    front: Arc<Front>,
    phase: AtomicU8,
    /// Milliseconds on the front's clock; 0: none.
    deadline: AtomicU64,
    /// Its place among the waiting sockets; 0: not waiting. Changed under the list's lock.
    pub(super) since: AtomicU64,
    /// Closed by a cap or to free a file: its task ends it.
    pub(super) shed: AtomicBool,
    /// Part of a request was left unread: its close lingers.
    unread: AtomicBool,
    body_start: AtomicU64,
    body_received: AtomicU64,
    /// The socket's task, woken when it is shed or its deadline comes earlier.
    waker: AtomicWaker,
}

impl Tracked {
    pub(super) fn new(front: Arc<Front>, id: ConnId, address: IpAddr) -> Arc<Tracked> {
        let deadline = front.now_ms() + front.settings.header_timeout_ms;
        Arc::new(Tracked {
            id,
            address,
            front,
            phase: AtomicU8::new(Phase::Head as u8),
            deadline: AtomicU64::new(deadline),
            since: AtomicU64::new(0),
            shed: AtomicBool::new(false),
            unread: AtomicBool::new(false),
            body_start: AtomicU64::new(0),
            body_received: AtomicU64::new(0),
            waker: AtomicWaker::new(),
        })
    }

    pub(crate) fn phase(&self) -> Phase {
        Phase::of(self.phase.load(Ordering::Relaxed))
    }

    /// Closes it from another task: its own task sees the flag and ends.
    pub(super) fn close(&self) {
        self.shed.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Moves to `phase` with a deadline `after` from now (none: `None`),
    /// waiting or not as the phase is.
    fn enter(self: &Arc<Self>, phase: Phase, after: Option<u64>) {
        self.phase.store(phase as u8, Ordering::Relaxed);
        self.set_deadline(after.map_or(0, |ms| self.front.now_ms() + ms));
    }

    fn set_deadline(&self, at: u64) {
        let old = self.deadline.swap(at, Ordering::Relaxed);
        if at != 0 && (old == 0 || at < old) {
            // Its task sleeps to the old deadline, or to none: it must look again.
            self.waker.wake();
        }
    }

    /// A request's headers were read; `has_body`: a body follows.
    fn request_started(self: &Arc<Self>, has_body: bool) {
        if has_body {
            self.body_start.store(self.front.now_ms(), Ordering::Relaxed);
            self.body_received.store(0, Ordering::Relaxed);
            self.enter(Phase::Body, Some(self.front.settings.body_timeout_ms));
        } else {
            self.enter(Phase::Busy, None);
            self.front.stop_waiting(self);
        }
    }

    /// `n` bytes of the body arrived: each `--body-min-rate` of them is a second more.
    fn body_received(&self, n: usize) {
        let received = self.body_received.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if self.phase() == Phase::Body {
            let s = &self.front.settings;
            let allowance = received.saturating_mul(1000) / s.body_min_rate;
            let at = self.body_start.load(Ordering::Relaxed) + s.body_timeout_ms + allowance;
            self.set_deadline(at);
        }
    }

    /// The body ended (`all`: read to its end) or was dropped.
    fn body_done(self: &Arc<Self>, all: bool) {
        if !all {
            self.unread.store(true, Ordering::Relaxed);
        }
        if self.phase() == Phase::Body {
            self.enter(Phase::Busy, None);
            self.front.stop_waiting(self);
        }
    }

    /// The handler answered; `upgrading`: with a 101, the socket becomes a WebSocket.
    fn responding(self: &Arc<Self>, upgrading: bool) {
        if self.phase() == Phase::Body {
            self.body_done(false);
        }
        if upgrading {
            self.enter(Phase::Busy, None);
        } else {
            self.enter(Phase::Sending, Some(self.front.settings.keepalive_timeout_ms));
        }
    }

    /// The response's body ended: the socket idles until its next request.
    fn response_done(self: &Arc<Self>) {
        if self.phase() == Phase::Sending {
            self.enter(Phase::Idle, Some(self.front.settings.keepalive_timeout_ms));
            self.front.wait(self);
        }
    }

    /// Bytes arrived: after an idle time, a new request starts.
    fn read_bytes(self: &Arc<Self>) {
        if self.phase() == Phase::Idle {
            self.enter(Phase::Head, Some(self.front.settings.header_timeout_ms));
            self.front.wait(self);
        }
    }

    /// Bytes of a response were written: its reader keeps up.
    fn wrote_bytes(&self) {
        if self.phase() == Phase::Sending {
            self.set_deadline(self.front.now_ms() + self.front.settings.keepalive_timeout_ms);
        }
    }

    fn lingering(self: &Arc<Self>) {
        self.enter(Phase::Linger, Some(LINGER.as_millis() as u64));
        self.front.wait(self);
    }
}

/// Serves one accepted socket until it closes, is upgraded, times out or is
/// shed, or the node stops (then its request in progress finishes first).
pub(super) async fn serve(
    front: Arc<Front>,
    tcp: TcpStream,
    peer: SocketAddr,
    app: Router,
    mut stopped: tokio::sync::watch::Receiver<()>,
) {
    let tracked = front.admit(peer.ip());
    let _end = Ended(tracked.clone());
    let io = Io { tcp, tracked: tracked.clone(), discarded: None };
    let t = tracked.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let t = t.clone();
        t.request_started(!req.body().is_end_stream());
        let mut req = req.map(|body| RequestBody { inner: body, tracked: t.clone(), done: false });
        req.extensions_mut().insert(ConnectInfo(peer));
        let mut app = app.clone();
        async move {
            let Ok(resp) = tower::Service::call(&mut app, req).await;
            let upgrading = resp.status() == StatusCode::SWITCHING_PROTOCOLS;
            t.responding(upgrading);
            Ok::<_, Infallible>(resp.map(|body| ResponseBody { inner: body, tracked: t, done: upgrading }))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(io), service).with_upgrades();
    tokio::pin!(conn);
    let mut closer = Closer { tracked: tracked.clone(), armed: 0 };
    let mut graceful = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                if let Err(e) = served {
                    tracing::trace!(error = %e, %peer, "http connection failed");
                }
                return;
            }
            reason = &mut closer => {
                // A shed socket was counted by whoever shed it.
                if reason != SHED {
                    metrics::counter!("herald_http_closed_total", "reason" => reason).increment(1);
                }
                tracing::trace!(%peer, reason, "http connection closed");
                return;
            }
            _ = stopped.changed(), if !graceful => {
                graceful = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Takes a socket off the node's books when its task ends, however it ends.
struct Ended(Arc<Tracked>);

impl Drop for Ended {
    fn drop(&mut self) {
        self.0.front.ended(&self.0);
    }
}

/// Resolves when the socket's deadline passes (with the reason to count)
/// or it is shed (the shedder counted it), waiting on the node's deadline table.
struct Closer {
    tracked: Arc<Tracked>,
    armed: Tick,
}

impl Future for Closer {
    type Output = &'static str;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
        let this = &mut *self;
        let t = &this.tracked;
        t.waker.register(cx.waker());
        if t.shed.load(Ordering::Acquire) {
            return Poll::Ready(SHED);
        }
        let at = t.deadline.load(Ordering::Relaxed);
        if at == 0 {
            return Poll::Pending;
        }
        let deadline = t.front.instant(at);
        match t.front.timers.poll_at(t.id, deadline, &mut this.armed, cx) {
            Poll::Ready(()) if t.deadline.load(Ordering::Relaxed) == at => Poll::Ready(t.phase().timeout_reason()),
            Poll::Ready(()) => {
                // It moved meanwhile: look again.
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Closer {
    fn drop(&mut self) {
        self.tracked.front.timers.cancel(self.tracked.id, self.armed);
    }
}

/// The socket as hyper sees it: the TCP stream, telling its [`Tracked`]
/// when bytes come and go, and lingering on close when a request was left
/// unread. After an upgrade, [`Io::into_tcp`] gives the stream back.
pub(crate) struct Io {
    tcp: TcpStream,
    tracked: Arc<Tracked>,
    /// Bytes discarded since the close began lingering (None: it has not).
    discarded: Option<usize>,
}

/// The TCP stream under a connection this front upgraded, with the bytes hyper read past the
/// request; the upgrade back when the router was served by something else. The gateway takes
/// its WebSockets from here without knowing how the front wraps its sockets.
pub(crate) fn upgraded_tcp(
    upgraded: hyper::upgrade::Upgraded,
) -> Result<(TcpStream, bytes::Bytes), hyper::upgrade::Upgraded> {
    upgraded.downcast::<TokioIo<Io>>().map(|parts| (parts.io.into_inner().tcp, parts.read_buf))
}

impl AsyncRead for Io {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.tcp).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.tracked.read_bytes();
        }
        read
    }
}

impl AsyncWrite for Io {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let wrote = Pin::new(&mut self.tcp).poll_write(cx, buf);
        if matches!(wrote, Poll::Ready(Ok(n)) if n > 0) {
            self.tracked.wrote_bytes();
        }
        wrote
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let wrote = Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs);
        if matches!(wrote, Poll::Ready(Ok(n)) if n > 0) {
            self.tracked.wrote_bytes();
        }
        wrote
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    /// Sends FIN; when a request was left unread, then reads and discards
    /// what the client still sends until it closes too (or [`LINGER_BYTES`],
    /// or [`LINGER`], which the socket's task enforces), so that the answer
    /// it was sent is not lost to a reset.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if !this.tracked.unread.load(Ordering::Relaxed) {
            return Pin::new(&mut this.tcp).poll_shutdown(cx);
        }
        if this.discarded.is_none() {
            if let Err(e) = std::task::ready!(Pin::new(&mut this.tcp).poll_shutdown(cx)) {
                return Poll::Ready(Err(e));
            }
            this.discarded = Some(0);
            this.tracked.lingering();
        }
        let mut scratch = [0u8; 8192];
        loop {
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.tcp).poll_read(cx, &mut buf) {
                Poll::Ready(Ok(())) if !buf.filled().is_empty() => {
                    let total = this.discarded.unwrap_or(0) + buf.filled().len();
                    this.discarded = Some(total);
                    if total >= LINGER_BYTES {
                        return Poll::Ready(Ok(()));
                    }
                }
                Poll::Ready(_) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// A request's body, telling its socket how much arrived and when it ended.
struct RequestBody<B> {
    inner: B,
    tracked: Arc<Tracked>,
    done: bool,
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for RequestBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        let frame = std::task::ready!(Pin::new(&mut this.inner).poll_frame(cx));
        match &frame {
            Some(Ok(f)) => {
                if let Some(data) = f.data_ref() {
                    this.tracked.body_received(data.len());
                }
            }
            Some(Err(_)) => {
                this.done = true;
                this.tracked.body_done(false);
            }
            None => {
                this.done = true;
                this.tracked.body_done(true);
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for RequestBody<B> {
    fn drop(&mut self) {
        if !self.done {
            self.tracked.body_done(false);
        }
    }
}

/// A response's body, telling its socket when it has all been handed to hyper.
struct ResponseBody<B> {
    inner: B,
    tracked: Arc<Tracked>,
    /// Its end was told (or it is an upgrade's, which has none to tell).
    done: bool,
}

impl<B> ResponseBody<B> {
    fn ended(&mut self) {
        if !self.done {
            self.done = true;
            self.tracked.response_done();
        }
    }
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for ResponseBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let frame = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if frame.is_none() || self.inner.is_end_stream() {
            self.ended();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for ResponseBody<B> {
    fn drop(&mut self) {
        // hyper drops a body it found empty without polling it.
        self.ended();
    }
}
