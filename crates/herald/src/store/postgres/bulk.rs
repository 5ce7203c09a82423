//! The bulk inserts of a shard's write batch: the members and events a batch adds are held back
//! and sent as one statement each (`unnest` of arrays) when a read needs them or the batch ends.
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

impl PgTx<'_, '_> {
    /// Sends the members added so far, in one statement.
    pub(super) async fn flush_members(&mut self) -> Result<(), tokio_postgres::Error> {
        if self.new_members.is_empty() {
            return Ok(());
        }
        let (mut chats, mut users, mut joined) = (Vec::new(), Vec::new(), Vec::new());
        for (chat, user, ms) in self.new_members.drain(..) {
            chats.push(chat);
            users.push(user);
            joined.push(ms);
        }
        self.exec(
            r#"INSERT INTO members (chat_id, "user", read_seq, joined_ms)
               SELECT c, u, 0, j FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS t(c, u, j)"#,
            &[&chats, &users, &joined],
        )
        .await
        .map(|_| ())
    }

    /// Sends the events appended so far, in one statement.
    pub(super) async fn flush_events(&mut self) -> Result<(), tokio_postgres::Error> {
        if self.new_events.is_empty() {
            return Ok(());
        }
        let n = self.new_events.len();
        let (mut chats, mut seqs, mut kinds, mut users) =
            (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut ts, mut bodies, mut cids) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut ords, mut user_ords, mut targets) =
            (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut threads, mut quotes, mut mentions) =
            (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let (mut tords, mut tuser_ords, mut streams, mut stream_ms) =
            (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
        let mut files = Vec::with_capacity(n);
        for e in self.new_events.drain(..) {
            files.push(e.files);
            threads.push(e.thread);
            quotes.push(e.quote);
            mentions.push(e.mentions);
            tords.push(e.meta.tord.map(sql_seq));
            tuser_ords.push(e.meta.tuser_ord.map(sql_seq));
            streams.push(e.stream);
            stream_ms.push(e.stream.map(|_| e.ts));
            ords.push(e.meta.ord.map(|v| v as i64));
            user_ords.push(e.meta.user_ord.map(|v| v as i64));
            targets.push(e.meta.target.map(sql_seq));
            chats.push(e.chat);
            seqs.push(e.seq);
            kinds.push(e.kind);
            users.push(e.user);
            ts.push(e.ts);
            bodies.push(e.body);
            cids.push(e.client_id);
        }
        self.exec(
            r#"INSERT INTO events (chat_id, seq, type, "user", ts, body, client_id, ord, user_ord, target,
                                  thread, quote, mentions, tord, tuser_ord, stream, stream_ms, files)
               SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::text[],
                                    $7::text[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bigint[],
                                    $12::bigint[], $13::text[], $14::bigint[], $15::bigint[], $16::bigint[],
                                    $17::bigint[], $18::text[])"#,
            &[
                &chats,
                &seqs,
                &kinds,
                &users,
                &ts,
                &bodies,
                &cids,
                &ords,
                &user_ords,
                &targets,
                &threads,
                &quotes,
                &mentions,
                &tords,
                &tuser_ords,
                &streams,
                &stream_ms,
                &files,
            ],
        )
        .await
        .map(|_| ())
    }
}
