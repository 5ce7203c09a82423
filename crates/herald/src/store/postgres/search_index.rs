//! A shard's search index upkeep: the indexer task that follows the shard's log into its index
//! tables (`search_docs`, `search_grams`, `search_positions` in `schema.sql`, version 7), in the
//! shard's own database, so a shard indexes exactly its own chats.
//!
//! It works as the SQLite indexer does (see `sqlite/search_index.rs`): per chat, the last seq read;
//! chats marked after each commit of this node, every chat compared with the log at start, and
//! every [`IDLE_PASS`] the chats whose seq moved since the previous pass began, read from
//! `chat_changes` as the tail checks read it (writes of other nodes whose indexer stopped; every
//! chat again when that read cannot say, see `changes.rs`); each message an event
//! touches re-indexed by its current state, its old text and grams removed first. Nodes sharing a
//! shard share the work: a pass over every chat reads the chats a page at a time from a place of
//! the node's own, rechecks them against their positions [`CHATS_PER_CHECK`] at a time, moves past
//! the chats with nothing to index (joins, reads, reactions) in one statement, and passes over a
//! chat another node holds (`SKIP LOCKED`; a node's own writes still wait for it). A cell's nodes
//! starting together so index each chat about once between them, not once each, and a shard
//! filled by a bulk import costs a statement per few hundred chats. Removed rows are gone from
//! the tables at commit and from the files at PostgreSQL's next vacuum.
//!
//! A failing index never fails a write: errors are counted and logged, the chat tried again later.
//! Its transactions commit without waiting for the disk or a standby (`synchronous_commit` off):
//! a crash or failover can lose the last of them, and the chats they indexed are read again from
//! their positions, which the same transactions kept.
//!
//! Not here: the queries (`search.rs`), or the matcher (`store/search_text.rs`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use serde_json::value::RawValue;
use tokio_postgres::Transaction;

use super::changes::STALE;
use super::{Checked, ensure_schema};
use crate::store::search_pending::{Pending, Work};
use crate::store::search_text::{body_text, grams};
use crate::store::shard_spec::chain;

/// Events read per chat per transaction.
const EVENTS_PER_TX: i64 = 512;
/// Chats checked against their positions at once, before they are indexed one by one.
const CHATS_PER_CHECK: usize = 256;
/// Chats listed at a time in a pass over every chat.
const PAGE: i64 = 4_096;
/// With nothing marked, a pass over every chat this often.
const IDLE_PASS: Duration = Duration::from_secs(10);

/// Where the next pass over every chat may start instead: the shard's xmin taken at the start of
/// the previous one that ended well, and when (see `changes.rs`: the `chat_changes` rows of every
/// transaction from that xmin on are still there while it is younger than [`STALE`]).
type Since = Option<(u64, Instant)>;

/// Runs the indexer of `shard` until `pending` closes.
pub(super) async fn run(shard: Arc<Checked>, pool: Pool, pending: Arc<Pending>) {
    let mut since: Since = None;
    loop {
        let work = pending.next(IDLE_PASS).await;
        if work == Work::Close {
            return;
        }
        let kind = if work == Work::All { "all" } else { "chats" };
        if let Err(e) = pass(&shard, &pool, work, &pending, &mut since).await {
            since = None;
            tracing::warn!(shard = %shard.name, error = %e, "search indexing failed; retrying");
            metrics::counter!("herald_search_index_errors_total").increment(1);
            pending.mark_all();
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        metrics::counter!("herald_search_index_passes_total", "kind" => kind).increment(1);
    }
}

async fn pass(shard: &Checked, pool: &Pool, work: Work, pending: &Pending, since: &mut Since) -> Result<(), String> {
    let mut conn = pool.get().await.map_err(|e| chain(&e))?;
    ensure_schema(shard, &conn).await.map_err(|e| e.to_string())?;
    if let Work::Chats(keys) = work {
        let ws: Vec<&str> = keys.iter().map(|k| &*k.ws).collect();
        let chat: Vec<&str> = keys.iter().map(|k| &*k.chat).collect();
        let rows = conn
            .query(
                "SELECT c.id FROM unnest($1::text[], $2::text[]) AS k(ws, chat)
                   JOIN chats c ON c.ws = k.ws AND c.chat = k.chat
                   LEFT JOIN search_positions p ON p.chat_id = c.id
                  WHERE c.seq > coalesce(p.seq, 0)",
                &[&ws, &chat],
            )
            .await
            .map_err(|e| chain(&e))?;
        let chats: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        // This node's own writes wait for a chat another node is indexing, and then index
        // what that node's read missed.
        index_list(&mut conn, &chats, false, pending).await?;
        pending.report_lag(0);
        return Ok(());
    }
    // The xmin first: whatever commits from here on is read by the next pass.
    let at = Instant::now();
    let xmin: String = conn
        .query_one("SELECT pg_snapshot_xmin(pg_current_snapshot())::text", &[])
        .await
        .map_err(|e| chain(&e))?
        .get(0);
    let xmin: u64 = xmin.parse().map_err(|_| format!("unexpected transaction id {xmin:?}"))?;
    let from = since.take().filter(|&(prev, taken)| at.duration_since(taken) < STALE && xmin >= prev);
    if let Some((from, _)) = from {
        // Only the chats whose seq moved since the last pass began: what a node that stopped
        // before indexing its own writes left. Every node reading every chat every 10 s would
        // cost the shard the cell's nodes times its chats.
        let rows = conn
            .query(
                "SELECT DISTINCT c.id FROM chat_changes ch JOIN chats c ON c.id = ch.chat_id
                   LEFT JOIN search_positions p ON p.chat_id = c.id
                  WHERE ch.xid >= $1::text::xid8 AND c.seq > coalesce(p.seq, 0)",
                &[&from.to_string()],
            )
            .await
            .map_err(|e| chain(&e))?;
        let chats: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
        if index_list(&mut conn, &chats, true, pending).await? {
            *since = Some((xmin, at));
        }
        pending.report_lag(0);
        return Ok(());
    }
    // Every chat, a page at a time (a node's memory does not grow with the shard), from a place
    // of this node's own round to where it began: nodes that start together would otherwise
    // walk the same chats in the same order, each waiting on the chat the other holds.
    let last: i64 = conn.query_one("SELECT coalesce(max(id), 0) FROM chats", &[]).await.map_err(|e| chain(&e))?.get(0);
    let begin = ((std::process::id() as u64).wrapping_mul(2_654_435_761) % (last.max(0) as u64 + 1)) as i64;
    for (from, to) in [(begin, i64::MAX), (i64::MIN, begin)] {
        let mut from = from;
        loop {
            let rows = conn
                .query(
                    "SELECT c.id FROM chats c LEFT JOIN search_positions p ON p.chat_id = c.id
                      WHERE c.id >= $1 AND c.id < $2 AND c.seq > coalesce(p.seq, 0)
                      ORDER BY c.id LIMIT $3",
                    &[&from, &to, &PAGE],
                )
                .await
                .map_err(|e| chain(&e))?;
            let chats: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
            // A chat another node is indexing is left to it: what its read does not reach,
            // the node that wrote it has marked for its own indexer.
            if !index_list(&mut conn, &chats, true, pending).await? {
                return Ok(());
            }
            match chats.last() {
                Some(&id) if (chats.len() as i64) == PAGE => from = id + 1,
                _ => break,
            }
        }
    }
    *since = Some((xmin, at));
    pending.report_lag(0);
    Ok(())
}

/// Indexes `chats`. In a pass over every chat (`whole`), [`CHATS_PER_CHECK`] at a time: those with
/// nothing to index are moved past together, the rest checked against their positions again (what
/// another node indexed since the list was read is passed over), and a chat another node is
/// indexing is left to it. This node's own marked chats were just read behind: indexed as listed.
/// Answers false when the indexer is closing.
async fn index_list(
    conn: &mut deadpool_postgres::Object,
    chats: &[i64],
    whole: bool,
    pending: &Pending,
) -> Result<bool, String> {
    let mut behind = chats.len();
    for chunk in chats.chunks(CHATS_PER_CHECK) {
        let left: Vec<i64> = if whole {
            pass_over_quiet(conn, chunk).await.map_err(|e| chain(&e))?;
            let rows = conn
                .query(
                    "SELECT c.id FROM chats c LEFT JOIN search_positions p ON p.chat_id = c.id
                      WHERE c.id = ANY($1) AND c.seq > coalesce(p.seq, 0)",
                    &[&chunk],
                )
                .await
                .map_err(|e| chain(&e))?;
            rows.iter().map(|r| r.get(0)).collect()
        } else {
            chunk.to_vec()
        };
        behind -= chunk.len() - left.len();
        for chat_id in left {
            if pending.closing() {
                return Ok(false);
            }
            pending.report_lag(behind);
            behind -= 1;
            index_chat(conn, chat_id, whole).await?;
        }
    }
    Ok(true)
}

/// Moves the position of each of `chats` with nothing to index past it (no message, edit or
/// delete: joins, reads, reactions) to the chat's last seq, in one statement: a shard filled by
/// a bulk import of memberships costs its indexer a statement per [`CHATS_PER_CHECK`] chats, not
/// a transaction per chat. The chat's row and its events are read in one snapshot, so no message
/// is passed over; rows are locked in id order, so two nodes doing this never deadlock.
async fn pass_over_quiet(conn: &mut deadpool_postgres::Object, chats: &[i64]) -> Result<(), tokio_postgres::Error> {
    let tx = conn.transaction().await?;
    tx.batch_execute("SET LOCAL synchronous_commit TO off").await?;
    tx.execute(
        "INSERT INTO search_positions (chat_id, seq)
         SELECT c.id, c.seq FROM chats c LEFT JOIN search_positions p ON p.chat_id = c.id
          WHERE c.id = ANY($1) AND c.seq > coalesce(p.seq, 0)
            AND NOT EXISTS (SELECT 1 FROM events e
                             WHERE e.chat_id = c.id AND e.seq > coalesce(p.seq, 0)
                               AND e.type IN ('message', 'edit', 'delete'))
          ORDER BY c.id
         ON CONFLICT (chat_id) DO UPDATE SET seq = greatest(search_positions.seq, excluded.seq)",
        &[&chats],
    )
    .await?;
    tx.commit().await
}

/// Indexes what the chat's log holds past its position, a transaction per [`EVENTS_PER_TX`] events.
async fn index_chat(conn: &mut deadpool_postgres::Object, chat_id: i64, skip_locked: bool) -> Result<(), String> {
    loop {
        let tx = conn.transaction().await.map_err(|e| chain(&e))?;
        // The index is derived from the log and rebuilt from its positions after any loss,
        // so its commits need not wait for the WAL's flush, nor for a standby.
        tx.batch_execute("SET LOCAL synchronous_commit TO off").await.map_err(|e| chain(&e))?;
        let read = index_some(&tx, chat_id, skip_locked).await.map_err(|e| chain(&e))?;
        tx.commit().await.map_err(|e| chain(&e))?;
        metrics::counter!("herald_search_indexed_events_total").increment(read as u64);
        if (read as i64) < EVENTS_PER_TX {
            return Ok(());
        }
    }
}

/// Indexes up to [`EVENTS_PER_TX`] events of the chat after its position; answers how many.
async fn index_some(tx: &Transaction<'_>, chat_id: i64, skip_locked: bool) -> Result<usize, tokio_postgres::Error> {
    tx.execute(
        "INSERT INTO search_positions (chat_id, seq) VALUES ($1, 0) ON CONFLICT (chat_id) DO NOTHING",
        &[&chat_id],
    )
    .await?;
    // Skipped, a chat another node is indexing now is left to it: what its read does not reach,
    // the node that wrote it has marked for its own indexer.
    let lock = if skip_locked {
        "SELECT seq FROM search_positions WHERE chat_id = $1 FOR UPDATE SKIP LOCKED"
    } else {
        "SELECT seq FROM search_positions WHERE chat_id = $1 FOR UPDATE"
    };
    let Some(from) = tx.query_opt(lock, &[&chat_id]).await? else {
        return Ok(0);
    };
    let from: i64 = from.get(0);
    let rows = tx
        .query(
            "SELECT seq, type, target FROM events WHERE chat_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            &[&chat_id, &from, &EVENTS_PER_TX],
        )
        .await?;
    let Some(last) = rows.last().map(|r| r.get::<_, i64>(0)) else {
        return Ok(0);
    };
    let touched: BTreeSet<i64> = rows
        .iter()
        .filter_map(|r| match r.get::<_, &str>(1) {
            "message" => Some(r.get(0)),
            "edit" | "delete" => r.get(2),
            _ => None,
        })
        .collect();
    for seq in touched {
        reindex(tx, chat_id, seq).await?;
    }
    tx.execute("UPDATE search_positions SET seq = $2 WHERE chat_id = $1", &[&chat_id, &last]).await?;
    Ok(rows.len())
}

/// Replaces message `seq`'s entry by its current state in the log (none, when it is deleted).
async fn reindex(tx: &Transaction<'_>, chat_id: i64, seq: i64) -> Result<(), tokio_postgres::Error> {
    let old =
        tx.query_opt("SELECT ts, text FROM search_docs WHERE chat_id = $1 AND seq = $2", &[&chat_id, &seq]).await?;
    let current = tx
        .query_opt(
            "SELECT ts, body FROM events WHERE chat_id = $1 AND seq = $2 AND type = 'message' AND NOT deleted",
            &[&chat_id, &seq],
        )
        .await?;
    let text = current
        .as_ref()
        .map(|r| RawValue::from_string(r.get::<_, String>(1)).map(|raw| body_text(&raw)).unwrap_or_default());
    if let (Some(o), Some(t)) = (&old, &text)
        && o.get::<_, &str>(1) == t
    {
        return Ok(());
    }
    if let Some(o) = &old {
        let old_grams: Vec<String> = grams(o.get::<_, &str>(1)).into_iter().collect();
        tx.execute(
            "DELETE FROM search_grams WHERE gram = ANY($1) AND ts = $2 AND chat_id = $3 AND seq = $4",
            &[&old_grams, &o.get::<_, i64>(0), &chat_id, &seq],
        )
        .await?;
        tx.execute("DELETE FROM search_docs WHERE chat_id = $1 AND seq = $2", &[&chat_id, &seq]).await?;
    }
    if let (Some(c), Some(t)) = (&current, &text)
        && !t.is_empty()
    {
        let ts: i64 = c.get(0);
        tx.execute(
            "INSERT INTO search_docs (chat_id, seq, ts, text) VALUES ($1, $2, $3, $4)",
            &[&chat_id, &seq, &ts, t],
        )
        .await?;
        let new_grams: Vec<String> = grams(t).into_iter().collect();
        tx.execute(
            "INSERT INTO search_grams (gram, ts, chat_id, seq) SELECT g, $2, $3, $4 FROM unnest($1::text[]) AS g
             ON CONFLICT DO NOTHING",
            &[&new_grams, &ts, &chat_id, &seq],
        )
        .await?;
    }
    Ok(())
}
