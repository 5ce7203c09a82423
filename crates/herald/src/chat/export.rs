//! A user's data export (protocol v1.2, `GET /v1/workspaces/{ws}/users/{user}/export`): NDJSON
//! lines, first one per chat the user is a member of, then one per message they sent, oldest
//! first, streamed as the store's pages come, never collected.
//!
//! The store is read through its export capability ([`Export`]), a page at a time per part (one
//! part per PostgreSQL shard, one otherwise), each part with its own cursor. The parts' pages are
//! merged as they come (a k-way merge of the parts' heads), so the export holds at most one page
//! per part and one chunk of output, whatever the user sent: a million messages cost what a
//! thousand do, in memory.
//!
//! A failure midway (a shard down, a timeout) ends the stream with an error, never with a clean
//! end: the HTTP body is then cut off without its last chunk, so a client sees a broken transfer,
//! not an export that silently lacks the rest. A failure before the first line is an ordinary
//! error answer (`Reads::export_user` reads the first chunk before answering).
//!
//! Not here: the store's statements (the backends' `export.rs`), or the route (`api/export.rs`).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;
use herald_protocol::Event;
use serde::Serialize;

use crate::error::Error;
use crate::store::{Export, ExportCursor, Exported, StoreError, export_order};

/// Memberships read per page and part.
const MEMBER_PAGE: u32 = 500;
/// Messages read per page and part: a page of the largest bodies stays a few MiB.
const MESSAGE_PAGE: u32 = 256;
/// Output is handed to the socket in chunks of about this many bytes (a line is never split).
const CHUNK: usize = 32 * 1024;

/// One line of the export.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Line<'a> {
    Member { chat: &'a str, read: u64 },
    Message { chat: &'a str, event: &'a Event },
}

/// One part's place in a merge: its rows read and not yet merged, where its next page starts,
/// and whether it has more.
struct Part<T, K> {
    buf: VecDeque<T>,
    after: Option<K>,
    done: bool,
}

/// A merge of the parts' pages, in one order; see the module's documentation.
struct Merge<T, K> {
    parts: Vec<Part<T, K>>,
    page: u32,
    key: fn(&T) -> K,
    order: fn(&T, &T) -> std::cmp::Ordering,
}

impl<T, K: Clone> Merge<T, K> {
    fn new(parts: usize, page: u32, key: fn(&T) -> K, order: fn(&T, &T) -> std::cmp::Ordering) -> Self {
        let parts = (0..parts).map(|_| Part { buf: VecDeque::new(), after: None, done: false }).collect();
        Merge { parts, page, key, order }
    }

    /// The next row in order, reading a part's next page (with `read(part, after, limit)`) only
    /// once its rows read so far are all merged.
    async fn next<F, Fut>(&mut self, mut read: F) -> Result<Option<T>, StoreError>
    where
        F: FnMut(usize, Option<K>, u32) -> Fut,
        Fut: Future<Output = Result<Vec<T>, StoreError>>,
    {
        for (i, p) in self.parts.iter_mut().enumerate() {
            if p.buf.is_empty() && !p.done {
                let rows = read(i, p.after.clone(), self.page).await?;
                p.done = rows.len() < self.page as usize;
                if let Some(last) = rows.last() {
                    p.after = Some((self.key)(last));
                }
                p.buf.extend(rows);
            }
        }
        let order = self.order;
        let best = self
            .parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| p.buf.front().map(|head| (i, head)))
            .min_by(|a, b| order(a.1, b.1))
            .map(|(i, _)| i);
        Ok(best.and_then(|i| self.parts[i].buf.pop_front()))
    }
}

/// A user's export as it goes: memberships first, then messages.
struct Exporting {
    store: Arc<dyn Export>,
    ws: String,
    user: String,
    members: Merge<(String, u64), String>,
    messages: Merge<Exported, ExportCursor>,
    /// Memberships are all written.
    members_done: bool,
    /// Nothing more to write (the end, or a failure).
    finished: bool,
}

impl Exporting {
    fn new(store: Arc<dyn Export>, ws: &str, user: &str) -> Exporting {
        let parts = store.export_parts().max(1);
        Exporting {
            members: Merge::new(parts, MEMBER_PAGE, |m| m.0.clone(), |a, b| a.0.cmp(&b.0)),
            messages: Merge::new(parts, MESSAGE_PAGE, ExportCursor::after, export_order),
            store,
            ws: ws.to_owned(),
            user: user.to_owned(),
            members_done: false,
            finished: false,
        }
    }

    /// The next chunk of lines, `None` at the end. After an error, `None` for ever.
    async fn chunk(&mut self) -> Result<Option<Bytes>, StoreError> {
        if self.finished {
            return Ok(None);
        }
        let result = self.fill().await;
        if !matches!(result, Ok(Some(_))) {
            self.finished = true;
        }
        result
    }

    async fn fill(&mut self) -> Result<Option<Bytes>, StoreError> {
        let mut out = Vec::with_capacity(CHUNK + 1024);
        let (store, ws, user) = (&self.store, self.ws.as_str(), self.user.as_str());
        while out.len() < CHUNK && !self.members_done {
            let next = self
                .members
                .next(|part, after, limit| async move {
                    store.export_members(part, ws, user, after.as_deref(), limit).await
                })
                .await?;
            match next {
                Some((chat, read)) => push_line(&mut out, &Line::Member { chat: &chat, read }),
                None => self.members_done = true,
            }
        }
        while out.len() < CHUNK {
            let next =
                self.messages
                    .next(|part, after, limit| async move {
                        store.export_messages(part, ws, user, after.as_ref(), limit).await
                    })
                    .await?;
            match next {
                Some(m) => push_line(&mut out, &Line::Message { chat: &m.chat, event: &m.event }),
                None => break,
            }
        }
        Ok((!out.is_empty()).then(|| Bytes::from(out)))
    }
}

fn push_line(out: &mut Vec<u8>, line: &Line<'_>) {
    // Ids, numbers and raw JSON bodies always serialize.
    serde_json::to_writer(&mut *out, line).expect("an export line serializes");
    out.push(b'\n');
}

/// The export's body: chunks of NDJSON, ending with an error if the store failed midway.
pub type ExportBody = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, StoreError>> + Send>>;

/// The stream of `user`'s export from `store`, starting with `first` (already read).
fn stream_from(first: Option<Bytes>, state: Exporting) -> ExportBody {
    let rest = futures_util::stream::unfold(state, |mut s| async move {
        match s.chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), s)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(workspace = s.ws, user = s.user, error = %e, "a user's export failed midway");
                metrics::counter!("herald_exports_failed_total").increment(1);
                Some((Err(e), s))
            }
        }
    });
    Box::pin(futures_util::StreamExt::chain(futures_util::stream::iter(first.map(Ok)), rest))
}

/// `user`'s export from `store`: its first chunk is read before this returns, so that a store
/// that fails at once fails the request with its error instead of a cut-off body.
pub async fn export_from(store: Arc<dyn Export>, ws: &str, user: &str) -> Result<ExportBody, Error> {
    let mut state = Exporting::new(store, ws, user);
    let first = state.chunk().await?;
    metrics::counter!("herald_exports_total").increment(1);
    Ok(stream_from(first, state))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures_util::StreamExt;
    use herald_protocol::EventType;
    use serde_json::value::RawValue;

    use super::*;
    use crate::model::BoxFuture;

    /// A store of `parts` parts that makes its rows up as they are asked for: part `p` holds
    /// chats `c{p}-{i}` and, of message `n` (every `parts`-th from `p`), `ts` = `n / 3` (so
    /// parts tie on ts). Counts the pages read; fails a page once `fail_after` pages were read.
    struct Made {
        parts: usize,
        members: u64,
        messages: u64,
        pages: AtomicUsize,
        fail_after: Option<usize>,
    }

    impl Made {
        fn new(parts: usize, members: u64, messages: u64) -> Made {
            Made { parts, members, messages, pages: AtomicUsize::new(0), fail_after: None }
        }

        fn page(&self) -> Result<(), StoreError> {
            let n = self.pages.fetch_add(1, Ordering::SeqCst);
            match self.fail_after {
                Some(max) if n >= max => Err(StoreError::Unavailable("shard #1 unavailable".into())),
                _ => Ok(()),
            }
        }

        fn message(&self, part: usize, n: u64) -> Exported {
            let body = RawValue::from_string(format!("{{\"n\":{n}}}")).unwrap();
            let event = Event::new(n + 1, EventType::Message, Some("u".into()), (n / 3) as i64, body);
            Exported { chat: format!("c{part}"), event }
        }
    }

    impl Export for Made {
        fn export_parts(&self) -> usize {
            self.parts
        }

        fn export_members<'a>(
            &'a self,
            part: usize,
            _: &'a str,
            _: &'a str,
            after: Option<&'a str>,
            limit: u32,
        ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
            let rows = (0..self.members)
                .map(|i| (format!("c{part}-{i:06}"), i))
                .filter(|(c, _)| after.is_none_or(|a| c.as_str() > a))
                .take(limit as usize)
                .collect();
            Box::pin(std::future::ready(self.page().map(|_| rows)))
        }

        fn export_messages<'a>(
            &'a self,
            part: usize,
            _: &'a str,
            _: &'a str,
            after: Option<&'a ExportCursor>,
            limit: u32,
        ) -> BoxFuture<'a, Result<Vec<Exported>, StoreError>> {
            // Rows are made from the cursor on, never held: seq n + 1 is message n.
            let start = after.map_or(part as u64, |c| c.seq - 1 + self.parts as u64);
            let rows = (start..self.messages)
                .step_by(self.parts)
                .take(limit as usize)
                .map(|n| self.message(part, n))
                .collect();
            Box::pin(std::future::ready(self.page().map(|_| rows)))
        }
    }

    /// Messages of the long export: enough for hundreds of pages (a million takes as long in
    /// a debug build as a test should not).
    const MANY: u64 = 200_000;

    fn lines(chunk: &Bytes) -> Vec<serde_json::Value> {
        chunk.split(|b| *b == b'\n').filter(|l| !l.is_empty()).map(|l| serde_json::from_slice(l).unwrap()).collect()
    }

    #[tokio::test]
    async fn many_messages_are_read_a_page_at_a_time_as_the_client_reads() {
        let store = Arc::new(Made::new(2, 3, MANY));
        let mut body = export_from(store.clone(), "w", "u").await.unwrap();
        // The first chunk: the memberships, then messages up to the chunk's size, from the
        // first page of each part only.
        let first = lines(&body.next().await.unwrap().unwrap());
        assert_eq!(first[0], serde_json::json!({"kind": "member", "chat": "c0-000000", "read": 0}));
        assert_eq!(first.iter().filter(|l| l["kind"] == "member").count(), 6);
        let pages_now = store.pages.load(Ordering::SeqCst);
        assert!(pages_now <= 2 + 2 * 2, "{pages_now} pages read for one chunk");
        // The rest, in order, each message once; pages were read as the chunks went, so what
        // was held at once was a page per part.
        let (mut count, mut last) = (first.len() - 6, (0i64, String::new(), 0u64));
        while let Some(chunk) = body.next().await {
            for l in lines(&chunk.unwrap()) {
                let e = &l["event"];
                let key =
                    (e["ts"].as_i64().unwrap(), l["chat"].as_str().unwrap().to_owned(), e["seq"].as_u64().unwrap());
                assert!(key > last, "{key:?} after {last:?}");
                last = key;
                count += 1;
            }
        }
        assert_eq!(count, MANY as usize);
        let messages_pages = 2 * ((MANY as usize / 2).div_ceil(MESSAGE_PAGE as usize) + 1);
        assert!(store.pages.load(Ordering::SeqCst) <= 2 + messages_pages + 2);
    }

    #[tokio::test]
    async fn a_failure_midway_ends_the_stream_with_an_error_not_an_end() {
        let mut made = Made::new(2, 1, 10_000);
        made.fail_after = Some(8);
        let mut body = export_from(Arc::new(made), "w", "u").await.unwrap();
        let mut got = Vec::new();
        while let Some(chunk) = body.next().await {
            got.push(chunk.map(|c| lines(&c).len()));
        }
        assert!(matches!(got.last(), Some(Err(StoreError::Unavailable(_)))), "{got:?}");
        assert!(got.iter().filter(|c| c.is_ok()).count() >= 1);
    }

    #[tokio::test]
    async fn a_failure_before_the_first_line_is_an_error_answer() {
        let mut made = Made::new(1, 1, 1);
        made.fail_after = Some(0);
        assert!(matches!(export_from(Arc::new(made), "w", "u").await, Err(Error::Unavailable { .. })));
    }

    #[tokio::test]
    async fn nobody_gets_an_empty_body() {
        let mut body = export_from(Arc::new(Made::new(3, 0, 0)), "w", "u").await.unwrap();
        assert!(body.next().await.is_none());
    }
}
