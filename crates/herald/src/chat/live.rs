//! The chat rules of typing and presence: who may ask, and the throttle.
//! Neither is stored; the hub carries both (see `hub::live`).

use std::sync::Arc;
use std::time::Instant;

use herald_protocol::reply::PresenceOk;

use super::{Caller, Chats};
use crate::error::Error;
use crate::hub::Hub;
use crate::model::ChatKey;
use crate::outbox::Outbox;

impl Chats {
    /// The hub, for the server's wiring (presence needs to know the cell).
    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Fails unless `user` is a member of `key` (`forbidden`; `not_found` for
    /// no chat); with `speaking`, also while the member is muted.
    pub(super) async fn check_member(&self, key: &ChatKey, user: &str, speaking: bool) -> Result<(), Error> {
        let Some(member) = self.store.member(key, user).await? else {
            return Err(Error::Forbidden(format!("not a member of {}", key.chat)));
        };
        if speaking && member.muted_until_ms.is_some() {
            return Err(Error::Forbidden(format!("you are muted in {}", key.chat)));
        }
        Ok(())
    }

    /// `user` is typing in `chat`: members only; pushed at most once per
    /// `hub::TYPING_EVERY`, requests inside that window answered and not pushed.
    pub async fn typing(&self, c: &Caller, chat: &str) -> Result<(), Error> {
        let key = c.key(chat);
        self.check_member(&key, &c.user, true).await?;
        if self.hub.admit_typing(&key, &c.user, Instant::now()) {
            self.hub.typing(&key, &c.user);
        } else {
            metrics::counter!("herald_typing_throttled_total").increment(1);
        }
        Ok(())
    }

    /// Who is present in `chat`: members only. If `outbox`'s connection
    /// watches the chat, that watch gets presence pushes from now on.
    pub async fn presence(&self, c: &Caller, outbox: &Outbox, chat: &str) -> Result<PresenceOk, Error> {
        let key = c.key(chat);
        self.check_member(&key, &c.user, false).await?;
        Ok(self.hub.presence(&key, Some(outbox.id())).await)
    }

    /// Who is present in `key`, for the server API (404 when there is no such chat).
    pub async fn admin_presence(&self, key: ChatKey) -> Result<PresenceOk, Error> {
        if self.store.chat(&key).await?.is_none() {
            return Err(Error::NotFound(format!("no chat {}", key.chat)));
        }
        Ok(self.hub.presence(&key, None).await)
    }
}
