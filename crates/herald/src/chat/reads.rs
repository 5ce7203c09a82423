//! The reads of the chat layer: `fetch` (of a chat, or of a thread's replies), the member and chat
//! lists, the threads a user follows, pins, who reacted, chats found by the start of their id,
//! and a user's export; `search` is in `search.rs`. Members-only checks, page limits and cursors
//! live here; what is stored and counted is the store's.
//!
//! Every page is bounded in bytes as well as in items: a `fetch` page holds at most
//! [`ChatLimits::replay_bytes`](super::ChatLimits) of encoded events (always at least one), and
//! says `more` when cut short, so a client's own read never closes its connection with 4008.
//!
//! Chats found by a prefix: chat ids sort in byte order, so the chats with a prefix are one range
//! of the workspace's chat list, from the prefix up to the first id that does not start with it,
//! read through the chat list itself ([`crate::store::Conversations::chat_list`]) starting after
//! [`below_prefix`]; no index of its own.

use herald_protocol::frame::ok_reply;
use herald_protocol::limits::FETCH_MAX;
use herald_protocol::reply::{ChatsOk, FetchOk, MembersOk, PinsOk, ReactionsOk, ThreadsOk};

use super::Caller;
use super::export::{ExportBody, export_from};
use super::ground::Ground;
use crate::error::Error;
use crate::model::{ChatKey, encoded_len};
use crate::outbox::ConnId;
use crate::store::{Fetched, ThreadCursor, id_cursor, id_from_cursor};

/// `members` and the chat list: a page's default and most entries.
const LIST_DEFAULT: u32 = 100;
const LIST_MAX: u32 = 1000;
/// `threads`: a page's default and most entries.
const THREADS_DEFAULT: u32 = 20;
const THREADS_MAX: u32 = 100;
/// `reactions`: users listed per emoji at most.
const REACTION_USERS_MAX: usize = 100;

fn bad_cursor(op: &str) -> Error {
    Error::BadRequest(format!("\"cursor\" is not a cursor from an earlier {op} reply"))
}

/// A page's default and most entries, as the chat list's.
const FIND_DEFAULT: u32 = 100;
const FIND_MAX: u32 = 1000;
/// The longest id: a chat id is at most this many characters.
const ID_MAX: usize = 128;

/// A string that sorts after every valid chat id below `prefix` and before every id starting
/// with it: `prefix` with its last character one lower, then `ID_MAX` DEL characters (above
/// every character an id may have, so no id that shares the lowered start reaches it). `prefix`
/// is a valid id (ASCII, from `-` up), so the lowered character is ASCII too.
fn below_prefix(prefix: &str) -> String {
    let mut out: Vec<u8> = prefix.as_bytes().to_vec();
    if let Some(last) = out.last_mut() {
        *last -= 1;
    }
    out.extend(std::iter::repeat_n(0x7f, ID_MAX));
    String::from_utf8(out).expect("ASCII")
}

/// The reads; see the module's documentation.
#[derive(Clone, Copy)]
pub struct Reads<'a> {
    pub(super) g: &'a Ground,
}

impl<'a> Reads<'a> {
    pub(super) fn new(g: &'a Ground) -> Reads<'a> {
        Reads { g }
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
        if let Some(page) = self.g.hub.cached_fetch(&key, conn, &c.user, after, max, self.g.limits.replay_bytes) {
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
        let f = self.g.store.fetch(key, member, after, limit).await?;
        Ok(self.page(f))
    }

    /// `f` as a `fetch` page of at most [`ChatLimits::replay_bytes`](super::ChatLimits) of encoded
    /// events (always at least one); a page cut short says `more`.
    fn page(&self, mut f: Fetched) -> FetchOk {
        let mut bytes = 0usize;
        let fits = f.events.iter().position(|e| {
            bytes += encoded_len(e);
            bytes > self.g.limits.replay_bytes
        });
        let more = match fits {
            Some(cut) => {
                f.events.truncate(cut.max(1));
                metrics::counter!("herald_fetch_pages_cut_total").increment(1);
                true
            }
            None => f.more,
        };
        FetchOk { events: f.events, seq: f.info.seq, more }
    }

    pub async fn admin_fetch(&self, key: ChatKey, after: u64, limit: Option<u32>) -> Result<FetchOk, Error> {
        self.fetch_as(&key, None, after, limit).await
    }

    /// `members`: a page of the chat's members, for a member.
    pub async fn members(
        &self,
        c: &Caller,
        chat: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<MembersOk, Error> {
        let key = c.key(chat);
        self.g.check_member(&key, &c.user, false).await?;
        self.member_page(&key, limit, cursor).await
    }

    /// The server API's page of a chat's members.
    pub async fn member_page(
        &self,
        key: &ChatKey,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<MembersOk, Error> {
        let limit = limit.unwrap_or(LIST_DEFAULT).clamp(1, LIST_MAX);
        let after = cursor.map(|c| id_from_cursor(c).ok_or_else(|| bad_cursor("members"))).transpose()?;
        let (mut members, count) = self.g.store.member_list(key, after.as_deref(), limit).await?;
        let more = members.len() > limit as usize;
        members.truncate(limit as usize);
        let cursor = members.last().filter(|_| more).map(|m| id_cursor(&m.user));
        Ok(MembersOk { members, count, more, cursor })
    }

    /// The server API's page of a workspace's chats, sorted by id.
    pub async fn chat_list(&self, ws: &str, limit: Option<u32>, cursor: Option<&str>) -> Result<ChatsOk, Error> {
        let limit = limit.unwrap_or(LIST_DEFAULT).clamp(1, LIST_MAX);
        let after = cursor.map(|c| id_from_cursor(c).ok_or_else(|| bad_cursor("chats"))).transpose()?;
        let mut chats = self.g.store.chat_list(ws, after.as_deref(), limit).await?;
        let more = chats.len() > limit as usize;
        chats.truncate(limit as usize);
        let cursor = chats.last().filter(|_| more).map(|v| id_cursor(&v.chat));
        Ok(ChatsOk { chats, more, cursor })
    }

    /// `threads`: the threads `c` follows (in `chat`, or in all of their chats), latest reply first.
    pub async fn threads(
        &self,
        c: &Caller,
        chat: Option<&str>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<ThreadsOk, Error> {
        if let Some(chat) = chat {
            self.g.check_member(&c.key(chat), &c.user, false).await?;
        }
        let limit = limit.unwrap_or(THREADS_DEFAULT).clamp(1, THREADS_MAX);
        let after = cursor.map(|s| ThreadCursor::decode(s).ok_or_else(|| bad_cursor("threads"))).transpose()?;
        let mut threads = self.g.store.thread_list(&c.ws, &c.user, chat, after.as_ref(), limit).await?;
        let more = threads.len() > limit as usize;
        threads.truncate(limit as usize);
        let cursor = threads.last().filter(|_| more).map(|t| ThreadCursor::after(t).encode());
        Ok(ThreadsOk { threads, more, cursor })
    }

    /// `fetch` with `thread`: the encoded reply with that thread's replies after `after`.
    pub async fn fetch_thread_reply(
        &self,
        c: &Caller,
        id: i64,
        chat: &str,
        root: u64,
        after: u64,
        limit: Option<u32>,
    ) -> Result<String, Error> {
        let page = self.fetch_thread(&c.key(chat), Some(&c.user), root, after, limit).await?;
        Ok(ok_reply(id, &page))
    }

    /// A thread's replies after `after`, as a `fetch` page (the server API's too, with no member).
    pub async fn fetch_thread(
        &self,
        key: &ChatKey,
        member: Option<&str>,
        root: u64,
        after: u64,
        limit: Option<u32>,
    ) -> Result<FetchOk, Error> {
        let limit = limit.unwrap_or(herald_protocol::limits::FETCH_DEFAULT).clamp(1, FETCH_MAX);
        let f = self.g.store.thread_fetch(key, member, root, after, limit).await?;
        Ok(self.page(f))
    }

    /// `pins`: the chat's pinned messages, for a member.
    pub async fn pins(&self, c: &Caller, chat: &str) -> Result<PinsOk, Error> {
        let key = c.key(chat);
        self.g.check_member(&key, &c.user, false).await?;
        self.pin_list(&key).await
    }

    /// The server API's pins of a chat.
    pub async fn pin_list(&self, key: &ChatKey) -> Result<PinsOk, Error> {
        let pins = self.g.store.pin_list(key).await?;
        Ok(PinsOk { pins })
    }

    /// `reactions`: who reacted to `target` with what, for a member.
    pub async fn reactions(&self, c: &Caller, chat: &str, target: u64) -> Result<ReactionsOk, Error> {
        let key = c.key(chat);
        self.g.check_member(&key, &c.user, false).await?;
        Ok(ReactionsOk { reactions: self.g.store.reaction_users(&key, target, REACTION_USERS_MAX).await? })
    }

    /// The server API's page of the workspace's chats whose id starts with `prefix` (a valid
    /// chat id), sorted by id.
    pub async fn find_chats(
        &self,
        ws: &str,
        prefix: &str,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<ChatsOk, Error> {
        let limit = limit.unwrap_or(FIND_DEFAULT).clamp(1, FIND_MAX);
        let after = match cursor {
            Some(c) => id_from_cursor(c)
                .ok_or_else(|| Error::BadRequest("\"cursor\" is not a cursor from an earlier chats reply".into()))?,
            None => below_prefix(prefix),
        };
        let after = after.max(below_prefix(prefix));
        let mut chats = self.g.store.chat_list(ws, Some(&after), limit).await?;
        chats.retain(|c| c.chat.starts_with(prefix));
        let more = chats.len() > limit as usize;
        chats.truncate(limit as usize);
        let cursor = chats.last().filter(|_| more).map(|v| id_cursor(&v.chat));
        Ok(ChatsOk { chats, more, cursor })
    }

    /// The export of `user` in workspace `ws` (see `export.rs`).
    pub async fn export_user(&self, ws: &str, user: &str) -> Result<ExportBody, Error> {
        let store: std::sync::Arc<dyn crate::store::Export> = self.g.store.clone();
        export_from(store, ws, user).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_sorts_between_the_ids_below_a_prefix_and_those_with_it() {
        let long = |s: &str| format!("{s}{}", "z".repeat(ID_MAX - s.len()));
        for prefix in ["ab", "a", "-", "a-", "Z9", "room:1"] {
            let bound = below_prefix(prefix);
            let mut lowered = prefix.to_string();
            let last = lowered.pop().unwrap();
            lowered.push(char::from(last as u8 - 1));
            let below = [lowered.clone(), long(&lowered), prefix[..prefix.len() - 1].to_string()];
            for id in below.iter().filter(|id| !id.is_empty()) {
                assert!(id.as_str() < bound.as_str(), "{id:?} below {prefix:?}");
            }
            for id in [prefix.to_string(), format!("{prefix}-"), long(prefix)] {
                assert!(id.as_str() > bound.as_str(), "{id:?} with {prefix:?}");
            }
        }
    }
}
