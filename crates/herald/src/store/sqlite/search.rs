//! The SQLite store's search: a query over the index (`search_index.rs`, attached to every read
//! connection as `search`) and the log.
//!
//! A query picks, among its terms' grams, the one with the fewest postings (counted up to
//! [`COUNT_CAP`]), reads that gram's postings newest first, keeps those in the chats the query
//! allows and whose folded text contains every term, and stops once it has a page (and every
//! posting of the page's last `ts`, so that ties are ordered like every other shard orders them).
//! The page's messages are then read from the log as `fetch` shows them; one deleted or edited
//! since it was indexed is checked again against the log, so a deleted message is never shown.
//!
//! Not here: the index's upkeep (`search_index.rs`), the order and cursor (`store/search.rs`).

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::log::event_from_row;
use crate::store::columns::event_columns;
use crate::store::search::{COUNT_CAP, Hit, Search, SearchQuery, search_order};
use crate::store::search_text::{body_text, matches, term_grams};
use crate::store::{BoxFuture, StoreError};

impl Search for SqliteStore {
    fn search<'a>(&'a self, q: &'a SearchQuery) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>> {
        let q = q.clone();
        Box::pin(self.read(move |conn| search(conn, &q)))
    }
}

fn search(conn: &mut Connection, q: &SearchQuery) -> rusqlite::Result<Vec<Hit>> {
    let tx = conn.transaction()?;
    let allowed = allowed_chats(&tx, q)?;
    if allowed.is_empty() {
        return Ok(Vec::new());
    }
    let mut driver: Option<(i64, String)> = None;
    for gram in q.terms.iter().flat_map(|t| term_grams(t)) {
        let n: i64 = tx
            .prepare_cached("SELECT count(*) FROM (SELECT 1 FROM search.search_grams WHERE gram = ?1 LIMIT ?2)")?
            .query_row(params![gram, COUNT_CAP], |r| r.get(0))?;
        if driver.as_ref().is_none_or(|(best, _)| n < *best) {
            driver = Some((n, gram));
        }
    }
    let Some((n, gram)) = driver.filter(|(n, _)| *n > 0) else {
        return Ok(Vec::new());
    };
    metrics::histogram!("herald_search_driver_postings").record(n as f64);
    let want = q.limit as usize + 1;
    let top = q.after.as_ref().map_or(i64::MAX, |c| c.ts);
    let mut found: Vec<(i64, String, i64, u64)> = Vec::new();
    {
        let mut postings = tx.prepare_cached(
            "SELECT ts, chat_id, seq FROM search.search_grams WHERE gram = ?1 AND ts <= ?2 ORDER BY ts DESC",
        )?;
        let mut doc = tx.prepare_cached("SELECT text FROM search.search_docs WHERE chat_id = ?1 AND seq = ?2")?;
        let mut rows = postings.query(params![gram, top])?;
        while let Some(r) = rows.next()? {
            let (ts, chat_id, seq): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            if found.len() >= want && found.last().is_some_and(|l| l.0 > ts) {
                break;
            }
            let Some(chat) = allowed.get(&chat_id) else { continue };
            if q.after.as_ref().is_some_and(|c| !c.precedes(ts, chat, seq as u64)) {
                continue;
            }
            let text: Option<String> = doc.query_row(params![chat_id, seq], |r| r.get(0)).optional()?;
            if text.is_some_and(|t| matches(&t, &q.terms)) {
                found.push((ts, chat.clone(), chat_id, seq as u64));
            }
        }
    }
    let mut hits = Vec::with_capacity(found.len());
    let mut event = tx.prepare_cached(&format!(
        "SELECT {} FROM events WHERE chat_id = ?1 AND seq = ?2 AND type = 'message' AND deleted = 0",
        event_columns("", false)
    ))?;
    for (_, chat, chat_id, seq) in found {
        if let Some(e) = event.query_row(params![chat_id, seq as i64], event_from_row).optional()?
            && matches(&body_text(&e.body), &q.terms)
        {
            hits.push(Hit { chat, event: e });
        }
    }
    hits.sort_by(search_order);
    hits.truncate(want);
    Ok(hits)
}

/// The chats `q` may read, by id: the one named, those its user is a member of now, or the
/// whole workspace.
fn allowed_chats(conn: &Connection, q: &SearchQuery) -> rusqlite::Result<HashMap<i64, String>> {
    let rows = |sql: &str, args: &[&dyn rusqlite::ToSql]| -> rusqlite::Result<HashMap<i64, String>> {
        conn.prepare_cached(sql)?.query_map(args, |r| Ok((r.get(0)?, r.get(1)?)))?.collect()
    };
    match (&q.chat, &q.user) {
        (Some(chat), Some(user)) => rows(
            "SELECT c.id, c.chat FROM chats c JOIN members m ON m.chat_id = c.id AND m.user = ?3
              WHERE c.ws = ?1 AND c.chat = ?2",
            &[&q.ws, chat, user],
        ),
        (Some(chat), None) => rows("SELECT id, chat FROM chats WHERE ws = ?1 AND chat = ?2", &[&q.ws, chat]),
        (None, Some(user)) => rows(
            "SELECT c.id, c.chat FROM members m JOIN chats c ON c.id = m.chat_id WHERE m.user = ?2 AND c.ws = ?1",
            &[&q.ws, user],
        ),
        (None, None) => rows("SELECT id, chat FROM chats WHERE ws = ?1", &[&q.ws]),
    }
}
