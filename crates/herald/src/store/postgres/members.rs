//! A shard's members and inboxes: a member's read position and mute, and
//! the inbox's page and entries, each unread count made of counts kept as
//! counts (see [`crate::store::unread`]).
//!
//! Not here: joining, leaving, reading and muting (writes of the log: `writer.rs`).

use std::time::Instant;

use herald_protocol::reply::InboxEntry;

use super::PgShard;
use super::log::{event_from_row_at, select_chat};
use crate::model::ChatKey;
use crate::store::apply;
use crate::store::columns::{POSTGRES, event_columns, parse_profile, thread_unread_sql};
use crate::store::{BoxFuture, InboxCursor, Member, Membership, StoreError};

impl Membership for PgShard {
    fn member<'a>(&'a self, key: &'a ChatKey, user: &'a str) -> BoxFuture<'a, Result<Option<Member>, StoreError>> {
        Box::pin(async move {
            let found = self
                .read(|conn| async move {
                    let Some(row) = select_chat(&conn, key, false).await? else {
                        return Err(StoreError::NotFound(format!("no chat {}", key.chat)).into());
                    };
                    let stmt = conn
                        .prepare_cached(
                            r#"SELECT m.read_seq, mu.until_ms FROM members m
                               LEFT JOIN mutes mu ON mu.chat_id = m.chat_id AND mu."user" = m."user"
                               WHERE m.chat_id = $1 AND m."user" = $2"#,
                        )
                        .await?;
                    Ok(conn.query_opt(&stmt, &[&row.id, &user]).await?)
                })
                .await?;
            Ok(found.map(|r| {
                let until: Option<i64> = r.get(1);
                Member {
                    read: r.get::<_, i64>(0) as u64,
                    muted_until_ms: until.filter(|_| apply::is_muted(until, apply::now_ms())),
                }
            }))
        })
    }

    fn inbox<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a InboxCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<InboxEntry>, StoreError>> {
        Box::pin(async move {
            let started = Instant::now();
            let (ts, chat) = after.map_or((i64::MAX, ""), |c| (c.ts, c.chat.as_str()));
            let sql = inbox_sql(
                &user_chats("$1"),
                r#"m."user" = $1 AND c.ws = $2 AND (c.last_ts < $3 OR (c.last_ts = $3 AND c.chat > $4))
                   ORDER BY c.last_ts DESC, c.chat LIMIT $5"#,
            );
            let rows = self.read_rows(&sql, &[&user, &ws, &ts, &chat, &(i64::from(limit) + 1)]).await?;
            metrics::histogram!("herald_store_read_seconds").record(started.elapsed().as_secs_f64());
            rows.iter().map(inbox_entry_from_row).collect()
        })
    }

    fn member_chats<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>> {
        Box::pin(async move {
            let sql = format!(
                "SELECT c.chat, c.last_ts FROM {} WHERE c.ws = $2 ORDER BY c.last_ts DESC, c.chat LIMIT $3",
                user_chats("$1")
            );
            let rows = self.read_rows(&sql, &[&user, &ws, &i64::from(limit)]).await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn inbox_entry<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<InboxEntry>, StoreError>> {
        Box::pin(async move {
            // One chat: found by its name, then the membership.
            let sql = inbox_sql(
                "members m JOIN chats c ON c.id = m.chat_id",
                r#"m."user" = $1 AND c.ws = $2 AND c.chat = $3"#,
            );
            let rows = self.read_rows(&sql, &[&user, &&*key.ws, &&*key.chat]).await?;
            rows.first().map(inbox_entry_from_row).transpose()
        })
    }
}

/// A `FROM` clause of a user's memberships `m` and their chats `c`:
/// `param` is the query's parameter holding the user. Each `OFFSET 0` keeps
/// the planner from flattening its subquery, so the join is always a walk of
/// the user's memberships (a few index entries) with one chat row looked up
/// for each, never a read of a workspace's every chat (in `last_ts` order, or
/// hashed) checked against the user. The planner does choose the second when
/// its statistics are stale, as they are after a bulk import or on a shard
/// that grew quickly: measured, one inbox read went from 0.3 ms to 300 ms,
/// and a cell's opening spent most of its PostgreSQL time there.
pub(super) fn user_chats(param: &str) -> String {
    format!(
        r#"(SELECT chat_id, read_seq, "user" FROM members WHERE "user" = {param} OFFSET 0) AS m
           CROSS JOIN LATERAL (SELECT * FROM chats WHERE chats.id = m.chat_id OFFSET 0) AS c"#
    )
}

/// The inbox's query (see the SQLite store's, which this one mirrors): the
/// chats chosen by `{filter}`, each with the counts its unread number is
/// made of, its profile, its threads' and mentions' counts and its latest
/// message as fetch shows it. Each count is an index lookup; no chat's
/// history is read.
const INBOX_SQL: &str = r#"
SELECT p.chat, p.seq, p.last_ts, p.read_seq, p.messages,
    coalesce((SELECT e.ord FROM events e WHERE e.chat_id = p.id AND e.seq <= p.read_seq AND e.ord IS NOT NULL
              ORDER BY e.seq DESC LIMIT 1), 0),
    coalesce((SELECT e.user_ord FROM events e WHERE e.chat_id = p.id AND e."user" = p."user" AND e.ord IS NOT NULL
              ORDER BY e.seq DESC LIMIT 1), 0),
    coalesce((SELECT e.user_ord FROM events e WHERE e.chat_id = p.id AND e."user" = p."user"
              AND e.seq <= p.read_seq AND e.ord IS NOT NULL ORDER BY e.seq DESC LIMIT 1), 0),
    (SELECT count(*) FROM events e WHERE e.chat_id = p.id AND e.deleted AND e.seq > p.read_seq
              AND e."user" IS DISTINCT FROM p."user" AND e.thread IS NULL),
    p.profile,
    (SELECT coalesce(sum({threads}), 0)::bigint FROM thread_reads t
       JOIN events r ON r.chat_id = t.chat_id AND r.seq = t.root
      WHERE t.chat_id = p.id AND t."user" = p."user" AND t.follows),
    (SELECT count(*) FROM mentions n WHERE n.chat_id = p.id AND n."user" = p."user" AND n.seq > p.read_seq),
    {last}
FROM (SELECT c.id, c.chat, c.seq, c.last_ts, c.messages, c.last_message, c.profile, m.read_seq, m."user"
        FROM {from}
       WHERE {filter}) AS p
LEFT JOIN events l ON l.chat_id = p.id AND l.seq = p.last_message
ORDER BY p.last_ts DESC, p.chat
"#;

/// [`INBOX_SQL`] with `filter`, over `from` (the tables joined, or [`user_chats`]).
fn inbox_sql(from: &str, filter: &str) -> String {
    INBOX_SQL
        .replace("{from}", from)
        .replace("{threads}", &thread_unread_sql(&POSTGRES))
        .replace("{last}", &event_columns("l.", true))
        .replace("{filter}", filter)
}

fn inbox_entry_from_row(r: &tokio_postgres::Row) -> Result<InboxEntry, StoreError> {
    let n = |i: usize| r.get::<_, i64>(i) as u64;
    let last = match r.get::<_, Option<i64>>(12) {
        None => None,
        Some(_) => Some(event_from_row_at(r, 12)?),
    };
    let profile: Option<String> = r.get(9);
    Ok(InboxEntry {
        chat: r.get(0),
        seq: n(1),
        ts: r.get(2),
        read: n(3),
        unread: crate::store::unread(n(4), n(5), n(6), n(7), n(8)),
        last,
        profile: Some(parse_profile(profile.as_deref())),
        threads: Some(r.get::<_, i64>(10).max(0) as u64),
        mentions: Some(n(11)),
    })
}

pub(super) async fn read_position(
    conn: &impl std::ops::Deref<Target = deadpool_postgres::ClientWrapper>,
    chat: i64,
    user: &str,
) -> Result<Option<u64>, tokio_postgres::Error> {
    let stmt = conn.prepare_cached(r#"SELECT read_seq FROM members WHERE chat_id = $1 AND "user" = $2"#).await?;
    Ok(conn.query_opt(&stmt, &[&chat, &user]).await?.map(|r| r.get::<_, i64>(0) as u64))
}
