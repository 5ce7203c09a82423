//! One chaos client's connection: the shared test [`Client`] said hello
//! over, with one request in flight at a time, the server's `reconnect` push
//! kept aside for when the connection ends, and why it ended; and, where the
//! client asks for it ([`Conn::check_link`]), the SDK's own watch on the link:
//! a `ping` once nothing was heard for [`PING_AFTER`], and the connection
//! taken for dead when that ping is not answered within [`PING_WAIT`] (a
//! frozen node: its socket stays open and nothing comes). Also what every
//! chaos client does between connections: which node to try next, how long to
//! back off, and how it fingerprints an event to compare it with the log.
//!
//! Not here: what a watcher or a sender does over the connection
//! (`chaos_watcher.rs`, `chaos_sender.rs`).

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::time::{Duration, Instant};

use rand::RngExt;
use rand::rngs::StdRng;
use serde_json::{Value, json};

use super::{NODES, Run};
use crate::common::{Client, try_http};

/// A stable fingerprint of an event as stored: type, user, client_id, body.
pub fn ident(e: &Value) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    e["type"].to_string().hash(&mut h);
    e["user"].to_string().hash(&mut h);
    e["client_id"].to_string().hash(&mut h);
    e["body"].to_string().hash(&mut h);
    h.finish()
}

/// An event's or a push's seq.
pub fn seq_of(e: &Value) -> Option<u64> {
    e["seq"].as_u64()
}

/// Full jitter: a random wait below `min(cap, base * 2^attempt)`.
pub fn backoff(rng: &mut StdRng, attempt: u32) -> Duration {
    let ceiling = (50u64 << attempt.min(5)).min(1_000);
    Duration::from_millis(rng.random_range(10..=ceiling))
}

/// `retry_after_ms` of an error reply, with a little jitter of the client's own.
pub fn retry_after(rng: &mut StdRng, err: &Value) -> Duration {
    let ms = err["retry_after_ms"].as_u64().unwrap_or(100);
    Duration::from_millis(ms + rng.random_range(0..=50))
}

/// Why a connection ended.
#[derive(Debug)]
pub enum End {
    /// The server closed (code, reason); `after_ms` of a `reconnect` push before it, if any.
    Closed(u16, String, Option<u64>),
    /// No reply within the wait given.
    Timeout(Duration),
    /// The socket failed (a killed node, mostly).
    Broken(String),
    /// The run is over.
    Done,
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Closed(code, reason, Some(ms)) => write!(f, "closed {code} {reason:?} after reconnect in {ms} ms"),
            End::Closed(code, reason, None) => write!(f, "closed {code} {reason:?}"),
            End::Timeout(wait) => write!(f, "no reply in {} ms", wait.as_millis()),
            End::Broken(e) => write!(f, "broken: {e}"),
            End::Done => write!(f, "run over"),
        }
    }
}

/// One WebSocket: one request in flight at a time, pushes queued aside.
pub struct Conn {
    client: Client,
    /// The node it is connected to.
    pub node: usize,
    /// Pushes read and not taken yet, `reconnect` apart.
    pushes: VecDeque<Value>,
    /// `after_ms` of the server's `reconnect` push, once one came.
    reconnect_after: Option<u64>,
    /// Whether this connection watches its link ([`Conn::check_link`]).
    link_checked: bool,
    /// When a frame (a reply, a push, a WebSocket ping) last came.
    heard: Instant,
    /// A `ping` of the link check not answered yet: its id and when it went out.
    ping: Option<(i64, Instant)>,
}

/// Silence after which a link-checking client sends `ping`.
pub const PING_AFTER: Duration = Duration::from_secs(2);
/// How long that `ping` may go unanswered before the link counts as dead.
pub const PING_WAIT: Duration = Duration::from_secs(3);

impl Conn {
    /// Connects to `node` for workspace `ws` and says hello.
    pub async fn open(run: &Run, node: usize, ws: &str, token: &str) -> Result<Conn, String> {
        let url = format!("ws://{}/v1/ws?ws={ws}", run.cell.addrs[node]);
        let client = Client::try_connect(&url, Duration::from_secs(2)).await?;
        let mut c = Conn {
            client,
            node,
            pushes: VecDeque::new(),
            reconnect_after: None,
            link_checked: false,
            heard: Instant::now(),
            ping: None,
        };
        match c.request(json!({"op": "hello", "token": token}), Duration::from_secs(5)).await {
            Ok(r) if r.get("ok").is_some() => Ok(c),
            Ok(r) => Err(format!("hello refused: {r}")),
            Err(e) => Err(format!("hello: {e}")),
        }
    }

    /// From now on this connection checks its link as the SDK does: while it
    /// waits (for a reply or a push), a `ping` after [`PING_AFTER`] of silence,
    /// and [`End::Timeout`] when that ping gets no reply within [`PING_WAIT`].
    pub fn check_link(&mut self) {
        self.link_checked = true;
    }

    /// Sends `req` with a fresh id and waits at most `within` for its reply
    /// (less if the link check finds the link dead first).
    pub async fn request(&mut self, req: Value, within: Duration) -> Result<Value, End> {
        let id = self.client.try_send(req).await.map_err(|e| End::Broken(format!("send: {e}")))?;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let until = if self.link_checked { deadline.min(self.next_link_check()) } else { deadline };
            let reply = self.client.reply_before(id, until).await;
            self.sort_pushes();
            match reply {
                Ok(Some(r)) => {
                    self.heard = Instant::now();
                    return Ok(r);
                }
                Ok(None) if tokio::time::Instant::now() >= deadline => return Err(End::Timeout(within)),
                Ok(None) => {}
                Err(closed) => return Err(self.ended(closed)),
            }
            self.link().await?;
        }
    }

    /// The next push, waiting until `deadline`; `None` if none came.
    pub async fn push_until(&mut self, deadline: tokio::time::Instant) -> Result<Option<Value>, End> {
        loop {
            self.sort_pushes();
            if let Some(p) = self.pushes.pop_front() {
                return Ok(Some(p));
            }
            let until = if self.link_checked { deadline.min(self.next_link_check()) } else { deadline };
            match self.client.read_before(until).await {
                Ok(true) => self.heard = Instant::now(),
                Ok(false) if tokio::time::Instant::now() >= deadline => return Ok(None),
                Ok(false) => {}
                Err(closed) => {
                    self.sort_pushes();
                    return Err(self.ended(closed));
                }
            }
            if self.link_checked {
                self.link().await?;
            }
        }
    }

    /// When the link check has something to do next: the ping's deadline if
    /// one is out, otherwise when the silence will call for one.
    fn next_link_check(&self) -> tokio::time::Instant {
        let at = match self.ping {
            Some((_, sent)) => sent + PING_WAIT,
            None => self.heard + PING_AFTER,
        };
        // Wake a little more often than that, so that a reply is noticed soon.
        tokio::time::Instant::from(at).min(tokio::time::Instant::now() + Duration::from_millis(250))
    }

    /// The link check: takes the ping's reply if it came, sends a ping after
    /// [`PING_AFTER`] of silence, and ends the connection when a ping is
    /// [`PING_WAIT`] old unanswered.
    async fn link(&mut self) -> Result<(), End> {
        if let Some((id, sent)) = self.ping {
            // Whether its reply was read meanwhile (no wait: the deadline is now).
            match self.client.reply_before(id, tokio::time::Instant::now()).await {
                Ok(Some(_)) => {
                    self.ping = None;
                    self.heard = Instant::now();
                }
                Ok(None) if sent.elapsed() >= PING_WAIT => return Err(End::Timeout(PING_WAIT)),
                Ok(None) => {}
                Err(closed) => return Err(self.ended(closed)),
            }
            self.sort_pushes();
            return Ok(());
        }
        if self.heard.elapsed() >= PING_AFTER {
            let id =
                self.client.try_send(json!({"op": "ping"})).await.map_err(|e| End::Broken(format!("ping: {e}")))?;
            self.ping = Some((id, Instant::now()));
        }
        Ok(())
    }

    /// A push read already (while waiting for a reply), if any.
    pub fn queued_push(&mut self) -> Option<Value> {
        self.sort_pushes();
        self.pushes.pop_front()
    }

    /// Moves the client's pushes into this queue, keeping a `reconnect`'s `after_ms` aside.
    fn sort_pushes(&mut self) {
        let pushes = self.client.take_pushes();
        if !pushes.is_empty() {
            self.heard = Instant::now();
        }
        for p in pushes {
            if p["ev"] == "reconnect" {
                self.reconnect_after = p["after_ms"].as_u64();
            } else {
                self.pushes.push_back(p);
            }
        }
    }

    /// Why the connection ended, from the client's close: 1006 is a broken
    /// socket (no server sends it), anything else the server's close.
    fn ended(&self, (code, reason): (u16, String)) -> End {
        if code == 1006 { End::Broken(reason) } else { End::Closed(code, reason, self.reconnect_after) }
    }
}

/// Where a client goes next: half the time the node `/v1/gateway` (asked of a
/// random node) names, otherwise a random node, not `avoid` if it can help it.
pub async fn pick_node(run: &Run, rng: &mut StdRng, ws: &str, avoid: Option<usize>) -> usize {
    if rng.random_bool(0.5) {
        let via = rng.random_range(0..NODES);
        let path = format!("/v1/gateway?ws={ws}");
        if let Some((200, v)) = try_http(run.cell.addrs[via], "GET", &path, None, Duration::from_secs(1)).await
            && let Some(url) = v["url"].as_str()
            && let Some(i) = run.cell.addrs.iter().position(|a| url.contains(&a.to_string()))
            && Some(i) != avoid
        {
            return i;
        }
    }
    let mut i = rng.random_range(0..NODES);
    if Some(i) == avoid {
        i = (i + rng.random_range(1..NODES)) % NODES;
    }
    i
}
