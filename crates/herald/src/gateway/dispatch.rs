//! Running one request of a connection against the chat layer, and the
//! connection's session: who it is, its send fences, and whether it ended.
//!
//! A connection's watches have one owner, the hub (see `hub::conns`): it
//! counts them against the connection's cap, ends one when a `leave` (on
//! any device) reaches it, and ends them all when the connection closes.
//! The session only refuses a watch that finishes after its connection
//! closed, which its own request then ends, since nobody else would.

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
use crate::store::Conversation;

/// A request that takes longer is answered `unavailable`; its write still finishes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// What a connection at its watch cap is told to wait: it must unwatch first,
/// so any wait will do; this keeps a looping client slow.
const WATCH_FULL_RETRY_MS: u64 = 5_000;
/// How long a send refused `internal` fences its chat before the client's
/// retry is due (`internal` carries no time; clients wait about this long).
const INTERNAL_RETRY_MS: u64 = 1_000;

/// A connection after `hello`: who it is, its queue, and its state.
pub(super) struct Session {
    caller: Caller,
    outbox: Arc<Outbox>,
    state: Mutex<SessionState>,
    /// Chats it may watch at once.
    max_watches: usize,
}

/// What a session keeps between its requests. Once the connection has
/// ended it refuses new watches and live inboxes, so one that finishes
/// after its connection closed is ended by its own request instead of
/// staying registered with nobody to end it.
#[derive(Default)]
struct SessionState {
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
        Session { caller, outbox, state: Mutex::new(SessionState::default()), max_watches }
    }

    /// Whether one more watch of `chat` fits (a watch of a chat already
    /// watched replaces it), counted by the hub, which owns the
    /// connection's watches. A connection runs one request at a time, so
    /// no other watch starts between this check and the watch.
    fn check_room(&self, chats: &Chats, chat: &str) -> Result<(), Error> {
        let key = ChatKey { ws: self.caller.ws.clone(), chat: chat.into() };
        if chats.live().has_room(self.outbox.id(), &key, self.max_watches) {
            return Ok(());
        }
        metrics::counter!("herald_watches_refused_total").increment(1);
        Err(Error::Throttled {
            message: format!("a connection watches at most {} chats: unwatch one first", self.max_watches),
            retry_after_ms: WATCH_FULL_RETRY_MS,
        })
    }

    /// Whether a watch that just went live may stay: false once the connection ended.
    fn may_stay(&self) -> bool {
        !self.state.lock().expect("session lock").ended
    }

    /// Whether a send of `client_id` to `chat` may be served now, or must
    /// wait for an earlier refused one (see [`Fences::check`]).
    fn check_fence(&self, chat: &str, client_id: Option<&str>) -> Result<(), Error> {
        let mut set = self.state.lock().expect("session lock");
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
        let mut set = self.state.lock().expect("session lock");
        Fences::raise(&mut set.fences, chat, client_id, refusal, retry_after_ms, Instant::now());
    }

    /// Registers the connection's live inbox (or finds it), unless the
    /// connection ended; see [`crate::chat::Inbox::listen`].
    fn listen_inbox(&self, chats: &Chats) -> Option<(Arc<Listener>, bool)> {
        let mut set = self.state.lock().expect("session lock");
        if set.ended {
            return None;
        }
        set.inbox = true;
        Some(chats.inbox().listen(&self.caller, &self.outbox))
    }

    /// Who the connection is.
    pub(super) fn caller(&self) -> &Caller {
        &self.caller
    }

    /// The connection ended: ends every watch it has and its live inbox,
    /// and refuses new ones.
    pub(super) fn end_watches(&self, chats: &Chats) {
        let inbox = {
            let mut set = self.state.lock().expect("session lock");
            set.ended = true;
            std::mem::take(&mut set.inbox)
        };
        chats.live().unwatch_conn(&self.outbox);
        if inbox {
            chats.inbox().unlisten(&self.outbox);
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
        Op::Join { chat } => ok(ok_reply(id, &chats.members().join(c, &chat).await?)),
        Op::Leave { chat } => {
            chats.members().leave(c, &s.outbox, &chat).await?;
            ok(ok_reply(id, &EmptyOk {}))
        }
        Op::Watch { chat, after } => {
            s.check_room(chats, &chat)?;
            let reply = |latest| Frame::from(ok_reply(id, &WatchOk { chat: chat.clone(), seq: latest }));
            chats.live().watch(c, &s.outbox, &chat, after, reply).await?;
            if !s.may_stay() {
                // The connection closed while the watch started: nobody else will end it.
                chats.live().unwatch(c, &s.outbox, &chat);
            }
            Ok(None)
        }
        Op::Unwatch { chat } => {
            chats.live().unwatch(c, &s.outbox, &chat);
            ok(ok_reply(id, &EmptyOk {}))
        }
        Op::Send { chat, body, client_id, thread, quote, mentions, stream, files } => {
            s.check_fence(&chat, client_id.as_deref())?;
            let conv = Conversation { thread, quote, mentions, stream, files };
            ok(ok_reply(id, &chats.writes().send(c, &chat, body, client_id, conv).await?))
        }
        Op::React { chat, target, emoji, on } => {
            ok(ok_reply(id, &chats.writes().react(c, &chat, target, emoji, on).await?))
        }
        Op::Read { chat, seq, thread } => ok(ok_reply(id, &chats.writes().read(c, &chat, seq, thread).await?)),
        Op::Fetch { chat, after, limit, thread: None } => {
            ok(chats.reads().fetch_reply(c, s.outbox.id(), id, &chat, after, limit).await?)
        }
        Op::Fetch { chat, after, limit, thread: Some(root) } => {
            ok(chats.reads().fetch_thread_reply(c, id, &chat, root, after, limit).await?)
        }
        Op::Typing { chat } => {
            chats.live().typing(c, &chat).await?;
            ok(ok_reply(id, &EmptyOk {}))
        }
        Op::Presence { chat } => ok(ok_reply(id, &chats.live().presence(c, &s.outbox, &chat).await?)),
        Op::Edit { chat, target, body, mentions, files } => {
            ok(ok_reply(id, &chats.writes().edit(c, &chat, target, body, mentions, files).await?))
        }
        Op::Delete { chat, target } => ok(ok_reply(id, &chats.writes().delete(c, &chat, target).await?)),
        Op::Inbox { limit, cursor, live: false } => {
            ok(ok_reply(id, &chats.inbox().page(&c.ws, &c.user, limit, cursor.as_deref()).await?))
        }
        Op::Inbox { limit, cursor, live: true } => {
            let Some((listener, setup)) = s.listen_inbox(chats) else {
                return Err(Error::Unavailable { message: "the connection is closing".into(), retry_after_ms: 1000 });
            };
            let page = chats.inbox().live_page(&listener, setup, c, limit, cursor.as_deref()).await?;
            // The reply first, then the pushes.
            s.outbox.push(Frame::from(ok_reply(id, &page)));
            chats.inbox().start(&listener);
            Ok(None)
        }
        Op::Hello { .. } | Op::Ping => unreachable!("answered by the connection itself"),
        // v1.2: conversations.
        Op::Profile { chat, patch } => ok(ok_reply(id, &chats.writes().profile(c, &chat, patch).await?)),
        Op::Members { chat, limit, cursor } => {
            ok(ok_reply(id, &chats.reads().members(c, &chat, limit, cursor.as_deref()).await?))
        }
        Op::Threads { chat, limit, cursor } => {
            ok(ok_reply(id, &chats.reads().threads(c, chat.as_deref(), limit, cursor.as_deref()).await?))
        }
        Op::Pin { chat, target, on } => ok(ok_reply(id, &chats.writes().pin(c, &chat, target, on).await?)),
        Op::Pins { chat } => ok(ok_reply(id, &chats.reads().pins(c, &chat).await?)),
        Op::Reactions { chat, target } => ok(ok_reply(id, &chats.reads().reactions(c, &chat, target).await?)),
        Op::Append { chat, target, text, done } => {
            ok(ok_reply(id, &chats.writes().append(c, &chat, target, text, done).await?))
        }
        Op::Upload { chat, file } => ok(ok_reply(id, &chats.writes().upload(c, &chat, file).await?)),
        Op::Search { query, chat, limit, cursor } => {
            ok(ok_reply(id, &chats.reads().search(c, &query, chat.as_deref(), limit, cursor.as_deref()).await?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Broker;
    use crate::broker::memory::MemoryBroker;
    use crate::chat::ChatLimits;
    use crate::hub::Hub;
    use crate::store::Store;
    use crate::store::sqlite::SqliteStore;

    /// The replies queued in `outbox`, by request id, as JSON.
    fn replies(outbox: &Outbox) -> Vec<serde_json::Value> {
        let mut frames = Vec::new();
        outbox.drain(usize::MAX, &mut frames);
        frames
            .iter()
            .map(|f| serde_json::from_str::<serde_json::Value>(f.as_str()).expect("JSON"))
            .filter(|v| v.get("id").is_some())
            .collect()
    }

    #[tokio::test]
    async fn a_connection_at_its_watch_cap_can_watch_again_once_a_leave_on_another_device_ended_a_watch() {
        let dir = tempfile::tempdir().expect("temp dir");
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path()).expect("store"));
        let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::new());
        let hub = Hub::new(broker.clone(), store.clone(), 0, 1 << 20);
        let limits = ChatLimits {
            settings: crate::chat::ChatSettings { body_limit: 1024, chat_join_rate: 0 },
            replay_events: 100,
            replay_bytes: 1 << 16,
        };
        let chats = Arc::new(Chats::new(store, broker, hub.clone(), limits));
        let bob = Caller { ws: "w".into(), user: "bob".into() };
        for chat in ["a", "b", "c"] {
            let key = ChatKey { ws: bob.ws.clone(), chat: chat.into() };
            chats.members().put_chat(key.clone(), true, None).await.expect("chat");
            chats.members().add_member(key, "bob").await.expect("member");
        }
        let laptop = Arc::new(Outbox::new(1, 1 << 20));
        let session = Arc::new(Session::new(bob.clone(), laptop.clone(), 2));
        let ask = |id: i64, chat: &str| {
            let op = Op::Watch { chat: chat.into(), after: None };
            handle(chats.clone(), session.clone(), Request { id, op })
        };
        ask(1, "a").await;
        ask(2, "b").await;
        ask(3, "c").await;
        let got = replies(&laptop);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0]["ok"].is_object() && got[1]["ok"].is_object(), "{got:?}");
        assert_eq!(got[2]["err"]["code"], "throttled", "at its cap of 2: {got:?}");

        // Bob leaves "a" on his phone: the hub ends the laptop's watch of it.
        let phone = Outbox::new(2, 1 << 20);
        chats.members().leave(&bob, &phone, "a").await.expect("leave");
        assert_eq!(hub.chats(), 1, "only b is watched now");

        ask(4, "c").await;
        let got = replies(&laptop);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0]["ok"].is_object(), "one watch left: a second fits again: {got:?}");
    }
}
