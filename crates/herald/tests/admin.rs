//! The admin page and its routes: `GET /admin` on every node, whatever its
//! mode; `GET /v1/admin/status` and `POST /v1/admin/drain` behind the api key.

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// Polls `GET /v1/admin/status` until `check` holds; returns that answer.
async fn status_until(s: &TestServer, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (st, v) = s.http("GET", "/v1/admin/status", None).await;
        assert_eq!(st, 200, "{v}");
        if check(&v) {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {WAIT:?}; last status {v}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_admin_routes_refuse_a_missing_or_wrong_key_and_a_refused_drain_drains_nothing() {
    let s = TestServer::start().await;
    let mut c = s.client("w", "alice").await;
    for (method, path) in [("GET", "/v1/admin/status"), ("POST", "/v1/admin/drain"), ("GET", "/v1/admin/nodes")] {
        for key in [None, Some("wrong"), Some("")] {
            let (st, v) = http(s.addr, method, path, key, None).await;
            assert_eq!(st, 401, "{method} {path} with {key:?}: {v}");
            assert_eq!(v["error"]["code"], "unauthenticated");
        }
    }
    assert_eq!(c.push_within(Duration::from_millis(300)).await, None, "no reconnect after a refused drain");
    c.ok(json!({"op": "ping"})).await;
    let (_, v) = s.http("GET", "/v1/admin/status", None).await;
    assert_eq!(v["draining"], false);
}

#[tokio::test]
async fn status_shows_this_nodes_connections_watched_chats_shards_and_growing_counters() {
    let s = TestServer::start_with(|c| c.server.node = "node-a".into()).await;
    let (st, first) = s.http("GET", "/v1/admin/status", None).await;
    assert_eq!(st, 200, "{first}");
    assert_eq!(first["node"], "node-a");
    assert_eq!(first["cell"], "default");
    assert_eq!(first["draining"], false);
    assert_eq!(first["broker_ready"], true);
    assert_eq!((first["connections"].clone(), first["watched_chats"].clone()), (json!(0), json!(0)));
    assert_eq!(
        first["nodes"],
        json!([{"node": "node-a", "url": format!("ws://{}", s.addr), "connections": 0, "this": true}])
    );
    // The embedded store has no shards; two PostgreSQL shards (HERALD_TEST_STORE=postgres) show closed breakers.
    let shards = first["shards"].as_array().unwrap();
    if std::env::var("HERALD_TEST_STORE").as_deref() == Ok("postgres") {
        assert_eq!(shards.len(), 2, "{first}");
        for (i, sh) in shards.iter().enumerate() {
            assert_eq!(sh["label"], format!("#{}", i + 1));
            assert_eq!(sh["breaker"], "closed");
            assert!(sh["in_flight"].is_u64() && sh["waiting"].is_u64(), "{sh}");
        }
    } else {
        assert!(shards.is_empty(), "{first}");
    }

    // alice watches a chat and sends to it; bob is only connected.
    let mut alice = s.client("w", "alice").await;
    let _bob = s.client("w", "bob").await;
    alice.ok(json!({"op": "join", "chat": "general"})).await;
    alice.ok(json!({"op": "watch", "chat": "general"})).await;
    alice.ok(json!({"op": "send", "chat": "general", "body": {"text": "hi"}})).await;
    alice.events("general", 1).await;
    let v = status_until(&s, "two connections, one watched chat", |v| {
        v["connections"] == 2 && v["watched_chats"] == 1 && v["nodes"][0]["connections"] == 2
    })
    .await;
    assert!(v["broker_subscriptions"].as_u64().unwrap() >= 1, "the watched chat's subscription: {v}");
    // Counters are the process's (other tests' servers add to them too): they grow by at least ours.
    let grew = |k: &str| v[k].as_u64().unwrap() - first[k].as_u64().unwrap();
    assert!(grew("requests_total") >= 5, "2 hellos, join, watch, send: {v}");
    assert!(grew("pushes_total") >= 1, "alice's own message pushed to her: {v}");
    assert!(v["at_ms"].as_u64().unwrap() >= first["at_ms"].as_u64().unwrap());

    alice.ok(json!({"op": "unwatch", "chat": "general"})).await;
    status_until(&s, "no watched chat after the unwatch", |v| v["watched_chats"] == 0).await;
}

#[tokio::test]
async fn a_drain_from_the_admin_api_sends_each_client_reconnect_then_4012_and_refuses_new_ones() {
    let s = TestServer::start().await;
    let mut clients = Vec::new();
    for i in 0..5 {
        clients.push(s.client("w", &format!("u{i}")).await);
    }
    let (st, v) = s.http("POST", "/v1/admin/drain", Some(json!({"window_ms": 300}))).await;
    assert_eq!((st, v), (200, json!({"draining": 5, "window_ms": 300})));
    for c in &mut clients {
        let p = c.push().await;
        assert_eq!((p["ev"].clone(), p["reason"].clone()), (json!("reconnect"), json!("drain")), "{p}");
        assert!(p["after_ms"].as_u64().unwrap() <= 300, "{p}");
        assert_eq!(c.closed_with().await, 4012);
    }
    let v = status_until(&s, "every connection gone", |v| v["connections"] == 0).await;
    assert_eq!(v["draining"], true);
    match tokio_tungstenite::connect_async(s.ws_url("w")).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => assert_eq!(resp.status(), 503),
        other => panic!("a draining node accepted a WebSocket: {:?}", other.map(|(_, r)| r.status())),
    }
    // The node still answers its HTTP API while it drains.
    assert_eq!(s.http("GET", "/v1/admin/nodes", None).await.0, 200);
}

#[tokio::test]
async fn the_admin_page_is_served_with_and_without_secrets() {
    let with_secrets = TestServer::start().await;
    let dev = TestServer::start_with(|c| {
        *c = common::dev_mode(c);
        assert!(c.dev_mode);
    })
    .await;
    for s in [&with_secrets, &dev] {
        let (st, page) = http_raw(s.addr, "GET", "/admin", None, None).await;
        assert_eq!(st, 200);
        assert!(page.contains("<title>herald admin</title>") && page.contains(r#"src="/admin.js""#), "{page}");
        let (st, script) = http_raw(s.addr, "GET", "/admin.js", None, None).await;
        assert_eq!(st, 200);
        assert!(script.contains("/v1/admin/status") && script.contains("/v1/admin/drain"));
    }
}
