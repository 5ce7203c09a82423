//! Typing and presence (protocol v1.1) on one node: what a member sees of
//! the others typing and coming and going, and what the server API says.
//! Cross-node cases are in `tests/cluster.rs`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// Longer than the typing window: the next `typing` is pushed again.
const PAST_TYPING_WINDOW: Duration = Duration::from_millis(2100);

async fn member(s: &TestServer, user: &str, chat: &str) -> Client {
    let mut c = s.client("w", user).await;
    c.ok(json!({"op": "join", "chat": chat})).await;
    c
}

async fn watcher(s: &TestServer, user: &str, chat: &str) -> Client {
    let mut c = member(s, user, chat).await;
    c.ok(json!({"op": "watch", "chat": chat})).await;
    c
}

/// The next push of kind `ev`, passing over event pushes (joins and the like).
async fn next_ev(c: &mut Client, ev: &str) -> Value {
    loop {
        let p = c.push().await;
        if p["ev"] == ev {
            return p;
        }
        assert_eq!(p["ev"], "event", "unexpected push {p}");
    }
}

/// The first push of kind `ev` within `wait`, passing over others.
async fn any_ev(c: &mut Client, ev: &str, wait: Duration) -> Option<Value> {
    let deadline = Instant::now() + wait;
    loop {
        let p = c.push_within(deadline.saturating_duration_since(Instant::now())).await?;
        if p["ev"] == ev {
            return Some(p);
        }
    }
}

#[tokio::test]
async fn typing_reaches_the_other_watchers_not_the_typists_own_connections_and_is_throttled() {
    let s = TestServer::start().await;
    let mut alice_watching = watcher(&s, "alice", "g").await;
    let mut alice_typing = member(&s, "alice", "g").await;
    let mut bob = watcher(&s, "bob", "g").await;
    let mut carol = watcher(&s, "carol", "g").await;

    assert_eq!(alice_typing.ok(json!({"op": "typing", "chat": "g"})).await, json!({}));
    for c in [&mut bob, &mut carol] {
        assert_eq!(next_ev(c, "typing").await, json!({"ev": "typing", "chat": "g", "user": "alice"}));
    }
    let own = any_ev(&mut alice_watching, "typing", Duration::from_millis(300)).await;
    assert_eq!(own, None, "not to the typist's own connections");

    // Inside the window: answered, not pushed.
    let started = Instant::now();
    assert_eq!(alice_typing.ok(json!({"op": "typing", "chat": "g"})).await, json!({}));
    assert_eq!(
        alice_watching.ok(json!({"op": "typing", "chat": "g"})).await,
        json!({}),
        "any connection of the member"
    );
    assert_eq!(any_ev(&mut bob, "typing", Duration::from_millis(300)).await, None, "throttled within 2 s");

    // Another member is not throttled by alice's window.
    carol.ok(json!({"op": "typing", "chat": "g"})).await;
    assert_eq!(next_ev(&mut bob, "typing").await, json!({"ev": "typing", "chat": "g", "user": "carol"}));
    assert_eq!(next_ev(&mut alice_watching, "typing").await["user"], "carol");
    assert_eq!(any_ev(&mut carol, "typing", Duration::from_millis(200)).await, None);

    tokio::time::sleep(PAST_TYPING_WINDOW.saturating_sub(started.elapsed())).await;
    alice_typing.ok(json!({"op": "typing", "chat": "g"})).await;
    let again = next_ev(&mut bob, "typing").await;
    assert_eq!(again, json!({"ev": "typing", "chat": "g", "user": "alice"}), "pushed again after 2 s");

    // Nothing is stored.
    let f = bob.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    assert!(f["events"].as_array().unwrap().iter().all(|e| e["type"] == "join"), "{f}");
}

#[tokio::test]
async fn typing_and_presence_are_for_members_only() {
    let s = TestServer::start().await;
    let _alice = watcher(&s, "alice", "g").await;
    let mut mallory = s.client("w", "mallory").await;
    mallory.err(json!({"op": "typing", "chat": "g"}), "forbidden").await;
    mallory.err(json!({"op": "presence", "chat": "g"}), "forbidden").await;
    mallory.err(json!({"op": "typing", "chat": "nowhere"}), "not_found").await;
    mallory.err(json!({"op": "typing"}), "bad_request").await;
    mallory.err(json!({"op": "presence", "chat": "bad chat"}), "bad_request").await;
    let (status, body) = s.http("GET", "/v1/workspaces/w/chats/nowhere/presence", None).await;
    assert_eq!((status, body["error"]["code"].clone()), (404, json!("not_found")));
    let (status, _) = http(s.addr, "GET", "/v1/workspaces/w/chats/g/presence", None, None).await;
    assert_eq!(status, 401, "the route needs the api key");
    // A member who left is no member.
    let mut bob = member(&s, "bob", "g").await;
    bob.ok(json!({"op": "leave", "chat": "g"})).await;
    bob.err(json!({"op": "typing", "chat": "g"}), "forbidden").await;
}

#[tokio::test]
async fn presence_follows_watches_unwatches_leaves_and_disconnects() {
    let s = TestServer::start().await;
    let mut alice = watcher(&s, "alice", "g").await;
    assert_eq!(alice.ok(json!({"op": "presence", "chat": "g"})).await, json!({"count": 1, "users": ["alice"]}));
    let present = |user: &str, present: bool| json!({"ev": "presence", "chat": "g", "user": user, "present": present});
    // A watcher that never asks for presence gets no presence pushes (a v1 client).
    let mut quiet = watcher(&s, "quiet", "g").await;
    assert_eq!(next_ev(&mut alice, "presence").await, present("quiet", true));

    // Bob on two connections: present once, until both stop watching.
    let mut bob1 = watcher(&s, "bob", "g").await;
    assert_eq!(next_ev(&mut alice, "presence").await, present("bob", true));
    let bob2 = watcher(&s, "bob", "g").await;
    assert_eq!(any_ev(&mut alice, "presence", Duration::from_millis(200)).await, None, "bob was present already");
    let (status, body) = s.http("GET", "/v1/workspaces/w/chats/g/presence", None).await;
    assert_eq!((status, body), (200, json!({"count": 3, "users": ["alice", "bob", "quiet"]})));

    bob1.ok(json!({"op": "unwatch", "chat": "g"})).await;
    let still = any_ev(&mut alice, "presence", Duration::from_millis(200)).await;
    assert_eq!(still, None, "bob still watches on another connection");
    drop(bob2); // the connection closes
    assert_eq!(next_ev(&mut alice, "presence").await, present("bob", false));

    // Unwatch ends presence: a member who is not watching is not present.
    bob1.ok(json!({"op": "watch", "chat": "g"})).await;
    assert_eq!(next_ev(&mut alice, "presence").await, present("bob", true));
    bob1.ok(json!({"op": "unwatch", "chat": "g"})).await;
    assert_eq!(next_ev(&mut alice, "presence").await, present("bob", false));

    // Leaving ends it too, after the leave event.
    quiet.ok(json!({"op": "leave", "chat": "g"})).await;
    let leave = alice.push().await;
    assert_eq!((leave["ev"].clone(), leave["type"].clone()), (json!("event"), json!("leave")));
    assert_eq!(alice.push().await, present("quiet", false));
    assert_eq!(alice.ok(json!({"op": "presence", "chat": "g"})).await, json!({"count": 1, "users": ["alice"]}));

    // The watcher that never asked saw no presence push at all.
    while let Some(p) = quiet.push_within(Duration::from_millis(100)).await {
        assert_eq!(p["ev"], "event", "{p}");
    }
}

/// Above 100 present users, watchers get the count, at most every 5 s, instead of each change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn above_100_present_users_the_count_is_pushed_at_most_every_5_s() {
    let s = TestServer::start().await;
    let mut alice = watcher(&s, "alice", "big").await;
    alice.ok(json!({"op": "presence", "chat": "big"})).await;
    // Alice's pushes are read as they come, timed, while the others connect.
    let reader = tokio::spawn(async move {
        let mut user_pushes = 0;
        let mut counts: Vec<(Instant, u64)> = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while counts.last().is_none_or(|c| c.1 != 121) {
            assert!(Instant::now() < deadline, "no count of 121: {counts:?}");
            let p = next_ev(&mut alice, "presence").await;
            match p.get("count") {
                Some(n) => counts.push((Instant::now(), n.as_u64().unwrap())),
                None => {
                    assert!(counts.is_empty(), "no per-user push once above 100: {p}");
                    assert_eq!(p["present"], true);
                    user_pushes += 1;
                }
            }
        }
        (alice, user_pushes, counts)
    });
    let mut others = Vec::new();
    for i in 0..120 {
        others.push(watcher(&s, &format!("u{i:03}"), "big").await);
    }
    // 2..=100 present: one push per user; then the count.
    let (mut alice, user_pushes, counts) = reader.await.unwrap();
    assert_eq!(user_pushes, 99);
    assert_eq!(counts[0].1, 101, "the first change above 100 is pushed at once");
    for pair in counts.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= Duration::from_millis(4900), "at most one count every 5 s: {counts:?}");
    }
    let ok = alice.ok(json!({"op": "presence", "chat": "big"})).await;
    assert_eq!(ok["count"], 121);
    let users = ok["users"].as_array().unwrap();
    assert_eq!(users.len(), 100);
    assert_eq!(users[0], "alice");
    assert_eq!(users[1], "u000");
    assert_eq!(users[99], "u098", "the first 100, sorted");
    // No change, no push.
    assert_eq!(any_ev(&mut alice, "presence", Duration::from_millis(5500)).await, None);

    // Back to 100 and under: each change again.
    for c in others.drain(..21) {
        drop(c);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let p = next_ev(&mut alice, "presence").await;
        if p.get("present") == Some(&json!(false)) {
            let (_, body) = s.http("GET", "/v1/workspaces/w/chats/big/presence", None).await;
            assert!(body["count"].as_u64().unwrap() <= 100, "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "no per-user push after dropping to 100");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = s.http("GET", "/v1/workspaces/w/chats/big/presence", None).await;
        if body["count"] == 100 {
            break;
        }
        assert!(Instant::now() < deadline, "{body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
