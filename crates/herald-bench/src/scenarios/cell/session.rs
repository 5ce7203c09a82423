//! One user's connection in a cell's load worker, after `hello` and its
//! joins: a task that keeps reading (pushes, pings) while it serves the
//! worker's commands one request at a time, as the protocol wants. It opens
//! the user's chat (watch, presence, live inbox), sends a message (typing
//! first), reads and reacts; and it tallies what arrives: each message
//! event of the open chat once and in order, its send-to-delivery time (the
//! sender's clock is the same machine's) same node or cross node, and the
//! other pushes by kind. Which user does what when is `worker`'s.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::follow::{Body, FetchReply, Follow, now_us};
use super::tally::Tally;
use crate::client::{Client, REQUEST_TIMEOUT};

/// Request ids of a session start here, above those `Client` used for hello and the joins.
const FIRST_ID: i64 = 1 << 40;
/// The first page of the live inbox: its entries are not used, only the pushes after.
const INBOX_PAGE: u32 = 20;
/// Events per `fetch` of a gap.
const FETCH_LIMIT: u32 = 200;
/// A request refused with a `retry_after_ms` (a store shard busy, a throttle) is asked again,
/// as a client would, at most this many times.
const MAX_RETRIES: u32 = 5;
/// The wait before a retry when the refusal names none.
const DEFAULT_RETRY: Duration = Duration::from_millis(500);

/// What the worker asks of a session.
#[derive(Debug)]
pub enum Cmd {
    /// Watch the open chat, ask its presence, turn the inbox live; says when done.
    Open(oneshot::Sender<Opened>),
    /// `typing`, then `send` a message into the open chat.
    Message,
    /// `read` the open chat up to the last event seen.
    Read,
    /// `react` to the last event seen in the open chat.
    React,
}

/// How the opening went.
#[derive(Debug)]
pub struct Opened {
    /// The open chat is watched (its messages are owed to this session).
    pub watching: bool,
    /// Why a step of the opening failed, if one did.
    pub error: Option<String>,
}

/// Who a session is.
pub struct Who {
    /// The user's index (names its messages' `client_id`s).
    pub user: u32,
    /// The node it is connected to.
    pub node: u32,
    /// The open chat: its index and wire name.
    pub open: Option<(u32, String)>,
}

/// A request on the wire, waiting for its reply.
struct Pending {
    id: i64,
    op: Op,
    at: Instant,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Watch,
    Presence,
    Inbox,
    Typing,
    Send,
    Read,
    React,
    /// Fill a gap that pushes skipped.
    Fetch,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Watch => "watch",
            Op::Presence => "presence",
            Op::Inbox => "inbox",
            Op::Typing => "typing",
            Op::Send => "send",
            Op::Read => "read",
            Op::React => "react",
            Op::Fetch => "fetch",
        }
    }
}

/// A server frame as the session reads it: a reply or a push, with the
/// message body's send time and sender's node when it is one of the bench's.
#[derive(Deserialize)]
struct Frame {
    id: Option<i64>,
    ok: Option<Box<RawValue>>,
    err: Option<serde_json::Value>,
    ev: Option<String>,
    chat: Option<String>,
    seq: Option<u64>,
    #[serde(rename = "type")]
    kind: Option<String>,
    body: Option<Body>,
}

#[derive(Deserialize)]
struct ErrReply {
    code: Option<String>,
    retry_after_ms: Option<u64>,
}

/// A failed request: why, and when to ask again if it may be.
struct Refusal {
    error: String,
    retry_after: Option<Duration>,
}

#[derive(Deserialize)]
struct SeqReply {
    seq: Option<u64>,
}

/// Runs a session until its command channel closes or the server ends it.
pub async fn run(mut client: Client, who: Who, mut rx: mpsc::Receiver<Cmd>, tally: Arc<Mutex<Tally>>) {
    let mut s = Session {
        who,
        next_id: FIRST_ID,
        follow: Follow::default(),
        read_to: 0,
        sent: 0,
        send_t: None,
        queue: VecDeque::new(),
        opened: None,
        watching: false,
        retries: 0,
        hold_until: None,
    };
    let mut pending: Option<Pending> = None;
    loop {
        if s.hold_until.is_some_and(|h| Instant::now() >= h) {
            s.hold_until = None;
        }
        if pending.is_none()
            && s.hold_until.is_none()
            && let Some(op) = s.queue.pop_front()
        {
            match s.start(&mut client, op).await {
                Ok(Some(p)) => pending = Some(p),
                Ok(None) => s.finished(op, Ok(()), &tally),
                Err(e) => {
                    s.finished(op, Err(Refusal { error: e, retry_after: None }), &tally);
                    break;
                }
            }
            continue;
        }
        let deadline = pending.as_ref().map(|p| p.at + REQUEST_TIMEOUT).or(s.hold_until);
        tokio::select! {
            cmd = rx.recv(), if pending.is_none() => match cmd {
                None => return,
                Some(cmd) => s.take(cmd),
            },
            text = client.next_text() => match text {
                Ok(text) => {
                    if let Some(done) = s.frame(&text, pending.as_ref(), &tally) {
                        let p = pending.take().expect("a reply matches a pending request");
                        if done.is_ok() {
                            s.note_latency(&p, &tally);
                        }
                        s.finished(p.op, done, &tally);
                    }
                }
                Err(_) => break,
            },
            _ = sleep_until(deadline) => {
                if let Some(p) = pending.take() {
                    let error = format!("{}: no answer in {REQUEST_TIMEOUT:?}", p.op.name());
                    s.finished(p.op, Err(Refusal { error, retry_after: None }), &tally);
                }
            }
        }
    }
    tally.lock().expect("tally lock").dropped += 1;
    if let Some(tx) = s.opened.take() {
        let _ = tx.send(Opened { watching: s.watching, error: Some("the connection closed".into()) });
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

struct Session {
    who: Who,
    next_id: i64,
    /// The open chat as followed so far.
    follow: Follow,
    /// How far this user has read the open chat.
    read_to: u64,
    /// Messages sent (acked or given up): the next one's `client_id`.
    sent: u64,
    /// When the message being sent was first sent (a retry keeps it, and its `client_id`).
    send_t: Option<u64>,
    /// Requests still to make for the commands taken.
    queue: VecDeque<Op>,
    /// Told once the open chat is opened.
    opened: Option<oneshot::Sender<Opened>>,
    /// The watch of the open chat was acked.
    watching: bool,
    /// Retries of the request at the queue's head so far.
    retries: u32,
    /// No request is written before this (a refusal asked to wait).
    hold_until: Option<Instant>,
}

impl Session {
    fn take(&mut self, cmd: Cmd) {
        if self.who.open.is_none() {
            if let Cmd::Open(tx) = cmd {
                let _ = tx.send(Opened { watching: false, error: None });
            }
            return;
        }
        match cmd {
            Cmd::Open(tx) => {
                self.opened = Some(tx);
                self.queue.extend([Op::Watch, Op::Presence, Op::Inbox]);
            }
            Cmd::Message => self.queue.extend([Op::Typing, Op::Send]),
            Cmd::Read => self.queue.push_back(Op::Read),
            Cmd::React => self.queue.push_back(Op::React),
        }
    }

    /// Writes `op`'s request; `None` when there is nothing to ask (a read with nothing new).
    async fn start(&mut self, client: &mut Client, op: Op) -> Result<Option<Pending>, String> {
        let Some((_, chat)) = &self.who.open else { return Ok(None) };
        let id = self.next_id;
        let chat = serde_json::to_string(chat).map_err(|e| e.to_string())?;
        let text = match op {
            Op::Watch => format!(r#"{{"id":{id},"op":"watch","chat":{chat}}}"#),
            Op::Presence => format!(r#"{{"id":{id},"op":"presence","chat":{chat}}}"#),
            Op::Inbox => format!(r#"{{"id":{id},"op":"inbox","limit":{INBOX_PAGE},"live":true}}"#),
            Op::Typing => format!(r#"{{"id":{id},"op":"typing","chat":{chat}}}"#),
            Op::Send => {
                let t = *self.send_t.get_or_insert_with(now_us);
                let (node, user, n) = (self.who.node, self.who.user, self.sent);
                format!(
                    r#"{{"id":{id},"op":"send","chat":{chat},"client_id":"u{user}-{n}","body":{{"text":"cell message","t":{t},"n":{node}}}}}"#
                )
            }
            Op::Read if self.follow.last > self.read_to => {
                format!(r#"{{"id":{id},"op":"read","chat":{chat},"seq":{}}}"#, self.follow.last)
            }
            Op::Read => return Ok(None),
            Op::React if self.follow.last > 0 => {
                format!(r#"{{"id":{id},"op":"react","chat":{chat},"target":{},"emoji":"+1"}}"#, self.follow.last)
            }
            Op::React => return Ok(None),
            Op::Fetch => match self.follow.fetch_after() {
                Some(after) => {
                    format!(r#"{{"id":{id},"op":"fetch","chat":{chat},"after":{after},"limit":{FETCH_LIMIT}}}"#)
                }
                None => return Ok(None),
            },
        };
        self.next_id += 1;
        client.send_text(text).await.map_err(|e| format!("{}: {e}", op.name()))?;
        Ok(Some(Pending { id, op, at: Instant::now() }))
    }

    /// Handles one frame; `Some` when it answers the pending request (its outcome).
    fn frame(&mut self, text: &str, pending: Option<&Pending>, tally: &Mutex<Tally>) -> Option<Result<(), Refusal>> {
        let Ok(f) = serde_json::from_str::<Frame>(text) else {
            tally.lock().expect("tally lock").bad_frames += 1;
            return None;
        };
        if let Some(id) = f.id {
            let p = pending.filter(|p| p.id == id)?;
            if let Some(err) = f.err {
                let reply = serde_json::from_value::<ErrReply>(err.clone()).ok();
                let retry_after = reply.filter(|r| r.code.as_deref() != Some("forbidden")).and_then(|r| {
                    r.retry_after_ms
                        .map(Duration::from_millis)
                        .or((r.code.as_deref() == Some("unavailable")).then_some(DEFAULT_RETRY))
                });
                return Some(Err(Refusal { error: format!("{}: {err}", p.op.name()), retry_after }));
            }
            if p.op == Op::Fetch {
                let reply = f.ok.as_deref().and_then(|ok| serde_json::from_str::<FetchReply>(ok.get()).ok());
                let mut t = tally.lock().expect("tally lock");
                if reply.is_some_and(|r| self.follow.fetched(&r.events, self.who.node, &mut t)) {
                    self.queue.push_front(Op::Fetch);
                }
                return Some(Ok(()));
            }
            let seq =
                f.ok.as_deref().and_then(|ok| serde_json::from_str::<SeqReply>(ok.get()).ok()).and_then(|r| r.seq);
            match (p.op, seq) {
                (Op::Watch, Some(seq)) => {
                    self.follow.last = self.follow.last.max(seq);
                    self.watching = true;
                }
                (Op::Read, Some(seq)) => self.read_to = self.read_to.max(seq),
                (Op::Send, _) => {
                    if let Some((c, _)) = &self.who.open {
                        *tally.lock().expect("tally lock").acked.entry(*c).or_default() += 1;
                    }
                }
                _ => {}
            }
            return Some(Ok(()));
        }
        let mut t = tally.lock().expect("tally lock");
        match f.ev.as_deref() {
            Some("event") => {
                let ours = self.who.open.as_ref().is_some_and(|(_, name)| f.chat.as_deref() == Some(name.as_str()));
                let Some(seq) = f.seq.filter(|_| ours) else {
                    t.foreign_events += 1;
                    return None;
                };
                if self.follow.push(seq, f.kind.as_deref(), f.body.as_ref(), self.who.node, &mut t) {
                    self.queue.push_front(Op::Fetch);
                }
            }
            Some("inbox") => t.inbox_pushes += 1,
            Some("typing") => t.typing_pushes += 1,
            Some("presence") => t.presence_pushes += 1,
            Some("notify") => t.notifies += 1,
            _ => t.other_pushes += 1,
        }
        None
    }

    fn note_latency(&self, p: &Pending, tally: &Mutex<Tally>) {
        let mut t = tally.lock().expect("tally lock");
        let d = p.at.elapsed();
        match p.op {
            Op::Send => t.ack.record(d),
            Op::Watch => t.opening[0].record(d),
            Op::Presence => t.opening[1].record(d),
            Op::Inbox => t.opening[2].record(d),
            _ => {}
        }
    }

    /// Counts a finished request (or asks it again, if the refusal says when), and tells the worker
    /// once the chat is open.
    fn finished(&mut self, op: Op, outcome: Result<(), Refusal>, tally: &Mutex<Tally>) {
        if let Err(Refusal { retry_after: Some(wait), .. }) = &outcome
            && self.retries < MAX_RETRIES
        {
            self.retries += 1;
            tally.lock().expect("tally lock").retries += 1;
            self.queue.push_front(op);
            self.hold_until = Some(Instant::now() + *wait);
            return;
        }
        self.retries = 0;
        let mut t = tally.lock().expect("tally lock");
        if op == Op::Send {
            // Acked or given up: the next message is another (its own client_id and time).
            self.sent += 1;
            self.send_t = None;
            if let (Err(_), Some((c, _))) = (&outcome, &self.who.open) {
                // Refused in the end, yet it may have been stored (a shard can commit a write its
                // caller stopped waiting for): owed to nobody, but it may be delivered.
                *t.abandoned.entry(*c).or_default() += 1;
            }
        }
        match (&outcome, op) {
            (Ok(()), Op::Typing) => t.typings += 1,
            (Ok(()), Op::Read) => t.reads += 1,
            (Ok(()), Op::React) => t.reactions += 1,
            (Ok(()), _) => {}
            (Err(e), _) => {
                *t.failed.entry(op.name().to_string()).or_default() += 1;
                if t.first_error.is_none() {
                    t.first_error = Some(e.error.clone());
                }
            }
        }
        drop(t);
        let opening = matches!(op, Op::Watch | Op::Presence | Op::Inbox);
        if opening && (op == Op::Inbox || outcome.is_err()) {
            if outcome.is_err() {
                // The rest of the opening is moot.
                self.queue.retain(|o| !matches!(o, Op::Presence | Op::Inbox));
            }
            if let Some(tx) = self.opened.take() {
                let _ = tx.send(Opened { watching: self.watching, error: outcome.err().map(|r| r.error) });
            }
        }
    }
}
