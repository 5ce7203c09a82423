//! The rules of chats: membership, join/leave/send/react/read/fetch/watch,
//! idempotency, limits. Knows chats, not sockets: a connection reaches here
//! as a [`Caller`] and, for watches, its [`Outbox`].
//!
//! Every durable write is followed by exactly one publish of its event, on a
//! task of its own: a caller that goes away mid-request cannot leave a stored
//! event unannounced.

mod conv;
mod erase;
mod export;
mod files;
mod find;
mod inbox;
mod live;
mod screen;
mod search;
pub mod settings;
pub use files::FileService;
mod stream;

pub use settings::ChatSettings;

use std::sync::Arc;
use std::time::Instant;

use herald_protocol::frame::{EventPush, ok_reply};
use herald_protocol::limits::FETCH_MAX;
use herald_protocol::reply::{ChatView, EmptyOk, FetchOk, JoinOk, SeqOk};
use serde_json::value::RawValue;

use crate::broker::Broker;
use crate::error::Error;
use crate::guard::JoinThrottle;
use crate::hooks::send::HookOp;
use crate::hub::{Hub, Replay};
use crate::model::{ChatKey, Published};
use crate::outbox::{ConnId, Frame, Outbox};
use crate::store::{Actor, Conversation, Store, Write, Written};
use herald_protocol::request::ProfilePatch;
use screen::Screened;

/// Longest a watch waits for the broker to confirm its subscription.
const SUBSCRIBE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

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

/// The chat service.
pub struct Chats {
    store: Arc<dyn Store>,
    broker: Arc<dyn Broker>,
    hub: Arc<Hub>,
    join_throttle: Option<JoinThrottle>,
    limits: ChatLimits,
    /// Asked before a client's `send` or `edit` is stored (`screen`).
    send_hook: Option<Arc<crate::hooks::send::SendHook>>,
    /// v1.2: streams' `append` pushes waiting for their turn.
    streams: Arc<stream::Streams>,
    /// v1.2: files, when kept (every server keeps them; some tests do not).
    files: Option<Arc<FileService>>,
}

impl Chats {
    pub fn new(store: Arc<dyn Store>, broker: Arc<dyn Broker>, hub: Arc<Hub>, limits: ChatLimits) -> Self {
        let join_throttle =
            (limits.settings.chat_join_rate > 0).then(|| JoinThrottle::new(limits.settings.chat_join_rate));
        let streams = stream::Streams::new(hub.clone());
        Chats { store, broker, hub, join_throttle, limits, send_hook: None, streams, files: None }
    }

    /// These chats with files kept by `files`; the hub signs the URLs of what it reads back too.
    pub fn with_files(mut self, files: Option<Arc<FileService>>) -> Self {
        if let Some(f) = &files {
            self.hub.set_file_urls(f.urls.clone());
        }
        self.files = files;
        self
    }

    /// These chats with `hook` screening clients' sends and edits.
    pub fn with_send_hook(mut self, hook: Option<Arc<crate::hooks::send::SendHook>>) -> Self {
        self.send_hook = hook;
        self
    }

    /// The largest event body accepted, serialized (`--body-limit`).
    pub fn body_limit(&self) -> usize {
        self.limits.settings.body_limit
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn broker(&self) -> &Arc<dyn Broker> {
        &self.broker
    }

    /// Applies `write` and publishes its event, on a task that finishes even if the caller goes away.
    async fn write(&self, write: Write) -> Result<Written, Error> {
        let (store, broker) = (self.store.clone(), self.broker.clone());
        let urls = self.file_urls().cloned();
        let task = tokio::spawn(async move {
            let key = write.key().clone();
            let started = Instant::now();
            let mut result = store.write(write).await;
            metrics::histogram!("herald_store_write_seconds").record(started.elapsed().as_secs_f64());
            if let Ok(Written { event: Some(event), .. }) = &mut result {
                if let Some(urls) = &urls {
                    urls.sign(&key, event);
                }
                broker.publish(Published::new(key, event)).await;
            }
            result
        });
        match task.await {
            Ok(result) => result.map_err(Error::from),
            Err(e) => {
                tracing::error!(error = %e, "write task failed");
                Err(Error::Internal("the write did not finish".into()))
            }
        }
    }

    fn check_body(&self, body: &RawValue) -> Result<(), Error> {
        if body.get().len() > self.limits.settings.body_limit {
            return Err(Error::TooLarge(format!("body is over {} bytes", self.limits.settings.body_limit)));
        }
        Ok(())
    }

    /// Joins `chat`, unless this node has admitted its cap of joins into the
    /// chat this second: then `throttled`, before the store sees anything.
    /// Joins through the server API are trusted and not counted.
    pub async fn join(&self, c: &Caller, chat: &str) -> Result<JoinOk, Error> {
        let key = c.key(chat);
        if let Some(throttle) = &self.join_throttle
            && let Err(retry_after_ms) = throttle.admit(&key, Instant::now())
        {
            metrics::counter!("herald_joins_throttled_total").increment(1);
            return Err(Error::Throttled { message: "joins to this chat are throttled".into(), retry_after_ms });
        }
        let w = self.write(Write::Join { key: key.clone(), user: c.user.clone(), actor: Actor::Client }).await?;
        // The profile once the chat has one: a chat without keeps v1's answer (and costs no read).
        let profile = match w.info.profiled {
            true => self.store.chat_view(&key).await?.map(|(_, p)| p).filter(|p| !p.is_empty()),
            false => None,
        };
        Ok(JoinOk { chat: chat.to_string(), seq: w.seq, members: w.info.members, profile })
    }

    /// Leaves `chat`. The stored `leave` event ends this user's watches on every
    /// node when the hub sees it; `outbox`'s own watch ends here in any case.
    pub async fn leave(&self, c: &Caller, outbox: &Outbox, chat: &str) -> Result<(), Error> {
        let key = c.key(chat);
        self.write(Write::Leave { key: key.clone(), user: c.user.clone(), actor: Actor::Client }).await?;
        self.hub.unwatch(&key, outbox.id());
        Ok(())
    }

    /// A member's message; v1.2's `conv` places it in a thread, quotes, mentions and streams.
    pub async fn send(
        &self,
        c: &Caller,
        chat: &str,
        body: Box<RawValue>,
        client_id: Option<String>,
        conv: Conversation,
    ) -> Result<SeqOk, Error> {
        self.check_body(&body)?;
        let key = c.key(chat);
        let body = match self.screen(c, &key, HookOp::Send, body, client_id.as_deref(), None).await? {
            Screened::Store(body) => body,
            Screened::Already(ok) => return Ok(ok),
        };
        if conv.stream {
            herald_protocol::args::check_stream_body(&body).map_err(Error::BadRequest)?;
        }
        if let Some(ids) = &conv.files {
            self.check_uploaded(&key, Some(&c.user), ids).await?;
        }
        let user = Some(c.user.clone());
        let w =
            self.write(Write::Append { key, user, system: false, body, client_id, member_only: true, conv }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    pub async fn react(&self, c: &Caller, chat: &str, target: u64, emoji: String, on: bool) -> Result<SeqOk, Error> {
        let w = self.write(Write::React { key: c.key(chat), user: c.user.clone(), target, emoji, on }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// Moves the user's read position in the chat, or (v1.2) in the thread under root `thread`.
    pub async fn read(&self, c: &Caller, chat: &str, seq: u64, thread: Option<u64>) -> Result<SeqOk, Error> {
        let w = self.write(Write::Read { key: c.key(chat), user: c.user.clone(), seq, thread }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    pub async fn fetch(&self, c: &Caller, chat: &str, after: u64, limit: Option<u32>) -> Result<FetchOk, Error> {
        self.fetch_as(&c.key(chat), Some(&c.user), after, limit).await
    }

    /// The encoded reply to `fetch` request `id` of connection `conn`:
    /// from the hub's window of the chat's recent events when that is exact
    /// (see [`Hub::cached_fetch`]), else from the store. Both give the same
    /// bytes for the same events, with the same limits.
    pub async fn fetch_reply(
        &self,
        c: &Caller,
        conn: ConnId,
        id: i64,
        chat: &str,
        after: u64,
        limit: Option<u32>,
    ) -> Result<String, Error> {
        let key = c.key(chat);
        let max = limit.unwrap_or(herald_protocol::limits::FETCH_DEFAULT).clamp(1, FETCH_MAX);
        if let Some(page) = self.hub.cached_fetch(&key, conn, &c.user, after, max, self.limits.replay_bytes) {
            return Ok(page.encode_reply(id));
        }
        let page = self.fetch_as(&key, Some(&c.user), after, limit).await?;
        Ok(ok_reply(id, &page))
    }

    /// Events of `key` after `after`, at most `limit` of them and at most
    /// [`ChatLimits::replay_bytes`] of encoded events (always at least one):
    /// a page cut short by size says `more`, and the client asks again.
    async fn fetch_as(
        &self,
        key: &ChatKey,
        member: Option<&str>,
        after: u64,
        limit: Option<u32>,
    ) -> Result<FetchOk, Error> {
        let limit = limit.unwrap_or(herald_protocol::limits::FETCH_DEFAULT).clamp(1, FETCH_MAX);
        let mut f = self.store.fetch(key, member, after, limit).await?;
        if let Some(urls) = self.file_urls() {
            urls.sign_all(key, &mut f.events);
        }
        let mut bytes = 0usize;
        let fits = f.events.iter().position(|e| {
            bytes += encoded_len(e);
            bytes > self.limits.replay_bytes
        });
        let more = match fits {
            Some(cut) => {
                f.events.truncate(cut.max(1));
                metrics::counter!("herald_fetch_pages_cut_total").increment(1);
                true
            }
            None => f.more,
        };
        Ok(FetchOk { events: f.events, seq: f.info.seq, more })
    }

    /// Starts `outbox`'s watch of `chat`: pushes the reply made by `reply`
    /// (given the chat's latest seq), then every event after `after` (or none
    /// without it), then live events. See the hub for why this cannot miss one.
    pub async fn watch(
        &self,
        c: &Caller,
        outbox: &Arc<Outbox>,
        chat: &str,
        after: Option<u64>,
        reply: impl FnOnce(u64) -> Frame,
    ) -> Result<(), Error> {
        let key = c.key(chat);
        self.hub.begin_watch(&key, &c.user, outbox);
        // Until the watch is live, a failure or a cancelled request (its
        // timeout, its connection closing) ends the half-started watch.
        let mut starting = Starting { hub: &self.hub, key: &key, conn: outbox.id(), live: false };
        // Read the log only once other nodes' events reach this node, or one could fall in between.
        if tokio::time::timeout(SUBSCRIBE_WAIT, self.broker.subscribed(&key)).await.is_err() {
            tracing::warn!(chat = %key, "broker subscription not confirmed in time; the hub will backfill");
        }
        let (latest, frames, truncated) = self.read_replay(&key, &c.user, after).await?;
        starting.live =
            self.hub.finish_watch(&key, outbox.id(), Replay { reply: reply(latest), latest, frames, truncated });
        if !starting.live {
            // A `leave` of this user ended the watch while it started.
            return Err(Error::Forbidden(format!("not a member of {chat}")));
        }
        Ok(())
    }

    /// Reads what a watch replays: the chat's latest seq, the events after
    /// `after` within the replay limits, and whether they were cut short. An
    /// `after` beyond the log's end (a client restored from an old backup)
    /// replays nothing; the watch goes live from the log's real end, and the
    /// reply's `seq` tells the client where that is.
    async fn read_replay(
        &self,
        key: &ChatKey,
        user: &str,
        after: Option<u64>,
    ) -> Result<(u64, Vec<(u64, Frame)>, bool), Error> {
        let Some(mut after) = after else {
            let f = self.store.fetch(key, Some(user), 0, 0).await?;
            return Ok((f.info.seq, Vec::new(), false));
        };
        let (mut frames, mut bytes) = (Vec::new(), 0usize);
        // The membership check and the chat's head, then its events from the
        // hub's window when that holds all of them up to that head.
        let head = self.store.fetch(key, Some(user), after, 0).await?.info.seq;
        if after >= head {
            return Ok((head, Vec::new(), false));
        }
        if let Some(cached) = self.hub.cached_replay(key, after, head) {
            for (seq, frame) in cached {
                bytes += frame.as_str().len();
                if frames.len() >= self.limits.replay_events || bytes > self.limits.replay_bytes {
                    return Ok((head, frames, true));
                }
                frames.push((seq, frame));
            }
            return Ok((head, frames, false));
        }
        loop {
            let mut f = self.store.fetch(key, Some(user), after, FETCH_MAX).await?;
            if let Some(urls) = self.file_urls() {
                urls.sign_all(key, &mut f.events);
            }
            for e in &f.events {
                let frame = Frame::from(EventPush::new(&key.chat, e).encode());
                bytes += frame.as_str().len();
                if frames.len() >= self.limits.replay_events || bytes > self.limits.replay_bytes {
                    return Ok((f.info.seq, frames, true));
                }
                frames.push((e.seq, frame));
            }
            match f.events.last() {
                Some(last) if f.more => after = last.seq,
                _ => return Ok((f.info.seq, frames, false)),
            }
        }
    }

    pub fn unwatch(&self, c: &Caller, outbox: &Outbox, chat: &str) {
        self.hub.unwatch(&c.key(chat), outbox.id());
    }

    /// Ends every watch of a closing connection.
    pub fn unwatch_conn(&self, outbox: &Outbox) {
        self.hub.unwatch_conn(outbox.id());
    }

    // The server API: trusted callers, acting on any member.

    /// Creates the chat or sets whether it is open, and (v1.2) changes its profile as `patch`
    /// says (a change stores a `profile` event with no user).
    pub async fn put_chat(&self, key: ChatKey, open: bool, patch: Option<ProfilePatch>) -> Result<ChatView, Error> {
        self.write(Write::PutChat { key: key.clone(), open }).await?;
        if let Some(patch) = patch {
            self.write(Write::Profile { key: key.clone(), user: None, actor: Actor::Admin, patch }).await?;
        }
        self.get_chat(key).await
    }

    pub async fn get_chat(&self, key: ChatKey) -> Result<ChatView, Error> {
        match self.store.chat_view(&key).await? {
            Some((info, profile)) => {
                Ok(ChatView::new(key.chat.to_string(), info.seq, info.members, info.open, profile))
            }
            None => Err(Error::NotFound(format!("no chat {}", key.chat))),
        }
    }

    pub async fn add_member(&self, key: ChatKey, user: &str) -> Result<SeqOk, Error> {
        let w = self.write(Write::Join { key, user: user.into(), actor: Actor::Admin }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    pub async fn remove_member(&self, key: ChatKey, user: &str) -> Result<SeqOk, Error> {
        let w = self.write(Write::Leave { key, user: user.into(), actor: Actor::Admin }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// The server API's event; v1.2's `conv` as a client's `send` takes it (a `system` event takes none).
    pub async fn post_event(
        &self,
        key: ChatKey,
        system: bool,
        user: Option<&str>,
        body: Box<RawValue>,
        client_id: Option<String>,
        conv: Conversation,
    ) -> Result<SeqOk, Error> {
        self.check_body(&body)?;
        if conv.stream {
            herald_protocol::args::check_stream_body(&body).map_err(Error::BadRequest)?;
        }
        if let Some(ids) = &conv.files {
            self.check_uploaded(&key, user, ids).await?;
        }
        let user = user.map(Arc::from);
        let w = self.write(Write::Append { key, user, system, body, client_id, member_only: false, conv }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    pub async fn admin_fetch(&self, key: ChatKey, after: u64, limit: Option<u32>) -> Result<FetchOk, Error> {
        self.fetch_as(&key, None, after, limit).await
    }

    // v1.1: the message lifecycle, moderation and the inbox.

    /// A member's `edit` of their own message `target`; v1.2's `mentions` replace the message's.
    pub async fn edit(
        &self,
        c: &Caller,
        chat: &str,
        target: u64,
        body: Box<RawValue>,
        mentions: Option<Vec<String>>,
        files: Option<Vec<String>>,
    ) -> Result<SeqOk, Error> {
        self.check_body(&body)?;
        let key = c.key(chat);
        if let Some(ids) = &files {
            self.check_uploaded(&key, Some(&c.user), ids).await?;
        }
        let body = match self.screen(c, &key, HookOp::Edit, body, None, Some(target)).await? {
            Screened::Store(body) => body,
            Screened::Already(ok) => return Ok(ok),
        };
        let user = Some(c.user.clone());
        let w = self.write(Write::Edit { key, user, actor: Actor::Client, target, body, mentions, files }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// A member's `delete` of their own message `target`.
    pub async fn delete(&self, c: &Caller, chat: &str, target: u64) -> Result<SeqOk, Error> {
        let user = Some(c.user.clone());
        let w = self.write(Write::Delete { key: c.key(chat), user, actor: Actor::Client, target }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// The server API's edit of any message, by `user` if given.
    pub async fn admin_edit(
        &self,
        key: ChatKey,
        target: u64,
        body: Box<RawValue>,
        user: Option<&str>,
        files: Option<Vec<String>>,
    ) -> Result<SeqOk, Error> {
        self.check_body(&body)?;
        if let Some(ids) = &files {
            self.check_uploaded(&key, None, ids).await?;
        }
        let user = user.map(Arc::from);
        let w = self.write(Write::Edit { key, user, actor: Actor::Admin, target, body, mentions: None, files }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// The server API's delete of any message.
    pub async fn admin_delete(&self, key: ChatKey, target: u64) -> Result<SeqOk, Error> {
        let w = self.write(Write::Delete { key, user: None, actor: Actor::Admin, target }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// Bans `user` (a `leave` event if they were a member), or lifts the ban.
    pub async fn set_ban(&self, key: ChatKey, user: &str, banned: bool) -> Result<EmptyOk, Error> {
        self.write(Write::Ban { key, user: user.into(), banned }).await?;
        Ok(EmptyOk {})
    }

    /// Mutes `user` until `until_ms` (without it, until unmuted), or unmutes.
    pub async fn set_mute(
        &self,
        key: ChatKey,
        user: &str,
        muted: bool,
        until_ms: Option<i64>,
    ) -> Result<EmptyOk, Error> {
        self.write(Write::Mute { key, user: user.into(), muted, until_ms }).await?;
        Ok(EmptyOk {})
    }
}

/// A watch between [`Hub::begin_watch`] and [`Hub::finish_watch`]: if it is
/// dropped before it went live, the hub forgets it.
struct Starting<'a> {
    hub: &'a Hub,
    key: &'a ChatKey,
    conn: crate::outbox::ConnId,
    live: bool,
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        if !self.live {
            self.hub.unwatch(self.key, self.conn);
        }
    }
}

/// The length of `event` in a fetch reply: its JSON encoding, counted, not built.
fn encoded_len(event: &herald_protocol::Event) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = serde_json::to_writer(&mut count, event);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Sink;
    use crate::broker::memory::MemoryBroker;
    use crate::model::ChatInfo;
    use crate::store::{BoxFuture, EventLog, Fetched, StoreError};
    use herald_protocol::{Event, EventType};

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
                chats.watch(&alice, &other, "room", None, |_| Frame::from("{}")).await.unwrap();
            }
            let outbox = Arc::new(Outbox::new(1, 1 << 20));
            let watch = {
                let (chats, outbox) = (chats.clone(), outbox.clone());
                tokio::spawn(async move { chats.watch(&caller, &outbox, "room", None, |_| Frame::from("{}")).await })
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
            tokio::spawn(async move { chats.watch(&caller, &outbox, "room", None, |_| Frame::from("{}")).await })
        };
        until(|| hub.chats() == 1).await;
        // The request's timeout, or its connection closing, drops it mid-read.
        watch.abort();
        let _ = watch.await;
        assert_eq!(hub.chats(), 0, "the half-started watch was forgotten");
        drop(log);
    }
}
