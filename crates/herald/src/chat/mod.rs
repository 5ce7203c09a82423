//! The rules of chats, by concern: a connection or the server API reaches here as a [`Caller`]
//! (or a [`ChatKey`]) and, for watches, its [`Outbox`]; this layer knows chats, not sockets.
//!
//! | part | what it owns | file |
//! |---|---|---|
//! | [`Writes`] | the write path: `send`, `edit`, `delete`, `react`, `read`, `profile`, `pin`, `append`, `upload`, the server API's posts | `writes.rs`, `stream.rs`, `files.rs` |
//! | [`Members`] | membership and moderation: `join` (throttled), `leave`, the server API's chats, members, bans, mutes, erasure | `members.rs`, `erase.rs` |
//! | [`Reads`] | `fetch`, lists, threads, pins, reactions, chats by prefix, `search`, a user's export | `reads.rs`, `search.rs`, `export.rs` |
//! | [`Inbox`] | inbox pages and live inboxes | `inbox.rs` |
//! | [`Live`] | watches, typing, presence | `live.rs` |
//!
//! Every part borrows one [`Ground`](ground::Ground): the store, broker and hub, the limits,
//! the send hook, files and streams. The API and the gateway call the parts, never what is
//! behind them. Every durable write is followed by exactly one publish of its event, on a task
//! of its own ([`ground::Ground::write`]): a caller that goes away mid-request cannot leave a
//! stored event unannounced.

mod erase;
mod export;
mod files;
mod ground;
mod inbox;
mod live;
mod members;
mod reads;
mod screen;
mod search;
pub mod settings;
mod stream;
#[cfg(test)]
mod window_tests;
mod writes;

pub use export::ExportBody;
pub use files::FileService;
pub use inbox::Inbox;
pub use live::Live;
pub use members::Members;
pub use reads::Reads;
pub use settings::ChatSettings;
pub use writes::Writes;

use std::sync::Arc;

use crate::broker::Broker;
use crate::guard::JoinThrottle;
use crate::hub::Hub;
use crate::model::ChatKey;
use crate::store::{ShardStatus, Store};
use ground::Ground;

/// Limits the chat layer enforces: its flags, and the replay bounds that
/// follow from the outbound queue.
#[derive(Debug, Clone)]
pub struct ChatLimits {
    pub settings: ChatSettings,
    /// Most events one `watch` replays before it sends `notify` instead.
    pub replay_events: usize,
    /// Most bytes one `watch` replays, and most bytes of events in one
    /// `fetch` reply: keeps either well inside the outbound queue, so a
    /// client's own read never closes its connection with 4008.
    pub replay_bytes: usize,
}

/// Most events a `watch` replays before it sends `notify` instead.
pub const REPLAY_EVENTS: usize = 5_000;

impl ChatLimits {
    /// The limits of a node whose connections queue at most `outbox_limit`
    /// bytes: a watch's replay fits in half of it.
    pub fn new(settings: ChatSettings, outbox_limit: usize) -> ChatLimits {
        ChatLimits { settings, replay_events: REPLAY_EVENTS, replay_bytes: outbox_limit / 2 }
    }
}

/// A user acting over a connection: identity comes only from the token.
#[derive(Debug, Clone)]
pub struct Caller {
    pub ws: Arc<str>,
    pub user: Arc<str>,
}

impl Caller {
    fn key(&self, chat: &str) -> ChatKey {
        ChatKey { ws: self.ws.clone(), chat: chat.into() }
    }
}

/// The chat service: its parts over one [`Ground`]; see the module's documentation.
pub struct Chats {
    ground: Ground,
}

/// Whether the node's store and broker answer, for `/readyz`.
pub struct Readiness {
    pub store: bool,
    pub broker: bool,
    /// With PostgreSQL shards: each one's breaker.
    pub shards: Vec<ShardStatus>,
}

impl Chats {
    pub fn new(store: Arc<dyn Store>, broker: Arc<dyn Broker>, hub: Arc<Hub>, limits: ChatLimits) -> Self {
        let join_throttle =
            (limits.settings.chat_join_rate > 0).then(|| JoinThrottle::new(limits.settings.chat_join_rate));
        let streams = stream::Streams::new(hub.clone());
        let ground = Ground { store, broker, hub, join_throttle, limits, send_hook: None, streams, files: None };
        Chats { ground }
    }

    /// These chats with files kept by `files` (their URLs are signed by the store they were given,
    /// [`crate::files::signed::SignedStore`]).
    pub fn with_files(mut self, files: Option<Arc<FileService>>) -> Self {
        self.ground.files = files;
        self
    }

    /// These chats with `hook` screening clients' sends and edits.
    pub fn with_send_hook(mut self, hook: Option<Arc<crate::hooks::send::SendHook>>) -> Self {
        self.ground.send_hook = hook;
        self
    }

    /// The write path.
    pub fn writes(&self) -> Writes<'_> {
        Writes::new(&self.ground)
    }

    /// Membership and moderation.
    pub fn members(&self) -> Members<'_> {
        Members::new(&self.ground)
    }

    /// The reads.
    pub fn reads(&self) -> Reads<'_> {
        Reads::new(&self.ground)
    }

    /// Inbox pages and live inboxes.
    pub fn inbox(&self) -> Inbox<'_> {
        Inbox::new(&self.ground)
    }

    /// Watches, typing and presence.
    pub fn live(&self) -> Live<'_> {
        Live::new(&self.ground)
    }

    /// The largest event body accepted, serialized (`--body-limit`).
    pub fn body_limit(&self) -> usize {
        self.ground.limits.settings.body_limit
    }

    /// The routes of the embedded files backend's URLs, when this node serves them.
    pub fn local_files(&self) -> Option<crate::files::serve::Served> {
        self.ground.files.as_ref()?.served.clone()
    }

    /// Whether the store and the broker answer now.
    pub async fn readiness(&self) -> Readiness {
        let store = self.ground.store.ready().await.is_ok();
        Readiness { store, broker: self.broker_ready(), shards: self.shards() }
    }

    /// The store's shards (PostgreSQL), each with its breaker; none for the embedded store.
    pub fn shards(&self) -> Vec<ShardStatus> {
        self.ground.store.shards()
    }

    /// Whether the broker is connected.
    pub fn broker_ready(&self) -> bool {
        self.ground.broker.ready()
    }

    /// How many chats this node's hub holds (watched, or with a live inbox following them).
    pub fn watched_chats(&self) -> usize {
        self.ground.hub.chats()
    }
}

#[cfg(test)]
mod tests {
    use herald_protocol::{Event, EventType};
    use serde_json::value::RawValue;

    use super::*;
    use crate::broker::Sink;
    use crate::broker::memory::MemoryBroker;
    use crate::model::{ChatInfo, Published};
    use crate::outbox::{Frame, Outbox};
    use crate::store::{BoxFuture, EventLog, Fetched, StoreError, Write, Written};

    /// A log of one chat at seq `latest` whose reads wait until `gate` opens.
    struct GatedLog {
        latest: u64,
        gate: tokio::sync::Semaphore,
    }

    impl EventLog for GatedLog {
        fn write(&self, _write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
            Box::pin(std::future::ready(Err(StoreError::Unavailable("read-only".into()))))
        }
        fn chat(&self, _key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
            Box::pin(std::future::ready(Ok(Some(ChatInfo {
                seq: self.latest,
                members: 1,
                open: true,
                profiled: false,
            }))))
        }
        fn fetch<'a>(
            &'a self,
            _key: &'a ChatKey,
            _member: Option<&'a str>,
            _after: u64,
            _limit: u32,
        ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
            Box::pin(async move {
                // Each read takes one permit for good.
                self.gate.acquire().await.map_err(|_| StoreError::Unavailable("closed".into()))?.forget();
                Ok(Fetched {
                    events: vec![],
                    info: ChatInfo { seq: self.latest, members: 1, open: true, profiled: false },
                    more: false,
                })
            })
        }
        fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
            Box::pin(std::future::ready(Ok(keys.iter().map(|_| Some(self.latest)).collect())))
        }
        fn client_id_seq<'a>(
            &'a self,
            _key: &'a ChatKey,
            _user: &'a str,
            _client_id: &'a str,
        ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
            Box::pin(std::future::ready(Ok(None)))
        }
    }

    crate::store::not_kept!(GatedLog: Lifecycle, Membership, Moderation, RevocationList, WebhookPositions, Conversations, Files, Export, Search);

    fn chats(latest: u64) -> (Arc<Chats>, Arc<GatedLog>, Arc<Hub>) {
        let log = Arc::new(GatedLog { latest, gate: tokio::sync::Semaphore::new(0) });
        let broker: Arc<dyn Broker> = Arc::new(MemoryBroker::new());
        let hub = Hub::new(broker.clone(), log.clone(), 0, 1 << 20);
        let limits = ChatLimits {
            settings: ChatSettings { body_limit: 1024, chat_join_rate: 0 },
            replay_events: 100,
            replay_bytes: 1 << 16,
        };
        (Arc::new(Chats::new(log.clone(), broker, hub.clone(), limits)), log, hub)
    }

    fn leave(key: &ChatKey, user: &str, seq: u64) -> Arc<Published> {
        let body = RawValue::from_string("{}".into()).unwrap();
        let e = Event::new(seq, EventType::Leave, Some(user.into()), 0, body);
        Published::new(key.clone(), &e)
    }

    async fn until(what: impl Fn() -> bool) {
        for _ in 0..1000 {
            if what() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        panic!("condition not reached in 1 s");
    }

    #[tokio::test]
    async fn a_leave_while_a_watch_starts_ends_it_after_its_reply() {
        for started in [false, true] {
            let (chats, log, hub) = chats(5);
            let caller = Caller { ws: "w".into(), user: "bob".into() };
            let key = caller.key("room");
            if started {
                // Another member already watches: the chat's sequencer runs.
                let other = Arc::new(Outbox::new(9, 1 << 20));
                log.gate.add_permits(1);
                let alice = Caller { ws: "w".into(), user: "alice".into() };
                chats.live().watch(&alice, &other, "room", None, |_| Frame::from("{}")).await.unwrap();
            }
            let outbox = Arc::new(Outbox::new(1, 1 << 20));
            let watch = {
                let (chats, outbox) = (chats.clone(), outbox.clone());
                tokio::spawn(
                    async move { chats.live().watch(&caller, &outbox, "room", None, |_| Frame::from("{}")).await },
                )
            };
            until(|| hub.chats() == 1 && log.gate.available_permits() == 0).await;
            tokio::task::yield_now().await;
            // Bob leaves on another device while his watch's replay is read.
            hub.deliver(leave(&key, "bob", 6));
            log.gate.add_permits(1);
            // The leave comes after the watch's read (seq 5): the watch gets
            // its reply, then the leave that ends it, and nothing after.
            let answer = watch.await.unwrap();
            assert!(answer.is_ok(), "started={started}: {answer:?}");
            hub.deliver(message(&key, 7));
            let mut frames = Vec::new();
            outbox.drain(usize::MAX, &mut frames);
            let frames: Vec<&str> = frames.iter().map(|f| f.as_str()).collect();
            assert_eq!(frames.len(), 2, "started={started}: {frames:?}");
            assert_eq!(frames[0], "{}");
            assert!(frames[1].contains(r#""type":"leave""#) && frames[1].contains(r#""seq":6"#), "{frames:?}");
        }
    }

    fn message(key: &ChatKey, seq: u64) -> Arc<Published> {
        let body = RawValue::from_string("{}".into()).unwrap();
        let e = Event::new(seq, EventType::Message, Some("alice".into()), 0, body);
        Published::new(key.clone(), &e)
    }

    #[tokio::test]
    async fn a_watch_cancelled_while_it_starts_leaves_nothing_registered() {
        let (chats, log, hub) = chats(5);
        let outbox = Arc::new(Outbox::new(1, 1 << 20));
        let watch = {
            let (chats, outbox) = (chats.clone(), outbox.clone());
            let caller = Caller { ws: "w".into(), user: "bob".into() };
            tokio::spawn(async move { chats.live().watch(&caller, &outbox, "room", None, |_| Frame::from("{}")).await })
        };
        until(|| hub.chats() == 1).await;
        // The request's timeout, or its connection closing, drops it mid-read.
        watch.abort();
        let _ = watch.await;
        assert_eq!(hub.chats(), 0, "the half-started watch was forgotten");
        drop(log);
    }
}
