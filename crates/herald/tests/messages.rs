//! Protocol v1.1's message lifecycle over a real server: `edit` and `delete`
//! as events in the log, the stored view that fetch, watch replay and the
//! server API show, their errors, the server API's routes, and erasure: a
//! deleted body leaves the embedded store's files within seconds.
//!
//! Also run against PostgreSQL (`HERALD_TEST_STORE=postgres`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// The event with `seq` among `events`.
fn at(events: &Value, seq: u64) -> Value {
    events.as_array().unwrap().iter().find(|e| e["seq"] == seq).cloned().unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_member_edits_and_deletes_their_own_message_and_everyone_sees_the_stored_view() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    assert_eq!(bob.ok(json!({"op": "watch", "chat": "g"})).await["seq"], 2);

    let sent = alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "helo"}, "client_id": "m1"})).await;
    assert_eq!(sent, json!({"seq": 3}));
    let other = alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "untouched"}})).await;
    assert_eq!(other, json!({"seq": 4}));
    assert_eq!(bob.events("g", 2).await.len(), 2);

    // The edit is the next event of the log, pushed as stored.
    let edit = alice.ok(json!({"op": "edit", "chat": "g", "target": 3, "body": {"text": "hello"}})).await;
    assert_eq!(edit, json!({"seq": 5}));
    let pushed = bob.events("g", 1).await.remove(0);
    assert_eq!(pushed["type"], "edit");
    assert_eq!(pushed["user"], "alice");
    assert_eq!(pushed["body"], json!({"target": 3, "body": {"text": "hello"}}));
    assert!(pushed.get("edited").is_none() && pushed.get("deleted").is_none(), "{pushed}");

    // Fetch shows the message with its latest body and the seq of that edit.
    let f = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    assert_eq!(at(&f["events"], 3)["body"], json!({"text": "hello"}));
    assert_eq!(at(&f["events"], 3)["edited"], 5);
    assert_eq!(at(&f["events"], 3)["client_id"], "m1");
    let untouched = at(&f["events"], 4);
    assert!(untouched.get("edited").is_none() && untouched.get("deleted").is_none(), "v1 shape: {untouched}");

    // A second edit: the view follows the latest.
    alice.ok(json!({"op": "edit", "chat": "g", "target": 3, "body": "hello!"})).await;
    let f = bob.ok(json!({"op": "fetch", "chat": "g", "after": 2, "limit": 1})).await;
    assert_eq!(f["events"][0]["body"], "hello!");
    assert_eq!(f["events"][0]["edited"], 6);

    // Errors.
    let err = bob.err(json!({"op": "edit", "chat": "g", "target": 3, "body": 1}), "forbidden").await;
    assert!(err["message"].as_str().unwrap().contains("another user"), "{err}");
    bob.err(json!({"op": "delete", "chat": "g", "target": 3}), "forbidden").await;
    alice.err(json!({"op": "edit", "chat": "g", "target": 1, "body": 1}), "not_found").await; // a join
    alice.err(json!({"op": "edit", "chat": "g", "target": 5, "body": 1}), "not_found").await; // an edit
    alice.err(json!({"op": "edit", "chat": "g", "target": 0, "body": 1}), "not_found").await;
    alice.err(json!({"op": "delete", "chat": "g", "target": 999}), "not_found").await;
    alice.err(json!({"op": "edit", "chat": "nope", "target": 3, "body": 1}), "not_found").await;
    let big = "x".repeat(17 * 1024);
    alice.err(json!({"op": "edit", "chat": "g", "target": 3, "body": big}), "too_large").await;
    alice.err(json!({"op": "edit", "chat": "g", "target": 3}), "bad_request").await;
    alice.err(json!({"op": "delete", "chat": "g"}), "bad_request").await;
    let mut carol = s.client("acme", "carol").await;
    carol.err(json!({"op": "edit", "chat": "g", "target": 3, "body": 1}), "forbidden").await;
    // Another workspace's chat of the same name is not this one.
    let mut mallory = s.client("evil", "alice").await;
    mallory.err(json!({"op": "delete", "chat": "g", "target": 3}), "not_found").await;

    // Delete: an event with the target only; the message and its edits lose their bodies.
    let del = alice.ok(json!({"op": "delete", "chat": "g", "target": 3})).await;
    assert_eq!(del, json!({"seq": 7}));
    let pushed = bob.events("g", 2).await;
    assert_eq!(pushed[1]["type"], "delete");
    assert_eq!(pushed[1]["body"], json!({"target": 3}));
    let f = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    let gone = at(&f["events"], 3);
    assert_eq!(gone["body"], Value::Null);
    assert_eq!(gone["deleted"], true);
    assert_eq!(at(&f["events"], 5)["body"], json!({"target": 3, "body": null}));
    assert_eq!(at(&f["events"], 6)["body"], json!({"target": 3, "body": null}));
    assert_eq!(at(&f["events"], 7)["body"], json!({"target": 3}));
    assert_eq!(f["seq"], 7);

    // A deleted message can be neither edited nor deleted again.
    alice.err(json!({"op": "edit", "chat": "g", "target": 3, "body": 1}), "not_found").await;
    alice.err(json!({"op": "delete", "chat": "g", "target": 3}), "not_found").await;

    // A watch's replay shows the stored view too, in seq order, every event once.
    let mut late = s.client("acme", "dave").await;
    late.ok(json!({"op": "join", "chat": "g"})).await;
    late.ok(json!({"op": "watch", "chat": "g", "after": 0})).await;
    let replay = late.events("g", 8).await;
    let seqs: Vec<u64> = replay.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    assert_eq!(replay[2]["body"], Value::Null);
    assert_eq!(replay[2]["deleted"], true);
    assert_eq!(replay[4]["body"], json!({"target": 3, "body": null}));

    // And the server API's read.
    let (status, page) = s.http("GET", "/v1/workspaces/acme/chats/g/events?after=2&limit=2", None).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["events"][0]["deleted"], true);
    assert_eq!(page["events"][0]["body"], Value::Null);
    assert!(page["events"][1].get("deleted").is_none());
}

#[tokio::test]
async fn the_server_api_edits_and_deletes_any_message() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "watch", "chat": "g"})).await;
    alice.ok(json!({"op": "send", "chat": "g", "body": "one"})).await; // 2
    alice.ok(json!({"op": "send", "chat": "g", "body": "two"})).await; // 3
    alice.events("g", 2).await;

    let path = "/v1/workspaces/acme/chats/g/events";
    let (status, body) = s.http("PATCH", &format!("{path}/2"), Some(json!({"body": "ONE", "user": "mod"}))).await;
    assert_eq!((status, body), (200, json!({"seq": 4})));
    let pushed = alice.events("g", 1).await.remove(0);
    assert_eq!((pushed["type"].clone(), pushed["user"].clone()), (json!("edit"), json!("mod")));
    let (status, body) = s.http("PATCH", &format!("{path}/3"), Some(json!({"body": {"text": "TWO"}}))).await;
    assert_eq!((status, body), (200, json!({"seq": 5})));
    let pushed = alice.events("g", 1).await.remove(0);
    assert!(pushed.get("user").is_none(), "an edit without a user: {pushed}");

    let (status, body) = s.http("DELETE", &format!("{path}/2"), None).await;
    assert_eq!((status, body), (200, json!({"seq": 6})));
    let (_, page) = s.http("GET", &format!("{path}?after=1&limit=2"), None).await;
    assert_eq!(page["events"][0]["deleted"], true);
    assert_eq!(page["events"][1]["body"], json!({"text": "TWO"}));
    assert_eq!(page["events"][1]["edited"], 5);

    // Refusals, each with its status and code.
    for (method, p, body, want) in [
        ("DELETE", format!("{path}/2"), None, 404), // already deleted
        ("PATCH", format!("{path}/2"), Some(json!({"body": 1})), 404), // deleted
        ("PATCH", format!("{path}/1"), Some(json!({"body": 1})), 404), // a join
        ("DELETE", format!("{path}/99"), None, 404), // beyond the log
        ("DELETE", "/v1/workspaces/acme/chats/none/events/1".into(), None, 404), // no chat
        ("PATCH", format!("{path}/3"), Some(json!({"user": "x"})), 400), // no body
        ("PATCH", format!("{path}/3"), Some(json!({"body": 1, "user": "a b"})), 400),
        ("PATCH", format!("{path}/3"), Some(json!({"body": "x".repeat(17 * 1024)})), 413),
        ("DELETE", format!("{path}/abc"), None, 400),
        ("DELETE", format!("{path}/-1"), None, 400),
    ] {
        let (status, answer) = s.http(method, &p, body).await;
        assert_eq!(status, want, "{method} {p}: {answer}");
        assert!(answer["error"]["code"].is_string(), "{answer}");
    }
    let (status, _) = http(s.addr, "DELETE", &format!("{path}/3"), None, None).await;
    assert_eq!(status, 401, "the api key is needed");
}

#[tokio::test]
async fn a_deleted_body_leaves_the_store_files_within_seconds() {
    let s = TestServer::start().await;
    let embedded = test_stores().await.is_empty();
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let secret = format!("secret-{:016x}", rand::random::<u64>());
    let edited = format!("edited-{:016x}", rand::random::<u64>());
    let seq = alice.ok(json!({"op": "send", "chat": "g", "body": {"text": secret}})).await["seq"].as_u64().unwrap();
    alice.ok(json!({"op": "edit", "chat": "g", "target": seq, "body": {"text": edited}})).await;
    // Other traffic around it, so the rows share pages with live ones.
    for i in 0..50 {
        alice.ok(json!({"op": "send", "chat": "g", "body": {"n": i}})).await;
    }
    if embedded {
        assert!(!files_containing(s.data.path(), secret.as_bytes()).is_empty(), "the test looks in the right place");
    }
    alice.ok(json!({"op": "delete", "chat": "g", "target": seq})).await;

    let f = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    let text = f.to_string();
    assert!(!text.contains(&secret) && !text.contains(&edited), "{text}");
    if embedded {
        let started = Instant::now();
        loop {
            let left: Vec<String> = [&secret, &edited]
                .iter()
                .flat_map(|needle| files_containing(s.data.path(), needle.as_bytes()))
                .collect();
            if left.is_empty() {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(5), "still in {left:?} 5 s after the delete");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
