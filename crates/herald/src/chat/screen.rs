//! A client's `send` or `edit` screened by the send hook before it is
//! stored (`hooks::send` does the asking). Only client requests come here:
//! the server API is trusted and skips the hook.
//!
//! Before the hook is asked, the request must be one the store would take
//! from this user (a member, not muted): the app hears only of sends that
//! can be stored. A `send` whose `client_id` is already stored answers the
//! first event's seq without asking again; two copies racing each other may
//! both ask, and the store still keeps one.

use herald_protocol::reply::SeqOk;
use serde_json::value::RawValue;

use super::Caller;
use super::ground::Ground;
use crate::error::Error;
use crate::hooks::send::{HookOp, HookRequest, Verdict};
use crate::model::ChatKey;

/// What a screened request stores.
pub(super) enum Screened {
    /// This body (the client's, or the hook's replacement).
    Store(Box<RawValue>),
    /// Nothing: the same `client_id` was already stored with this seq.
    Already(SeqOk),
}

impl Ground {
    /// Screens `body` of `c`'s `op` in `key` through the send hook, if one is configured.
    pub(super) async fn screen(
        &self,
        c: &Caller,
        key: &ChatKey,
        op: HookOp,
        body: Box<RawValue>,
        client_id: Option<&str>,
        target: Option<u64>,
    ) -> Result<Screened, Error> {
        let Some(hook) = &self.send_hook else { return Ok(Screened::Store(body)) };
        match self.store.member(key, &c.user).await? {
            None => return Err(Error::Forbidden(format!("not a member of {}", key.chat))),
            Some(m) if m.muted_until_ms.is_some() => {
                return Err(Error::Forbidden(format!("{} is muted in {}", c.user, key.chat)));
            }
            Some(_) => {}
        }
        if let Some(cid) = client_id
            && let Some(seq) = self.store.client_id_seq(key, &c.user, cid).await?
        {
            metrics::counter!("herald_send_hook_skipped_total", "reason" => "client_id").increment(1);
            return Ok(Screened::Already(SeqOk { seq }));
        }
        let req =
            HookRequest { workspace: &key.ws, chat: &key.chat, user: &c.user, op, body: &body, client_id, target };
        Ok(match hook.decide(&req).await? {
            Verdict::AsSent => Screened::Store(body),
            Verdict::Replace(replacement) => Screened::Store(replacement),
        })
    }
}
