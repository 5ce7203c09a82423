//! A shard's moderation reads: a user's messages across the shard's chats
//! of a workspace, for erasure (`sharded` merges the shards' pages).
//!
//! Not here: bans, mutes, edits and deletes (writes of the log: `writer.rs`).

use super::PgShard;
use crate::store::{BoxFuture, Moderation, StoreError, sql_seq};

impl Moderation for PgShard {
    fn user_messages<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<(&'a str, u64)>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
        Box::pin(async move {
            let (chat, seq) = after.map_or(("", 0), |(c, s)| (c, sql_seq(s)));
            // Byte order (`COLLATE "C"`), as every shard and the merge in `sharded` compare.
            let rows = self
                .read_rows(
                    r#"SELECT c.chat, e.seq FROM chats c JOIN events e ON e.chat_id = c.id
                        WHERE c.ws = $1 AND e."user" = $2 AND e.type = 'message' AND NOT e.deleted
                          AND (c.chat COLLATE "C" > $3 OR (c.chat = $3 AND e.seq > $4))
                        ORDER BY c.chat COLLATE "C", e.seq LIMIT $5"#,
                    &[&ws, &user, &chat, &seq, &i64::from(limit)],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u64)).collect())
        })
    }
}
