//! A shard's event log: writes (queued for the shard's writer) and the
//! reads of chats and their events.
//!
//! Not here: how a batch of writes is applied (`writer.rs`).

use std::time::Instant;

use herald_protocol::{Event, EventType};
use serde_json::value::RawValue;
use tokio::sync::oneshot;

use super::PgShard;
use super::heads::chat_hash;
use super::members::read_position;
use crate::model::{ChatInfo, ChatKey};
use crate::store::apply::{ChatRow, MessageRow};
use crate::store::columns::{event_columns, parse_counts, parse_files, parse_list, replies, stream_state};
use crate::store::{BoxFuture, EventLog, Fetched, StoreError, Write, Written, sql_seq};

/// A commit waiting for a synchronous standby becomes visible on the primary
/// when its wait is cancelled (`pg_cancel_backend`, a `statement_timeout`):
/// committed there, not on the standby. A resend answered from such a row
/// must not be acknowledged before the row is on the standby, or a failover
/// right then loses an acknowledged event. A transaction that writes WAL
/// waits, as it commits, until the standby has the WAL up to its commit,
/// which covers every row committed before it. A write batch always does (it
/// locks its chats' rows); a read does not, so a read that answers a resend
/// then takes this lock, which writes WAL and so waits.
const REPLICATED: &str = "SELECT 1 FROM chats WHERE ws = $1 AND chat = $2 FOR KEY SHARE";

impl EventLog for PgShard {
    fn write(&self, write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            let key = write.key().clone();
            if self.jobs.try_send((write, tx)).is_err() {
                return Err(StoreError::Unavailable(self.shard.name.public("overloaded")));
            }
            let written = rx.await.unwrap_or_else(|_| Err(StoreError::Unavailable("the shard writer stopped".into())));
            if written.as_ref().is_ok_and(|w| w.event.is_some()) {
                // v1.2 search: the indexer follows the commit (never the other way round).
                self.search.mark(&key);
            }
            written
        })
    }

    fn chat(&self, key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
        let key = key.clone();
        Box::pin(async move {
            let key = &key;
            let row = self.read(|conn| async move { Ok(select_chat(&conn, key, false).await?) }).await?;
            Ok(row.map(|r| r.info()))
        })
    }

    fn fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        Box::pin(async move {
            let started = Instant::now();
            let (row, events) = self
                .read(|conn| async move {
                    let Some(row) = select_chat(&conn, key, false).await? else {
                        return Err(StoreError::NotFound(format!("no chat {}", key.chat)).into());
                    };
                    if let Some(user) = member
                        && read_position(&conn, row.id, user).await?.is_none()
                    {
                        return Err(StoreError::Forbidden(format!("not a member of {}", key.chat)).into());
                    }
                    let stmt = conn
                        .prepare_cached(&format!(
                            "SELECT {} FROM events WHERE chat_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                            event_columns("", true)
                        ))
                        .await?;
                    let rows = conn.query(&stmt, &[&row.id, &sql_seq(after), &(limit as i64)]).await?;
                    Ok((row, rows.iter().map(event_from_row).collect::<Result<Vec<_>, _>>()?))
                })
                .await?;
            metrics::histogram!("herald_store_read_seconds").record(started.elapsed().as_secs_f64());
            // The events were read after the row: the log may be ahead of it, never behind.
            let mut info = row.info();
            let last = events.last().map(|e| e.seq);
            info.seq = info.seq.max(last.unwrap_or(0));
            self.heads.read([(chat_hash(key), info.seq)]);
            Ok(Fetched { more: last.unwrap_or(after) < info.seq, events, info })
        })
    }

    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
        Box::pin(async move {
            let ws: Vec<&str> = keys.iter().map(|k| &*k.ws).collect();
            let chats: Vec<&str> = keys.iter().map(|k| &*k.chat).collect();
            let (ws, chats) = (&ws, &chats);
            let rows = self
                .read(|conn| async move {
                    let stmt = conn
                        .prepare_cached(
                            "SELECT k.i, c.seq FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS k(ws, chat, i)
                               JOIN chats c ON c.ws = k.ws AND c.chat = k.chat",
                        )
                        .await?;
                    Ok(conn.query(&stmt, &[ws, chats]).await?)
                })
                .await?;
            let mut heads = vec![None; keys.len()];
            for row in rows {
                let i = row.get::<_, i64>(0) as usize;
                if let Some(i) = i.checked_sub(1)
                    && let Some(slot) = heads.get_mut(i)
                {
                    *slot = Some(row.get::<_, i64>(1) as u64);
                }
            }
            self.heads.read(keys.iter().zip(&heads).filter_map(|(k, h)| Some((chat_hash(k), (*h)?))));
            Ok(heads)
        })
    }

    fn changed_heads(&self) -> BoxFuture<'_, Result<Option<crate::store::Moved>, StoreError>> {
        Box::pin(self.changed())
    }

    fn client_id_seq<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
        client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(async move {
            self.read(|conn| async move {
                let stmt = conn
                    .prepare_cached(
                        r#"SELECT e.seq FROM chats c JOIN events e ON e.chat_id = c.id
                            WHERE c.ws = $1 AND c.chat = $2 AND e."user" = $3 AND e.client_id = $4"#,
                    )
                    .await?;
                let row = conn.query_opt(&stmt, &[&&*key.ws, &&*key.chat, &user, &client_id]).await?;
                if row.is_some() {
                    // The answer acknowledges a send: not before the row is on a synchronous standby.
                    let stmt = conn.prepare_cached(REPLICATED).await?;
                    conn.execute(&stmt, &[&&*key.ws, &&*key.chat]).await?;
                }
                Ok(row.map(|r| r.get::<_, i64>(0) as u64))
            })
            .await
        })
    }
}

pub(super) fn event_from_row(r: &tokio_postgres::Row) -> Result<Event, StoreError> {
    event_from_row_at(r, 0)
}

/// An event from the columns of [`crate::store::columns::EVENT_COLUMNS`] in a row, starting at `at`.
pub(super) fn event_from_row_at(r: &tokio_postgres::Row, at: usize) -> Result<Event, StoreError> {
    let kind: String = r.get(at + 1);
    let body: String = r.get(at + 4);
    let opt_seq = |i: usize| r.get::<_, Option<i64>>(at + i).map(|v| v as u64);
    Ok(Event {
        client_id: r.get(at + 5),
        edited: opt_seq(6),
        deleted: r.get(at + 7),
        thread: opt_seq(8),
        quote: opt_seq(9),
        mentions: parse_list(r.get(at + 10)),
        replies: replies(r.get(at + 11), r.get(at + 12)),
        pinned: r.get(at + 13),
        reactions: Some(parse_counts(r.get(at + 14))).filter(|c| !c.is_empty()),
        stream: stream_state(r.get(at + 15)),
        files: parse_files(r.get(at + 16)),
        ..Event::new(
            r.get::<_, i64>(at) as u64,
            EventType::parse(&kind).unwrap_or(EventType::System),
            r.get(at + 2),
            r.get(at + 3),
            RawValue::from_string(body).map_err(|e| StoreError::Unavailable(format!("corrupt event body: {e}")))?,
        )
    })
}

/// The columns [`message_row`] reads.
pub(super) const MESSAGE_COLUMNS: &str = r#""user", deleted, thread, mentions, replies, replies_total, last_reply,
    pinned, pin_seq, pin_user, reactions, stream, stream_ms"#;

/// A message's row as the write rules need it, from [`MESSAGE_COLUMNS`].
pub(super) fn message_row(r: &tokio_postgres::Row) -> MessageRow {
    let n = |i: usize| r.get::<_, i64>(i) as u64;
    MessageRow {
        user: r.get(0),
        deleted: r.get(1),
        thread: r.get::<_, Option<i64>>(2).map(|v| v as u64),
        mentions: parse_list(r.get(3)),
        replies: n(4),
        replies_total: n(5),
        last_reply: n(6),
        pinned: r.get(7),
        pin_seq: n(8),
        pin_user: r.get(9),
        reactions: parse_counts(r.get(10)),
        stream: stream_state(r.get(11)),
        stream_ms: r.get::<_, Option<i64>>(12).unwrap_or(0),
    }
}

pub(super) async fn select_chat(
    conn: &impl std::ops::Deref<Target = deadpool_postgres::ClientWrapper>,
    key: &ChatKey,
    lock: bool,
) -> Result<Option<ChatRow>, tokio_postgres::Error> {
    let sql = if lock {
        "SELECT id, seq, members, open, messages, last_ts, last_message, pins, profile_seq FROM chats
          WHERE ws = $1 AND chat = $2 FOR UPDATE"
    } else {
        "SELECT id, seq, members, open, messages, last_ts, last_message, pins, profile_seq FROM chats
          WHERE ws = $1 AND chat = $2"
    };
    let stmt = conn.prepare_cached(sql).await?;
    let row = conn.query_opt(&stmt, &[&&*key.ws, &&*key.chat]).await?;
    Ok(row.as_ref().map(chat_row))
}

/// A chat row from `id, seq, members, open, messages, last_ts, last_message, pins, profile_seq`.
pub(super) fn chat_row(r: &tokio_postgres::Row) -> ChatRow {
    ChatRow {
        id: r.get(0),
        seq: r.get::<_, i64>(1) as u64,
        members: r.get::<_, i64>(2) as u64,
        open: r.get(3),
        messages: r.get::<_, i64>(4) as u64,
        ts: r.get(5),
        last_message: r.get::<_, i64>(6) as u64,
        pins: r.get::<_, i64>(7) as u64,
        profile_seq: r.get::<_, i64>(8) as u64,
    }
}
