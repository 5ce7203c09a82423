//! A hot chat over a real server: its watchers are told of new events by a
//! coalesced `notify` and fetch them, and those fetches are answered from
//! the node's window of recent events, byte for byte the store's view
//! (edits and deletes included).

mod common;

use std::collections::BTreeMap;

use common::{Client, TestServer, http_raw};
use herald::metrics::sum as metric;
use serde_json::{Value, json};

const WATCHERS: usize = 20;
const SENDS: u64 = 150;
/// Events per fetch page: small, so that catching up takes several pages (`more`).
const PAGE: u64 = 40;

/// Fetches from `after` page by page until past `upto` (a page may go
/// further: up to what the server holds); returns the last seq fetched.
async fn fetch_to(c: &mut Client, mut after: u64, upto: u64, into: &mut BTreeMap<u64, Value>) -> u64 {
    while after < upto {
        let f = c.ok(json!({"op": "fetch", "chat": "hot", "after": after, "limit": PAGE})).await;
        for e in f["events"].as_array().unwrap() {
            let seq = e["seq"].as_u64().unwrap();
            assert_eq!(seq, after + 1, "a page is contiguous");
            assert!(into.insert(seq, e.clone()).is_none(), "seq {seq} twice");
            after = seq;
        }
        if !f["more"].as_bool().unwrap() {
            break;
        }
    }
    after
}

#[tokio::test]
async fn watchers_of_a_hot_chat_get_every_event_by_notify_and_fetch_from_the_window() {
    // 20 watchers: hot from the 2nd event of a second.
    let s = TestServer::start_with(|c| c.hub.hot_deliveries = 2 * WATCHERS as u64).await;
    let mut sender = s.client("w", "sender").await;
    sender.ok(json!({"op": "join", "chat": "hot"})).await;
    let mut watchers = Vec::new();
    for i in 0..WATCHERS {
        let mut c = s.client("w", &format!("u{i}")).await;
        c.ok(json!({"op": "join", "chat": "hot"})).await;
        let start = c.ok(json!({"op": "watch", "chat": "hot"})).await["seq"].as_u64().unwrap();
        watchers.push((c, start));
    }
    let (_, before) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    let (mut last, mut messages) = (0, Vec::new());
    for i in 0..SENDS {
        last = sender.ok(json!({"op": "send", "chat": "hot", "body": {"n": i}})).await["seq"].as_u64().unwrap();
        messages.push(last);
        // Now and then the sender edits or deletes one of its recent messages:
        // earlier events' stored view changes under the watchers' fetches.
        if i % 10 == 9 {
            let target = messages[messages.len() - 3];
            let edit = json!({"op": "edit", "chat": "hot", "target": target, "body": {"edited": i}});
            last = sender.ok(edit).await["seq"].as_u64().unwrap();
        }
        if i % 25 == 24 {
            // The 8th last: one edited before (a delete nulls its edits' new bodies too).
            let target = messages.remove(messages.len() - 8);
            last = sender.ok(json!({"op": "delete", "chat": "hot", "target": target})).await["seq"].as_u64().unwrap();
        }
    }
    let mut notified = 0;
    for (c, start) in &mut watchers {
        let mut got = BTreeMap::new();
        let (mut have, mut pushed) = (*start, *start);
        while have < last {
            let p = c.push().await;
            let seq = p["seq"].as_u64().unwrap();
            match p["ev"].as_str().unwrap() {
                "event" => {
                    assert!(seq > pushed, "pushes only go up: {seq} after {pushed}");
                    pushed = seq;
                    if seq > have {
                        have = fetch_to(c, have, seq - 1, &mut got).await;
                        assert_eq!(have, seq - 1, "the server had the events before its push");
                        got.insert(seq, p);
                        have = seq;
                    } else {
                        assert!(got.contains_key(&seq), "fetched ahead of the push");
                    }
                }
                "notify" => {
                    notified += 1;
                    pushed = pushed.max(seq);
                    have = fetch_to(c, have, seq, &mut got).await;
                    assert!(have >= seq, "the notified seq was fetched");
                }
                other => panic!("unexpected push {other}: {p}"),
            }
        }
        let seqs: Vec<u64> = got.keys().copied().collect();
        assert_eq!(seqs, (*start + 1..=last).collect::<Vec<_>>(), "every event once, by push or fetch");
    }
    assert!(notified >= WATCHERS, "the chat turned hot: {notified} notifies");

    // The watchers' fetch of everything since they started, from the window,
    // is the store's view of it now, reply for reply (the server API reads the store).
    for (c, start) in &mut watchers {
        let mut after = *start;
        loop {
            let ws = c.ok(json!({"op": "fetch", "chat": "hot", "after": after, "limit": PAGE})).await;
            let (status, stored) =
                s.http("GET", &format!("/v1/workspaces/w/chats/hot/events?after={after}&limit={PAGE}"), None).await;
            assert_eq!(status, 200);
            assert_eq!(ws, stored, "after {after}");
            let events = ws["events"].as_array().unwrap();
            if !ws["more"].as_bool().unwrap() {
                break;
            }
            after = events.last().unwrap()["seq"].as_u64().unwrap();
        }
    }
    // Some of those views carry the lifecycle: an edited and a deleted message.
    let (_, all) = s.http("GET", "/v1/workspaces/w/chats/hot/events?limit=500", None).await;
    let events = all["events"].as_array().unwrap();
    assert!(events.iter().any(|e| e["edited"].is_u64()), "an edited message");
    assert!(events.iter().any(|e| e["deleted"] == true && e["body"].is_null()), "a deleted message");
    let erased_edit = |e: &&Value| e["type"] == "edit" && e["body"]["body"].is_null();
    assert!(events.iter().any(|e| erased_edit(&e)), "an edit of a deleted message");

    let (_, after) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    let hits = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("herald_hub_cache_reads_total{") && l.contains(r#"read="fetch""#))
            .filter(|l| l.contains(r#"outcome="hit""#))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let served = hits(&after) - hits(&before);
    assert!(served >= (WATCHERS as f64) * 2.0, "fetches were served from the window: {served}");
    assert!(metric(&after, "herald_hub_cache_bytes") > 0.0, "the window's bytes are reported");
}
