//! A connection of a node without a socket, for fuzzing a connection's
//! frame handling: frames go in as the reader would hand them over, and what
//! the connection queued for its client comes out ([`FrameConn`]; the whole
//! node behind it is built by `harness.rs`). Everything behind the
//! connection is the real thing; only the WebSocket framing is left out:
//! [`ws_read`] and [`ws_decode`] drive that, for the `websocket` fuzz target
//! (Autobahn's cases cover it too).

use std::sync::Arc;

use super::Gateway;
use super::conn::Conn;
use super::ws::frame::{Decoder, Event};
use super::ws::{Message, ReadEnd, Socket};

/// One connection of `gateway`, fed frames by hand.
pub struct FrameConn {
    conn: Conn,
}

impl FrameConn {
    /// A connection of `gateway` that has taken its place as an upgrade would.
    pub fn open(gateway: Arc<Gateway>) -> anyhow::Result<FrameConn> {
        gateway.take_place().map_err(|(m, _)| anyhow::anyhow!(m))?.taken();
        Ok(FrameConn { conn: Conn::open(gateway, None) })
    }

    /// Feeds one text frame as the connection's reader would, and waits
    /// until the request it started (if any) has answered.
    pub async fn text(&mut self, frame: &str) {
        self.conn.on_text(frame);
        self.settle().await;
    }

    /// Feeds one binary frame.
    pub fn binary(&mut self) {
        self.conn.on_binary();
    }

    /// The frames queued for the client since the last call, and the close
    /// code requested so far, if any.
    pub fn take(&mut self) -> (Vec<String>, Option<u16>) {
        let mut frames = Vec::new();
        let close = self.conn.outbox().drain(usize::MAX, &mut frames);
        (frames.iter().map(|f| f.as_str().to_owned()).collect(), close.map(|(code, _)| code.0))
    }

    /// Ends the connection as a socket close would (its watches end).
    pub async fn end(mut self) {
        self.settle().await;
        self.conn.end();
    }

    async fn settle(&mut self) {
        if let Some(task) = self.conn.inflight() {
            let _ = task.await;
            self.conn.request_done();
        }
    }
}

/// What a server made of a client's bytes: the messages handed over, in
/// order (`text ...`, `binary [..]`), and how reading ended: `closed`, `gone`
/// or `fail CODE`.
pub type WsTranscript = (Vec<String>, String);

/// Writes `chunks` from a loopback client, one write each with a pause
/// between, to a server [`Socket`] reading as a connection does (messages up
/// to `limit` bytes), then closes the client; the server's transcript.
pub async fn ws_read(chunks: &[&[u8]], limit: usize) -> std::io::Result<WsTranscript> {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mut client = tokio::net::TcpStream::connect(listener.local_addr()?).await?;
    let (server, _) = listener.accept().await?;
    let mut ws = Socket::new(server, bytes::Bytes::new(), limit);
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        loop {
            if std::future::poll_fn(|cx| ws.poll_readable(cx)).await.is_err() {
                return (got, "gone".to_string());
            }
            match ws.read(|m| message(&m)) {
                Ok(m) => got.extend(m),
                Err(end) => return (got, ending(&end)),
            }
            // Answer pings, so the client's socket is never full of pongs.
            let _ = ws.flush().await;
        }
    });
    for chunk in chunks {
        if client.write_all(chunk).await.is_err() {
            break;
        }
        tokio::task::yield_now().await;
    }
    let _ = client.shutdown().await;
    // Drain what the server sends back, so its writes never block.
    let drain = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut sink = Vec::new();
        let _ = client.read_to_end(&mut sink).await;
    });
    let transcript = reader.await.map_err(std::io::Error::other)?;
    let _ = drain.await;
    Ok(transcript)
}

/// The same bytes decoded whole by the frame decoder alone: what
/// [`ws_read`] must report however the bytes were cut.
pub fn ws_decode(bytes: &[u8], limit: usize) -> WsTranscript {
    let mut bytes = bytes.to_vec();
    let mut decoder = Decoder::default();
    let limit = u32::try_from(limit).unwrap_or(u32::MAX);
    let mut got = Vec::new();
    let mut at = 0;
    loop {
        match decoder.decode(&mut bytes[at..], limit) {
            Ok(None) => return (got, "gone".to_string()),
            Err(fail) => return (got, format!("fail {}", fail.code)),
            Ok(Some((n, event))) => {
                at += n;
                match event {
                    Event::Text(t) => got.push(message(&Message::Text(t))),
                    Event::Binary(b) => got.push(message(&Message::Binary(b))),
                    Event::Close(_) => return (got, "closed".to_string()),
                    Event::Ping(_) | Event::Pong | Event::Fragment => {}
                }
            }
        }
    }
}

fn message(m: &Message<'_>) -> String {
    match m {
        Message::Text(t) => format!("text {t}"),
        Message::Binary(b) => format!("binary {b:?}"),
    }
}

fn ending(end: &ReadEnd) -> String {
    match end {
        ReadEnd::Gone => "gone".to_string(),
        ReadEnd::Closed => "closed".to_string(),
        ReadEnd::Fail(f) => format!("fail {}", f.code),
    }
}
