//! The primitive operations of one write transaction, which each backend supplies (`sqlite/tx.rs`,
//! `postgres/tx.rs`) and the batch's rules (`apply.rs`, `apply/conv.rs`, `apply/stream.rs`) are made of.

use std::collections::HashMap;

use herald_protocol::Event;
use serde_json::value::RawValue;

use herald_protocol::FileRef;

use super::{ChatRow, EventMeta, MessageRow, Stored};
use crate::model::ChatKey;
use crate::store::Write;
use crate::store::{NewFile, StoredFile};

/// The primitive operations of one write transaction.
pub(crate) trait Tx {
    type Error: std::fmt::Display;
    /// Loads a chat's row; where several writers exist, locks it until the transaction ends.
    async fn load_chat(&mut self, key: &ChatKey) -> Result<Option<ChatRow>, Self::Error>;
    async fn create_chat(&mut self, key: &ChatKey, open: bool, now_ms: i64) -> Result<ChatRow, Self::Error>;
    /// Loads the rows of `keys` (sorted, no duplicates), one answer per key, locking each in that
    /// order where several writers exist. The default loads them one by one; a backend where a
    /// round trip costs more than a lookup loads them in one.
    async fn load_chats(&mut self, keys: &[&ChatKey]) -> Result<Vec<Option<ChatRow>>, Self::Error> {
        let mut rows = Vec::with_capacity(keys.len());
        for key in keys {
            rows.push(self.load_chat(key).await?);
        }
        Ok(rows)
    }
    /// Creates ahead, before any row is loaded, the chats of `new` (sorted by key, each with the
    /// `open` of the write that creates it) that do not exist, and answers the rows it created,
    /// one answer per key (`None`: it exists, and is loaded with the others). A batch that creates
    /// chats one write at a time holds every row it locked before through each creation's round
    /// trip. The default creates none ahead: each is created by its write ([`Tx::create_chat`]).
    async fn create_chats(
        &mut self,
        _new: &[(&ChatKey, bool)],
        _now_ms: i64,
    ) -> Result<Vec<Option<ChatRow>>, Self::Error> {
        Ok(Vec::new())
    }
    /// The member's read position, `None` if not a member.
    async fn read_position(&mut self, chat: i64, user: &str) -> Result<Option<u64>, Self::Error>;
    async fn add_member(&mut self, chat: i64, user: &str, now_ms: i64) -> Result<(), Self::Error>;
    /// Whether a member was removed.
    async fn remove_member(&mut self, chat: i64, user: &str) -> Result<bool, Self::Error>;
    async fn set_read_position(&mut self, chat: i64, user: &str, seq: u64) -> Result<(), Self::Error>;
    /// The seq of the event already stored with this `client_id`, if any.
    async fn find_client_id(
        &mut self,
        chat: i64,
        user: Option<&str>,
        client_id: &str,
    ) -> Result<Option<u64>, Self::Error>;
    async fn insert_event(&mut self, chat: i64, event: &Event, meta: EventMeta) -> Result<(), Self::Error>;
    // v1.1: the message lifecycle and moderation.
    /// Whether `user` is banned from the chat.
    async fn is_banned(&mut self, chat: i64, user: &str) -> Result<bool, Self::Error>;
    async fn set_banned(&mut self, chat: i64, user: &str, banned: bool) -> Result<(), Self::Error>;
    /// The stored mute of `user` (its end, `i64::MAX` for none), whether or not it has run out.
    async fn mute(&mut self, chat: i64, user: &str) -> Result<Option<i64>, Self::Error>;
    /// Mutes `user` until `until_ms`, or unmutes with `None`.
    async fn set_mute(&mut self, chat: i64, user: &str, until_ms: Option<i64>) -> Result<(), Self::Error>;
    /// How many `message` events of `user` the chat held before this transaction: outside
    /// threads (`thread` `None`), or (v1.2) among the replies of thread root `thread`.
    async fn own_messages(&mut self, chat: i64, user: &str, thread: Option<u64>) -> Result<u64, Self::Error>;
    /// The `message` event `seq` of the chat, if it is one.
    async fn load_message(&mut self, chat: i64, seq: u64) -> Result<Option<MessageRow>, Self::Error>;
    // v1.2: conversations.
    /// Writes back what [`MessageRow`] keeps beside the body (mentions, replies, pin, reactions, stream).
    async fn save_message(&mut self, chat: i64, seq: u64, m: &MessageRow) -> Result<(), Self::Error>;
    /// Message `seq`'s body as stored now.
    async fn load_body(&mut self, chat: i64, seq: u64) -> Result<Option<Box<RawValue>>, Self::Error>;
    /// Gives message `seq` a new body without marking it edited (a stream's append).
    async fn set_body(&mut self, chat: i64, seq: u64, body: &RawValue) -> Result<(), Self::Error>;
    /// The seq of the latest reply of thread `root` below `before` that is not deleted, 0 if none.
    async fn last_reply_before(&mut self, chat: i64, root: u64, before: u64) -> Result<u64, Self::Error>;
    /// Makes `user` follow thread `root` (nothing if they already do).
    async fn follow(&mut self, chat: i64, root: u64, user: &str) -> Result<(), Self::Error>;
    /// `user`'s read position in thread `root`, `None` if they never had one.
    async fn thread_read(&mut self, chat: i64, root: u64, user: &str) -> Result<Option<u64>, Self::Error>;
    /// Sets `user`'s read position in thread `root` (following it or not, as before).
    async fn set_thread_read(&mut self, chat: i64, root: u64, user: &str, seq: u64) -> Result<(), Self::Error>;
    /// Replaces the users message `seq` counts as mentioning (its sender is never among them).
    async fn set_mentions(&mut self, chat: i64, seq: u64, users: &[String]) -> Result<(), Self::Error>;
    /// Turns `user`'s `emoji` reaction on `target` on or off; whether that changed it.
    async fn set_reaction(
        &mut self,
        chat: i64,
        target: u64,
        emoji: &str,
        user: &str,
        on: bool,
    ) -> Result<bool, Self::Error>;
    /// The chat's profile as stored (the JSON of a [`herald_protocol::reply::Profile`]), `None` if never set.
    async fn load_profile(&mut self, chat: i64) -> Result<Option<String>, Self::Error>;
    async fn save_profile(&mut self, chat: i64, profile: &str) -> Result<(), Self::Error>;
    /// Gives message `target` its latest body and the seq of the edit that set it.
    async fn edit_message(&mut self, chat: i64, target: u64, body: &RawValue, edit: u64) -> Result<(), Self::Error>;
    /// Erases message `target`'s body and the new bodies in its `edit` events, and marks it deleted.
    async fn erase_message(&mut self, chat: i64, target: u64) -> Result<(), Self::Error>;
    // v1.2: files.
    async fn insert_file(&mut self, chat: i64, user: &str, file: &NewFile, now_ms: i64) -> Result<(), Self::Error>;
    /// A file's row by id, with the id of the chat it was uploaded for.
    async fn load_file(&mut self, id: &str) -> Result<Option<(i64, StoredFile)>, Self::Error>;
    /// Attaches file `id` to message `seq` of its chat.
    async fn attach_file(&mut self, id: &str, seq: u64) -> Result<(), Self::Error>;
    /// Marks message `seq`'s files gone, except those in `keep`.
    async fn drop_files(&mut self, chat: i64, seq: u64, keep: &[String], now_ms: i64) -> Result<(), Self::Error>;
    /// Forgets file `id` of the chat.
    async fn forget_file(&mut self, chat: i64, id: &str) -> Result<(), Self::Error>;
    /// Sets message `seq`'s files as its stored view shows them (none when empty).
    async fn set_message_files(&mut self, chat: i64, seq: u64, files: &[FileRef]) -> Result<(), Self::Error>;
    /// Writes back a row's seq, member count, open flag and the counts beside them.
    async fn save_chat(&mut self, row: &ChatRow) -> Result<(), Self::Error>;
    /// Writes back every row the batch changed, after [`Tx::finish`]; one by one by default, in one
    /// statement where a round trip costs more (the rows are locked already, in any order). A
    /// backend may send what `finish` held back together with it.
    async fn save_chats(&mut self, rows: &[&ChatRow]) -> Result<(), Self::Error> {
        for row in rows {
            self.save_chat(row).await?;
        }
        Ok(())
    }
    /// Reads ahead, in few round trips, what the batch's writes on the chats
    /// in `rows` will ask; for backends where a round trip costs more than a lookup.
    async fn prefetch(&mut self, _writes: &[&Write], _rows: &HashMap<ChatKey, ChatRow>) -> Result<(), Self::Error> {
        Ok(())
    }
    /// Sends whatever the transaction held back (bulk inserts) before its chats are saved.
    async fn finish(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
    /// webhook: whether this transaction keeps the webhook's positions: only
    /// while a webhook is configured (a node without one does not pay for it).
    fn keeps_webhook_positions(&self) -> bool {
        false
    }
    /// webhook: records, in the same transaction, that these chats stored
    /// events the webhook has not delivered. Called only when
    /// [`Tx::keeps_webhook_positions`].
    async fn mark_undelivered(&mut self, _marks: &[Stored]) -> Result<(), Self::Error> {
        Ok(())
    }
}
