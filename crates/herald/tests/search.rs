//! Protocol v1.2's search over a real server: the `search` op and the server API's route, words
//! found anywhere in a word after case folding in any script (Korean, Japanese and Chinese without
//! spaces, terms of one and two characters), the chats a user may search, pages newest first,
//! and the index following edits, deletes, erasure and a restart.
//!
//! Also run against PostgreSQL on two shards (`HERALD_TEST_STORE=postgres`).

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};

/// How soon the contract says a stored message is found (and an edit or delete followed).
const INDEXED_WITHIN: Duration = Duration::from_secs(2);

/// The (chat, seq) of each result, in order.
fn found(reply: &Value) -> Vec<(String, u64)> {
    reply["results"]
        .as_array()
        .unwrap_or_else(|| panic!("no results in {reply}"))
        .iter()
        .map(|r| (r["chat"].as_str().unwrap().to_owned(), r["seq"].as_u64().unwrap()))
        .collect()
}

fn at(chat: &str, seqs: &[u64]) -> Vec<(String, u64)> {
    seqs.iter().map(|s| (chat.to_owned(), *s)).collect()
}

/// Searches until the results are `want`, for at most [`INDEXED_WITHIN`] (a little more on a
/// loaded machine: the assertion says how long it took).
async fn until_found(c: &mut Client, query: &str, want: &[(String, u64)]) -> Value {
    let started = Instant::now();
    loop {
        let reply = c.ok(json!({"op": "search", "query": query})).await;
        if found(&reply) == want {
            assert!(started.elapsed() <= INDEXED_WITHIN * 2, "found after {:?}", started.elapsed());
            return reply;
        }
        assert!(started.elapsed() < WAIT, "{query:?}: {} after {:?}, want {want:?}", reply, started.elapsed());
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn send(c: &mut Client, chat: &str, body: Value) -> u64 {
    c.ok(json!({"op": "send", "chat": chat, "body": body})).await["seq"].as_u64().unwrap()
}

#[tokio::test]
async fn words_are_found_anywhere_in_a_word_in_every_script() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let latin = send(&mut alice, "g", json!({"text": "The Heralds are HERE"})).await;
    let korean = send(&mut alice, "g", json!({"text": "서버가 다운됐어요", "meta": {"tags": ["장애"]}})).await;
    let japanese = send(&mut alice, "g", json!({"text": "東京都でサーバーが落ちた"})).await;
    let chinese = send(&mut alice, "g", json!({"text": "我们的服务器很快"})).await;
    let reply = alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "herald thread"}, "thread": latin})).await;
    let in_thread = reply["seq"].as_u64().unwrap();

    let r = until_found(&mut alice, "herald", &at("g", &[in_thread, latin])).await;
    assert_eq!(r["results"][0]["thread"], latin, "as fetch shows it: {r}");
    assert_eq!(r["results"][1]["body"]["text"], "The Heralds are HERE");
    assert_eq!(r["results"][1]["chat"], "g");
    assert_eq!(r["more"], false);
    assert!(r.get("cursor").is_none(), "{r}");
    until_found(&mut alice, "HERALDS", &at("g", &[latin])).await;
    until_found(&mut alice, "서버", &at("g", &[korean])).await;
    until_found(&mut alice, "버가", &at("g", &[korean])).await;
    until_found(&mut alice, "장애", &at("g", &[korean])).await;
    until_found(&mut alice, "サーバー", &at("g", &[japanese])).await;
    until_found(&mut alice, "東京", &at("g", &[japanese])).await;
    until_found(&mut alice, "服务器", &at("g", &[chinese])).await;
    until_found(&mut alice, "务", &at("g", &[chinese])).await;
    until_found(&mut alice, "서버 다운", &at("g", &[korean])).await;
    until_found(&mut alice, "  다운   서버 ", &at("g", &[korean])).await;
    until_found(&mut alice, "서버 herald", &[]).await;
    until_found(&mut alice, "heraldz", &[]).await;

    // The server API: as a user, or over the whole workspace.
    let (code, v) = s.http("GET", "/v1/workspaces/acme/search?q=Herald&user=alice", None).await;
    assert_eq!((code, found(&v)), (200, at("g", &[in_thread, latin])), "{v}");
    let (code, v) = s.http("GET", "/v1/workspaces/acme/search?q=%EC%84%9C%EB%B2%84", None).await;
    assert_eq!((code, found(&v)), (200, at("g", &[korean])), "{v}");
    let (code, v) = s.http("GET", "/v1/workspaces/acme/search?q=herald&user=bob", None).await;
    assert_eq!((code, found(&v)), (200, vec![]), "bob is in no chat: {v}");
    let (code, v) = s.http("GET", "/v1/workspaces/other/search?q=herald", None).await;
    assert_eq!((code, found(&v)), (200, vec![]), "another workspace: {v}");
}

#[tokio::test]
async fn bad_queries_and_other_chats_are_refused() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    for query in [json!(""), json!("   \t\n"), json!("가".repeat(201)), json!(5), Value::Null] {
        alice.err(json!({"op": "search", "query": query}), "bad_request").await;
    }
    alice.ok(json!({"op": "search", "query": "가".repeat(200)})).await;
    alice.err(json!({"op": "search", "query": "x", "limit": 0}), "bad_request").await;
    alice.err(json!({"op": "search", "query": "x", "cursor": "zz"}), "bad_request").await;
    alice.err(json!({"op": "search", "query": "x", "chat": "a b"}), "bad_request").await;
    bob.err(json!({"op": "search", "query": "x", "chat": "g"}), "forbidden").await;
    bob.err(json!({"op": "search", "query": "x", "chat": "nope"}), "not_found").await;

    for path in [
        "/v1/workspaces/acme/search",
        "/v1/workspaces/acme/search?q=",
        "/v1/workspaces/acme/search?q=%20%20",
        "/v1/workspaces/acme/search?q=x&limit=0",
        "/v1/workspaces/acme/search?q=x&user=a%20b",
        "/v1/workspaces/acme/search?q=x&cursor=zz",
    ] {
        let (code, v) = s.http("GET", path, None).await;
        assert_eq!(code, 400, "{path}: {v}");
    }
    let long = "%EA%B0%80".repeat(201);
    let (code, _) = s.http("GET", &format!("/v1/workspaces/acme/search?q={long}"), None).await;
    assert_eq!(code, 400);
    let (code, _) = s.http("GET", "/v1/workspaces/acme/search?q=x&user=bob&chat=g", None).await;
    assert_eq!(code, 403, "bob is not a member of g");
    let (code, _) = http(s.addr, "GET", "/v1/workspaces/acme/search?q=x", None, None).await;
    assert_eq!(code, 401, "the api key is needed");
}

#[tokio::test]
async fn pages_run_newest_first_across_chats_and_the_chat_filter_keeps_one() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let chats = ["c1", "c2", "c3", "c4"];
    for chat in chats {
        alice.ok(json!({"op": "join", "chat": chat})).await;
    }
    let mut sent = Vec::new();
    for i in 0..25 {
        let chat = chats[i % chats.len()];
        let seq = send(&mut alice, chat, json!({"text": format!("page{i} 보고서")})).await;
        sent.push((chat.to_owned(), seq));
        // Distinct times, so that newest first is the order sent, reversed.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    sent.reverse();
    let first = until_found(&mut alice, "보고", &sent[..20]).await;
    assert_eq!(first["more"], true);
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut req = json!({"op": "search", "query": "보고서", "limit": 10});
        if let Some(c) = &cursor {
            req["cursor"] = json!(c);
        }
        let page = alice.ok(req).await;
        pages.extend(found(&page));
        match page["cursor"].as_str() {
            Some(c) => {
                assert_eq!(page["more"], true);
                cursor = Some(c.to_owned());
            }
            None => {
                assert_eq!(page["more"], false);
                break;
            }
        }
    }
    assert_eq!(pages, sent, "three pages, newest first, each message once");

    // The server API pages the same way.
    let (_, v) = s.http("GET", "/v1/workspaces/acme/search?q=page1&limit=100", None).await;
    let ones: Vec<_> = sent
        .iter()
        .enumerate()
        .filter(|(i, _)| (24 - i).to_string().starts_with('1'))
        .map(|(_, h)| h.clone())
        .collect();
    assert_eq!(found(&v), ones, "page1 and page10 to page19: {v}");

    let only = alice.ok(json!({"op": "search", "query": "보고서", "chat": "c2", "limit": 100})).await;
    let want: Vec<_> = sent.iter().filter(|(c, _)| c == "c2").cloned().collect();
    assert_eq!(found(&only), want);
}

#[tokio::test]
async fn edits_deletes_leaving_and_erasure_are_followed() {
    let stores = test_stores().await;
    let st = stores.clone();
    let s = TestServer::start_with(move |c| c.store.stores = st).await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    let mut carol = s.client("acme", "carol").await;
    for c in [&mut alice, &mut bob, &mut carol] {
        c.ok(json!({"op": "join", "chat": "g"})).await;
    }
    let first = send(&mut alice, "g", json!({"text": "launch on Monday"})).await;
    until_found(&mut bob, "monday", &at("g", &[first])).await;

    // An edit: only the new text matches.
    alice.ok(json!({"op": "edit", "chat": "g", "target": first, "body": {"text": "launch on Friday"}})).await;
    until_found(&mut bob, "monday", &[]).await;
    let r = until_found(&mut bob, "friday launch", &at("g", &[first])).await;
    assert_eq!(r["results"][0]["body"]["text"], "launch on Friday", "the latest body: {r}");

    // A delete: never found again.
    alice.ok(json!({"op": "delete", "chat": "g", "target": first})).await;
    for _ in 0..5 {
        let r = bob.ok(json!({"op": "search", "query": "launch"})).await;
        assert_eq!(found(&r), vec![], "a deleted message is never found: {r}");
    }

    // Leaving: the chat's messages are no longer searched.
    let kept = send(&mut alice, "g", json!({"text": "budget review"})).await;
    until_found(&mut carol, "budget", &at("g", &[kept])).await;
    carol.ok(json!({"op": "leave", "chat": "g"})).await;
    let r = carol.ok(json!({"op": "search", "query": "budget"})).await;
    assert_eq!(found(&r), vec![], "{r}");

    // Erasure: the user's messages are gone from results and from the index's storage.
    let secret = format!("zq{:016x}", rand::random::<u64>());
    let erased = send(&mut bob, "g", json!({"text": format!("token {secret}")})).await;
    until_found(&mut alice, &secret, &at("g", &[erased])).await;
    let (code, v) = s.http("DELETE", "/v1/workspaces/acme/users/bob", None).await;
    assert_eq!(code, 200, "{v}");
    until_found(&mut alice, &secret, &[]).await;
    let started = Instant::now();
    loop {
        let left = if stores.is_empty() {
            files_containing(s.data.path(), secret.as_bytes())
        } else {
            pg_rows_containing(&stores, &secret).await
        };
        if left.is_empty() {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "still in {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The index rows of `stores` (PostgreSQL shards) that still hold `needle`.
async fn pg_rows_containing(stores: &[String], needle: &str) -> Vec<String> {
    let mut left = Vec::new();
    for url in stores {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
        tokio::spawn(conn);
        let n: i64 = client
            .query_one("SELECT count(*) FROM search_docs WHERE strpos(text, $1) > 0", &[&needle])
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            left.push(format!("{url}: {n} rows"));
        }
    }
    left
}

#[tokio::test]
async fn a_lost_index_catches_up_with_the_log_after_a_restart() {
    let stores = test_stores().await;
    let dir = data_dir();
    let (d, st) = (dir.path().to_path_buf(), stores.clone());
    let mut s = TestServer::start_with(move |c| {
        c.store.data = d;
        c.store.stores = st;
    })
    .await;
    let mut alice = s.client("acme", "alice").await;
    let mut seqs = Vec::new();
    for chat in ["a", "b", "c"] {
        alice.ok(json!({"op": "join", "chat": chat})).await;
        seqs.push((chat.to_owned(), send(&mut alice, chat, json!({"text": "회의록 정리"})).await));
    }
    seqs.reverse();
    until_found(&mut alice, "회의", &seqs).await;
    drop(alice);
    s.stop().await;

    // The index is lost while the server is down; the log is not.
    if stores.is_empty() {
        for f in ["search.db", "search.db-wal", "search.db-shm"] {
            let _ = std::fs::remove_file(dir.path().join(f));
        }
    } else {
        for url in &stores {
            let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
            tokio::spawn(conn);
            client.batch_execute("TRUNCATE search_docs, search_grams, search_positions").await.unwrap();
        }
    }
    let (d, st) = (dir.path().to_path_buf(), stores.clone());
    let s = TestServer::start_with(move |c| {
        c.store.data = d;
        c.store.stores = st;
    })
    .await;
    let mut alice = s.client("acme", "alice").await;
    until_found(&mut alice, "정리", &seqs).await;
}
