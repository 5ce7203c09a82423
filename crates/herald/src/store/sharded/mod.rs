//! Chats spread over several stores (shards), each behind its own bulkhead
//! and circuit breaker, so one slow or dead shard slows only its own chats.
//!
//! A chat lives on the shard chosen by rendezvous hashing of (workspace,
//! chat) over the shards' names (given with `NAME=`, or `host:port/database`
//! for a bare URL; see [`super::shard_spec`]): adding a shard moves
//! only the chats the new shard wins, about 1/(n+1) of them, and the order of
//! `--store` flags does not matter. Moving those chats' rows is an operator's
//! step; see docs/operations.md.
//!
//! Each capability is one `impl` block below, and what tells them apart is
//! where a call goes: the log, a member and an inbox entry to the chat's
//! shard; an inbox page, a live inbox's chats and a user's messages to every
//! shard, merged in one order ([`Sharded::merged`]); the tail check's moved
//! chats from every shard. The capabilities of the node as a whole (export,
//! revocations, webhook positions, readiness) are in `every.rs`.
//!
//! Not here: the shards' statements (`postgres`), the breaker and bulkhead (`guard.rs`).

mod every;

use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use herald_protocol::reply::{ChatView, InboxEntry, MemberEntry, PinEntry, Profile, ThreadEntry};

use super::{
    BoxFuture, Conversations, EventLog, Fetched, Files, InboxCursor, Member, Membership, Moderation, ShardName, Store,
    StoreError, StoredFile, ThreadCursor, Write, Written,
};
use crate::guard::{Breaker, BreakerConfig, BreakerState, Bulkhead};
use crate::hashing::rendezvous;
use crate::model::FileKey;
use crate::model::{ChatInfo, ChatKey};

/// Operations running on one shard at once. Writes mostly wait for their
/// batch, so this is sized to fill a few batches.
const MAX_IN_FLIGHT: usize = 1024;
/// Operations that may wait for a slot before new ones are refused.
const MAX_WAITING: usize = 4096;
/// An operation that takes longer counts as a failure of its shard.
const OP_TIMEOUT: Duration = Duration::from_secs(1);
/// How often an open breaker's shard is probed in the background, so that
/// it closes by itself when the shard is back, traffic or not. It also caps
/// the `retry_after_ms` told to clients of an open shard.
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// What a client is told to wait when its shard's queue is full.
const BUSY_RETRY_MS: u64 = 200;

/// An open breaker admits one probe once its cool-down has passed (500 ms,
/// doubling while probes fail, at most 2 s). The background prober asks
/// every [`PROBE_EVERY`] like any client, so a shard that is back is found
/// within about the longest cool-down plus one tick, traffic or not.
const BREAKER: BreakerConfig =
    BreakerConfig { failures: 3, cooldown: Duration::from_millis(500), max_cooldown: Duration::from_secs(2) };

/// One shard and its protection.
struct Shard {
    name: ShardName,
    /// For `/readyz`: see [`ShardName::label`].
    label: String,
    store: Box<dyn Store>,
    bulkhead: Bulkhead,
    breaker: Breaker,
}

/// Stores routed by chat. See the module documentation.
pub struct Sharded {
    shards: Arc<Vec<Shard>>,
}

impl Sharded {
    /// Routes over `shards`, given with their names. Starts the background prober.
    pub fn new(shards: Vec<(ShardName, Box<dyn Store>)>) -> Sharded {
        let shards: Arc<Vec<Shard>> = Arc::new(
            shards
                .into_iter()
                .enumerate()
                .map(|(i, (name, store))| Shard {
                    label: name.label(i),
                    name,
                    store,
                    bulkhead: Bulkhead::new(MAX_IN_FLIGHT, MAX_WAITING),
                    breaker: Breaker::new(BREAKER),
                })
                .collect(),
        );
        for s in shards.iter() {
            metrics::gauge!("herald_store_shard_breaker", "shard" => s.name.to_string()).set(0.0);
        }
        let weak = Arc::downgrade(&shards);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROBE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(shards) = weak.upgrade() else { return };
                for s in shards.iter().filter(|s| s.breaker.state() == BreakerState::Open) {
                    if let Ok(probe) = s.breaker.admit() {
                        let ok = tokio::time::timeout(OP_TIMEOUT, s.store.ready()).await.is_ok_and(|r| r.is_ok());
                        s.note(probe.record(ok));
                    }
                }
            }
        });
        Sharded { shards }
    }

    /// Asks every shard at once for its part of a list, and merges the parts
    /// in `order`, keeping the first `keep`. A shard that fails fails the
    /// list: a page that silently left out a shard's rows would skip them on
    /// every later page too.
    async fn merged<'a, T>(
        &'a self,
        ask: impl Fn(&'a dyn Store) -> BoxFuture<'a, Result<Vec<T>, StoreError>>,
        order: impl FnMut(&T, &T) -> std::cmp::Ordering,
        keep: usize,
    ) -> Result<Vec<T>, StoreError> {
        let parts = futures_util::future::join_all(self.shards.iter().map(|s| s.guarded(ask(&*s.store)))).await;
        let mut all = Vec::new();
        for part in parts {
            all.extend(part?);
        }
        all.sort_by(order);
        all.truncate(keep);
        Ok(all)
    }

    fn shard_index(&self, key: &ChatKey) -> usize {
        rendezvous(&[key.ws.as_bytes(), key.chat.as_bytes()], self.shards.iter().map(|s| s.name.as_str()))
            .expect("at least one shard")
    }

    fn shard(&self, key: &ChatKey) -> &Shard {
        &self.shards[self.shard_index(key)]
    }
}

impl Shard {
    /// Runs `op` on this shard through its breaker and bulkhead, with a time limit.
    async fn guarded<T>(&self, op: BoxFuture<'_, Result<T, StoreError>>) -> Result<T, StoreError> {
        let call = self.breaker.admit().map_err(|until_probe_ms| {
            metrics::counter!("herald_store_shard_refused_total", "shard" => self.name.to_string(), "reason" => "open")
                .increment(1);
            // The background probe runs every tick: a client told to wait
            // longer would miss a shard that is back.
            let retry_after_ms = until_probe_ms.min(PROBE_EVERY.as_millis() as u64);
            StoreError::Refused { message: self.name.public("unavailable"), retry_after_ms }
        })?;
        let Some(_slot) = self.bulkhead.enter().await else {
            metrics::counter!("herald_store_shard_refused_total", "shard" => self.name.to_string(), "reason" => "busy")
                .increment(1);
            // Not the shard's fault: the call neither passes nor fails the breaker.
            call.record(true);
            return Err(StoreError::Refused { message: self.name.public("busy"), retry_after_ms: BUSY_RETRY_MS });
        };
        // Dropped (its caller cancelled) from here on, the slot and the call
        // are guards: the slot is freed and a probe handed back.
        let result = match tokio::time::timeout(OP_TIMEOUT, op).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Unavailable(self.name.public("timed out"))),
        };
        // Refusals of the request itself (not found, forbidden) mean the shard answered.
        let shard_ok = !matches!(result, Err(StoreError::Unavailable(_) | StoreError::Refused { .. }));
        self.note(call.record(shard_ok));
        result
    }

    fn note(&self, change: Option<BreakerState>) {
        if let Some(state) = change {
            let level = match state {
                BreakerState::Closed => 0.0,
                BreakerState::HalfOpen => 1.0,
                BreakerState::Open => 2.0,
            };
            metrics::gauge!("herald_store_shard_breaker", "shard" => self.name.to_string()).set(level);
            if state == BreakerState::Open {
                tracing::error!(shard = %self.name, "storage shard breaker opened: failing its requests fast");
            } else {
                tracing::info!(shard = %self.name, state = state.as_str(), "storage shard breaker changed");
            }
        }
    }
}

impl EventLog for Sharded {
    fn write(&self, write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
        let shard = self.shard(write.key());
        Box::pin(shard.guarded(shard.store.write(write)))
    }

    fn chat(&self, key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
        let shard = self.shard(key);
        let key = key.clone();
        Box::pin(async move { shard.guarded(shard.store.chat(&key)).await })
    }

    fn fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        let shard = self.shard(key);
        Box::pin(shard.guarded(shard.store.fetch(key, member, after, limit)))
    }

    /// Each shard answers for its own chats; a shard that fails leaves its
    /// chats `None` this time rather than failing the others'.
    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
        Box::pin(async move {
            let mut by_shard: Vec<Vec<usize>> = vec![Vec::new(); self.shards.len()];
            for (i, key) in keys.iter().enumerate() {
                by_shard[self.shard_index(key)].push(i);
            }
            let mut heads = vec![None; keys.len()];
            for (shard, idx) in self.shards.iter().zip(by_shard).filter(|(_, idx)| !idx.is_empty()) {
                let own: Vec<ChatKey> = idx.iter().map(|&i| keys[i].clone()).collect();
                if let Ok(found) = shard.guarded(shard.store.heads(&own)).await {
                    for (i, head) in idx.into_iter().zip(found) {
                        heads[i] = head;
                    }
                }
            }
            Ok(heads)
        })
    }

    /// Every shard's; `None` when any shard cannot say. A shard that fails
    /// keeps its place and is read from there next time (or cannot say then).
    fn changed_heads(&self) -> BoxFuture<'_, Result<Option<super::Moved>, StoreError>> {
        Box::pin(async move {
            let mut all = Some(Vec::new());
            for shard in self.shards.iter() {
                match shard.guarded(shard.store.changed_heads()).await {
                    Ok(Some(found)) => {
                        if let Some(all) = &mut all {
                            all.extend(found);
                        }
                    }
                    Ok(None) => all = None,
                    Err(_) => {}
                }
            }
            Ok(all)
        })
    }

    fn client_id_seq<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
        client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let shard = self.shard(key);
        Box::pin(shard.guarded(shard.store.client_id_seq(key, user, client_id)))
    }
}

impl Membership for Sharded {
    fn member<'a>(&'a self, key: &'a ChatKey, user: &'a str) -> BoxFuture<'a, Result<Option<Member>, StoreError>> {
        let shard = self.shard(key);
        Box::pin(shard.guarded(shard.store.member(key, user)))
    }

    /// Every shard's page of this user's chats, merged: each shard answers
    /// in the same order (latest activity, then name) from the same cursor,
    /// so the first `limit` of the merge are the page. Unlike `heads`, a
    /// shard that fails fails the inbox ([`Sharded::merged`]).
    fn inbox<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<&'a InboxCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<InboxEntry>, StoreError>> {
        Box::pin(self.merged(move |s| s.inbox(ws, user, after, limit), super::inbox_order, limit as usize + 1))
    }

    fn member_chats<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>, StoreError>> {
        Box::pin(self.merged(
            move |s| s.member_chats(ws, user, limit),
            |a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)),
            limit as usize,
        ))
    }

    fn inbox_entry<'a>(
        &'a self,
        key: &'a ChatKey,
        user: &'a str,
    ) -> BoxFuture<'a, Result<Option<InboxEntry>, StoreError>> {
        let shard = self.shard(key);
        Box::pin(shard.guarded(shard.store.inbox_entry(key, user)))
    }
}

/// v1.2 search: one chat's search goes to its shard; any other asks every shard (each indexes its
/// own chats) and merges newest first. The cursor is a position in that order, the same on every
/// shard, so it pages across shards.
impl super::Search for Sharded {
    fn search<'a>(&'a self, q: &'a super::SearchQuery) -> BoxFuture<'a, Result<Vec<super::Hit>, StoreError>> {
        if let Some(chat) = &q.chat {
            let shard = self.shard(&ChatKey::new(&q.ws, chat));
            return Box::pin(shard.guarded(shard.store.search(q)));
        }
        Box::pin(self.merged(move |s| s.search(q), super::search_order, q.limit as usize + 1))
    }
}

/// v1.2: a chat's reads go to its shard; the workspace's chat list, a user's threads and the
/// open streams to every shard, merged in their order ([`Sharded::merged`]).
impl Conversations for Sharded {
    fn chat_view<'a>(&'a self, key: &'a ChatKey) -> BoxFuture<'a, Result<Option<(ChatInfo, Profile)>, StoreError>> {
        let shard = self.shard(key);
        Box::pin(shard.guarded(shard.store.chat_view(key)))
    }

    fn chat_list<'a>(
        &'a self,
        ws: &'a str,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatView>, StoreError>> {
        Box::pin(self.merged(move |s| s.chat_list(ws, after, limit), |a, b| a.chat.cmp(&b.chat), limit as usize + 1))
    }

    fn member_list<'a>(
        &'a self,
        key: &'a ChatKey,
        after: Option<&'a str>,
        limit: u32,
    ) -> BoxFuture<'a, Result<(Vec<MemberEntry>, u64), StoreError>> {
        let shard = self.shard(key);
        Box::pin(shard.guarded(shard.store.member_list(key, after, limit)))
    }

    fn thread_fetch<'a>(
        &'a self,
        key: &'a ChatKey,
        member: Option<&'a str>,
        root: u64,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        let shard = self.shard(key);
        Box::pin(shard.guarded(shard.store.thread_fetch(key, member, root, after, limit)))
    }

    fn thread_list<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        chat: Option<&'a str>,
        after: Option<&'a ThreadCursor>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ThreadEntry>, StoreError>> {
        if let Some(chat) = chat {
            let shard = self.shard(&ChatKey::new(ws, chat));
            return Box::pin(shard.guarded(shard.store.thread_list(ws, user, Some(chat), after, limit)));
        }
        Box::pin(self.merged(
            move |s| s.thread_list(ws, user, None, after, limit),
            super::thread_order,
            limit as usize + 1,
        ))
    }

    fn pin_list<'a>(&'a self, key: &'a ChatKey) -> BoxFuture<'a, Result<Vec<PinEntry>, StoreError>> {
        let shard = self.shard(key);
        Box::pin(shard.guarded(shard.store.pin_list(key)))
    }

    fn reaction_users<'a>(
        &'a self,
        key: &'a ChatKey,
        target: u64,
        per_emoji: usize,
    ) -> BoxFuture<'a, Result<BTreeMap<String, Vec<String>>, StoreError>> {
        let shard = self.shard(key);
        Box::pin(shard.guarded(shard.store.reaction_users(key, target, per_emoji)))
    }

    /// Each shard's oldest, together: a shard that fails leaves its streams for the next sweep.
    fn idle_streams(&self, idle_before_ms: i64, limit: u32) -> BoxFuture<'_, Result<Vec<(ChatKey, u64)>, StoreError>> {
        Box::pin(async move {
            let parts = futures_util::future::join_all(
                self.shards.iter().map(|s| s.guarded(s.store.idle_streams(idle_before_ms, limit))),
            )
            .await;
            Ok(parts.into_iter().flat_map(|p| p.unwrap_or_default()).collect())
        })
    }
}

/// v1.2: a file lives in its chat's shard; the sweeper asks every shard (one that fails is asked
/// again at the next sweep).
impl Files for Sharded {
    fn files<'a>(&'a self, key: &'a ChatKey, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<StoredFile>, StoreError>> {
        let shard = self.shard(key);
        Box::pin(shard.guarded(shard.store.files(key, ids)))
    }

    fn file_chats<'a>(
        &'a self,
        ws: &'a str,
        ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>> {
        Box::pin(async move {
            let parts =
                futures_util::future::join_all(self.shards.iter().map(|s| s.guarded(s.store.file_chats(ws, ids))))
                    .await;
            let mut found = Vec::new();
            for part in parts {
                found.extend(part?);
            }
            Ok(found)
        })
    }

    fn sweepable<'a>(&'a self, orphan_before_ms: i64, limit: u32) -> BoxFuture<'a, Result<Vec<FileKey>, StoreError>> {
        Box::pin(async move {
            let parts = futures_util::future::join_all(
                self.shards.iter().map(|s| s.guarded(s.store.sweepable(orphan_before_ms, limit))),
            )
            .await;
            Ok(parts.into_iter().flat_map(|p| p.unwrap_or_default()).collect())
        })
    }
}

impl Moderation for Sharded {
    /// Every shard's page, merged in (chat, seq) order: each shard answers
    /// in that order from the same cursor, so the first `limit` of the merge
    /// are the page. A shard that fails fails the page (its messages would
    /// be skipped otherwise).
    fn user_messages<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<(&'a str, u64)>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>> {
        Box::pin(self.merged(move |s| s.user_messages(ws, user, after, limit), Ord::cmp, limit as usize))
    }
}
