//! The property tests' model log: one chat's events and members, read as the real stores read
//! them, with the hub's reads delayed in (paused) time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald_protocol::{Event, EventType};
use serde_json::value::RawValue;

use super::USERS;
use crate::model::{ChatInfo, ChatKey};
use crate::store::{BoxFuture, EventLog, Fetched, StoreError, Write, Written};

// ---- the model log -------------------------------------------------------------------------

/// One chat's log: events 1..=N, and who is a member now. Reads by the chat
/// layer (with a member) check membership as the real stores do; reads by
/// the hub (no member) take `delay` of (paused) time, so that the program
/// goes on while a repair's read is in flight.
pub(super) struct ModelLog {
    pub(super) state: Mutex<LogState>,
    pub(super) delay: Duration,
}

pub(super) struct LogState {
    pub(super) events: Vec<Event>,
    pub(super) members: HashSet<String>,
}

impl ModelLog {
    pub(super) fn new(delay: Duration) -> Arc<ModelLog> {
        let members = (0..USERS).map(|u| format!("u{u}")).collect();
        Arc::new(ModelLog { state: Mutex::new(LogState { events: Vec::new(), members }), delay })
    }

    pub(super) fn latest(&self) -> u64 {
        self.state.lock().unwrap().events.len() as u64
    }

    pub(super) fn event(&self, seq: u64) -> Event {
        self.state.lock().unwrap().events[seq as usize - 1].clone()
    }

    pub(super) fn is_member(&self, user: &str) -> bool {
        self.state.lock().unwrap().members.contains(user)
    }

    /// Commits an event of `kind` by `user`; returns its seq.
    pub(super) fn commit(&self, kind: EventType, user: &str) -> u64 {
        let mut s = self.state.lock().unwrap();
        match kind {
            EventType::Join => {
                s.members.insert(user.to_string());
            }
            EventType::Leave => {
                s.members.remove(user);
            }
            _ => {}
        }
        let seq = s.events.len() as u64 + 1;
        let body = RawValue::from_string(format!("{{\"n\":{seq}}}")).unwrap();
        s.events.push(Event::new(seq, kind, Some(user.to_string()), 0, body));
        seq
    }

    /// Seqs of the leaves of `user`.
    pub(super) fn leaves_of(&self, user: &str) -> Vec<u64> {
        let s = self.state.lock().unwrap();
        s.events
            .iter()
            .filter(|e| e.kind == EventType::Leave && e.user.as_deref() == Some(user))
            .map(|e| e.seq)
            .collect()
    }

    pub(super) fn info(s: &LogState) -> ChatInfo {
        ChatInfo { seq: s.events.len() as u64, members: s.members.len() as u64, open: true, profiled: false }
    }
}

impl EventLog for ModelLog {
    fn write(&self, _write: Write) -> BoxFuture<'_, Result<Written, StoreError>> {
        Box::pin(std::future::ready(Err(StoreError::Unavailable("the test commits itself".into()))))
    }

    fn chat(&self, _key: &ChatKey) -> BoxFuture<'_, Result<Option<ChatInfo>, StoreError>> {
        let info = ModelLog::info(&self.state.lock().unwrap());
        Box::pin(std::future::ready(Ok(Some(info))))
    }

    fn fetch<'a>(
        &'a self,
        _key: &'a ChatKey,
        member: Option<&'a str>,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Fetched, StoreError>> {
        Box::pin(async move {
            if member.is_none() && !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            let s = self.state.lock().unwrap();
            if let Some(user) = member
                && !s.members.contains(user)
            {
                return Err(StoreError::Forbidden(format!("{user} is not a member")));
            }
            let info = ModelLog::info(&s);
            let last = info.seq.min(after.saturating_add(u64::from(limit)));
            let events = if after >= last { Vec::new() } else { s.events[after as usize..last as usize].to_vec() };
            Ok(Fetched { events, info, more: last < info.seq })
        })
    }

    fn heads<'a>(&'a self, keys: &'a [ChatKey]) -> BoxFuture<'a, Result<Vec<Option<u64>>, StoreError>> {
        Box::pin(async move {
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            let latest = self.latest();
            Ok(keys.iter().map(|_| Some(latest)).collect())
        })
    }

    /// The fake stores no `client_id`s.
    fn client_id_seq<'a>(
        &'a self,
        _key: &'a ChatKey,
        _user: &'a str,
        _client_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

crate::store::not_kept!(ModelLog: Lifecycle, Membership, Moderation, RevocationList, WebhookPositions, Conversations, Files, Export, Search);
