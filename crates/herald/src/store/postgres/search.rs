//! A shard's search: a query over the shard's index tables (`search_index.rs`) and its log, the
//! same steps as SQLite's (`sqlite/search.rs`): the rarest of the terms' grams, its postings
//! newest first in the chats allowed, each candidate checked on its folded text, the page read
//! from the log as `fetch` shows it and checked again there. Postings are read in bounded pages
//! ([`POSTINGS_PAGE`]), never a whole gram at once.
//!
//! Not here: the index's upkeep (`search_index.rs`), the order and cursor (`store/search.rs`).

use std::collections::HashMap;

use super::PgShard;
use super::log::event_from_row;
use crate::store::columns::event_columns;
use crate::store::search::{COUNT_CAP, Hit, Search, SearchQuery, search_order};
use crate::store::search_text::{body_text, matches, term_grams};
use crate::store::{BoxFuture, StoreError};

/// Postings read per round trip.
const POSTINGS_PAGE: i64 = 1024;

impl Search for PgShard {
    fn search<'a>(&'a self, q: &'a SearchQuery) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>> {
        Box::pin(async move {
            self.read(|conn| async move {
                // A user's chats, from their memberships (see `user_chats`).
                let mine = format!("SELECT c.id, c.chat FROM {} WHERE c.ws = $1", super::members::user_chats("$2"));
                let (sql, args): (&str, Vec<&(dyn tokio_postgres::types::ToSql + Sync)>) = match (&q.chat, &q.user) {
                    (Some(chat), Some(user)) => (
                        "SELECT c.id, c.chat FROM chats c JOIN members m ON m.chat_id = c.id AND m.\"user\" = $3
                          WHERE c.ws = $1 AND c.chat = $2",
                        vec![&q.ws, chat, user],
                    ),
                    (Some(chat), None) => ("SELECT id, chat FROM chats WHERE ws = $1 AND chat = $2", vec![&q.ws, chat]),
                    (None, Some(user)) => (&*mine, vec![&q.ws, user]),
                    (None, None) => ("SELECT id, chat FROM chats WHERE ws = $1", vec![&q.ws]),
                };
                let rows = conn.query(sql, &args).await?;
                let allowed: HashMap<i64, String> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
                if allowed.is_empty() {
                    return Ok(Vec::new());
                }
                let ids: Vec<i64> = allowed.keys().copied().collect();
                let mut driver: Option<(i64, String)> = None;
                let count = conn
                    .prepare_cached("SELECT count(*) FROM (SELECT 1 FROM search_grams WHERE gram = $1 LIMIT $2) AS g")
                    .await?;
                for gram in q.terms.iter().flat_map(|t| term_grams(t)) {
                    let n: i64 = conn.query_one(&count, &[&gram, &COUNT_CAP]).await?.get(0);
                    if driver.as_ref().is_none_or(|(best, _)| n < *best) {
                        driver = Some((n, gram));
                    }
                }
                let Some((_, gram)) = driver.filter(|(n, _)| *n > 0) else {
                    return Ok(Vec::new());
                };
                let want = q.limit as usize + 1;
                let postings = conn
                    .prepare_cached(
                        "SELECT g.ts, g.chat_id, g.seq, d.text FROM search_grams g
                           JOIN search_docs d ON d.chat_id = g.chat_id AND d.seq = g.seq
                          WHERE g.gram = $1 AND (g.ts, g.chat_id, g.seq) < ($2, $3, $4) AND g.chat_id = ANY($5)
                          ORDER BY g.ts DESC, g.chat_id DESC, g.seq DESC LIMIT $6",
                    )
                    .await?;
                let mut at = (q.after.as_ref().map_or(i64::MAX, |c| c.ts.saturating_add(1)), 0i64, 0i64);
                let mut found: Vec<(i64, String, i64, i64)> = Vec::new();
                'pages: loop {
                    let page = conn.query(&postings, &[&gram, &at.0, &at.1, &at.2, &ids, &POSTINGS_PAGE]).await?;
                    for r in &page {
                        let (ts, chat_id, seq, text): (i64, i64, i64, &str) = (r.get(0), r.get(1), r.get(2), r.get(3));
                        at = (ts, chat_id, seq);
                        if found.len() >= want && found.last().is_some_and(|l| l.0 > ts) {
                            break 'pages;
                        }
                        let Some(chat) = allowed.get(&chat_id) else { continue };
                        if q.after.as_ref().is_some_and(|c| !c.precedes(ts, chat, seq as u64)) {
                            continue;
                        }
                        if matches(text, &q.terms) {
                            found.push((ts, chat.clone(), chat_id, seq));
                        }
                    }
                    if (page.len() as i64) < POSTINGS_PAGE {
                        break;
                    }
                }
                let event = conn
                    .prepare_cached(&format!(
                        "SELECT {} FROM events WHERE chat_id = $1 AND seq = $2 AND type = 'message' AND NOT deleted",
                        event_columns("", true)
                    ))
                    .await?;
                let mut hits = Vec::with_capacity(found.len());
                for (_, chat, chat_id, seq) in found {
                    if let Some(row) = conn.query_opt(&event, &[&chat_id, &seq]).await? {
                        let e = event_from_row(&row)?;
                        if matches(&body_text(&e.body), &q.terms) {
                            hits.push(Hit { chat, event: e });
                        }
                    }
                }
                hits.sort_by(search_order);
                hits.truncate(want);
                Ok(hits)
            })
            .await
        })
    }
}
