//! The conversations capability (protocol v1.2): the reads of what threads, pins, reactions,
//! profiles and streams keep. A chat's profile and the workspace's chat list, a chat's members a
//! page at a time, a thread's replies, the threads a user follows, a chat's pins, who reacted,
//! and the streams left open. Every list is paged or bounded: a chat of a million members is read
//! a page at a time, never held.
//!
//! Not here: the writes (the log's [`super::Write`], whose rules are in `apply/conv.rs` and
//! `apply/stream.rs`), or how a backend stores them (the backends' `conversations.rs`).

use std::collections::BTreeMap;

use herald_protocol::reply::{ChatView, MemberEntry, PinEntry, Profile, ThreadEntry};

use super::{BoxFuture, Fetched, StoreError};
use crate::model::{ChatInfo, ChatKey};

/// Where a page of `threads` starts: after the thread whose latest reply has this `ts`, in chat
/// `chat` under root `root`, in the order latest reply first, then chat, then root. The same
/// order on every shard, so shards' pages merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCursor {
    pub ts: i64,
    pub chat: String,
    pub root: u64,
}

impl ThreadCursor {
    pub fn encode(&self) -> String {
        super::columns::cursor_encode(&[&self.ts.to_string(), &self.chat, &self.root.to_string()])
    }

    pub fn decode(s: &str) -> Option<ThreadCursor> {
        let parts = super::columns::cursor_decode(s, 3)?;
        Some(ThreadCursor { ts: parts[0].parse().ok()?, chat: parts[1].clone(), root: parts[2].parse().ok()? })
    }

    /// The cursor after `entry`.
    pub fn after(entry: &ThreadEntry) -> ThreadCursor {
        ThreadCursor { ts: entry.last.ts, chat: entry.chat.clone(), root: entry.root.seq }
    }
}

/// The order of `threads`: latest reply first, then chat, then root.
pub fn thread_order(a: &ThreadEntry, b: &ThreadEntry) -> std::cmp::Ordering {
    b.last.ts.cmp(&a.last.ts).then_with(|| a.chat.cmp(&b.chat)).then_with(|| a.root.seq.cmp(&b.root.seq))
}

/// A member list's or chat list's cursor: the last id of the page.
pub fn id_cursor(id: &str) -> String {
    super::columns::cursor_encode(&[id])
}

/// The inverse of [`id_cursor`].
pub fn id_from_cursor(s: &str) -> Option<String> {
    super::columns::cursor_decode(s, 1).and_then(|mut p| p.pop())
}

/// The conversations capability; see the module's documentation.
pub trait Conversations: Send + Sync + 'static {
    /// The chat's summary and profile, `None` if it does not exist.
    fn chat_view<'a>(&'a self, key: &'a ChatKey) -> BoxFuture<'a, Result<Option<(ChatInfo, Profile)>, StoreError>>;

    /// The workspace's chats sorted by id (byte order), those after `after` only, at most
    /// `limit + 1` (one more says there are more).
    fn chat_list<'a>(
        &'a self,
        ws: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatView>, StoreError>>;

    /// The chat's members sorted by user id (byte order), those after `after` only, at most
    /// `limit + 1`, and the member count. A missing chat is `NotFound`.
    fn member_list<'a>(
        &'a self,
        key: &'a ChatKey,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<(Vec<MemberEntry>, u64), StoreError>>;

    /// The replies of thread `root` with seq > `after`, at most `limit`, in seq order. With
    /// `member`, `Forbidden` unless that user is a member; a missing chat is `NotFound`.
    fn thread_fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        root: u64,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>>;

    /// The threads `user` of `ws` follows (in `chat` only, if given) that have replies, in
    /// [`thread_order`], those after `after` only, at most `limit + 1`.
    fn thread_list<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        chat: Option<&'a str>,
        after: Option<&'a ThreadCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ThreadEntry>, StoreError>>;

    /// The chat's pinned messages, latest pin first. A missing chat is `NotFound`.
    fn pin_list<'a>(&'a self, key: &'a ChatKey) -> BoxFuture<'a, Result<Vec<PinEntry>, StoreError>>;

    /// For each emoji with reactions on `target` now, up to `per_emoji` users, sorted.
    fn reaction_users<'a>(
        &'a self,
        key: &'a ChatKey,
        target: u64,
        per_emoji: usize,
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<String>>, StoreError>>;

    /// Streams still open whose last append (or start) was before `idle_before_ms`, at most
    /// `limit`: the server ends them.
    fn idle_streams(&self, idle_before_ms: i64, limit: u32) -> BoxFuture<'_, Result<Vec<(ChatKey, u64)>, StoreError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_others() {
        let c = ThreadCursor { ts: 17, chat: "a:b.c".into(), root: 41 };
        assert_eq!(ThreadCursor::decode(&c.encode()), Some(c));
        assert_eq!(id_from_cursor(&id_cursor("bob@x.io")), Some("bob@x.io".into()));
        for bad in ["", "zz", "abc", &id_cursor("x")] {
            assert_eq!(ThreadCursor::decode(bad), None, "{bad}");
        }
    }
}
