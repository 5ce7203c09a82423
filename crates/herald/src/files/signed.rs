//! The one place a file's download URL is signed: [`SignedStore`], the store as the rest of a node
//! that keeps files sees it. Every event the store hands out (a write's event, a page of `fetch`, a
//! thread's page, an inbox's `last`, a thread's root and last reply, a pin, a search hit, an export
//! line, a webhook batch) comes out with a fresh URL per file, so a read path added later cannot
//! forget to sign: it has no unsigned event to forget with. Pushes carry the URL their write got;
//! the hub's window of a hot chat serves those frames only within their hour (`hub/recent/page.rs`).
//!
//! Owns nothing but the signer; what a URL is and for how long it holds is [`FileUrls`]'s, and the
//! store's contract is unchanged: every other answer passes through as the backend gave it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use herald_protocol::Event;
use herald_protocol::reply::{ChatView, InboxEntry, MemberEntry, PinEntry, Profile, ThreadEntry};

use super::FileUrls;
use crate::model::{BoxFuture, ChatInfo, ChatKey, FileKey};
use crate::store::{
    Conversations, EventLog, Export, ExportCursor, Exported, Fetched, Files, Hit, InboxCursor, Lifecycle, Member,
    Membership, Moderation, Moved, RevocationList, Revoked, Search, SearchQuery, ShardStatus, Store, StoreError,
    StoredFile, ThreadCursor, Undelivered, WebhookAck, WebhookPositions, Write, Written,
};

/// A store whose events leave it signed; see the module's documentation.
pub struct SignedStore {
    inner: Arc<dyn Store>,
    urls: Arc<FileUrls>,
}

impl SignedStore {
    /// `inner`, handing out events with their files' URLs signed by `urls`.
    pub fn wrap(inner: Arc<dyn Store>, urls: Arc<FileUrls>) -> Arc<dyn Store> {
        Arc::new(SignedStore { inner, urls })
    }

    fn sign(&self, ws: &str, chat: &str, event: &mut Event) {
        // Most events carry no files: no key is built for them.
        if event.files.as_ref().is_some_and(|f| !f.is_empty()) {
            self.urls.sign(&ChatKey::new(ws, chat), event);
        }
    }
}

impl EventLog for SignedStore {
    fn write(&self, write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
        // Most writes name no file: their future is the backend's, with nothing added on the way.
        if !write.names_files() {
            return self.inner.write(write);
        }
        let key = write.key().clone();
        Box::pin(async move {
            let mut written = self.inner.write(write).await?;
            if let Some(event) = &mut written.event {
                self.sign(&key.ws, &key.chat, event);
            }
            Ok(written)
        })
    }

    fn chat(&self, key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
        self.inner.chat(key)
    }

    fn fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        Box::pin(async move {
            let mut fetched = self.inner.fetch(key, member, after, limit).await?;
            fetched.events.iter_mut().for_each(|e| self.sign(&key.ws, &key.chat, e));
            Ok(fetched)
        })
    }

    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
        self.inner.heads(keys)
    }

    fn changed_heads(&self) -> BoxFuture<'_, Result<Option<Moved>, StoreError>> {
        self.inner.changed_heads()
    }

    fn client_id_seq<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
        client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        self.inner.client_id_seq(key, user, client_id)
    }
}

impl Membership for SignedStore {
    fn member<'a>(&'a self, key: &'a ChatKey, user: &'a str) -> BoxFuture<'a, Result<Option<Member>, StoreError>> {
        self.inner.member(key, user)
    }

    fn inbox<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a InboxCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<InboxEntry>, StoreError>> {
        Box::pin(async move {
            let mut entries = self.inner.inbox(ws, user, after, limit).await?;
            for entry in &mut entries {
                if let Some(last) = &mut entry.last {
                    self.sign(ws, &entry.chat, last);
                }
            }
            Ok(entries)
        })
    }

    fn member_chats<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>> {
        self.inner.member_chats(ws, user, limit)
    }

    fn inbox_entry<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<InboxEntry>, StoreError>> {
        Box::pin(async move {
            let mut entry = self.inner.inbox_entry(key, user).await?;
            if let Some(last) = entry.as_mut().and_then(|e| e.last.as_mut()) {
                self.sign(&key.ws, &key.chat, last);
            }
            Ok(entry)
        })
    }
}

impl Moderation for SignedStore {
    fn user_messages<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<(&'a str, u64)>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
        self.inner.user_messages(ws, user, after, limit)
    }
}

impl RevocationList for SignedStore {
    fn revoke<'a>(&'a self, ws: &'a str, user: &'a str, revoked_ms: i64) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.revoke(ws, user, revoked_ms)
    }

    fn revocations(&self, within: Option<Duration>) -> BoxFuture<'_, Result<Revoked, StoreError>> {
        self.inner.revocations(within)
    }
}

impl WebhookPositions for SignedStore {
    fn track_webhook(&self) {
        self.inner.track_webhook()
    }

    fn webhook_pending(
        &self,
        shard: usize,
        chats: u32,
        events: u32,
        members_max: u64,
    ) -> BoxFuture<'_, Result<Vec<Undelivered>, StoreError>> {
        Box::pin(async move {
            let mut pending = self.inner.webhook_pending(shard, chats, events, members_max).await?;
            for chat in &mut pending {
                chat.events.iter_mut().for_each(|e| self.sign(&chat.key.ws, &chat.key.chat, e));
            }
            Ok(pending)
        })
    }

    fn webhook_ack(&self, shard: usize, acks: Vec<WebhookAck>) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.webhook_ack(shard, acks)
    }
}

impl Lifecycle for SignedStore {
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.inner.ready()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.inner.close()
    }

    fn shards(&self) -> Vec<ShardStatus> {
        self.inner.shards()
    }
}

impl Conversations for SignedStore {
    fn chat_view<'a>(&'a self, key: &'a ChatKey) -> BoxFuture<'a, Result<Option<(ChatInfo, Profile)>, StoreError>> {
        self.inner.chat_view(key)
    }

    fn chat_list<'a>(
        &'a self,
        ws: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatView>, StoreError>> {
        self.inner.chat_list(ws, after, limit)
    }

    fn member_list<'a>(
        &'a self,
        key: &'a ChatKey,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<(Vec<MemberEntry>, u64), StoreError>> {
        self.inner.member_list(key, after, limit)
    }

    fn thread_fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        root: u64,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        Box::pin(async move {
            let mut fetched = self.inner.thread_fetch(key, member, root, after, limit).await?;
            fetched.events.iter_mut().for_each(|e| self.sign(&key.ws, &key.chat, e));
            Ok(fetched)
        })
    }

    fn thread_list<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        chat: Option<&'a str>,
        after: Option<&'a ThreadCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ThreadEntry>, StoreError>> {
        Box::pin(async move {
            let mut threads = self.inner.thread_list(ws, user, chat, after, limit).await?;
            for t in &mut threads {
                self.sign(ws, &t.chat, &mut t.root);
                self.sign(ws, &t.chat, &mut t.last);
            }
            Ok(threads)
        })
    }

    fn pin_list<'a>(&'a self, key: &'a ChatKey) -> BoxFuture<'a, Result<Vec<PinEntry>, StoreError>> {
        Box::pin(async move {
            let mut pins = self.inner.pin_list(key).await?;
            pins.iter_mut().for_each(|p| self.sign(&key.ws, &key.chat, &mut p.message));
            Ok(pins)
        })
    }

    fn reaction_users<'a>(
        &'a self,
        key: &'a ChatKey,
        target: u64,
        per_emoji: usize,
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<String>>, StoreError>> {
        self.inner.reaction_users(key, target, per_emoji)
    }

    fn idle_streams(&self, idle_before_ms: i64, limit: u32) -> BoxFuture<'_, Result<Vec<(ChatKey, u64)>, StoreError>> {
        self.inner.idle_streams(idle_before_ms, limit)
    }
}

impl Files for SignedStore {
    fn files<'a>(&'a self, key: &'a ChatKey, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<StoredFile>, StoreError>> {
        self.inner.files(key, ids)
    }

    fn file_chats<'a>(
        &'a self,
        ws: &'a str,
        ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        self.inner.file_chats(ws, ids)
    }

    fn sweepable<'a>(&'a self, orphan_before_ms: i64, limit: u32) -> BoxFuture<'a, Result<Vec<FileKey>, StoreError>> {
        self.inner.sweepable(orphan_before_ms, limit)
    }
}

impl Search for SignedStore {
    fn search<'a>(&'a self, q: &'a SearchQuery) -> BoxFuture<'a, Result<Vec<Hit>, StoreError>> {
        Box::pin(async move {
            let mut hits = self.inner.search(q).await?;
            hits.iter_mut().for_each(|h| self.sign(&q.ws, &h.chat, &mut h.event));
            Ok(hits)
        })
    }
}

impl Export for SignedStore {
    fn export_parts(&self) -> usize {
        self.inner.export_parts()
    }

    fn export_members<'a>(
        &'a self,
        part: usize,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
        self.inner.export_members(part, ws, user, after, limit)
    }

    fn export_messages<'a>(
        &'a self,
        part: usize,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a ExportCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<Exported>, StoreError>> {
        Box::pin(async move {
            let mut lines = self.inner.export_messages(part, ws, user, after, limit).await?;
            lines.iter_mut().for_each(|m| self.sign(ws, &m.chat, &mut m.event));
            Ok(lines)
        })
    }
}
