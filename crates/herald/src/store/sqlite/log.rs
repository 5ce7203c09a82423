//! The SQLite store's event log: writes (queued for the writer thread) and
//! the reads of chats and their events.
//!
//! Not here: how a batch of writes is applied (`writer.rs`, `tx.rs`).

use std::sync::mpsc::TrySendError;

use herald_protocol::{Event, EventType};
use rusqlite::{Connection, OptionalExtension, params};
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::members::read_position;
use super::writer::Job;
use super::{SqliteStore, unavailable};
use crate::model::{ChatInfo, ChatKey};
use crate::store::apply::{ChatRow, MessageRow};
use crate::store::columns::{event_columns, parse_counts, parse_files, parse_list, replies, stream_state};
pub(super) use crate::store::columns::{json_list, reaction_counts, stream_code};
use crate::store::{BoxFuture, EventLog, Fetched, StoreError, Write, Written, sql_seq};

impl EventLog for SqliteStore {
    fn write(&self, write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            match self.jobs.try_send(Job::Write(write, tx)) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => {
                    metrics::counter!("herald_store_errors_total", "kind" => "queue_full").increment(1);
                    return Err(unavailable("the store's write queue is full"));
                }
                Err(TrySendError::Disconnected(_)) => {
                    return Err(unavailable("the store is closed"));
                }
            }
            rx.await.unwrap_or_else(|_| Err(unavailable("the store writer stopped")))
        })
    }

    fn chat(&self, key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
        let key = key.clone();
        Box::pin(self.read(move |conn| load_chat(conn, &key).map(|row| row.map(|r| r.info()))))
    }

    fn fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        let key = key.clone();
        let member = member.map(str::to_owned);
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
                let mut stmt = tx.prepare_cached(&format!(
                    "SELECT {} FROM events WHERE chat_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                    event_columns("", false)
                ))?;
                let events = stmt
                    .query_map(params![row.id, sql_seq(after), limit as i64], event_from_row)?
                    .collect::<rusqlite::Result<Vec<Event>>>()?;
                drop(stmt);
                tx.commit()?;
                let last = events.last().map_or(after, |e| e.seq);
                Ok(Ok(Fetched { more: last < row.seq, events, info: row.info() }))
            })
            .await?
        })
    }

    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
        let keys = keys.to_vec();
        Box::pin(
            self.read(move |conn| keys.iter().map(|key| load_chat(conn, key).map(|row| row.map(|r| r.seq))).collect()),
        )
    }

    fn client_id_seq<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
        client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let (key, user, client_id) = (key.clone(), user.to_owned(), client_id.to_owned());
        Box::pin(self.read(move |conn| {
            conn.prepare_cached(
                "SELECT e.seq FROM chats c JOIN events e ON e.chat_id = c.id
                  WHERE c.ws = ?1 AND c.chat = ?2 AND e.user = ?3 AND e.client_id = ?4",
            )?
            .query_row(params![&*key.ws, &*key.chat, user, client_id], |r| r.get::<_, i64>(0).map(|v| v as u64))
            .optional()
        }))
    }
}

pub(super) fn event_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    event_from_row_at(r, 0)
}

pub(super) fn load_chat(conn: &Connection, key: &ChatKey) -> rusqlite::Result<Option<ChatRow>> {
    conn.prepare_cached(
        "SELECT id, seq, members, open, messages, last_ts, last_message, pins, profile_seq FROM chats
          WHERE ws = ?1 AND chat = ?2",
    )?
    .query_row(params![&*key.ws, &*key.chat], |r| {
        Ok(ChatRow {
            id: r.get(0)?,
            seq: r.get::<_, i64>(1)? as u64,
            members: r.get::<_, i64>(2)? as u64,
            open: r.get(3)?,
            messages: r.get::<_, i64>(4)? as u64,
            ts: r.get(5)?,
            last_message: r.get::<_, i64>(6)? as u64,
            pins: r.get::<_, i64>(7)? as u64,
            profile_seq: r.get::<_, i64>(8)? as u64,
        })
    })
    .optional()
}

/// An event from the columns of [`EVENT_COLUMNS`] in a row, starting at `at`.
pub(super) fn event_from_row_at(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Event> {
    let kind: String = r.get(at + 1)?;
    let body: String = r.get(at + 4)?;
    let opt_seq = |i: usize| r.get::<_, Option<i64>>(at + i).map(|v| v.map(|v| v as u64));
    Ok(Event {
        client_id: r.get(at + 5)?,
        edited: opt_seq(6)?,
        deleted: r.get(at + 7)?,
        thread: opt_seq(8)?,
        quote: opt_seq(9)?,
        mentions: parse_list(r.get(at + 10)?),
        replies: replies(r.get(at + 11)?, r.get(at + 12)?),
        pinned: r.get(at + 13)?,
        reactions: Some(parse_counts(r.get(at + 14)?)).filter(|c| !c.is_empty()),
        stream: stream_state(r.get(at + 15)?),
        files: parse_files(r.get(at + 16)?),
        ..Event::new(
            r.get::<_, i64>(at)? as u64,
            EventType::parse(&kind).unwrap_or(EventType::System),
            r.get(at + 2)?,
            r.get(at + 3)?,
            RawValue::from_string(body).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?,
        )
    })
}

/// The columns [`message_row`] reads.
pub(super) const MESSAGE_COLUMNS: &str = "user, deleted, thread, mentions, replies, replies_total, last_reply,
    pinned, pin_seq, pin_user, reactions, stream, stream_ms";

/// A message's row as the write rules need it, from [`MESSAGE_COLUMNS`].
pub(super) fn message_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MessageRow> {
    let n = |i: usize| r.get::<_, i64>(i).map(|v| v as u64);
    Ok(MessageRow {
        user: r.get(0)?,
        deleted: r.get(1)?,
        thread: r.get::<_, Option<i64>>(2)?.map(|v| v as u64),
        mentions: parse_list(r.get(3)?),
        replies: n(4)?,
        replies_total: n(5)?,
        last_reply: n(6)?,
        pinned: r.get(7)?,
        pin_seq: n(8)?,
        pin_user: r.get(9)?,
        reactions: parse_counts(r.get(10)?),
        stream: stream_state(r.get(11)?),
        stream_ms: r.get::<_, Option<i64>>(12)?.unwrap_or(0),
    })
}
