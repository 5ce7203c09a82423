//! A batch's chat rows in one statement each: the chats it creates, the rows it
//! locks, and the rows it writes back.
//!
//! Every node of a cell has its own writer per shard, and a batch holds the rows
//! it locked until it commits. A channel or a large group is in nearly every
//! node's batches, so whatever a batch does between locking that row and its
//! COMMIT, every other node's batch into the chat waits for. Locked and saved one
//! round trip per chat, a batch of a hundred chats held a hot row for two hundred
//! round trips, and at ten nodes the queue on it passed the batch's timeout. Here
//! a batch holds it for the few statements that follow the one that locks it.
//!
//! Lock order: new chats are inserted first, in key order, before any existing
//! row is locked; existing rows are then locked in key order (`COLLATE "C"` is the
//! byte order of [`ChatKey`]'s `Ord`). Two batches never wait on each other in a
//! cycle: a batch waits on another's new row only while it holds nothing but new
//! rows of its own earlier in the same order.
//!
//! Not here: the other statements of a batch (`tx.rs`).

use std::collections::HashMap;

use super::PgTx;
use crate::model::ChatKey;
use crate::store::apply::ChatRow;
use crate::store::postgres::log::chat_row;

impl PgTx<'_, '_> {
    /// Inserts the chats of `new` that do not exist; answers the rows it created.
    pub(super) async fn insert_chats(
        &mut self,
        new: &[(&ChatKey, bool)],
        now_ms: i64,
    ) -> Result<Vec<Option<ChatRow>>, tokio_postgres::Error> {
        if new.is_empty() {
            return Ok(Vec::new());
        }
        let ws: Vec<&str> = new.iter().map(|(k, _)| &*k.ws).collect();
        let chat: Vec<&str> = new.iter().map(|(k, _)| &*k.chat).collect();
        let open: Vec<bool> = new.iter().map(|(_, o)| *o).collect();
        // `NOT EXISTS` first, so that a chat that exists takes no id from the sequence.
        let rows = self
            .query(
                r#"INSERT INTO chats (ws, chat, open, seq, members, created_ms, last_ts)
                   SELECT t.ws, t.chat, t.open, 0, 0, $4, $4
                     FROM unnest($1::text[], $2::text[], $3::bool[]) AS t(ws, chat, open)
                    WHERE NOT EXISTS (SELECT 1 FROM chats c WHERE c.ws = t.ws AND c.chat = t.chat)
                    ORDER BY t.ws COLLATE "C", t.chat COLLATE "C"
                   ON CONFLICT (ws, chat) DO NOTHING
                   RETURNING ws, chat, id"#,
                &[&ws, &chat, &open, &now_ms],
            )
            .await?;
        let at: HashMap<(&str, &str), usize> =
            new.iter().enumerate().map(|(i, (k, _))| ((&*k.ws, &*k.chat), i)).collect();
        let mut made = vec![None; new.len()];
        for r in &rows {
            let Some(&i) = at.get(&(r.get::<_, &str>(0), r.get::<_, &str>(1))) else { continue };
            let (key, open) = new[i];
            let mut row = ChatRow::created(r.get(2), open, now_ms);
            // A chat a lost commit had created: new, but its seqs were handed out.
            self.not_behind(key, &mut row);
            self.fresh.insert(row.id);
            made[i] = Some(row);
        }
        Ok(made)
    }

    /// Loads and locks the rows of `keys` (sorted) in one statement, in key order.
    pub(super) async fn lock_chats(
        &mut self,
        keys: &[&ChatKey],
    ) -> Result<Vec<Option<ChatRow>>, tokio_postgres::Error> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let ws: Vec<&str> = keys.iter().map(|k| &*k.ws).collect();
        let chat: Vec<&str> = keys.iter().map(|k| &*k.chat).collect();
        // The rows are locked as they leave the sort, so in key order.
        let rows = self
            .query(
                r#"SELECT c.id, c.seq, c.members, c.open, c.messages, c.last_ts, c.last_message, c.pins,
                          c.profile_seq, t.i
                     FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t(ws, chat, i)
                     JOIN chats c ON c.ws = t.ws AND c.chat = t.chat
                    ORDER BY c.ws COLLATE "C", c.chat COLLATE "C"
                      FOR UPDATE OF c"#,
                &[&ws, &chat],
            )
            .await?;
        let mut found = vec![None; keys.len()];
        for r in &rows {
            let i = r.get::<_, i64>(9) as usize - 1;
            let Some(key) = keys.get(i) else { continue };
            let mut row = chat_row(r);
            self.not_behind(key, &mut row);
            found[i] = Some(row);
        }
        Ok(found)
    }

    /// Sends what the batch holds back (its new members and events, `bulk.rs`) and writes back the
    /// rows it changed: three statements, pipelined, so one round trip while the rows are held.
    pub(super) async fn write_all(&mut self, rows: &[&ChatRow]) -> Result<(), tokio_postgres::Error> {
        let (members, events) = (self.take_members(), self.take_events());
        let chats = self.take_chats(rows);
        let this = &*self;
        // Polled in this order, so sent in this order, each after the one before on the server.
        tokio::try_join!(this.send_members(members), this.send_events(events), this.send_chats(chats))?;
        Ok(())
    }

    /// The rows to write back as columns; notes the heads they save.
    fn take_chats(&mut self, rows: &[&ChatRow]) -> Option<ChatCols> {
        if rows.is_empty() {
            return None;
        }
        let mut cols = ChatCols::default();
        for row in rows {
            if let Some(&hash) = self.hashes.get(&row.id) {
                self.saved.push((hash, row.seq));
            }
            let values = [
                row.id,
                row.seq as i64,
                row.members as i64,
                row.messages as i64,
                row.ts,
                row.last_message as i64,
                row.pins as i64,
                row.profile_seq as i64,
            ];
            for (col, v) in cols.ints.iter_mut().zip(values) {
                col.push(v);
            }
            cols.open.push(row.open);
        }
        Some(cols)
    }

    async fn send_chats(&self, cols: Option<ChatCols>) -> Result<(), tokio_postgres::Error> {
        let Some(cols) = cols else { return Ok(()) };
        let [id, seq, members, messages, ts, last_message, pins, profile_seq] = &cols.ints;
        self.exec(
            r#"UPDATE chats AS c
                  SET seq = t.seq, members = t.members, open = t.open, messages = t.messages, last_ts = t.ts,
                      last_message = t.last_message, pins = t.pins, profile_seq = t.profile_seq
                 FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bool[], $5::bigint[], $6::bigint[],
                             $7::bigint[], $8::bigint[], $9::bigint[])
                      AS t(id, seq, members, open, messages, ts, last_message, pins, profile_seq)
                WHERE c.id = t.id"#,
            &[id, seq, members, &cols.open, messages, ts, last_message, pins, profile_seq],
        )
        .await
        .map(|_| ())
    }
}

/// Rows to write back, as columns: id, seq, members, messages, last_ts, last_message, pins,
/// profile_seq; and open.
#[derive(Default)]
struct ChatCols {
    ints: [Vec<i64>; 8],
    open: Vec<bool>,
}
