//! `--preload`: the plan's memberships written into the shards through
//! herald's own store API (the shards as a node opens them) before any node
//! starts, so that a large cell's users only connect and open their chat.
//! Joins through the protocol run at about a thousand a second on this
//! machine; half a million users hold three million memberships.
//!
//! Each membership is a client's `join`, stored as a node would store it (its
//! `join` event, the chat's count): the cell cannot tell a preloaded member
//! from one who joined. The writes go out a chunk at a time, several chunks in
//! flight, so each shard's one writer commits full batches.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use futures_util::StreamExt;
use herald::model::ChatKey;
use herald::store::postgres::PgShard;
use herald::store::shard_identity::Claims;
use herald::store::sharded::Sharded;
use herald::store::{Actor, EventLog, Lifecycle, ShardSpec, Store, Write};

use super::workload::Plan;

/// Joins handed to the store together: one writer batch's worth (512 writes).
const CHUNK: usize = 512;
/// Chunks in flight at once, over every shard: 2,048 writes, within one shard's bulkhead (1,024
/// running and 4,096 waiting), so that nothing is refused as `busy`.
const CHUNKS_IN_FLIGHT: usize = 4;

/// Writes every membership of `plan` into the shards of `stores` (`--store` entries), chat by
/// chat; the memberships written and the seconds it took.
pub async fn preload(stores: &[String], ws: &str, plan: &Plan) -> anyhow::Result<(usize, f64)> {
    let t = Instant::now();
    let specs = ShardSpec::parse_all(stores)?;
    let claims = Claims::default();
    let mut shards: Vec<(herald::store::ShardName, Box<dyn Store>)> = Vec::new();
    for spec in &specs {
        let shard = PgShard::open(spec, &claims)?;
        shard.check().await.map_err(|e| anyhow::anyhow!("shard {}: {e:?}", shard.name()))?;
        shards.push((shard.name().clone(), Box::new(shard)));
    }
    let store = Sharded::new(shards);
    let writes: Vec<(u32, u32)> =
        plan.chats.iter().enumerate().flat_map(|(c, chat)| chat.members.iter().map(move |&u| (c as u32, u))).collect();
    let total = writes.len();
    let chunks: Vec<&[(u32, u32)]> = writes.chunks(CHUNK).collect();
    let store = &store;
    let mut written = futures_util::stream::iter(chunks)
        .map(|chunk| async move {
            let joins = chunk.iter().map(|&(c, u)| {
                store.write(Write::Join {
                    key: ChatKey::new(ws, &plan.chat_name(c)),
                    user: Arc::from(format!("u{u}").as_str()),
                    actor: Actor::Client,
                })
            });
            for (r, (c, u)) in futures_util::future::join_all(joins).await.into_iter().zip(chunk) {
                r.with_context(|| format!("u{u}'s join of {}", plan.chat_name(*c)))?;
            }
            anyhow::Ok(chunk.len())
        })
        .buffer_unordered(CHUNKS_IN_FLIGHT);
    let (mut done, mut told) = (0usize, Instant::now());
    while let Some(n) = written.next().await {
        done += n?;
        if told.elapsed().as_secs() >= 10 {
            eprintln!("cell: preloaded {done} of {total} memberships in {:.0} s", t.elapsed().as_secs_f64());
            told = Instant::now();
        }
    }
    drop(written);
    // Every write is durable once answered; closing stops the writers.
    store.close().await;
    Ok((total, t.elapsed().as_secs_f64()))
}
