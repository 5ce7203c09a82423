//! A shard's statements for one write batch: the primitive reads and writes ([`Tx`]) that
//! [`apply`]'s rules are made of, with reads made ahead and answers the batch changes kept here.
//!
//! Not here: the writer's loop and its transaction (`writer.rs`), or the bulk inserts of the
//! batch's new members and events (`bulk.rs`).

use std::collections::{HashMap, HashSet};

use deadpool_postgres::Transaction;
use herald_protocol::{Event, FileRef};
use serde_json::value::RawValue;

mod chats;
mod prefetch;

use super::bulk::PendingEvent;
use super::heads::{SeenHeads, chat_hash};
use super::log::{MESSAGE_COLUMNS, chat_row, message_row};
use crate::model::ChatKey;
use crate::store::apply::{self, ChatRow, EventMeta, MessageRow, Stored, Tx};
use crate::store::columns::{json_files, json_list, reaction_counts, stream_code};
use crate::store::{NewFile, StoredFile, Write, sql_seq};

/// One PostgreSQL write transaction. A round trip to the server costs more
/// than the work of most writes, so a batch's reads are made ahead in two
/// queries ([`Tx::prefetch`]: the members and the `client_id`s its writes
/// ask about) and its new members and events go out as two bulk inserts at
/// the end ([`Tx::finish`]): a batch of any number of sends into one chat
/// costs about eight round trips, not three per send. Answers the batch
/// changes (a member added, a position moved) are kept up to date here.
pub(super) struct PgTx<'a, 'b> {
    pub(super) tx: &'a Transaction<'b>,
    /// Read positions of the (chat, user) pairs read ahead; `None`: not a member.
    members: HashMap<(i64, String), Option<u64>>,
    /// `client_id`s read ahead, and the seqs of those stored before this batch.
    client_ids: HashMap<(i64, String, String), Option<u64>>,
    pub(super) new_members: Vec<(i64, String, i64)>,
    pub(super) new_events: Vec<PendingEvent>,
    /// Read ahead with the members: each pair's mute end, ban, and message count.
    mutes: HashMap<(i64, String), Option<i64>>,
    bans: HashMap<(i64, String), bool>,
    own: HashMap<(i64, String), u64>,
    /// webhook: whether this transaction keeps the webhook's positions.
    pub(super) webhook: bool,
    /// The highest seqs this node has seen (`heads.rs`), and the shard's name for its log lines.
    heads: &'a SeenHeads,
    shard: &'a str,
    /// Chats read in this batch, by row id: their keys' hashes.
    hashes: HashMap<i64, u64>,
    /// Chats this batch created: nobody is a member, banned or muted there, and nothing was
    /// sent, so nothing about them is asked of the server.
    fresh: HashSet<i64>,
    /// The chats' heads as this batch saves them: what the node has seen once it commits.
    pub(super) saved: Vec<(u64, u64)>,
}

impl<'a, 'b> PgTx<'a, 'b> {
    pub(super) fn new(tx: &'a Transaction<'b>, heads: &'a SeenHeads, shard: &'a str) -> Self {
        PgTx {
            tx,
            heads,
            shard,
            hashes: HashMap::new(),
            fresh: HashSet::new(),
            saved: Vec::new(),
            members: HashMap::new(),
            client_ids: HashMap::new(),
            new_members: Vec::new(),
            new_events: Vec::new(),
            mutes: HashMap::new(),
            bans: HashMap::new(),
            own: HashMap::new(),
            webhook: false,
        }
    }

    pub(super) async fn exec(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, tokio_postgres::Error> {
        let stmt = self.tx.prepare_cached(sql).await?;
        self.tx.execute(&stmt, params).await
    }

    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let stmt = self.tx.prepare_cached(sql).await?;
        self.tx.query(&stmt, params).await
    }

    /// Moves a chat found behind a seq this node has seen up to that seq
    /// (see `heads.rs`): the next event comes after every seq already handed out.
    fn not_behind(&mut self, key: &ChatKey, row: &mut ChatRow) {
        let hash = chat_hash(key);
        self.hashes.insert(row.id, hash);
        if let Some(seen) = self.heads.seen(hash)
            && seen > row.seq
        {
            tracing::error!(
                shard = self.shard,
                chat = %key,
                stored = row.seq,
                seen,
                "the shard holds less of this chat than this node saw stored (a standby promoted without every \
                 commit?): events after seq {} are lost; new events go on after seq {seen}, never reusing a seq",
                row.seq
            );
            metrics::counter!("herald_store_seq_rewinds_total", "shard" => self.shard.to_string()).increment(1);
            row.seq = seen;
        }
    }
}

impl Tx for PgTx<'_, '_> {
    type Error = tokio_postgres::Error;

    async fn load_chat(&mut self, key: &ChatKey) -> Result<Option<ChatRow>, Self::Error> {
        let stmt = self
            .tx
            .prepare_cached(
                "SELECT id, seq, members, open, messages, last_ts, last_message, pins, profile_seq FROM chats
                 WHERE ws = $1 AND chat = $2 FOR UPDATE",
            )
            .await?;
        let row = self.tx.query_opt(&stmt, &[&&*key.ws, &&*key.chat]).await?;
        let mut row = row.as_ref().map(chat_row);
        if let Some(row) = &mut row {
            self.not_behind(key, row);
        }
        Ok(row)
    }

    async fn create_chat(&mut self, key: &ChatKey, open: bool, now_ms: i64) -> Result<ChatRow, Self::Error> {
        let stmt = self
            .tx
            .prepare_cached(
                "INSERT INTO chats (ws, chat, open, seq, members, created_ms, last_ts) VALUES ($1, $2, $3, 0, 0, $4, $4)
                 ON CONFLICT (ws, chat) DO NOTHING RETURNING id",
            )
            .await?;
        if let Some(r) = self.tx.query_opt(&stmt, &[&&*key.ws, &&*key.chat, &open, &now_ms]).await? {
            let mut row = ChatRow::created(r.get(0), open, now_ms);
            // A chat a lost commit had created: new, but its seqs were handed out.
            self.not_behind(key, &mut row);
            self.fresh.insert(row.id);
            return Ok(row);
        }
        // Another node created it a moment ago: take its row (and its lock).
        Ok(self.load_chat(key).await?.expect("the conflicting row exists"))
    }

    async fn load_chats(&mut self, keys: &[&ChatKey]) -> Result<Vec<Option<ChatRow>>, Self::Error> {
        self.lock_chats(keys).await
    }

    async fn create_chats(
        &mut self,
        new: &[(&ChatKey, bool)],
        now_ms: i64,
    ) -> Result<Vec<Option<ChatRow>>, Self::Error> {
        self.insert_chats(new, now_ms).await
    }

    async fn read_position(&mut self, chat: i64, user: &str) -> Result<Option<u64>, Self::Error> {
        if let Some(known) = self.members.get(&(chat, user.to_owned())) {
            return Ok(*known);
        }
        if self.fresh.contains(&chat) {
            return Ok(None);
        }
        let rows =
            self.query(r#"SELECT read_seq FROM members WHERE chat_id = $1 AND "user" = $2"#, &[&chat, &user]).await?;
        let known = rows.first().map(|r| r.get::<_, i64>(0) as u64);
        self.members.insert((chat, user.to_owned()), known);
        Ok(known)
    }

    async fn add_member(&mut self, chat: i64, user: &str, now_ms: i64) -> Result<(), Self::Error> {
        self.new_members.push((chat, user.to_owned(), now_ms));
        self.members.insert((chat, user.to_owned()), Some(0));
        Ok(())
    }

    async fn remove_member(&mut self, chat: i64, user: &str) -> Result<bool, Self::Error> {
        if let Some(None) = self.members.get(&(chat, user.to_owned())) {
            return Ok(false);
        }
        self.flush_members().await?;
        let removed =
            self.exec(r#"DELETE FROM members WHERE chat_id = $1 AND "user" = $2"#, &[&chat, &user]).await? > 0;
        self.members.insert((chat, user.to_owned()), None);
        Ok(removed)
    }

    async fn set_read_position(&mut self, chat: i64, user: &str, seq: u64) -> Result<(), Self::Error> {
        self.flush_members().await?;
        self.exec(
            r#"UPDATE members SET read_seq = $3 WHERE chat_id = $1 AND "user" = $2"#,
            &[&chat, &user, &(seq as i64)],
        )
        .await?;
        self.members.insert((chat, user.to_owned()), Some(seq));
        Ok(())
    }

    async fn find_client_id(
        &mut self,
        chat: i64,
        user: Option<&str>,
        client_id: &str,
    ) -> Result<Option<u64>, Self::Error> {
        // Sent earlier in this batch?
        if let Some(e) = self
            .new_events
            .iter()
            .find(|e| e.chat == chat && e.user.as_deref() == user && e.client_id.as_deref() == Some(client_id))
        {
            return Ok(Some(e.seq as u64));
        }
        if let Some(u) = user
            && let Some(known) = self.client_ids.get(&(chat, u.to_owned(), client_id.to_owned()))
        {
            return Ok(*known);
        }
        if self.fresh.contains(&chat) {
            return Ok(None);
        }
        let rows = self
            .query(
                r#"SELECT seq FROM events WHERE chat_id = $1 AND "user" IS NOT DISTINCT FROM $2 AND client_id = $3"#,
                &[&chat, &user, &client_id],
            )
            .await?;
        Ok(rows.first().map(|r| r.get::<_, i64>(0) as u64))
    }

    async fn insert_event(&mut self, chat: i64, e: &Event, meta: EventMeta) -> Result<(), Self::Error> {
        self.new_events.push(PendingEvent {
            chat,
            seq: e.seq as i64,
            kind: e.kind.as_str(),
            user: e.user.clone(),
            ts: e.ts,
            body: e.body.get().to_owned(),
            client_id: e.client_id.clone(),
            meta,
            thread: e.thread.map(sql_seq),
            quote: e.quote.map(sql_seq),
            mentions: e.mentions.as_deref().map(json_list),
            stream: e.stream.map(stream_code),
            files: json_files(e.files.as_deref()),
        });
        Ok(())
    }

    async fn insert_file(&mut self, chat: i64, user: &str, f: &NewFile, now_ms: i64) -> Result<(), Self::Error> {
        self.exec(
            r#"INSERT INTO files (id, chat_id, "user", name, type, size, created_ms) VALUES ($1, $2, $3, $4, $5, $6, $7)"#,
            &[&f.id, &chat, &user, &f.name, &f.mime, &(f.size as i64), &now_ms],
        )
        .await
        .map(|_| ())
    }

    async fn load_file(&mut self, id: &str) -> Result<Option<(i64, StoredFile)>, Self::Error> {
        let sql = format!("SELECT chat_id, {} FROM files WHERE id = $1", super::files::FILE_COLUMNS);
        let rows = self.query(&sql, &[&id]).await?;
        Ok(rows.first().map(|r| (r.get(0), super::files::file_at(r, 1))))
    }

    async fn attach_file(&mut self, id: &str, seq: u64) -> Result<(), Self::Error> {
        self.exec("UPDATE files SET seq = $2 WHERE id = $1", &[&id, &sql_seq(seq)]).await.map(|_| ())
    }

    async fn drop_files(&mut self, chat: i64, seq: u64, keep: &[String], now_ms: i64) -> Result<(), Self::Error> {
        self.exec(
            "UPDATE files SET gone_ms = $3 WHERE chat_id = $1 AND seq = $2 AND gone_ms IS NULL AND NOT (id = ANY($4))",
            &[&chat, &sql_seq(seq), &now_ms, &keep],
        )
        .await
        .map(|_| ())
    }

    async fn forget_file(&mut self, chat: i64, id: &str) -> Result<(), Self::Error> {
        self.exec("DELETE FROM files WHERE id = $1 AND chat_id = $2", &[&id, &chat]).await.map(|_| ())
    }

    async fn set_message_files(&mut self, chat: i64, seq: u64, files: &[FileRef]) -> Result<(), Self::Error> {
        self.flush_events().await?;
        let files = json_files(Some(files).filter(|f| !f.is_empty()));
        self.exec("UPDATE events SET files = $3 WHERE chat_id = $1 AND seq = $2", &[&chat, &sql_seq(seq), &files])
            .await
            .map(|_| ())
    }

    async fn save_chat(&mut self, row: &ChatRow) -> Result<(), Self::Error> {
        if let Some(&hash) = self.hashes.get(&row.id) {
            self.saved.push((hash, row.seq));
        }
        self.exec(
            "UPDATE chats SET seq = $2, members = $3, open = $4, messages = $5, last_ts = $6, last_message = $7,
                              pins = $8, profile_seq = $9
             WHERE id = $1",
            &[
                &row.id,
                &(row.seq as i64),
                &(row.members as i64),
                &row.open,
                &(row.messages as i64),
                &row.ts,
                &(row.last_message as i64),
                &(row.pins as i64),
                &(row.profile_seq as i64),
            ],
        )
        .await
        .map(|_| ())
    }

    async fn is_banned(&mut self, chat: i64, user: &str) -> Result<bool, Self::Error> {
        if let Some(known) = self.bans.get(&(chat, user.to_owned())) {
            return Ok(*known);
        }
        if self.fresh.contains(&chat) {
            return Ok(false);
        }
        let rows = self.query(r#"SELECT 1 FROM bans WHERE chat_id = $1 AND "user" = $2"#, &[&chat, &user]).await?;
        Ok(!rows.is_empty())
    }

    async fn set_banned(&mut self, chat: i64, user: &str, banned: bool) -> Result<(), Self::Error> {
        let sql = if banned {
            r#"INSERT INTO bans (chat_id, "user") VALUES ($1, $2) ON CONFLICT DO NOTHING"#
        } else {
            r#"DELETE FROM bans WHERE chat_id = $1 AND "user" = $2"#
        };
        self.exec(sql, &[&chat, &user]).await?;
        self.bans.insert((chat, user.to_owned()), banned);
        Ok(())
    }

    async fn mute(&mut self, chat: i64, user: &str) -> Result<Option<i64>, Self::Error> {
        if let Some(known) = self.mutes.get(&(chat, user.to_owned())) {
            return Ok(*known);
        }
        if self.fresh.contains(&chat) {
            return Ok(None);
        }
        let rows =
            self.query(r#"SELECT until_ms FROM mutes WHERE chat_id = $1 AND "user" = $2"#, &[&chat, &user]).await?;
        Ok(rows.first().map(|r| r.get(0)))
    }

    async fn set_mute(&mut self, chat: i64, user: &str, until_ms: Option<i64>) -> Result<(), Self::Error> {
        match until_ms {
            Some(until) => {
                self.exec(
                    r#"INSERT INTO mutes (chat_id, "user", until_ms) VALUES ($1, $2, $3)
                       ON CONFLICT (chat_id, "user") DO UPDATE SET until_ms = EXCLUDED.until_ms"#,
                    &[&chat, &user, &until],
                )
                .await?
            }
            None => self.exec(r#"DELETE FROM mutes WHERE chat_id = $1 AND "user" = $2"#, &[&chat, &user]).await?,
        };
        self.mutes.insert((chat, user.to_owned()), until_ms);
        Ok(())
    }

    async fn own_messages(&mut self, chat: i64, user: &str, thread: Option<u64>) -> Result<u64, Self::Error> {
        let Some(root) = thread else {
            if let Some(known) = self.own.get(&(chat, user.to_owned())) {
                return Ok(*known);
            }
            if self.fresh.contains(&chat) {
                return Ok(0);
            }
            let rows = self
                .query(
                    r#"SELECT user_ord FROM events WHERE chat_id = $1 AND "user" = $2 AND ord IS NOT NULL
                       ORDER BY seq DESC LIMIT 1"#,
                    &[&chat, &user],
                )
                .await?;
            return Ok(rows.first().map_or(0, |r| r.get::<_, i64>(0) as u64));
        };
        let rows = self
            .query(
                r#"SELECT tuser_ord FROM events WHERE chat_id = $1 AND thread = $2 AND "user" = $3
                   ORDER BY seq DESC LIMIT 1"#,
                &[&chat, &sql_seq(root), &user],
            )
            .await?;
        Ok(rows.first().map_or(0, |r| r.get::<_, i64>(0) as u64))
    }

    async fn load_message(&mut self, chat: i64, seq: u64) -> Result<Option<MessageRow>, Self::Error> {
        self.flush_events().await?;
        let rows = self
            .query(
                &format!("SELECT {MESSAGE_COLUMNS} FROM events WHERE chat_id = $1 AND seq = $2 AND type = 'message'"),
                &[&chat, &sql_seq(seq)],
            )
            .await?;
        Ok(rows.first().map(message_row))
    }

    async fn save_message(&mut self, chat: i64, seq: u64, m: &MessageRow) -> Result<(), Self::Error> {
        self.flush_events().await?;
        self.exec(
            "UPDATE events SET mentions = $3, replies = $4, replies_total = $5, last_reply = $6, pinned = $7,
                               pin_seq = $8, pin_user = $9, reactions = $10, stream = $11, stream_ms = $12
             WHERE chat_id = $1 AND seq = $2",
            &[
                &chat,
                &sql_seq(seq),
                &m.mentions.as_deref().map(json_list),
                &(m.replies as i64),
                &(m.replies_total as i64),
                &(m.last_reply as i64),
                &m.pinned,
                &(m.pin_seq as i64),
                &m.pin_user,
                &reaction_counts(&m.reactions),
                &m.stream.map(stream_code),
                &m.stream.map(|_| m.stream_ms),
            ],
        )
        .await
        .map(|_| ())
    }

    async fn load_body(&mut self, chat: i64, seq: u64) -> Result<Option<Box<RawValue>>, Self::Error> {
        self.flush_events().await?;
        let rows =
            self.query("SELECT body FROM events WHERE chat_id = $1 AND seq = $2", &[&chat, &sql_seq(seq)]).await?;
        Ok(rows.first().and_then(|r| RawValue::from_string(r.get(0)).ok()))
    }

    async fn set_body(&mut self, chat: i64, seq: u64, body: &RawValue) -> Result<(), Self::Error> {
        self.flush_events().await?;
        self.exec("UPDATE events SET body = $3 WHERE chat_id = $1 AND seq = $2", &[&chat, &sql_seq(seq), &body.get()])
            .await
            .map(|_| ())
    }

    async fn last_reply_before(&mut self, chat: i64, root: u64, before: u64) -> Result<u64, Self::Error> {
        self.flush_events().await?;
        let rows = self
            .query(
                "SELECT seq FROM events WHERE chat_id = $1 AND thread = $2 AND seq < $3 AND NOT deleted
                 ORDER BY seq DESC LIMIT 1",
                &[&chat, &sql_seq(root), &sql_seq(before)],
            )
            .await?;
        Ok(rows.first().map_or(0, |r| r.get::<_, i64>(0) as u64))
    }

    async fn follow(&mut self, chat: i64, root: u64, user: &str) -> Result<(), Self::Error> {
        self.exec(
            r#"INSERT INTO thread_reads (chat_id, root, "user", read_seq, follows) VALUES ($1, $2, $3, 0, true)
               ON CONFLICT (chat_id, root, "user") DO UPDATE SET follows = true"#,
            &[&chat, &sql_seq(root), &user],
        )
        .await
        .map(|_| ())
    }

    async fn thread_read(&mut self, chat: i64, root: u64, user: &str) -> Result<Option<u64>, Self::Error> {
        let rows = self
            .query(
                r#"SELECT read_seq FROM thread_reads WHERE chat_id = $1 AND root = $2 AND "user" = $3"#,
                &[&chat, &sql_seq(root), &user],
            )
            .await?;
        Ok(rows.first().map(|r| r.get::<_, i64>(0) as u64))
    }

    async fn set_thread_read(&mut self, chat: i64, root: u64, user: &str, seq: u64) -> Result<(), Self::Error> {
        self.exec(
            r#"INSERT INTO thread_reads (chat_id, root, "user", read_seq, follows) VALUES ($1, $2, $3, $4, false)
               ON CONFLICT (chat_id, root, "user") DO UPDATE SET read_seq = excluded.read_seq"#,
            &[&chat, &sql_seq(root), &user, &sql_seq(seq)],
        )
        .await
        .map(|_| ())
    }

    async fn set_mentions(&mut self, chat: i64, seq: u64, users: &[String]) -> Result<(), Self::Error> {
        self.exec("DELETE FROM mentions WHERE chat_id = $1 AND seq = $2", &[&chat, &sql_seq(seq)]).await?;
        if users.is_empty() {
            return Ok(());
        }
        self.exec(
            r#"INSERT INTO mentions (chat_id, "user", seq) SELECT $1, u, $3 FROM unnest($2::text[]) AS t(u)
               ON CONFLICT DO NOTHING"#,
            &[&chat, &users, &sql_seq(seq)],
        )
        .await
        .map(|_| ())
    }

    async fn set_reaction(
        &mut self,
        chat: i64,
        target: u64,
        emoji: &str,
        user: &str,
        on: bool,
    ) -> Result<bool, Self::Error> {
        let sql = if on {
            r#"INSERT INTO reactions (chat_id, target, emoji, "user") VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING"#
        } else {
            r#"DELETE FROM reactions WHERE chat_id = $1 AND target = $2 AND emoji = $3 AND "user" = $4"#
        };
        Ok(self.exec(sql, &[&chat, &sql_seq(target), &emoji, &user]).await? > 0)
    }

    async fn load_profile(&mut self, chat: i64) -> Result<Option<String>, Self::Error> {
        let rows = self.query("SELECT profile FROM chats WHERE id = $1", &[&chat]).await?;
        Ok(rows.first().and_then(|r| r.get(0)))
    }

    async fn save_profile(&mut self, chat: i64, profile: &str) -> Result<(), Self::Error> {
        self.exec("UPDATE chats SET profile = $2 WHERE id = $1", &[&chat, &profile]).await.map(|_| ())
    }

    async fn edit_message(&mut self, chat: i64, target: u64, body: &RawValue, edit: u64) -> Result<(), Self::Error> {
        self.flush_events().await?;
        self.exec(
            "UPDATE events SET body = $3, edited = $4 WHERE chat_id = $1 AND seq = $2",
            &[&chat, &sql_seq(target), &body.get(), &sql_seq(edit)],
        )
        .await
        .map(|_| ())
    }

    async fn erase_message(&mut self, chat: i64, target: u64) -> Result<(), Self::Error> {
        self.flush_events().await?;
        self.exec(
            "UPDATE events SET body = 'null', deleted = true, files = NULL WHERE chat_id = $1 AND seq = $2",
            &[&chat, &sql_seq(target)],
        )
        .await?;
        let erased_edit = apply::edit_body(target, &RawValue::from_string("null".into()).expect("null is JSON"));
        self.exec(
            "UPDATE events SET body = $3, mentions = NULL, files = NULL WHERE chat_id = $1 AND target = $2 AND type = 'edit'",
            &[&chat, &sql_seq(target), &erased_edit.get()],
        )
        .await
        .map(|_| ())
    }

    async fn save_chats(&mut self, rows: &[&ChatRow]) -> Result<(), Self::Error> {
        self.write_all(rows).await
    }

    async fn prefetch(&mut self, writes: &[&Write], rows: &HashMap<ChatKey, ChatRow>) -> Result<(), Self::Error> {
        prefetch::read_ahead(self, writes, rows).await
    }

    /// Nothing yet: [`Tx::save_chats`] sends the held-back members and events with the rows, in
    /// one round trip (`tx/chats.rs`).
    async fn finish(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    fn keeps_webhook_positions(&self) -> bool {
        self.webhook
    }

    /// One statement for the batch's chats, in the batch's key order (the
    /// order their chat rows were locked in), so writers never deadlock here.
    async fn mark_undelivered(&mut self, marks: &[Stored]) -> Result<(), Self::Error> {
        let chats: Vec<i64> = marks.iter().map(|m| m.chat).collect();
        let before: Vec<i64> = marks.iter().map(|m| m.before as i64).collect();
        let heads: Vec<i64> = marks.iter().map(|m| m.head as i64).collect();
        let ts: Vec<i64> = marks.iter().map(|m| m.ts).collect();
        self.exec(
            "INSERT INTO webhook_positions (chat_id, delivered, head, since_ms)
             SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[])
             ON CONFLICT (chat_id) DO UPDATE SET
                 since_ms = CASE WHEN webhook_positions.head <= webhook_positions.delivered THEN excluded.since_ms
                                 ELSE webhook_positions.since_ms END,
                 head = excluded.head",
            &[&chats, &before, &heads, &ts],
        )
        .await
        .map(|_| ())
    }
}
