//! Membership and moderation: a member's `join` (throttled per chat on this node) and `leave`,
//! and the server API's chats, members, bans and mutes. A `leave` ends the user's watches on
//! every node when the hub sees its event. Erasing a user is here too (`erase.rs`).

use std::time::Instant;

use herald_protocol::reply::{ChatView, EmptyOk, JoinOk, SeqOk};
use herald_protocol::request::ProfilePatch;

use super::Caller;
use super::ground::Ground;
use crate::error::Error;
use crate::model::ChatKey;
use crate::outbox::Outbox;
use crate::store::{Actor, Write};

/// Membership and moderation; see the module's documentation.
#[derive(Clone, Copy)]
pub struct Members<'a> {
    pub(super) g: &'a Ground,
}

impl<'a> Members<'a> {
    pub(super) fn new(g: &'a Ground) -> Members<'a> {
        Members { g }
    }

    /// Joins `chat`, unless this node has admitted its cap of joins into the
    /// chat this second: then `throttled`, before the store sees anything.
    /// Joins through the server API are trusted and not counted.
    pub async fn join(&self, c: &Caller, chat: &str) -> Result<JoinOk, Error> {
        let key = c.key(chat);
        if let Some(throttle) = &self.g.join_throttle
            && let Err(retry_after_ms) = throttle.admit(&key, Instant::now())
        {
            metrics::counter!("herald_joins_throttled_total").increment(1);
            return Err(Error::Throttled { message: "joins to this chat are throttled".into(), retry_after_ms });
        }
        let w = self.g.write(Write::Join { key: key.clone(), user: c.user.clone(), actor: Actor::Client }).await?;
        // The profile once the chat has one: a chat without keeps v1's answer (and costs no read).
        let profile = match w.info.profiled {
            true => self.g.store.chat_view(&key).await?.map(|(_, p)| p).filter(|p| !p.is_empty()),
            false => None,
        };
        Ok(JoinOk { chat: chat.to_string(), seq: w.seq, members: w.info.members, profile })
    }

    /// Leaves `chat`. The stored `leave` event ends this user's watches on every
    /// node when the hub sees it; `outbox`'s own watch ends here in any case.
    pub async fn leave(&self, c: &Caller, outbox: &Outbox, chat: &str) -> Result<(), Error> {
        let key = c.key(chat);
        self.g.write(Write::Leave { key: key.clone(), user: c.user.clone(), actor: Actor::Client }).await?;
        self.g.hub.unwatch(&key, outbox.id());
        Ok(())
    }

    /// Creates the chat or sets whether it is open, and (v1.2) changes its profile as `patch`
    /// says (a change stores a `profile` event with no user).
    pub async fn put_chat(&self, key: ChatKey, open: bool, patch: Option<ProfilePatch>) -> Result<ChatView, Error> {
        self.g.write(Write::PutChat { key: key.clone(), open }).await?;
        if let Some(patch) = patch {
            self.g.write(Write::Profile { key: key.clone(), user: None, actor: Actor::Admin, patch }).await?;
        }
        self.get_chat(key).await
    }

    pub async fn get_chat(&self, key: ChatKey) -> Result<ChatView, Error> {
        match self.g.store.chat_view(&key).await? {
            Some((info, profile)) => {
                Ok(ChatView::new(key.chat.to_string(), info.seq, info.members, info.open, profile))
            }
            None => Err(Error::NotFound(format!("no chat {}", key.chat))),
        }
    }

    pub async fn add_member(&self, key: ChatKey, user: &str) -> Result<SeqOk, Error> {
        let w = self.g.write(Write::Join { key, user: user.into(), actor: Actor::Admin }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    pub async fn remove_member(&self, key: ChatKey, user: &str) -> Result<SeqOk, Error> {
        let w = self.g.write(Write::Leave { key, user: user.into(), actor: Actor::Admin }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// Bans `user` (a `leave` event if they were a member), or lifts the ban.
    pub async fn set_ban(&self, key: ChatKey, user: &str, banned: bool) -> Result<EmptyOk, Error> {
        self.g.write(Write::Ban { key, user: user.into(), banned }).await?;
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
        self.g.write(Write::Mute { key, user: user.into(), muted, until_ms }).await?;
        Ok(EmptyOk {})
    }
}
