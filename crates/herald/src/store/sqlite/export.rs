//! The SQLite store's export reads: a user's memberships in a workspace and every message they
//! sent there, a page at a time. One part: the whole store.
//!
//! Not here: the stream that pages through them (`chat/export.rs`).

use rusqlite::params;

use super::SqliteStore;
use super::log::event_from_row_at;
use crate::store::columns::event_columns;
use crate::store::{BoxFuture, Export, ExportCursor, Exported, StoreError, sql_seq};

impl Export for SqliteStore {
    fn export_parts(&self) -> usize {
        1
    }

    fn export_members<'a>(
        &'a self,
        _part: usize,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
        let (ws, user, after) = (ws.to_owned(), user.to_owned(), after.unwrap_or("").to_owned());
        Box::pin(self.read(move |conn| {
            // The user's memberships first (`members_user`; CROSS JOIN keeps that order: left to
            // itself the planner walks the workspace's chats in id order instead, every chat of a
            // large workspace for a page), then sorted: a user is in few chats next to a workspace's count. `chat`
            // compares in byte order (SQLite's BINARY).
            conn.prepare_cached(
                "SELECT c.chat, m.read_seq FROM members m CROSS JOIN chats c ON c.id = m.chat_id
                  WHERE m.user = ?1 AND c.ws = ?2 AND c.chat > ?3 ORDER BY c.chat LIMIT ?4",
            )?
            .query_map(params![user, ws, after, i64::from(limit)], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })?
            .collect()
        }))
    }

    fn export_messages<'a>(
        &'a self,
        _part: usize,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a ExportCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<Exported>, StoreError>> {
        let (ws, user) = (ws.to_owned(), user.to_owned());
        // Before every message: chat ids are never empty and seqs start at 1.
        let (ts, chat, seq) = after.map_or((i64::MIN, String::new(), 0), |c| (c.ts, c.chat.clone(), sql_seq(c.seq)));
        Box::pin(self.read(move |conn| {
            // `events_sender` from the cursor's ts on; ties on ts sort by chat and seq.
            let sql = format!(
                "SELECT c.chat, {} FROM events e JOIN chats c ON c.id = e.chat_id
                  WHERE e.user = ?1 AND e.type = 'message' AND c.ws = ?2
                    AND e.ts >= ?3 AND (e.ts > ?3 OR c.chat > ?4 OR (c.chat = ?4 AND e.seq > ?5))
                  ORDER BY e.ts, c.chat, e.seq LIMIT ?6",
                event_columns("e.", false)
            );
            conn.prepare_cached(&sql)?
                .query_map(params![user, ws, ts, chat, seq, i64::from(limit)], |r| {
                    Ok(Exported { chat: r.get(0)?, event: event_from_row_at(r, 1)? })
                })?
                .collect()
        }))
    }
}
