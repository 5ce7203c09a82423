//! The bulk inserts of a shard's write batch: the members and events a batch adds are held back
//! and sent as one statement each (`unnest` of arrays) when a read needs them or the batch ends
//! (then pipelined with the chats' update, `tx/chats.rs`).
//!
//! Not here: the other statements of the batch (`tx.rs`).

use super::tx::PgTx;
use crate::store::apply::EventMeta;
use crate::store::sql_seq;

/// An event of this batch, not sent yet.
pub(super) struct PendingEvent {
    pub(super) chat: i64,
    pub(super) seq: i64,
    pub(super) kind: &'static str,
    pub(super) user: Option<String>,
    pub(super) ts: i64,
    pub(super) body: String,
    pub(super) client_id: Option<String>,
    pub(super) meta: EventMeta,
    pub(super) thread: Option<i64>,
    pub(super) quote: Option<i64>,
    pub(super) mentions: Option<String>,
    pub(super) stream: Option<i64>,
    pub(super) files: Option<String>,
}

/// The columns of the members a batch added, as arrays.
pub(super) struct MemberCols {
    chats: Vec<i64>,
    users: Vec<String>,
    joined: Vec<i64>,
}

/// The columns of the events a batch appended, as arrays (the order of the insert's columns).
pub(super) struct EventCols {
    chats: Vec<i64>,
    seqs: Vec<i64>,
    kinds: Vec<&'static str>,
    users: Vec<Option<String>>,
    ts: Vec<i64>,
    bodies: Vec<String>,
    cids: Vec<Option<String>>,
    ords: Vec<Option<i64>>,
    user_ords: Vec<Option<i64>>,
    targets: Vec<Option<i64>>,
    threads: Vec<Option<i64>>,
    quotes: Vec<Option<i64>>,
    mentions: Vec<Option<String>>,
    tords: Vec<Option<i64>>,
    tuser_ords: Vec<Option<i64>>,
    streams: Vec<Option<i64>>,
    stream_ms: Vec<Option<i64>>,
    files: Vec<Option<String>>,
}

impl PgTx<'_, '_> {
    /// Sends the members added so far, in one statement.
    pub(super) async fn flush_members(&mut self) -> Result<(), tokio_postgres::Error> {
        let cols = self.take_members();
        self.send_members(cols).await
    }

    /// Sends the events appended so far, in one statement.
    pub(super) async fn flush_events(&mut self) -> Result<(), tokio_postgres::Error> {
        let cols = self.take_events();
        self.send_events(cols).await
    }

    /// The members added so far, taken out to be sent.
    pub(super) fn take_members(&mut self) -> Option<MemberCols> {
        if self.new_members.is_empty() {
            return None;
        }
        let n = self.new_members.len();
        let mut cols =
            MemberCols { chats: Vec::with_capacity(n), users: Vec::with_capacity(n), joined: Vec::with_capacity(n) };
        for (chat, user, ms) in self.new_members.drain(..) {
            cols.chats.push(chat);
            cols.users.push(user);
            cols.joined.push(ms);
        }
        Some(cols)
    }

    pub(super) async fn send_members(&self, cols: Option<MemberCols>) -> Result<(), tokio_postgres::Error> {
        let Some(c) = cols else { return Ok(()) };
        self.exec(
            r#"INSERT INTO members (chat_id, "user", read_seq, joined_ms)
               SELECT c, u, 0, j FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS t(c, u, j)"#,
            &[&c.chats, &c.users, &c.joined],
        )
        .await
        .map(|_| ())
    }

    /// The events appended so far, taken out to be sent.
    pub(super) fn take_events(&mut self) -> Option<EventCols> {
        if self.new_events.is_empty() {
            return None;
        }
        let n = self.new_events.len();
        let mut c = EventCols {
            chats: Vec::with_capacity(n),
            seqs: Vec::with_capacity(n),
            kinds: Vec::with_capacity(n),
            users: Vec::with_capacity(n),
            ts: Vec::with_capacity(n),
            bodies: Vec::with_capacity(n),
            cids: Vec::with_capacity(n),
            ords: Vec::with_capacity(n),
            user_ords: Vec::with_capacity(n),
            targets: Vec::with_capacity(n),
            threads: Vec::with_capacity(n),
            quotes: Vec::with_capacity(n),
            mentions: Vec::with_capacity(n),
            tords: Vec::with_capacity(n),
            tuser_ords: Vec::with_capacity(n),
            streams: Vec::with_capacity(n),
            stream_ms: Vec::with_capacity(n),
            files: Vec::with_capacity(n),
        };
        for e in self.new_events.drain(..) {
            c.files.push(e.files);
            c.threads.push(e.thread);
            c.quotes.push(e.quote);
            c.mentions.push(e.mentions);
            c.tords.push(e.meta.tord.map(sql_seq));
            c.tuser_ords.push(e.meta.tuser_ord.map(sql_seq));
            c.streams.push(e.stream);
            c.stream_ms.push(e.stream.map(|_| e.ts));
            c.ords.push(e.meta.ord.map(|v| v as i64));
            c.user_ords.push(e.meta.user_ord.map(|v| v as i64));
            c.targets.push(e.meta.target.map(sql_seq));
            c.chats.push(e.chat);
            c.seqs.push(e.seq);
            c.kinds.push(e.kind);
            c.users.push(e.user);
            c.ts.push(e.ts);
            c.bodies.push(e.body);
            c.cids.push(e.client_id);
        }
        Some(c)
    }

    pub(super) async fn send_events(&self, cols: Option<EventCols>) -> Result<(), tokio_postgres::Error> {
        let Some(c) = cols else { return Ok(()) };
        self.exec(
            r#"INSERT INTO events (chat_id, seq, type, "user", ts, body, client_id, ord, user_ord, target,
                                  thread, quote, mentions, tord, tuser_ord, stream, stream_ms, files)
               SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::text[],
                                    $7::text[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[],
                                    $12::bigint[], $13::text[], $14::bigint[], $15::bigint[], $16::bigint[],
                                    $17::bigint[], $18::text[])"#,
            &[
                &c.chats,
                &c.seqs,
                &c.kinds,
                &c.users,
                &c.ts,
                &c.bodies,
                &c.cids,
                &c.ords,
                &c.user_ords,
                &c.targets,
                &c.threads,
                &c.quotes,
                &c.mentions,
                &c.tords,
                &c.tuser_ords,
                &c.streams,
                &c.stream_ms,
                &c.files,
            ],
        )
        .await
        .map(|_| ())
    }
}
