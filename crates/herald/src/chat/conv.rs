//! v1.2's conversation ops in the chat layer: chat profiles, member and chat lists, threads
//! (their replies and the threads a user follows), pins and who reacted. Members-only checks and
//! page limits live here; what is stored and counted lives in the store's rules.
//!
//! Not here: `send`, `read`, `edit` and `fetch` with their v1.2 arguments (`chat.rs`, which
//! passes them to the store), or streamed messages (`stream.rs`).

use herald_protocol::frame::ok_reply;
use herald_protocol::limits::FETCH_MAX;
use herald_protocol::reply::{ChatsOk, FetchOk, MembersOk, PinsOk, ReactionsOk, SeqOk, ThreadsOk};
use herald_protocol::request::ProfilePatch;

use super::{Caller, Chats};
use crate::error::Error;
use crate::model::ChatKey;
use crate::store::{Actor, ThreadCursor, Write, id_cursor, id_from_cursor};

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

impl Chats {
    /// `profile`: changes the chat's profile; answers the `profile` event's seq (or the latest
    /// one's, when nothing changed).
    pub async fn profile(&self, c: &Caller, chat: &str, patch: ProfilePatch) -> Result<SeqOk, Error> {
        let w = self
            .write(Write::Profile { key: c.key(chat), user: Some(c.user.clone()), actor: Actor::Client, patch })
            .await?;
        Ok(SeqOk { seq: w.seq })
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
        self.check_member(&key, &c.user, false).await?;
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
        let (mut members, count) = self.store.member_list(key, after.as_deref(), limit).await?;
        let more = members.len() > limit as usize;
        members.truncate(limit as usize);
        let cursor = members.last().filter(|_| more).map(|m| id_cursor(&m.user));
        Ok(MembersOk { members, count, more, cursor })
    }

    /// The server API's page of a workspace's chats, sorted by id.
    pub async fn chat_list(&self, ws: &str, limit: Option<u32>, cursor: Option<&str>) -> Result<ChatsOk, Error> {
        let limit = limit.unwrap_or(LIST_DEFAULT).clamp(1, LIST_MAX);
        let after = cursor.map(|c| id_from_cursor(c).ok_or_else(|| bad_cursor("chats"))).transpose()?;
        let mut chats = self.store.chat_list(ws, after.as_deref(), limit).await?;
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
            self.check_member(&c.key(chat), &c.user, false).await?;
        }
        let limit = limit.unwrap_or(THREADS_DEFAULT).clamp(1, THREADS_MAX);
        let after = cursor.map(|s| ThreadCursor::decode(s).ok_or_else(|| bad_cursor("threads"))).transpose()?;
        let mut threads = self.store.thread_list(&c.ws, &c.user, chat, after.as_ref(), limit).await?;
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
        let mut f = self.store.thread_fetch(key, member, root, after, limit).await?;
        if let Some(urls) = self.file_urls() {
            urls.sign_all(key, &mut f.events);
        }
        let mut bytes = 0usize;
        let cut = f.events.iter().position(|e| {
            bytes += super::encoded_len(e);
            bytes > self.limits.replay_bytes
        });
        let more = match cut {
            Some(cut) => {
                f.events.truncate(cut.max(1));
                true
            }
            None => f.more,
        };
        Ok(FetchOk { events: f.events, seq: f.info.seq, more })
    }

    /// `pin`: pins or unpins message `target`.
    pub async fn pin(&self, c: &Caller, chat: &str, target: u64, on: bool) -> Result<SeqOk, Error> {
        let w = self.write(Write::Pin { key: c.key(chat), user: c.user.clone(), target, on }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// `pins`: the chat's pinned messages, for a member.
    pub async fn pins(&self, c: &Caller, chat: &str) -> Result<PinsOk, Error> {
        let key = c.key(chat);
        self.check_member(&key, &c.user, false).await?;
        self.pin_list(&key).await
    }

    /// The server API's pins of a chat.
    pub async fn pin_list(&self, key: &ChatKey) -> Result<PinsOk, Error> {
        let mut pins = self.store.pin_list(key).await?;
        if let Some(urls) = self.file_urls() {
            urls.sign_all(key, pins.iter_mut().map(|p| &mut p.message));
        }
        Ok(PinsOk { pins })
    }

    /// `reactions`: who reacted to `target` with what, for a member.
    pub async fn reactions(&self, c: &Caller, chat: &str, target: u64) -> Result<ReactionsOk, Error> {
        let key = c.key(chat);
        self.check_member(&key, &c.user, false).await?;
        Ok(ReactionsOk { reactions: self.store.reaction_users(&key, target, REACTION_USERS_MAX).await? })
    }
}
