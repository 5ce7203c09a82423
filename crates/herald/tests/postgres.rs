//! PostgreSQL shards under failure: two real clusters, one stopped mid-load.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::pg::{PgCluster, create_database};
use common::*;
use serde_json::json;

/// A chat name that lands on shard `want` of `shards` (names as herald computes them).
fn chat_on(shards: &[String], want: usize, tag: &str) -> String {
    (0..)
        .map(|i| format!("{tag}{i}"))
        .find(|c| herald::hashing::rendezvous(&[b"w", c.as_bytes()], shards.iter().map(String::as_str)) == Some(want))
        .unwrap()
}

fn shard_name(url: &str) -> String {
    url.trim_start_matches("postgres://herald@").to_string()
}

fn p99(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[(v.len() * 99 / 100).min(v.len() - 1)]
}

// Two workers: stopping and restarting shard a (`pg_ctl`, blocking) must not
// freeze the server and the senders, or the pause is measured as latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn a_dead_shard_fails_fast_and_the_other_keeps_its_latency() {
    let (a, b) = (PgCluster::start(), PgCluster::start());
    let stores = vec![create_database(&a.admin_url).await, create_database(&b.admin_url).await];
    let names: Vec<String> = stores.iter().map(|u| shard_name(u)).collect();
    let s = TestServer::start_with(|c| {
        c.store.stores = stores.clone();
        c.gateway.rate = 100_000;
        c.gateway.burst = 100_000;
    })
    .await;
    let (chat_a, chat_b) = (chat_on(&names, 0, "a"), chat_on(&names, 1, "b"));

    // Senders on each shard's chat, recording latency, outcome and every acknowledged seq.
    let stop = Arc::new(AtomicBool::new(false));
    type Log = Arc<std::sync::Mutex<Vec<(Instant, Duration, Result<u64, String>)>>>;
    let mut logs: HashMap<String, Log> = HashMap::new();
    let mut tasks = Vec::new();
    for chat in [&chat_a, &chat_b] {
        let log: Log = Default::default();
        logs.insert(chat.clone(), log.clone());
        for u in 0..4 {
            let mut c = s.client("w", &format!("{chat}-u{u}")).await;
            c.ok(json!({"op": "join", "chat": chat})).await;
            let (chat, log, stop) = (chat.clone(), log.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let r = c
                        .request(json!({"op": "send", "chat": chat, "body": i, "client_id": format!("u{u}-{i}")}))
                        .await;
                    let outcome = match r.get("ok") {
                        Some(ok) => Ok(ok["seq"].as_u64().unwrap()),
                        None => Err(r["err"]["code"].as_str().unwrap_or("?").to_string()),
                    };
                    if outcome.is_err() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    log.lock().unwrap().push((t, t.elapsed(), outcome));
                    i += 1;
                }
            }));
        }
    }
    // Equal windows before and during the outage: p99 over a few hundred sends each.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let killed_at = Instant::now();
    tokio::task::block_in_place(|| a.stop());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let restarted_at = Instant::now();
    tokio::task::block_in_place(|| a.restart());
    // The breaker closes by itself once shard a answers again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = http(s.addr, "GET", "/readyz", None, None).await;
        if v["shards"].as_array().unwrap().iter().all(|s| s["breaker"] == "closed") {
            break;
        }
        assert!(Instant::now() < deadline, "breaker did not close: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }

    let log_a = logs[&chat_a].lock().unwrap().clone();
    let log_b = logs[&chat_b].lock().unwrap().clone();
    // Shard a's requests fail with unavailable, and fast, once it is down.
    let failed_a: Vec<_> = log_a.iter().filter(|(t, _, r)| *t > killed_at && *t < restarted_at && r.is_err()).collect();
    assert!(!failed_a.is_empty(), "requests to the dead shard failed");
    assert!(failed_a.iter().all(|(_, _, r)| r.as_ref().unwrap_err() == "unavailable"));
    let slowest_fail = failed_a.iter().map(|(_, d, _)| *d).max().unwrap();
    assert!(slowest_fail < Duration::from_secs(1), "failed fast: slowest failure took {slowest_fail:?}");
    // Shard b kept its latency.
    let before: Vec<Duration> = log_b.iter().filter(|(t, _, _)| *t < killed_at).map(|(_, d, _)| *d).collect();
    let during: Vec<Duration> =
        log_b.iter().filter(|(t, _, _)| *t > killed_at && *t < restarted_at).map(|(_, d, _)| *d).collect();
    assert!(log_b.iter().all(|(_, _, r)| r.is_ok()), "shard b never failed");
    let (p_before, p_during) = (p99(before), p99(during));
    eprintln!("shard b p99 before {p_before:?}, during {p_during:?}; slowest failure on a {slowest_fail:?}");
    assert!(
        p_during <= p_before.mul_f64(1.5).max(Duration::from_millis(5)),
        "shard b's p99 stayed within 1.5x: before {p_before:?}, during {p_during:?}"
    );
    // No acknowledged event is missing from either shard.
    for (chat, log) in [(&chat_a, &log_a), (&chat_b, &log_b)] {
        let acked: Vec<u64> = log.iter().filter_map(|(_, _, r)| r.as_ref().ok().copied()).collect();
        let (_, page) = s.http("GET", &format!("/v1/workspaces/w/chats/{chat}/events?after=0&limit=500"), None).await;
        let mut stored = std::collections::HashSet::new();
        let mut after = 0;
        let mut page = page;
        loop {
            for e in page["events"].as_array().unwrap() {
                after = e["seq"].as_u64().unwrap();
                stored.insert(after);
            }
            if page["more"] == false {
                break;
            }
            page =
                s.http("GET", &format!("/v1/workspaces/w/chats/{chat}/events?after={after}&limit=500"), None).await.1;
        }
        for seq in acked {
            assert!(stored.contains(&seq), "acknowledged {chat}#{seq} is stored");
        }
    }
}

/// A client that sends to `chat` until told to stop, patient as the protocol
/// asks (waiting `retry_after_ms` on `unavailable`), logging when each send
/// was answered and how.
async fn patient_sender(mut c: Client, chat: String, stop: Arc<AtomicBool>) -> Vec<(Instant, Result<u64, String>)> {
    let mut log = Vec::new();
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let r = c.request(json!({"op": "send", "chat": chat, "body": i, "client_id": format!("p-{i}")})).await;
        match r.get("ok") {
            Some(ok) => {
                log.push((Instant::now(), Ok(ok["seq"].as_u64().unwrap())));
                i += 1;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            None => {
                let wait = r["err"]["retry_after_ms"].as_u64().unwrap_or(100);
                log.push((Instant::now(), Err(r["err"]["code"].as_str().unwrap_or("?").to_string())));
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
        }
    }
    log
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn a_shard_that_is_back_takes_writes_from_every_node_within_two_seconds() {
    let pg = PgCluster::start();
    let stores = vec![create_database(&pg.admin_url).await];
    let tweak = |c: &mut herald::Config| {
        c.store.stores = stores.clone();
        c.gateway.rate = 100_000;
        c.gateway.burst = 100_000;
    };
    let nodes = [TestServer::start_with(tweak).await, TestServer::start_with(tweak).await];
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for (n, s) in nodes.iter().enumerate() {
        let mut c = s.client("w", &format!("user{n}")).await;
        c.ok(json!({"op": "join", "chat": "busy"})).await;
        senders.push(tokio::spawn(patient_sender(c, "busy".into(), stop.clone())));
    }
    // Down and up three times in a row, then once more for the measurement.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(800)).await;
        pg.stop();
        tokio::time::sleep(Duration::from_millis(800)).await;
        pg.restart();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    pg.stop();
    tokio::time::sleep(Duration::from_secs(3)).await;
    pg.restart();
    let back_at = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    for (n, sender) in senders.into_iter().enumerate() {
        let log = sender.await.unwrap();
        let first_ok = log
            .iter()
            .find(|(t, r)| *t >= back_at && r.is_ok())
            .map(|(t, _)| t.duration_since(back_at))
            .unwrap_or_else(|| panic!("node {n} never wrote again after the shard came back"));
        eprintln!("node {n}: first write {first_ok:?} after the shard was back");
        assert!(first_ok <= Duration::from_secs(2), "node {n} took {first_ok:?} to write to a shard that was back");
    }
}

/// The schema a herald of protocol v1 left in a shard (version 2), for the migration test.
const SCHEMA_V2: &str = include_str!("fixtures/pg_schema_v2.sql");

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn a_shard_of_schema_2_is_migrated_with_its_counts() {
    let pg = PgCluster::start();
    let url = create_database(&pg.admin_url).await;
    {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        client.batch_execute(SCHEMA_V2).await.unwrap();
        client
            .batch_execute(
                r#"INSERT INTO chats (id, ws, chat, open, seq, members, created_ms) VALUES (1, 'w', 'g', true, 6, 2, 1000);
                   INSERT INTO members VALUES (1, 'alice', 3, 1000), (1, 'bob', 0, 1001);
                   INSERT INTO events VALUES
                     (1, 1, 'join', 'alice', 1000, '{}', NULL),
                     (1, 2, 'join', 'bob', 1001, '{}', NULL),
                     (1, 3, 'message', 'bob', 1002, '{"t":1}', 'c1'),
                     (1, 4, 'message', 'alice', 1003, '{"t":2}', NULL),
                     (1, 5, 'message', 'bob', 1004, '{"t":3}', NULL),
                     (1, 6, 'reaction', 'alice', 1005, '{"target":5,"emoji":"+1","on":true}', NULL);
                   SELECT setval('chats_id_seq', 1);"#,
            )
            .await
            .unwrap();
    }
    let s = TestServer::start_with(|c| c.store.stores = vec![url.clone()]).await;
    let (status, inbox) = s.http("GET", "/v1/workspaces/w/users/alice/inbox", None).await;
    assert_eq!(status, 200, "{inbox}");
    let g = &inbox["chats"][0];
    assert_eq!(
        (g["seq"].clone(), g["ts"].clone(), g["read"].clone(), g["unread"].clone()),
        (json!(6), json!(1005), json!(3), json!(1))
    );
    assert_eq!(g["last"]["seq"], 5);
    // New messages continue the migrated counts; the migrated client_id still answers.
    let mut bob = s.client("w", "bob").await;
    assert_eq!(bob.ok(json!({"op": "send", "chat": "g", "body": 1, "client_id": "c1"})).await["seq"], 3);
    bob.ok(json!({"op": "send", "chat": "g", "body": 2})).await;
    let (_, inbox) = s.http("GET", "/v1/workspaces/w/users/alice/inbox", None).await;
    assert_eq!(inbox["chats"][0]["unread"], 2);
    let (_, inbox) = s.http("GET", "/v1/workspaces/w/users/bob/inbox", None).await;
    assert_eq!(inbox["chats"][0]["unread"], 1, "alice's one message");
}

/// Four nodes, each with its own writer, join their users to one channel, to groups shared across
/// nodes and to chats that do not exist yet, all at once and pipelined (so each batch holds new
/// chats, shared ones and the hot one together): every join is answered, and every chat counts
/// each member once, with one event per join. A batch creates its new chats and then locks the
/// rest in one order: two nodes' batches never wait on each other in a cycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn nodes_joining_one_channel_and_new_chats_at_once_count_every_member_once() {
    const NODES: usize = 4;
    const USERS: usize = 30;
    const GROUPS: usize = 5;
    let pg = PgCluster::start();
    let stores = vec![create_database(&pg.admin_url).await];
    let tweak = |c: &mut herald::Config| {
        c.store.stores = stores.clone();
        c.gateway.rate = 100_000;
        c.gateway.burst = 100_000;
    };
    let mut nodes = Vec::new();
    for _ in 0..NODES {
        nodes.push(TestServer::start_with(tweak).await);
    }
    let mut clients = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        for i in 0..USERS {
            clients.push((n, i, node.client("w", &format!("u{n}-{i}")).await));
        }
    }
    let started = Instant::now();
    let mut joining = Vec::new();
    for (n, i, mut c) in clients {
        joining.push(tokio::spawn(async move {
            // The same chats in a different order per user, all sent before any answer.
            let mut chats =
                vec!["chan".to_string(), format!("pair{i}"), format!("own{n}-{i}"), format!("g{}", i % GROUPS)];
            chats.rotate_left((n + i) % 4);
            let mut ids = Vec::new();
            for chat in &chats {
                ids.push(c.send(json!({"op": "join", "chat": chat})).await);
            }
            for id in ids {
                let r = c.reply(id).await;
                assert!(r.get("ok").is_some(), "u{n}-{i}: a join failed: {r}");
            }
        }));
    }
    for j in joining {
        j.await.unwrap();
    }
    eprintln!("{} joins answered in {:?}", NODES * USERS * 4, started.elapsed());
    // A last member of each chat reads its count and seq back: every member once, one event each.
    let mut checker = nodes[0].client("w", "checker").await;
    let mut expect = vec![("chan".to_string(), NODES * USERS)];
    expect.extend((0..USERS).map(|i| (format!("pair{i}"), NODES)));
    expect.extend((0..GROUPS).map(|g| (format!("g{g}"), NODES * USERS / GROUPS)));
    expect.extend((0..NODES).flat_map(|n| (0..USERS).map(move |i| (format!("own{n}-{i}"), 1))));
    for (chat, members) in expect {
        let ok = checker.ok(json!({"op": "join", "chat": chat})).await;
        assert_eq!(
            (ok["members"].as_u64(), ok["seq"].as_u64()),
            (Some(members as u64 + 1), Some(members as u64 + 1)),
            "{chat}: {ok}"
        );
    }
}
