//! One herald WebSocket client, as lean as the server should be: a 1 KiB read
//! buffer (see `handshake` for why the upgrade is done by hand) and no write
//! buffer, so 15,000 of them fit in one worker. Knows the
//! wire contract's requests and replies (via `herald_protocol`), not any
//! scenario: scenarios decide what to send and what to measure.
//!
//! A client serves one request at a time, as the server does: `request`
//! sends, then reads until the reply with the same id, passing over pushes.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{SinkExt, StreamExt};
use herald_protocol::EventType;
use herald_protocol::frame::ErrorBody;
use herald_protocol::reply::{
    EmptyOk, FetchOk, HelloOk, InboxOk, JoinOk, MembersOk, PresenceOk, SeqOk, ThreadsOk, WatchOk,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::handshake;

/// Read buffer per client. Server frames the bench sees are small (replies,
/// event pushes of a short body); a larger frame still arrives, in more reads.
const READ_BUFFER: usize = 1024;
/// Largest frame accepted from the server: far above any push the bench causes.
const MAX_MESSAGE: usize = 1024 * 1024;
/// Clients per loopback source address. Each source address has its own
/// ephemeral port range (about 28,000 ports), so 5,000 leaves room for the
/// TIME_WAIT sockets of earlier runs.
pub const CONNS_PER_SOURCE: usize = 5_000;
/// 127.0.0.2: the first source address, leaving 127.0.0.1 to everything else.
const FIRST_SOURCE: u32 = 0x7f00_0002;
/// One request gets this long before its sender gives up.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The loopback source address of client `index` when a run's sources start
/// `offset` addresses after 127.0.0.2. Spreading clients over sources avoids
/// running out of ephemeral ports towards the single server address.
pub fn source_addr(offset: u32, index: usize) -> Ipv4Addr {
    Ipv4Addr::from(FIRST_SOURCE + offset + (index / CONNS_PER_SOURCE) as u32)
}

/// A block of source addresses (an offset for [`source_addr`]) that no recent
/// invocation used: it moves on by 64 addresses a second of wall time, and run
/// `run` of this invocation starts `run * per_run` after that (the sockets of
/// an earlier run may still sit in TIME_WAIT on the old ones).
pub fn fresh_sources(run: u32, per_run: u32) -> u32 {
    let s = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    ((s % 200_000) as u32 * 64) + run * per_run
}

/// A chat name no earlier run used, so each run starts at seq 0 even on a running server.
pub fn fresh_chat(prefix: &str, run: u32) -> String {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    format!("{prefix}-{ms}-{run}")
}

/// Source addresses that `count` clients use.
pub fn sources_for(count: usize) -> u32 {
    count.div_ceil(CONNS_PER_SOURCE) as u32
}

/// Where a request or a connection failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Connect,
    Handshake,
    Hello,
    Join,
    Watch,
    Send,
    Fetch,
    Unwatch,
    Presence,
    Inbox,
    /// v1.2: an `append` to a streamed message.
    Append,
    /// v1.2: a page of `threads`.
    Threads,
    /// v1.2: a page of `members`.
    Members,
    /// v1.2: a page of `search` results.
    Search,
    /// The step did not finish in its time.
    Timeout,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Connect => "connect",
            Stage::Handshake => "handshake",
            Stage::Hello => "hello",
            Stage::Join => "join",
            Stage::Watch => "watch",
            Stage::Send => "send",
            Stage::Fetch => "fetch",
            Stage::Unwatch => "unwatch",
            Stage::Presence => "presence",
            Stage::Inbox => "inbox",
            Stage::Append => "append",
            Stage::Threads => "threads",
            Stage::Members => "members",
            Stage::Search => "search",
            Stage::Timeout => "timeout",
        }
    }
}

/// What went wrong with a request.
#[derive(Debug)]
pub enum ClientError {
    Io(std::io::Error),
    WebSocket(tungstenite::Error),
    /// The server closed the connection, with its close frame if it sent one.
    Closed(Option<CloseFrame>),
    /// The server answered `err`.
    Refused(ErrorBody),
    /// A frame that is not what the contract says.
    BadFrame(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "io: {e}"),
            ClientError::WebSocket(e) => write!(f, "websocket: {e}"),
            ClientError::Closed(Some(c)) => write!(f, "closed by server: {} {}", c.code, c.reason),
            ClientError::Closed(None) => write!(f, "closed by server"),
            ClientError::Refused(e) => write!(f, "refused: {:?} {}", e.code, e.message),
            ClientError::BadFrame(s) => write!(f, "bad frame: {s}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// A failed step and why.
#[derive(Debug)]
pub struct Failure {
    pub stage: Stage,
    pub error: ClientError,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.stage.as_str(), self.error)
    }
}

impl std::error::Error for Failure {}

impl Failure {
    /// A request that got no answer in time.
    pub fn timeout(message: String) -> Failure {
        Failure {
            stage: Stage::Timeout,
            error: ClientError::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, message)),
        }
    }

    /// A token that could not be signed: the client never got to say hello.
    pub fn signing(e: impl fmt::Display) -> Failure {
        Failure { stage: Stage::Hello, error: ClientError::BadFrame(format!("signing a token: {e}")) }
    }
}

/// A request bounded by [`REQUEST_TIMEOUT`].
pub async fn bounded<T>(req: impl std::future::Future<Output = Result<T, Failure>>) -> Result<T, Failure> {
    tokio::time::timeout(REQUEST_TIMEOUT, req)
        .await
        .unwrap_or_else(|_| Err(Failure::timeout(format!("no answer in {REQUEST_TIMEOUT:?}"))))
}

fn at(stage: Stage) -> impl FnOnce(ClientError) -> Failure {
    move |error| Failure { stage, error }
}

/// A request frame: `{"id", "op", ...arguments}` with only the arguments the bench uses.
#[derive(Serialize, Default)]
struct Req<'a> {
    /// Set by [`Client::request`].
    id: i64,
    op: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    chat: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    after: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cursor: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    live: Option<bool>,
    /// v1.2: `send` of a streamed message.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    /// v1.2: the message an `append` extends.
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    /// v1.2: `search`'s query.
    #[serde(skip_serializing_if = "Option::is_none")]
    query: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    done: Option<bool>,
}

/// Any server frame: a reply (`id` with `ok` or `err`) or a push (`ev`).
#[derive(Debug, Deserialize)]
pub struct Incoming {
    pub id: Option<i64>,
    pub ok: Option<Box<RawValue>>,
    pub err: Option<ErrorBody>,
    pub ev: Option<String>,
    pub chat: Option<String>,
    pub seq: Option<u64>,
    #[serde(rename = "type")]
    pub kind: Option<EventType>,
    /// Of an `inbox` push.
    pub unread: Option<u64>,
    pub left: Option<bool>,
    /// Of an `append` push (v1.2): the streamed message, the text before this chunk (UTF-16
    /// code units) and the chunk.
    pub target: Option<u64>,
    pub at: Option<u64>,
    pub text: Option<String>,
}

/// How a held connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// The holder asked it to stop.
    Stopped,
    /// The server closed it or the socket broke first.
    Dropped,
}

/// A TCP connection to `server` from `source`, the port chosen by the kernel.
pub async fn connect_tcp(server: SocketAddr, source: Ipv4Addr) -> Result<TcpStream, Failure> {
    let connect = async {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::V4(SocketAddrV4::new(source, 0)))?;
        let stream = socket.connect(server).await?;
        // Requests are single small frames waiting for their reply: never hold them back.
        stream.set_nodelay(true)?;
        Ok(stream)
    };
    connect.await.map_err(ClientError::Io).map_err(at(Stage::Connect))
}

/// A client WebSocket to `server` from `source`, upgraded at `path`, with the
/// bench's small buffers: what every client of every server starts from.
pub async fn open_ws(server: SocketAddr, path: &str, source: Ipv4Addr) -> Result<WebSocketStream<TcpStream>, Failure> {
    let mut stream = connect_tcp(server, source).await?;
    let config = WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    let tail = handshake::upgrade(&mut stream, &server.to_string(), path).await.map_err(at(Stage::Handshake))?;
    Ok(WebSocketStream::from_partially_read(stream, tail, Role::Client, Some(config)).await)
}

/// Keeps a bare TCP connection open until `stop` turns true or the server closes it.
pub async fn hold_tcp(mut stream: TcpStream, mut stop: watch::Receiver<bool>) -> Held {
    use tokio::io::AsyncReadExt;
    let mut sink = [0u8; 64];
    loop {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => return Held::Stopped,
            n = stream.read(&mut sink) => if !matches!(n, Ok(n) if n > 0) { return Held::Dropped },
        }
    }
}

/// A connected herald client.
pub struct Client {
    ws: WebSocketStream<TcpStream>,
    next_id: i64,
}

impl Client {
    /// Connects to `server` from `source` (any loopback address, port chosen
    /// by the kernel) and upgrades at `path` (such as `/v1/ws?ws=bench`).
    pub async fn connect(server: SocketAddr, path: &str, source: Ipv4Addr) -> Result<Client, Failure> {
        Ok(Client { ws: open_ws(server, path, source).await?, next_id: 1 })
    }

    /// `hello` with `token`.
    pub async fn hello(&mut self, token: &str) -> Result<HelloOk, Failure> {
        self.request(Req { op: "hello", token: Some(token), ..Req::default() }).await.map_err(at(Stage::Hello))
    }

    /// `join` `chat`.
    pub async fn join(&mut self, chat: &str) -> Result<JoinOk, Failure> {
        self.request(Req { op: "join", chat: Some(chat), ..Req::default() }).await.map_err(at(Stage::Join))
    }

    /// `watch` `chat` from now on.
    pub async fn watch(&mut self, chat: &str) -> Result<WatchOk, Failure> {
        self.request(Req { op: "watch", chat: Some(chat), ..Req::default() }).await.map_err(at(Stage::Watch))
    }

    /// `unwatch` `chat`.
    pub async fn unwatch(&mut self, chat: &str) -> Result<(), Failure> {
        self.request::<EmptyOk>(Req { op: "unwatch", chat: Some(chat), ..Req::default() })
            .await
            .map(drop)
            .map_err(at(Stage::Unwatch))
    }

    /// `presence` of `chat`; a watch of it gets presence pushes from then on.
    pub async fn presence(&mut self, chat: &str) -> Result<PresenceOk, Failure> {
        self.request(Req { op: "presence", chat: Some(chat), ..Req::default() }).await.map_err(at(Stage::Presence))
    }

    /// `send` `body` to `chat`; the reply means the message is durable.
    pub async fn send(&mut self, chat: &str, body: &RawValue) -> Result<SeqOk, Failure> {
        self.request(Req { op: "send", chat: Some(chat), body: Some(body), ..Req::default() })
            .await
            .map_err(at(Stage::Send))
    }

    /// `fetch` up to `limit` events of `chat` after seq `after`.
    pub async fn fetch(&mut self, chat: &str, after: u64, limit: u32) -> Result<FetchOk, Failure> {
        self.request(Req { op: "fetch", chat: Some(chat), after: Some(after), limit: Some(limit), ..Req::default() })
            .await
            .map_err(at(Stage::Fetch))
    }

    /// A page of this user's `inbox`, after `cursor`.
    pub async fn inbox(&mut self, limit: u32, cursor: Option<&str>) -> Result<InboxOk, Failure> {
        self.request(Req { op: "inbox", limit: Some(limit), cursor, ..Req::default() }).await.map_err(at(Stage::Inbox))
    }

    /// The first page of this user's `inbox`, live: `inbox` pushes follow.
    pub async fn inbox_live(&mut self, limit: u32) -> Result<InboxOk, Failure> {
        self.request(Req { op: "inbox", limit: Some(limit), live: Some(true), ..Req::default() })
            .await
            .map_err(at(Stage::Inbox))
    }

    /// `send` of a streamed message (v1.2) with `body` (an object whose `text` is a string).
    pub async fn send_stream(&mut self, chat: &str, body: &RawValue) -> Result<SeqOk, Failure> {
        self.request(Req { op: "send", chat: Some(chat), body: Some(body), stream: Some(true), ..Req::default() })
            .await
            .map_err(at(Stage::Send))
    }

    /// `append` `text` to streamed message `target` of `chat` (v1.2); `done` ends the stream.
    /// The reply means the text is durable.
    pub async fn append(&mut self, chat: &str, target: u64, text: &str, done: bool) -> Result<(), Failure> {
        let req = Req {
            op: "append",
            chat: Some(chat),
            target: Some(target),
            text: Some(text),
            done: done.then_some(true),
            ..Req::default()
        };
        self.request::<EmptyOk>(req).await.map(drop).map_err(at(Stage::Append))
    }

    /// A page of the threads this user follows, in all of their chats (v1.2), after `cursor`.
    pub async fn threads(&mut self, limit: u32, cursor: Option<&str>) -> Result<ThreadsOk, Failure> {
        self.request(Req { op: "threads", limit: Some(limit), cursor, ..Req::default() })
            .await
            .map_err(at(Stage::Threads))
    }

    /// A page of `chat`'s members (v1.2), after `cursor`.
    pub async fn members(&mut self, chat: &str, limit: u32, cursor: Option<&str>) -> Result<MembersOk, Failure> {
        self.request(Req { op: "members", chat: Some(chat), limit: Some(limit), cursor, ..Req::default() })
            .await
            .map_err(at(Stage::Members))
    }

    /// A page of `search` results for `query` in all of this user's chats (v1.2).
    pub async fn search(&mut self, query: &str, limit: u32) -> Result<SearchPage, Failure> {
        self.request(Req { op: "search", query: Some(query), limit: Some(limit), ..Req::default() })
            .await
            .map_err(at(Stage::Search))
    }

    /// Sends one request and reads until its reply; pushes read meanwhile are dropped.
    async fn request<T: DeserializeOwned>(&mut self, mut req: Req<'_>) -> Result<T, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        req.id = id;
        let op = req.op;
        let frame = serde_json::to_string(&req).expect("requests serialize");
        self.ws.send(Message::text(frame)).await.map_err(ClientError::WebSocket)?;
        loop {
            let f = self.next_frame().await?;
            if f.id != Some(id) {
                continue;
            }
            return match (f.ok, f.err) {
                (Some(ok), _) => {
                    serde_json::from_str(ok.get()).map_err(|e| ClientError::BadFrame(format!("{op} reply: {e}")))
                }
                (None, Some(err)) => Err(ClientError::Refused(err)),
                (None, None) => Err(ClientError::BadFrame(format!("{op} reply has neither ok nor err"))),
            };
        }
    }

    /// The next reply or push. Control frames are handled here: pings are
    /// answered by tungstenite on the next read or write.
    pub async fn next_frame(&mut self) -> Result<Incoming, ClientError> {
        loop {
            match self.ws.next().await {
                None => return Err(ClientError::Closed(None)),
                Some(Err(e)) => return Err(ClientError::WebSocket(e)),
                Some(Ok(Message::Text(t))) => {
                    return serde_json::from_str(t.as_str()).map_err(|e| ClientError::BadFrame(e.to_string()));
                }
                Some(Ok(Message::Close(c))) => return Err(ClientError::Closed(c)),
                Some(Ok(_)) => {}
            }
        }
    }

    /// Sends `text` as it is (a scenario that writes its requests itself).
    pub async fn send_text(&mut self, text: String) -> Result<(), ClientError> {
        self.ws.send(Message::text(text)).await.map_err(ClientError::WebSocket)
    }

    /// The next text frame as it came (a scenario that parses pushes itself).
    pub async fn next_text(&mut self) -> Result<String, ClientError> {
        loop {
            match self.ws.next().await {
                None => return Err(ClientError::Closed(None)),
                Some(Err(e)) => return Err(ClientError::WebSocket(e)),
                Some(Ok(Message::Text(t))) => return Ok(t.as_str().to_string()),
                Some(Ok(Message::Close(c))) => return Err(ClientError::Closed(c)),
                Some(Ok(_)) => {}
            }
        }
    }

    /// Reads and drops what the server pushes until `stop` turns true or the server ends it.
    pub async fn drain_until(&mut self, stop: &mut watch::Receiver<bool>) -> Held {
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return Held::Stopped,
                frame = self.next_frame() => match frame {
                    Ok(_) | Err(ClientError::BadFrame(_)) => {}
                    Err(_) => return Held::Dropped,
                },
            }
        }
    }

    /// Like [`Client::drain_until`], counting the pushes whose `ev` is `ev` into `seen`.
    pub async fn count_pushes_until(
        &mut self,
        stop: &mut watch::Receiver<bool>,
        ev: &str,
        seen: &std::sync::atomic::AtomicU64,
    ) -> Held {
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return Held::Stopped,
                frame = self.next_frame() => match frame {
                    Ok(f) => {
                        if f.ev.as_deref() == Some(ev) {
                            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    Err(ClientError::BadFrame(_)) => {}
                    Err(_) => return Held::Dropped,
                },
            }
        }
    }

    /// Sends a close frame and waits briefly for the server's; errors are ignored
    /// since the connection is being given up anyway.
    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_spread_and_offset() {
        assert_eq!(source_addr(0, 0), Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(source_addr(0, CONNS_PER_SOURCE - 1), Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(source_addr(0, CONNS_PER_SOURCE), Ipv4Addr::new(127, 0, 0, 3));
        assert_eq!(source_addr(3, 0), Ipv4Addr::new(127, 0, 0, 5));
        assert_eq!(source_addr(300, 0), Ipv4Addr::new(127, 0, 1, 46));
        assert_eq!(sources_for(15_000), 3);
        assert_eq!(sources_for(15_001), 4);
    }

    #[test]
    fn requests_and_frames() {
        let body = RawValue::from_string(r#"{"text":"hi"}"#.into()).unwrap();
        let r = Req { id: 4, op: "send", chat: Some("c1"), body: Some(&body), ..Req::default() };
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"id":4,"op":"send","chat":"c1","body":{"text":"hi"}}"#);
        let f = Req { id: 5, op: "fetch", chat: Some("c1"), after: Some(0), limit: Some(500), ..Req::default() };
        assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"id":5,"op":"fetch","chat":"c1","after":0,"limit":500}"#);
        let a = Req {
            id: 6,
            op: "append",
            chat: Some("c1"),
            target: Some(3),
            text: Some("hé"),
            done: Some(true),
            ..Req::default()
        };
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            r#"{"id":6,"op":"append","chat":"c1","target":3,"text":"hé","done":true}"#
        );
        let append: Incoming =
            serde_json::from_str(r#"{"ev":"append","chat":"c1","target":3,"text":"lo","at":7}"#).unwrap();
        assert_eq!((append.target, append.at, append.text.as_deref()), (Some(3), Some(7), Some("lo")));
        let push: Incoming =
            serde_json::from_str(r#"{"ev":"event","chat":"c1","seq":9,"type":"message","user":"u","ts":1,"body":{}}"#)
                .unwrap();
        assert_eq!((push.ev.as_deref(), push.seq, push.kind), (Some("event"), Some(9), Some(EventType::Message)));
        let err: Incoming =
            serde_json::from_str(r#"{"id":2,"err":{"code":"throttled","message":"m","retry_after_ms":5}}"#).unwrap();
        assert_eq!(err.err.unwrap().retry_after_ms, Some(5));
    }
}

/// A page of `search` results as the bench reads it (v1.2): each result's chat.
#[derive(Debug, serde::Deserialize)]
pub struct SearchPage {
    pub results: Vec<SearchResult>,
}

/// One `search` result: the chat of the message found.
#[derive(Debug, serde::Deserialize)]
pub struct SearchResult {
    pub chat: String,
}
