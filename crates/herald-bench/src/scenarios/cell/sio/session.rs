//! One user's Socket.IO connection in a load worker, after it joined its
//! chats' member rooms: a task that keeps reading (events, Engine.IO pings)
//! while it serves the worker's commands one acked event at a time, as
//! herald's session serves one request at a time. It opens the user's chat
//! (joins the watchers' room), sends a message (typing first), reads and
//! reacts (events `cell` of `server.js`); and it tallies what arrives into
//! herald's cell `Tally`: each message of the open chat once (by sender and
//! number: Socket.IO has no seq, so a duplicate is a second copy and a loss
//! shows only in the count), its send-to-delivery time same node or cross
//! node, and the other pushes by kind. A lost connection ends the session
//! (counted as dropped): there is no resume without a log to resume from.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{mpsc, oneshot};

use super::super::follow::now_us;
use super::super::tally::Tally;
use crate::client::REQUEST_TIMEOUT;
use crate::pclient::PeerClient;

/// Ack ids of a session start here, above those the setup's joins used.
const FIRST_ACK: u64 = 1 << 30;

/// What the worker asks of a session.
#[derive(Debug)]
pub enum Cmd {
    /// Join the open chat's watchers' room; says when done (or why not).
    Open(oneshot::Sender<Result<(), String>>),
    /// `typing`, then a message into the open chat.
    Message,
    /// A read of the open chat (when something arrived since the last one).
    Read,
    /// A reaction to the last message seen.
    React,
}

/// Who a session is.
pub struct Who {
    pub user: u32,
    pub node: u32,
    /// The open chat: its index and wire name.
    pub open: Option<(u32, String)>,
}

/// One acked event of the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Watch,
    Typing,
    Send,
    Read,
    React,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Watch => "watch",
            Op::Typing => "typing",
            Op::Send => "send",
            Op::Read => "read",
            Op::React => "react",
        }
    }
}

/// A message's payload: chat, sender, its number, send time (µs), the sender's node.
#[derive(Deserialize)]
struct Msg {
    c: u32,
    u: u32,
    n: u32,
    t: u64,
    s: u32,
}

struct Pending {
    id: u64,
    op: Op,
    at: Instant,
}

struct Session {
    who: Who,
    next_ack: u64,
    sent: u32,
    queue: VecDeque<Op>,
    opened: Option<oneshot::Sender<Result<(), String>>>,
    /// Messages of the open chat seen (sender << 32 | number), to tell a second copy.
    seen: HashSet<u64>,
    /// Events of the open chat seen since the last read; whether any was seen at all. Both start
    /// true once the chat is open, as herald's watch reply gives the chat's head (its joins).
    unread: u64,
    any: bool,
}

/// Runs a session until its command channel closes or its connection is lost.
pub async fn run(mut client: PeerClient, who: Who, mut rx: mpsc::Receiver<Cmd>, tally: Arc<Mutex<Tally>>) {
    let mut s = Session {
        who,
        next_ack: FIRST_ACK,
        sent: 0,
        queue: VecDeque::new(),
        opened: None,
        seen: HashSet::new(),
        unread: 0,
        any: false,
    };
    let mut pending: Option<Pending> = None;
    loop {
        if pending.is_none()
            && let Some(op) = s.queue.pop_front()
        {
            match s.start(&mut client, op, &tally).await {
                Ok(Some(p)) => pending = Some(p),
                Ok(None) => {}
                Err(e) => return s.lost(Some(op), e, &tally),
            }
            continue;
        }
        let deadline = pending.as_ref().map(|p| tokio::time::Instant::from_std(p.at + REQUEST_TIMEOUT));
        tokio::select! {
            cmd = rx.recv(), if pending.is_none() => match cmd {
                None => return,
                Some(cmd) => s.take(cmd),
            },
            text = client.next_text() => match text {
                Ok(text) => {
                    if let Some(id) = ack_id(&text)
                        && let Some(p) = pending.take_if(|p| p.id == id)
                    {
                        s.finished(&p, &tally);
                    } else {
                        s.push(&text, &tally);
                    }
                }
                Err(e) => return s.lost(pending.map(|p| p.op), e.to_string(), &tally),
            },
            _ = sleep_until(deadline) => {
                if let Some(p) = pending.take() {
                    s.failed(p.op, format!("{}: no ack in {REQUEST_TIMEOUT:?}", p.op.name()), &tally);
                }
            }
        }
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The id of an ack frame `43N[...]`.
fn ack_id(text: &str) -> Option<u64> {
    let rest = text.strip_prefix("43")?;
    let digits = rest.find('[').map_or(rest, |i| &rest[..i]);
    digits.parse().ok()
}

impl Session {
    fn take(&mut self, cmd: Cmd) {
        if self.who.open.is_none() {
            if let Cmd::Open(tx) = cmd {
                let _ = tx.send(Err("the user has no chat".into()));
            }
            return;
        }
        match cmd {
            Cmd::Open(tx) => {
                self.opened = Some(tx);
                self.queue.push_back(Op::Watch);
            }
            Cmd::Message => self.queue.extend([Op::Typing, Op::Send]),
            Cmd::Read => self.queue.push_back(Op::Read),
            Cmd::React => self.queue.push_back(Op::React),
        }
    }

    /// Writes `op`'s event with an ack id; `None` when there is nothing to send (a read with
    /// nothing new, a reaction with nothing seen).
    async fn start(
        &mut self,
        client: &mut PeerClient,
        op: Op,
        tally: &Mutex<Tally>,
    ) -> Result<Option<Pending>, String> {
        let Some((c, chat)) = &self.who.open else { return Ok(None) };
        let (id, user) = (self.next_ack, self.who.user);
        let text = match op {
            Op::Watch => format!(r#"42{id}["join","w:{chat}"]"#),
            Op::Typing => format!(r#"42{id}["cell","typing","{chat}",{{"u":{user}}}]"#),
            Op::Send => {
                *tally.lock().expect("tally lock").in_flight.entry(*c).or_default() += 1;
                let (t, n, node) = (now_us(), self.sent, self.who.node);
                format!(r#"42{id}["cell","msg","{chat}",{{"c":{c},"u":{user},"n":{n},"t":{t},"s":{node}}}]"#)
            }
            Op::Read if self.unread > 0 => {
                self.unread = 0;
                format!(r#"42{id}["cell","read","{chat}",{{"u":{user}}}]"#)
            }
            Op::React if self.any => format!(r#"42{id}["cell","react","{chat}",{{"u":{user},"e":"+1"}}]"#),
            Op::Read | Op::React => return Ok(None),
        };
        self.next_ack += 1;
        client.send_text(text).await.map_err(|e| format!("{}: {e}", op.name()))?;
        Ok(Some(Pending { id, op, at: Instant::now() }))
    }

    /// An event the server pushed (anything but an ack of ours).
    fn push(&mut self, text: &str, tally: &Mutex<Tally>) {
        let mut t = tally.lock().expect("tally lock");
        let Some(body) = text.strip_prefix("42") else {
            // Engine.IO and Socket.IO chatter (pings are answered by the client).
            t.other_pushes += 1;
            return;
        };
        let Ok((ev, payload)) = serde_json::from_str::<(&str, &RawValue)>(body) else {
            t.bad_frames += 1;
            return;
        };
        match ev {
            "msg" => {
                let Ok(m) = serde_json::from_str::<Msg>(payload.get()) else {
                    t.bad_frames += 1;
                    return;
                };
                if self.who.open.as_ref().is_none_or(|(c, _)| *c != m.c) {
                    t.foreign_events += 1;
                    return;
                }
                if !self.seen.insert(u64::from(m.u) << 32 | u64::from(m.n)) {
                    t.duplicates += 1;
                    return;
                }
                self.unread += 1;
                self.any = true;
                t.delivered += 1;
                *t.delivered_by_chat.entry(m.c).or_default() += 1;
                let d = std::time::Duration::from_micros(now_us().saturating_sub(m.t));
                if m.s == self.who.node { t.same_node.record(d) } else { t.cross_node.record(d) }
            }
            "read" | "react" => {
                // Events of the chat, as herald's: a read after them has something to read.
                self.unread += 1;
                t.other_events += 1;
            }
            "typing" => t.typing_pushes += 1,
            "inbox" => t.inbox_pushes += 1,
            _ => t.other_pushes += 1,
        }
    }

    /// `p` was acked.
    fn finished(&mut self, p: &Pending, tally: &Mutex<Tally>) {
        let mut t = tally.lock().expect("tally lock");
        match p.op {
            Op::Watch => {
                t.opening[0].record(p.at.elapsed());
                (self.unread, self.any) = (1, true);
                if let Some(tx) = self.opened.take() {
                    let _ = tx.send(Ok(()));
                }
            }
            Op::Typing => t.typings += 1,
            Op::Send => {
                t.ack.record(p.at.elapsed());
                self.sent += 1;
                if let Some((c, _)) = &self.who.open {
                    *t.acked.entry(*c).or_default() += 1;
                    if let Some(n) = t.in_flight.get_mut(c) {
                        *n = n.saturating_sub(1);
                    }
                }
            }
            Op::Read => t.reads += 1,
            Op::React => t.reactions += 1,
        }
    }

    /// `op` got no ack: counted as failed (a send's message may still have been emitted).
    fn failed(&mut self, op: Op, why: String, tally: &Mutex<Tally>) {
        let mut t = tally.lock().expect("tally lock");
        *t.failed.entry(op.name().to_string()).or_default() += 1;
        if t.first_error.is_none() {
            t.first_error = Some(why.clone());
        }
        if op == Op::Send {
            self.sent += 1;
            if let Some((c, _)) = &self.who.open {
                *t.abandoned.entry(*c).or_default() += 1;
                if let Some(n) = t.in_flight.get_mut(c) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        if let (Op::Watch, Some(tx)) = (op, self.opened.take()) {
            let _ = tx.send(Err(why));
        }
    }

    /// The connection ended with `op` unanswered: the session ends, counted as dropped.
    fn lost(&mut self, op: Option<Op>, why: String, tally: &Mutex<Tally>) {
        if let Some(op) = op {
            self.failed(op, why, tally);
        }
        tally.lock().expect("tally lock").dropped += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_are_told_from_events() {
        assert_eq!(ack_id("431073741824[true]"), Some(1_073_741_824));
        assert_eq!(ack_id("437[]"), Some(7));
        assert_eq!(ack_id(r#"42["msg",{}]"#), None);
        assert_eq!(ack_id("3"), None);
    }

    #[test]
    fn a_message_counts_once_for_its_chat() {
        let tally = Mutex::new(Tally::default());
        let mut s = Session {
            who: Who { user: 1, node: 0, open: Some((5, "g5".into())) },
            next_ack: FIRST_ACK,
            sent: 0,
            queue: VecDeque::new(),
            opened: None,
            seen: HashSet::new(),
            unread: 0,
            any: false,
        };
        let msg = format!(r#"42["msg",{{"c":5,"u":2,"n":0,"t":{},"s":1}}]"#, now_us());
        s.push(&msg, &tally);
        s.push(&msg, &tally);
        s.push(r#"42["msg",{"c":6,"u":2,"n":0,"t":0,"s":1}]"#, &tally);
        s.push(r#"42["inbox","g5"]"#, &tally);
        s.push(r#"42["typing",{"u":2}]"#, &tally);
        let t = tally.lock().unwrap();
        assert_eq!((t.delivered, t.duplicates, t.foreign_events), (1, 1, 1));
        assert_eq!((t.inbox_pushes, t.typing_pushes, t.cross_node.count()), (1, 1, 1));
        assert_eq!(s.unread, 1);
    }
}
