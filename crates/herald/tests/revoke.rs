//! Revoking a user's tokens and erasing a user, through the server API:
//! connections closed with 4001 within 2 s, old tokens refused by `hello`,
//! new ones accepted, durable across a restart, on every node of a cell
//! (over NATS, and by the store alone when NATS says nothing); erasure's
//! count, bodies gone from fetches and from the SQLite files, memberships
//! gone, tokens refused.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use serde_json::{Value, json};

/// Within this, every connection of a revoked user in the cell is closed.
const CLOSE_WITHIN: Duration = Duration::from_secs(2);

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// Waits until the clock's second is past `s`: a token issued then is "after" a revocation made in second `s`.
async fn next_second_after(s: u64) {
    while now_s() <= s {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A token of `user` in `ws`, valid for an hour, that says nothing of when it was issued.
fn token_without_iat(ws: &str, user: &str) -> String {
    let claims = json!({"sub": user, "ws": ws, "exp": now_s() + 3600});
    let key = jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes());
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).unwrap()
}

/// Says hello with `token` on a new connection to `url`; the reply.
async fn hello(url: &str, token: &str) -> (Client, Value) {
    let mut c = Client::connect(url).await;
    let r = c.request(json!({"op": "hello", "token": token})).await;
    (c, r)
}

/// `hello` with `token` is refused with `unauthenticated` and a 4001 close.
async fn assert_refused(url: &str, token: &str, what: &str) {
    let (mut c, r) = hello(url, token).await;
    assert_eq!(r["err"]["code"], "unauthenticated", "{what}: {r}");
    assert_eq!(c.closed_with().await, 4001, "{what}");
}

/// Waits for `c`'s close, at most [`CLOSE_WITHIN`] after `since`; its code.
async fn closed_within(c: &mut Client, since: Instant, who: &str) -> u16 {
    let left = CLOSE_WITHIN.saturating_sub(since.elapsed());
    match tokio::time::timeout(left, c.closed_with()).await {
        Ok(code) => code,
        Err(_) => panic!("{who} still open {:?} after the revocation", since.elapsed()),
    }
}

async fn revoke(s: &TestServer, ws: &str, user: &str) {
    let (status, body) = s.http("POST", &format!("/v1/workspaces/{ws}/users/{user}/revoke"), None).await;
    assert_eq!((status, &body), (200, &json!({})));
}

#[tokio::test]
async fn a_revoked_user_is_cut_off_at_once_and_only_new_tokens_get_back_in() {
    let s = TestServer::start().await;
    let old = s.token("acme", "alice").await;
    let (mut phone, r) = hello(&s.ws_url("acme"), &old).await;
    assert!(r.get("ok").is_some(), "{r}");
    let (mut laptop, _) = hello(&s.ws_url("acme"), &old).await;
    let mut bob = s.client("acme", "bob").await;
    let mut alice_elsewhere = s.client("other", "alice").await;

    let started = Instant::now();
    revoke(&s, "acme", "alice").await;
    let revoked_in = now_s();
    assert_eq!(closed_within(&mut phone, started, "alice's phone").await, 4001);
    assert_eq!(closed_within(&mut laptop, started, "alice's laptop").await, 4001);
    // Other users, and the same name in another workspace, stay.
    bob.ok(json!({"op": "ping"})).await;
    alice_elsewhere.ok(json!({"op": "ping"})).await;

    assert_refused(&s.ws_url("acme"), &old, "a token issued before the revocation").await;
    // One without iat is refused too: nothing says it is newer.
    assert_refused(&s.ws_url("acme"), &token_without_iat("acme", "alice"), "a token without iat").await;
    // Bob without iat is fine: only revoked users need it.
    assert!(hello(&s.ws_url("acme"), &token_without_iat("acme", "bob")).await.1.get("ok").is_some());

    next_second_after(revoked_in).await;
    let fresh = s.token("acme", "alice").await;
    let (mut back, r) = hello(&s.ws_url("acme"), &fresh).await;
    assert!(r.get("ok").is_some(), "a token issued after the revocation works: {r}");
    back.ok(json!({"op": "join", "chat": "g"})).await;
}

#[tokio::test]
async fn revoke_checks_its_path_and_key() {
    let s = TestServer::start().await;
    let (status, _) = http(s.addr, "POST", "/v1/workspaces/acme/users/alice/revoke", None, None).await;
    assert_eq!(status, 401);
    let (status, body) = s.http("POST", "/v1/workspaces/acme/users/bad%20name/revoke", None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (400, Some("bad_request")));
    let (status, _) = http(s.addr, "DELETE", "/v1/workspaces/acme/users/alice", None, None).await;
    assert_eq!(status, 401);
}

/// Revokes on one server, restarts it on the same storage, and checks the
/// old token is still refused and a newer one accepted.
async fn revocation_survives_a_restart(stores: Vec<String>) {
    let data = data_dir();
    let start = |stores: Vec<String>, dir: std::path::PathBuf| {
        TestServer::start_with(move |c| {
            c.store.data = dir;
            c.store.stores = stores;
        })
    };
    let mut s = start(stores.clone(), data.path().to_path_buf()).await;
    let old = s.token("acme", "alice").await;
    revoke(&s, "acme", "alice").await;
    let revoked_in = now_s();
    s.stop().await;

    let s = start(stores, data.path().to_path_buf()).await;
    assert_refused(&s.ws_url("acme"), &old, "after a restart").await;
    next_second_after(revoked_in).await;
    let fresh = s.token("acme", "alice").await;
    assert!(hello(&s.ws_url("acme"), &fresh).await.1.get("ok").is_some());
}

#[tokio::test]
async fn a_revocation_survives_a_restart() {
    revocation_survives_a_restart(test_stores().await).await;
}

/// Fresh databases for two shards, on the suite's cluster or one of our own.
async fn two_shards() -> (Option<common::pg::PgCluster>, Vec<String>) {
    let (pg, admin) = common::pg::suite_or_own();
    let stores = vec![common::pg::create_database(&admin).await, common::pg::create_database(&admin).await];
    (pg, stores)
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn on_postgres_shards_a_revocation_survives_a_restart() {
    let (_pg, stores) = two_shards().await;
    revocation_survives_a_restart(stores).await;
}

/// Alice writes in three chats (and leaves one of them), bob too; erasing
/// alice erases exactly her messages, everywhere, and ends her memberships.
async fn erasing_a_user(s: &TestServer, embedded: bool) {
    let secret = format!("alice-secret-{:016x}", rand::random::<u64>());
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    let mut alice_seqs = Vec::new();
    for chat in ["a", "b", "c"] {
        alice.ok(json!({"op": "join", "chat": chat})).await;
        bob.ok(json!({"op": "join", "chat": chat})).await;
        for i in 0..3 {
            let r =
                alice.ok(json!({"op": "send", "chat": chat, "body": {"text": format!("{secret} {chat}{i}")}})).await;
            alice_seqs.push((chat, r["seq"].as_u64().unwrap()));
            bob.ok(json!({"op": "send", "chat": chat, "body": {"text": format!("bob {chat}{i}")}})).await;
        }
    }
    // An edit of one of hers, and a message deleted before: neither is counted twice.
    let (chat0, seq0) = alice_seqs[0];
    alice.ok(json!({"op": "edit", "chat": chat0, "target": seq0, "body": {"text": format!("{secret} edited")}})).await;
    let (chat1, seq1) = alice_seqs[1];
    alice.ok(json!({"op": "delete", "chat": chat1, "target": seq1})).await;
    // She left c: her messages there are hers all the same.
    alice.ok(json!({"op": "leave", "chat": "c"})).await;
    // Her messages in another workspace are not this workspace's.
    let mut alice_other = s.client("other", "alice").await;
    alice_other.ok(json!({"op": "join", "chat": "a"})).await;
    alice_other.ok(json!({"op": "send", "chat": "a", "body": {"text": "elsewhere"}})).await;
    bob.ok(json!({"op": "watch", "chat": "a"})).await;
    if embedded {
        assert!(!files_containing(s.data.path(), secret.as_bytes()).is_empty(), "the test looks in the right place");
    }
    let old = s.token("acme", "alice").await;

    let (status, body) = s.http("DELETE", "/v1/workspaces/acme/users/alice", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"erased": 8}), "9 messages, one deleted before");
    assert_eq!(alice.closed_with().await, 4001, "her connections are closed");
    alice_other.ok(json!({"op": "ping"})).await;

    // Bob's watch of a sees her leave and the deletes of her two messages left there, live.
    let mut pushed = Vec::new();
    while pushed.iter().filter(|p: &&Value| p["type"] == "delete").count() < 2 {
        pushed.extend(bob.events("a", 1).await);
    }
    assert!(pushed.iter().any(|p| p["type"] == "leave" && p["user"] == "alice"), "{pushed:?}");

    for chat in ["a", "b", "c"] {
        let events = bob.ok(json!({"op": "fetch", "chat": chat, "after": 0})).await["events"].clone();
        let text = events.to_string();
        assert!(!text.contains(&secret), "{chat}: {text}");
        for e in events.as_array().unwrap().iter().filter(|e| e["type"] == "message") {
            if e["user"] == "alice" {
                assert_eq!((&e["body"], &e["deleted"]), (&Value::Null, &json!(true)), "{e}");
            } else {
                assert!(e["body"]["text"].as_str().unwrap().starts_with("bob "), "bob's stay: {e}");
            }
        }
        let (_, view) = s.http("GET", &format!("/v1/workspaces/acme/chats/{chat}"), None).await;
        assert_eq!(view["members"], 1, "{chat}: only bob is left");
    }
    let (_, inbox) = s.http("GET", "/v1/workspaces/acme/users/alice/inbox", None).await;
    assert_eq!(inbox["chats"], json!([]), "no memberships left");
    let (_, other) = s.http("GET", "/v1/workspaces/other/chats/a/events?after=0", None).await;
    assert!(other.to_string().contains("elsewhere"), "another workspace's messages stay: {other}");
    assert_refused(&s.ws_url("acme"), &old, "her token from before the erasure").await;

    // Erasing again finds nothing more.
    let (status, body) = s.http("DELETE", "/v1/workspaces/acme/users/alice", None).await;
    assert_eq!((status, body), (200, json!({"erased": 0})));

    if embedded {
        let started = Instant::now();
        loop {
            let left = files_containing(s.data.path(), secret.as_bytes());
            if left.is_empty() {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(5), "still in {left:?} 5 s after the erasure");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test]
async fn erasing_a_user_erases_their_messages_memberships_and_tokens() {
    let s = TestServer::start().await;
    let embedded = test_stores().await.is_empty();
    erasing_a_user(&s, embedded).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql); scripts/test.sh runs it"]
async fn on_postgres_shards_erasing_a_user_erases_their_messages_memberships_and_tokens() {
    let (_pg, stores) = two_shards().await;
    let s = TestServer::start_with(move |c| c.store.stores = stores).await;
    erasing_a_user(&s, false).await;
}

#[tokio::test]
async fn a_user_with_more_messages_than_one_step_is_erased_whole() {
    let s = TestServer::start_with(|c| {
        c.gateway.rate = 100_000;
        c.gateway.burst = 100_000;
    })
    .await;
    let mut alice = s.client("acme", "alice").await;
    let mut total = 0;
    for (chat, n) in [("a", 400), ("b", 250), ("c", 1)] {
        alice.ok(json!({"op": "join", "chat": chat})).await;
        let ids: Vec<i64> = {
            let mut ids = Vec::new();
            for i in 0..n {
                ids.push(alice.send(json!({"op": "send", "chat": chat, "body": {"i": i}})).await);
            }
            ids
        };
        for id in ids {
            assert!(alice.reply(id).await.get("ok").is_some());
        }
        total += n;
    }
    let (status, body) = s.http("DELETE", "/v1/workspaces/acme/users/alice", None).await;
    assert_eq!((status, body), (200, json!({"erased": total})));
    for chat in ["a", "b", "c"] {
        let (_, page) =
            s.http("GET", &format!("/v1/workspaces/acme/chats/{chat}/events?after=0&limit=500"), None).await;
        let live = page["events"].as_array().unwrap().iter().filter(|e| e["type"] == "message" && e["deleted"] != true);
        assert_eq!(live.count(), 0, "{chat}");
    }
}

/// Revocations `b` took in from NATS (counted per process: `b` is the only
/// node of its test that can take one in from there, as the node that
/// revokes knows it already).
async fn noted_over_nats(b: &TestServer) -> f64 {
    let text = http_raw(b.addr, "GET", "/metrics", None, None).await.1;
    metric(&text, r#"herald_revocations_noted_total{source="nats"}"#)
}

/// Waits until `b` follows the cell's revoke subject: a probe user's
/// revocation on `a` reaches `b` over NATS (one that `b`'s store poll found
/// first does not count; the next probe is tried).
async fn follows_over_nats(a: &TestServer, b: &TestServer) {
    let before = noted_over_nats(b).await;
    let started = Instant::now();
    for probe in 0.. {
        revoke(a, "acme", &format!("probe-{probe}")).await;
        let tried = Instant::now();
        while tried.elapsed() < Duration::from_millis(500) {
            if noted_over_nats(b).await > before {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "node b took in no revocation over NATS in 10 s");
    }
}

/// Two nodes of a cell: one joined over NATS, one without it (a node whose
/// NATS message was lost, in effect), both on the same shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nats-server and PostgreSQL (Debian packages); scripts/test.sh runs it"]
async fn a_revocation_reaches_every_node_over_nats_or_through_the_store() {
    let nats = common::nats::NatsCluster::start().await;
    let (_pg, stores) = two_shards().await;
    let node = |i: usize, brokers: Vec<String>, stores: Vec<String>| {
        TestServer::start_with(move |c| {
            c.broker.brokers = brokers;
            c.store.stores = stores;
            c.server.node = format!("node-{i}");
        })
    };
    let a = node(0, nats.urls(), stores.clone()).await;
    let b = node(1, nats.urls(), stores.clone()).await;
    let lone = node(2, Vec::new(), stores).await;
    let old = a.token("acme", "alice").await;
    let mut on_b = Vec::new();
    for _ in 0..3 {
        let (c, r) = hello(&b.ws_url("acme"), &old).await;
        assert!(r.get("ok").is_some(), "{r}");
        on_b.push(c);
    }
    let (mut on_lone, r) = hello(&lone.ws_url("acme"), &old).await;
    assert!(r.get("ok").is_some(), "{r}");
    follows_over_nats(&a, &b).await;

    let started = Instant::now();
    revoke(&a, "acme", "alice").await;
    for (i, c) in on_b.iter_mut().enumerate() {
        assert_eq!(closed_within(c, started, &format!("connection {i} on node b")).await, 4001);
    }
    assert_eq!(closed_within(&mut on_lone, started, "the connection on the node without NATS").await, 4001);
    for n in [&a, &b, &lone] {
        assert_refused(&n.ws_url("acme"), &old, "the old token on each node").await;
    }
}
