//! What a client is told when it asks wrongly: an id with a character no id
//! may have, a path no route takes, a method a route does not take. Each
//! answer is the protocol's JSON error and says what would have been right.
//! Not here: the refusals of each route's own rules (`http_api.rs`,
//! `protocol.rs`).

mod common;

use std::net::SocketAddr;

use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What a refused id's message must name: the length and every allowed character.
const ID_RULE: &str = "1 to 128 characters of A-Z a-z 0-9 _ . : -";

/// One raw HTTP/1.1 exchange: the status, the head (lower-cased) and the
/// body, read as far as its `content-length` (the connection may stay open).
async fn exchange(addr: SocketAddr, request: &str) -> (u16, String, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(request.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    let whole = |buf: &[u8]| {
        let text = String::from_utf8_lossy(buf);
        let Some((head, body)) = text.split_once("\r\n\r\n") else { return false };
        let head = head.to_ascii_lowercase();
        let length = head.lines().find_map(|l| l.strip_prefix("content-length: ")?.trim().parse::<usize>().ok());
        length.is_some_and(|n| body.len() >= n)
    };
    while !whole(&buf) {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(WAIT, s.read(&mut chunk)).await.expect("an answer in time").expect("read");
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status line");
    (status, head.to_ascii_lowercase(), body.to_string())
}

fn error_of(status: u16, v: &Value, what: &str) -> (String, String) {
    let code = v["error"]["code"].as_str().unwrap_or_else(|| panic!("{what}: {status} without a JSON error: {v}"));
    (code.to_string(), v["error"]["message"].as_str().unwrap_or_default().to_string())
}

#[tokio::test]
async fn an_invalid_id_is_refused_with_the_characters_an_id_may_have() {
    let s = TestServer::start().await;
    s.http("PUT", "/v1/workspaces/w/chats/c", None).await;
    for (method, path, body) in [
        ("PUT", "/v1/workspaces/w/chats/bad!chat", None),
        ("GET", "/v1/workspaces/bad!ws/chats/c", None),
        ("PUT", "/v1/workspaces/w/chats/c/members/bad!user", None),
        ("DELETE", "/v1/workspaces/w/chats/c/members/bad%20user", None),
        ("POST", "/v1/workspaces/w/chats/c/events", Some(json!({"type": "message", "user": "bad!user", "body": 1}))),
        ("PATCH", "/v1/workspaces/w/chats/c/events/1", Some(json!({"body": 1, "user": "bad!user"}))),
        ("PUT", "/v1/workspaces/w/chats/c/bans/bad!user", None),
        ("PUT", "/v1/workspaces/w/chats/c/mutes/bad!user", None),
        ("GET", "/v1/workspaces/w/users/bad!user/inbox", None),
        ("POST", "/v1/workspaces/w/users/bad!user/revoke", None),
        ("DELETE", "/v1/workspaces/w/users/bad!user", None),
        // v1.2: `@` and `+` are a user id's characters now (an email address is one); `!` is not.
        ("POST", "/v1/tokens", Some(json!({"workspace": "w", "user": "user!example.com"}))),
        ("GET", "/v1/gateway?ws=bad!ws", None),
    ] {
        let (status, v) = s.http(method, path, body).await;
        let (code, message) = error_of(status, &v, path);
        assert_eq!((status, code.as_str()), (400, "bad_request"), "{method} {path}: {v}");
        assert!(message.contains(ID_RULE), "{method} {path}: {message:?} does not say what an id may be");
    }

    // The WebSocket: a request's chat, and the upgrade's `?ws=`.
    let mut c = s.client("w", "u").await;
    let err = c.err(json!({"op": "join", "chat": "bad chat!"}), "bad_request").await;
    assert!(err["message"].as_str().unwrap().contains(ID_RULE), "{err}");
    let upgrade = format!(
        "GET /v1/ws?ws=bad!ws HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        s.addr
    );
    let (status, _, body) = exchange(s.addr, &upgrade).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains(ID_RULE), "the upgrade's refusal {body:?} does not say what an id may be");
}

#[tokio::test]
async fn a_path_no_route_takes_answers_the_json_not_found() {
    let s = TestServer::start().await;
    for (method, path) in [
        ("GET", "/nope"),
        ("GET", "/"),
        ("GET", "/v1"),
        ("POST", "/v1/workspaces/w/chats/c/nope"),
        // v1.2 made `GET /v1/workspaces/{ws}/chats` a route (the chat list).
        ("GET", "/v1/workspaces/w/nope"),
        ("DELETE", "/admin/nope"),
        ("POST", "/v1/dev/token"),
    ] {
        let (status, v) = http(s.addr, method, path, None, None).await;
        let (code, message) = error_of(status, &v, path);
        assert_eq!((status, code.as_str()), (404, "not_found"), "{method} {path}: {v}");
        assert!(message.contains(path), "{method} {path}: {message:?} does not name the path");
    }
}

#[tokio::test]
async fn a_method_a_route_does_not_take_answers_405_with_allow_and_the_json_error() {
    let s = TestServer::start().await;
    for (method, path, allowed) in [
        ("POST", "/healthz", "get"),
        ("DELETE", "/v1/workspaces/w/chats/c", "put,get"),
        ("GET", "/v1/tokens", "post"),
        ("POST", "/v1/ws", "get"),
    ] {
        let request = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", s.addr);
        let (status, head, body) = exchange(s.addr, &request).await;
        assert_eq!(status, 405, "{method} {path}: {body}");
        let allow = head.lines().find_map(|l| l.strip_prefix("allow: ")).unwrap_or_default().replace(' ', "");
        for m in allowed.split(',') {
            assert!(allow.split(',').any(|a| a == m), "{method} {path}: Allow {allow:?} lacks {m}");
        }
        assert!(head.contains("content-type: application/json"), "{method} {path}: {head}");
        let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{method} {path}: {e}: {body:?}"));
        assert_eq!(v["error"]["code"], "bad_request", "{method} {path}: {v}");
        assert!(v["error"]["message"].as_str().unwrap().contains(path), "{v}");
    }
}

/// The routes beside the fallback still answer as they did: the API, health,
/// the admin page, the OpenAPI document, the WebSocket, and in development
/// mode the demo page, its script and dev tokens.
#[tokio::test]
async fn every_route_still_answers_beside_the_fallback() {
    let s = TestServer::start().await;
    for path in ["/healthz", "/readyz", "/metrics", "/admin", "/admin.js", "/v1/openapi.json", "/v1/gateway?ws=w"] {
        let (status, body) = http_raw(s.addr, "GET", path, None, None).await;
        assert_eq!(status, 200, "GET {path}: {body}");
    }
    assert_eq!(s.http("PUT", "/v1/workspaces/w/chats/c", None).await.0, 200);
    let mut c = s.client("w", "u").await;
    c.ok(json!({"op": "join", "chat": "c"})).await;

    let dev = TestServer::start_with(|c| {
        *c = common::dev_mode(c);
    })
    .await;
    for path in ["/", "/demo.js", "/admin"] {
        let (status, body) = http_raw(dev.addr, "GET", path, None, None).await;
        assert_eq!(status, 200, "dev GET {path}: {body}");
    }
    let (status, v) = http(dev.addr, "POST", "/v1/dev/token", None, Some(json!({"workspace": "w", "user": "u"}))).await;
    assert_eq!(status, 200, "{v}");
    let mut c = Client::connect(&dev.ws_url("w")).await;
    assert_eq!(c.ok(json!({"op": "hello", "token": v["token"]})).await["user"], "u");
}

/// `PUT .../members/{user}` of a chat that does not exist is refused with
/// 404, as the OpenAPI document says: it does not create the chat.
#[tokio::test]
async fn adding_a_member_to_a_missing_chat_is_404_as_the_document_says() {
    let s = TestServer::start().await;
    let (status, v) = s.http("PUT", "/v1/workspaces/w/chats/missing/members/u", None).await;
    assert_eq!((status, v["error"]["code"].clone()), (404, json!("not_found")), "{v}");
    assert_eq!(s.http("GET", "/v1/workspaces/w/chats/missing", None).await.0, 404, "the chat was not created");

    let (_, doc) = s.http("GET", "/v1/openapi.json", None).await;
    let op = &doc["paths"]["/v1/workspaces/{ws}/chats/{chat}/members/{user}"]["put"];
    let said = format!("{} {}", op["summary"].as_str().unwrap_or(""), op["description"].as_str().unwrap_or(""));
    assert!(!said.to_lowercase().contains("creates the chat"), "the document still says so: {said}");
    assert!(said.contains("must exist"), "the document does not say the chat must exist: {said}");
    assert!(op["responses"]["404"].is_object(), "404 is not among its documented answers: {op}");
}

#[tokio::test]
async fn a_plain_http_get_of_the_websocket_route_is_told_how_to_open_it_in_json() {
    let s = TestServer::start().await;
    let request = format!("GET /v1/ws?ws=w HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", s.addr);
    let (status, head, body) = exchange(s.addr, &request).await;
    assert_eq!(status, 426, "{body}");
    assert!(head.contains("content-type: application/json"), "{head}");
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    let (code, message) = error_of(status, &v, "/v1/ws");
    assert_eq!(code, "bad_request");
    assert!(message.contains("WebSocket client"), "{message:?} does not say how to open it");
}

#[tokio::test]
async fn the_server_api_says_what_was_wrong_with_the_api_key() {
    let s = TestServer::start().await;
    let body = Some(json!({"workspace": "w", "user": "u"}));
    // No Authorization header at all.
    let (status, v) = http(s.addr, "POST", "/v1/tokens", None, body.clone()).await;
    let (code, message) = error_of(status, &v, "no key");
    assert_eq!((status, code.as_str()), (401, "unauthenticated"));
    assert!(message.contains("Authorization: Bearer"), "{message:?}");
    // A user's token where the api key goes: the easy mistake, named.
    let token = s.token("w", "u").await;
    let (status, v) = http(s.addr, "POST", "/v1/tokens", Some(token.as_str()), body.clone()).await;
    let (code, message) = error_of(status, &v, "a user token");
    assert_eq!((status, code.as_str()), (401, "unauthenticated"));
    assert!(message.contains("user token"), "{message:?} does not say it is a user token");
    // Another key: not the server's.
    let other = "k".repeat(40);
    let (status, v) = http(s.addr, "POST", "/v1/tokens", Some(other.as_str()), body).await;
    let (_, message) = error_of(status, &v, "another key");
    assert!(!message.contains("user token") && message.contains("HERALD_API_KEY"), "{message:?}");
}

#[tokio::test]
async fn the_development_routes_of_a_server_with_secrets_say_why_they_are_off() {
    let s = TestServer::start().await;
    for (method, path) in [("GET", "/"), ("POST", "/v1/dev/token")] {
        let (status, v) = http(s.addr, method, path, None, Some(json!({"workspace": "w", "user": "u"}))).await;
        let (code, message) = error_of(status, &v, path);
        assert_eq!((status, code.as_str()), (404, "not_found"), "{method} {path}: {v}");
        assert!(message.contains("development mode") && message.contains("--dev"), "{method} {path}: {message:?}");
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_refused_with_its_size_in_words() {
    let s = TestServer::start().await;
    s.http("PUT", "/v1/workspaces/w/chats/c", None).await;
    let big = "x".repeat(17 * 1024);
    let body = json!({"type": "system", "body": {"text": big}});
    let (status, v) = s.http("POST", "/v1/workspaces/w/chats/c/events", Some(body)).await;
    let (code, message) = error_of(status, &v, "a large body");
    assert_eq!((status, code.as_str()), (413, "too_large"), "{v}");
    assert!(message.contains("16 KiB (16384 bytes)"), "{message:?} does not say the limit in words");
}
