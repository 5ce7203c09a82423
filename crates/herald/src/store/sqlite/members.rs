//! The SQLite store's members and inboxes: a member's read position and
//! mute, and the inbox's page and entries, each unread count made of counts
//! kept as counts (see [`crate::store::unread`]).
//!
//! Not here: joining, leaving, reading and muting (writes of the log: `tx.rs`).

use herald_protocol::reply::InboxEntry;
use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteStore;
use super::log::{event_from_row_at, load_chat};
use crate::model::ChatKey;
use crate::store::apply;
use crate::store::columns::{SQLITE, event_columns, parse_profile, thread_unread_sql};
use crate::store::{BoxFuture, InboxCursor, Member, Membership, StoreError};

impl Membership for SqliteStore {
    fn member<'a>(&'a self, key: &'a ChatKey, user: &'a str) -> BoxFuture<'a, Result<Option<Member>, StoreError>> {
        let (key, user) = (key.clone(), user.to_owned());
        Box::pin(async move {
            self.read(move |conn| {
                let Some(row) = load_chat(conn, &key)? else {
                    return Ok(Err(StoreError::NotFound(format!("no chat {}", key.chat))));
                };
                Ok(Ok(member_of(conn, row.id, &user, apply::now_ms())?))
            })
            .await?
        })
    }

    fn inbox<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a InboxCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<InboxEntry>, StoreError>> {
        let (ws, user) = (ws.to_owned(), user.to_owned());
        let (ts, chat) = after.map_or((i64::MAX, String::new()), |c| (c.ts, c.chat.clone()));
        Box::pin(self.read(move |conn| {
            let sql = inbox_sql(
                "m.user = ?1 AND c.ws = ?2 AND (c.last_ts < ?3 OR (c.last_ts = ?3 AND c.chat > ?4))
                 ORDER BY c.last_ts DESC, c.chat LIMIT ?5",
            );
            let mut stmt = conn.prepare_cached(&sql)?;
            stmt.query_map(params![user, ws, ts, chat, i64::from(limit) + 1], inbox_entry_from_row)?.collect()
        }))
    }

    fn member_chats<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>> {
        let (ws, user) = (ws.to_owned(), user.to_owned());
        Box::pin(self.read(move |conn| {
            conn.prepare_cached(
                "SELECT c.chat, c.last_ts FROM members m JOIN chats c ON c.id = m.chat_id
                  WHERE m.user = ?1 AND c.ws = ?2 ORDER BY c.last_ts DESC, c.chat LIMIT ?3",
            )?
            .query_map(params![user, ws, i64::from(limit)], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect()
        }))
    }

    fn inbox_entry<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<InboxEntry>, StoreError>> {
        let (key, user) = (key.clone(), user.to_owned());
        Box::pin(self.read(move |conn| {
            let sql = inbox_sql("m.user = ?1 AND c.ws = ?2 AND c.chat = ?3");
            conn.prepare_cached(&sql)?.query_row(params![user, &*key.ws, &*key.chat], inbox_entry_from_row).optional()
        }))
    }
}

/// The inbox's query: the chats chosen by `{filter}` (a page of a user's
/// chats, or one chat), each with the counts its unread number is made of
/// (see [`crate::store::unread`]) and its latest message as fetch shows it. Every
/// count is an index lookup (`events_messages`, `events_own`,
/// `events_deleted`); no chat's history is read. v1.2: thread replies are
/// not the chat's messages (they have no `ord`); `{threads}` sums the unread
/// counts of the threads the user follows in the chat, and the mention count
/// reads `mentions` above the read position.
const INBOX_SQL: &str = "
SELECT p.chat, p.seq, p.last_ts, p.read_seq, p.messages,
    coalesce((SELECT e.ord FROM events e WHERE e.chat_id = p.id AND e.seq <= p.read_seq AND e.ord IS NOT NULL
              ORDER BY e.seq DESC LIMIT 1), 0),
    coalesce((SELECT e.user_ord FROM events e WHERE e.chat_id = p.id AND e.user = p.user AND e.ord IS NOT NULL
              ORDER BY e.seq DESC LIMIT 1), 0),
    coalesce((SELECT e.user_ord FROM events e WHERE e.chat_id = p.id AND e.user = p.user AND e.seq <= p.read_seq
              AND e.ord IS NOT NULL ORDER BY e.seq DESC LIMIT 1), 0),
    (SELECT count(*) FROM events e WHERE e.chat_id = p.id AND e.deleted = 1 AND e.seq > p.read_seq
              AND e.user IS NOT p.user AND e.thread IS NULL),
    p.profile,
    (SELECT coalesce(sum({threads}), 0) FROM thread_reads t JOIN events r ON r.chat_id = t.chat_id AND r.seq = t.root
      WHERE t.chat_id = p.id AND t.user = p.user AND t.follows = 1),
    (SELECT count(*) FROM mentions n WHERE n.chat_id = p.id AND n.user = p.user AND n.seq > p.read_seq),
    {last}
FROM (SELECT c.id, c.chat, c.seq, c.last_ts, c.messages, c.last_message, c.profile, m.read_seq, m.user
        FROM members m JOIN chats c ON c.id = m.chat_id
       WHERE {filter}) AS p
LEFT JOIN events l ON l.chat_id = p.id AND l.seq = p.last_message
ORDER BY p.last_ts DESC, p.chat
";

/// [`INBOX_SQL`] with `filter`.
fn inbox_sql(filter: &str) -> String {
    INBOX_SQL
        .replace("{threads}", &thread_unread_sql(&SQLITE))
        .replace("{last}", &event_columns("l.", false))
        .replace("{filter}", filter)
}

fn inbox_entry_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<InboxEntry> {
    let n = |i: usize| r.get::<_, i64>(i).map(|v| v as u64);
    let read = n(3)?;
    let last = match r.get::<_, Option<i64>>(12)? {
        None => None,
        Some(_) => Some(event_from_row_at(r, 12)?),
    };
    let profile: Option<String> = r.get(9)?;
    Ok(InboxEntry {
        chat: r.get(0)?,
        seq: n(1)?,
        ts: r.get(2)?,
        read,
        unread: crate::store::unread(n(4)?, n(5)?, n(6)?, n(7)?, n(8)?),
        last,
        profile: Some(parse_profile(profile.as_deref())),
        threads: Some(r.get::<_, i64>(10)?.max(0) as u64),
        mentions: Some(n(11)?),
    })
}

fn member_of(conn: &Connection, chat_id: i64, user: &str, now_ms: i64) -> rusqlite::Result<Option<Member>> {
    let Some(read) = read_position(conn, chat_id, user)? else { return Ok(None) };
    let until = mute_of(conn, chat_id, user)?;
    Ok(Some(Member { read, muted_until_ms: until.filter(|_| apply::is_muted(until, now_ms)) }))
}

pub(super) fn mute_of(conn: &Connection, chat_id: i64, user: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT until_ms FROM mutes WHERE chat_id = ?1 AND user = ?2")?
        .query_row(params![chat_id, user], |r| r.get(0))
        .optional()
}

pub(super) fn read_position(conn: &Connection, chat_id: i64, user: &str) -> rusqlite::Result<Option<u64>> {
    conn.prepare_cached("SELECT read_seq FROM members WHERE chat_id = ?1 AND user = ?2")?
        .query_row(params![chat_id, user], |r| r.get::<_, i64>(0).map(|v| v as u64))
        .optional()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;
    use crate::store::{Actor, EventLog, Write};

    #[tokio::test]
    async fn member_tells_members_mutes_and_missing_chats_apart() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path()).unwrap();
        let key = ChatKey::new("w", "g");
        assert!(matches!(store.member(&key, "alice").await, Err(StoreError::NotFound(_))));
        store.write(Write::Join { key: key.clone(), user: "alice".into(), actor: Actor::Client }).await.unwrap();
        assert_eq!(store.member(&key, "alice").await.unwrap(), Some(Member { read: 0, muted_until_ms: None }));
        assert_eq!(store.member(&key, "bob").await.unwrap(), None);
        let mute = |muted, until_ms| Write::Mute { key: key.clone(), user: "alice".into(), muted, until_ms };
        store.write(mute(true, None)).await.unwrap();
        assert_eq!(store.member(&key, "alice").await.unwrap().unwrap().muted_until_ms, Some(i64::MAX));
        let until = apply::now_ms() + 60_000;
        store.write(mute(true, Some(until))).await.unwrap();
        assert_eq!(store.member(&key, "alice").await.unwrap().unwrap().muted_until_ms, Some(until));
        store.write(mute(true, Some(1))).await.unwrap();
        assert_eq!(store.member(&key, "alice").await.unwrap().unwrap().muted_until_ms, None, "a mute that ended");
        store.write(mute(false, None)).await.unwrap();
        assert_eq!(store.member(&key, "alice").await.unwrap().unwrap().muted_until_ms, None);
    }
}
