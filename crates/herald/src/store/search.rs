//! The search capability (protocol v1.2): a workspace's messages by the words in them, newest
//! first, as `fetch` shows them. Each backend keeps an index of its own chats (a PostgreSQL shard
//! of its own, SQLite in a file beside the log), written after the log's commits by a background
//! indexer that follows the log from positions it stores; [`super::sharded`] asks every shard and
//! merges.
//!
//! Not here: the matcher (`search_text.rs`), checking a query or a membership for a client
//! (`chat/search.rs`), or how a backend keeps its index (`sqlite/search*.rs`,
//! `postgres/search*.rs`).

use herald_protocol::Event;

use super::{BoxFuture, StoreError};

/// Postings counted per gram when a backend chooses which gram's postings to read: enough to tell
/// a rare gram from a common one, few enough to cost about a millisecond.
pub const COUNT_CAP: i64 = 4096;

/// Whose messages a search reads, and where a page starts.
#[derive(Debug, Clone)]
pub struct SearchQuery {
    pub ws: String,
    /// Only the chats this user is a member of now (`None`: the whole workspace).
    pub user: Option<String>,
    /// Only this chat.
    pub chat: Option<String>,
    /// The folded terms ([`super::search_text::terms`]), at least one: all must occur.
    pub terms: Vec<String>,
    /// Only results after this one in [`search_order`].
    pub after: Option<SearchCursor>,
    /// At most `limit + 1` results (one more says there are more).
    pub limit: u32,
}

/// One message found.
#[derive(Debug, Clone)]
pub struct Hit {
    pub chat: String,
    /// As `fetch` shows it.
    pub event: Event,
}

/// Where a page of results starts: after the message of this `ts`, chat and seq, in
/// [`search_order`]. The same order on every shard, so shards' pages merge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchCursor {
    pub ts: i64,
    pub chat: String,
    pub seq: u64,
}

impl SearchCursor {
    pub fn encode(&self) -> String {
        super::columns::cursor_encode(&[&self.ts.to_string(), &self.chat, &self.seq.to_string()])
    }

    pub fn decode(s: &str) -> Option<SearchCursor> {
        let parts = super::columns::cursor_decode(s, 3)?;
        Some(SearchCursor { ts: parts[0].parse().ok()?, chat: parts[1].clone(), seq: parts[2].parse().ok()? })
    }

    /// The cursor after `hit`.
    pub fn after(hit: &Hit) -> SearchCursor {
        SearchCursor { ts: hit.event.ts, chat: hit.chat.clone(), seq: hit.event.seq }
    }

    /// Whether a message at (`ts`, `chat`, `seq`) comes after this cursor in [`search_order`].
    pub fn precedes(&self, ts: i64, chat: &str, seq: u64) -> bool {
        order_key(ts, chat, seq).cmp(&order_key(self.ts, &self.chat, self.seq)).is_gt()
    }
}

/// Results' order: newest first (`ts` descending), then chat (ascending), then seq (descending,
/// the later message of a chat first).
pub fn search_order(a: &Hit, b: &Hit) -> std::cmp::Ordering {
    order_key(a.event.ts, &a.chat, a.event.seq).cmp(&order_key(b.event.ts, &b.chat, b.event.seq))
}

fn order_key(ts: i64, chat: &str, seq: u64) -> (std::cmp::Reverse<i64>, &str, std::cmp::Reverse<u64>) {
    (std::cmp::Reverse(ts), chat, std::cmp::Reverse(seq))
}

/// The search capability; see the module's documentation.
pub trait Search: Send + Sync + 'static {
    /// The `message` events of `q.ws` that match every term, that are not deleted, in the chats
    /// `q` allows, in [`search_order`], after `q.after`, at most `q.limit + 1`.
    fn search<'a>(&'a self, q: &'a SearchQuery) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_order() {
        let c = SearchCursor { ts: 17, chat: "a:b".into(), seq: 4 };
        assert_eq!(SearchCursor::decode(&c.encode()), Some(c.clone()));
        assert_eq!(SearchCursor::decode("zz"), None);
        assert!(c.precedes(16, "a", 9), "older");
        assert!(c.precedes(17, "a:c", 9), "same time, later chat");
        assert!(c.precedes(17, "a:b", 3), "same chat, earlier seq");
        assert!(!c.precedes(17, "a:b", 4) && !c.precedes(18, "z", 1));
    }
}
