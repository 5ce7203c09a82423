//! SQLite's statements for one write batch: the primitive reads and writes
//! ([`Tx`]) that [`apply`]'s rules are made of, run by the writer thread
//! inside its transaction.
//!
//! Not here: the rules themselves ([`apply`]), beginning and committing the
//! transaction (`writer.rs`), or reads outside a batch (one file per capability).

use herald_protocol::{Event, FileRef};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::value::RawValue;

use super::log::{MESSAGE_COLUMNS, json_list, load_chat, message_row, reaction_counts, stream_code};
use super::members::{mute_of, read_position};
use super::webhook::UPSERT_POSITION;
use crate::model::ChatKey;
use crate::store::apply::{self, ChatRow, EventMeta, MessageRow, Stored, Tx};
use crate::store::columns::json_files;
use crate::store::{NewFile, StoredFile, sql_seq};

use super::files::{FILE_COLUMNS, file_at};

/// One SQLite write transaction. The single writer needs no row locks.
/// The flag: whether the transaction keeps the webhook's positions.
pub(super) struct SqliteTx<'a>(pub(super) &'a Connection, pub(super) bool);

impl Tx for SqliteTx<'_> {
    type Error = rusqlite::Error;

    async fn load_chat(&mut self, key: &ChatKey) -> rusqlite::Result<Option<ChatRow>> {
        load_chat(self.0, key)
    }

    async fn create_chat(&mut self, key: &ChatKey, open: bool, now_ms: i64) -> rusqlite::Result<ChatRow> {
        self.0
            .prepare_cached(
                "INSERT INTO chats (ws, chat, open, seq, members, created_ms, last_ts) VALUES (?1, ?2, ?3, 0, 0, ?4, ?4)",
            )?
            .execute(params![&*key.ws, &*key.chat, open, now_ms])?;
        Ok(ChatRow::created(self.0.last_insert_rowid(), open, now_ms))
    }

    async fn read_position(&mut self, chat: i64, user: &str) -> rusqlite::Result<Option<u64>> {
        read_position(self.0, chat, user)
    }

    async fn add_member(&mut self, chat: i64, user: &str, now_ms: i64) -> rusqlite::Result<()> {
        self.0
            .prepare_cached("INSERT INTO members (chat_id, user, read_seq, joined_ms) VALUES (?1, ?2, 0, ?3)")?
            .execute(params![chat, user, now_ms])?;
        Ok(())
    }

    async fn remove_member(&mut self, chat: i64, user: &str) -> rusqlite::Result<bool> {
        let n = self
            .0
            .prepare_cached("DELETE FROM members WHERE chat_id = ?1 AND user = ?2")?
            .execute(params![chat, user])?;
        Ok(n > 0)
    }

    async fn set_read_position(&mut self, chat: i64, user: &str, seq: u64) -> rusqlite::Result<()> {
        self.0
            .prepare_cached("UPDATE members SET read_seq = ?3 WHERE chat_id = ?1 AND user = ?2")?
            .execute(params![chat, user, seq as i64])?;
        Ok(())
    }

    async fn find_client_id(
        &mut self,
        chat: i64,
        user: Option<&str>,
        client_id: &str,
    ) -> rusqlite::Result<Option<u64>> {
        self.0
            .prepare_cached("SELECT seq FROM events WHERE chat_id = ?1 AND user IS ?2 AND client_id = ?3")?
            .query_row(params![chat, user, client_id], |r| r.get::<_, i64>(0).map(|v| v as u64))
            .optional()
    }

    async fn insert_event(&mut self, chat: i64, e: &Event, meta: EventMeta) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "INSERT INTO events (chat_id, seq, type, user, ts, body, client_id, ord, user_ord, target,
                                     thread, quote, mentions, tord, tuser_ord, stream, stream_ms, files)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            )?
            .execute(params![
                chat,
                e.seq as i64,
                e.kind.as_str(),
                e.user,
                e.ts,
                e.body.get(),
                e.client_id,
                meta.ord.map(|v| v as i64),
                meta.user_ord.map(|v| v as i64),
                meta.target.map(sql_seq),
                e.thread.map(sql_seq),
                e.quote.map(sql_seq),
                e.mentions.as_ref().map(|m| json_list(m)),
                meta.tord.map(sql_seq),
                meta.tuser_ord.map(sql_seq),
                e.stream.map(stream_code),
                e.stream.map(|_| e.ts),
                json_files(e.files.as_deref()),
            ])?;
        Ok(())
    }

    async fn insert_file(&mut self, chat: i64, user: &str, f: &NewFile, now_ms: i64) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "INSERT INTO files (id, chat_id, user, name, type, size, created_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![f.id, chat, user, f.name, f.mime, f.size as i64, now_ms])?;
        Ok(())
    }

    async fn load_file(&mut self, id: &str) -> rusqlite::Result<Option<(i64, StoredFile)>> {
        self.0
            .prepare_cached(&format!("SELECT chat_id, {FILE_COLUMNS} FROM files WHERE id = ?1"))?
            .query_row(params![id], |r| Ok((r.get(0)?, file_at(r, 1)?)))
            .optional()
    }

    async fn attach_file(&mut self, id: &str, seq: u64) -> rusqlite::Result<()> {
        self.0.prepare_cached("UPDATE files SET seq = ?2 WHERE id = ?1")?.execute(params![id, sql_seq(seq)])?;
        Ok(())
    }

    async fn drop_files(&mut self, chat: i64, seq: u64, keep: &[String], now_ms: i64) -> rusqlite::Result<()> {
        let ids: Vec<String> = self
            .0
            .prepare_cached("SELECT id FROM files WHERE chat_id = ?1 AND seq = ?2 AND gone_ms IS NULL")?
            .query_map(params![chat, sql_seq(seq)], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let mut gone = self.0.prepare_cached("UPDATE files SET gone_ms = ?2 WHERE id = ?1")?;
        for id in ids.iter().filter(|id| !keep.contains(id)) {
            gone.execute(params![id, now_ms])?;
        }
        Ok(())
    }

    async fn forget_file(&mut self, chat: i64, id: &str) -> rusqlite::Result<()> {
        self.0.prepare_cached("DELETE FROM files WHERE id = ?1 AND chat_id = ?2")?.execute(params![id, chat])?;
        Ok(())
    }

    async fn set_message_files(&mut self, chat: i64, seq: u64, files: &[FileRef]) -> rusqlite::Result<()> {
        let files = json_files(Some(files).filter(|f| !f.is_empty()));
        self.0.prepare_cached("UPDATE events SET files = ?3 WHERE chat_id = ?1 AND seq = ?2")?.execute(params![
            chat,
            sql_seq(seq),
            files
        ])?;
        Ok(())
    }

    async fn save_chat(&mut self, row: &ChatRow) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "UPDATE chats SET seq = ?2, members = ?3, open = ?4, messages = ?5, last_ts = ?6, last_message = ?7,
                                  pins = ?8, profile_seq = ?9
                 WHERE id = ?1",
            )?
            .execute(params![
                row.id,
                row.seq as i64,
                row.members as i64,
                row.open,
                row.messages as i64,
                row.ts,
                row.last_message as i64,
                row.pins as i64,
                row.profile_seq as i64
            ])?;
        Ok(())
    }

    async fn is_banned(&mut self, chat: i64, user: &str) -> rusqlite::Result<bool> {
        self.0
            .prepare_cached("SELECT 1 FROM bans WHERE chat_id = ?1 AND user = ?2")?
            .query_row(params![chat, user], |_| Ok(()))
            .optional()
            .map(|found| found.is_some())
    }

    async fn set_banned(&mut self, chat: i64, user: &str, banned: bool) -> rusqlite::Result<()> {
        let sql = if banned {
            "INSERT OR IGNORE INTO bans (chat_id, user) VALUES (?1, ?2)"
        } else {
            "DELETE FROM bans WHERE chat_id = ?1 AND user = ?2"
        };
        self.0.prepare_cached(sql)?.execute(params![chat, user])?;
        Ok(())
    }

    async fn mute(&mut self, chat: i64, user: &str) -> rusqlite::Result<Option<i64>> {
        mute_of(self.0, chat, user)
    }

    async fn set_mute(&mut self, chat: i64, user: &str, until_ms: Option<i64>) -> rusqlite::Result<()> {
        match until_ms {
            Some(until) => self
                .0
                .prepare_cached("INSERT OR REPLACE INTO mutes (chat_id, user, until_ms) VALUES (?1, ?2, ?3)")?
                .execute(params![chat, user, until])?,
            None => self
                .0
                .prepare_cached("DELETE FROM mutes WHERE chat_id = ?1 AND user = ?2")?
                .execute(params![chat, user])?,
        };
        Ok(())
    }

    async fn own_messages(&mut self, chat: i64, user: &str, thread: Option<u64>) -> rusqlite::Result<u64> {
        let found = match thread {
            None => self
                .0
                .prepare_cached(
                    "SELECT user_ord FROM events WHERE chat_id = ?1 AND user = ?2 AND ord IS NOT NULL
                     ORDER BY seq DESC LIMIT 1",
                )?
                .query_row(params![chat, user], |r| r.get::<_, i64>(0))
                .optional()?,
            Some(root) => self
                .0
                .prepare_cached(
                    "SELECT tuser_ord FROM events WHERE chat_id = ?1 AND thread = ?2 AND user = ?3
                     ORDER BY seq DESC LIMIT 1",
                )?
                .query_row(params![chat, sql_seq(root), user], |r| r.get::<_, i64>(0))
                .optional()?,
        };
        Ok(found.unwrap_or(0) as u64)
    }

    async fn load_message(&mut self, chat: i64, seq: u64) -> rusqlite::Result<Option<MessageRow>> {
        self.0
            .prepare_cached(&format!(
                "SELECT {MESSAGE_COLUMNS} FROM events WHERE chat_id = ?1 AND seq = ?2 AND type = 'message'"
            ))?
            .query_row(params![chat, sql_seq(seq)], message_row)
            .optional()
    }

    async fn save_message(&mut self, chat: i64, seq: u64, m: &MessageRow) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "UPDATE events SET mentions = ?3, replies = ?4, replies_total = ?5, last_reply = ?6, pinned = ?7,
                                   pin_seq = ?8, pin_user = ?9, reactions = ?10, stream = ?11, stream_ms = ?12
                 WHERE chat_id = ?1 AND seq = ?2",
            )?
            .execute(params![
                chat,
                sql_seq(seq),
                m.mentions.as_ref().map(|v| json_list(v)),
                m.replies as i64,
                m.replies_total as i64,
                m.last_reply as i64,
                m.pinned,
                m.pin_seq as i64,
                m.pin_user,
                reaction_counts(&m.reactions),
                m.stream.map(stream_code),
                m.stream.map(|_| m.stream_ms),
            ])?;
        Ok(())
    }

    async fn load_body(&mut self, chat: i64, seq: u64) -> rusqlite::Result<Option<Box<RawValue>>> {
        let body: Option<String> = self
            .0
            .prepare_cached("SELECT body FROM events WHERE chat_id = ?1 AND seq = ?2")?
            .query_row(params![chat, sql_seq(seq)], |r| r.get(0))
            .optional()?;
        Ok(body.and_then(|b| RawValue::from_string(b).ok()))
    }

    async fn set_body(&mut self, chat: i64, seq: u64, body: &RawValue) -> rusqlite::Result<()> {
        self.0.prepare_cached("UPDATE events SET body = ?3 WHERE chat_id = ?1 AND seq = ?2")?.execute(params![
            chat,
            sql_seq(seq),
            body.get()
        ])?;
        Ok(())
    }

    async fn last_reply_before(&mut self, chat: i64, root: u64, before: u64) -> rusqlite::Result<u64> {
        self.0
            .prepare_cached(
                "SELECT seq FROM events WHERE chat_id = ?1 AND thread = ?2 AND seq < ?3 AND deleted = 0
                 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![chat, sql_seq(root), sql_seq(before)], |r| r.get::<_, i64>(0))
            .optional()
            .map(|s| s.unwrap_or(0) as u64)
    }

    async fn follow(&mut self, chat: i64, root: u64, user: &str) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "INSERT INTO thread_reads (chat_id, root, user, read_seq, follows) VALUES (?1, ?2, ?3, 0, 1)
                 ON CONFLICT (chat_id, root, user) DO UPDATE SET follows = 1",
            )?
            .execute(params![chat, sql_seq(root), user])?;
        Ok(())
    }

    async fn thread_read(&mut self, chat: i64, root: u64, user: &str) -> rusqlite::Result<Option<u64>> {
        self.0
            .prepare_cached("SELECT read_seq FROM thread_reads WHERE chat_id = ?1 AND root = ?2 AND user = ?3")?
            .query_row(params![chat, sql_seq(root), user], |r| r.get::<_, i64>(0).map(|v| v as u64))
            .optional()
    }

    async fn set_thread_read(&mut self, chat: i64, root: u64, user: &str, seq: u64) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "INSERT INTO thread_reads (chat_id, root, user, read_seq, follows) VALUES (?1, ?2, ?3, ?4, 0)
                 ON CONFLICT (chat_id, root, user) DO UPDATE SET read_seq = excluded.read_seq",
            )?
            .execute(params![chat, sql_seq(root), user, sql_seq(seq)])?;
        Ok(())
    }

    async fn set_mentions(&mut self, chat: i64, seq: u64, users: &[String]) -> rusqlite::Result<()> {
        self.0
            .prepare_cached("DELETE FROM mentions WHERE chat_id = ?1 AND seq = ?2")?
            .execute(params![chat, sql_seq(seq)])?;
        let mut insert =
            self.0.prepare_cached("INSERT OR IGNORE INTO mentions (chat_id, user, seq) VALUES (?1, ?2, ?3)")?;
        for user in users {
            insert.execute(params![chat, user, sql_seq(seq)])?;
        }
        Ok(())
    }

    async fn set_reaction(
        &mut self,
        chat: i64,
        target: u64,
        emoji: &str,
        user: &str,
        on: bool,
    ) -> rusqlite::Result<bool> {
        let sql = if on {
            "INSERT OR IGNORE INTO reactions (chat_id, target, emoji, user) VALUES (?1, ?2, ?3, ?4)"
        } else {
            "DELETE FROM reactions WHERE chat_id = ?1 AND target = ?2 AND emoji = ?3 AND user = ?4"
        };
        Ok(self.0.prepare_cached(sql)?.execute(params![chat, sql_seq(target), emoji, user])? > 0)
    }

    async fn load_profile(&mut self, chat: i64) -> rusqlite::Result<Option<String>> {
        self.0
            .prepare_cached("SELECT profile FROM chats WHERE id = ?1")?
            .query_row(params![chat], |r| r.get(0))
            .optional()
            .map(Option::flatten)
    }

    async fn save_profile(&mut self, chat: i64, profile: &str) -> rusqlite::Result<()> {
        self.0.prepare_cached("UPDATE chats SET profile = ?2 WHERE id = ?1")?.execute(params![chat, profile])?;
        Ok(())
    }

    async fn edit_message(&mut self, chat: i64, target: u64, body: &RawValue, edit: u64) -> rusqlite::Result<()> {
        self.0
            .prepare_cached("UPDATE events SET body = ?3, edited = ?4 WHERE chat_id = ?1 AND seq = ?2")?
            .execute(params![chat, sql_seq(target), body.get(), sql_seq(edit)])?;
        Ok(())
    }

    fn keeps_webhook_positions(&self) -> bool {
        self.1
    }

    async fn mark_undelivered(&mut self, marks: &[Stored]) -> rusqlite::Result<()> {
        let mut stmt = self.0.prepare_cached(UPSERT_POSITION)?;
        for m in marks {
            stmt.execute(params![m.chat, m.before as i64, m.head as i64, m.ts])?;
        }
        Ok(())
    }

    async fn erase_message(&mut self, chat: i64, target: u64) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "UPDATE events SET body = 'null', deleted = 1, files = NULL WHERE chat_id = ?1 AND seq = ?2",
            )?
            .execute(params![chat, sql_seq(target)])?;
        let erased_edit = apply::edit_body(target, &RawValue::from_string("null".into()).expect("null is JSON"));
        self.0
            .prepare_cached(
                "UPDATE events SET body = ?3, mentions = NULL, files = NULL
                  WHERE chat_id = ?1 AND target = ?2 AND type = 'edit'",
            )?
            .execute(params![chat, sql_seq(target), erased_edit.get()])?;
        Ok(())
    }
}
