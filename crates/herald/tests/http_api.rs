//! The HTTP API: api key, chats, members, events, tokens, health, metrics, dev mode.

mod common;

use common::*;
use serde_json::json;

#[tokio::test]
async fn the_api_needs_the_api_key() {
    let s = TestServer::start().await;
    for (method, path) in [
        ("GET", "/v1/workspaces/w/chats/c"),
        ("PUT", "/v1/workspaces/w/chats/c"),
        ("PUT", "/v1/workspaces/w/chats/c/members/u"),
        ("DELETE", "/v1/workspaces/w/chats/c/members/u"),
        ("GET", "/v1/workspaces/w/chats/c/events"),
        ("POST", "/v1/tokens"),
    ] {
        let (st, v) = http(s.addr, method, path, None, Some(json!({}))).await;
        assert_eq!(st, 401, "{method} {path}");
        assert_eq!(v["error"]["code"], "unauthenticated");
        let (st, _) = http(s.addr, method, path, Some("wrong"), Some(json!({}))).await;
        assert_eq!(st, 401, "{method} {path}");
    }
}

#[tokio::test]
async fn chats_members_and_events_over_http() {
    let s = TestServer::start().await;
    let (st, v) = s.http("GET", "/v1/workspaces/w/chats/c", None).await;
    assert_eq!((st, v["error"]["code"].clone()), (404, json!("not_found")));
    let (st, v) = s.http("PUT", "/v1/workspaces/w/chats/c", Some(json!({"open": true}))).await;
    assert_eq!((st, v), (200, json!({"chat": "c", "seq": 0, "members": 0, "open": true})));
    let (_, v) = s.http("PUT", "/v1/workspaces/w/chats/c/members/alice", None).await;
    assert_eq!(v, json!({"seq": 1}));
    // Adding again stores nothing new.
    let (_, v) = s.http("PUT", "/v1/workspaces/w/chats/c/members/alice", None).await;
    assert_eq!(v, json!({"seq": 1}));
    let (_, v) = s
        .http("POST", "/v1/workspaces/w/chats/c/events", Some(json!({"type": "system", "body": {"text": "welcome"}})))
        .await;
    assert_eq!(v, json!({"seq": 2}));
    let msg = json!({"type": "message", "user": "alice", "body": "hi", "client_id": "x1"});
    assert_eq!(s.http("POST", "/v1/workspaces/w/chats/c/events", Some(msg.clone())).await.1, json!({"seq": 3}));
    assert_eq!(s.http("POST", "/v1/workspaces/w/chats/c/events", Some(msg)).await.1, json!({"seq": 3}), "idempotent");
    let (st, v) = s.http("POST", "/v1/workspaces/w/chats/c/events", Some(json!({"type": "reaction", "body": 1}))).await;
    assert_eq!((st, v["error"]["code"].clone()), (400, json!("bad_request")));
    let (st, _) = s
        .http("POST", "/v1/workspaces/w/chats/c/events", Some(json!({"type": "system", "body": "x".repeat(20_000)})))
        .await;
    assert_eq!(st, 413);
    let (st, v) =
        http_raw(s.addr, "POST", "/v1/workspaces/w/chats/c/events", Some(API_KEY), Some("{nope".into())).await;
    assert_eq!(st, 400, "{v}");
    assert!(v.contains("bad_request"));

    let (_, v) = s.http("GET", "/v1/workspaces/w/chats/c/events?after=1&limit=1", None).await;
    assert_eq!(v["seq"], 3);
    assert_eq!(v["more"], true);
    assert_eq!(v["events"][0]["type"], "system");
    assert!(v["events"][0].get("user").is_none());
    let (_, v) = s.http("GET", "/v1/workspaces/w/chats/c/events", None).await;
    assert_eq!(v["events"].as_array().unwrap().len(), 3);

    let (_, v) = s.http("DELETE", "/v1/workspaces/w/chats/c/members/alice", None).await;
    assert_eq!(v, json!({"seq": 4}));
    let (st, _) = s.http("DELETE", "/v1/workspaces/w/chats/c/members/alice", None).await;
    assert_eq!(st, 404);
    let (_, v) = s.http("GET", "/v1/workspaces/w/chats/c", None).await;
    assert_eq!(v, json!({"chat": "c", "seq": 4, "members": 0, "open": true}));
    let (st, _) = s.http("PUT", "/v1/workspaces/w/chats/bad%20id", None).await;
    assert_eq!(st, 400);
}

#[tokio::test]
async fn tokens_issued_by_the_api_open_websockets() {
    let s = TestServer::start().await;
    let (st, v) = s.http("POST", "/v1/tokens", Some(json!({"workspace": "w", "user": "u", "ttl_s": 60}))).await;
    assert_eq!(st, 200);
    let mut c = Client::connect(&s.ws_url("w")).await;
    assert_eq!(c.ok(json!({"op": "hello", "token": v["token"]})).await["user"], "u");
    let (st, _) = s.http("POST", "/v1/tokens", Some(json!({"workspace": "w", "user": "bad user"}))).await;
    assert_eq!(st, 400);
}

#[tokio::test]
async fn health_readiness_gateway_and_metrics() {
    let s = TestServer::start().await;
    assert_eq!(http(s.addr, "GET", "/healthz", None, None).await.0, 200);
    let (st, v) = http(s.addr, "GET", "/readyz", None, None).await;
    assert_eq!(st, 200);
    assert_eq!((v["store"].clone(), v["broker"].clone()), (json!("ok"), json!("ok")));
    let (st, v) = http(s.addr, "GET", "/v1/gateway?ws=acme", None, None).await;
    assert_eq!(st, 200);
    assert_eq!(v["url"], format!("ws://{}/v1/ws?ws=acme", s.addr));
    assert!(v["node"].is_string());
    let mut c = s.client("w", "m").await;
    c.ok(json!({"op": "join", "chat": "c"})).await;
    c.ok(json!({"op": "send", "chat": "c", "body": 1})).await;
    let (st, text) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    assert_eq!(st, 200);
    for name in [
        "herald_connections ",
        "herald_requests_total{op=\"send\",outcome=\"ok\"}",
        "herald_events_stored_total",
        "herald_store_commit_seconds_bucket",
        "herald_store_write_seconds_bucket",
    ] {
        assert!(text.contains(name), "missing {name} in:\n{text}");
    }
}

#[tokio::test]
async fn dev_mode_serves_the_demo_and_dev_tokens_only_without_secrets() {
    let s = TestServer::start().await;
    assert_eq!(http(s.addr, "GET", "/", None, None).await.0, 404);
    assert_eq!(http(s.addr, "POST", "/v1/dev/token", None, Some(json!({"workspace": "w", "user": "u"}))).await.0, 404);

    let dev = TestServer::start_with(|c| {
        *c = common::dev_mode(c);
    })
    .await;
    let (st, page) = http_raw(dev.addr, "GET", "/", None, None).await;
    assert_eq!(st, 200);
    assert!(page.contains("herald"));
    let (st, v) = http(dev.addr, "POST", "/v1/dev/token", None, Some(json!({"workspace": "w", "user": "u"}))).await;
    assert_eq!(st, 200);
    let mut c = Client::connect(&dev.ws_url("w")).await;
    assert_eq!(c.ok(json!({"op": "hello", "token": v["token"]})).await["user"], "u");
}

/// Two cells of one node each: a workspace is served by exactly one of them,
/// the other refuses it and points to it.
#[tokio::test]
async fn nothing_crosses_cells() {
    let a = TestServer::start_with(|c| {
        c.server.cell = "a".into();
        c.server.cells = vec!["a".into(), "b=ws://cell-b.example:8080".into()];
    })
    .await;
    let cells = herald::cluster::Cells::new("a", &["a".into(), "b".into()]).unwrap();
    let ours = (0..).map(|i| format!("ws{i}")).find(|w| cells.serves(w)).unwrap();
    let theirs = (0..).map(|i| format!("ws{i}")).find(|w| !cells.serves(w)).unwrap();

    let mut c = a.client(&ours, "u").await;
    c.ok(json!({"op": "join", "chat": "c"})).await;

    let token = a.token(&theirs, "u").await;
    let mut c = Client::connect(&a.ws_url(&theirs)).await;
    c.err(json!({"op": "hello", "token": token}), "forbidden").await;
    assert_eq!(c.closed_with().await, 4012);
    let (st, v) = a.http("PUT", &format!("/v1/workspaces/{theirs}/chats/c"), None).await;
    assert_eq!((st, v["error"]["code"].clone()), (403, json!("forbidden")));
    let (_, g) = http(a.addr, "GET", &format!("/v1/gateway?ws={theirs}"), None, None).await;
    assert_eq!(g["url"], format!("ws://cell-b.example:8080/v1/ws?ws={theirs}"));
    assert_eq!(g["node"], "cell:b");
    let (_, g) = http(a.addr, "GET", &format!("/v1/gateway?ws={ours}"), None, None).await;
    assert_eq!(g["url"], format!("ws://{}/v1/ws?ws={ours}", a.addr));
}

/// `--dev` keeps the secrets given (a backend's `.env` stays valid across restarts) and still
/// serves the demo page and dev tokens.
#[tokio::test]
async fn dev_mode_with_fixed_secrets_keeps_them_across_restarts() {
    let fixed = |c: &mut herald::Config| {
        let (listen, data) = (c.server.listen.to_string(), c.store.data.clone());
        let args = ["serve", "--dev", "--listen", &listen, "--api-key", API_KEY, "--jwt-secret", SECRET];
        let mut args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
        args.extend(["--data".into(), data.into()]);
        *c = herald::config::ServeArgs::parse_from(args).and_then(|a| a.resolve()).expect("--dev resolves");
        assert!(c.dev_mode);
    };
    for _restart in 0..2 {
        let mut dev = TestServer::start_with(fixed).await;
        assert_eq!(http_raw(dev.addr, "GET", "/", None, None).await.0, 200, "the demo page");
        let (st, v) = http(dev.addr, "POST", "/v1/dev/token", None, Some(json!({"workspace": "w", "user": "u"}))).await;
        assert_eq!(st, 200, "{v}");
        // The api key given works, every run.
        let (st, issued) =
            http(dev.addr, "POST", "/v1/tokens", Some(API_KEY), Some(json!({"workspace": "w", "user": "v"}))).await;
        assert_eq!(st, 200, "{issued}");
        // A token signed with the secret given is accepted.
        let mut c = Client::connect(&dev.ws_url("w")).await;
        assert_eq!(c.ok(json!({"op": "hello", "token": issued["token"]})).await["user"], "v");
        dev.stop().await;
    }
}
