//! herald's own WebSocket layer, server side, over a plain
//! [`TcpStream`]: the upgrade's answer, reading frames, and writing them.
//! It keeps no buffer while a connection is idle, which is most of a
//! connection's life:
//!
//! - reading waits for the socket to be readable, then reads into a buffer
//!   each worker thread shares among its connections, and decodes every whole
//!   frame there; only the bytes of a frame not yet complete (or frames
//!   behind a message the connection is not ready to take) are copied into a
//!   buffer of the connection's own, freed once they are decoded;
//! - writing builds frame headers on the stack and hands them, with the
//!   payloads where they already are, to one `writev`, at once when the
//!   socket has room; only control frames waiting for their turn (a pong, a
//!   close) and what a full socket did not take are kept, until written.
//!
//! Frame rules live in [`frame`]. What a connection does with messages is
//! [`super::conn`]'s.

pub(crate) mod frame;

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use base64::Engine as _;
use bytes::Bytes;
use sha1::{Digest, Sha1};
use tokio::net::TcpStream;

pub(crate) use frame::Fail;
use frame::{Decoder, Event, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG, OP_TEXT, encode_header};

/// Bytes read from a socket at once, into the worker thread's shared buffer
/// (`--ws-read-buffer`); set from the configuration when a gateway starts.
static READ_CHUNK: AtomicUsize = AtomicUsize::new(DEFAULT_READ_CHUNK);
/// The shared read buffer's default size: a socket's receive queue is
/// rarely larger, so a burst is read in one call.
pub const DEFAULT_READ_CHUNK: usize = 64 * 1024;
/// Reads in one go before the connection goes back to its loop (to write,
/// to serve its timers): a peer streaming a large message cannot hold it.
const MAX_READS_AT_ONCE: usize = 16;
/// Frames per `writev`: a header and a payload each, and the control frames
/// ahead of them.
const MAX_FRAMES_PER_WRITEV: usize = 64;

/// The GUID a `Sec-WebSocket-Accept` is derived with (RFC 6455 1.3).
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

thread_local! {
    /// The worker thread's read buffer: every connection polled on this
    /// thread reads into it and decodes from it before it yields.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Sets the size of each worker thread's read buffer.
pub(crate) fn set_read_chunk(bytes: usize) {
    READ_CHUNK.store(bytes, Ordering::Relaxed);
}

/// A whole message handed to the connection.
#[derive(Debug)]
pub(crate) enum Message<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
}

/// Why reading stopped for good.
#[derive(Debug)]
pub(crate) enum ReadEnd {
    /// The peer closed the TCP connection, or it broke.
    Gone,
    /// The peer broke a WebSocket rule: close with this code.
    Fail(Fail),
    /// The peer sent a close frame; its answer is queued (see [`Socket::flush`]).
    Closed,
}

/// Checks an upgrade request's WebSocket headers and returns the
/// `Sec-WebSocket-Accept` to answer with, or the refusal.
pub(crate) fn accept_key(headers: &HeaderMap) -> Result<HeaderValue, (StatusCode, &'static str)> {
    let has_token = |name: header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if !has_token(header::CONNECTION, "upgrade") {
        return Err((StatusCode::BAD_REQUEST, "Connection header did not include 'upgrade'"));
    }
    if !has_token(header::UPGRADE, "websocket") {
        return Err((StatusCode::BAD_REQUEST, "`Upgrade` header did not include 'websocket'"));
    }
    if headers.get(header::SEC_WEBSOCKET_VERSION).is_none_or(|v| v != "13") {
        return Err((StatusCode::BAD_REQUEST, "`Sec-WebSocket-Version` header did not include '13'"));
    }
    let key = headers.get(header::SEC_WEBSOCKET_KEY).map(|k| k.as_bytes()).unwrap_or_default();
    // A key is 16 random bytes in base64.
    if base64::engine::general_purpose::STANDARD.decode(key).map_or(true, |k| k.len() != 16) {
        return Err((StatusCode::BAD_REQUEST, "`Sec-WebSocket-Key` header missing or invalid"));
    }
    let mut sha = Sha1::new();
    sha.update(key);
    sha.update(ACCEPT_GUID);
    let accept = base64::engine::general_purpose::STANDARD.encode(sha.finalize());
    Ok(HeaderValue::from_str(&accept).expect("base64 is a valid header value"))
}

/// One upgraded connection's socket.
pub(crate) struct Socket {
    tcp: TcpStream,
    decoder: Decoder,
    /// Bytes read and not decoded yet; `None` while idle.
    held: Option<Box<Held>>,
    /// Bytes to write before anything else (a pong, a close, the rest of
    /// a [`Socket::try_send`] a full socket did not take); `None` once
    /// written. Boxed on purpose: 8 bytes in every idle connection's task
    /// instead of a `Vec`'s 24.
    #[allow(clippy::box_collection)]
    out: Option<Box<Vec<u8>>>,
    /// Largest message accepted (a `u32`, to share a word with the flags).
    limit: u32,
    /// `held` may hold a whole frame: reading goes on without waiting for the socket.
    ready: bool,
    /// A close frame was queued or sent: no other frame follows it.
    closing: bool,
}

/// Read bytes a connection keeps between reads.
struct Held {
    bytes: Vec<u8>,
    /// Where decoding resumes.
    at: usize,
}

/// What decoding a run of bytes came to.
enum Decoded<R> {
    /// Every whole frame was decoded; the rest (from the offset on) is an incomplete frame.
    More(usize),
    /// Stopped after a message or a ping, at this offset.
    Stop(usize, Option<R>),
    End(ReadEnd),
}

impl Socket {
    /// A socket just upgraded, with the bytes read past the request
    /// (`read_buf`) to be decoded first; messages up to `limit` bytes.
    pub(crate) fn new(tcp: TcpStream, read_buf: Bytes, limit: usize) -> Socket {
        let ready = !read_buf.is_empty();
        let held = ready.then(|| Box::new(Held { bytes: read_buf.to_vec(), at: 0 }));
        let limit = u32::try_from(limit).unwrap_or(u32::MAX);
        Socket { tcp, decoder: Decoder::default(), held, out: None, limit, ready, closing: false }
    }

    /// Ready when [`Socket::read`] may have something: bytes held back, or a readable socket.
    pub(crate) fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.ready {
            return Poll::Ready(Ok(()));
        }
        self.tcp.poll_read_ready(cx)
    }

    /// Decodes what was read and reads on without waiting, until one
    /// message was handed to `on_message` (its result is returned), a ping
    /// was answered (queued: see [`Socket::flush`]), or the socket has no
    /// more for now (`Ok(None)` in both cases).
    pub(crate) fn read<R>(&mut self, on_message: impl FnOnce(Message<'_>) -> R) -> Result<Option<R>, ReadEnd> {
        let mut on_message = Some(on_message);
        self.ready = false;
        if let Some(mut held) = self.held.take() {
            match self.decode_held(&mut held, &mut on_message) {
                Decoded::More(_) => self.held = Some(held),
                Decoded::Stop(_, r) => {
                    self.keep(held);
                    return Ok(r);
                }
                Decoded::End(end) => return Err(end),
            }
        }
        for _ in 0..MAX_READS_AT_ONCE {
            let step = SCRATCH.with_borrow_mut(|scratch| {
                let chunk = READ_CHUNK.load(Ordering::Relaxed);
                if scratch.len() != chunk {
                    scratch.resize(chunk, 0);
                }
                let n = match self.tcp.try_read(scratch) {
                    Ok(0) => return Decoded::End(ReadEnd::Gone),
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Decoded::Stop(0, None),
                    Err(e) => {
                        tracing::debug!(error = %e, "websocket read failed");
                        return Decoded::End(ReadEnd::Gone);
                    }
                };
                if let Some(mut held) = self.held.take() {
                    // The rest of a frame begun before: it is put together in the connection's buffer.
                    held.bytes.extend_from_slice(&scratch[..n]);
                    return match self.decode_held(&mut held, &mut on_message) {
                        Decoded::More(_) => {
                            self.held = Some(held);
                            Decoded::More(0)
                        }
                        Decoded::Stop(_, r) => {
                            self.keep(held);
                            Decoded::Stop(0, r)
                        }
                        end => end,
                    };
                }
                let bytes = &mut scratch[..n];
                match self.decode(bytes, &mut on_message) {
                    Decoded::More(at) => {
                        if at < n {
                            self.held = Some(Box::new(Held { bytes: bytes[at..].to_vec(), at: 0 }));
                        }
                        Decoded::More(0)
                    }
                    Decoded::Stop(at, r) => {
                        if at < n {
                            self.held = Some(Box::new(Held { bytes: bytes[at..].to_vec(), at: 0 }));
                            self.ready = true;
                        }
                        Decoded::Stop(0, r)
                    }
                    end => end,
                }
            });
            match step {
                Decoded::More(_) => {}
                Decoded::Stop(_, r) => return Ok(r),
                Decoded::End(end) => return Err(end),
            }
        }
        // Read enough for one turn: the connection's loop comes back at once.
        self.ready = true;
        Ok(None)
    }

    /// Keeps what is left of `held` after a stop, or frees it.
    fn keep(&mut self, held: Box<Held>) {
        if held.at < held.bytes.len() {
            self.held = Some(held);
            self.ready = true;
        }
    }

    fn decode_held<R>(
        &mut self,
        held: &mut Held,
        on_message: &mut Option<impl FnOnce(Message<'_>) -> R>,
    ) -> Decoded<R> {
        let at = held.at;
        let d = self.decode(&mut held.bytes[at..], on_message);
        match d {
            Decoded::More(n) => {
                held.at += n;
                if held.at > 0 {
                    held.bytes.drain(..held.at);
                    held.at = 0;
                }
                Decoded::More(0)
            }
            Decoded::Stop(n, r) => {
                held.at += n;
                Decoded::Stop(0, r)
            }
            end => end,
        }
    }

    /// Decodes the frames at the start of `bytes`, handling control frames here.
    fn decode<R>(&mut self, bytes: &mut [u8], on_message: &mut Option<impl FnOnce(Message<'_>) -> R>) -> Decoded<R> {
        let mut at = 0;
        loop {
            let (n, event) = match self.decoder.decode(&mut bytes[at..], self.limit) {
                Ok(Some(d)) => d,
                Ok(None) => return Decoded::More(at),
                Err(fail) => return Decoded::End(ReadEnd::Fail(fail)),
            };
            at += n;
            let stop = match event {
                Event::Fragment | Event::Pong => None,
                Event::Text(t) => Some(on_message.take().map(|f| f(Message::Text(t)))),
                Event::Binary(b) => Some(on_message.take().map(|f| f(Message::Binary(b)))),
                Event::Ping(p) => {
                    if !self.closing {
                        push_frame(self.out.get_or_insert_default(), OP_PONG, p);
                    }
                    Some(None)
                }
                Event::Close(c) => {
                    if !self.closing {
                        // Echo the peer's code (RFC 6455 5.5.1); none for none.
                        let code = c.map(|(code, _)| code.to_be_bytes());
                        let code = code.as_ref().map_or(&[][..], |c| &c[..]);
                        push_frame(self.out.get_or_insert_default(), OP_CLOSE, code);
                        self.closing = true;
                    }
                    return Decoded::End(ReadEnd::Closed);
                }
            };
            if let Some(r) = stop {
                self.decoder.release();
                return Decoded::Stop(at, r);
            }
        }
    }

    /// Whether control frames wait to be written.
    pub(crate) fn has_output(&self) -> bool {
        self.out.is_some()
    }

    /// Queues a ping; [`Socket::flush`] or the next send writes it.
    pub(crate) fn queue_ping(&mut self) {
        if !self.closing {
            push_frame(self.out.get_or_insert_default(), OP_PING, &[]);
        }
    }

    /// Queues a close frame with `code` and `reason`; nothing is sent after it.
    pub(crate) fn queue_close(&mut self, code: u16, reason: &str) {
        if self.closing {
            return;
        }
        let mut payload = [0u8; 2 + 123];
        let reason = &reason.as_bytes()[..reason.len().min(123)];
        payload[..2].copy_from_slice(&code.to_be_bytes());
        payload[2..2 + reason.len()].copy_from_slice(reason);
        push_frame(self.out.get_or_insert_default(), OP_CLOSE, &payload[..2 + reason.len()]);
        self.closing = true;
    }

    /// Writes the queued control frames.
    pub(crate) async fn flush(&mut self) -> io::Result<()> {
        self.send::<Vec<u8>>(OP_TEXT, &[]).await
    }

    /// Writes the queued control frames, then one frame per payload with
    /// `opcode` (text or binary), as few `writev`s as it takes.
    pub(crate) async fn send<P: Payload>(&mut self, opcode: u8, payloads: &[P]) -> io::Result<()> {
        debug_assert!(opcode == OP_TEXT || opcode == OP_BINARY);
        let mut chunks = payloads.chunks(MAX_FRAMES_PER_WRITEV);
        loop {
            let batch = chunks.next().unwrap_or_default();
            let mut heads = [[0u8; 10]; MAX_FRAMES_PER_WRITEV];
            let mut slices = [IoSlice::new(&[]); 1 + 2 * MAX_FRAMES_PER_WRITEV];
            let n = self.slices(opcode, batch, &mut heads, &mut slices);
            write_all(&self.tcp, &mut slices[..n]).await?;
            self.out = None;
            if chunks.len() == 0 {
                return Ok(());
            }
        }
    }

    /// [`Socket::send`] without waiting: one `writev` per 64 frames, for as
    /// long as the socket takes everything. What it does not take is kept,
    /// in order, as the socket's output ([`Socket::flush`] writes it), so
    /// the common case (a few frames, a socket with room) costs the
    /// connection no future, no timer and no copy.
    pub(crate) fn try_send<P: Payload>(&mut self, opcode: u8, payloads: &[P]) -> io::Result<Sent> {
        debug_assert!(opcode == OP_TEXT || opcode == OP_BINARY);
        let mut chunks = payloads.chunks(MAX_FRAMES_PER_WRITEV);
        loop {
            let batch = chunks.next().unwrap_or_default();
            let mut heads = [[0u8; 10]; MAX_FRAMES_PER_WRITEV];
            let mut slices = [IoSlice::new(&[]); 1 + 2 * MAX_FRAMES_PER_WRITEV];
            let n = self.slices(opcode, batch, &mut heads, &mut slices);
            let mut left = &mut slices[..n];
            IoSlice::advance_slices(&mut left, 0);
            if !left.is_empty() {
                let written = match self.tcp.try_write_vectored(left) {
                    Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                    Ok(written) => written,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
                    Err(e) => return Err(e),
                };
                IoSlice::advance_slices(&mut left, written);
            }
            if !left.is_empty() {
                // The socket is full: keep the rest of this batch and every later frame, in order.
                let mut rest = Vec::with_capacity(left.iter().map(|s| s.len()).sum());
                for s in left.iter() {
                    rest.extend_from_slice(s);
                }
                if !self.closing {
                    for p in chunks.flatten() {
                        push_frame(&mut rest, opcode, p.payload());
                    }
                }
                self.out = Some(Box::new(rest));
                return Ok(Sent::Rest);
            }
            self.out = None;
            if chunks.len() == 0 {
                return Ok(Sent::All);
            }
        }
    }

    /// Fills `slices` with the queued control frames and `batch`'s frames
    /// (headers in `heads`); returns how many slices it used.
    fn slices<'a, P: Payload>(
        &'a self,
        opcode: u8,
        batch: &'a [P],
        heads: &'a mut [[u8; 10]; MAX_FRAMES_PER_WRITEV],
        slices: &mut [IoSlice<'a>; 1 + 2 * MAX_FRAMES_PER_WRITEV],
    ) -> usize {
        let mut lens = [0usize; MAX_FRAMES_PER_WRITEV];
        for (i, p) in batch.iter().enumerate() {
            lens[i] = encode_header(opcode, p.payload().len(), &mut heads[i]);
        }
        let mut n = 0;
        if let Some(out) = &self.out {
            slices[0] = IoSlice::new(out);
            n = 1;
        }
        if !self.closing {
            for (i, p) in batch.iter().enumerate() {
                slices[n] = IoSlice::new(&heads[i][..lens[i]]);
                slices[n + 1] = IoSlice::new(p.payload());
                n += 2;
            }
        }
        n
    }
}

/// What [`Socket::try_send`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sent {
    /// Everything was written.
    All,
    /// The socket took part of it, or none: the rest is the socket's output,
    /// for [`Socket::flush`] to write once the socket has room.
    Rest,
}

/// What a data frame can be written from, where it already is.
pub(crate) trait Payload: Sync {
    fn payload(&self) -> &[u8];
}

impl Payload for crate::outbox::Frame {
    fn payload(&self) -> &[u8] {
        self.as_str().as_bytes()
    }
}

impl Payload for Vec<u8> {
    fn payload(&self) -> &[u8] {
        self
    }
}

/// Writes every slice, waiting for the socket when it is full; a partial
/// write keeps only what is left.
async fn write_all(tcp: &TcpStream, mut slices: &mut [IoSlice<'_>]) -> io::Result<()> {
    // Skip empty slices up front, so a write of nothing does not wait.
    IoSlice::advance_slices(&mut slices, 0);
    while !slices.is_empty() {
        match tcp.try_write_vectored(slices) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tcp.writable().await?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Appends a whole server frame to `out`.
fn push_frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    let mut head = [0u8; 10];
    let n = encode_header(opcode, payload.len(), &mut head);
    out.extend_from_slice(&head[..n]);
    out.extend_from_slice(payload);
}

#[cfg(test)]
mod tests;
