//! `search` (protocol v1.2): a store of N message events spread over M chats (goal 10,000,000 in
//! 100,000), a user (`me`) in `--member-chats` of them (1,000), and `search` queries from that
//! user, `--reads` of each kind per run: one Latin word, two Latin words of one message, one Korean
//! word, a two-character Korean term, two Korean words of one message. Reported: p50 and p99 of
//! each kind, the results' count, how long the server's indexer took to catch up with the store
//! after it started, and the index's size per event (SQLite: `search.db`; PostgreSQL: the index
//! tables of every shard).
//!
//! Each message's text is eight words drawn from a generated vocabulary, four Latin and four
//! Korean, a pure function of its (chat, n), so the queries of a run are drawn from messages of
//! `me`'s chats without keeping the corpus. The store is built through herald's store API before
//! any server starts on it (as `members` and `inbox` build theirs); the store's own indexer runs
//! in the bench process meanwhile, and the server's catches up with what it left.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use clap::Args;
use futures_util::StreamExt;
use herald::model::ChatKey;
use herald::store::sharded::Sharded;
use herald::store::{Actor, ShardSpec, Store, Write};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::client::Client;
use crate::latency::Latencies;
use crate::preload::{self, Preloaded, StoreKind};
use crate::report::{self, Column, RunArgs, col};
use crate::server::{self, Server, TargetArgs};
use crate::token::Signer;

/// The user who searches.
const ME: &str = "me";
/// The user who sends every message.
const AUTHOR: &str = "author";
/// Words of each script in the vocabulary.
const VOCABULARY: u64 = 2_000;
/// Writes in flight while building: half of either backend's write queue.
const WRITES_IN_FLIGHT: usize = 8_192;
/// Through shards: within each shard's bulkhead, which refuses (times out) a deeper queue.
const SHARDED_IN_FLIGHT: usize = 256;
/// A query page's `limit`.
const LIMIT: u32 = 20;
/// The server's indexer must catch up with the built store within this.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(3_600);

/// `herald-bench search`.
#[derive(Debug, Args, Serialize)]
pub struct SearchArgs {
    /// Chats in the store.
    #[arg(long, default_value_t = 100_000)]
    pub chats: u64,
    /// Message events in the store, spread evenly over the chats.
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// Chats `me` is a member of.
    #[arg(long, default_value_t = 1_000)]
    pub member_chats: u64,
    /// Queries of each kind per run.
    #[arg(long, default_value_t = 100)]
    pub reads: u32,
    #[arg(long, value_enum, default_value_t = StoreKind::Sqlite)]
    pub store: StoreKind,
    /// With `--store postgres`: shards (a database each).
    #[arg(long, default_value_t = 2)]
    pub shards: u32,
    /// With `--store postgres`: a URL of the cluster on which the bench may create (and drop) databases.
    #[arg(long, required_if_eq("store", "postgres"))]
    #[serde(skip)]
    pub pg_admin: Option<String>,
    #[command(flatten)]
    pub run: RunArgs,
    #[command(flatten)]
    pub target: TargetArgs,
}

const COLUMNS: &[Column] = &[
    col("events", "events"),
    col("catch_up_s", "index catch-up s"),
    col("index_bytes_per_event", "index B/event"),
    col("latin1_p50_ms", "latin1 p50"),
    col("latin1_p99_ms", "latin1 p99"),
    col("latin2_p50_ms", "latin2 p50"),
    col("latin2_p99_ms", "latin2 p99"),
    col("korean1_p50_ms", "korean1 p50"),
    col("korean1_p99_ms", "korean1 p99"),
    col("korean_2char_p50_ms", "ko 2-char p50"),
    col("korean_2char_p99_ms", "ko 2-char p99"),
    col("korean2_p50_ms", "korean2 p50"),
    col("korean2_p99_ms", "korean2 p99"),
    col("found", "found"),
];

/// Builds the store, then measures `args.run.runs` times (each on a fresh server) and reports.
pub async fn run(args: SearchArgs) -> anyhow::Result<Vec<Value>> {
    ensure!(args.target.starts_server(), "search builds its own store: it starts its own server");
    ensure!(args.chats >= 1 && args.member_chats <= args.chats, "--member-chats at most --chats");
    ensure!(args.events >= args.chats && args.reads > 0, "--events at least --chats, --reads at least 1");
    let data = tempfile::TempDir::with_prefix("herald-bench-search-")?;
    let shards = if args.store == StoreKind::Postgres { args.shards.max(1) } else { 1 };
    let mut stores = Vec::new();
    for i in 0..shards {
        stores.push(Preloaded::create(args.store, args.pg_admin.as_deref(), &format!("search{i}")).await?);
    }
    let flags: Vec<String> = stores.iter().flat_map(|s| s.flags.clone()).collect();
    let built = Instant::now();
    let result = match build(&stores, data.path(), &args).await {
        Ok(()) => {
            let build_s = built.elapsed().as_secs_f64();
            eprintln!("store built in {build_s:.0} s: {} events in {} chats", args.events, args.chats);
            report::repeat(&args.run, |run| measure(&args, &flags, data.path(), build_s, run)).await
        }
        Err(e) => Err(e),
    };
    for s in stores {
        s.remove().await;
    }
    let runs = result?;
    report::emit("search", &args, &runs, COLUMNS, args.run.json);
    Ok(runs)
}

fn chat(i: u64) -> String {
    format!("c{i:06}")
}

/// A small deterministic mixer: the same (chat, n) always gives the same words.
fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

const LATIN: [&str; 20] = [
    "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "de", "fo", "gu", "ha", "ji", "pe", "qu", "ri", "su", "te", "wa",
    "zo",
];
const HANGUL: [&str; 40] = [
    "서", "버", "회", "의", "록", "정", "리", "보", "고", "장", "애", "배", "포", "검", "색", "결", "과", "사", "용",
    "자", "데", "이", "터", "연", "결", "상", "태", "확", "인", "요", "청", "처", "분", "석", "운", "영", "개", "발",
    "팀", "원",
];

/// Latin word `w` of the vocabulary: three syllables.
fn latin(w: u64) -> String {
    (0..3).map(|i| LATIN[(mix(w * 7 + i) % LATIN.len() as u64) as usize]).collect()
}

/// Korean word `w`: two or three syllables.
fn korean(w: u64) -> String {
    let n = 2 + mix(w * 13 + 99) % 2;
    (0..n).map(|i| HANGUL[(mix(w * 11 + i + 1_000) % HANGUL.len() as u64) as usize]).collect()
}

/// The words of message `n` of chat `c`: four Latin, four Korean.
fn words(c: u64, n: u64) -> (Vec<String>, Vec<String>) {
    let seed = mix(c.wrapping_mul(1_000_003).wrapping_add(n));
    let pick = |i: u64| mix(seed.wrapping_add(i)) % VOCABULARY;
    ((0..4).map(|i| latin(pick(i))).collect(), (4..8).map(|i| korean(pick(i))).collect())
}

fn body(c: u64, n: u64) -> Box<RawValue> {
    let (l, k) = words(c, n);
    let text = format!("{} {} {} {} {} {} {} {}", l[0], k[0], l[1], k[1], l[2], k[2], l[3], k[3]);
    RawValue::from_string(json!({ "text": text }).to_string()).expect("valid JSON")
}

/// Builds the store through herald's store API: each chat created by its author's join (and
/// `me`'s in `me`'s chats), then every message, many at once.
async fn build(stores: &[Preloaded], dir: &Path, args: &SearchArgs) -> anyhow::Result<()> {
    let store: Box<dyn Store> = if stores.len() == 1 {
        stores[0].open(dir)?.0
    } else {
        let mut shards = Vec::new();
        for s in stores {
            let url = s.flags.get(1).context("a PostgreSQL store's URL")?;
            shards.push((ShardSpec::parse(url)?.name, s.open(dir)?.0));
        }
        Box::new(Sharded::new(shards))
    };
    let in_flight = if stores.len() == 1 { WRITES_IN_FLIGHT } else { SHARDED_IN_FLIGHT };
    let loaded = load(store.as_ref(), args, in_flight).await;
    store.close().await;
    loaded
}

async fn load(store: &dyn Store, args: &SearchArgs, in_flight: usize) -> anyhow::Result<()> {
    let ws = args.target.workspace.as_str();
    let joins = (0..args.chats).flat_map(|c| {
        let mut w = vec![(c, AUTHOR)];
        if c < args.member_chats {
            w.push((c, ME));
        }
        w
    });
    let mut joined = futures_util::stream::iter(joins)
        .map(|(c, user)| {
            store.write(Write::Join { key: ChatKey::new(ws, &chat(c)), user: Arc::from(user), actor: Actor::Client })
        })
        .buffer_unordered(in_flight);
    while let Some(w) = joined.next().await {
        w.context("a join")?;
    }
    let per_chat = args.events / args.chats;
    let messages = (0..per_chat).flat_map(|n| (0..args.chats).map(move |c| (c, n)));
    let mut sent = futures_util::stream::iter(messages)
        .map(|(c, n)| {
            store.write(Write::Append {
                key: ChatKey::new(ws, &chat(c)),
                user: Some(Arc::from(AUTHOR)),
                system: false,
                body: body(c, n),
                client_id: None,
                member_only: true,
                conv: Default::default(),
            })
        })
        .buffer_unordered(in_flight);
    let (mut done, started) = (0u64, Instant::now());
    while let Some(w) = sent.next().await {
        w.context("a message")?;
        done += 1;
        if done.is_multiple_of(500_000) {
            eprintln!("{done} messages stored ({:.0}/s)", done as f64 / started.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

/// One run: a server on the built store, its indexer caught up, then the queries.
async fn measure(args: &SearchArgs, flags: &[String], data: &Path, build_s: f64, run: u32) -> anyhow::Result<Value> {
    let flags = [flags, &server::raised_limits()].concat();
    let server = Server::start_in(&args.target, &flags, data).await?;
    let outcome = async {
        preload::wait_ready(&server).await?;
        let catch_up_s =
            caught_up(&server, if args.store == StoreKind::Postgres { args.shards.max(1) } else { 1 }).await?;
        let mut out = query(args, &server, run).await?;
        out["catch_up_s"] = json!(catch_up_s);
        out["index_bytes"] = json!(index_bytes(args, data, &flags).await?);
        out["index_bytes_per_event"] = json!(out["index_bytes"].as_f64().unwrap_or(0.0) / args.events as f64);
        anyhow::Ok(out)
    }
    .await;
    let log = server.stop().await?;
    let mut out = outcome?;
    out["events"] = json!(args.events);
    out["build_s"] = json!(build_s);
    out["server_log"] = serde_json::to_value(log)?;
    Ok(out)
}

/// Waits until each shard's indexer has finished its first pass over every chat (what the store
/// held when the server started); answers how long that took.
async fn caught_up(server: &Server, shards: u32) -> anyhow::Result<f64> {
    let started = Instant::now();
    loop {
        let metrics = crate::http::get(server.addr, "/metrics", None).await?.body;
        let passes: f64 = metrics
            .lines()
            .filter_map(|l| l.strip_prefix("herald_search_index_passes_total{kind=\"all\"} "))
            .filter_map(|v| v.trim().parse::<f64>().ok())
            .sum();
        if passes >= f64::from(shards) {
            return Ok(started.elapsed().as_secs_f64());
        }
        ensure!(started.elapsed() < CATCH_UP_TIMEOUT, "the index did not catch up in {CATCH_UP_TIMEOUT:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The queries of one run, `reads` of each kind, each from a message of one of `me`'s chats.
async fn query(args: &SearchArgs, server: &Server, run: u32) -> anyhow::Result<Value> {
    let signer = Signer::new(&server.jwt_secret, &args.target.workspace);
    let path = Server::ws_path(&args.target.workspace);
    let mut me = Client::connect(server.addr, &path, std::net::Ipv4Addr::LOCALHOST).await?;
    me.hello(&signer.token(ME)?).await?;
    let per_chat = args.events / args.chats;
    let kinds = ["latin1", "latin2", "korean1", "korean_2char", "korean2"];
    let mut out = json!({});
    let (mut found, mut empty, mut outside) = (0u64, 0u64, 0u64);
    for (k, kind) in kinds.iter().enumerate() {
        let mut times = Latencies::default();
        for i in 0..args.reads {
            let r = mix(u64::from(run) << 40 | (k as u64) << 32 | u64::from(i));
            let (l, ko) = words(r % args.member_chats.max(1), (r >> 20) % per_chat);
            let q = match *kind {
                "latin1" => l[0].clone(),
                "latin2" => format!("{} {}", l[0], l[1]),
                "korean1" => ko[0].clone(),
                "korean_2char" => ko[1].chars().take(2).collect(),
                _ => format!("{} {}", ko[0], ko[1]),
            };
            let t = Instant::now();
            let page = me.search(&q, LIMIT).await.map_err(|e| anyhow::anyhow!("search {q:?}: {e:?}"))?;
            times.record(t.elapsed());
            found += page.results.len() as u64;
            empty += u64::from(page.results.is_empty());
            let mine = |c: &str| {
                c.strip_prefix('c').and_then(|n| n.parse::<u64>().ok()).is_some_and(|n| n < args.member_chats)
            };
            outside += page.results.iter().filter(|r| !mine(&r.chat)).count() as u64;
        }
        let p = times.summary();
        out[format!("{kind}_p50_ms")] = json!(p.p50_ms);
        out[format!("{kind}_p99_ms")] = json!(p.p99_ms);
    }
    me.close().await;
    out["found"] = json!(found);
    // Every query is drawn from a message of `me`'s chats: none may come back empty, and no
    // result may come from a chat `me` is not in.
    out["empty"] = json!(empty);
    out["outside"] = json!(outside);
    out["failed"] = json!(empty + outside);
    Ok(out)
}

/// The index's size: `search.db` and its WAL (SQLite), or the index tables with their indexes.
async fn index_bytes(args: &SearchArgs, data: &Path, flags: &[String]) -> anyhow::Result<u64> {
    if args.store == StoreKind::Sqlite {
        let mut total = 0;
        for f in ["search.db", "search.db-wal"] {
            total += std::fs::metadata(data.join(f)).map(|m| m.len()).unwrap_or(0);
        }
        return Ok(total);
    }
    let mut total = 0u64;
    for url in flags.windows(2).filter(|w| w[0] == "--store").map(|w| &w[1]) {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(conn);
        let row = client
            .query_one(
                "SELECT (pg_total_relation_size('search_docs') + pg_total_relation_size('search_grams')
                         + pg_total_relation_size('search_positions'))::bigint",
                &[],
            )
            .await?;
        total += row.get::<_, i64>(0) as u64;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_is_a_pure_function_of_chat_and_n() {
        assert_eq!(words(3, 7), words(3, 7));
        assert_ne!(words(3, 7), words(3, 8));
        let (l, k) = words(1, 1);
        assert!(l.iter().all(|w| w.len() == 6) && k.iter().all(|w| (2..=3).contains(&w.chars().count())));
    }
}
