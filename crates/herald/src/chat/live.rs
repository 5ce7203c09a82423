//! What a connection follows live: its watches (a replay, then live events, with no gap and no
//! duplicate: see the hub), typing and presence. Neither typing nor presence is stored; the hub
//! carries both (`hub/presence/`). Members only; a muted member's typing is refused.

use std::sync::Arc;
use std::time::Instant;

use herald_protocol::frame::EventPush;
use herald_protocol::limits::FETCH_MAX;
use herald_protocol::reply::PresenceOk;

use super::Caller;
use super::ground::Ground;
use crate::error::Error;
use crate::hub::{Hub, Replay};
use crate::model::ChatKey;
use crate::outbox::{ConnId, Frame, Outbox};

/// Longest a watch waits for the broker to confirm its subscription.
const SUBSCRIBE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Watches, typing and presence; see the module's documentation.
#[derive(Clone, Copy)]
pub struct Live<'a> {
    pub(super) g: &'a Ground,
}

impl<'a> Live<'a> {
    pub(super) fn new(g: &'a Ground) -> Live<'a> {
        Live { g }
    }

    /// Whether one more watch of `key` fits `conn`'s cap of `max` (a watch of a chat already
    /// watched replaces it), counted by the hub, which owns the connection's watches.
    pub fn has_room(&self, conn: ConnId, key: &ChatKey, max: usize) -> bool {
        self.g.hub.has_room(conn, key, max)
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
        self.g.hub.begin_watch(&key, &c.user, outbox);
        // Until the watch is live, a failure or a cancelled request (its
        // timeout, its connection closing) ends the half-started watch.
        let mut starting = Starting { hub: &self.g.hub, key: &key, conn: outbox.id(), live: false };
        // Read the log only once other nodes' events reach this node, or one could fall in between.
        if tokio::time::timeout(SUBSCRIBE_WAIT, self.g.broker.subscribed(&key)).await.is_err() {
            tracing::warn!(chat = %key, "broker subscription not confirmed in time; the hub will backfill");
        }
        let (latest, frames, truncated) = self.read_replay(&key, &c.user, after).await?;
        starting.live =
            self.g.hub.finish_watch(&key, outbox.id(), Replay { reply: reply(latest), latest, frames, truncated });
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
            let f = self.g.store.fetch(key, Some(user), 0, 0).await?;
            return Ok((f.info.seq, Vec::new(), false));
        };
        let (mut frames, mut bytes) = (Vec::new(), 0usize);
        // The membership check and the chat's head, then its events from the
        // hub's window when that holds all of them up to that head.
        let head = self.g.store.fetch(key, Some(user), after, 0).await?.info.seq;
        if after >= head {
            return Ok((head, Vec::new(), false));
        }
        if let Some(cached) = self.g.hub.cached_replay(key, after, head) {
            for (seq, frame) in cached {
                bytes += frame.as_str().len();
                if frames.len() >= self.g.limits.replay_events || bytes > self.g.limits.replay_bytes {
                    return Ok((head, frames, true));
                }
                frames.push((seq, frame));
            }
            return Ok((head, frames, false));
        }
        loop {
            let f = self.g.store.fetch(key, Some(user), after, FETCH_MAX).await?;
            for e in &f.events {
                let frame = Frame::from(EventPush::new(&key.chat, e).encode());
                bytes += frame.as_str().len();
                if frames.len() >= self.g.limits.replay_events || bytes > self.g.limits.replay_bytes {
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
        self.g.hub.unwatch(&c.key(chat), outbox.id());
    }

    /// Ends every watch of a closing connection.
    pub fn unwatch_conn(&self, outbox: &Outbox) {
        self.g.hub.unwatch_conn(outbox.id());
    }

    /// `user` is typing in `chat`: members only; pushed at most once per
    /// `hub::TYPING_EVERY`, requests inside that window answered and not pushed.
    pub async fn typing(&self, c: &Caller, chat: &str) -> Result<(), Error> {
        let key = c.key(chat);
        self.g.check_member(&key, &c.user, true).await?;
        if self.g.hub.admit_typing(&key, &c.user, Instant::now()) {
            self.g.hub.typing(&key, &c.user);
        } else {
            metrics::counter!("herald_typing_throttled_total").increment(1);
        }
        Ok(())
    }

    /// Who is present in `chat`: members only. If `outbox`'s connection
    /// watches the chat, that watch gets presence pushes from now on.
    pub async fn presence(&self, c: &Caller, outbox: &Outbox, chat: &str) -> Result<PresenceOk, Error> {
        let key = c.key(chat);
        self.g.check_member(&key, &c.user, false).await?;
        Ok(self.g.hub.presence(&key, Some(outbox.id())).await)
    }

    /// Who is present in `key`, for the server API (404 when there is no such chat).
    pub async fn admin_presence(&self, key: ChatKey) -> Result<PresenceOk, Error> {
        if self.g.store.chat(&key).await?.is_none() {
            return Err(Error::NotFound(format!("no chat {}", key.chat)));
        }
        Ok(self.g.hub.presence(&key, None).await)
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
