//! Clients of the peers, spoken from Rust with the same lean WebSocket as
//! herald's client (hand-made upgrade, 1 KiB read buffer, no write buffer), so
//! that the client side costs the same whichever server is measured:
//!
//! - Socket.IO v4: Engine.IO v4 over WebSocket (`/socket.io/?EIO=4&transport=websocket`):
//!   the server's open packet `0{...}`, our `40` connect, its `40{"sid"}`; events
//!   are `42["name",...]`, with an ack id `42N[...]` answered by `43N[...]`; the
//!   server pings (`2`), the client answers `3`. See `bench/peers/socketio/server.js`
//!   for the server's `join` and `pub` events.
//! - NATS over WebSocket: the text protocol in binary frames; `INFO`, then our
//!   `CONNECT`, `SUB subject sid`, `PUB subject n`, `MSG subject sid n`, `PING`/`PONG`.
//!   A frame may hold several protocol lines or part of one: a stream parser.
//! - Sockudo: the Pusher protocol (`/app/KEY?protocol=7`): `pusher:connection_established`
//!   with the socket id, `pusher:subscribe` answered by `pusher_internal:subscription_succeeded`,
//!   `pusher:ping` → `pusher:pong`. Publishing is a client event (`client-msg`) on a private
//!   channel, whose subscription carries the HMAC-SHA256 auth the app's secret gives.

use std::net::{Ipv4Addr, SocketAddr};

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::client::{ClientError, Failure, Held, Stage};
use crate::peer::Peer;

/// Something a peer pushed that a scenario cares about.
pub enum Push {
    /// A published message's payload (the JSON the publisher sent).
    Msg(Vec<u8>),
    /// Anything else (replies, protocol chatter), already handled.
    Other,
}

/// A connected client of a peer.
pub struct PeerClient {
    ws: WebSocketStream<TcpStream>,
    peer: Peer,
    /// NATS: bytes received and not parsed yet.
    buf: Vec<u8>,
    next_ack: u64,
    next_sid: u64,
    /// Sockudo: the socket id the server gave, for private channel auth.
    socket_id: String,
}

/// The app `bench/peers/sockudo/start.sh` configures.
pub const SOCKUDO_KEY: &str = "bench-key";
const SOCKUDO_SECRET: &str = "bench-secret";

/// A Pusher frame, as much as the bench reads.
#[derive(serde::Deserialize)]
struct PusherFrame {
    event: String,
    channel: Option<String>,
    data: Option<Box<serde_json::value::RawValue>>,
}

/// A Pusher frame's `data`: a JSON string holding JSON, or JSON itself.
fn pusher_data(raw: &serde_json::value::RawValue) -> Vec<u8> {
    let t = raw.get();
    if t.starts_with('"') {
        serde_json::from_str::<String>(t).map(String::into_bytes).unwrap_or_default()
    } else {
        t.as_bytes().to_vec()
    }
}

/// Pusher channel auth: `KEY:hex(HMAC-SHA256(secret, "socket_id:channel"))` for a private
/// channel, with `:channel_data` appended to the signed string for a presence channel.
fn pusher_auth(socket_id: &str, channel: &str, channel_data: Option<&str>) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(SOCKUDO_SECRET.as_bytes()).expect("any key length");
    match channel_data {
        Some(d) => mac.update(format!("{socket_id}:{channel}:{d}").as_bytes()),
        None => mac.update(format!("{socket_id}:{channel}").as_bytes()),
    }
    let sig: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("{SOCKUDO_KEY}:{sig}")
}

fn at(stage: Stage) -> impl FnOnce(ClientError) -> Failure {
    move |error| Failure { stage, error }
}

fn bad(s: impl Into<String>) -> ClientError {
    ClientError::BadFrame(s.into())
}

impl PeerClient {
    /// Connects to `peer` at `server` from `source` and completes its protocol's handshake.
    pub async fn connect(peer: Peer, server: SocketAddr, source: Ipv4Addr) -> Result<PeerClient, Failure> {
        let sockudo_path = format!("/app/{SOCKUDO_KEY}?protocol=7&client=herald-bench&version=1.0&flash=false");
        let path = match peer {
            Peer::Socketio => "/socket.io/?EIO=4&transport=websocket",
            Peer::Nats => "/",
            Peer::Sockudo => sockudo_path.as_str(),
            Peer::Herald => return Err(at(Stage::Connect)(bad("herald is spoken by client.rs"))),
        };
        let ws = crate::client::open_ws(server, path, source).await?;
        let mut c = PeerClient { ws, peer, buf: Vec::new(), next_ack: 1, next_sid: 1, socket_id: String::new() };
        c.open().await.map_err(at(Stage::Hello))?;
        Ok(c)
    }

    async fn open(&mut self) -> Result<(), ClientError> {
        match self.peer {
            Peer::Socketio => {
                let open = self.next_text().await?;
                if !open.starts_with('0') {
                    return Err(bad(format!("expected an Engine.IO open packet, got {open:.40}")));
                }
                self.send_text("40".into()).await?;
                loop {
                    let t = self.next_text().await?;
                    if t.starts_with("40") {
                        return Ok(());
                    }
                    if t.starts_with("44") {
                        return Err(bad(format!("connect refused: {t:.80}")));
                    }
                }
            }
            Peer::Nats => {
                // INFO first; then CONNECT, and a PING whose PONG says the server took it.
                self.send_bin(
                    b"CONNECT {\"verbose\":false,\"pedantic\":false,\"protocol\":1,\"echo\":false}\r\nPING\r\n"
                        .to_vec(),
                )
                .await?;
                self.until_pong().await
            }
            Peer::Sockudo => loop {
                let f = self.next_pusher().await?;
                match f.event.as_str() {
                    "pusher:connection_established" => {
                        let data = f.data.as_deref().map(pusher_data).unwrap_or_default();
                        let v: serde_json::Value = serde_json::from_slice(&data).map_err(|e| bad(e.to_string()))?;
                        self.socket_id = v["socket_id"].as_str().unwrap_or_default().to_string();
                        return Ok(());
                    }
                    "pusher:error" => {
                        return Err(bad(format!("pusher:error {:?}", f.data.map(|d| d.get().to_string()))));
                    }
                    _ => {}
                }
            },
            Peer::Herald => unreachable!(),
        }
    }

    /// Sockudo: the next Pusher frame, answering `pusher:ping`.
    async fn next_pusher(&mut self) -> Result<PusherFrame, ClientError> {
        loop {
            let t = self.next_text().await?;
            let f: PusherFrame = serde_json::from_str(&t).map_err(|e| bad(format!("pusher frame: {e}")))?;
            if f.event == "pusher:ping" {
                self.send_text(r#"{"event":"pusher:pong","data":{}}"#.into()).await?;
                continue;
            }
            return Ok(f);
        }
    }

    /// Joins `room` (Socket.IO room, NATS subject) and waits until the server confirms it.
    pub async fn join(&mut self, room: &str) -> Result<(), Failure> {
        self.join_as(room, None).await.map(|_| ())
    }

    /// Joins `room` as member `user` where the peer has members: Socket.IO's `join`
    /// event with a user (the server counts it in the room's member set), Sockudo's
    /// presence channel (`presence-...`, user in the signed channel data). Returns the
    /// member count the server's answer gives, if it gives one.
    pub async fn join_as(&mut self, room: &str, user: Option<&str>) -> Result<Option<u64>, Failure> {
        let r = async {
            match self.peer {
                Peer::Socketio => {
                    let id = self.next_ack;
                    self.next_ack += 1;
                    let frame = match user {
                        Some(u) => format!("42{id}[\"join\",{},{}]", json_str(room), json_str(u)),
                        None => format!("42{id}[\"join\",{}]", json_str(room)),
                    };
                    self.send_text(frame).await?;
                    let want = format!("43{id}");
                    loop {
                        let t = self.next_text().await?;
                        if let Some(rest) = t.strip_prefix(&want) {
                            // 43N[count] for a member join, 43N[true] otherwise.
                            return Ok(rest.trim_matches(|c| c == '[' || c == ']').parse().ok());
                        }
                    }
                }
                Peer::Nats => {
                    let sid = self.next_sid;
                    self.next_sid += 1;
                    self.send_bin(format!("SUB {room} {sid}\r\nPING\r\n").into_bytes()).await?;
                    self.until_pong().await.map(|_| None)
                }
                Peer::Sockudo => {
                    let data = if room.starts_with("presence-") {
                        let u = user.ok_or_else(|| bad("a presence channel needs a user"))?;
                        let channel_data = serde_json::json!({"user_id": u}).to_string();
                        let auth = pusher_auth(&self.socket_id, room, Some(&channel_data));
                        serde_json::json!({"channel": room, "auth": auth, "channel_data": channel_data})
                    } else if room.starts_with("private-") {
                        serde_json::json!({"channel": room, "auth": pusher_auth(&self.socket_id, room, None)})
                    } else {
                        serde_json::json!({"channel": room})
                    };
                    self.send_text(serde_json::json!({"event": "pusher:subscribe", "data": data}).to_string()).await?;
                    loop {
                        let f = self.next_pusher().await?;
                        match f.event.as_str() {
                            "pusher_internal:subscription_succeeded" if f.channel.as_deref() == Some(room) => {
                                return Ok(f.data.as_deref().and_then(presence_count));
                            }
                            "pusher:error" | "pusher:subscription_error" => {
                                return Err(bad(format!("{}: {:?}", f.event, f.data.map(|d| d.get().to_string()))));
                            }
                            _ => {}
                        }
                    }
                }
                Peer::Herald => unreachable!(),
            }
        };
        r.await.map_err(at(Stage::Join))
    }

    /// Publishes `payload` (JSON) to `room`. Socket.IO: waits for the server's ack
    /// (as herald's publisher waits for its send's); NATS has no ack: fire and forget.
    pub async fn publish(&mut self, room: &str, payload: &str) -> Result<(), Failure> {
        let r = async {
            match self.peer {
                Peer::Socketio => {
                    let id = self.next_ack;
                    self.next_ack += 1;
                    self.send_text(format!("42{id}[\"pub\",{},{payload}]", json_str(room))).await?;
                    let want = format!("43{id}");
                    loop {
                        let t = self.next_text().await?;
                        if t.starts_with(&want) {
                            return Ok(());
                        }
                    }
                }
                Peer::Nats => {
                    let frame = format!("PUB {room} {}\r\n{payload}\r\n", payload.len());
                    self.send_bin(frame.into_bytes()).await
                }
                // A client event: no ack in the Pusher protocol.
                Peer::Sockudo => {
                    self.send_text(format!(r#"{{"event":"client-msg","channel":{},"data":{payload}}}"#, json_str(room)))
                        .await
                }
                Peer::Herald => unreachable!(),
            }
        };
        r.await.map_err(at(Stage::Send))
    }

    /// The next push: a message, or `Other` after handling protocol chatter.
    pub async fn next_push(&mut self) -> Result<Push, ClientError> {
        match self.peer {
            Peer::Socketio => {
                let t = self.next_text().await?;
                // 42["msg",PAYLOAD]
                if let Some(rest) = t.strip_prefix("42[\"msg\",") {
                    return Ok(Push::Msg(rest.strip_suffix(']').unwrap_or(rest).as_bytes().to_vec()));
                }
                Ok(Push::Other)
            }
            Peer::Nats => loop {
                if let Some(p) = self.parse_nats().await? {
                    return Ok(p);
                }
                self.read_nats().await?;
            },
            Peer::Sockudo => {
                let f = self.next_pusher().await?;
                if f.event == "client-msg" {
                    return Ok(Push::Msg(f.data.as_deref().map(pusher_data).unwrap_or_default()));
                }
                if f.event == "pusher:error" {
                    return Err(bad(format!("pusher:error {:?}", f.data.map(|d| d.get().to_string()))));
                }
                Ok(Push::Other)
            }
            Peer::Herald => unreachable!(),
        }
    }

    /// Reads and drops what the server pushes (answering pings) until `stop` or the server ends it.
    pub async fn drain_until(&mut self, stop: &mut watch::Receiver<bool>) -> Held {
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => return Held::Stopped,
                p = self.next_push() => if p.is_err() { return Held::Dropped },
            }
        }
    }

    pub async fn close(mut self) {
        let _ = self.ws.close(None).await;
    }

    /// Socket.IO: the next text frame, answering Engine.IO pings (`2` → `3`). The cell's sessions
    /// select on it: a frame is never lost to a cancel (the stream keeps it), and a pong cut short
    /// stays in the sink and goes out with the next frame written.
    pub async fn next_text(&mut self) -> Result<String, ClientError> {
        loop {
            match self.ws.next().await {
                None => return Err(ClientError::Closed(None)),
                Some(Err(e)) => return Err(ClientError::WebSocket(e)),
                Some(Ok(Message::Text(t))) => {
                    if t.as_str() == "2" {
                        self.send_text("3".into()).await?;
                        continue;
                    }
                    if t.as_str() == "1" {
                        return Err(ClientError::Closed(None));
                    }
                    return Ok(t.as_str().to_string());
                }
                Some(Ok(Message::Close(c))) => return Err(ClientError::Closed(c)),
                Some(Ok(_)) => {}
            }
        }
    }

    /// One text frame (Socket.IO: an Engine.IO packet, such as `42N["event",...]`).
    pub async fn send_text(&mut self, t: String) -> Result<(), ClientError> {
        self.ws.send(Message::text(t)).await.map_err(ClientError::WebSocket)
    }

    async fn send_bin(&mut self, b: Vec<u8>) -> Result<(), ClientError> {
        self.ws.send(Message::binary(b)).await.map_err(ClientError::WebSocket)
    }

    /// NATS: reads one more frame into the buffer.
    async fn read_nats(&mut self) -> Result<(), ClientError> {
        loop {
            match self.ws.next().await {
                None => return Err(ClientError::Closed(None)),
                Some(Err(e)) => return Err(ClientError::WebSocket(e)),
                Some(Ok(Message::Binary(b))) => {
                    self.buf.extend_from_slice(&b);
                    return Ok(());
                }
                Some(Ok(Message::Text(t))) => {
                    self.buf.extend_from_slice(t.as_bytes());
                    return Ok(());
                }
                Some(Ok(Message::Close(c))) => return Err(ClientError::Closed(c)),
                Some(Ok(_)) => {}
            }
        }
    }

    /// NATS: parses one protocol item off the buffer, if a whole one is there.
    async fn parse_nats(&mut self) -> Result<Option<Push>, ClientError> {
        let Some(eol) = self.buf.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        let line = std::str::from_utf8(&self.buf[..eol]).map_err(|_| bad("NATS line is not UTF-8"))?.to_string();
        let op = line.split(' ').next().unwrap_or_default().to_ascii_uppercase();
        match op.as_str() {
            "MSG" => {
                // MSG <subject> <sid> [reply-to] <#bytes>
                let n: usize = line
                    .rsplit(' ')
                    .next()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| bad(format!("bad MSG line {line:.80}")))?;
                let end = eol + 2 + n + 2;
                if self.buf.len() < end {
                    return Ok(None);
                }
                let payload = self.buf[eol + 2..eol + 2 + n].to_vec();
                self.buf.drain(..end);
                Ok(Some(Push::Msg(payload)))
            }
            "PING" => {
                self.buf.drain(..eol + 2);
                self.send_bin(b"PONG\r\n".to_vec()).await?;
                Ok(Some(Push::Other))
            }
            "-ERR" => Err(bad(format!("NATS: {line:.120}"))),
            _ => {
                // INFO, +OK, PONG: nothing to do here.
                self.buf.drain(..eol + 2);
                Ok(Some(Push::Other))
            }
        }
    }

    /// NATS: reads until a PONG (the answer to our PING).
    async fn until_pong(&mut self) -> Result<(), ClientError> {
        loop {
            if self.buf.starts_with(b"PONG\r\n") {
                self.buf.drain(..6);
                return Ok(());
            }
            match self.parse_nats().await? {
                Some(_) => {}
                None => self.read_nats().await?,
            }
        }
    }
}

/// The member count of a presence channel's `subscription_succeeded` data, a JSON
/// string holding `{"presence":{"ids":[...],"hash":{...},"count":N}}`. Read from
/// the end without parsing the member list (which holds every member).
fn presence_count(raw: &serde_json::value::RawValue) -> Option<u64> {
    let t = raw.get();
    // The key, quoted (escaped, inside the string): a member id may hold the word itself.
    let key = ["count\\\":", "count\":"].iter().find_map(|k| t.rfind(k).map(|at| at + k.len()));
    let at = key?;
    let digits: String = t[at..].chars().skip_while(|c| !c.is_ascii_digit()).take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// `s` as a JSON string literal.
fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pusher_auth_matches_pushers_example() {
        // Pusher's documented example: key 278d425bdf160c739803, secret 7ad3773142a6692b25b8,
        // socket 1234.1234, channel private-foobar.
        use hmac::{Hmac, Mac};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(b"7ad3773142a6692b25b8").unwrap();
        mac.update(b"1234.1234:private-foobar");
        let sig: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(sig, "58df8b0c36d6982b82c3ecf6b4662e34fe8c25bba48f5369f135bf843651c3a4");
        assert!(pusher_auth("1.2", "private-c", None).starts_with("bench-key:"));
        assert_ne!(pusher_auth("1.2", "presence-c", Some("{}")), pusher_auth("1.2", "presence-c", None));
    }

    #[test]
    fn presence_counts() {
        let raw = serde_json::value::RawValue::from_string(
            r#""{\"presence\":{\"count\":12,\"ids\":[\"count-1\"],\"hash\":{\"count-1\":null}}}""#.into(),
        )
        .unwrap();
        assert_eq!(presence_count(&raw), Some(12));
        let none = serde_json::value::RawValue::from_string(r#""{}""#.into()).unwrap();
        assert_eq!(presence_count(&none), None);
    }

    #[test]
    fn pusher_data_string_or_object() {
        let s = serde_json::value::RawValue::from_string(r#""{\"t\":1}""#.into()).unwrap();
        assert_eq!(pusher_data(&s), br#"{"t":1}"#);
        let o = serde_json::value::RawValue::from_string(r#"{"t":1}"#.into()).unwrap();
        assert_eq!(pusher_data(&o), br#"{"t":1}"#);
    }
}
