//! Running one request of a connection against the chat layer, and the one
//! owner of a connection's watches ([`Session`]'s watch set): a watch is
//! adopted there once it is live, and a connection that closes ends every
//! watch it owns, including one whose request was still running.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herald_protocol::frame::{err_reply, ok_reply};
use herald_protocol::reply::{EmptyOk, WatchOk};
use herald_protocol::{Op, Request};

use super::fences::{Fences, Refusal};
use crate::chat::{Caller, Chats};
use crate::error::Error;
use crate::hub::Listener;
use crate::model::ChatKey;
use crate::outbox::{Frame, Outbox};

/// A request that takes longer is answered `unavailable`; its write still finishes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// What a connection at its watch cap is told to wait: it must unwatch first,
/// so any wait will do; this keeps a looping client slow.
const WATCH_FULL_RETRY_MS: u64 = 5_000;
/// How long a send refused `internal` fences its chat before the client's
/// retry is due (`internal` carries no time; clients wait about this long).
const INTERNAL_RETRY_MS: u64 = 1_000;

/// A connection after `hello`: who it is, its queue, and the watches it owns.
pub(super) struct Session {
    caller: Caller,
    outbox: Arc<Outbox>,
    watches: Mutex<WatchSet>,
    /// Chats it may watch at once.
    max_watches: usize,
}

/// The chats a connection watches. A watch joins the set once it is live;
/// once the connection has ended the set refuses new ones, so a watch that
/// finishes after its connection closed is ended by its own request instead
/// of staying registered with nobody to end it.
#[derive(Default)]
struct WatchSet {
    chats: Vec<ChatKey>,
    ended: bool,
    /// The connection asked for a live inbox.
    inbox: bool,
    /// Chats whose sends wait for a refused one (see [`Fences`]). Kept
    /// under the same lock: requests of a connection run one at a time, so
    /// it is never contended.
    fences: Option<Box<Fences>>,
}

impl Session {
    pub(super) fn new(caller: Caller, outbox: Arc<Outbox>, max_watches: usize) -> Session {
        Session { caller, outbox, watches: Mutex::new(WatchSet::default()), max_watches }
    }

    /// Whether one more watch of `chat` fits (a watch of a chat already
    /// watched replaces it). A connection runs one request at a time, so
    /// no other watch starts between this check and the watch.
    fn check_room(&self, chat: &str) -> Result<(), Error> {
        let set = self.watches.lock().expect("watches lock");
        if set.chats.len() < self.max_watches || set.chats.iter().any(|k| *k.chat == *chat) {
            return Ok(());
        }
        metrics::counter!("herald_watches_refused_total").increment(1);
        Err(Error::Throttled {
            message: format!("a connection watches at most {} chats: unwatch one first", self.max_watches),
            retry_after_ms: WATCH_FULL_RETRY_MS,
        })
    }

    /// Takes a live watch of `key` into the set. False once the connection ended.
    fn adopt(&self, key: ChatKey) -> bool {
        let mut set = self.watches.lock().expect("watches lock");
        if set.ended {
            return false;
        }
        if !set.chats.contains(&key) {
            // Most connections watch one chat or a few: room for exactly
            // one, then doubling, not the four a first push makes room for.
            let more = set.chats.len().max(1);
            set.chats.reserve_exact(more);
            set.chats.push(key);
        }
        true
    }

    /// Whether a send of `client_id` to `chat` may be served now, or must
    /// wait for an earlier refused one (see [`Fences::check`]).
    fn check_fence(&self, chat: &str, client_id: Option<&str>) -> Result<(), Error> {
        let mut set = self.watches.lock().expect("watches lock");
        Fences::check(&mut set.fences, chat, client_id, Instant::now()).map_err(|(refusal, retry_after_ms)| {
            metrics::counter!("herald_sends_fenced_total").increment(1);
            let message = "an earlier send to this chat was refused: send it again first".to_string();
            match refusal {
                Refusal::Throttled => Error::Throttled { message, retry_after_ms },
                Refusal::Unavailable => Error::Unavailable { message, retry_after_ms },
            }
        })
    }

    /// A send of `client_id` to `chat` was refused with an error the client
    /// retries: later sends to the chat wait for it (see [`Fences::raise`]).
    pub(super) fn fence(&self, chat: &str, client_id: &str, err: &Error) {
        let (refusal, retry_after_ms) = match err {
            Error::Throttled { retry_after_ms, .. } => (Refusal::Throttled, *retry_after_ms),
            Error::Unavailable { retry_after_ms, .. } => (Refusal::Unavailable, *retry_after_ms),
            Error::Internal(_) => (Refusal::Unavailable, INTERNAL_RETRY_MS),
            _ => return,
        };
        let mut set = self.watches.lock().expect("watches lock");
        Fences::raise(&mut set.fences, chat, client_id, refusal, retry_after_ms, Instant::now());
    }

    /// Drops `chat` from the set (its watch ended: unwatch or leave).
    fn forget(&self, chat: &str) {
        self.watches.lock().expect("watches lock").chats.retain(|k| *k.chat != *chat);
    }

    /// Registers the connection's live inbox (or finds it), unless the
    /// connection ended; see [`Chats::inbox_listen`].
    fn listen_inbox(&self, chats: &Chats) -> Option<(Arc<Listener>, bool)> {
        let mut set = self.watches.lock().expect("watches lock");
        if set.ended {
            return None;
        }
        set.inbox = true;
        Some(chats.inbox_listen(&self.caller, &self.outbox))
    }

    /// The connection ended: ends every watch in the set and its live
    /// inbox, and refuses new ones.
    /// Who the connection is.
    pub(super) fn caller(&self) -> &Caller {
        &self.caller
    }

    pub(super) fn end_watches(&self, chats: &Chats) {
        let (keys, inbox) = {
            let mut set = self.watches.lock().expect("watches lock");
            set.ended = true;
            (std::mem::take(&mut set.chats), std::mem::take(&mut set.inbox))
        };
        chats.unwatch_all(&self.outbox, &keys);
        if inbox {
            chats.inbox_unlisten(&self.outbox);
        }
    }
}

/// Serves one request and queues its reply.
pub(super) async fn handle(chats: Arc<Chats>, session: Arc<Session>, req: Request) {
    let started = Instant::now();
    let op = req.op.name();
    let id = req.id;
    // A send refused for now fences its chat; the key outlives the request.
    let fence_key = match &req.op {
        Op::Send { chat, client_id: Some(client_id), .. } => Some((chat.clone(), client_id.clone())),
        _ => None,
    };
    let result = tokio::time::timeout(REQUEST_TIMEOUT, run_op(&chats, &session, req))
        .await
        .unwrap_or_else(|_| Err(Error::Unavailable { message: "the request timed out".into(), retry_after_ms: 1000 }));
    let outcome = match &result {
        Ok(reply) => {
            if let Some(frame) = reply {
                session.outbox.push(frame.clone());
            }
            "ok"
        }
        Err(e) => {
            if let Some((chat, client_id)) = &fence_key {
                session.fence(chat, client_id, e);
            }
            session.outbox.push(Frame::from(err_reply(Some(id), &e.body())));
            e.outcome()
        }
    };
    metrics::counter!("herald_requests_total", "op" => op, "outcome" => outcome).increment(1);
    metrics::histogram!("herald_request_seconds", "op" => op).record(started.elapsed().as_secs_f64());
}

/// Runs `req`; returns its `ok` reply, or `None` when the reply was already queued (watch).
async fn run_op(chats: &Chats, s: &Arc<Session>, req: Request) -> Result<Option<Frame>, Error> {
    let c = &s.caller;
    let id = req.id;
    let ok = |v: String| Ok(Some(Frame::from(v)));
    match req.op {
        Op::Join { chat } => ok(ok_reply(id, &chats.join(c, &chat).await?)),
        Op::Leave { chat } => {
            chats.leave(c, &s.outbox, &chat).await?;
            s.forget(&chat);
            ok(ok_reply(id, &EmptyOk {}))
        }
        Op::Watch { chat, after } => {
            s.check_room(&chat)?;
            let reply = |latest| Frame::from(ok_reply(id, &WatchOk { chat: chat.clone(), seq: latest }));
            chats.watch(c, &s.outbox, &chat, after, reply).await?;
            if !s.adopt(ChatKey { ws: c.ws.clone(), chat: chat.as_str().into() }) {
                // The connection closed while the watch started: nobody else will end it.
                chats.unwatch(c, &s.outbox, &chat);
            }
            Ok(None)
        }
        Op::Unwatch { chat } => {
            chats.unwatch(c, &s.outbox, &chat);
            s.forget(&chat);
            ok(ok_reply(id, &EmptyOk {}))
        }
        Op::Send { chat, body, client_id } => {
            s.check_fence(&chat, client_id.as_deref())?;
            ok(ok_reply(id, &chats.send(c, &chat, body, client_id).await?))
        }
        Op::React { chat, target, emoji, on } => ok(ok_reply(id, &chats.react(c, &chat, target, emoji, on).await?)),
        Op::Read { chat, seq } => ok(ok_reply(id, &chats.read(c, &chat, seq).await?)),
        Op::Fetch { chat, after, limit } => ok(chats.fetch_reply(c, s.outbox.id(), id, &chat, after, limit).await?),
        Op::Typing { chat } => {
            chats.typing(c, &chat).await?;
            ok(ok_reply(id, &EmptyOk {}))
        }
        Op::Presence { chat } => ok(ok_reply(id, &chats.presence(c, &s.outbox, &chat).await?)),
        Op::Edit { chat, target, body } => ok(ok_reply(id, &chats.edit(c, &chat, target, body).await?)),
        Op::Delete { chat, target } => ok(ok_reply(id, &chats.delete(c, &chat, target).await?)),
        Op::Inbox { limit, cursor, live: false } => {
            ok(ok_reply(id, &chats.inbox(&c.ws, &c.user, limit, cursor.as_deref()).await?))
        }
        Op::Inbox { limit, cursor, live: true } => {
            let Some((listener, setup)) = s.listen_inbox(chats) else {
                return Err(Error::Unavailable { message: "the connection is closing".into(), retry_after_ms: 1000 });
            };
            let page = chats.inbox_live(&listener, setup, c, limit, cursor.as_deref()).await?;
            // The reply first, then the pushes.
            s.outbox.push(Frame::from(ok_reply(id, &page)));
            chats.inbox_start(&listener);
            Ok(None)
        }
        Op::Hello { .. } | Op::Ping => unreachable!("answered by the connection itself"),
    }
}
