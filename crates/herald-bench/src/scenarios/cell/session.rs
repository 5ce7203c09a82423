//! One user's connection in a cell's load worker, after `hello` and its
//! joins: a task that keeps reading (pushes, pings) while it serves the
//! worker's commands one request at a time, as the protocol wants. It opens
//! the user's chat (watch, presence, live inbox), sends a message (typing
//! first), reads and reacts; and it tallies what arrives: each message
//! event of the open chat once and in order, its send-to-delivery time (the
//! sender's clock is the same machine's) same node or cross node, and the
//! other pushes by kind. When its connection ends (a `reconnect` push, then
//! the close; a reset; a request unanswered past [`LIVENESS`]) it gets one
//! on another node (`resume`), re-watches its chat with `after` the last seq
//! it had, asks presence and the live inbox again, and resends the message
//! whose reply the loss took, with the same `client_id`. Which user does
//! what when is `worker`'s.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::follow::{FetchReply, Follow, now_us};
use super::resume::{Dial, RESUME_BOUND};
use super::tally::Tally;
use super::wire::{DEFAULT_RETRY, Frame, Op, Refusal, SeqReply};
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
/// A fetch of a gap is asked again longer: what it fills is owed to this session.
const MAX_FETCH_RETRIES: u32 = 60;
/// The close handshake of a lost connection gets this long (a killed node answers nothing).
const CLOSE_WAIT: Duration = Duration::from_millis(500);
/// A request of the load unanswered this long: the connection is taken as lost (a node that
/// stopped without closing its sockets). Well above a loaded cell's slowest answers.
const LIVENESS: Duration = Duration::from_secs(10);

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

/// Runs a session until its command channel closes, getting its connection back (to another node
/// first) each time it is lost, until [`RESUME_BOUND`] passes without one.
pub async fn run(mut client: Client, who: Who, dial: Dial, mut rx: mpsc::Receiver<Cmd>, tally: Arc<Mutex<Tally>>) {
    let chat = who.open.as_ref().map_or(0, |(c, _)| *c);
    let mut s = Session {
        who,
        next_id: FIRST_ID,
        follow: Follow::of(chat),
        read_to: 0,
        sent: 0,
        send_t: None,
        queue: VecDeque::new(),
        opened: None,
        watching: false,
        retries: 0,
        hold_until: None,
        reconnect_after: None,
        resume_from: None,
        resend: false,
    };
    loop {
        let Lost { after } = match s.serve(&mut client, &mut rx, &tally).await {
            Some(lost) => lost,
            None => return,
        };
        // End the old connection now, as a browser does on a close frame: a draining node waits for
        // its connections to end before it exits, so a client that sat on a closed one held it up.
        let _ = tokio::time::timeout(CLOSE_WAIT, client.close()).await;
        let lost = s.who.node;
        s.lost(&tally);
        if let Some(wait) = after {
            // As a client would: the drain spreads its users' returns over its window.
            tokio::time::sleep(wait).await;
        }
        match dial.reconnect(lost, s.who.user, after.is_some()).await {
            Some((c, node)) => {
                client = c;
                s.reconnected(node, &tally);
            }
            None => {
                let mut t = tally.lock().expect("tally lock");
                t.dropped += 1;
                t.resuming -= 1;
                if let Some((node, _)) = s.resume_from {
                    t.timeline.never(node);
                }
                drop(t);
                if let Some(tx) = s.opened.take() {
                    let _ = tx.send(Opened { watching: s.watching, error: Some("the connection closed".into()) });
                }
                return;
            }
        }
    }
}

/// Why `serve` returned: the connection is gone, with the wait a `reconnect` push asked for.
struct Lost {
    after: Option<Duration>,
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
    /// A `reconnect` push asked to wait this long before connecting again.
    reconnect_after: Option<Duration>,
    /// Lost this node at this time (µs since the epoch), not resumed yet.
    resume_from: Option<(u32, u64)>,
    /// The send at the queue's head goes again after a loss.
    resend: bool,
}

impl Session {
    /// Serves commands on `client` until the command channel closes (`None`) or the connection is
    /// lost: closed, reset, or a request unanswered past the liveness bound.
    async fn serve(&mut self, client: &mut Client, rx: &mut mpsc::Receiver<Cmd>, tally: &Mutex<Tally>) -> Option<Lost> {
        let mut pending: Option<Pending> = None;
        loop {
            if self.hold_until.is_some_and(|h| Instant::now() >= h) {
                self.hold_until = None;
            }
            if pending.is_none()
                && self.hold_until.is_none()
                && let Some(op) = self.queue.pop_front()
            {
                match self.start(client, op, tally).await {
                    Ok(Some(p)) => pending = Some(p),
                    Ok(None) => self.finished(op, Ok(()), tally),
                    Err(_) => return Some(self.unanswered(Some(op), tally)),
                }
                continue;
            }
            // The opening waits as long as any request; the load's requests are the liveness check.
            let bound = if self.opened.is_some() { REQUEST_TIMEOUT } else { LIVENESS };
            let deadline = pending.as_ref().map(|p| p.at + bound).or(self.hold_until);
            tokio::select! {
                cmd = rx.recv(), if pending.is_none() => match cmd {
                    None => return None,
                    Some(cmd) => self.take(cmd),
                },
                text = client.next_text() => match text {
                    Ok(text) => {
                        if let Some(done) = self.frame(&text, pending.as_ref(), tally) {
                            let p = pending.take().expect("a reply matches a pending request");
                            if done.is_ok() {
                                self.note_latency(&p, tally);
                            }
                            self.finished(p.op, done, tally);
                        }
                    }
                    Err(_) => return Some(self.unanswered(pending.map(|p| p.op), tally)),
                },
                _ = sleep_until(deadline) => {
                    if let Some(p) = pending.take() {
                        tally.lock().expect("tally lock").stalls += 1;
                        return Some(self.unanswered(Some(p.op), tally));
                    }
                }
            }
        }
    }

    /// The connection was lost with `op` unanswered: a send goes again after the reconnect with
    /// the same `client_id` (herald stores it once), a fetch is asked again; the rest is moot.
    fn unanswered(&mut self, op: Option<Op>, tally: &Mutex<Tally>) -> Lost {
        match op {
            Some(Op::Send) => {
                tally.lock().expect("tally lock").resends += 1;
                self.resend = true;
                self.queue.push_front(Op::Send);
            }
            Some(Op::Fetch) => self.queue.push_front(Op::Fetch),
            _ => {}
        }
        self.retries = 0;
        self.hold_until = None;
        Lost { after: self.reconnect_after.take() }
    }

    /// Counts a loss of this session's node (once until it resumes) and readies the re-watch.
    fn lost(&mut self, tally: &Mutex<Tally>) {
        if self.resume_from.is_none() {
            let at = now_us();
            self.resume_from = Some((self.who.node, at));
            let mut t = tally.lock().expect("tally lock");
            t.resuming += 1;
            t.timeline.lost(self.who.node, at);
        }
        if self.watching {
            self.follow.resuming();
        }
        // The opening again, first: watch (with `after` when it had been watched), presence, inbox.
        let reopen = self.watching || self.opened.is_some();
        self.queue.retain(|o| !matches!(o, Op::Watch | Op::Presence | Op::Inbox));
        if reopen {
            for op in [Op::Inbox, Op::Presence, Op::Watch] {
                self.queue.push_front(op);
            }
        }
    }

    /// Connected again, to `node`, and said hello.
    fn reconnected(&mut self, node: u32, tally: &Mutex<Tally>) {
        self.who.node = node;
        let at = now_us();
        let mut t = tally.lock().expect("tally lock");
        t.reconnects += 1;
        if let Some((lost, _)) = self.resume_from {
            t.timeline.reconnected(lost, at);
        }
        drop(t);
        if !self.queue.contains(&Op::Watch) {
            // Nothing to re-watch: back once connected.
            self.resumed(at, tally);
        }
    }

    /// The session is whole again at `at` (its chat re-watched, or connected when it has none).
    fn resumed(&mut self, at: u64, tally: &Mutex<Tally>) {
        if let Some((node, lost_at)) = self.resume_from.take() {
            let mut t = tally.lock().expect("tally lock");
            t.resuming -= 1;
            t.timeline.resumed(node, lost_at, at);
        }
    }

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
    async fn start(&mut self, client: &mut Client, op: Op, tally: &Mutex<Tally>) -> Result<Option<Pending>, String> {
        let Some((_, chat)) = &self.who.open else { return Ok(None) };
        let id = self.next_id;
        let chat = serde_json::to_string(chat).map_err(|e| e.to_string())?;
        let text = match op {
            // Again after a loss: the events after the last one held are replayed.
            Op::Watch if self.watching => {
                format!(r#"{{"id":{id},"op":"watch","chat":{chat},"after":{}}}"#, self.follow.last)
            }
            Op::Watch => format!(r#"{{"id":{id},"op":"watch","chat":{chat}}}"#),
            Op::Presence => format!(r#"{{"id":{id},"op":"presence","chat":{chat}}}"#),
            Op::Inbox => format!(r#"{{"id":{id},"op":"inbox","limit":{INBOX_PAGE},"live":true}}"#),
            Op::Typing => format!(r#"{{"id":{id},"op":"typing","chat":{chat}}}"#),
            Op::Send => {
                if self.send_t.is_none()
                    && let Some((c, _)) = &self.who.open
                {
                    *tally.lock().expect("tally lock").in_flight.entry(*c).or_default() += 1;
                }
                if std::mem::take(&mut self.resend) {
                    // Timed from the resend: the outage is the resume's figure, not the cell's latency.
                    self.send_t = Some(now_us());
                }
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
                return Some(Err(Refusal::of(p.op, &err)));
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
                (Op::Watch, Some(seq)) if self.resume_from.is_some() && self.watching => {
                    self.follow.rewatched(seq);
                    self.resumed(now_us(), tally);
                }
                (Op::Watch, Some(seq)) => {
                    self.follow.last = self.follow.last.max(seq);
                    self.watching = true;
                    self.resumed(now_us(), tally);
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
            Some("notify") => {
                t.notifies += 1;
                let ours = self.who.open.as_ref().is_some_and(|(_, name)| f.chat.as_deref() == Some(name.as_str()));
                if let Some(seq) = f.seq.filter(|_| ours && self.watching)
                    && self.follow.notify(seq, &mut t)
                {
                    self.queue.push_front(Op::Fetch);
                }
            }
            Some("reconnect") => {
                t.reconnect_pushes += 1;
                self.reconnect_after = Some(Duration::from_millis(f.after_ms.unwrap_or(0)));
            }
            _ => t.other_pushes += 1,
        }
        None
    }

    fn note_latency(&self, p: &Pending, tally: &Mutex<Tally>) {
        let mut t = tally.lock().expect("tally lock");
        let d = p.at.elapsed();
        // The opening's steps are the first opening's: a resume is timed as a whole.
        let opening = self.opened.is_some();
        match p.op {
            Op::Send => t.ack.record(d),
            Op::Watch if opening => t.opening[0].record(d),
            Op::Presence if opening => t.opening[1].record(d),
            Op::Inbox if opening => t.opening[2].record(d),
            _ => {}
        }
    }

    /// Counts a finished request (or asks it again, if the refusal says when), and tells the worker
    /// once the chat is open.
    fn finished(&mut self, op: Op, outcome: Result<(), Refusal>, tally: &Mutex<Tally>) {
        if let (Op::Watch, Err(refusal), Some((node, lost_at))) = (op, &outcome, self.resume_from) {
            // A resume is not given up at the fifth refusal: the events missed are owed to this
            // session, so the re-watch is asked again until the resume bound.
            if now_us().saturating_sub(lost_at) < RESUME_BOUND.as_micros() as u64 {
                let mut t = tally.lock().expect("tally lock");
                t.retries += 1;
                self.queue.push_front(op);
                self.hold_until = Some(Instant::now() + refusal.retry_after.unwrap_or(DEFAULT_RETRY));
                return;
            }
            self.resume_from = None;
            let mut t = tally.lock().expect("tally lock");
            t.resuming -= 1;
            t.timeline.never(node);
        }
        if let Err(Refusal { retry_after: Some(wait), .. }) = &outcome
            && self.retries < if op == Op::Fetch { MAX_FETCH_RETRIES } else { MAX_RETRIES }
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
            if self.send_t.take().is_some()
                && let Some((c, _)) = &self.who.open
                && let Some(n) = t.in_flight.get_mut(c)
            {
                *n = n.saturating_sub(1);
            }
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
