//! A client of whichever server a run measures: herald's (`client`) or a
//! peer's (`pclient`), behind one type, with the few things every scenario
//! asks of it: open (connect, and `hello` for herald), enter a chat, join as a
//! member, publish, read the next message, drain, close.

use std::net::{Ipv4Addr, SocketAddr};

use herald_protocol::EventType;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;
use tokio::sync::watch;

use crate::client::{Client, ClientError, Failure, Held};
use crate::pclient::PeerClient;
use crate::peer::Peer;
use crate::server::Server;
use crate::target::Target;
use crate::token::Signer;

/// What a client needs to reach a run's server: cheap to clone into each connecting task.
#[derive(Clone)]
pub struct Dial {
    pub peer: Peer,
    pub addr: SocketAddr,
    /// herald: signs each user's token; a peer takes none.
    pub signer: Option<Signer>,
}

impl Dial {
    /// How to reach `target`, herald's clients being users of `workspace`.
    pub fn to(target: &Target, workspace: &str) -> Dial {
        Dial { peer: target.peer(), addr: target.addr(), signer: target.signer(workspace) }
    }
}

/// A connected client (herald: after `hello`).
pub enum Conn {
    Herald(Client),
    Peer(PeerClient),
}

/// What a reader got next.
pub enum Received<T> {
    /// A published message (herald: a `message` event, with its seq).
    Msg { seq: Option<u64>, body: T },
    /// herald: another event of the chat (a join, say).
    Event { seq: u64 },
    /// herald: `notify` (pushes skipped events up to `seq`).
    Notify { seq: Option<u64> },
    /// Anything else, already handled.
    Other,
}

/// A herald push, as much as a reader needs.
#[derive(Deserialize)]
struct HeraldPush<'a> {
    ev: Option<&'a str>,
    seq: Option<u64>,
    #[serde(rename = "type")]
    kind: Option<EventType>,
    /// Parsed only for a message: other events' bodies have other shapes.
    #[serde(borrow)]
    body: Option<&'a RawValue>,
}

impl Conn {
    /// Connects to the server `dial` names from `source`; for herald, says `hello` as `user`.
    pub async fn open(dial: &Dial, user: &str, source: Ipv4Addr) -> Result<Conn, Failure> {
        match &dial.signer {
            Some(signer) => {
                let token = signer.token(user).map_err(Failure::signing)?;
                let path = Server::ws_path(signer.workspace());
                let mut c = Client::connect(dial.addr, &path, source).await?;
                c.hello(&token).await?;
                Ok(Conn::Herald(c))
            }
            None => Ok(Conn::Peer(PeerClient::connect(dial.peer, dial.addr, source).await?)),
        }
    }

    /// Enters `room` to receive what is published there: herald `join` + `watch`, a peer's join.
    pub async fn enter(&mut self, room: &str) -> Result<(), Failure> {
        match self {
            Conn::Herald(c) => {
                c.join(room).await?;
                c.watch(room).await.map(|_| ())
            }
            Conn::Peer(c) => c.join(room).await,
        }
    }

    /// Joins `room` as member `user` (herald: a durable `join`; see
    /// [`PeerClient::join_as`] for the peers); the member count the answer gives.
    pub async fn join_as(&mut self, room: &str, user: &str) -> Result<Option<u64>, Failure> {
        match self {
            Conn::Herald(c) => c.join(room).await.map(|ok| Some(ok.members)),
            Conn::Peer(c) => c.join_as(room, Some(user)).await,
        }
    }

    /// Publishes `payload` (JSON) to `room`: herald `send` (durable, acked), a peer's publish.
    pub async fn publish(&mut self, room: &str, payload: String) -> Result<(), Failure> {
        match self {
            Conn::Herald(c) => {
                let body = RawValue::from_string(payload).map_err(|e| Failure {
                    stage: crate::client::Stage::Send,
                    error: ClientError::BadFrame(format!("payload: {e}")),
                })?;
                c.send(room, &body).await.map(|_| ())
            }
            Conn::Peer(c) => c.publish(room, &payload).await,
        }
    }

    /// The next thing read, a published message's body parsed as `T`.
    pub async fn next_received<T: DeserializeOwned>(&mut self) -> Result<Received<T>, ClientError> {
        match self {
            Conn::Herald(c) => {
                let t = c.next_text().await?;
                let bad = |e: serde_json::Error| ClientError::BadFrame(e.to_string());
                let push: HeraldPush = serde_json::from_str(&t).map_err(bad)?;
                Ok(match (push.ev, push.seq) {
                    (Some("notify"), seq) => Received::Notify { seq },
                    (Some("event"), seq) if push.kind == Some(EventType::Message) => match push.body {
                        Some(body) => Received::Msg { seq, body: serde_json::from_str(body.get()).map_err(bad)? },
                        None => Received::Other,
                    },
                    (Some("event"), Some(seq)) => Received::Event { seq },
                    _ => Received::Other,
                })
            }
            Conn::Peer(c) => match c.next_push().await? {
                crate::pclient::Push::Msg(m) => {
                    let body = serde_json::from_slice(&m).map_err(|e| ClientError::BadFrame(e.to_string()))?;
                    Ok(Received::Msg { seq: None, body })
                }
                crate::pclient::Push::Other => Ok(Received::Other),
            },
        }
    }

    /// Reads and drops pushes (answering pings) until `stop` or the server ends the connection.
    pub async fn drain_until(&mut self, stop: &mut watch::Receiver<bool>) -> Held {
        match self {
            Conn::Herald(c) => c.drain_until(stop).await,
            Conn::Peer(c) => c.drain_until(stop).await,
        }
    }

    /// herald: the message events of `chat` after seq `after`, up to `upto`,
    /// fetched page by page, with each one's seq and body parsed as `T` (other
    /// events are passed over). A peer has nothing to fetch.
    pub async fn fetch_messages<T: DeserializeOwned>(
        &mut self,
        chat: &str,
        mut after: u64,
        upto: u64,
    ) -> Result<Vec<(u64, T)>, Failure> {
        let Conn::Herald(c) = self else { return Ok(Vec::new()) };
        let mut out = Vec::new();
        while after < upto {
            let page = c.fetch(chat, after, herald_protocol::limits::FETCH_MAX).await?;
            for e in page.events.iter().filter(|e| e.seq <= upto) {
                if e.kind == EventType::Message
                    && let Ok(body) = serde_json::from_str(e.body.get())
                {
                    out.push((e.seq, body));
                }
            }
            match page.events.last() {
                Some(e) if page.more || e.seq < upto.min(page.seq) => after = e.seq,
                _ => break,
            }
        }
        Ok(out)
    }

    pub async fn close(self) {
        match self {
            Conn::Herald(c) => c.close().await,
            Conn::Peer(c) => c.close().await,
        }
    }
}
