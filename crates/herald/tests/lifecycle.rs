//! Whole-process behaviour: graceful drains, kill -9 durability, slow consumers.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// A node alone (here: no cell) spreads its clients over at most 1 s, not
/// its whole drain window: they can only come back to it once it restarts.
/// A node of a cell uses the window (`tests/cluster.rs`).
#[tokio::test]
async fn shutdown_asks_clients_to_reconnect_spread_over_a_second_when_alone_then_closes_4012() {
    let mut s = TestServer::start_with(|c| c.server.drain_window_ms = 2000).await;
    let mut clients = Vec::new();
    for i in 0..20 {
        clients.push(s.client("w", &format!("u{i}")).await);
    }
    s.stop().await;
    let mut delays = Vec::new();
    for c in &mut clients {
        let p = c.push().await;
        assert_eq!(p["ev"], "reconnect");
        assert_eq!(p["reason"], "drain");
        delays.push(p["after_ms"].as_u64().unwrap());
        assert_eq!(c.closed_with().await, 4012);
    }
    let alone = herald::server::ALONE_DRAIN_WINDOW.as_millis() as u64;
    assert!(delays.iter().all(|d| *d <= alone), "a node alone spreads over at most {alone} ms: {delays:?}");
    let (min, max) = (delays.iter().min().unwrap(), delays.iter().max().unwrap());
    assert!(max - min > 500, "reconnects are spread, not all at once: {delays:?}");
}

/// kill -9 in the middle of sends: every acknowledged event is still there
/// after a restart, once, and seq continues after the last stored one.
#[tokio::test]
async fn kill_9_loses_no_acknowledged_event() {
    let data = data_dir();
    let stores = test_stores().await;
    let mut server = BinServer::start(data.path(), &stores, &[("HERALD_RATE", "100000"), ("HERALD_BURST", "100000")]);
    server.wait_ready().await;
    let addr = server.addr;
    let acked: Arc<std::sync::Mutex<HashMap<String, u64>>> = Default::default();
    let mut tasks = Vec::new();
    for u in 0..8 {
        let acked = acked.clone();
        let token = token_at(addr, "w", &format!("u{u}")).await;
        tasks.push(tokio::spawn(async move {
            let mut c = Client::connect(&format!("ws://{addr}/v1/ws?ws=w")).await;
            c.ok(json!({"op": "hello", "token": token})).await;
            c.ok(json!({"op": "join", "chat": "c"})).await;
            for i in 0.. {
                let cid = format!("u{u}-{i}");
                let id = c.send(json!({"op": "send", "chat": "c", "body": {"i": i}, "client_id": cid})).await;
                // Replies stop when the server dies; that ends this sender.
                let r = tokio::time::timeout(Duration::from_secs(3), c.reply(id)).await;
                match r {
                    Ok(r) if r.get("ok").is_some() => {
                        acked.lock().unwrap().insert(cid, r["ok"]["seq"].as_u64().unwrap());
                    }
                    _ => break,
                }
            }
        }));
    }
    // Let the senders run, then kill -9 mid-flight.
    let deadline = Instant::now() + Duration::from_secs(10);
    while acked.lock().unwrap().len() < 400 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.kill9();
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 400, "senders made progress before the kill: {}", acked.len());

    let server = BinServer::start(data.path(), &stores, &[]);
    server.wait_ready().await;
    let mut stored: HashMap<String, u64> = HashMap::new();
    let mut after = 0;
    let latest = loop {
        let (_, page) = http(
            server.addr,
            "GET",
            &format!("/v1/workspaces/w/chats/c/events?after={after}&limit=500"),
            Some(API_KEY),
            None,
        )
        .await;
        for e in page["events"].as_array().unwrap() {
            let seq = e["seq"].as_u64().unwrap();
            assert_eq!(seq, after + 1, "no gaps");
            after = seq;
            if let Some(cid) = e["client_id"].as_str() {
                assert!(stored.insert(cid.to_string(), seq).is_none(), "stored once");
            }
        }
        if page["more"] == false {
            break page["seq"].as_u64().unwrap();
        }
    };
    for (cid, seq) in &acked {
        assert_eq!(stored.get(cid), Some(seq), "acknowledged {cid} at {seq} survives kill -9");
    }
    // seq continues after the last stored event.
    let (_, v) = http(
        server.addr,
        "POST",
        "/v1/workspaces/w/chats/c/events",
        Some(API_KEY),
        Some(json!({"type": "system", "body": "after restart"})),
    )
    .await;
    assert_eq!(v["seq"], latest + 1);
}

/// A watcher that stops reading is cut (4008 or dropped) while senders keep their pace.
#[tokio::test]
async fn a_stalled_reader_is_cut_while_senders_keep_their_pace() {
    let s = TestServer::start_with(|c| {
        c.gateway.rate = 100_000;
        c.gateway.burst = 100_000;
        c.gateway.outbox_limit = 256 * 1024;
    })
    .await;
    let mut sender = s.client("w", "sender").await;
    sender.ok(json!({"op": "join", "chat": "c"})).await;
    let mut healthy = s.client("w", "healthy").await;
    healthy.ok(json!({"op": "join", "chat": "c"})).await;
    healthy.ok(json!({"op": "watch", "chat": "c"})).await;
    let mut stalled = s.client("w", "stalled").await;
    stalled.ok(json!({"op": "join", "chat": "c"})).await;
    stalled.ok(json!({"op": "watch", "chat": "c"})).await;
    // From here on `stalled` reads nothing: its socket buffers fill, then its queue.

    let body = "x".repeat(15_000);
    let reader = tokio::spawn(async move {
        let mut n = 0;
        while n < 1000 {
            let p = healthy.push().await;
            if p["ev"] == "event" && p["type"] == "message" {
                n += 1;
            }
        }
        n
    });
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    for i in 0..1000 {
        let t = Instant::now();
        sender.ok(json!({"op": "send", "chat": "c", "body": {"t": body, "i": i}})).await;
        slowest = slowest.max(t.elapsed());
    }
    let total = started.elapsed();
    assert_eq!(tokio::time::timeout(WAIT, reader).await.unwrap().unwrap(), 1000, "the healthy watcher got everything");
    assert!(
        slowest < Duration::from_secs(1),
        "no send waited on the stalled reader: slowest {slowest:?}, all {total:?}"
    );
    // The stalled one was cut: reading now ends in a close (4008) or a dropped socket, not 15 MB of events.
    let mut received = 0usize;
    let code = loop {
        match stalled.push_within(Duration::from_secs(5)).await {
            Some(_) => received += 1,
            None => break stalled.closed.clone().map(|c| c.0),
        }
    };
    assert!(received < 1000, "the stalled reader did not get everything queued for it");
    assert!(matches!(code, Some(4008) | Some(1006)), "cut with 4008 or dropped: {code:?}");
    let (_, text) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    if code == Some(4008) {
        assert!(metric(&text, "herald_slow_consumer_closes_total") >= 1.0, "slow consumer close is counted");
    }
}

/// A join flood: thousands of joins into one chat, each stored once,
/// the member count exact. Joins go through the server API (one TCP
/// connection per request) from 64 concurrent workers.
#[tokio::test]
async fn a_join_flood_into_one_chat_stores_every_join_once_and_counts_exactly() {
    const JOINS: usize = 3000;
    const WORKERS: usize = 64;
    let s = TestServer::start().await;
    s.http("PUT", "/v1/workspaces/w/chats/hot", Some(json!({"open": true}))).await;
    let addr = s.addr;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in (w..JOINS).step_by(WORKERS) {
                let (st, v) =
                    http(addr, "PUT", &format!("/v1/workspaces/w/chats/hot/members/u{i}"), Some(API_KEY), None).await;
                assert_eq!(st, 200, "{v}");
                seqs.push(v["seq"].as_u64().unwrap());
            }
            seqs
        }));
    }
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed();
    seqs.sort();
    seqs.dedup();
    assert_eq!(seqs.len(), JOINS, "every join got its own seq");
    let (_, chat) = s.http("GET", "/v1/workspaces/w/chats/hot", None).await;
    assert_eq!(chat["members"], JOINS as u64, "member count exact");
    assert_eq!(chat["seq"], JOINS as u64, "one join event each, nothing else");
    eprintln!("join flood: {JOINS} joins in {elapsed:?} ({:.0}/s)", JOINS as f64 / elapsed.as_secs_f64());
}
