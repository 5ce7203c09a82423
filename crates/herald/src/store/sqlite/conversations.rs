//! The SQLite store's conversations (protocol v1.2): a chat's profile, the workspace's chat list,
//! member pages, a thread's replies, the threads a user follows, pins, who reacted, and the
//! streams left open. Each read is a few index lookups or one bounded range.
//!
//! Not here: the writes (`tx.rs` under `apply`'s rules).

use std::collections::BTreeMap;

use herald_protocol::Event;
use herald_protocol::reply::{ChatView, MemberEntry, PinEntry, Profile, ThreadEntry};
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::log::{event_from_row, event_from_row_at, load_chat};
use super::members::read_position;
use crate::model::{ChatInfo, ChatKey};
use crate::store::columns::{SQLITE, event_columns, parse_profile, thread_unread_sql};
use crate::store::{BoxFuture, Conversations, Fetched, StoreError, ThreadCursor, sql_seq};

impl Conversations for SqliteStore {
    fn chat_view<'a>(&'a self, key: &'a ChatKey) -> BoxFuture<'a, Result<Option<(ChatInfo, Profile)>, StoreError>> {
        let key = key.clone();
        Box::pin(self.read(move |conn| {
            let Some(row) = load_chat(conn, &key)? else { return Ok(None) };
            Ok(Some((row.info(), profile_of(conn, row.id)?)))
        }))
    }

    fn chat_list<'a>(
        &'a self,
        ws: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatView>, StoreError>> {
        let (ws, after) = (ws.to_owned(), after.unwrap_or("").to_owned());
        Box::pin(self.read(move |conn| {
            conn.prepare_cached(
                "SELECT chat, seq, members, open, profile FROM chats WHERE ws = ?1 AND chat > ?2 ORDER BY chat LIMIT ?3",
            )?
            .query_map(params![ws, after, i64::from(limit) + 1], |r| {
                let profile: Option<String> = r.get(4)?;
                Ok(ChatView::new(
                    r.get(0)?,
                    r.get::<_, i64>(1)? as u64,
                    r.get::<_, i64>(2)? as u64,
                    r.get(3)?,
                    parse_profile(profile.as_deref()),
                ))
            })?
            .collect()
        }))
    }

    fn member_list<'a>(
        &'a self,
        key: &'a ChatKey,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<(Vec<MemberEntry>, u64), StoreError>> {
        let (key, after) = (key.clone(), after.unwrap_or("").to_owned());
        Box::pin(async move {
            self.read(move |conn| {
                let Some(row) = load_chat(conn, &key)? else {
                    return Ok(Err(StoreError::NotFound(format!("no chat {}", key.chat))));
                };
                let members = conn
                    .prepare_cached(
                        "SELECT user, read_seq FROM members WHERE chat_id = ?1 AND user > ?2 ORDER BY user LIMIT ?3",
                    )?
                    .query_map(params![row.id, after, i64::from(limit) + 1], |r| {
                        Ok(MemberEntry { user: r.get(0)?, read: r.get::<_, i64>(1)? as u64 })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(Ok((members, row.members)))
            })
            .await?
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
        let (key, member) = (key.clone(), member.map(str::to_owned));
        Box::pin(async move {
            self.read(move |conn| {
                let tx = conn.transaction()?;
                let Some(row) = load_chat(&tx, &key)? else {
                    return Ok(Err(StoreError::NotFound(format!("no chat {}", key.chat))));
                };
                if let Some(user) = &member
                    && read_position(&tx, row.id, user)?.is_none()
                {
                    return Ok(Err(StoreError::Forbidden(format!("not a member of {}", key.chat))));
                }
                let is_root: Option<bool> = tx
                    .prepare_cached(
                        "SELECT thread IS NULL FROM events WHERE chat_id = ?1 AND seq = ?2 AND type = 'message'",
                    )?
                    .query_row(params![row.id, sql_seq(root)], |r| r.get(0))
                    .optional()?;
                match is_root {
                    None => return Ok(Err(StoreError::NotFound(format!("no message {root} in {}", key.chat)))),
                    Some(false) => {
                        return Ok(Err(StoreError::BadRequest(format!(
                            "message {root} is a reply, not a thread's root"
                        ))));
                    }
                    Some(true) => {}
                }
                let sql = format!(
                    "SELECT {} FROM events WHERE chat_id = ?1 AND thread = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4",
                    event_columns("", false)
                );
                let mut events = tx
                    .prepare_cached(&sql)?
                    .query_map(params![row.id, sql_seq(root), sql_seq(after), i64::from(limit) + 1], event_from_row)?
                    .collect::<rusqlite::Result<Vec<Event>>>()?;
                let more = events.len() > limit as usize;
                events.truncate(limit as usize);
                tx.commit()?;
                Ok(Ok(Fetched { events, info: row.info(), more }))
            })
            .await?
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
        let (ws, user, chat) = (ws.to_owned(), user.to_owned(), chat.map(str::to_owned));
        let (ts, after_chat, after_root) =
            after.map_or((i64::MAX, String::new(), 0), |c| (c.ts, c.chat.clone(), c.root));
        Box::pin(self.read(move |conn| {
            let sql = THREADS_SQL
                .replace("{unread}", &thread_unread_sql(&SQLITE))
                .replace("{root}", &event_columns("r.", false))
                .replace("{last}", &event_columns("l.", false));
            conn.prepare_cached(&sql)?
                .query_map(
                    params![user, ws, chat, ts, after_chat, sql_seq(after_root), i64::from(limit) + 1],
                    thread_entry_from_row,
                )?
                .collect()
        }))
    }

    fn pin_list<'a>(&'a self, key: &'a ChatKey) -> BoxFuture<'a, Result<Vec<PinEntry>, StoreError>> {
        let key = key.clone();
        Box::pin(async move {
            self.read(move |conn| {
                let Some(row) = load_chat(conn, &key)? else {
                    return Ok(Err(StoreError::NotFound(format!("no chat {}", key.chat))));
                };
                let sql = format!(
                    "SELECT pin_seq, pin_user, {} FROM events WHERE chat_id = ?1 AND pinned = 1 ORDER BY pin_seq DESC",
                    event_columns("", false)
                );
                let pins = conn
                    .prepare_cached(&sql)?
                    .query_map(params![row.id], |r| {
                        Ok(PinEntry {
                            seq: r.get::<_, i64>(0)? as u64,
                            user: r.get::<_, Option<String>>(1)?.unwrap_or_default(),
                            message: event_from_row_at(r, 2)?,
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(Ok(pins))
            })
            .await?
        })
    }

    fn reaction_users<'a>(
        &'a self,
        key: &'a ChatKey,
        target: u64,
        per_emoji: usize,
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<String>>, StoreError>> {
        let key = key.clone();
        Box::pin(async move {
            self.read(move |conn| {
                let Some(row) = load_chat(conn, &key)? else {
                    return Ok(Err(StoreError::NotFound(format!("no chat {}", key.chat))));
                };
                // Each emoji's first users, by a window over the primary key's order.
                let rows = conn
                    .prepare_cached(
                        "SELECT emoji, user FROM (
                             SELECT emoji, user, row_number() OVER (PARTITION BY emoji ORDER BY user) AS n
                               FROM reactions WHERE chat_id = ?1 AND target = ?2)
                          WHERE n <= ?3 ORDER BY emoji, user",
                    )?
                    .query_map(params![row.id, sql_seq(target), per_emoji as i64], |r| {
                        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
                for (emoji, user) in rows {
                    out.entry(emoji).or_default().push(user);
                }
                Ok(Ok(out))
            })
            .await?
        })
    }

    fn idle_streams(&self, idle_before_ms: i64, limit: u32) -> BoxFuture<'_, Result<Vec<(ChatKey, u64)>, StoreError>> {
        Box::pin(self.read(move |conn| {
            conn.prepare_cached(
                "SELECT c.ws, c.chat, e.seq FROM events e JOIN chats c ON c.id = e.chat_id
                  WHERE e.stream = 1 AND e.stream_ms < ?1 ORDER BY e.stream_ms LIMIT ?2",
            )?
            .query_map(params![idle_before_ms, i64::from(limit)], |r| {
                Ok((ChatKey::new(&r.get::<_, String>(0)?, &r.get::<_, String>(1)?), r.get::<_, i64>(2)? as u64))
            })?
            .collect()
        }))
    }
}

/// The threads a user follows: those with a live reply, of chats they are a member of, a page in
/// the order latest reply first. `{unread}`, `{root}` and `{last}` are filled in by the caller.
const THREADS_SQL: &str = "
SELECT c.chat, t.read_seq, {unread}, {root}, {last}
  FROM thread_reads t
  JOIN chats c ON c.id = t.chat_id
  JOIN members m ON m.chat_id = t.chat_id AND m.user = t.user
  JOIN events r ON r.chat_id = t.chat_id AND r.seq = t.root
  JOIN events l ON l.chat_id = t.chat_id AND l.seq = r.last_reply
 WHERE t.user = ?1 AND t.follows = 1 AND c.ws = ?2 AND (?3 IS NULL OR c.chat = ?3) AND r.replies > 0
   AND (l.ts < ?4 OR (l.ts = ?4 AND (c.chat > ?5 OR (c.chat = ?5 AND t.root > ?6))))
 ORDER BY l.ts DESC, c.chat, t.root
 LIMIT ?7
";

fn thread_entry_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ThreadEntry> {
    Ok(ThreadEntry {
        chat: r.get(0)?,
        read: r.get::<_, i64>(1)? as u64,
        unread: r.get::<_, i64>(2)?.max(0) as u64,
        root: event_from_row_at(r, 3)?,
        last: event_from_row_at(r, 3 + crate::store::columns::EVENT_COLUMNS.len())?,
    })
}

/// The chat's profile (each field `null` until set).
pub(super) fn profile_of(conn: &Connection, chat_id: i64) -> rusqlite::Result<Profile> {
    let stored: Option<String> = conn
        .prepare_cached("SELECT profile FROM chats WHERE id = ?1")?
        .query_row(params![chat_id], |r| r.get(0))
        .optional()?
        .flatten();
    Ok(parse_profile(stored.as_deref()))
}
