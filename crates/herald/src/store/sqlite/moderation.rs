//! The SQLite store's moderation reads: a user's messages across a
//! workspace's chats, for erasure.
//!
//! Not here: bans, mutes, edits and deletes (writes of the log: `tx.rs`).

use rusqlite::params;

use super::SqliteStore;
use crate::store::{BoxFuture, Moderation, StoreError, sql_seq};

impl Moderation for SqliteStore {
    fn user_messages<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<(&'a str, u64)>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
        let (ws, user) = (ws.to_owned(), user.to_owned());
        let (chat, seq) = after.map_or((String::new(), 0), |(c, s)| (c.to_owned(), sql_seq(s)));
        Box::pin(self.read(move |conn| {
            // The workspace's chats in name order, and in each the user's
            // messages, thread replies included (v1.2: those have no `ord`).
            conn.prepare_cached(
                "SELECT c.chat, e.seq FROM chats c JOIN events e ON e.chat_id = c.id
                  WHERE c.ws = ?1 AND e.user = ?2 AND e.type = 'message' AND e.deleted = 0
                    AND (c.chat > ?3 OR (c.chat = ?3 AND e.seq > ?4))
                  ORDER BY c.chat, e.seq LIMIT ?5",
            )?
            .query_map(params![ws, user, chat, seq, i64::from(limit)], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })?
            .collect()
        }))
    }
}
