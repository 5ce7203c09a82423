//! The cluster's stories on a cell in one process: herald nodes joined by
//! the in-process bus over one shared store, no nats-server (tests/cluster.rs
//! tells the same stories over real NATS and PostgreSQL). Events, presence
//! and typing, live inboxes and join notices, revocations and the webhook's
//! `offline` asks all cross nodes through the bus; nothing is lost on it,
//! so no story waits for a subscription to settle or a message to be repaired.

mod common;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::cell::LocalCell;
use common::stories::{self, presence_count_within, push_of};
use common::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_on_one_node_gets_every_event_sent_on_the_others_in_order() {
    let cell = LocalCell::start(3).await;
    let mut watcher = cell.nodes[0].client("w", "watcher").await;
    watcher.ok(json!({"op": "join", "chat": "g"})).await;
    watcher.ok(json!({"op": "watch", "chat": "g"})).await;
    let mut senders = Vec::new();
    for (i, node) in cell.nodes.iter().enumerate().skip(1) {
        let mut c = node.client("w", &format!("sender-{i}")).await;
        c.ok(json!({"op": "join", "chat": "g"})).await;
        senders.push(c);
    }
    for round in 0..50 {
        for c in &mut senders {
            c.ok(json!({"op": "send", "chat": "g", "body": {"round": round}})).await;
        }
    }
    // Two joins (seq 2 and 3, after the watcher's own at 1), then 100 messages.
    let events = watcher.events("g", 102).await;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["seq"].as_u64().unwrap(), 2 + i as u64, "in order, no gaps, no repeats");
    }
    assert_eq!(watcher.push_within(Duration::from_millis(100)).await, None, "nothing twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presence_and_typing_reach_the_other_nodes() {
    let cell = LocalCell::start(3).await;
    stories::presence_and_typing_reach_the_other_nodes(&cell.nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_users_of_a_node_cut_off_stop_being_present_within_10_s() {
    let cell = LocalCell::start(3).await;
    let mut alice = cell.nodes[0].client("w", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "watch", "chat": "g"})).await;
    alice.ok(json!({"op": "presence", "chat": "g"})).await;
    let mut on_victim = Vec::new();
    for user in ["carol", "dave"] {
        let mut c = cell.nodes[2].client("w", user).await;
        c.ok(json!({"op": "join", "chat": "g"})).await;
        c.ok(json!({"op": "watch", "chat": "g"})).await;
        on_victim.push(c);
    }
    for node in &cell.nodes {
        presence_count_within(node, "g", 3, Duration::from_secs(2)).await;
    }
    for _ in 0..2 {
        assert_eq!(push_of(&mut alice, "presence", Duration::from_secs(2)).await.unwrap()["present"], true);
    }

    cell.cut_off(2);
    let cut = Instant::now();
    let mut gone = Vec::new();
    while gone.len() < 2 {
        let left = Duration::from_secs(10).saturating_sub(cut.elapsed());
        let p =
            push_of(&mut alice, "presence", left).await.expect("the cut node's users stop being present within 10 s");
        assert_eq!(p["present"], false, "{p}");
        gone.push(p["user"].as_str().unwrap().to_string());
    }
    gone.sort();
    assert_eq!(gone, ["carol", "dave"]);
    for node in &cell.nodes[..2] {
        presence_count_within(node, "g", 1, Duration::from_secs(10).saturating_sub(cut.elapsed())).await;
    }
    let (_, v) = cell.nodes[0].http("GET", "/v1/admin/nodes", None).await;
    assert_eq!(v["nodes"].as_array().map(Vec::len), Some(2), "node-2 is out of routing: {v}");
}

/// A change whose signals are all lost (the delta and the beat after it) is
/// found by the full check: the other node's digest carries the chat's
/// latest number each 10 s, the node that missed it asks, and its watchers
/// are told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_presence_change_lost_on_the_way_is_found_by_the_full_check() {
    let cell = LocalCell::start(2).await;
    let mut alice = cell.nodes[0].client("w", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "watch", "chat": "g"})).await;
    alice.ok(json!({"op": "presence", "chat": "g"})).await;
    let mut bob = cell.nodes[1].client("w", "bob").await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    let digests_before = digest_beats_received(&cell.nodes[0]).await;

    cell.lose_signals(0, true);
    bob.ok(json!({"op": "watch", "chat": "g"})).await;
    // Past the beat that follows bob's delta: both lost on their way to node-0
    // (and node-1's ask for the chat's present users with them).
    tokio::time::sleep(Duration::from_secs(1)).await;
    cell.lose_signals(0, false);
    let lost_at = Instant::now();
    let (_, v) = cell.nodes[0].http("GET", "/v1/workspaces/w/chats/g/presence", None).await;
    assert_eq!(v["count"], 1, "node-0 missed bob's arrival: {v}");

    let p = push_of(&mut alice, "presence", Duration::from_secs(13)).await.expect("bob's arrival, found within 13 s");
    assert_eq!((p["user"].as_str(), p["present"].as_bool()), (Some("bob"), Some(true)), "{p}");
    for node in &cell.nodes {
        presence_count_within(node, "g", 2, Duration::from_secs(13)).await;
    }
    eprintln!("found {:?} after the signals were lost", lost_at.elapsed());
    assert!(digest_beats_received(&cell.nodes[0]).await > digests_before, "the full check came in a digest");
}

/// Full-check beats taken in from digests, in this process.
async fn digest_beats_received(node: &TestServer) -> f64 {
    let text = http_raw(node.addr, "GET", "/metrics", None, None).await.1;
    metric(&text, r#"herald_presence_digest_beats_total{way="received"}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_look_the_same_from_every_node() {
    let cell = LocalCell::start(2).await;
    stories::conversations_look_the_same_from_every_node(&cell.nodes, Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_inbox_hears_of_what_happens_on_the_other_nodes() {
    let cell = LocalCell::start(2).await;
    stories::a_live_inbox_hears_of_what_happens_on_the_other_nodes(&cell.nodes, Duration::ZERO).await;
}

/// Revocations taken in from the cell's bus, in this process (the metric keeps its old `nats` label).
async fn noted_from_the_bus(node: &TestServer) -> f64 {
    let text = http_raw(node.addr, "GET", "/metrics", None, None).await.1;
    metric(&text, r#"herald_revocations_noted_total{source="nats"}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_closes_the_users_connections_on_every_node() {
    let cell = LocalCell::start(3).await;
    let old = cell.nodes[0].token("acme", "alice").await;
    let mut open = Vec::new();
    for node in &cell.nodes {
        for _ in 0..2 {
            let mut c = Client::connect(&node.ws_url("acme")).await;
            let r = c.request(json!({"op": "hello", "token": old})).await;
            assert!(r.get("ok").is_some(), "{r}");
            open.push(c);
        }
    }
    let mut carol = cell.nodes[1].client("acme", "carol").await;
    let before = noted_from_the_bus(&cell.nodes[0]).await;

    let (status, body) = cell.nodes[0].http("POST", "/v1/workspaces/acme/users/alice/revoke", None).await;
    assert_eq!((status, &body), (200, &json!({})));
    for (i, c) in open.iter_mut().enumerate() {
        let code = tokio::time::timeout(Duration::from_secs(2), c.closed_with()).await;
        assert_eq!(code.ok(), Some(4001), "alice's connection {i} (node-{}) closed with 4001", i / 2);
    }
    assert!(noted_from_the_bus(&cell.nodes[0]).await > before, "the other nodes heard it on the bus");
    for node in &cell.nodes {
        let mut c = Client::connect(&node.ws_url("acme")).await;
        let r = c.request(json!({"op": "hello", "token": old})).await;
        assert_eq!(r["err"]["code"], "unauthenticated", "the old token on {}: {r}", node.addr);
    }
    carol.ok(json!({"op": "inbox"})).await;
}

const HOOK_SECRET: &str = "hook-secret-0123456789abcdef0123456789abcdef";

/// The message event of `chat` with body `body`, once delivered.
async fn delivered(got: &Mutex<Vec<Value>>, chat: &str, body: &str) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let found = got.lock().unwrap().iter().find(|e| e["chat"] == chat && e["body"] == body).cloned();
        if let Some(e) = found {
            return e;
        }
        assert!(Instant::now() < deadline, "{chat}'s {body:?} not delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhooks_offline_list_counts_users_connected_to_any_node() {
    let (url, got) = webhook_receiver().await;
    // node-0 delivers (the shared store is a SQLite store: each node with a
    // webhook would deliver it all), node-1 only answers its asks.
    let cell = LocalCell::start_with(2, |i, c| {
        if i != 0 {
            return;
        }
        c.hooks.secret = Some(HOOK_SECRET.into());
        c.hooks.webhook = Some(herald::hooks::WebhookSettings {
            url: url.clone(),
            events: None,
            offline_max: herald::hooks::DEFAULT_WEBHOOK_OFFLINE_MAX,
            timeout: Duration::from_millis(300),
            retry_first: Duration::from_millis(40),
            retry_max: Duration::from_millis(400),
        });
    })
    .await;
    let (deliverer, other) = (&cell.nodes[0], &cell.nodes[1]);
    let (st, v) = other.http("PUT", "/v1/workspaces/w/chats/small", Some(json!({"open": true}))).await;
    assert!(st == 200 || st == 201, "{st} {v}");
    for m in ["alice", "bob", "carol"] {
        let (st, v) = other.http("PUT", &format!("/v1/workspaces/w/chats/small/members/{m}"), None).await;
        assert!(st == 200 || st == 201, "{st} {v}");
    }
    // bob is connected to the node that does not deliver: it must hear so from the other one.
    let mut bob = other.client("w", "bob").await;
    let mut alice = deliverer.client("w", "alice").await;
    alice.ok(json!({"op": "send", "chat": "small", "body": "hello"})).await;
    let m = delivered(&got, "small", "hello").await;
    assert_eq!(m["offline"], json!(["carol"]), "alice sent it, bob is connected to the other node: {m}");

    // Once bob is gone from the other node too, he counts offline.
    bob.ws.close(None).await.unwrap();
    drop(bob);
    let deadline = Instant::now() + WAIT;
    while other.http("GET", "/v1/admin/status", None).await.1["connections"] != 0 {
        assert!(Instant::now() < deadline, "bob's connection did not close");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    alice.ok(json!({"op": "send", "chat": "small", "body": "still there?"})).await;
    let m = delivered(&got, "small", "still there?").await;
    let mut offline: Vec<String> = serde_json::from_value(m["offline"].clone()).unwrap();
    offline.sort();
    assert_eq!(offline, ["bob", "carol"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cell_without_a_bucket_keeps_no_files_and_says_why() {
    let cell = LocalCell::start(2).await;
    let mut alice = cell.nodes[0].client("w", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let e = alice
        .err(json!({"op": "upload", "chat": "g", "name": "a.png", "type": "image/png", "size": 3}), "unavailable")
        .await;
    assert!(e["message"].as_str().unwrap().contains("--files-s3"), "{e}");
    // Messages without files are not affected.
    alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "hi"}})).await;
    alice
        .err(json!({"op": "send", "chat": "g", "body": {}, "files": ["fNoSuchFile0000000000000"]}), "unavailable")
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_on_one_node_is_found_from_another() {
    let cell = LocalCell::start(2).await;
    let mut alice = cell.nodes[0].client("w", "alice").await;
    let mut bob = cell.nodes[1].client("w", "bob").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "서버가 준비됐어요"}})).await;
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let r = bob.ok(json!({"op": "search", "query": "서버"})).await;
        if let Some(hit) = r["results"].as_array().and_then(|a| a.first()) {
            assert_eq!((hit["chat"].as_str(), hit["user"].as_str()), (Some("g"), Some("alice")), "{r}");
            break;
        }
        assert!(Instant::now() < deadline, "not found from the other node within 2 s of the send's answer");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (code, r) = cell.nodes[1].http("GET", "/v1/workspaces/w/search?q=%EC%84%9C%EB%B2%84&user=bob", None).await;
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["results"].as_array().map(Vec::len), Some(1), "{r}");
}
