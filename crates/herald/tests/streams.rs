//! Protocol v1.2's streamed messages over a real server: `send` with `stream`, `append` pushes
//! coalesced per stream with `at`, `done` storing the final `edit`, a watch that starts
//! mid-stream, the server API's streams, every error of the contract, and erasure of streamed
//! text and mentions with the user.
//!
//! Also run against PostgreSQL (`HERALD_TEST_STORE=postgres`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// The UTF-16 length of `s`, as a JavaScript string counts it.
fn utf16(s: &str) -> u64 {
    s.encode_utf16().count() as u64
}

/// Applies `append` pushes of `target` to `text` as a client does; false on an `at` that does not match.
fn apply(text: &mut String, push: &Value) -> bool {
    if push["at"].as_u64() != Some(utf16(text)) {
        return false;
    }
    text.push_str(push["text"].as_str().unwrap());
    true
}

#[tokio::test]
async fn a_stream_grows_by_coalesced_appends_and_ends_with_one_edit() {
    let s = TestServer::start().await;
    let mut bot = s.client("acme", "bot").await;
    let mut ann = s.client("acme", "ann").await;
    for c in [&mut bot, &mut ann] {
        c.ok(json!({"op": "join", "chat": "g"})).await;
    }
    ann.ok(json!({"op": "watch", "chat": "g"})).await;
    let sent = bot.ok(json!({"op": "send", "chat": "g", "body": {"text": "", "model": "x"}, "stream": true})).await;
    let target = sent["seq"].as_u64().unwrap();
    let first = ann.events("g", 1).await.remove(0);
    assert_eq!(first["stream"], "open", "{first}");

    // 60 tokens as fast as the bot can: durable when answered, pushed at most every 40 ms.
    let tokens: Vec<String> = (0..60).map(|i| format!("tok{i} é😀 ")).collect();
    let started = Instant::now();
    for t in &tokens {
        assert_eq!(bot.ok(json!({"op": "append", "chat": "g", "target": target, "text": t})).await, json!({}));
    }
    let spent = started.elapsed();
    let whole: String = tokens.concat();
    let mut seen = String::new();
    let mut pushes = Vec::new();
    while seen.len() < whole.len() {
        let p = ann.push().await;
        assert_eq!(p["ev"], "append", "appends are not events: {p}");
        assert_eq!(p["target"], target);
        assert!(apply(&mut seen, &p), "in order, each at the length before it: {p}");
        pushes.push(p);
    }
    assert_eq!(seen, whole);
    let most = (spent.as_millis() / 40 + 2) as usize;
    assert!(pushes.len() <= most, "{} pushes in {spent:?}: coalesced to one per 40 ms", pushes.len());
    // Each append is durable when answered: the stored text is all of it, still open.
    let f = ann.ok(json!({"op": "fetch", "chat": "g", "after": target - 1})).await;
    assert_eq!(f["events"][0]["body"], json!({"text": whole, "model": "x"}));
    assert_eq!(f["events"][0]["stream"], "open");
    assert_eq!(f["seq"], target, "appends take no seq");

    // A watch that starts mid-stream: the text so far in its replay, then the appends after it.
    let mut late = s.client("acme", "late").await;
    late.ok(json!({"op": "join", "chat": "g"})).await;
    ann.events("g", 1).await; // late's join
    late.ok(json!({"op": "watch", "chat": "g", "after": target - 1})).await;
    let replayed = late.events("g", 2).await;
    let mut late_text = replayed[0]["body"]["text"].as_str().unwrap().to_string();
    assert_eq!(late_text, whole);
    bot.ok(json!({"op": "append", "chat": "g", "target": target, "text": "more"})).await;
    let p = late.push().await;
    assert!(apply(&mut late_text, &p), "{p}");

    // done: one edit with the final body; the stored view says done.
    bot.ok(json!({"op": "append", "chat": "g", "target": target, "text": "!", "done": true})).await;
    let edit = loop {
        let p = ann.push().await;
        if p["ev"] == "event" {
            break p;
        }
    };
    let fin = format!("{whole}more!");
    assert_eq!(edit["type"], "edit");
    assert_eq!(edit["user"], "bot");
    assert_eq!(edit["body"], json!({"target": target, "body": {"text": fin, "model": "x"}}));
    let f = ann.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    let events = f["events"].as_array().unwrap();
    let view = events.iter().find(|e| e["seq"] == target).unwrap();
    assert_eq!((view["stream"].clone(), view["edited"].clone()), (json!("done"), edit["seq"].clone()));
    let stored: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(stored.iter().filter(|t| **t == "message" || **t == "edit").count(), 2, "two events: {stored:?}");
    let inbox = ann.ok(json!({"op": "inbox"})).await;
    assert_eq!(inbox["chats"][0]["unread"], 1, "the message counts once");

    // Errors.
    bot.err(json!({"op": "append", "chat": "g", "target": target, "text": "x"}), "bad_request").await; // ended
    ann.err(json!({"op": "append", "chat": "g", "target": target, "text": "x"}), "forbidden").await;
    bot.err(json!({"op": "append", "chat": "g", "target": 999, "text": "x"}), "not_found").await;
    bot.err(json!({"op": "append", "chat": "g", "target": 1, "text": "x"}), "not_found").await; // a join
    bot.err(json!({"op": "append", "chat": "g", "target": target, "text": ""}), "bad_request").await;
    bot.err(json!({"op": "append", "chat": "g", "target": target}), "bad_request").await;
    bot.err(json!({"op": "send", "chat": "g", "body": "text", "stream": true}), "bad_request").await;
    bot.err(json!({"op": "send", "chat": "g", "body": {"text": 5}, "stream": true}), "bad_request").await;
    let plain = bot.ok(json!({"op": "send", "chat": "g", "body": {"text": "a"}})).await["seq"].as_u64().unwrap();
    bot.err(json!({"op": "append", "chat": "g", "target": plain, "text": "x"}), "bad_request").await;
    let open = bot.ok(json!({"op": "send", "chat": "g", "body": {"text": "a"}, "stream": true})).await;
    let open = open["seq"].as_u64().unwrap();
    bot.err(json!({"op": "edit", "chat": "g", "target": open, "body": {"text": "b"}}), "bad_request").await;
    let big = "x".repeat(10 * 1024);
    bot.ok(json!({"op": "append", "chat": "g", "target": open, "text": big})).await;
    bot.err(json!({"op": "append", "chat": "g", "target": open, "text": big}), "too_large").await;
    // Deleting an open stream ends it.
    bot.ok(json!({"op": "delete", "chat": "g", "target": open})).await;
    bot.err(json!({"op": "append", "chat": "g", "target": open, "text": "x"}), "bad_request").await;
    let f = bot.ok(json!({"op": "fetch", "chat": "g", "after": open - 1, "limit": 1})).await;
    assert_eq!((f["events"][0]["stream"].clone(), f["events"][0]["deleted"].clone()), (json!("done"), json!(true)));
}

#[tokio::test]
async fn the_server_api_streams_as_the_messages_sender() {
    let s = TestServer::start().await;
    let mut ann = s.client("acme", "ann").await;
    ann.ok(json!({"op": "join", "chat": "g"})).await;
    ann.ok(json!({"op": "watch", "chat": "g"})).await;
    let body = json!({"type": "message", "user": "assistant", "body": {"text": "Hel"}, "stream": true});
    let (code, sent) = s.http("POST", "/v1/workspaces/acme/chats/g/events", Some(body)).await;
    assert_eq!(code, 200, "{sent}");
    let target = sent["seq"].as_u64().unwrap();
    assert_eq!(ann.events("g", 1).await[0]["stream"], "open");
    let path = format!("/v1/workspaces/acme/chats/g/events/{target}/append");
    assert_eq!(s.http("POST", &path, Some(json!({"text": "lo"}))).await, (200, json!({})));
    let p = ann.push().await;
    assert_eq!((p["text"].clone(), p["at"].clone()), (json!("lo"), json!(3)));
    assert_eq!(s.http("POST", &path, Some(json!({"text": "", "done": true}))).await, (200, json!({})));
    let edit = ann.events("g", 1).await.remove(0);
    assert_eq!((edit["user"].clone(), edit["body"]["body"]["text"].clone()), (json!("assistant"), json!("Hello")));
    // Errors.
    assert_eq!(s.http("POST", &path, Some(json!({"text": "x"}))).await.0, 400, "ended");
    assert_eq!(s.http("POST", &path, Some(json!({"text": ""}))).await.0, 400);
    let missing = "/v1/workspaces/acme/chats/g/events/999/append";
    assert_eq!(s.http("POST", missing, Some(json!({"text": "x"}))).await.0, 404);
    // A bot's answer in a thread, quoting and mentioning the asker.
    let (_, ask) = s
        .http(
            "POST",
            "/v1/workspaces/acme/chats/g/events",
            Some(json!({"type": "message", "user": "ann", "body": "q?"})),
        )
        .await;
    let ask = ask["seq"].as_u64().unwrap();
    let answer = json!({"type": "message", "user": "assistant", "body": {"text": "a"}, "stream": true,
                        "thread": ask, "quote": ask, "mentions": ["ann", "ann"]});
    let (code, v) = s.http("POST", "/v1/workspaces/acme/chats/g/events", Some(answer)).await;
    assert_eq!(code, 200, "{v}");
    let (_, page) = s.http("GET", &format!("/v1/workspaces/acme/chats/g/events?after={ask}"), None).await;
    let e = &page["events"][0];
    assert_eq!(
        (e["thread"].clone(), e["quote"].clone(), e["mentions"].clone()),
        (json!(ask), json!(ask), json!(["ann"]))
    );
    let nested = json!({"type": "message", "user": "x", "body": 1, "thread": v["seq"]});
    assert_eq!(s.http("POST", "/v1/workspaces/acme/chats/g/events", Some(nested)).await.0, 400, "threads do not nest");
    let many: Vec<String> = (0..51).map(|i| format!("u{i}")).collect();
    let too_many = json!({"type": "message", "user": "x", "body": 1, "mentions": many});
    assert_eq!(s.http("POST", "/v1/workspaces/acme/chats/g/events", Some(too_many)).await.0, 400);
    let system = json!({"type": "system", "body": {"text": "x"}, "stream": true});
    assert_eq!(s.http("POST", "/v1/workspaces/acme/chats/g/events", Some(system)).await.0, 400);
    let not_text = json!({"type": "message", "user": "a", "body": [1], "stream": true});
    assert_eq!(s.http("POST", "/v1/workspaces/acme/chats/g/events", Some(not_text)).await.0, 400);
}

#[tokio::test]
async fn erasing_a_user_erases_their_streamed_text_and_mentions() {
    let s = TestServer::start().await;
    let embedded = test_stores().await.is_empty();
    let mut bot = s.client("acme", "bot@example.com").await;
    let mut ann = s.client("acme", "ann").await;
    for c in [&mut bot, &mut ann] {
        c.ok(json!({"op": "join", "chat": "g"})).await;
    }
    let m = bot
        .ok(json!({"op": "send", "chat": "g", "body": {"text": "x"}, "stream": true, "mentions": ["ann"]}))
        .await["seq"]
        .as_u64()
        .unwrap();
    let secret = format!("streamed-{:016x}", rand::random::<u64>());
    bot.ok(json!({"op": "append", "chat": "g", "target": m, "text": secret})).await;
    if embedded {
        assert!(!files_containing(s.data.path(), secret.as_bytes()).is_empty(), "the test looks in the right place");
    }
    assert_eq!(ann.ok(json!({"op": "inbox"})).await["chats"][0]["mentions"], 1);
    let (code, v) = s.http("DELETE", "/v1/workspaces/acme/users/bot@example.com", None).await;
    assert_eq!(code, 200, "{v}");
    let f = ann.ok(json!({"op": "fetch", "chat": "g", "after": m - 1, "limit": 1})).await;
    let e = &f["events"][0];
    assert_eq!(
        (e["body"].clone(), e["deleted"].clone(), e["stream"].clone()),
        (Value::Null, json!(true), json!("done"))
    );
    assert!(e.get("mentions").is_none(), "{e}");
    assert_eq!(ann.ok(json!({"op": "inbox"})).await["chats"][0]["mentions"], 0);
    if embedded {
        // The embedded store's files lose the text within seconds (secure delete, checkpoints).
        let deadline = Instant::now() + Duration::from_secs(5);
        while !files_containing(s.data.path(), secret.as_bytes()).is_empty() {
            assert!(Instant::now() < deadline, "{:?}", files_containing(s.data.path(), secret.as_bytes()));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
