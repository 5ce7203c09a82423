//! Builds the `inbox` scenario's store through herald's own store API: each
//! chat's planned log goes in as the [`Write`]s a client's requests would
//! make (join, send, react, delete, read), so herald decides what a row
//! holds (its seqs, counts, read positions, deletions) and the bench knows
//! nothing of its tables. Not through the protocol: ten million durable sends
//! one connection at a time would take hours, while the store's batching
//! writer takes a thousand writes per commit when enough chats load at once.
//!
//! A chat's log goes in a chunk at a time: a chunk's writes are handed over
//! together, in order, and the next chunk waits for the last one's answers.
//! So a batch of the store's writer holds a few chats' runs of writes (their
//! rows read and saved once per batch, not once per write), and enough chats
//! load at once that every commit is a full batch. The order within a chunk
//! is the order of submission, which the store does not promise: each stored
//! event's seq is checked against the plan's, so a write that landed
//! elsewhere (or a plan that drifts from herald's rules) fails the build
//! instead of skewing the check. Not here: which backend (the scenario opens
//! it) and what is measured.

use std::collections::HashMap;
use std::sync::Arc;

use anyhow::{Context, ensure};
use futures_util::StreamExt;
use herald::model::ChatKey;
use herald::store::{Actor, Conversation, Store, Write};
use serde_json::value::RawValue;

use super::plan::{Expected, ME, Plan, Step};

/// Writes handed to the store and not yet answered, at most: eight of the
/// SQLite writer's largest batches (1,024 writes), so that batches fill while
/// one commits; half of either backend's write queue (16,384), which refuses
/// writes beyond it.
const WRITES_IN_FLIGHT: usize = 8192;
/// Most writes of one chat handed over together.
const CHUNK: usize = 128;
/// A progress line every this many chats.
const PROGRESS_EVERY: u64 = 10_000;

/// Loads every chat of `plan` into `store` (workspace `ws`); answers what
/// `me`'s inbox must say of each of its chats. `label` names the backend in progress lines.
pub async fn load(store: &dyn Store, plan: &Plan, ws: &str, label: &str) -> anyhow::Result<HashMap<String, Expected>> {
    let chunk = CHUNK.min(plan.per_chat as usize).max(1);
    let mut chats = futures_util::stream::iter(plan.load_order())
        .map(|i| load_chat(store, plan, ws, i, chunk))
        .buffer_unordered(WRITES_IN_FLIGHT / chunk);
    let mut loaded = 0u64;
    while let Some(done) = chats.next().await {
        done?;
        loaded += 1;
        if loaded.is_multiple_of(PROGRESS_EVERY) {
            eprintln!("{label}: {loaded} chats loaded");
        }
    }
    Ok((0..plan.chats).filter(|&i| plan.mine(i)).map(|i| (Plan::name(i), plan.expected(i))).collect())
}

/// Writes chat `i`'s log, `chunk` writes at a time, checking that each
/// event lands at the plan's seq.
async fn load_chat(store: &dyn Store, plan: &Plan, ws: &str, i: u64, chunk: usize) -> anyhow::Result<()> {
    let key = ChatKey::new(ws, &Plan::name(i));
    let members: Vec<Arc<str>> = plan.members(i).iter().map(|m| Arc::from(m.as_str())).collect();
    let steps: Vec<Step> = plan.log(i).collect();
    for (c, part) in steps.chunks(chunk).enumerate() {
        let first = (c * chunk) as u64 + 1;
        // join_all polls its futures in order the first time: the writes reach the store in the log's order.
        let written = futures_util::future::join_all(
            (first..).zip(part).map(|(seq, step)| store.write(to_write(&key, &members, seq, step))),
        )
        .await;
        for ((seq, step), written) in (first..).zip(part).zip(written) {
            let written = written.with_context(|| format!("{key}: {step:?} (seq {seq})"))?;
            let stored = written.event.map(|e| e.seq);
            ensure!(stored == Some(seq), "{key}: {step:?} stored {stored:?} where the plan has seq {seq}");
        }
    }
    Ok(())
}

/// The store write of one planned step: what the client's request would ask.
fn to_write(key: &ChatKey, members: &[Arc<str>], seq: u64, step: &Step) -> Write {
    let key = key.clone();
    match *step {
        Step::Join { user } => Write::Join { key, user: members[user].clone(), actor: Actor::Client },
        Step::Message { user, thread, mention } => Write::Append {
            key,
            user: Some(members[user].clone()),
            system: false,
            body: RawValue::from_string(format!(r#"{{"n":{seq}}}"#)).expect("a number is JSON"),
            client_id: None,
            member_only: true,
            conv: Conversation { thread, mentions: mention.then(|| vec![ME.to_string()]), ..Conversation::default() },
        },
        Step::React { user, target } => {
            Write::React { key, user: members[user].clone(), target, emoji: "+1".into(), on: true }
        }
        Step::Delete { user, target } => {
            Write::Delete { key, user: Some(members[user].clone()), actor: Actor::Client, target }
        }
        Step::Read { seq } => Write::Read { key, user: members[0].clone(), seq, thread: None },
    }
}
