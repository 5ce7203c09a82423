//! The delivery guarantee against hostile or merely unlucky clients: what
//! one member asks for never costs another member an event, and a reply a
//! client asked for never cuts its own connection.

mod common;

use std::time::Duration;

use common::*;
use serde_json::json;

/// Frames a slow-consumer close would have made the client read in place of the rest.
const SLOW_CONSUMER: u16 = 4008;

#[tokio::test]
async fn a_watch_after_the_end_of_the_log_does_not_silence_the_chat_for_others() {
    let s = TestServer::start().await;
    let mut alice = s.client("w", "alice").await;
    let mut bob = s.client("w", "bob").await;
    let mut carol = s.client("w", "carol").await;
    for c in [&mut alice, &mut bob, &mut carol] {
        c.ok(json!({"op": "join", "chat": "room"})).await;
    }
    // Bob's client was restored from an old backup of another server.
    let w = bob.ok(json!({"op": "watch", "chat": "room", "after": 1000})).await;
    assert_eq!(w["seq"], 3, "the reply tells bob where the log really ends");
    let w = carol.ok(json!({"op": "watch", "chat": "room"})).await;
    assert_eq!(w["seq"], 3);
    let mut sent = Vec::new();
    for i in 0..5 {
        sent.push(alice.ok(json!({"op": "send", "chat": "room", "body": {"n": i}})).await["seq"].as_u64().unwrap());
    }
    assert_eq!(sent, vec![4, 5, 6, 7, 8]);
    for watcher in [&mut carol, &mut bob] {
        let got: Vec<u64> = watcher.events("room", 5).await.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert_eq!(got, sent, "every watcher hears all five, in order");
    }
}

#[tokio::test]
async fn extreme_seqs_are_answered_not_wrapped() {
    let s = TestServer::start().await;
    let mut a = s.client("w", "alice").await;
    a.ok(json!({"op": "join", "chat": "room"})).await;
    for i in 0..3 {
        a.ok(json!({"op": "send", "chat": "room", "body": {"n": i}})).await;
    }
    // 2^63 + 5 would wrap to a negative SQL integer and read the log from its start.
    let f = a.ok(json!({"op": "fetch", "chat": "room", "after": 9_223_372_036_854_775_813u64})).await;
    assert_eq!(f, json!({"events": [], "seq": 4, "more": false}));
    let f = a.ok(json!({"op": "fetch", "chat": "room", "after": u64::MAX})).await;
    assert_eq!(f, json!({"events": [], "seq": 4, "more": false}));
    // u64::MAX + 1 must not overflow anywhere: the watch starts at the log's end.
    let w = a.ok(json!({"op": "watch", "chat": "room", "after": u64::MAX})).await;
    assert_eq!(w, json!({"chat": "room", "seq": 4}));
    let seq = a.ok(json!({"op": "send", "chat": "room", "body": {"n": 3}})).await["seq"].clone();
    assert_eq!(a.events("room", 1).await[0]["seq"], seq);
    a.err(json!({"op": "read", "chat": "room", "seq": u64::MAX}), "bad_request").await;
    a.err(json!({"op": "react", "chat": "room", "target": u64::MAX, "emoji": "+1"}), "not_found").await;
}

/// A server whose chat `big` holds alice's join and 100 messages with bodies
/// near the 16 KiB limit: 1.6 MB, over the 1 MiB outbound queue.
async fn big_chat() -> (TestServer, Client) {
    let s = TestServer::start_with(|c| {
        c.gateway.rate = 10_000;
        c.gateway.burst = 10_000;
    })
    .await;
    let mut a = s.client("w", "alice").await;
    a.ok(json!({"op": "join", "chat": "big"})).await;
    let text = "x".repeat(16 * 1024 - 20);
    for i in 0..100 {
        a.ok(json!({"op": "send", "chat": "big", "body": {"i": i, "t": text}})).await;
    }
    (s, a)
}

#[tokio::test]
async fn a_fetch_of_large_events_is_paged_by_bytes_instead_of_cutting_the_connection() {
    let (_server, mut a) = big_chat().await;
    let mut after = 0u64;
    let mut pages = 0;
    let mut seqs = Vec::new();
    loop {
        let id = a.send(json!({"op": "fetch", "chat": "big", "after": after, "limit": 500})).await;
        let r = a.reply(id).await;
        assert!(a.closed.is_none(), "the connection was closed: {:?}", a.closed);
        let f = r.get("ok").cloned().unwrap_or_else(|| panic!("fetch failed: {r}"));
        let events = f["events"].as_array().unwrap();
        assert!(!events.is_empty(), "a page with more must make progress");
        seqs.extend(events.iter().map(|e| e["seq"].as_u64().unwrap()));
        after = *seqs.last().unwrap();
        pages += 1;
        if f["more"] == false {
            break;
        }
    }
    assert!(pages >= 2, "1.6 MB cannot come in one reply");
    assert_eq!(seqs, (1..=101).collect::<Vec<u64>>(), "every event once, in order");
    assert!(a.push_within(Duration::from_millis(100)).await.is_none());
    assert_ne!(a.closed.as_ref().map(|c| c.0), Some(SLOW_CONSUMER));
}

#[tokio::test]
async fn a_watch_replaying_large_events_fits_the_outbound_queue() {
    let (s, _alice) = big_chat().await;
    let mut b = s.client("w", "bob").await;
    b.ok(json!({"op": "join", "chat": "big"})).await;
    b.ok(json!({"op": "watch", "chat": "big", "after": 0})).await;
    // Replayed up to the byte limit, then told to fetch the rest.
    let mut last = 0;
    loop {
        let p = b.push().await;
        match p["ev"].as_str() {
            Some("event") => {
                let seq = p["seq"].as_u64().unwrap();
                assert!(seq > last, "strictly increasing");
                last = seq;
            }
            Some("notify") => {
                assert_eq!(p["seq"], 102, "notify names the latest seq (bob's join)");
                break;
            }
            other => panic!("unexpected push {other:?}: {p}"),
        }
    }
    assert!(last >= 2, "some events were replayed");
    assert!(b.closed.is_none(), "closed: {:?}", b.closed);
}
