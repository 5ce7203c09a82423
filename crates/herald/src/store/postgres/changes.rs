//! Which chats moved since this node last looked: the tail checks' read
//! (`hub/repair.rs`, the live inboxes' feed), at a cost that follows the
//! shard's writes rather than the number of chats a node watches.
//!
//! Every change of a chat's seq adds a `chat_changes` row in its own
//! transaction (a trigger on `chats`): the transaction id, the chat's row id
//! and its new seq.
//! A read takes the snapshot's xmin (the oldest transaction still running),
//! then reads the rows whose xid is at least the xmin its previous read took.
//! A transaction that had not committed at that previous read has an xid at
//! least that xmin, whenever it commits: nothing committed is skipped, however
//! late its commit comes (a commit held by a synchronous standby, a batch
//! whose caller stopped waiting). What was running at the previous read is
//! read again; that is a few rows.
//!
//! The read cannot say, and the caller checks every chat it watches the old
//! way (`heads`), when:
//! - it is this node's first read of the shard;
//! - its previous read is older than [`STALE`] (a frozen node, a shard down
//!   that long): rows may have been deleted since;
//! - the shard's xmin went back (a standby promoted without the old primary's
//!   last transactions): ids may be given out again.
//!
//! Rows go once every node has read them: each node remembers the xmin it
//! read about [`KEEP`] ago and, every [`PRUNE_EVERY`], deletes the rows below
//! it, in a task of its own that does not wait for a synchronous standby (a
//! standby that is away must not hold the tail check up). Their transactions had committed by then, so a node that reads at
//! least every [`STALE`] has read them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::PgShard;
use super::heads::chat_hash;
use crate::model::ChatKey;
use crate::store::StoreError;

/// A read whose previous read is older than this cannot say what moved.
pub(super) const STALE: Duration = Duration::from_secs(30);
/// Rows of transactions finished at least this long ago are deleted.
const KEEP: Duration = Duration::from_secs(60);
/// How often a node deletes rows.
const PRUNE_EVERY: Duration = Duration::from_secs(30);
/// A deletion that takes longer is given up (its connection dropped), to be done at the next one.
const PRUNE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a read's xmin is kept as a later deletion's bound.
const MARK_EVERY: Duration = Duration::from_secs(5);

/// A node's place in one shard's `chat_changes`.
#[derive(Default)]
pub(super) struct Cursor {
    /// The previous read's xmin and when it was taken.
    last: Option<(u64, Instant)>,
    /// Earlier reads' xmins, oldest first, one per [`MARK_EVERY`].
    marks: VecDeque<(Instant, u64)>,
    pruned: Option<Instant>,
}

impl Cursor {
    /// Where the next read starts, `None` when it cannot be trusted.
    fn since(&self, now: Instant) -> Option<u64> {
        self.last.filter(|&(_, at)| now.duration_since(at) < STALE).map(|(xmin, _)| xmin)
    }

    /// A read at `now` found `xmin`; returns false when the shard's ids went
    /// back (every mark is forgotten then: it may be above rows to come).
    fn advance(&mut self, xmin: u64, now: Instant) -> bool {
        let forward = self.last.is_none_or(|(prev, _)| xmin >= prev);
        if !forward {
            self.marks.clear();
        }
        self.last = Some((xmin, now));
        if self.marks.back().is_none_or(|&(at, _)| now.duration_since(at) >= MARK_EVERY) {
            self.marks.push_back((now, xmin));
        }
        forward
    }

    /// The bound below which rows may be deleted now, if a deletion is due.
    fn prune_below(&mut self, now: Instant) -> Option<u64> {
        if self.pruned.is_some_and(|at| now.duration_since(at) < PRUNE_EVERY) {
            return None;
        }
        // The newest mark at least KEEP old; older ones are not needed any more.
        let mut bound = None;
        while let Some(&(at, xmin)) = self.marks.front()
            && now.duration_since(at) >= KEEP
        {
            bound = Some(xmin);
            self.marks.pop_front();
        }
        if bound.is_some() {
            self.pruned = Some(now);
        }
        bound
    }
}

impl PgShard {
    /// The chats of this shard whose seq moved since this node's previous
    /// call, with their latest seq; `None` when this read cannot say (see
    /// the module's text). An error leaves the place as it was.
    pub(super) async fn changed(&self) -> Result<Option<crate::store::Moved>, StoreError> {
        let mut cursor = self.changes.lock().await;
        let now = Instant::now();
        let since = cursor.since(now);
        let (xmin, rows) = self
            .read(|conn| async move {
                // The xmin first: what commits between the two statements is read again next time.
                let stmt = conn.prepare_cached("SELECT pg_snapshot_xmin(pg_current_snapshot())::text").await?;
                let xmin: String = conn.query_one(&stmt, &[]).await?.get(0);
                let rows = match since {
                    None => Vec::new(),
                    Some(since) => {
                        let stmt = conn
                            .prepare_cached(
                                "SELECT c.ws, c.chat, m.seq
                                   FROM (SELECT chat_id, max(seq) AS seq FROM chat_changes
                                          WHERE xid >= $1::text::xid8 GROUP BY chat_id) m
                                   JOIN chats c ON c.id = m.chat_id",
                            )
                            .await?;
                        conn.query(&stmt, &[&since.to_string()]).await?
                    }
                };
                Ok((xmin, rows))
            })
            .await?;
        let xmin: u64 = xmin
            .parse()
            .map_err(|_| StoreError::Unavailable(format!("unexpected transaction id {xmin:?} from the shard")))?;
        let forward = cursor.advance(xmin, now);
        if !forward {
            tracing::warn!(shard = %self.shard.name, "the shard's transaction ids went back (a standby promoted?): checking every chat");
        }
        if let Some(below) = cursor.prune_below(now) {
            self.prune(below);
        }
        drop(cursor);
        if since.is_none() || !forward {
            return Ok(None);
        }
        let found: Vec<(ChatKey, u64)> = rows
            .iter()
            .map(|r| {
                let key = ChatKey { ws: r.get::<_, &str>(0).into(), chat: r.get::<_, &str>(1).into() };
                (key, r.get::<_, i64>(2) as u64)
            })
            .collect();
        self.heads.read(found.iter().map(|(k, seq)| (chat_hash(k), *seq)));
        Ok(Some(found))
    }
}

impl PgShard {
    /// Deletes the rows below `below`, off the tail check's path: without waiting for a
    /// synchronous standby (old rows need not be on it), and bounded in time.
    fn prune(&self, below: u64) {
        let (pool, shard) = (self.pool.clone(), self.shard.name.clone());
        tokio::spawn(async move {
            let sql = format!(
                "BEGIN; SET LOCAL synchronous_commit = local; DELETE FROM chat_changes WHERE xid < '{below}'::xid8; COMMIT"
            );
            let done = match tokio::time::timeout(PRUNE_TIMEOUT, pool.get()).await {
                Ok(Ok(conn)) => match tokio::time::timeout(PRUNE_TIMEOUT, conn.batch_execute(&sql)).await {
                    Ok(r) => r.map_err(|e| e.to_string()),
                    Err(_) => {
                        // Cut off inside its transaction: the connection is closed, never lent again.
                        drop(deadpool_postgres::Object::take(conn));
                        Err("timed out".into())
                    }
                },
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no connection in time".into()),
            };
            if let Err(e) = done {
                tracing::warn!(shard = %shard, error = %e, "could not delete old chat_changes rows; trying again later");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_read_a_stale_read_and_ids_gone_back_cannot_say() {
        let t0 = Instant::now();
        let mut c = Cursor::default();
        assert_eq!(c.since(t0), None, "first read");
        assert!(c.advance(100, t0));
        assert_eq!(c.since(t0 + Duration::from_secs(1)), Some(100));
        assert_eq!(c.since(t0 + STALE), None, "a read after STALE");
        assert!(!c.advance(90, t0 + Duration::from_secs(2)), "ids went back");
        assert_eq!(c.since(t0 + Duration::from_secs(3)), Some(90));
    }

    #[test]
    fn rows_are_deleted_only_below_an_xmin_read_keep_ago() {
        let t0 = Instant::now();
        let mut c = Cursor::default();
        for s in 0..=95u64 {
            let now = t0 + Duration::from_secs(s);
            c.advance(1000 + s, now);
            let below = c.prune_below(now);
            match s {
                60 => assert_eq!(below, Some(1000), "at 60 s: what was running 60 s ago"),
                61..=89 => assert_eq!(below, None),
                _ if s < 60 => assert_eq!(below, None, "nothing is KEEP old before 60 s"),
                90 => assert_eq!(below, Some(1030), "the next one, PRUNE_EVERY later"),
                _ => assert_eq!(below, None),
            }
        }
        // After ids went back, no older mark bounds a deletion.
        c.advance(5, t0 + Duration::from_secs(100));
        assert_eq!(c.prune_below(t0 + Duration::from_secs(125)), None);
    }
}
