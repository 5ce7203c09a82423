//! A shard's conversations (protocol v1.2): a chat's profile, the shard's part of a workspace's
//! chat list, member pages, a thread's replies, the threads a user follows, pins, who reacted, and
//! the streams left open. Mirrors the SQLite store's statements; each read is a few index lookups
//! or one bounded range.
//!
//! Not here: the writes (`writer.rs` under `apply`'s rules), or merging shards (`sharded`).

use std::collections::BTreeMap;

use herald_protocol::reply::{ChatView, MemberEntry, PinEntry, Profile, ThreadEntry};

use super::PgShard;
use super::log::{event_from_row, event_from_row_at, select_chat};
use super::members::read_position;
use crate::model::{ChatInfo, ChatKey};
use crate::store::columns::{POSTGRES, event_columns, parse_profile, thread_unread_sql};
use crate::store::{BoxFuture, Conversations, Fetched, StoreError, ThreadCursor, sql_seq};

/// The chat row of `key`, `NotFound` if none; with `member`, `Forbidden` unless a member.
async fn chat_for(
    shard: &PgShard,
    key: &ChatKey,
    member: Option<&str>,
) -> Result<crate::store::apply::ChatRow, StoreError> {
    shard
        .read(|conn| async move {
            let Some(row) = select_chat(&conn, key, false).await? else {
                return Err(StoreError::NotFound(format!("no chat {}", key.chat)).into());
            };
            if let Some(user) = member
                && read_position(&conn, row.id, user).await?.is_none()
            {
                return Err(StoreError::Forbidden(format!("not a member of {}", key.chat)).into());
            }
            Ok(row)
        })
        .await
}

impl Conversations for PgShard {
    fn chat_view<'a>(&'a self, key: &'a ChatKey) -> BoxFuture<'a, Result<Option<(ChatInfo, Profile)>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .read_rows(
                    "SELECT seq, members, open, profile, profile_seq FROM chats WHERE ws = $1 AND chat = $2",
                    &[&&*key.ws, &&*key.chat],
                )
                .await?;
            Ok(rows.first().map(|r| {
                let info = ChatInfo {
                    seq: r.get::<_, i64>(0) as u64,
                    members: r.get::<_, i64>(1) as u64,
                    open: r.get(2),
                    profiled: r.get::<_, i64>(4) > 0,
                };
                let profile: Option<String> = r.get(3);
                (info, parse_profile(profile.as_deref()))
            }))
        })
    }

    fn chat_list<'a>(
        &'a self,
        ws: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatView>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .read_rows(
                    r#"SELECT chat, seq, members, open, profile FROM chats
                        WHERE ws = $1 AND chat COLLATE "C" > $2 ORDER BY chat COLLATE "C" LIMIT $3"#,
                    &[&ws, &after.unwrap_or(""), &(i64::from(limit) + 1)],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| {
                    let profile: Option<String> = r.get(4);
                    ChatView::new(
                        r.get(0),
                        r.get::<_, i64>(1) as u64,
                        r.get::<_, i64>(2) as u64,
                        r.get(3),
                        parse_profile(profile.as_deref()),
                    )
                })
                .collect())
        })
    }

    fn member_list<'a>(
        &'a self,
        key: &'a ChatKey,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<(Vec<MemberEntry>, u64), StoreError>> {
        Box::pin(async move {
            let row = chat_for(self, key, None).await?;
            let rows = self
                .read_rows(
                    r#"SELECT "user", read_seq FROM members WHERE chat_id = $1 AND "user" COLLATE "C" > $2
                        ORDER BY "user" COLLATE "C" LIMIT $3"#,
                    &[&row.id, &after.unwrap_or(""), &(i64::from(limit) + 1)],
                )
                .await?;
            let members =
                rows.iter().map(|r| MemberEntry { user: r.get(0), read: r.get::<_, i64>(1) as u64 }).collect();
            Ok((members, row.members))
        })
    }

    fn thread_fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        root: u64,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        Box::pin(async move {
            let row = chat_for(self, key, member).await?;
            let found = self
                .read_rows(
                    "SELECT thread IS NULL FROM events WHERE chat_id = $1 AND seq = $2 AND type = 'message'",
                    &[&row.id, &sql_seq(root)],
                )
                .await?;
            match found.first().map(|r| r.get::<_, bool>(0)) {
                None => return Err(StoreError::NotFound(format!("no message {root} in {}", key.chat))),
                Some(false) => {
                    return Err(StoreError::BadRequest(format!("message {root} is a reply, not a thread's root")));
                }
                Some(true) => {}
            }
            let sql = format!(
                "SELECT {} FROM events WHERE chat_id = $1 AND thread = $2 AND seq > $3 ORDER BY seq LIMIT $4",
                event_columns("", true)
            );
            let rows =
                self.read_rows(&sql, &[&row.id, &sql_seq(root), &sql_seq(after), &(i64::from(limit) + 1)]).await?;
            let mut events = rows.iter().map(event_from_row).collect::<Result<Vec<_>, _>>()?;
            let more = events.len() > limit as usize;
            events.truncate(limit as usize);
            Ok(Fetched { events, info: row.info(), more })
        })
    }

    fn thread_list<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        chat: Option<&'a str>,
        after: Option<&'a ThreadCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ThreadEntry>, StoreError>> {
        Box::pin(async move {
            let (ts, after_chat, after_root) = after.map_or((i64::MAX, "", 0), |c| (c.ts, c.chat.as_str(), c.root));
            let sql = THREADS_SQL
                .replace("{unread}", &thread_unread_sql(&POSTGRES))
                .replace("{root}", &event_columns("r.", true))
                .replace("{last}", &event_columns("l.", true));
            let rows = self
                .read_rows(&sql, &[&user, &ws, &chat, &ts, &after_chat, &sql_seq(after_root), &(i64::from(limit) + 1)])
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(ThreadEntry {
                        chat: r.get(0),
                        read: r.get::<_, i64>(1) as u64,
                        unread: r.get::<_, i64>(2).max(0) as u64,
                        root: event_from_row_at(r, 3)?,
                        last: event_from_row_at(r, 3 + crate::store::columns::EVENT_COLUMNS.len())?,
                    })
                })
                .collect()
        })
    }

    fn pin_list<'a>(&'a self, key: &'a ChatKey) -> BoxFuture<'a, Result<Vec<PinEntry>, StoreError>> {
        Box::pin(async move {
            let row = chat_for(self, key, None).await?;
            let sql = format!(
                "SELECT pin_seq, pin_user, {} FROM events WHERE chat_id = $1 AND pinned ORDER BY pin_seq DESC",
                event_columns("", true)
            );
            let rows = self.read_rows(&sql, &[&row.id]).await?;
            rows.iter()
                .map(|r| {
                    Ok(PinEntry {
                        seq: r.get::<_, i64>(0) as u64,
                        user: r.get::<_, Option<String>>(1).unwrap_or_default(),
                        message: event_from_row_at(r, 2)?,
                    })
                })
                .collect()
        })
    }

    fn reaction_users<'a>(
        &'a self,
        key: &'a ChatKey,
        target: u64,
        per_emoji: usize,
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<String>>, StoreError>> {
        Box::pin(async move {
            let row = chat_for(self, key, None).await?;
            let rows = self
                .read_rows(
                    r#"SELECT emoji, "user" FROM (
                           SELECT emoji, "user", row_number() OVER (PARTITION BY emoji ORDER BY "user" COLLATE "C") AS n
                             FROM reactions WHERE chat_id = $1 AND target = $2) AS r
                        WHERE n <= $3 ORDER BY emoji COLLATE "C", "user" COLLATE "C""#,
                    &[&row.id, &sql_seq(target), &(per_emoji as i64)],
                )
                .await?;
            let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for r in rows {
                out.entry(r.get(0)).or_default().push(r.get(1));
            }
            Ok(out)
        })
    }

    fn idle_streams(&self, idle_before_ms: i64, limit: u32) -> BoxFuture<'_, Result<Vec<(ChatKey, u64)>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .read_rows(
                    "SELECT c.ws, c.chat, e.seq FROM events e JOIN chats c ON c.id = e.chat_id
                      WHERE e.stream = 1 AND e.stream_ms < $1 ORDER BY e.stream_ms LIMIT $2",
                    &[&idle_before_ms, &i64::from(limit)],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| (ChatKey::new(&r.get::<_, String>(0), &r.get::<_, String>(1)), r.get::<_, i64>(2) as u64))
                .collect())
        })
    }
}

/// The threads a user follows (see the SQLite store's, which this one mirrors).
const THREADS_SQL: &str = r#"
SELECT c.chat, t.read_seq, {unread}::bigint, {root}, {last}
  FROM thread_reads t
  JOIN chats c ON c.id = t.chat_id
  JOIN members m ON m.chat_id = t.chat_id AND m."user" = t."user"
  JOIN events r ON r.chat_id = t.chat_id AND r.seq = t.root
  JOIN events l ON l.chat_id = t.chat_id AND l.seq = r.last_reply
 WHERE t."user" = $1 AND t.follows AND c.ws = $2 AND ($3::text IS NULL OR c.chat = $3) AND r.replies > 0
   AND (l.ts < $4 OR (l.ts = $4 AND (c.chat COLLATE "C" > $5 OR (c.chat = $5 AND t.root > $6))))
 ORDER BY l.ts DESC, c.chat COLLATE "C", t.root
 LIMIT $7
"#;
