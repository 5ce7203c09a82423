//! Protocol v1.1's inbox over a real server: a user's chats by latest
//! activity, exact unread counts, the latest message as fetch shows it,
//! pages with a cursor, and the server API's route.
//!
//! Also run against PostgreSQL (`HERALD_TEST_STORE=postgres`, two shards:
//! pages then merge chats from both).

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// Waits a few ms so the next event gets a later `ts` than the last one.
async fn next_ms() {
    tokio::time::sleep(Duration::from_millis(3)).await;
}

fn names(inbox: &Value) -> Vec<String> {
    inbox["chats"].as_array().unwrap().iter().map(|c| c["chat"].as_str().unwrap().to_string()).collect()
}

fn entry(inbox: &Value, chat: &str) -> Value {
    inbox["chats"].as_array().unwrap().iter().find(|c| c["chat"] == chat).cloned().unwrap_or(Value::Null)
}

#[tokio::test]
async fn the_inbox_lists_a_users_chats_by_activity_with_exact_unread_counts() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    assert_eq!(alice.ok(json!({"op": "inbox"})).await, json!({"chats": [], "more": false}));

    for chat in ["a", "b", "c"] {
        alice.ok(json!({"op": "join", "chat": chat})).await;
        bob.ok(json!({"op": "join", "chat": chat})).await;
        next_ms().await;
    }
    bob.ok(json!({"op": "join", "chat": "bobs-only"})).await;
    // In b: three messages of bob's, one of alice's, a reaction and an edit.
    for i in 0..3 {
        bob.ok(json!({"op": "send", "chat": "b", "body": {"n": i}})).await; // 3, 4, 5
    }
    alice.ok(json!({"op": "send", "chat": "b", "body": "mine"})).await; // 6
    bob.ok(json!({"op": "react", "chat": "b", "target": 6, "emoji": "+1"})).await; // 7
    bob.ok(json!({"op": "edit", "chat": "b", "target": 5, "body": {"n": "two"}})).await; // 8
    next_ms().await;
    // In a: one of bob's, then deleted; then one more.
    bob.ok(json!({"op": "send", "chat": "a", "body": "oops"})).await; // 3
    bob.ok(json!({"op": "delete", "chat": "a", "target": 3})).await; // 4
    bob.ok(json!({"op": "send", "chat": "a", "body": "hi"})).await; // 5
    next_ms().await;

    let inbox = alice.ok(json!({"op": "inbox"})).await;
    assert_eq!(names(&inbox), ["a", "b", "c"], "latest activity first; only alice's chats: {inbox}");
    assert_eq!(inbox["more"], false);
    assert!(inbox.get("cursor").is_none());
    let a = entry(&inbox, "a");
    assert_eq!((a["seq"].clone(), a["read"].clone(), a["unread"].clone()), (json!(5), json!(0), json!(1)));
    assert_eq!(a["last"]["seq"], 5);
    assert_eq!(a["last"]["body"], "hi");
    let b = entry(&inbox, "b");
    assert_eq!((b["seq"].clone(), b["unread"].clone()), (json!(8), json!(3)), "bob's three, not alice's own: {b}");
    assert_eq!(b["last"]["seq"], 6);
    assert_eq!(b["last"]["user"], "alice");
    let c = entry(&inbox, "c");
    assert_eq!((c["seq"].clone(), c["unread"].clone(), c["last"].clone()), (json!(2), json!(0), Value::Null));
    assert!(a["ts"].as_i64().unwrap() > b["ts"].as_i64().unwrap());

    // Reading moves the count; the chat's activity moves with the read event.
    assert_eq!(alice.ok(json!({"op": "read", "chat": "b", "seq": 4})).await, json!({"seq": 4}));
    let b = entry(&alice.ok(json!({"op": "inbox"})).await, "b");
    assert_eq!((b["read"].clone(), b["unread"].clone(), b["seq"].clone()), (json!(4), json!(1), json!(9)));
    // Deleting the one left unread leaves nothing; the latest message is shown as fetch shows it.
    bob.ok(json!({"op": "delete", "chat": "b", "target": 5})).await;
    bob.ok(json!({"op": "edit", "chat": "b", "target": 3, "body": "x"})).await; // below alice's read: no change
    alice.ok(json!({"op": "delete", "chat": "b", "target": 6})).await;
    let b = entry(&alice.ok(json!({"op": "inbox"})).await, "b");
    assert_eq!(b["unread"], 0, "{b}");
    assert_eq!(b["last"]["seq"], 6);
    assert_eq!(b["last"]["deleted"], true);
    assert_eq!(b["last"]["body"], Value::Null);
    // The edited view of a last message.
    bob.ok(json!({"op": "send", "chat": "c", "body": "v1"})).await; // 3
    bob.ok(json!({"op": "edit", "chat": "c", "target": 3, "body": "v2"})).await; // 4
    let c = entry(&alice.ok(json!({"op": "inbox"})).await, "c");
    assert_eq!(
        (c["last"]["body"].clone(), c["last"]["edited"].clone(), c["unread"].clone()),
        (json!("v2"), json!(4), json!(1))
    );

    // The server API's route answers the same.
    let op = alice.ok(json!({"op": "inbox"})).await;
    let (status, http) = s.http("GET", "/v1/workspaces/acme/users/alice/inbox", None).await;
    assert_eq!(status, 200, "{http}");
    assert_eq!(http, op);
    assert_eq!(names(&op), ["c", "b", "a"]);

    // Leaving takes a chat out; another workspace's alice has an inbox of her own.
    alice.ok(json!({"op": "leave", "chat": "a"})).await;
    assert_eq!(names(&alice.ok(json!({"op": "inbox"})).await), ["c", "b"]);
    let mut other = s.client("other", "alice").await;
    assert_eq!(other.ok(json!({"op": "inbox"})).await["chats"], json!([]));
}

#[tokio::test]
async fn inbox_pages_follow_their_cursor_through_every_chat_once() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    // 7 chats, some created in the same millisecond: ties go by name.
    let mut chats: Vec<String> = (0..7).map(|i| format!("chat-{i}")).collect();
    for (i, chat) in chats.iter().enumerate() {
        alice.ok(json!({"op": "join", "chat": chat})).await;
        if i % 2 == 0 {
            next_ms().await;
        }
    }
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut cursor: Option<String> = None;
    loop {
        let mut req = json!({"op": "inbox", "limit": 3, "live": false});
        if let Some(c) = &cursor {
            req["cursor"] = json!(c);
        }
        let page = alice.ok(req).await;
        pages += 1;
        assert!(page["chats"].as_array().unwrap().len() <= 3);
        seen.extend(names(&page));
        if page["more"] == false {
            assert!(page.get("cursor").is_none());
            break;
        }
        cursor = Some(page["cursor"].as_str().unwrap().to_string());
        // The HTTP route takes the same cursor.
        let (status, http) = s
            .http(
                "GET",
                &format!("/v1/workspaces/acme/users/alice/inbox?limit=3&cursor={}", cursor.as_ref().unwrap()),
                None,
            )
            .await;
        assert_eq!(status, 200, "{http}");
    }
    assert_eq!(pages, 3);
    let whole = alice.ok(json!({"op": "inbox"})).await;
    assert_eq!(seen, names(&whole), "pages in order, every chat once");
    chats.sort();
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(sorted, chats);
    let ts: Vec<i64> = whole["chats"].as_array().unwrap().iter().map(|c| c["ts"].as_i64().unwrap()).collect();
    assert!(ts.windows(2).all(|w| w[0] >= w[1]), "{ts:?}");

    // A limit above the largest is capped, not refused.
    assert_eq!(alice.ok(json!({"op": "inbox", "limit": 100000})).await["chats"].as_array().unwrap().len(), 7);
    // Refusals.
    alice.err(json!({"op": "inbox", "limit": 0}), "bad_request").await;
    alice.err(json!({"op": "inbox", "cursor": "not-a-cursor"}), "bad_request").await;
    alice.err(json!({"op": "inbox", "cursor": 5}), "bad_request").await;
    for (path, want) in [
        ("/v1/workspaces/acme/users/alice/inbox?limit=0", 400),
        ("/v1/workspaces/acme/users/alice/inbox?cursor=zz", 400),
        ("/v1/workspaces/acme/users/alice/inbox?limit=x", 400),
        ("/v1/workspaces/acme/users/a%20b/inbox", 400),
        ("/v1/workspaces/acme/users/nobody/inbox", 200),
    ] {
        let (status, body) = s.http("GET", path, None).await;
        assert_eq!(status, want, "{path}: {body}");
    }
    let (status, _) = http(s.addr, "GET", "/v1/workspaces/acme/users/alice/inbox", None, None).await;
    assert_eq!(status, 401);
}

/// The inbox pushes of `chat` among the next pushes within `wait` (others dropped).
async fn inbox_pushes(c: &mut Client, chat: &str, wait: Duration) -> Vec<(Value, tokio::time::Instant)> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut got = Vec::new();
    while let Some(p) = c.push_within(deadline.saturating_duration_since(tokio::time::Instant::now())).await {
        if p["ev"] == "inbox" && p["chat"] == chat {
            got.push((p, tokio::time::Instant::now()));
        }
    }
    got
}

/// The next inbox push of `chat`, waiting at most 3 s; other pushes are dropped.
async fn next_inbox(c: &mut Client, chat: &str) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let p = c.push_within(left).await.unwrap_or_else(|| panic!("no inbox push of {chat}"));
        if p["ev"] == "inbox" && p["chat"] == chat {
            return p;
        }
    }
}

#[tokio::test]
async fn a_live_inbox_hears_of_messages_reads_on_other_devices_joins_and_leaves() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut phone = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    for chat in ["a", "b"] {
        alice.ok(json!({"op": "join", "chat": chat})).await;
        bob.ok(json!({"op": "join", "chat": chat})).await;
    }
    bob.ok(json!({"op": "send", "chat": "a", "body": "before"})).await;
    let page = alice.ok(json!({"op": "inbox", "live": true})).await;
    assert_eq!(names(&page), ["a", "b"]);
    assert_eq!(alice.queued_pushes(), 0, "no push before the reply");
    assert!(alice.push_within(Duration::from_millis(400)).await.is_none(), "nothing changed since the reply");

    // A message from bob: one push, with alice's unread count.
    let sent = bob.ok(json!({"op": "send", "chat": "a", "body": "hi"})).await;
    let p = next_inbox(&mut alice, "a").await;
    assert_eq!((p["seq"].clone(), p["unread"].clone()), (sent["seq"].clone(), json!(2)), "{p}");
    assert!(p["ts"].as_i64().unwrap() > 0 && p.get("left").is_none(), "{p}");

    // A burst: a few pushes, not one per message, the last one exact. (The
    // 250 ms spacing itself is checked on the server's clock, in the hub's tests.)
    let burst = tokio::time::Instant::now();
    for i in 0..30 {
        bob.ok(json!({"op": "send", "chat": "b", "body": i})).await;
    }
    let pushes = inbox_pushes(&mut alice, "b", Duration::from_millis(900)).await;
    let most = 2 + (burst.elapsed().as_millis() / 250) as usize;
    assert!(!pushes.is_empty() && pushes.len() <= most, "coalesced, at most {most}: {pushes:?}");
    let last = &pushes.last().unwrap().0;
    assert_eq!((last["seq"].clone(), last["unread"].clone()), (json!(32), json!(30)), "{last}");

    // Reading on the phone reaches the laptop's inbox.
    phone.ok(json!({"op": "read", "chat": "b", "seq": 32})).await;
    let p = next_inbox(&mut alice, "b").await;
    assert_eq!((p["seq"].clone(), p["unread"].clone()), (json!(33), json!(0)), "{p}");

    // A chat joined on the phone is followed from then on.
    phone.ok(json!({"op": "join", "chat": "c"})).await;
    let p = next_inbox(&mut alice, "c").await;
    assert_eq!((p["seq"].clone(), p["unread"].clone()), (json!(1), json!(0)), "{p}");
    bob.ok(json!({"op": "join", "chat": "c"})).await;
    let m = bob.ok(json!({"op": "send", "chat": "c", "body": "welcome"})).await;
    let p = next_inbox(&mut alice, "c").await;
    assert_eq!((p["seq"].clone(), p["unread"].clone()), (m["seq"].clone(), json!(1)), "{p}");
    // A delete takes it out of the count.
    bob.ok(json!({"op": "delete", "chat": "c", "target": m["seq"]})).await;
    let p = next_inbox(&mut alice, "c").await;
    assert_eq!(p["unread"], 0, "{p}");

    // Leaving (on the phone) and being banned (server API) end those chats with `left`.
    phone.ok(json!({"op": "leave", "chat": "a"})).await;
    let p = next_inbox(&mut alice, "a").await;
    assert_eq!((p["left"].clone(), p["unread"].clone()), (json!(true), json!(0)), "{p}");
    assert_eq!(s.http("PUT", "/v1/workspaces/acme/chats/c/bans/alice", None).await.0, 200);
    let p = next_inbox(&mut alice, "c").await;
    assert_eq!(p["left"], true, "{p}");
    bob.ok(json!({"op": "send", "chat": "a", "body": "after"})).await;
    bob.ok(json!({"op": "send", "chat": "c", "body": "after"})).await;
    for chat in ["a", "c"] {
        assert!(inbox_pushes(&mut alice, chat, Duration::from_millis(500)).await.is_empty(), "{chat} left");
    }
    // Joining again follows it again.
    phone.ok(json!({"op": "join", "chat": "a"})).await;
    let p = next_inbox(&mut alice, "a").await;
    assert!(p.get("left").is_none(), "{p}");

    // A server API post counts like any message; an inbox without `live` gets no pushes.
    let (status, _) = s
        .http(
            "POST",
            "/v1/workspaces/acme/chats/b/events",
            Some(json!({"type": "message", "user": "bob", "body": "api"})),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(next_inbox(&mut alice, "b").await["unread"], 1);
    assert!(inbox_pushes(&mut phone, "b", Duration::from_millis(400)).await.is_empty(), "the phone never asked live");
    let (_, metrics) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    assert_eq!(metric(&metrics, "herald_inbox_listeners"), 1.0, "{metrics}");
    drop(alice);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, metrics) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    assert_eq!(metric(&metrics, "herald_inbox_listeners"), 0.0, "closing ends it");
    assert_eq!(metric(&metrics, "herald_inbox_chats"), 0.0, "and its following");
}
