//! v1.2's rules of a write batch: threads and quotes, mentions, pins, reaction counts and chat
//! profiles. Each keeps what the stored view shows as counts on the rows it changes (a root's
//! replies, a message's reaction counts, a chat's pins), so no read recounts the log.
//!
//! Not here: streamed messages (`stream.rs`), or the rules of v1 and v1.1 (`apply.rs`).

use herald_protocol::reply::Profile;
use herald_protocol::request::{Patch, ProfilePatch};
use herald_protocol::{EventType, StreamState};
use serde_json::value::RawValue;

use super::{Batch, ChatRow, Extras, MessageRow, Outcome, Tx, no_message};
use crate::model::ChatKey;
use crate::store::{Conversation, StoreError, Written};

/// Most messages pinned in one chat at once.
pub(crate) const PINS_MAX: u64 = 50;

impl Batch {
    /// A client's or the server API's `message`, in a thread or not, quoting, mentioning and
    /// streaming as `conv` says.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn send_message<T: Tx>(
        &mut self,
        tx: &mut T,
        key: &ChatKey,
        row: ChatRow,
        user: Option<&str>,
        body: &RawValue,
        client_id: Option<&str>,
        conv: &Conversation,
    ) -> Result<Outcome, T::Error> {
        let mut root = None;
        if let Some(r) = conv.thread {
            let Some(m) = self.live_message(tx, row, r).await? else { return Ok(Err(no_message(key, r))) };
            if m.thread.is_some() {
                return Ok(Err(StoreError::BadRequest(format!(
                    "message {r} is a reply in a thread; threads do not nest"
                ))));
            }
            root = Some((r, m));
        }
        if let Some(q) = conv.quote {
            let found = if q == 0 || q > row.seq { None } else { tx.load_message(row.id, q).await? };
            if found.is_none() {
                return Ok(Err(StoreError::NotFound(format!("no message {q} in {}", key.chat))));
            }
        }
        let files = match conv.files.as_deref().filter(|ids| !ids.is_empty()) {
            None => None,
            Some(ids) => match super::files::claim_files(tx, key, row, user, ids, None).await? {
                Ok(refs) => Some(refs),
                Err(refused) => return Ok(Err(refused)),
            },
        };
        let x = Extras {
            client_id,
            files: files.clone(),
            thread: root.as_ref().map(|(r, m)| (*r, m.replies_total + 1)),
            quote: conv.quote,
            mentions: conv.mentions.as_deref(),
            stream: conv.stream.then_some(StreamState::Open),
            ..Extras::default()
        };
        let event = self.append(tx, key, EventType::Message, user, body.to_owned(), x).await?;
        if let Some(files) = &files {
            super::files::attach_files(tx, event.seq, files).await?;
        }
        let mentioned = others(conv.mentions.as_deref().unwrap_or_default(), user);
        if !mentioned.is_empty() {
            tx.set_mentions(row.id, event.seq, &mentioned).await?;
        }
        if let Some((r, mut m)) = root {
            m.replies += 1;
            m.replies_total += 1;
            m.last_reply = event.seq;
            tx.save_message(row.id, r, &m).await?;
            // Who follows the thread: its root's sender and mentions, and this reply's.
            let mut followers: Vec<&str> = m.user.as_deref().into_iter().collect();
            followers.extend(m.mentions.iter().flatten().map(String::as_str));
            followers.extend(user);
            followers.extend(conv.mentions.iter().flatten().map(String::as_str));
            followers.sort_unstable();
            followers.dedup();
            for f in followers {
                tx.follow(row.id, r, f).await?;
            }
        }
        Ok(self.done(key, event))
    }

    /// An edit's `mentions` replace message `target`'s (`[]` clears them); in a thread, the newly
    /// mentioned follow it.
    pub(super) async fn remention<T: Tx>(
        &mut self,
        tx: &mut T,
        row: ChatRow,
        target: u64,
        message: &mut MessageRow,
        mentions: &[String],
    ) -> Result<(), T::Error> {
        message.mentions = (!mentions.is_empty()).then(|| mentions.to_vec());
        tx.set_mentions(row.id, target, &others(mentions, message.user.as_deref())).await?;
        let root = match message.thread {
            Some(r) => Some(r),
            None if message.replies_total > 0 => Some(target),
            None => None,
        };
        if let Some(r) = root {
            for user in mentions {
                tx.follow(row.id, r, user).await?;
            }
        }
        Ok(())
    }

    /// A delete's effects beyond erasing the body: the message is no longer pinned, mentions
    /// nobody, shows no reactions, ends its stream, and no longer counts among its root's replies.
    pub(super) async fn forget<T: Tx>(
        &mut self,
        tx: &mut T,
        key: &ChatKey,
        row: ChatRow,
        target: u64,
        message: &mut MessageRow,
    ) -> Result<(), T::Error> {
        if message.pinned {
            message.pinned = false;
            message.pin_user = None;
            let r = self.rows.get_mut(key).expect("row loaded");
            r.pins = r.pins.saturating_sub(1);
        }
        if message.mentions.take().is_some() {
            tx.set_mentions(row.id, target, &[]).await?;
        }
        if message.stream == Some(StreamState::Open) {
            message.stream = Some(StreamState::Done);
        }
        // A deleted message shows no reaction counts (reactions to it later count nothing).
        message.reactions.clear();
        message.deleted = true;
        tx.save_message(row.id, target, message).await?;
        if let Some(r) = message.thread
            && let Some(mut root) = tx.load_message(row.id, r).await?
        {
            root.replies = root.replies.saturating_sub(1);
            if root.last_reply == target {
                root.last_reply = tx.last_reply_before(row.id, r, target).await?;
            }
            tx.save_message(row.id, r, &root).await?;
        }
        Ok(())
    }

    /// A `reaction` event; on a message, its count of `emoji` follows whether `user`'s reaction is on.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn react<T: Tx>(
        &mut self,
        tx: &mut T,
        key: &ChatKey,
        row: ChatRow,
        user: &str,
        target: u64,
        emoji: &str,
        on: bool,
    ) -> Result<Outcome, T::Error> {
        let body = serde_json::json!({"target": target, "emoji": emoji, "on": on});
        let body = serde_json::value::to_raw_value(&body).expect("reaction body serializes");
        let event = self.append(tx, key, EventType::Reaction, Some(user), body, Extras::default()).await?;
        if tx.set_reaction(row.id, target, emoji, user, on).await?
            && let Some(mut m) = tx.load_message(row.id, target).await?
            && !m.deleted
        {
            let count = m.reactions.entry(emoji.to_owned()).or_insert(0);
            if on {
                *count += 1;
            } else {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    m.reactions.remove(emoji);
                }
            }
            tx.save_message(row.id, target, &m).await?;
        }
        Ok(self.done(key, event))
    }

    /// `read` with `thread`: the user's read position in the thread under `root`.
    pub(super) async fn read_thread<T: Tx>(
        &mut self,
        tx: &mut T,
        key: &ChatKey,
        row: ChatRow,
        user: &str,
        seq: u64,
        root: u64,
    ) -> Result<Outcome, T::Error> {
        if tx.read_position(row.id, user).await?.is_none() {
            return Ok(Err(StoreError::Forbidden(format!("not a member of {}", key.chat))));
        }
        let found = if root == 0 || root > row.seq { None } else { tx.load_message(row.id, root).await? };
        match found {
            None => return Ok(Err(StoreError::NotFound(format!("no message {root} in {}", key.chat)))),
            Some(m) if m.thread.is_some() => {
                return Ok(Err(StoreError::BadRequest(format!("message {root} is a reply, not a thread's root"))));
            }
            Some(_) => {}
        }
        if seq > row.seq {
            return Ok(Err(super::beyond(key, seq, row.seq)));
        }
        let position = tx.thread_read(row.id, root, user).await?.unwrap_or(0);
        if seq <= position {
            return Ok(Ok(Written { event: None, seq: position, info: row.info(), at: None }));
        }
        tx.set_thread_read(row.id, root, user, seq).await?;
        let body = RawValue::from_string(format!("{{\"seq\":{seq},\"thread\":{root}}}")).expect("read body is JSON");
        let event = self.append(tx, key, EventType::Read, Some(user), body, Extras::default()).await?;
        let info = self.rows[key].info();
        Ok(Ok(Written { event: Some(event), seq, info, at: None }))
    }

    /// `profile`: the chat's profile after `patch`; a `profile` event when that changed it.
    pub(super) async fn profile<T: Tx>(
        &mut self,
        tx: &mut T,
        key: &ChatKey,
        row: ChatRow,
        user: Option<&str>,
        patch: &ProfilePatch,
    ) -> Result<Outcome, T::Error> {
        let stored = tx.load_profile(row.id).await?;
        let before: Profile = stored.as_deref().and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
        let after = patched(&before, patch);
        if after == before {
            return Ok(Ok(Written { event: None, seq: row.profile_seq, info: row.info(), at: None }));
        }
        let body = serde_json::value::to_raw_value(&after).expect("a profile serializes");
        tx.save_profile(row.id, body.get()).await?;
        let event = self.append(tx, key, EventType::Profile, user, body, Extras::default()).await?;
        self.rows.get_mut(key).expect("row loaded").profile_seq = event.seq;
        Ok(self.done(key, event))
    }

    /// `pin`: pins or unpins message `target`; a `pin` event when that changed it.
    pub(super) async fn pin<T: Tx>(
        &mut self,
        tx: &mut T,
        key: &ChatKey,
        row: ChatRow,
        user: &str,
        target: u64,
        on: bool,
    ) -> Result<Outcome, T::Error> {
        let Some(mut m) = self.live_message(tx, row, target).await? else { return Ok(Err(no_message(key, target))) };
        if m.pinned == on {
            return Ok(Ok(Written { event: None, seq: m.pin_seq, info: row.info(), at: None }));
        }
        if on && row.pins >= PINS_MAX {
            return Ok(Err(StoreError::BadRequest(format!(
                "{} has {PINS_MAX} pinned messages, the most a chat keeps: unpin one first",
                key.chat
            ))));
        }
        let body = RawValue::from_string(format!("{{\"target\":{target},\"on\":{on}}}")).expect("pin body is JSON");
        let x = Extras { target: Some(target), ..Extras::default() };
        let event = self.append(tx, key, EventType::Pin, Some(user), body, x).await?;
        m.pinned = on;
        m.pin_seq = event.seq;
        m.pin_user = on.then(|| user.to_owned());
        tx.save_message(row.id, target, &m).await?;
        let r = self.rows.get_mut(key).expect("row loaded");
        r.pins = if on { r.pins + 1 } else { r.pins.saturating_sub(1) };
        Ok(self.done(key, event))
    }
}

/// `mentions` without `sender`: nobody's own message counts as mentioning them.
fn others(mentions: &[String], sender: Option<&str>) -> Vec<String> {
    mentions.iter().filter(|m| Some(m.as_str()) != sender).cloned().collect()
}

/// `before` with `patch` applied.
fn patched(before: &Profile, patch: &ProfilePatch) -> Profile {
    fn field<T: Clone>(old: &Option<T>, p: &Patch<T>) -> Option<T> {
        match p {
            Patch::Keep => old.clone(),
            Patch::Clear => None,
            Patch::Set(v) => Some(v.clone()),
        }
    }
    Profile {
        name: field(&before.name, &patch.name),
        image: field(&before.image, &patch.image),
        data: field(&before.data, &patch.data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_keeps_clears_and_sets_each_field() {
        let before = Profile { name: Some("a".into()), image: Some("i".into()), data: None };
        let patch = ProfilePatch {
            name: Patch::Set("b".into()),
            image: Patch::Clear,
            data: Patch::Set(RawValue::from_string("{\"k\":1}".into()).unwrap()),
        };
        let after = patched(&before, &patch);
        assert_eq!(after.name.as_deref(), Some("b"));
        assert_eq!(after.image, None);
        assert_eq!(after.data.as_ref().map(|d| d.get()), Some("{\"k\":1}"));
        assert_eq!(patched(&after, &ProfilePatch::default()), after, "an empty patch changes nothing");
    }

    #[test]
    fn a_sender_never_mentions_themself() {
        let m = vec!["alice".to_string(), "bob".to_string()];
        assert_eq!(others(&m, Some("alice")), vec!["bob".to_string()]);
        assert_eq!(others(&m, None), m);
    }
}
