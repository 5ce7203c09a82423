//! The rules of a write batch, shared by every backend: what each [`Write`]
//! checks, which event it stores and how the chat's seq and member count
//! move. A backend supplies the primitive reads and writes of one
//! transaction ([`Tx`]); this module decides what to do with them.
//!
//! A batch first creates the chats its writes create, then loads every other
//! chat it touches, in key order (a backend with several writers, like
//! PostgreSQL, locks each row as it loads it, so two batches never wait on each
//! other in a cycle), then applies its writes in order against those rows in
//! memory, and finally saves each touched row once. That is why a flood of joins
//! into one chat updates the chat's row once per batch, not once per join. A
//! backend where a round trip costs more than a lookup does each of those steps
//! in one statement, so a hot chat's row is held for a few round trips a batch.

mod conv;
mod files;
mod stream;
mod tx;

pub(crate) use tx::Tx;

use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use herald_protocol::{Event, EventType, FileRef, StreamState};
use serde_json::value::RawValue;

use super::{Actor, StoreError, Write, Written};
use crate::model::{ChatInfo, ChatKey};

/// A chat's row as a batch sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChatRow {
    pub id: i64,
    pub seq: u64,
    pub members: u64,
    pub open: bool,
    /// The `message` events stored in the chat, kept as a count.
    pub messages: u64,
    /// The latest event's ts (the chat's creation before its first event): the inbox's order.
    pub ts: i64,
    /// The seq of the latest `message` event that is not a thread reply, 0 if none: the inbox's `last`.
    pub last_message: u64,
    /// v1.2: the chat's pinned messages, kept as a count.
    pub pins: u64,
    /// v1.2: the seq of the latest `profile` event, 0 if none.
    pub profile_seq: u64,
}

impl ChatRow {
    /// The row of a chat created now: nothing in it yet.
    pub fn created(id: i64, open: bool, now_ms: i64) -> ChatRow {
        ChatRow { id, seq: 0, members: 0, open, messages: 0, ts: now_ms, last_message: 0, pins: 0, profile_seq: 0 }
    }

    pub fn info(&self) -> ChatInfo {
        ChatInfo { seq: self.seq, members: self.members, open: self.open, profiled: self.profile_seq > 0 }
    }
}

/// webhook: a chat whose seq a batch moved.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stored {
    pub chat: i64,
    /// The chat's seq before the batch: its first event of the batch is `before + 1`.
    pub before: u64,
    /// Its seq after the batch.
    pub head: u64,
    /// When the batch stored them (every event of a batch has this ts).
    pub ts: i64,
}

/// What an event row keeps beside the event, for the inbox's counts and the lifecycle.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct EventMeta {
    /// `message` events: its place (from 1) among the chat's messages.
    pub ord: Option<u64>,
    /// `message` events: its place (from 1) among its sender's messages in the chat.
    pub user_ord: Option<u64>,
    /// `edit`, `delete` and `pin` events: the message they change.
    pub target: Option<u64>,
    /// v1.2, thread replies: its place (from 1) among its root's replies.
    pub tord: Option<u64>,
    /// v1.2, thread replies: its place (from 1) among its sender's replies in that thread.
    pub tuser_ord: Option<u64>,
}

/// A `message` event as the lifecycle and conversation rules need it: who sent it, and what the
/// stored view keeps beside its body.
#[derive(Debug, Clone, Default)]
pub(crate) struct MessageRow {
    pub user: Option<String>,
    pub deleted: bool,
    /// The root of the thread it replies in.
    pub thread: Option<u64>,
    /// Its mentions now (the latest edit's that gave any).
    pub mentions: Option<Vec<String>>,
    /// As a root: replies not deleted.
    pub replies: u64,
    /// As a root: every reply ever stored, deleted ones too (the next reply's place).
    pub replies_total: u64,
    /// As a root: the latest reply not deleted, 0 if none.
    pub last_reply: u64,
    pub pinned: bool,
    /// The latest `pin` event of this message (on or off), 0 if none.
    pub pin_seq: u64,
    /// Who pinned it, while pinned.
    pub pin_user: Option<String>,
    /// Each emoji's count of users whose reaction is on now.
    pub reactions: BTreeMap<String, u64>,
    pub stream: Option<StreamState>,
    /// When its stream last grew (ms since the epoch).
    pub stream_ms: i64,
}

/// Whether a stored mute end means muted at `now_ms`.
pub(crate) fn is_muted(until_ms: Option<i64>, now_ms: i64) -> bool {
    until_ms.is_some_and(|until| until > now_ms)
}

/// The body of an `edit` event: `{"target": 41, "body": <the new body>}`.
pub(crate) fn edit_body(target: u64, body: &RawValue) -> Box<RawValue> {
    RawValue::from_string(format!("{{\"target\":{target},\"body\":{}}}", body.get())).expect("edit body is JSON")
}

/// What one write decided: a client's answer, or a backend failure that fails the batch.
pub(crate) type Outcome = Result<Written, StoreError>;

/// Where a writer answers one write.
pub(crate) type Reply = tokio::sync::oneshot::Sender<Outcome>;

/// After a batch committed: records it in the metrics and answers each write
/// with its outcome. Shared by every backend's writer.
pub(crate) fn answer_committed(batch: &mut Vec<(Write, Reply)>, outcomes: Vec<Outcome>, started: std::time::Instant) {
    metrics::histogram!("herald_store_commit_seconds").record(started.elapsed().as_secs_f64());
    metrics::histogram!("herald_store_batch_writes").record(batch.len() as f64);
    let stored = outcomes.iter().filter(|r| matches!(r, Ok(w) if w.event.is_some())).count();
    metrics::counter!("herald_events_stored_total").increment(stored as u64);
    for ((_, reply), outcome) in batch.drain(..).zip(outcomes) {
        let _ = reply.send(outcome);
    }
}

/// Applies `writes` in `tx`. The caller commits on `Ok`, rolls back on `Err`.
pub(crate) async fn apply<T: Tx>(tx: &mut T, writes: &[&Write]) -> Result<Vec<Outcome>, T::Error> {
    let mut keys: Vec<&ChatKey> = writes.iter().map(|w| w.key()).collect();
    keys.sort();
    keys.dedup();
    let mut batch = Batch {
        rows: HashMap::with_capacity(keys.len()),
        created: HashMap::new(),
        dirty: Vec::new(),
        own: HashMap::new(),
        now_ms: now_ms(),
    };
    // New chats first, then every existing row at once: a row locked early is held through
    // every round trip after it, and another node's batch into the same chat waits that long.
    let new = creating(writes);
    let created = tx.create_chats(&new, batch.now_ms).await?;
    for ((key, _), row) in new.iter().zip(created) {
        if let Some(row) = row {
            batch.created.insert((*key).clone(), row);
        }
    }
    keys.retain(|k| !batch.created.contains_key(*k));
    for (key, row) in keys.iter().zip(tx.load_chats(&keys).await?) {
        if let Some(row) = row {
            batch.rows.insert((*key).clone(), row);
        }
    }
    // webhook: each chat's seq before the batch (a chat the batch creates starts at 0).
    let before: Option<HashMap<i64, u64>> =
        tx.keeps_webhook_positions().then(|| batch.rows.values().map(|r| (r.id, r.seq)).collect());
    tx.prefetch(writes, &batch.rows).await?;
    let mut outcomes = Vec::with_capacity(writes.len());
    for w in writes {
        outcomes.push(batch.apply_one(tx, w).await?);
    }
    tx.finish().await?;
    batch.dirty.sort();
    batch.dirty.dedup();
    let dirty: Vec<&ChatRow> = batch.dirty.iter().map(|key| &batch.rows[key]).collect();
    tx.save_chats(&dirty).await?;
    if let Some(before) = before {
        let stored: Vec<Stored> = batch
            .dirty
            .iter()
            .map(|key| &batch.rows[key])
            .map(|r| Stored {
                chat: r.id,
                before: before.get(&r.id).copied().unwrap_or(0),
                head: r.seq,
                ts: batch.now_ms,
            })
            .filter(|s| s.head > s.before)
            .collect();
        if !stored.is_empty() {
            tx.mark_undelivered(&stored).await?;
        }
    }
    Ok(outcomes)
}

/// The chats `writes` would create if they do not exist, sorted, each with the `open` of the
/// first write that would: a client's `join` (open) or a `put_chat`.
fn creating<'w>(writes: &[&'w Write]) -> Vec<(&'w ChatKey, bool)> {
    let mut new: BTreeMap<&ChatKey, bool> = BTreeMap::new();
    for &w in writes {
        let open = match w {
            Write::Join { actor: Actor::Client, .. } => true,
            Write::PutChat { open, .. } => *open,
            _ => continue,
        };
        new.entry(w.key()).or_insert(open);
    }
    new.into_iter().collect()
}

struct Batch {
    rows: HashMap<ChatKey, ChatRow>,
    /// Chats created ahead ([`Tx::create_chats`]) that their creating write has not reached:
    /// the writes before it find no chat, as they would have.
    created: HashMap<ChatKey, ChatRow>,
    dirty: Vec<ChatKey>,
    /// Messages per (chat, sender, thread root or 0) as this batch moved them, read once each.
    own: HashMap<(i64, String, u64), u64>,
    now_ms: i64,
}

/// What an event carries beside its type, user and body.
#[derive(Default)]
struct Extras<'a> {
    client_id: Option<&'a str>,
    /// `edit`, `delete` and `pin` events: the message they change.
    target: Option<u64>,
    /// v1.2 `message` events: the thread root it replies in, and its place among that root's replies.
    thread: Option<(u64, u64)>,
    quote: Option<u64>,
    mentions: Option<&'a [String]>,
    stream: Option<StreamState>,
    /// v1.2 `message` and `edit` events: the files they carry.
    files: Option<Vec<FileRef>>,
}

impl Batch {
    /// Stores the next event of `key`.
    async fn append<T: Tx>(
        &mut self,
        tx: &mut T,
        key: &ChatKey,
        kind: EventType,
        user: Option<&str>,
        body: Box<RawValue>,
        x: Extras<'_>,
    ) -> Result<Event, T::Error> {
        let id = self.rows[key].id;
        let mut meta = EventMeta { target: x.target, ..EventMeta::default() };
        let root = x.thread.map(|(root, _)| root);
        if kind == EventType::Message {
            // A message has an author: the server API refuses one without.
            let sender = user.unwrap_or_default();
            let own = match self.own.entry((id, sender.to_owned(), root.unwrap_or(0))) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => e.insert(tx.own_messages(id, sender, root).await?),
            };
            *own += 1;
            match x.thread {
                Some((_, place)) => {
                    meta.tord = Some(place);
                    meta.tuser_ord = Some(*own);
                }
                None => meta.user_ord = Some(*own),
            }
        }
        let row = self.rows.get_mut(key).expect("row loaded before append");
        row.seq += 1;
        row.ts = self.now_ms;
        // Thread replies are not the chat's messages: its unread count and `last` leave them out.
        if kind == EventType::Message && root.is_none() {
            row.messages += 1;
            row.last_message = row.seq;
            meta.ord = Some(row.messages);
        }
        let seq = row.seq;
        self.dirty.push(key.clone());
        let event = Event {
            client_id: x.client_id.map(str::to_owned),
            thread: root,
            quote: x.quote,
            mentions: x.mentions.map(<[String]>::to_vec),
            stream: x.stream,
            files: x.files,
            ..Event::new(seq, kind, user.map(str::to_owned), self.now_ms, body)
        };
        tx.insert_event(id, &event, meta).await?;
        Ok(event)
    }

    /// Refuses a muted member's write.
    async fn check_mute<T: Tx>(
        &self,
        tx: &mut T,
        key: &ChatKey,
        chat: i64,
        user: &str,
    ) -> Result<Option<StoreError>, T::Error> {
        if is_muted(tx.mute(chat, user).await?, self.now_ms) {
            return Ok(Some(StoreError::Forbidden(format!("{user} is muted in {}", key.chat))));
        }
        Ok(None)
    }

    /// Refuses a write of `user` unless they are a member and not muted.
    async fn check_member<T: Tx>(
        &self,
        tx: &mut T,
        key: &ChatKey,
        chat: i64,
        user: &str,
    ) -> Result<Option<StoreError>, T::Error> {
        if tx.read_position(chat, user).await?.is_none() {
            return Ok(Some(StoreError::Forbidden(format!("not a member of {}", key.chat))));
        }
        self.check_mute(tx, key, chat, user).await
    }

    fn done(&self, key: &ChatKey, event: Event) -> Outcome {
        Ok(Written { seq: event.seq, event: Some(event), info: self.rows[key].info(), at: None })
    }

    async fn apply_one<T: Tx>(&mut self, tx: &mut T, write: &Write) -> Result<Outcome, T::Error> {
        let key = write.key();
        let not_member = || StoreError::Forbidden(format!("not a member of {}", key.chat));
        let row = match (self.rows.get(key).copied(), write) {
            (Some(row), _) => row,
            (None, Write::Join { actor: Actor::Client, .. }) => self.create(tx, key, true).await?,
            (None, Write::PutChat { open, .. }) => {
                let row = self.create(tx, key, *open).await?;
                return Ok(Ok(Written { event: None, seq: 0, info: row.info(), at: None }));
            }
            (None, _) => return Ok(Err(StoreError::NotFound(format!("no chat {}", key.chat)))),
        };
        let unchanged = |row: ChatRow, seq: u64| Ok(Ok(Written { event: None, seq, info: row.info(), at: None }));
        match write {
            Write::PutChat { open, .. } => {
                let row = self.rows.get_mut(key).expect("row loaded");
                row.open = *open;
                self.dirty.push(key.clone());
                let row = *row;
                unchanged(row, row.seq)
            }
            Write::Join { user, actor, .. } => {
                if tx.read_position(row.id, user).await?.is_some() {
                    return unchanged(row, row.seq);
                }
                if tx.is_banned(row.id, user).await? {
                    return Ok(Err(StoreError::Forbidden(format!("{user} is banned from {}", key.chat))));
                }
                if !row.open && *actor == Actor::Client {
                    return Ok(Err(StoreError::Forbidden(format!("{} is closed; ask to be added", key.chat))));
                }
                tx.add_member(row.id, user, self.now_ms).await?;
                self.rows.get_mut(key).expect("row loaded").members += 1;
                let event = self.append(tx, key, EventType::Join, Some(user), empty_body(), Extras::default()).await?;
                Ok(self.done(key, event))
            }
            Write::Leave { user, actor, .. } => {
                if !tx.remove_member(row.id, user).await? {
                    return match actor {
                        Actor::Client => unchanged(row, row.seq),
                        Actor::Admin => {
                            Ok(Err(StoreError::NotFound(format!("{user} is not a member of {}", key.chat))))
                        }
                    };
                }
                let r = self.rows.get_mut(key).expect("row loaded");
                r.members = r.members.saturating_sub(1);
                let event = self.append(tx, key, EventType::Leave, Some(user), empty_body(), Extras::default()).await?;
                Ok(self.done(key, event))
            }
            Write::Append { user, system, body, client_id, member_only, conv, .. } => {
                if *member_only {
                    let Some(u) = user else { return Ok(Err(not_member())) };
                    if let Some(refused) = self.check_member(tx, key, row.id, u).await? {
                        return Ok(Err(refused));
                    }
                }
                if let Some(cid) = client_id
                    && let Some(seq) = tx.find_client_id(row.id, user.as_deref(), cid).await?
                {
                    return unchanged(row, seq);
                }
                if *system {
                    let x = Extras { client_id: client_id.as_deref(), ..Extras::default() };
                    let event = self.append(tx, key, EventType::System, user.as_deref(), body.clone(), x).await?;
                    return Ok(self.done(key, event));
                }
                self.send_message(tx, key, row, user.as_deref(), body, client_id.as_deref(), conv).await
            }
            Write::React { user, target, emoji, on, .. } => {
                if let Some(refused) = self.check_member(tx, key, row.id, user).await? {
                    return Ok(Err(refused));
                }
                if *target == 0 || *target > row.seq {
                    return Ok(Err(StoreError::NotFound(format!("no event {target} in {}", key.chat))));
                }
                self.react(tx, key, row, user, *target, emoji, *on).await
            }
            Write::Read { user, seq, thread: None, .. } => {
                let Some(position) = tx.read_position(row.id, user).await? else { return Ok(Err(not_member())) };
                if *seq > row.seq {
                    return Ok(Err(beyond(key, *seq, row.seq)));
                }
                if *seq <= position {
                    return unchanged(row, position);
                }
                tx.set_read_position(row.id, user, *seq).await?;
                let body = RawValue::from_string(format!("{{\"seq\":{seq}}}")).expect("read body is JSON");
                let event = self.append(tx, key, EventType::Read, Some(user), body, Extras::default()).await?;
                let info = self.rows[key].info();
                Ok(Ok(Written { event: Some(event), seq: *seq, info, at: None }))
            }
            Write::Read { user, seq, thread: Some(root), .. } => {
                self.read_thread(tx, key, row, user, *seq, *root).await
            }
            Write::Edit { user, actor, target, body, mentions, files, .. } => {
                let change = Change::Edit { body, mentions: mentions.as_deref(), files: files.as_deref() };
                self.apply_lifecycle(tx, key, row, user.as_deref(), *actor, *target, change).await
            }
            Write::Delete { user, actor, target, .. } => {
                self.apply_lifecycle(tx, key, row, user.as_deref(), *actor, *target, Change::Delete).await
            }
            Write::Ban { user, banned, .. } => {
                tx.set_banned(row.id, user, *banned).await?;
                if !*banned || !tx.remove_member(row.id, user).await? {
                    return unchanged(row, row.seq);
                }
                let r = self.rows.get_mut(key).expect("row loaded");
                r.members = r.members.saturating_sub(1);
                let event = self.append(tx, key, EventType::Leave, Some(user), empty_body(), Extras::default()).await?;
                Ok(self.done(key, event))
            }
            Write::Mute { user, muted, until_ms, .. } => {
                let until = muted.then(|| until_ms.unwrap_or(i64::MAX));
                tx.set_mute(row.id, user, until).await?;
                unchanged(row, row.seq)
            }
            Write::Profile { user, actor, patch, .. } => {
                if *actor == Actor::Client {
                    let Some(u) = user else { return Ok(Err(not_member())) };
                    if let Some(refused) = self.check_member(tx, key, row.id, u).await? {
                        return Ok(Err(refused));
                    }
                }
                self.profile(tx, key, row, user.as_deref(), patch).await
            }
            Write::Pin { user, target, on, .. } => {
                if let Some(refused) = self.check_member(tx, key, row.id, user).await? {
                    return Ok(Err(refused));
                }
                self.pin(tx, key, row, user, *target, *on).await
            }
            Write::Upload { user, actor, file, .. } => files::upload(self, tx, key, row, user, *actor, file).await,
            Write::ForgetFile { id, .. } => {
                tx.forget_file(row.id, id).await?;
                unchanged(row, row.seq)
            }
            Write::StreamText { user, actor, target, text, done, limit, .. } => {
                if *actor == Actor::Client {
                    let Some(u) = user else { return Ok(Err(not_member())) };
                    if tx.read_position(row.id, u).await?.is_none() {
                        return Ok(Err(not_member()));
                    }
                }
                let ask = stream::Ask { user: user.as_deref(), actor: *actor, target: *target, text, done: *done };
                self.stream_text(tx, key, row, ask, *limit).await
            }
        }
    }

    /// The row of a chat its write creates: made ahead, or now.
    async fn create<T: Tx>(&mut self, tx: &mut T, key: &ChatKey, open: bool) -> Result<ChatRow, T::Error> {
        let row = match self.created.remove(key) {
            Some(row) => row,
            None => tx.create_chat(key, open, self.now_ms).await?,
        };
        self.rows.insert(key.clone(), row);
        Ok(row)
    }

    /// An `edit` (with its new `body`) or a `delete` of message `target`.
    #[allow(clippy::too_many_arguments)]
    async fn apply_lifecycle<T: Tx>(
        &mut self,
        tx: &mut T,
        key: &ChatKey,
        row: ChatRow,
        user: Option<&str>,
        actor: Actor,
        target: u64,
        change: Change<'_>,
    ) -> Result<Outcome, T::Error> {
        if actor == Actor::Client {
            let Some(u) = user else { return Ok(Err(StoreError::Forbidden("a client edit needs a user".into()))) };
            if let Some(refused) = self.check_member(tx, key, row.id, u).await? {
                return Ok(Err(refused));
            }
        }
        let Some(mut message) = self.live_message(tx, row, target).await? else {
            return Ok(Err(no_message(key, target)));
        };
        if actor == Actor::Client && message.user.as_deref() != user {
            return Ok(Err(StoreError::Forbidden(format!("message {target} is another user's"))));
        }
        match change {
            Change::Edit { body, mentions, files } => {
                if message.stream == Some(StreamState::Open) {
                    return Ok(Err(StoreError::BadRequest(format!(
                        "message {target} is a stream still open: append to it, or end it with \"done\""
                    ))));
                }
                let files = match files {
                    None => None,
                    Some(ids) => {
                        match files::claim_files(tx, key, row, message.user.as_deref(), ids, Some(target)).await? {
                            Ok(refs) => Some(refs),
                            Err(refused) => return Ok(Err(refused)),
                        }
                    }
                };
                let x = Extras { target: Some(target), mentions, files: files.clone(), ..Extras::default() };
                let event = self.append(tx, key, EventType::Edit, user, edit_body(target, body), x).await?;
                tx.edit_message(row.id, target, body, event.seq).await?;
                if let Some(files) = files {
                    let keep: Vec<String> = files.iter().map(|f| f.id.clone()).collect();
                    tx.drop_files(row.id, target, &keep, self.now_ms).await?;
                    files::attach_files(tx, target, &files).await?;
                    tx.set_message_files(row.id, target, &files).await?;
                }
                if let Some(mentions) = mentions {
                    self.remention(tx, row, target, &mut message, mentions).await?;
                    tx.save_message(row.id, target, &message).await?;
                }
                Ok(self.done(key, event))
            }
            Change::Delete => {
                let body = RawValue::from_string(format!("{{\"target\":{target}}}")).expect("delete body is JSON");
                let x = Extras { target: Some(target), ..Extras::default() };
                let event = self.append(tx, key, EventType::Delete, user, body, x).await?;
                tx.erase_message(row.id, target).await?;
                tx.drop_files(row.id, target, &[], self.now_ms).await?;
                self.forget(tx, key, row, target, &mut message).await?;
                Ok(self.done(key, event))
            }
        }
    }

    /// Message `target` of the chat if it exists and is not deleted.
    async fn live_message<T: Tx>(&self, tx: &mut T, row: ChatRow, target: u64) -> Result<Option<MessageRow>, T::Error> {
        if target == 0 || target > row.seq {
            return Ok(None);
        }
        Ok(tx.load_message(row.id, target).await?.filter(|m| !m.deleted))
    }
}

/// What `apply_lifecycle` does to its target.
enum Change<'a> {
    Edit { body: &'a RawValue, mentions: Option<&'a [String]>, files: Option<&'a [String]> },
    Delete,
}

fn no_message(key: &ChatKey, target: u64) -> StoreError {
    StoreError::NotFound(format!("no message {target} in {} (or it was deleted)", key.chat))
}

fn beyond(key: &ChatKey, seq: u64, head: u64) -> StoreError {
    StoreError::BadRequest(format!("seq {seq} is beyond the latest event of {} ({head})", key.chat))
}

fn empty_body() -> Box<RawValue> {
    RawValue::from_string("{}".to_string()).expect("{} is JSON")
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}
