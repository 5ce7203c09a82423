//! The inbox, the chat layer's side: a page of a user's chats by latest activity (the `inbox` op
//! and the server API's), and live inboxes, which follow the user's chats before the first page is
//! read so no change falls between the read and the pushes.
//!
//! Not here: the inbox's counts (the store's, `store/members.rs`) or its pushes (`hub/feed/`).

use std::sync::Arc;
use std::time::Instant;

use herald_protocol::reply::InboxOk;

use super::Caller;
use super::ground::Ground;
use crate::error::Error;
use crate::hub::{Counts, INBOX_FOLLOW_MAX, Listener};
use crate::model::ChatKey;
use crate::outbox::Outbox;
use crate::store::InboxCursor;

/// Inbox pages and live inboxes; see the module's documentation.
#[derive(Clone, Copy)]
pub struct Inbox<'a> {
    pub(super) g: &'a Ground,
}

impl<'a> Inbox<'a> {
    pub(super) fn new(g: &'a Ground) -> Inbox<'a> {
        Inbox { g }
    }

    /// A page of `user`'s inbox in workspace `ws`.
    pub async fn page(&self, ws: &str, user: &str, limit: Option<u32>, cursor: Option<&str>) -> Result<InboxOk, Error> {
        let limit =
            limit.unwrap_or(herald_protocol::limits::INBOX_DEFAULT).clamp(1, herald_protocol::limits::INBOX_MAX);
        let after =
            match cursor {
                None => None,
                Some(text) => Some(InboxCursor::decode(text).ok_or_else(|| {
                    Error::BadRequest("\"cursor\" is not a cursor from an earlier inbox reply".into())
                })?),
            };
        let started = Instant::now();
        let mut chats = self.g.store.inbox(ws, user, after.as_ref(), limit).await?;
        metrics::histogram!("herald_inbox_seconds").record(started.elapsed().as_secs_f64());
        let more = chats.len() > limit as usize;
        chats.truncate(limit as usize);
        let cursor =
            chats.last().filter(|_| more).map(|last| InboxCursor { ts: last.ts, chat: last.chat.clone() }.encode());
        Ok(InboxOk { chats, more, cursor })
    }

    /// Registers `outbox`'s connection as a live inbox of `c`'s user; see [`Inbox::live_page`].
    pub fn listen(&self, c: &Caller, outbox: &Arc<Outbox>) -> (Arc<Listener>, bool) {
        self.g.hub.feed().listen(&c.ws, &c.user, outbox)
    }

    /// `inbox` with `live: true`, for live inbox `l` (from [`Inbox::listen`]):
    /// when `setup`, follows the user's chats (the most recently active
    /// [`INBOX_FOLLOW_MAX`]) before anything is read, so no change falls
    /// between this read and the pushes; then answers the page. The caller
    /// queues the reply, then calls [`Inbox::start`].
    pub async fn live_page(
        &self,
        l: &Arc<Listener>,
        setup: bool,
        c: &Caller,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<InboxOk, Error> {
        if setup {
            let chats = self.g.store.member_chats(&c.ws, &c.user, INBOX_FOLLOW_MAX).await?;
            if chats.len() >= INBOX_FOLLOW_MAX as usize {
                metrics::counter!("herald_inbox_follow_capped_total").increment(1);
            }
            let keys: Vec<ChatKey> = chats.iter().map(|(chat, _)| c.key(chat)).collect();
            self.g.hub.feed().follow(l, &keys.iter().map(|k| (k.clone(), 0)).collect::<Vec<_>>());
            // Followed first, then read: a change after this read is pushed,
            // one before it is in what the connection counts as told.
            let heads = self.g.store.heads(&keys).await?;
            let told: Vec<(ChatKey, u64, Option<Counts>)> =
                keys.into_iter().zip(heads).map(|(k, h)| (k, h.unwrap_or(0), None)).collect();
            self.g.hub.feed().told(l, &told);
        }
        let page = self.page(&c.ws, &c.user, limit, cursor).await?;
        let told: Vec<(ChatKey, u64, Option<Counts>)> =
            page.chats.iter().map(|e| (c.key(&e.chat), e.seq, Some(Counts::of(e)))).collect();
        self.g.hub.feed().told(l, &told);
        Ok(page)
    }

    /// `l`'s reply is queued: its pushes may flow.
    pub fn start(&self, l: &Arc<Listener>) {
        self.g.hub.feed().start(l);
    }

    /// The connection ended: its live inbox, if any, with it.
    pub fn unlisten(&self, outbox: &Outbox) {
        self.g.hub.feed().unlisten(outbox.id());
    }
}
