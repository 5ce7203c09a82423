//! Builds the `inbox` scenario's store through herald's own store API: each
//! chat's planned log goes in as the [`Write`]s a client's requests would
//! make (join, send, react, delete, read), so herald decides what a row
//! holds (its seqs, counts, read positions, deletions) and the bench knows
//! nothing of its tables. Not through the protocol: ten million durable sends
//! one connection at a time would take hours, while the store's batching
//! writer takes a thousand writes per commit when enough chats load at once.
//!
//! Each chat's writes go one after another (a chat's log is in order); many
//! chats load at once, so every commit is a full batch. Each stored event's
//! seq is checked against the plan's, so a plan that drifts from herald's
//! rules fails the build instead of skewing the check. Not here: which
//! backend (the scenario opens it) and what is measured.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, ensure};
use futures_util::StreamExt;
use herald::model::ChatKey;
use herald::store::{Actor, Store, Write};
use serde_json::value::RawValue;

use super::plan::{Plan, Step};

/// Chats loading at once, each one write at a time: twice the SQLite
/// writer's largest batch (1,024 writes), so that a batch fills while the
/// one before it commits; under the write queue's 16,384.
const CHATS_IN_FLIGHT: usize = 2048;
/// A progress line every this many chats.
const PROGRESS_EVERY: u64 = 10_000;

/// Loads every chat of `plan` into `store` (workspace `ws`); answers `me`'s
/// expected unread count per chat. `label` names the backend in progress lines.
pub async fn load(store: &dyn Store, plan: &Plan, ws: &str, label: &str) -> anyhow::Result<HashMap<String, u64>> {
    let mut chats = futures_util::stream::iter(plan.load_order())
        .map(|i| load_chat(store, plan, ws, i))
        .buffer_unordered(CHATS_IN_FLIGHT);
    let mut loaded = 0u64;
    while let Some(done) = chats.next().await {
        done?;
        loaded += 1;
        if loaded.is_multiple_of(PROGRESS_EVERY) {
            eprintln!("{label}: {loaded} chats loaded");
        }
    }
    Ok((0..plan.chats).filter(|&i| plan.mine(i)).map(|i| (Plan::name(i), plan.unread(i))).collect())
}

/// Writes chat `i`'s log, checking that each event lands at the plan's seq.
async fn load_chat(store: &dyn Store, plan: &Plan, ws: &str, i: u64) -> anyhow::Result<()> {
    let key = ChatKey::new(ws, &Plan::name(i));
    let members: Vec<Arc<str>> = plan.members(i).iter().map(|m| Arc::from(m.as_str())).collect();
    for (seq, step) in (1u64..).zip(plan.log(i)) {
        let write = to_write(&key, &members, seq, &step);
        let written = store.write(write).await.with_context(|| format!("{key}: {step:?} (seq {seq})"))?;
        let stored = written.event.map(|e| e.seq);
        ensure!(stored == Some(seq), "{key}: {step:?} stored {stored:?} where the plan has seq {seq}");
    }
    Ok(())
}

/// The store write of one planned step: what the client's request would ask.
fn to_write(key: &ChatKey, members: &[Arc<str>], seq: u64, step: &Step) -> Write {
    let key = key.clone();
    match *step {
        Step::Join { user } => Write::Join { key, user: members[user].clone(), actor: Actor::Client },
        Step::Message { user } => Write::Append {
            key,
            user: Some(members[user].clone()),
            system: false,
            body: RawValue::from_string(format!(r#"{{"n":{seq}}}"#)).expect("a number is JSON"),
            client_id: None,
            member_only: true,
        },
        Step::React { user, target } => {
            Write::React { key, user: members[user].clone(), target, emoji: "+1".into(), on: true }
        }
        Step::Delete { user, target } => {
            Write::Delete { key, user: Some(members[user].clone()), actor: Actor::Client, target }
        }
        Step::Read { seq } => Write::Read { key, user: members[0].clone(), seq },
    }
}
