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
//!   payloads where they already are, to one `writev`; only control frames
//!   waiting for their turn (a pong, a close) are kept, until written.
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
    /// Control frames to write before anything else (a pong, a close);
    /// `None` once written. Boxed on purpose: 8 bytes in every idle
    /// connection's task instead of a `Vec`'s 24.
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
            let mut n = 0;
            let mut lens = [0usize; MAX_FRAMES_PER_WRITEV];
            for (i, p) in batch.iter().enumerate() {
                lens[i] = encode_header(opcode, p.payload().len(), &mut heads[i]);
            }
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
            write_all(&self.tcp, &mut slices[..n]).await?;
            self.out = None;
            if chunks.len() == 0 {
                return Ok(());
            }
        }
    }
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
mod tests {
    use super::*;
    use frame::tests::client_frame;
    use frame::{OP_CONTINUATION, OP_PING};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connected pair: the server's [`Socket`] and the client's stream.
    async fn pair(limit: usize) -> (Socket, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (Socket::new(server, Bytes::new(), limit), client)
    }

    /// Reads messages as a connection does, answering what the socket
    /// queued, until reading ends.
    async fn serve(mut ws: Socket) -> (Vec<String>, ReadEnd) {
        let mut got = Vec::new();
        loop {
            std::future::poll_fn(|cx| ws.poll_readable(cx)).await.unwrap();
            let read = ws.read(|m| match m {
                Message::Text(t) => format!("text {t}"),
                Message::Binary(b) => format!("binary {}", b.len()),
            });
            match read {
                Ok(m) => got.extend(m),
                Err(end) => {
                    let _ = ws.flush().await;
                    return (got, end);
                }
            }
            ws.flush().await.unwrap();
        }
    }

    #[tokio::test]
    async fn frames_cut_anywhere_and_frames_behind_a_message_are_all_read() {
        let (ws, mut client) = pair(1 << 20).await;
        let server = tokio::spawn(serve(ws));
        let mut bytes = client_frame(false, OP_TEXT, b"hel");
        bytes.extend(client_frame(true, OP_CONTINUATION, b"lo"));
        bytes.extend(client_frame(true, OP_PING, b"p"));
        bytes.extend(client_frame(true, OP_TEXT, b"a"));
        bytes.extend(client_frame(true, OP_BINARY, &[0u8; 70_000]));
        bytes.extend(client_frame(true, OP_TEXT, b"b"));
        bytes.extend(client_frame(true, OP_CLOSE, &1000u16.to_be_bytes()));
        // Cut into pieces of 1 to 7 bytes with pauses, then the rest (a large frame) at once.
        let (small, rest) = bytes.split_at(40);
        for piece in small.chunks(3) {
            client.write_all(piece).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        client.write_all(rest).await.unwrap();
        let (got, end) = server.await.unwrap();
        assert_eq!(got, ["text hello", "text a", "binary 70000", "text b"]);
        assert!(matches!(end, ReadEnd::Closed), "{end:?}");
        // The pong, then the close echoed with the peer's code.
        let mut answer = Vec::new();
        client.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, [&[0x8A, 1, b'p'][..], &[0x88, 2, 0x03, 0xE8]].concat());
    }

    #[tokio::test]
    async fn a_bad_frame_ends_reading_with_its_code_and_no_buffer_is_kept_while_idle() {
        let (mut ws, mut client) = pair(1024).await;
        client.write_all(&client_frame(true, OP_TEXT, b"{}")[..3]).await.unwrap();
        std::future::poll_fn(|cx| ws.poll_readable(cx)).await.unwrap();
        assert!(ws.read(|_| ()).unwrap().is_none());
        assert!(ws.held.is_some(), "an incomplete frame is kept");
        client.write_all(&client_frame(true, OP_TEXT, b"{}")[3..]).await.unwrap();
        std::future::poll_fn(|cx| ws.poll_readable(cx)).await.unwrap();
        assert_eq!(ws.read(|m| matches!(m, Message::Text("{}"))).unwrap(), Some(true));
        assert!(ws.held.is_none() && ws.out.is_none(), "nothing kept once the frame is read");
        client.write_all(&client_frame(true, OP_TEXT, &[b'a'; 2000])[..8]).await.unwrap();
        let end = loop {
            std::future::poll_fn(|cx| ws.poll_readable(cx)).await.unwrap();
            if let Err(end) = ws.read(|_| ()) {
                break end;
            }
        };
        assert!(matches!(end, ReadEnd::Fail(Fail { code: frame::TOO_BIG, .. })), "{end:?}");
    }

    #[test]
    fn accept_key_is_the_rfc_example() {
        let mut h = HeaderMap::new();
        h.insert(header::CONNECTION, "keep-alive, Upgrade".parse().unwrap());
        h.insert(header::UPGRADE, "websocket".parse().unwrap());
        h.insert(header::SEC_WEBSOCKET_VERSION, "13".parse().unwrap());
        h.insert(header::SEC_WEBSOCKET_KEY, "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap());
        assert_eq!(accept_key(&h).unwrap(), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        h.insert(header::SEC_WEBSOCKET_VERSION, "8".parse().unwrap());
        assert_eq!(accept_key(&h).unwrap_err().0, StatusCode::BAD_REQUEST);
    }
}
