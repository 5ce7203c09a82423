//! Protocol v1.2's conversations over a real server: chat profiles, member and chat lists, threads
//! and quotes, mentions, pins and reaction counts, as clients and the server API see them, with
//! every error the contract gives. Streamed messages are in `streams.rs`.
//!
//! Also run against PostgreSQL (`HERALD_TEST_STORE=postgres`).

mod common;

use common::*;
use serde_json::{Value, json};

/// The event with `seq` among `events`.
fn at(events: &Value, seq: u64) -> Value {
    events.as_array().unwrap().iter().find(|e| e["seq"] == seq).cloned().unwrap_or(Value::Null)
}

/// The inbox entry of `chat` in an inbox answer.
fn entry(inbox: &Value, chat: &str) -> Value {
    inbox["chats"].as_array().unwrap().iter().find(|e| e["chat"] == chat).cloned().unwrap_or(Value::Null)
}

#[tokio::test]
async fn hello_says_protocol_1_2() {
    let s = TestServer::start().await;
    let token = s.token("acme", "alice").await;
    let mut c = Client::connect(&s.ws_url("acme")).await;
    let hello = c.ok(json!({"op": "hello", "token": token})).await;
    assert_eq!(hello["protocol"], "1.2");
}

#[tokio::test]
async fn a_chat_has_a_profile_that_members_change_and_everyone_sees() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    let joined = alice.ok(json!({"op": "join", "chat": "g"})).await;
    assert!(joined.get("profile").is_none(), "a chat without a profile answers v1's join: {joined}");
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "watch", "chat": "g"})).await;

    let set = alice.ok(json!({"op": "profile", "chat": "g", "name": "General", "data": {"topic": "all"}})).await;
    assert_eq!(set, json!({"seq": 3}));
    let pushed = bob.events("g", 1).await.remove(0);
    assert_eq!(pushed["type"], "profile");
    assert_eq!(pushed["user"], "alice");
    assert_eq!(pushed["body"], json!({"name": "General", "image": null, "data": {"topic": "all"}}));

    // Left out keeps, null clears; a request that changes nothing stores nothing.
    let same = bob.ok(json!({"op": "profile", "chat": "g", "name": "General"})).await;
    assert_eq!(same, json!({"seq": 3}), "nothing changed: the latest profile event's seq");
    let img = bob.ok(json!({"op": "profile", "chat": "g", "image": "https://x.test/g.png", "data": null})).await;
    assert_eq!(img, json!({"seq": 4}));
    let body = bob.events("g", 1).await.remove(0)["body"].clone();
    assert_eq!(body, json!({"name": "General", "image": "https://x.test/g.png", "data": null}));

    // join and inbox carry it; the server API's chat too.
    let mut carol = s.client("acme", "carol").await;
    let joined = carol.ok(json!({"op": "join", "chat": "g"})).await;
    assert_eq!(joined["profile"]["name"], "General");
    let inbox = carol.ok(json!({"op": "inbox"})).await;
    assert_eq!(entry(&inbox, "g")["profile"]["image"], "https://x.test/g.png");
    let (code, chat) = s.http("GET", "/v1/workspaces/acme/chats/g", None).await;
    assert_eq!(code, 200);
    assert_eq!((chat["name"].clone(), chat["data"].clone()), (json!("General"), Value::Null), "{chat}");

    // Errors.
    let mut dave = s.client("acme", "dave").await;
    dave.err(json!({"op": "profile", "chat": "g", "name": "mine"}), "forbidden").await;
    alice.err(json!({"op": "profile", "chat": "g", "name": "x".repeat(201)}), "bad_request").await;
    alice.err(json!({"op": "profile", "chat": "g", "image": "x".repeat(2001)}), "bad_request").await;
    alice.err(json!({"op": "profile", "chat": "g", "data": {"k": "x".repeat(4100)}}), "bad_request").await;
    alice.err(json!({"op": "profile", "chat": "g", "name": 5}), "bad_request").await;
    alice.err(json!({"op": "profile", "chat": "nope", "name": "x"}), "not_found").await;
    s.http("PUT", "/v1/workspaces/acme/chats/g/mutes/bob", Some(json!({}))).await;
    bob.err(json!({"op": "profile", "chat": "g", "name": "muted"}), "forbidden").await;

    // The server API changes it with no user, and keeps the chat open or closed as it was.
    s.http("PUT", "/v1/workspaces/acme/chats/closed", Some(json!({"open": false}))).await;
    let (code, v) = s.http("PUT", "/v1/workspaces/acme/chats/closed", Some(json!({"name": "Staff"}))).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!((v["name"].clone(), v["open"].clone(), v["seq"].clone()), (json!("Staff"), json!(false), json!(1)));
    let (_, page) = s.http("GET", "/v1/workspaces/acme/chats/closed/events", None).await;
    let event = &page["events"][0];
    assert_eq!(event["type"], "profile");
    assert!(event.get("user").is_none(), "the server API's profile event has no user: {event}");
    let (code, _) = s.http("PUT", "/v1/workspaces/acme/chats/closed", Some(json!({"name": "x".repeat(201)}))).await;
    assert_eq!(code, 400);
}

#[tokio::test]
async fn members_and_chats_are_listed_a_page_at_a_time() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "big"})).await;
    // User ids may be email addresses.
    let users: Vec<String> = (0..25).map(|i| format!("u{i:02}+tag@example.com")).collect();
    for u in &users {
        let (code, v) = s.http("PUT", &format!("/v1/workspaces/acme/chats/big/members/{u}"), None).await;
        assert_eq!(code, 200, "{u}: {v}");
    }
    let mut first = s.client("acme", &users[0]).await;
    first.ok(json!({"op": "read", "chat": "big", "seq": 3})).await;

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut req = json!({"op": "members", "chat": "big", "limit": 10});
        if let Some(c) = &cursor {
            req["cursor"] = json!(c);
        }
        let page = alice.ok(req).await;
        assert_eq!(page["count"], 26);
        for m in page["members"].as_array().unwrap() {
            seen.push((m["user"].as_str().unwrap().to_string(), m["read"].as_u64().unwrap()));
        }
        if page["more"] == false {
            assert!(page.get("cursor").is_none());
            break;
        }
        cursor = Some(page["cursor"].as_str().unwrap().to_string());
    }
    let mut expect: Vec<String> = users.clone();
    expect.push("alice".into());
    expect.sort();
    assert_eq!(seen.iter().map(|(u, _)| u.clone()).collect::<Vec<_>>(), expect, "sorted by id, each once");
    assert_eq!(seen.iter().find(|(u, _)| u == &users[0]).unwrap().1, 3, "with their read position");

    let (code, page) = s.http("GET", "/v1/workspaces/acme/chats/big/members?limit=2", None).await;
    assert_eq!(code, 200);
    assert_eq!(page["members"].as_array().unwrap().len(), 2);
    let next = page["cursor"].as_str().unwrap();
    let (_, page2) = s.http("GET", &format!("/v1/workspaces/acme/chats/big/members?limit=2&cursor={next}"), None).await;
    assert_eq!(page2["members"][0]["user"], users[1]);

    // Errors.
    let mut stranger = s.client("acme", "stranger").await;
    stranger.err(json!({"op": "members", "chat": "big"}), "forbidden").await;
    alice.err(json!({"op": "members", "chat": "big", "cursor": "zz"}), "bad_request").await;
    alice.err(json!({"op": "members", "chat": "nope"}), "not_found").await;
    let (code, _) = s.http("GET", "/v1/workspaces/acme/chats/nope/members", None).await;
    assert_eq!(code, 404);
    let (code, _) = s.http("PUT", "/v1/workspaces/acme/chats/big/members/bad%20id", None).await;
    assert_eq!(code, 400);

    // The workspace's chats, sorted by id, with their profiles.
    for c in ["c", "a", "b"] {
        s.http("PUT", &format!("/v1/workspaces/acme/chats/{c}"), Some(json!({"name": format!("Chat {c}")}))).await;
    }
    let (code, list) = s.http("GET", "/v1/workspaces/acme/chats?limit=2", None).await;
    assert_eq!(code, 200);
    let names: Vec<&str> = list["chats"].as_array().unwrap().iter().map(|c| c["chat"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(list["chats"][0]["name"], "Chat a");
    assert_eq!(list["more"], true);
    let (_, rest) =
        s.http("GET", &format!("/v1/workspaces/acme/chats?cursor={}", list["cursor"].as_str().unwrap()), None).await;
    let names: Vec<&str> = rest["chats"].as_array().unwrap().iter().map(|c| c["chat"].as_str().unwrap()).collect();
    assert_eq!(names, ["big", "c"]);
    assert_eq!(rest["more"], false);
    let (code, _) = s.http("GET", "/v1/workspaces/acme/chats?cursor=nothex", None).await;
    assert_eq!(code, 400);
}

#[tokio::test]
async fn threads_keep_replies_out_of_the_chat_and_count_them_for_their_followers() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    let mut carol = s.client("acme", "carol").await;
    for c in [&mut alice, &mut bob, &mut carol] {
        c.ok(json!({"op": "join", "chat": "g"})).await;
    }
    carol.ok(json!({"op": "watch", "chat": "g"})).await;
    let root = alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "plan?"}})).await["seq"].as_u64().unwrap();
    assert_eq!(root, 4);
    let r1 = bob.ok(json!({"op": "send", "chat": "g", "body": {"text": "yes"}, "thread": root})).await;
    assert_eq!(r1, json!({"seq": 5}));
    let r2 = carol.ok(json!({"op": "send", "chat": "g", "body": {"text": "no"}, "thread": root, "quote": 5})).await;
    assert_eq!(r2, json!({"seq": 6}));
    bob.ok(json!({"op": "send", "chat": "g", "body": {"text": "outside"}})).await; // 7
    // Replies are events of the chat like any other, pushed with their thread and quote.
    let pushed = carol.events("g", 4).await;
    assert_eq!((pushed[1]["thread"].clone(), pushed[2]["quote"].clone()), (json!(4), json!(5)));
    assert!(pushed[0].get("replies").is_none(), "a push is the event as stored: {}", pushed[0]);

    // The stored view: the root carries its replies.
    let f = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    assert_eq!(at(&f["events"], 4)["replies"], json!({"count": 2, "last": 6}));
    assert_eq!(at(&f["events"], 6)["thread"], 4);
    assert_eq!(at(&f["events"], 6)["quote"], 5);
    assert!(at(&f["events"], 7).get("replies").is_none());
    // fetch by thread: only that thread's replies.
    let t = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0, "thread": root})).await;
    let seqs: Vec<u64> = t["events"].as_array().unwrap().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [5, 6]);
    let t = alice.ok(json!({"op": "fetch", "chat": "g", "after": 5, "thread": root, "limit": 1})).await;
    assert_eq!((t["events"][0]["seq"].clone(), t["more"].clone()), (json!(6), json!(false)));

    // The chat's unread and last leave replies out; threads count them for followers.
    let inbox = alice.ok(json!({"op": "inbox"})).await;
    let g = entry(&inbox, "g");
    assert_eq!(g["unread"], 1, "bob's message 7 only: {g}");
    assert_eq!(g["last"]["seq"], 7);
    assert_eq!(g["threads"], 2, "alice sent the root: both replies are unread for her");
    let threads = alice.ok(json!({"op": "threads"})).await;
    let list = threads["threads"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["chat"], "g");
    assert_eq!(list[0]["root"]["seq"], 4);
    assert_eq!(list[0]["root"]["replies"], json!({"count": 2, "last": 6}));
    assert_eq!(list[0]["last"]["seq"], 6);
    assert_eq!((list[0]["read"].clone(), list[0]["unread"].clone()), (json!(0), json!(2)));
    let bobs = bob.ok(json!({"op": "threads", "chat": "g"})).await;
    assert_eq!(bobs["threads"][0]["unread"], 1, "bob replied: carol's reply is unread, his own is not");
    let mut dave = s.client("acme", "dave").await;
    dave.ok(json!({"op": "join", "chat": "g"})).await;
    assert_eq!(dave.ok(json!({"op": "threads"})).await["threads"], json!([]), "dave follows nothing");

    // read by thread: a read event with the thread, the position moves forward only.
    let read = alice.ok(json!({"op": "read", "chat": "g", "seq": 5, "thread": root})).await;
    assert_eq!(read, json!({"seq": 5}));
    let ev = carol.events("g", 2).await.pop().unwrap(); // dave's join, then the read
    assert_eq!((ev["type"].clone(), ev["body"].clone()), (json!("read"), json!({"seq": 5, "thread": 4})));
    assert_eq!(alice.ok(json!({"op": "read", "chat": "g", "seq": 4, "thread": root})).await, json!({"seq": 5}));
    let threads = alice.ok(json!({"op": "threads"})).await;
    assert_eq!((threads["threads"][0]["read"].clone(), threads["threads"][0]["unread"].clone()), (json!(5), json!(1)));
    assert_eq!(entry(&alice.ok(json!({"op": "inbox"})).await, "g")["threads"], 1);
    // A deleted reply no longer counts, and the root's last moves back.
    carol.ok(json!({"op": "delete", "chat": "g", "target": 6})).await;
    let f = alice.ok(json!({"op": "fetch", "chat": "g", "after": 3, "limit": 1})).await;
    assert_eq!(f["events"][0]["replies"], json!({"count": 1, "last": 5}));
    assert_eq!(alice.ok(json!({"op": "threads"})).await["threads"][0]["unread"], 0);

    // Errors.
    alice.err(json!({"op": "send", "chat": "g", "body": 1, "thread": 5}), "bad_request").await; // nesting
    alice.err(json!({"op": "send", "chat": "g", "body": 1, "thread": 99}), "not_found").await;
    alice.err(json!({"op": "send", "chat": "g", "body": 1, "thread": 1}), "not_found").await; // a join
    alice.err(json!({"op": "send", "chat": "g", "body": 1, "thread": 6}), "not_found").await; // deleted
    alice.err(json!({"op": "send", "chat": "g", "body": 1, "quote": 2}), "not_found").await;
    alice.err(json!({"op": "send", "chat": "g", "body": 1, "thread": "four"}), "bad_request").await;
    alice.err(json!({"op": "fetch", "chat": "g", "after": 0, "thread": 5}), "bad_request").await;
    alice.err(json!({"op": "fetch", "chat": "g", "after": 0, "thread": 99}), "not_found").await;
    alice.err(json!({"op": "read", "chat": "g", "seq": 99, "thread": root}), "bad_request").await;
    alice.err(json!({"op": "read", "chat": "g", "seq": 5, "thread": 98}), "not_found").await;
    alice.err(json!({"op": "threads", "cursor": "x"}), "bad_request").await;
    let mut stranger = s.client("acme", "stranger").await;
    stranger.err(json!({"op": "fetch", "chat": "g", "after": 0, "thread": root}), "forbidden").await;
    stranger.err(json!({"op": "threads", "chat": "g"}), "forbidden").await;
}

#[tokio::test]
async fn threads_page_latest_reply_first_across_chats() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    let mut roots = Vec::new();
    for chat in ["x", "y", "z"] {
        alice.ok(json!({"op": "join", "chat": chat})).await;
        bob.ok(json!({"op": "join", "chat": chat})).await;
        let root = alice.ok(json!({"op": "send", "chat": chat, "body": "root"})).await["seq"].as_u64().unwrap();
        roots.push((chat, root));
    }
    // Replies in the order y, x, z: z's thread is the latest.
    for i in [1usize, 0, 2] {
        let (chat, root) = roots[i];
        bob.ok(json!({"op": "send", "chat": chat, "body": "r", "thread": root})).await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let mut order = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut req = json!({"op": "threads", "limit": 1});
        if let Some(c) = &cursor {
            req["cursor"] = json!(c);
        }
        let page = alice.ok(req).await;
        for t in page["threads"].as_array().unwrap() {
            order.push(t["chat"].as_str().unwrap().to_string());
        }
        match page["cursor"].as_str() {
            Some(c) if page["more"] == true => cursor = Some(c.to_string()),
            _ => break,
        }
    }
    assert_eq!(order, ["z", "x", "y"]);
}

#[tokio::test]
async fn mentions_are_shown_per_the_latest_edit_and_counted_for_whom_they_name() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    for c in [&mut alice, &mut bob] {
        c.ok(json!({"op": "join", "chat": "g"})).await;
    }
    bob.ok(json!({"op": "inbox", "live": true})).await;
    let m = alice
        .ok(json!({"op": "send", "chat": "g", "body": "hi @bob", "mentions": ["bob", "carol", "bob", "alice"]}))
        .await["seq"]
        .as_u64()
        .unwrap();
    // The live inbox push counts it.
    let push = loop {
        let p = bob.push().await;
        if p["ev"] == "inbox" && p["seq"] == m {
            break p;
        }
    };
    assert_eq!(
        (push["unread"].clone(), push["mentions"].clone(), push["threads"].clone()),
        (json!(1), json!(1), json!(0))
    );
    let f = bob.ok(json!({"op": "fetch", "chat": "g", "after": m - 1})).await;
    assert_eq!(f["events"][0]["mentions"], json!(["bob", "carol", "alice"]), "duplicates removed, order kept");
    assert_eq!(entry(&bob.ok(json!({"op": "inbox"})).await, "g")["mentions"], 1);
    assert_eq!(entry(&alice.ok(json!({"op": "inbox"})).await, "g")["mentions"], 0, "her own message");

    // An edit without mentions keeps them; with `[]` clears them.
    alice.ok(json!({"op": "edit", "chat": "g", "target": m, "body": "hi all"})).await;
    let f = bob.ok(json!({"op": "fetch", "chat": "g", "after": m - 1, "limit": 1})).await;
    assert_eq!(f["events"][0]["mentions"], json!(["bob", "carol", "alice"]));
    let e = alice.ok(json!({"op": "edit", "chat": "g", "target": m, "body": "hi", "mentions": []})).await;
    let f = bob.ok(json!({"op": "fetch", "chat": "g", "after": m - 1})).await;
    assert!(f["events"][0].get("mentions").is_none(), "cleared: {}", f["events"][0]);
    assert_eq!(at(&f["events"], e["seq"].as_u64().unwrap())["mentions"], json!([]), "the edit as given");
    assert_eq!(entry(&bob.ok(json!({"op": "inbox"})).await, "g")["mentions"], 0);
    alice.ok(json!({"op": "edit", "chat": "g", "target": m, "body": "hi bob", "mentions": ["bob"]})).await;
    assert_eq!(entry(&bob.ok(json!({"op": "inbox"})).await, "g")["mentions"], 1);
    // Read past it: no longer counted. A mention in a thread reply counts too, and follows.
    bob.ok(json!({"op": "read", "chat": "g", "seq": m + 3})).await;
    assert_eq!(entry(&bob.ok(json!({"op": "inbox"})).await, "g")["mentions"], 0);
    let root = alice.ok(json!({"op": "send", "chat": "g", "body": "root"})).await["seq"].as_u64().unwrap();
    alice.ok(json!({"op": "send", "chat": "g", "body": "@bob", "thread": root, "mentions": ["bob"]})).await;
    let g = entry(&bob.ok(json!({"op": "inbox"})).await, "g");
    assert_eq!((g["mentions"].clone(), g["threads"].clone()), (json!(1), json!(1)), "{g}");
    // Deleting it takes its mention away.
    alice.ok(json!({"op": "delete", "chat": "g", "target": root + 1})).await;
    assert_eq!(entry(&bob.ok(json!({"op": "inbox"})).await, "g")["mentions"], 0);

    // Errors.
    let many: Vec<String> = (0..51).map(|i| format!("u{i}")).collect();
    alice.err(json!({"op": "send", "chat": "g", "body": 1, "mentions": many}), "bad_request").await;
    alice.err(json!({"op": "send", "chat": "g", "body": 1, "mentions": ["bad id"]}), "bad_request").await;
    alice.err(json!({"op": "send", "chat": "g", "body": 1, "mentions": "bob"}), "bad_request").await;
    alice.err(json!({"op": "edit", "chat": "g", "target": m, "body": 1, "mentions": [1]}), "bad_request").await;
}

#[tokio::test]
async fn pins_and_reaction_counts_are_in_the_stored_view() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    for c in [&mut alice, &mut bob] {
        c.ok(json!({"op": "join", "chat": "g"})).await;
    }
    let m = alice.ok(json!({"op": "send", "chat": "g", "body": "pin me"})).await["seq"].as_u64().unwrap();
    let pin = bob.ok(json!({"op": "pin", "chat": "g", "target": m})).await["seq"].as_u64().unwrap();
    assert_eq!(pin, m + 1);
    assert_eq!(bob.ok(json!({"op": "pin", "chat": "g", "target": m, "on": true})).await["seq"], pin, "already pinned");
    let f = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    assert_eq!(at(&f["events"], m)["pinned"], true);
    let ev = at(&f["events"], pin);
    assert_eq!((ev["type"].clone(), ev["body"].clone()), (json!("pin"), json!({"target": m, "on": true})));
    let pins = alice.ok(json!({"op": "pins", "chat": "g"})).await;
    assert_eq!(pins["pins"][0]["seq"], pin);
    assert_eq!(pins["pins"][0]["user"], "bob");
    assert_eq!(pins["pins"][0]["message"]["seq"], m);
    let (code, api) = s.http("GET", "/v1/workspaces/acme/chats/g/pins", None).await;
    assert_eq!((code, api), (200, pins.clone()));
    let off = alice.ok(json!({"op": "pin", "chat": "g", "target": m, "on": false})).await["seq"].as_u64().unwrap();
    assert_eq!(alice.ok(json!({"op": "pin", "chat": "g", "target": m, "on": false})).await["seq"], off);
    assert_eq!(alice.ok(json!({"op": "pins", "chat": "g"})).await["pins"], json!([]));

    // Reactions: each emoji's count of users whose reaction is on now.
    for (who, emoji, on) in [("alice", "+1", true), ("bob", "+1", true), ("bob", "+1", true), ("bob", "heart", true)] {
        let c = if who == "alice" { &mut alice } else { &mut bob };
        c.ok(json!({"op": "react", "chat": "g", "target": m, "emoji": emoji, "on": on})).await;
    }
    let f = alice.ok(json!({"op": "fetch", "chat": "g", "after": m - 1, "limit": 1})).await;
    assert_eq!(f["events"][0]["reactions"], json!({"+1": 2, "heart": 1}));
    let r = alice.ok(json!({"op": "reactions", "chat": "g", "target": m})).await;
    assert_eq!(r["reactions"], json!({"+1": ["alice", "bob"], "heart": ["bob"]}));
    bob.ok(json!({"op": "react", "chat": "g", "target": m, "emoji": "heart", "on": false})).await;
    let f = alice.ok(json!({"op": "fetch", "chat": "g", "after": m - 1, "limit": 1})).await;
    assert_eq!(f["events"][0]["reactions"], json!({"+1": 2}));

    // At most 50 pins; a deleted message is no longer pinned.
    let mut seqs = Vec::new();
    for i in 0..51 {
        seqs.push(alice.ok(json!({"op": "send", "chat": "g", "body": i})).await["seq"].as_u64().unwrap());
    }
    for &q in &seqs[..50] {
        alice.ok(json!({"op": "pin", "chat": "g", "target": q})).await;
    }
    let err = alice.err(json!({"op": "pin", "chat": "g", "target": seqs[50]}), "bad_request").await;
    assert!(err["message"].as_str().unwrap().contains("50"), "{err}");
    alice.ok(json!({"op": "delete", "chat": "g", "target": seqs[0]})).await;
    alice.ok(json!({"op": "pin", "chat": "g", "target": seqs[50]})).await;
    let pins = alice.ok(json!({"op": "pins", "chat": "g"})).await;
    assert_eq!(pins["pins"].as_array().unwrap().len(), 50);
    assert_eq!(pins["pins"][0]["message"]["seq"], seqs[50], "latest pin first");

    // Errors.
    alice.err(json!({"op": "pin", "chat": "g", "target": seqs[0]}), "not_found").await; // deleted
    alice.err(json!({"op": "pin", "chat": "g", "target": 1}), "not_found").await; // a join
    alice.err(json!({"op": "pin", "chat": "g"}), "bad_request").await;
    let mut stranger = s.client("acme", "stranger").await;
    stranger.err(json!({"op": "pin", "chat": "g", "target": m}), "forbidden").await;
    stranger.err(json!({"op": "pins", "chat": "g"}), "forbidden").await;
    stranger.err(json!({"op": "reactions", "chat": "g", "target": m}), "forbidden").await;
    s.http("PUT", "/v1/workspaces/acme/chats/g/mutes/bob", Some(json!({}))).await;
    bob.err(json!({"op": "pin", "chat": "g", "target": m}), "forbidden").await;
}

#[tokio::test]
async fn a_hot_chats_window_shows_the_same_stored_view_as_the_store() {
    // Every delivery makes the chat hot: fetches are served from the window.
    let s = TestServer::start_with(|c| c.hub.hot_deliveries = 1).await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    for c in [&mut alice, &mut bob] {
        c.ok(json!({"op": "join", "chat": "g"})).await;
        c.ok(json!({"op": "watch", "chat": "g"})).await;
    }
    // Ten events in a second turn a chat hot; its window starts then.
    for i in 0..12 {
        alice.ok(json!({"op": "send", "chat": "g", "body": i})).await;
    }
    let root = alice.ok(json!({"op": "send", "chat": "g", "body": "root", "mentions": ["bob"]})).await["seq"]
        .as_u64()
        .unwrap();
    let r1 = bob.ok(json!({"op": "send", "chat": "g", "body": "r1", "thread": root})).await["seq"].as_u64().unwrap();
    bob.ok(json!({"op": "send", "chat": "g", "body": "r2", "thread": root})).await;
    alice.ok(json!({"op": "react", "chat": "g", "target": root, "emoji": "+1"})).await;
    bob.ok(json!({"op": "react", "chat": "g", "target": root, "emoji": "+1"})).await;
    bob.ok(json!({"op": "react", "chat": "g", "target": root, "emoji": "+1", "on": false})).await;
    bob.ok(json!({"op": "pin", "chat": "g", "target": root})).await;
    alice.ok(json!({"op": "edit", "chat": "g", "target": root, "body": "root!", "mentions": []})).await;
    bob.ok(json!({"op": "delete", "chat": "g", "target": r1 + 1})).await;
    bob.ok(json!({"op": "pin", "chat": "g", "target": r1})).await;
    bob.ok(json!({"op": "delete", "chat": "g", "target": r1})).await;
    let last = alice.ok(json!({"op": "send", "chat": "g", "body": "end"})).await["seq"].as_u64().unwrap();
    // Wait until the window holds the last event (bob's watch has seen it).
    loop {
        let p = bob.push().await;
        if p["ev"] == "notify" && p["seq"].as_u64() >= Some(last) || p["seq"] == last {
            break;
        }
    }
    // Every page a client can ask for (those the window holds are served from it) is the store's.
    let hits = |text: &str| {
        text.lines()
            .filter(|l| l.starts_with("herald_hub_cache_reads_total{") && l.contains(r#"read="fetch""#))
            .filter(|l| l.contains(r#"outcome="hit""#))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>()
    };
    let (_, before) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    for after in 0..last {
        let windowed = bob.ok(json!({"op": "fetch", "chat": "g", "after": after})).await;
        let (_, stored) = s.http("GET", &format!("/v1/workspaces/acme/chats/g/events?after={after}"), None).await;
        assert_eq!(windowed["events"], stored["events"], "after {after}: the window's view is the store's");
    }
    let (_, after) = http_raw(s.addr, "GET", "/metrics", None, None).await;
    assert!(hits(&after) - hits(&before) >= 5.0, "pages served from the window");
    let (_, stored) = s.http("GET", "/v1/workspaces/acme/chats/g/events", None).await;
    let root_view = at(&stored["events"], root);
    assert_eq!(root_view["reactions"], json!({"+1": 1}), "{root_view}");
    assert_eq!(root_view["pinned"], true);
    assert!(root_view.get("mentions").is_none() && root_view.get("replies").is_none(), "{root_view}");
}
