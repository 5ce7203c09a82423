//! SQLite's statements for one write batch: the primitive reads and writes
//! ([`Tx`]) that [`apply`]'s rules are made of, run by the writer thread
//! inside its transaction.
//!
//! Not here: the rules themselves ([`apply`]), beginning and committing the
//! transaction (`writer.rs`), or reads outside a batch (one file per capability).

use herald_protocol::Event;
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::value::RawValue;

use super::log::load_chat;
use super::members::{mute_of, read_position};
use super::webhook::UPSERT_POSITION;
use crate::model::ChatKey;
use crate::store::apply::{self, ChatRow, EventMeta, MessageRow, Stored, Tx};
use crate::store::sql_seq;

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
        Ok(ChatRow {
            id: self.0.last_insert_rowid(),
            seq: 0,
            members: 0,
            open,
            messages: 0,
            ts: now_ms,
            last_message: 0,
        })
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
                "INSERT INTO events (chat_id, seq, type, user, ts, body, client_id, ord, user_ord, target)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
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
            ])?;
        Ok(())
    }

    async fn save_chat(&mut self, row: &ChatRow) -> rusqlite::Result<()> {
        self.0
            .prepare_cached(
                "UPDATE chats SET seq = ?2, members = ?3, open = ?4, messages = ?5, last_ts = ?6, last_message = ?7
                 WHERE id = ?1",
            )?
            .execute(params![
                row.id,
                row.seq as i64,
                row.members as i64,
                row.open,
                row.messages as i64,
                row.ts,
                row.last_message as i64
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

    async fn own_messages(&mut self, chat: i64, user: &str) -> rusqlite::Result<u64> {
        self.0
            .prepare_cached(
                "SELECT user_ord FROM events WHERE chat_id = ?1 AND user = ?2 AND ord IS NOT NULL
                 ORDER BY seq DESC LIMIT 1",
            )?
            .query_row(params![chat, user], |r| r.get::<_, i64>(0))
            .optional()
            .map(|n| n.unwrap_or(0) as u64)
    }

    async fn load_message(&mut self, chat: i64, seq: u64) -> rusqlite::Result<Option<MessageRow>> {
        self.0
            .prepare_cached("SELECT user, deleted FROM events WHERE chat_id = ?1 AND seq = ?2 AND type = 'message'")?
            .query_row(params![chat, sql_seq(seq)], |r| Ok(MessageRow { user: r.get(0)?, deleted: r.get(1)? }))
            .optional()
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
            .prepare_cached("UPDATE events SET body = 'null', deleted = 1 WHERE chat_id = ?1 AND seq = ?2")?
            .execute(params![chat, sql_seq(target)])?;
        let erased_edit = apply::edit_body(target, &RawValue::from_string("null".into()).expect("null is JSON"));
        self.0
            .prepare_cached("UPDATE events SET body = ?3 WHERE chat_id = ?1 AND target = ?2 AND type = 'edit'")?
            .execute(params![chat, sql_seq(target), erased_edit.get()])?;
        Ok(())
    }
}
