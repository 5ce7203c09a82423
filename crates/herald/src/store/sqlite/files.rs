//! The SQLite store's files reads: files' rows by id for a chat, and those the sweeper is to
//! delete. Written by the batch's transaction (`tx.rs`) under the rules in `apply/files.rs`.

use rusqlite::params;

use super::SqliteStore;
use crate::model::ChatKey;
use crate::model::FileKey;
use crate::store::{BoxFuture, Files, StoreError, StoredFile};

/// The columns [`file_at`] reads.
pub(super) const FILE_COLUMNS: &str = "id, user, name, type, size, created_ms, seq, gone_ms";

/// A file's row from [`FILE_COLUMNS`], starting at `at`.
pub(super) fn file_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<StoredFile> {
    Ok(StoredFile {
        id: r.get(at)?,
        user: r.get(at + 1)?,
        name: r.get(at + 2)?,
        mime: r.get(at + 3)?,
        size: r.get::<_, i64>(at + 4)? as u64,
        created_ms: r.get(at + 5)?,
        seq: r.get::<_, Option<i64>>(at + 6)?.map(|s| s as u64),
        gone: r.get::<_, Option<i64>>(at + 7)?.is_some(),
    })
}

impl Files for SqliteStore {
    fn files<'a>(&'a self, key: &'a ChatKey, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<StoredFile>, StoreError>> {
        let (ws, chat, ids) = (key.ws.to_string(), key.chat.to_string(), ids.to_vec());
        Box::pin(self.read(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {} FROM files f JOIN chats c ON c.id = f.chat_id WHERE f.id = ?1 AND c.ws = ?2 AND c.chat = ?3",
                FILE_COLUMNS.split(", ").map(|c| format!("f.{c}")).collect::<Vec<_>>().join(", ")
            ))?;
            let mut found = Vec::with_capacity(ids.len());
            for id in &ids {
                let mut rows = stmt.query(params![id, ws, chat])?;
                if let Some(r) = rows.next()? {
                    found.push(file_at(r, 0)?);
                }
            }
            Ok(found)
        }))
    }

    fn file_chats<'a>(
        &'a self,
        ws: &'a str,
        ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        let (ws, ids) = (ws.to_owned(), ids.to_vec());
        Box::pin(self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT f.id, c.chat FROM files f JOIN chats c ON c.id = f.chat_id WHERE f.id = ?1 AND c.ws = ?2",
            )?;
            let mut found = Vec::new();
            for id in &ids {
                let mut rows = stmt.query(params![id, ws])?;
                if let Some(r) = rows.next()? {
                    found.push((r.get(0)?, r.get(1)?));
                }
            }
            Ok(found)
        }))
    }

    fn sweepable<'a>(&'a self, orphan_before_ms: i64, limit: u32) -> BoxFuture<'a, Result<Vec<FileKey>, StoreError>> {
        Box::pin(self.read(move |conn| {
            let mut keys = Vec::new();
            for sql in [
                "SELECT c.ws, c.chat, f.id FROM files f JOIN chats c ON c.id = f.chat_id
                  WHERE f.gone_ms IS NOT NULL ORDER BY f.gone_ms LIMIT ?2",
                "SELECT c.ws, c.chat, f.id FROM files f JOIN chats c ON c.id = f.chat_id
                  WHERE f.seq IS NULL AND f.gone_ms IS NULL AND f.created_ms < ?1 ORDER BY f.created_ms LIMIT ?2",
            ] {
                let rows = conn
                    .prepare_cached(sql)?
                    .query_map(params![orphan_before_ms, i64::from(limit)], |r| {
                        Ok(FileKey { ws: r.get(0)?, chat: r.get(1)?, id: r.get(2)? })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                keys.extend(rows);
            }
            keys.truncate(limit as usize);
            Ok(keys)
        }))
    }
}
