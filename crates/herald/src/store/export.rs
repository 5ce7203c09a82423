//! The export capability (protocol v1.2, "A user's data"): the reads a user's data export pages
//! through. A user's memberships in a workspace, and every `message` event they sent there (in
//! chats they left too), each a page at a time in one order that every backend and every shard
//! keeps, so that the pages of several parts merge into one stream.
//!
//! Not here: the stream itself, which pages through the parts and merges them in bounded memory
//! (`chat/export.rs`), or the route (`api/export.rs`).

use herald_protocol::Event;

use super::{BoxFuture, StoreError};

/// Where a page of a user's messages starts: after the message with this `ts`, in chat `chat`,
/// at `seq`, in the order oldest first, then chat (byte order), then seq.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportCursor {
    pub ts: i64,
    pub chat: String,
    pub seq: u64,
}

impl ExportCursor {
    /// The cursor after `m`.
    pub fn after(m: &Exported) -> ExportCursor {
        ExportCursor { ts: m.event.ts, chat: m.chat.clone(), seq: m.event.seq }
    }
}

/// One message of a user's export: its chat, and the event as `fetch` shows it (the stored view:
/// the latest body of an edited message, `deleted` and a `null` body for a deleted one).
#[derive(Debug, Clone, PartialEq)]
pub struct Exported {
    pub chat: String,
    pub event: Event,
}

/// The order of a user's messages: oldest first, then chat (byte order), then seq.
pub fn export_order(a: &Exported, b: &Exported) -> std::cmp::Ordering {
    a.event.ts.cmp(&b.event.ts).then_with(|| a.chat.cmp(&b.chat)).then_with(|| a.event.seq.cmp(&b.event.seq))
}

/// The export capability; see the module's documentation.
///
/// A store is made of `export_parts()` parts (the shards of a sharded store; one otherwise), each
/// paged on its own: a page of part `p` holds that part's rows only, so a caller keeps one cursor
/// per part and merges the parts' pages. Every page is sorted, and rows compare as Rust's `str`
/// and integers do (byte order for ids).
pub trait Export: Send + Sync + 'static {
    /// How many parts the store pages separately (at least 1).
    fn export_parts(&self) -> usize;

    /// A page of the chats of `ws` that `user` is a member of now, as (chat, read position),
    /// sorted by chat, those after `after` only, at most `limit`. From part `part` only.
    fn export_members<'a>(
        &'a self,
        part: usize,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>>;

    /// A page of the `message` events that `user` sent in `ws` (deleted ones and those in chats
    /// they left included), in [`export_order`], those after `after` only, at most `limit`. From
    /// part `part` only.
    fn export_messages<'a>(
        &'a self,
        part: usize,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a ExportCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<Exported>, StoreError>>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_protocol::EventType;
    use serde_json::value::RawValue;

    fn message(chat: &str, seq: u64, ts: i64) -> Exported {
        let body = RawValue::from_string("{}".into()).unwrap();
        Exported { chat: chat.into(), event: Event::new(seq, EventType::Message, Some("u".into()), ts, body) }
    }

    #[test]
    fn messages_sort_oldest_first_then_by_chat_then_seq() {
        let mut all = [message("b", 1, 5), message("a", 9, 5), message("a", 2, 5), message("z", 1, 1)];
        all.sort_by(export_order);
        let keys: Vec<_> = all.iter().map(|m| (m.event.ts, m.chat.as_str(), m.event.seq)).collect();
        assert_eq!(keys, [(1, "z", 1), (5, "a", 2), (5, "a", 9), (5, "b", 1)]);
        assert_eq!(ExportCursor::after(&all[1]), ExportCursor { ts: 5, chat: "a".into(), seq: 2 });
    }
}
