//! A shard's files reads: files' rows by id for a chat of the shard, and those the sweeper is to
//! delete. Written by the batch's transaction (`tx.rs`) under the rules in `apply/files.rs`.

use super::PgShard;
use crate::model::ChatKey;
use crate::model::FileKey;
use crate::store::{BoxFuture, Files, StoreError, StoredFile};

/// The columns [`file_at`] reads.
pub(super) const FILE_COLUMNS: &str = r#"id, "user", name, type, size, created_ms, seq, gone_ms"#;

/// A file's row from [`FILE_COLUMNS`], starting at `at`.
pub(super) fn file_at(r: &tokio_postgres::Row, at: usize) -> StoredFile {
    StoredFile {
        id: r.get(at),
        user: r.get(at + 1),
        name: r.get(at + 2),
        mime: r.get(at + 3),
        size: r.get::<_, i64>(at + 4) as u64,
        created_ms: r.get(at + 5),
        seq: r.get::<_, Option<i64>>(at + 6).map(|s| s as u64),
        gone: r.get::<_, Option<i64>>(at + 7).is_some(),
    }
}

impl Files for PgShard {
    fn files<'a>(&'a self, key: &'a ChatKey, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<StoredFile>, StoreError>> {
        Box::pin(async move {
            let columns: Vec<String> = FILE_COLUMNS.split(", ").map(|c| format!("f.{c}")).collect();
            let sql = format!(
                "SELECT {} FROM files f JOIN chats c ON c.id = f.chat_id
                  WHERE f.id = ANY($1) AND c.ws = $2 AND c.chat = $3",
                columns.join(", ")
            );
            let rows = self.read_rows(&sql, &[&ids, &&*key.ws, &&*key.chat]).await?;
            Ok(rows.iter().map(|r| file_at(r, 0)).collect())
        })
    }

    fn file_chats<'a>(
        &'a self,
        ws: &'a str,
        ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .read_rows(
                    "SELECT f.id, c.chat FROM files f JOIN chats c ON c.id = f.chat_id WHERE f.id = ANY($1) AND c.ws = $2",
                    &[&ids, &ws],
                )
                .await?;
            Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
        })
    }

    fn sweepable<'a>(&'a self, orphan_before_ms: i64, limit: u32) -> BoxFuture<'a, Result<Vec<FileKey>, StoreError>> {
        Box::pin(async move {
            let rows = self
                .read_rows(
                    "(SELECT c.ws, c.chat, f.id FROM files f JOIN chats c ON c.id = f.chat_id
                       WHERE f.gone_ms IS NOT NULL ORDER BY f.gone_ms LIMIT $2)
                     UNION ALL
                     (SELECT c.ws, c.chat, f.id FROM files f JOIN chats c ON c.id = f.chat_id
                       WHERE f.seq IS NULL AND f.gone_ms IS NULL AND f.created_ms < $1 ORDER BY f.created_ms LIMIT $2)",
                    &[&orphan_before_ms, &i64::from(limit)],
                )
                .await?;
            let mut keys: Vec<FileKey> =
                rows.iter().map(|r| FileKey { ws: r.get(0), chat: r.get(1), id: r.get(2) }).collect();
            keys.truncate(limit as usize);
            Ok(keys)
        })
    }
}
