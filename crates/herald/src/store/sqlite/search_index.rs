//! The SQLite store's search index: its own database file beside the log (`search.db`, its own
//! connection and thread, so that index writes never wait on or hold up the log's one writer),
//! and the indexer thread that follows the log into it.
//!
//! The indexer keeps, per chat, the last seq it has read (`search_positions`); after every commit
//! the store marks the chat ([`Pending`]), and at start (and now and then) the indexer compares
//! every chat's position with the log, so a restart, a crash or a deleted index file catch up. It
//! reads a chat's events after its position and re-indexes each message they touch by its current
//! state in the log: a `message` by itself, an `edit` or `delete` by its target. Re-indexing
//! removes the message's old text and grams first, so an edited message is found only by its
//! new text and a deleted one (an erased user's included: erasure deletes through the log) not at
//! all. `secure_delete` overwrites what is removed, and the WAL is checkpointed and truncated
//! after a pass that removed text, as the log does after an erasure.
//!
//! A failing index never fails a write: errors are counted and logged, and the chat is tried
//! again on the next pass.
//!
//! Not here: the queries (`search.rs`), or the matcher (`store/search_text.rs`).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use serde_json::value::RawValue;

use crate::store::search_pending::{Pending, Work, indexing_on};
use crate::store::search_text::{body_text, grams};

/// The index's file in `--data`.
pub const SEARCH_FILE: &str = "search.db";

/// Events read per chat per transaction: bounds a transaction's time and memory.
const EVENTS_PER_TX: i64 = 512;
/// With nothing marked, a pass over every chat this often (writes of another process).
const IDLE_PASS: Duration = Duration::from_secs(60);
/// How long the indexer lets writes gather after the first one wakes it (well inside the
/// contract's 2 s from a send's answer to the message being found).
const GATHER: Duration = Duration::from_millis(100);

/// The index's tables. `search_grams` is ordered by gram, then newest first, so that a query
/// reads a gram's postings from the newest and stops once it has a page.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS search_docs (
    chat_id INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    ts      INTEGER NOT NULL,
    text    TEXT NOT NULL,      -- the message's folded text
    PRIMARY KEY (chat_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS search_grams (
    gram    TEXT NOT NULL,
    ts      INTEGER NOT NULL,
    chat_id INTEGER NOT NULL,
    seq     INTEGER NOT NULL,
    PRIMARY KEY (gram, ts, chat_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS search_positions (
    chat_id INTEGER PRIMARY KEY,
    seq     INTEGER NOT NULL     -- the last event of the chat the index has read
);
";

/// The index's indexer thread, and the queue the store marks after each write.
pub(super) struct SearchIndex {
    pub pending: Arc<Pending>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl SearchIndex {
    /// Stops the indexer and waits until it has let go of the index file.
    pub fn close(&self) {
        self.pending.close();
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// Opens (creating) the index file and starts the indexer thread over log file `log`. An index
/// that cannot be opened is logged and counted, never a reason for the store not to open:
/// searches then fail, writes do not.
pub(super) fn start(dir: &Path, log: &Path) -> SearchIndex {
    let pending = Arc::new(Pending::new());
    let thread = match open(dir, log) {
        Ok(conn) if indexing_on() => {
            let p = pending.clone();
            std::thread::Builder::new()
                .name("herald-search-indexer".into())
                .spawn(move || run(conn, &p))
                .map_err(|e| tracing::error!(error = %e, "the search indexer did not start"))
                .ok()
        }
        Ok(_) => {
            tracing::warn!("search indexing is off (HERALD_SEARCH_INDEX=off): new messages are not found");
            None
        }
        Err(e) => {
            failed(&e);
            None
        }
    };
    SearchIndex { pending, thread: std::sync::Mutex::new(thread) }
}

fn open(dir: &Path, log: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(dir.join(SEARCH_FILE))?;
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    // The index can be rebuilt from the log: a commit need not be fsynced to be safe.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "secure_delete", "ON")?;
    conn.execute_batch(SCHEMA)?;
    conn.execute("ATTACH DATABASE ?1 AS log", [log.to_string_lossy()])?;
    Ok(conn)
}

fn run(mut conn: Connection, pending: &Pending) {
    loop {
        let mut work = pending.wait(IDLE_PASS);
        if let Work::Chats(keys) = &mut work {
            // Let a burst of writes gather, so one transaction indexes many messages: the index's
            // pages are then written once per pass, not once per message.
            let until = std::time::Instant::now() + GATHER;
            while std::time::Instant::now() < until && !pending.closing() {
                std::thread::sleep(Duration::from_millis(5));
            }
            match pending.take() {
                Some(Work::Chats(more)) => {
                    keys.extend(more);
                    keys.sort();
                    keys.dedup();
                }
                Some(other) => work = other,
                None => {}
            }
        }
        let kind = if work == Work::All { "all" } else { "chats" };
        let chats = match work {
            Work::Close => return,
            Work::All => all_behind(&conn),
            Work::Chats(keys) => keys_behind(&conn, &keys),
        };
        let chats = match chats {
            Ok(c) => c,
            Err(e) => {
                failed(&e);
                std::thread::sleep(Duration::from_secs(1));
                pending.mark_all();
                continue;
            }
        };
        let mut removed = false;
        let mut queue: std::collections::VecDeque<i64> = chats.into();
        while !queue.is_empty() {
            if pending.closing() {
                return;
            }
            pending.report_lag(queue.len());
            match index_some(&mut conn, &mut queue) {
                Ok(r) => removed |= r,
                Err(e) => {
                    failed(&e);
                    pending.mark_all();
                    break;
                }
            }
        }
        if removed {
            checkpoint(&conn);
        }
        pending.report_lag(0);
        metrics::counter!("herald_search_index_passes_total", "kind" => kind).increment(1);
    }
}

fn failed(e: &rusqlite::Error) {
    tracing::error!(error = %e, "search indexing failed; retrying on the next pass");
    metrics::counter!("herald_search_index_errors_total").increment(1);
}

/// Removed text must leave the files: truncate the WAL once readers let it.
fn checkpoint(conn: &Connection) {
    for _ in 0..50 {
        match conn.query_row("PRAGMA main.wal_checkpoint(TRUNCATE)", [], |r| r.get::<_, i64>(0)) {
            Ok(0) => return,
            Ok(_) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return failed(&e),
        }
    }
}

/// Every chat whose log is ahead of the index.
fn all_behind(conn: &Connection) -> rusqlite::Result<Vec<i64>> {
    conn.prepare_cached(
        "SELECT c.id FROM log.chats c LEFT JOIN search_positions p ON p.chat_id = c.id
          WHERE c.seq > coalesce(p.seq, 0)",
    )?
    .query_map([], |r| r.get(0))?
    .collect()
}

/// The chats of `keys` whose log is ahead of the index.
fn keys_behind(conn: &Connection, keys: &[crate::model::ChatKey]) -> rusqlite::Result<Vec<i64>> {
    let mut stmt = conn.prepare_cached(
        "SELECT c.id FROM log.chats c LEFT JOIN search_positions p ON p.chat_id = c.id
          WHERE c.ws = ?1 AND c.chat = ?2 AND c.seq > coalesce(p.seq, 0)",
    )?;
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        if let Some(id) = stmt.query_row(params![&*key.ws, &*key.chat], |r| r.get(0)).optional()? {
            out.push(id);
        }
    }
    Ok(out)
}

/// Indexes the chats at the front of `queue`, in one transaction of at most [`EVENTS_PER_TX`]
/// events, popping each chat brought up to its log. Answers whether text was removed.
fn index_some(conn: &mut Connection, queue: &mut std::collections::VecDeque<i64>) -> rusqlite::Result<bool> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let (mut removed, mut budget) = (false, EVENTS_PER_TX);
    while let Some(&chat_id) = queue.front() {
        if budget <= 0 {
            break;
        }
        let asked = budget;
        let (read, r) = index_chat(&tx, chat_id, asked)?;
        removed |= r;
        budget -= read;
        if read < asked {
            // Fewer than asked: the chat is up to its log.
            queue.pop_front();
        }
    }
    tx.commit()?;
    Ok(removed)
}

/// Brings chat `chat_id`'s index up to at most `limit` more events of its log, in `tx`. Answers
/// how many events it read and whether text was removed.
fn index_chat(tx: &rusqlite::Transaction<'_>, chat_id: i64, limit: i64) -> rusqlite::Result<(i64, bool)> {
    let mut removed = false;
    {
        let from: i64 = tx
            .query_row("SELECT seq FROM search_positions WHERE chat_id = ?1", [chat_id], |r| r.get(0))
            .optional()?
            .unwrap_or(0);
        let rows: Vec<(i64, String, Option<i64>)> = tx
            .prepare_cached(
                "SELECT seq, type, target FROM log.events WHERE chat_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )?
            .query_map(params![chat_id, from, limit], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let Some(last) = rows.last().map(|r| r.0) else {
            return Ok((0, removed));
        };
        let touched: BTreeSet<i64> = rows
            .iter()
            .filter_map(|(seq, kind, target)| match kind.as_str() {
                "message" => Some(*seq),
                "edit" | "delete" => *target,
                _ => None,
            })
            .collect();
        for seq in touched {
            removed |= reindex(tx, chat_id, seq)?;
        }
        tx.execute(
            "INSERT INTO search_positions (chat_id, seq) VALUES (?1, ?2)
             ON CONFLICT (chat_id) DO UPDATE SET seq = excluded.seq",
            params![chat_id, last],
        )?;
        metrics::counter!("herald_search_indexed_events_total").increment(rows.len() as u64);
        Ok((rows.len() as i64, removed))
    }
}

/// Replaces message `seq`'s entry by its current state in the log (none, when it is deleted).
/// Answers whether an older text was removed.
fn reindex(tx: &rusqlite::Transaction<'_>, chat_id: i64, seq: i64) -> rusqlite::Result<bool> {
    let old: Option<(i64, String)> = tx
        .prepare_cached("SELECT ts, text FROM search_docs WHERE chat_id = ?1 AND seq = ?2")?
        .query_row(params![chat_id, seq], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let current: Option<(i64, String)> = tx
        .prepare_cached(
            "SELECT ts, body FROM log.events WHERE chat_id = ?1 AND seq = ?2 AND type = 'message' AND deleted = 0",
        )?
        .query_row(params![chat_id, seq], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let text = current
        .as_ref()
        .map(|(_, body)| RawValue::from_string(body.clone()).map(|raw| body_text(&raw)).unwrap_or_default());
    if let (Some((_, old_text)), Some(new_text)) = (&old, &text)
        && old_text == new_text
    {
        return Ok(false);
    }
    if let Some((ts, old_text)) = &old {
        let mut del =
            tx.prepare_cached("DELETE FROM search_grams WHERE gram = ?1 AND ts = ?2 AND chat_id = ?3 AND seq = ?4")?;
        for g in grams(old_text) {
            del.execute(params![g, ts, chat_id, seq])?;
        }
        tx.execute("DELETE FROM search_docs WHERE chat_id = ?1 AND seq = ?2", params![chat_id, seq])?;
    }
    if let (Some((ts, _)), Some(text)) = (&current, &text)
        && !text.is_empty()
    {
        tx.prepare_cached("INSERT INTO search_docs (chat_id, seq, ts, text) VALUES (?1, ?2, ?3, ?4)")?
            .execute(params![chat_id, seq, ts, text])?;
        let mut ins =
            tx.prepare_cached("INSERT OR IGNORE INTO search_grams (gram, ts, chat_id, seq) VALUES (?1, ?2, ?3, ?4)")?;
        for g in grams(text) {
            ins.execute(params![g, ts, chat_id, seq])?;
        }
    }
    Ok(old.is_some())
}
