//! A shard's export reads: a user's memberships in the shard's chats of a workspace and every
//! message they sent there, a page at a time in byte order (`COLLATE "C"`), as the export merges
//! the shards' pages. One part: the shard (`sharded` numbers the shards as parts).
//!
//! Not here: the stream that pages through the parts and merges them (`chat/export.rs`).

use super::PgShard;
use super::log::event_from_row_at;
use crate::store::columns::event_columns;
use crate::store::{BoxFuture, Export, ExportCursor, Exported, StoreError, sql_seq};

impl Export for PgShard {
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
        Box::pin(async move {
            let sql = format!(
                r#"SELECT c.chat, m.read_seq FROM {}
                    WHERE c.ws = $2 AND c.chat COLLATE "C" > $3 ORDER BY c.chat COLLATE "C" LIMIT $4"#,
                super::members::user_chats("$1")
            );
            let rows = self.read_rows(&sql, &[&user, &ws, &after.unwrap_or(""), &i64::from(limit)]).await?;
            Ok(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64)).collect())
        })
    }

    fn export_messages<'a>(
        &'a self,
        _part: usize,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a ExportCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<Exported>, StoreError>> {
        Box::pin(async move {
            // Before every message: chat ids are never empty and seqs start at 1.
            let (ts, chat, seq) = after.map_or((i64::MIN, "", 0), |c| (c.ts, c.chat.as_str(), sql_seq(c.seq)));
            // `events_sender` from the cursor's ts on; ties on ts sort by chat and seq.
            let sql = format!(
                r#"SELECT c.chat, {} FROM events e JOIN chats c ON c.id = e.chat_id
                    WHERE e."user" = $1 AND e.type = 'message' AND c.ws = $2
                      AND e.ts >= $3 AND (e.ts > $3 OR c.chat COLLATE "C" > $4 OR (c.chat = $4 AND e.seq > $5))
                    ORDER BY e.ts, c.chat COLLATE "C", e.seq LIMIT $6"#,
                event_columns("e.", true)
            );
            let rows = self.read_rows(&sql, &[&user, &ws, &ts, &chat, &seq, &i64::from(limit)]).await?;
            rows.iter().map(|r| Ok(Exported { chat: r.get(0), event: event_from_row_at(r, 1)? })).collect()
        })
    }
}
