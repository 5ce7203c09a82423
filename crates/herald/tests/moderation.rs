//! Protocol v1.1's bans and mutes over a real server: the server API's
//! routes, and what a banned or muted user sees on their connection.
//!
//! Also run against PostgreSQL (`HERALD_TEST_STORE=postgres`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

const G: &str = "/v1/workspaces/acme/chats/g";

#[tokio::test]
async fn a_banned_user_is_removed_and_cannot_come_back_until_unbanned() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "watch", "chat": "g"})).await;
    alice.ok(json!({"op": "watch", "chat": "g"})).await;

    assert_eq!(s.http("PUT", &format!("{G}/bans/alice"), None).await, (200, json!({})));
    // A leave event, seen by the chat; alice's watch ends with it.
    let leave = bob.events("g", 1).await.remove(0);
    assert_eq!(
        (leave["type"].clone(), leave["user"].clone(), leave["seq"].clone()),
        (json!("leave"), json!("alice"), json!(3))
    );
    assert_eq!(alice.events("g", 1).await[0]["type"], "leave");
    assert_eq!(s.http("GET", G, None).await.1["members"], 1);

    let err = alice.err(json!({"op": "join", "chat": "g"}), "forbidden").await;
    assert!(err["message"].as_str().unwrap().contains("banned"), "{err}");
    alice.err(json!({"op": "send", "chat": "g", "body": 1}), "forbidden").await;
    alice.err(json!({"op": "fetch", "chat": "g", "after": 0}), "forbidden").await;
    let (status, body) = s.http("PUT", &format!("{G}/members/alice"), None).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    // Banning again changes nothing and stores nothing.
    assert_eq!(s.http("PUT", &format!("{G}/bans/alice"), None).await, (200, json!({})));
    assert_eq!(s.http("GET", G, None).await.1["seq"], 3);

    assert_eq!(s.http("DELETE", &format!("{G}/bans/alice"), None).await, (200, json!({})));
    assert_eq!(alice.ok(json!({"op": "join", "chat": "g"})).await["seq"], 4);

    // A user who is not a member can be banned ahead, which stores no event.
    assert_eq!(s.http("PUT", &format!("{G}/bans/carol"), None).await, (200, json!({})));
    assert_eq!(s.http("GET", G, None).await.1["seq"], 4);
    let mut carol = s.client("acme", "carol").await;
    carol.err(json!({"op": "join", "chat": "g"}), "forbidden").await;
    // Unbanning someone never banned is fine too.
    assert_eq!(s.http("DELETE", &format!("{G}/bans/dave"), None).await, (200, json!({})));

    // Refusals.
    for (method, path, want) in [
        ("PUT", "/v1/workspaces/acme/chats/none/bans/alice".to_string(), 404),
        ("DELETE", "/v1/workspaces/acme/chats/none/bans/alice".to_string(), 404),
        ("PUT", format!("{G}/bans/a%20b"), 400),
    ] {
        let (status, body) = s.http(method, &path, None).await;
        assert_eq!(status, want, "{method} {path}: {body}");
    }
    let (status, _) = http(s.addr, "PUT", &format!("{G}/bans/alice"), None, None).await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn a_muted_member_reads_but_cannot_write_until_unmuted() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let mine = alice.ok(json!({"op": "send", "chat": "g", "body": "before"})).await["seq"].as_u64().unwrap();

    assert_eq!(s.http("PUT", &format!("{G}/mutes/alice"), None).await, (200, json!({})));
    for req in [
        json!({"op": "send", "chat": "g", "body": "x"}),
        json!({"op": "react", "chat": "g", "target": mine, "emoji": "+1"}),
        json!({"op": "edit", "chat": "g", "target": mine, "body": "y"}),
        json!({"op": "delete", "chat": "g", "target": mine}),
    ] {
        let err = alice.err(req, "forbidden").await;
        assert!(err["message"].as_str().unwrap().contains("muted"), "{err}");
    }
    // Reading is unaffected.
    assert_eq!(alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await["seq"], mine);
    alice.ok(json!({"op": "watch", "chat": "g"})).await;
    alice.ok(json!({"op": "read", "chat": "g", "seq": mine})).await;
    // Leaving and joining again does not end a mute.
    alice.ok(json!({"op": "unwatch", "chat": "g"})).await;
    alice.ok(json!({"op": "leave", "chat": "g"})).await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.err(json!({"op": "send", "chat": "g", "body": "x"}), "forbidden").await;
    // The server API still posts as anyone.
    let (status, _) =
        s.http("POST", &format!("{G}/events"), Some(json!({"type": "message", "user": "alice", "body": 1}))).await;
    assert_eq!(status, 200);

    assert_eq!(s.http("DELETE", &format!("{G}/mutes/alice"), None).await, (200, json!({})));
    alice.ok(json!({"op": "send", "chat": "g", "body": "after"})).await;
    alice.ok(json!({"op": "edit", "chat": "g", "target": mine, "body": "edited"})).await;

    // A mute with an end: refused until then, allowed after, without anyone unmuting.
    let until = now_ms() + 1500;
    let (status, _) = s.http("PUT", &format!("{G}/mutes/alice"), Some(json!({"until_ms": until}))).await;
    assert_eq!(status, 200);
    alice.err(json!({"op": "send", "chat": "g", "body": "x"}), "forbidden").await;
    let started = Instant::now();
    loop {
        let r = alice.request(json!({"op": "send", "chat": "g", "body": "later"})).await;
        if r.get("ok").is_some() {
            break;
        }
        assert_eq!(r["err"]["code"], "forbidden", "{r}");
        assert!(now_ms() < until + 50, "refused after the mute ended: {r}");
        assert!(started.elapsed() < Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(now_ms() >= until, "allowed before the mute ended");

    // A mute that has already ended mutes nobody.
    let (status, _) = s.http("PUT", &format!("{G}/mutes/alice"), Some(json!({"until_ms": 1}))).await;
    assert_eq!(status, 200);
    alice.ok(json!({"op": "send", "chat": "g", "body": "free"})).await;

    // Refusals.
    for (method, path, body, want) in [
        ("PUT", "/v1/workspaces/acme/chats/none/mutes/alice".to_string(), None, 404),
        ("PUT", format!("{G}/mutes/alice"), Some(json!({"until_ms": "soon"})), 400),
        ("PUT", format!("{G}/mutes/a%20b"), None, 400),
        ("DELETE", "/v1/workspaces/acme/chats/none/mutes/alice".to_string(), None, 404),
    ] {
        let (status, answer) = s.http(method, &path, body).await;
        assert_eq!(status, want, "{method} {path}: {answer}");
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}
