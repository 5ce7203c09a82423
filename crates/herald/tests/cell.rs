//! The cluster's stories on a cell in one process: herald nodes joined by
//! the in-process bus over one shared store, no nats-server (tests/cluster.rs
//! tells the same stories over real NATS and PostgreSQL). Events, presence
//! and typing, live inboxes and join notices, revocations and the webhook's
//! `offline` asks all cross nodes through the bus; nothing is lost on it,
//! so no story waits for a subscription to settle or a message to be repaired.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::cell::LocalCell;
use common::*;
use serde_json::{Value, json};

/// The next push of kind `ev` within `wait`, passing over others (events of joins and the like).
async fn push_of(c: &mut Client, ev: &str, wait: Duration) -> Option<Value> {
    let deadline = Instant::now() + wait;
    loop {
        let p = c.push_within(deadline.saturating_duration_since(Instant::now())).await?;
        if p["ev"] == ev {
            return Some(p);
        }
    }
}

/// Polls `node`'s presence route until `count` users are present.
async fn presence_count_within(node: &TestServer, chat: &str, count: u64, within: Duration) {
    let started = Instant::now();
    loop {
        let (status, body) = node.http("GET", &format!("/v1/workspaces/w/chats/{chat}/presence"), None).await;
        assert_eq!(status, 200, "{body}");
        if body["count"] == count {
            return;
        }
        assert!(started.elapsed() < within, "{} still says {body}, not {count}", node.addr);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

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
    let mut alice = cell.nodes[0].client("w", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "watch", "chat": "g"})).await;
    assert_eq!(alice.ok(json!({"op": "presence", "chat": "g"})).await["count"], 1);

    let mut bob = cell.nodes[1].client("w", "bob").await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "watch", "chat": "g"})).await;
    let seen = push_of(&mut alice, "presence", Duration::from_secs(2)).await;
    assert_eq!(seen, Some(json!({"ev": "presence", "chat": "g", "user": "bob", "present": true})));
    // bob's node asked the others for their sets when it started watching;
    // the answer may still be on its way to bob's node when he asks.
    let both = json!({"count": 2, "users": ["alice", "bob"]});
    let list = bob.ok(json!({"op": "presence", "chat": "g"})).await;
    if list != both {
        assert_eq!(list, json!({"count": 1, "users": ["bob"]}));
        let filled = push_of(&mut bob, "presence", Duration::from_secs(2)).await;
        assert_eq!(filled, Some(json!({"ev": "presence", "chat": "g", "user": "alice", "present": true})));
    }
    // Every node agrees, node-2 (no watcher of the chat) by asking the others.
    for node in &cell.nodes {
        presence_count_within(node, "g", 2, Duration::from_secs(2)).await;
    }
    assert_eq!(cell.nodes[2].http("GET", "/v1/workspaces/w/chats/g/presence", None).await.1, both);

    // Typing crosses nodes both ways, and never comes back to the typist.
    bob.ok(json!({"op": "typing", "chat": "g"})).await;
    let typing = push_of(&mut alice, "typing", Duration::from_secs(2)).await;
    assert_eq!(typing, Some(json!({"ev": "typing", "chat": "g", "user": "bob"})));
    alice.ok(json!({"op": "typing", "chat": "g"})).await;
    assert_eq!(push_of(&mut bob, "typing", Duration::from_secs(2)).await.unwrap()["user"], "alice");
    assert_eq!(push_of(&mut bob, "typing", Duration::from_millis(300)).await, None, "bob's own typing is not his");

    // bob on a second node: still present when he stops watching on the first.
    let mut bob_too = cell.nodes[2].client("w", "bob").await;
    bob_too.ok(json!({"op": "watch", "chat": "g"})).await;
    bob.ok(json!({"op": "unwatch", "chat": "g"})).await;
    assert_eq!(push_of(&mut alice, "presence", Duration::from_millis(1500)).await, None, "bob watches on node-2");
    drop(bob_too);
    let gone = push_of(&mut alice, "presence", Duration::from_secs(2)).await;
    assert_eq!(gone, Some(json!({"ev": "presence", "chat": "g", "user": "bob", "present": false})));
    for node in &cell.nodes {
        presence_count_within(node, "g", 1, Duration::from_secs(2)).await;
    }
    let alone = json!({"count": 1, "users": ["alice"]});
    assert_eq!(cell.nodes[1].http("GET", "/v1/workspaces/w/chats/g/presence", None).await.1, alone);
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

/// The next `inbox` push of `chat` within 3 s, passing over others.
async fn inbox_of(c: &mut Client, chat: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let p = push_of(c, "inbox", deadline.saturating_duration_since(Instant::now()))
            .await
            .unwrap_or_else(|| panic!("no inbox push of {chat}"));
        if p["chat"] == chat {
            return p;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_inbox_hears_of_what_happens_on_the_other_nodes() {
    let cell = LocalCell::start(2).await;
    let mut alice = cell.nodes[0].client("w", "alice").await;
    let mut phone = cell.nodes[1].client("w", "alice").await;
    let mut bob = cell.nodes[1].client("w", "bob").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    let page = alice.ok(json!({"op": "inbox", "live": true})).await;
    assert_eq!(page["chats"][0]["chat"], "g");
    // No wait for the subscription to settle: in process, it holds once made.

    let m = bob.ok(json!({"op": "send", "chat": "g", "body": "from node-1"})).await;
    let p = inbox_of(&mut alice, "g").await;
    assert_eq!((p["seq"].clone(), p["unread"].clone()), (m["seq"].clone(), json!(1)), "{p}");

    // Joined on node-1, a chat node-0 never heard of: the cell-wide join notice.
    phone.ok(json!({"op": "join", "chat": "h"})).await;
    assert_eq!(inbox_of(&mut alice, "h").await["seq"], 1);
    bob.ok(json!({"op": "join", "chat": "h"})).await;
    assert_eq!(inbox_of(&mut alice, "h").await["seq"], 2, "bob's join is news too");
    let m = bob.ok(json!({"op": "send", "chat": "h", "body": "hello"})).await;
    let p = inbox_of(&mut alice, "h").await;
    assert_eq!((p["seq"].clone(), p["unread"].clone()), (m["seq"].clone(), json!(1)), "{p}");
    phone.ok(json!({"op": "read", "chat": "h", "seq": m["seq"]})).await;
    assert_eq!(inbox_of(&mut alice, "h").await["unread"], 0);
    phone.ok(json!({"op": "leave", "chat": "g"})).await;
    assert_eq!(inbox_of(&mut alice, "g").await["left"], true);
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

/// A webhook receiver that keeps the events of every request and answers 200.
async fn receiver() -> (String, Arc<Mutex<Vec<Value>>>) {
    let got: Arc<Mutex<Vec<Value>>> = Arc::default();
    let keep = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| async move {
            let v: Value = serde_json::from_slice(&body).unwrap_or_default();
            keep.lock().unwrap().extend(v["events"].as_array().cloned().unwrap_or_default());
            "ok"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (url, got)
}

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
    let (url, got) = receiver().await;
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
