//! The members and inbox capability: who belongs to a chat, where each
//! member has read to and whether they are muted, and the inbox built from
//! that (each of a user's chats with its unread count and latest message).
//! Members change only through the log's writes (`join`, `leave`, `read`,
//! `mute`); this capability reads them.
//!
//! Not here: the writes themselves (`log`), or how a backend keeps the
//! counts (the backends' `members.rs`).

use herald_protocol::reply::InboxEntry;

use super::{BoxFuture, StoreError};
use crate::model::ChatKey;

/// A member of a chat as the store keeps them (v1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    /// The read position.
    pub read: u64,
    /// Until when (ms since the epoch) the member is muted: `None` when not
    /// muted (or the mute has run out), `Some(i64::MAX)` for a mute without end.
    pub muted_until_ms: Option<i64>,
}

/// Where a page of an inbox starts: after the chat with this latest-activity
/// `ts` and name, in the inbox's order (ts descending, then chat ascending).
/// The same order on every shard, so shards' pages merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxCursor {
    pub ts: i64,
    pub chat: String,
}

impl InboxCursor {
    /// The opaque string clients get: hex, so nobody mistakes it for something to build.
    pub fn encode(&self) -> String {
        let plain = format!("{}:{}", self.ts, self.chat);
        plain.bytes().map(|b| format!("{b:02x}")).collect()
    }

    /// The inverse of [`InboxCursor::encode`]; `None` for anything it did not make.
    pub fn decode(s: &str) -> Option<InboxCursor> {
        if !s.len().is_multiple_of(2) || s.len() > 2 * 300 {
            return None;
        }
        let bytes: Option<Vec<u8>> =
            (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect();
        let plain = String::from_utf8(bytes?).ok()?;
        let (ts, chat) = plain.split_once(':')?;
        if !herald_protocol::ids::is_valid_id(chat) {
            return None;
        }
        Some(InboxCursor { ts: ts.parse().ok()?, chat: chat.to_string() })
    }

    /// Whether `entry` comes after this cursor in the inbox's order.
    pub fn is_before(&self, entry: &InboxEntry) -> bool {
        entry.ts < self.ts || (entry.ts == self.ts && entry.chat.as_str() > self.chat.as_str())
    }
}

/// The inbox's order: latest activity first, ties by chat name.
pub fn inbox_order(a: &InboxEntry, b: &InboxEntry) -> std::cmp::Ordering {
    b.ts.cmp(&a.ts).then_with(|| a.chat.cmp(&b.chat))
}

/// How many `message` events a member has not read, from counts kept as
/// counts (no history is read): `messages` in the chat, `messages_at_read`
/// of them at or below the read position, the member's `own` messages in
/// the chat and `own_at_read` of them at or below the read position, and
/// `deleted_by_others_after`: other users' messages above the read position
/// that were deleted.
pub fn unread(messages: u64, messages_at_read: u64, own: u64, own_at_read: u64, deleted_by_others_after: u64) -> u64 {
    let above = messages.saturating_sub(messages_at_read);
    let own_above = own.saturating_sub(own_at_read);
    above.saturating_sub(own_above).saturating_sub(deleted_by_others_after)
}

/// Members and their inboxes.
pub trait Membership: Send + Sync + 'static {
    /// `user`'s membership of `key`: `Ok(None)` for a non-member, `NotFound`
    /// for a missing chat.
    fn member<'a>(&'a self, key: &'a ChatKey, user: &'a str) -> BoxFuture<'a, Result<Option<Member>, StoreError>>;

    /// A page of `user`'s chats in workspace `ws`, in the inbox's order
    /// ([`inbox_order`]), those after `after` only, at most `limit` of them;
    /// answers one more than `limit` when there are more, so the caller
    /// knows whether to say `more`.
    fn inbox<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a InboxCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<InboxEntry>, StoreError>>;

    /// The chats `user` of `ws` is a member of, with their latest event's
    /// time, most recently active first, at most `limit`: what a live inbox follows.
    fn member_chats<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>>;

    /// One chat's inbox entry for `user`; `None` if not a member (or no chat).
    fn inbox_entry<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<InboxEntry>, StoreError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unread_counts_others_live_messages_above_the_read_position() {
        // 10 messages, 4 at or below read; 3 of mine, 1 of them below read; 1 of another's above read deleted.
        assert_eq!(unread(10, 4, 3, 1, 1), 3);
        // Nothing read yet, nothing mine: all of them.
        assert_eq!(unread(7, 0, 0, 0, 0), 7);
        // Read to the end: nothing, whatever was deleted or sent before.
        assert_eq!(unread(7, 7, 2, 2, 0), 0);
        // Only my own messages above the read position: nothing unread.
        assert_eq!(unread(5, 2, 4, 1, 0), 0);
        // Every other message above read deleted.
        assert_eq!(unread(5, 2, 1, 0, 2), 0);
        // Counts never go negative, even from an inconsistent read.
        assert_eq!(unread(1, 3, 0, 0, 5), 0);
    }

    #[test]
    fn cursors_round_trip_and_refuse_what_they_did_not_make() {
        let c = InboxCursor { ts: 1732233600123, chat: "general:a.b".into() };
        assert_eq!(InboxCursor::decode(&c.encode()), Some(c));
        for bad in ["", "zz", "abc", "3a", &"00".repeat(400)] {
            assert_eq!(InboxCursor::decode(bad), None, "{bad}");
        }
        let not_an_id = InboxCursor { ts: 1, chat: "a b".into() }.encode();
        assert_eq!(InboxCursor::decode(&not_an_id), None);
    }
}
