//! Which database a `--store` entry reaches, and whether herald trusts it:
//! shard names recorded in the shard and checked by every node at start, and
//! TLS to PostgreSQL. Real PostgreSQL clusters, one per test.

mod common;

use std::path::Path;

use common::pg::{PgCluster, TestPki, create_database};
use common::*;
use serde_json::json;

/// Starts a node on `stores` and returns why it refused to start.
async fn refusal(stores: Vec<String>) -> String {
    let data = tempfile::tempdir().unwrap();
    let mut config = herald::Config::for_tests(data.path().to_path_buf(), SECRET, API_KEY);
    config.store.stores = stores;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let run = herald::run(listener, config, std::future::pending());
    let result = tokio::time::timeout(WAIT, run).await.expect("the node refuses within the wait");
    format!("{:#}", result.expect_err("the node refuses to start"))
}

/// Starts a node on `stores` and waits until it serves (its shards checked).
async fn node(stores: Vec<String>) -> TestServer {
    let s = TestServer::start_with(|c| c.store.stores = stores).await;
    let (status, body) = s.http("GET", "/readyz", None).await;
    assert_eq!(status, 200, "{body}");
    s
}

async fn admin(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect as admin");
    tokio::spawn(conn);
    client
}

async fn recorded_name(db: &str) -> String {
    admin(db).await.query_one("SELECT name FROM herald_shard", &[]).await.unwrap().get(0)
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql) and openssl; scripts/test.sh runs it"]
async fn a_second_node_naming_a_shard_differently_refuses_to_start() {
    let pg = PgCluster::start();
    let db = create_database(&pg.admin_url).await;
    let mut first = node(vec![format!("a={db}")]).await;
    // The same database, its host spelled another way, under another name.
    let other = format!("b={}", db.replace("127.0.0.1", "localhost"));
    let why = refusal(vec![other]).await;
    eprintln!("{why}");
    assert!(why.contains(r#"records the shard name "a""#), "{why}");
    assert!(why.contains(r#"--store names it "b""#), "{why}");
    assert!(why.contains(&db.replace("127.0.0.1", "localhost")), "says which URL: {why}");
    first.stop().await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql) and openssl; scripts/test.sh runs it"]
async fn a_list_reaching_one_database_twice_refuses_to_start() {
    let pg = PgCluster::start();
    let db = create_database(&pg.admin_url).await;
    let why = refusal(vec![format!("a={db}"), format!("b={}", db.replace("127.0.0.1", "localhost"))]).await;
    eprintln!("{why}");
    assert!(why.contains("reach one database"), "{why}");
    assert!(why.contains(r#"(shard "a")"#) && why.contains(r#"(shard "b")"#), "{why}");
    // The same name twice is refused before any shard is asked.
    let why = refusal(vec![format!("a={db}"), format!("a={db}")]).await;
    assert!(why.contains(r#"shard name "a" twice"#), "{why}");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql) and openssl; scripts/test.sh runs it"]
async fn bare_urls_route_as_before_and_clients_never_see_a_host() {
    let pg = PgCluster::start();
    let dbs = [create_database(&pg.admin_url).await, create_database(&pg.admin_url).await];
    let derived: Vec<String> = dbs.iter().map(|u| u.trim_start_matches("postgres://herald@").to_string()).collect();
    let s = node(dbs.to_vec()).await;
    for (db, name) in dbs.iter().zip(&derived) {
        assert_eq!(&recorded_name(db).await, name, "a bare URL records the name herald always derived");
    }
    // Routing is rendezvous over the derived names, as before names existed.
    let chat = (0..)
        .map(|i| format!("c{i}"))
        .find(|c| herald::hashing::rendezvous(&[b"w", c.as_bytes()], derived.iter().map(String::as_str)) == Some(1))
        .unwrap();
    let mut c = s.client("w", "ann").await;
    c.ok(json!({"op": "join", "chat": chat})).await;
    c.ok(json!({"op": "send", "chat": chat, "body": "hi"})).await;
    let count = |db: String, chat: String| async move {
        admin(&db)
            .await
            .query_one("SELECT count(*) FROM chats WHERE chat = $1", &[&chat])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(count(dbs[0].clone(), chat.clone()).await, 0);
    assert_eq!(count(dbs[1].clone(), chat.clone()).await, 1, "the chat lives on the shard its derived name wins");

    // /readyz, which anyone may read, labels shards without their hosts.
    let (_, ready) = s.http("GET", "/readyz", None).await;
    assert_eq!(ready["shards"][0]["label"], "#1");
    assert!(!ready.to_string().contains("127.0.0.1"), "{ready}");
    // A client of a shard that is down hears that it is, not where it is.
    pg.stop();
    for i in 0..5 {
        let err = c.err(json!({"op": "send", "chat": chat, "body": i}), "unavailable").await;
        let message = err["message"].as_str().unwrap();
        assert_eq!(message, "storage shard unavailable", "{err}");
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql) and openssl; scripts/test.sh runs it"]
async fn a_shard_from_before_names_adopts_the_first_name_and_refuses_another() {
    let pg = PgCluster::start();
    let db = create_database(&pg.admin_url).await;
    // A shard of schema 1: herald's tables, a chat, no recorded name.
    let mut old = node(vec![db.clone()]).await;
    let mut c = old.client("w", "ann").await;
    c.ok(json!({"op": "join", "chat": "kept"})).await;
    drop(c);
    old.stop().await;
    admin(&db)
        .await
        .batch_execute("DROP TABLE herald_shard; DELETE FROM herald_schema; INSERT INTO herald_schema VALUES (1)")
        .await
        .unwrap();

    let mut named = node(vec![format!("a={db}")]).await;
    assert_eq!(recorded_name(&db).await, "a");
    let (status, chat) = named.http("GET", "/v1/workspaces/w/chats/kept", None).await;
    assert_eq!((status, chat["members"].as_u64()), (200, Some(1)), "the shard's chats are kept: {chat}");
    let why = refusal(vec![format!("x={db}")]).await;
    eprintln!("{why}");
    assert!(why.contains(r#"records the shard name "a""#) && why.contains(r#"names it "x""#), "{why}");

    // A client of a named shard that is down hears its name, nothing more.
    let mut c = named.client("w", "bob").await;
    pg.stop();
    let err = c.err(json!({"op": "join", "chat": "kept"}), "unavailable").await;
    assert_eq!(err["message"], "storage shard a: unavailable", "{err}");
    drop(c);
    named.stop().await;
}

/// The backends of database `db` (herald's, here): how many, and how many over TLS.
async fn tls_backends(admin_url: &str, db: &str) -> (i64, i64) {
    let db_name = db.rsplit('/').next().unwrap();
    let row = admin(admin_url)
        .await
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.datname = $1",
            &[&db_name],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

fn tls_url(db: &str, ca: &Path) -> String {
    format!("{db}?sslmode=require&sslrootcert={}", ca.display())
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql) and openssl; scripts/test.sh runs it"]
async fn a_tls_shard_is_used_encrypted_and_only_with_a_trusted_certificate() {
    let (pki, stranger) = (TestPki::new(), TestPki::new());
    let pg = PgCluster::start_tls(&pki.server);
    let db = create_database(&pg.admin_url).await;

    let s = node(vec![format!("a={}", tls_url(&db, &pki.ca))]).await;
    let mut c = s.client("w", "ann").await;
    c.ok(json!({"op": "join", "chat": "secret"})).await;
    c.ok(json!({"op": "send", "chat": "secret", "body": "over TLS"})).await;
    let (backends, encrypted) = tls_backends(&pg.admin_url, &db).await;
    assert!(backends >= 1 && encrypted == backends, "{encrypted} of herald's {backends} connections use TLS");

    // The same server, with a CA that did not sign its certificate.
    let why = refusal(vec![format!("a={}", tls_url(&db, &stranger.ca))]).await;
    eprintln!("{why}");
    assert!(why.contains("TLS handshake") && why.contains("invalid peer certificate: UnknownIssuer"), "{why}");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql) and openssl; scripts/test.sh runs it"]
async fn sslmode_require_refuses_a_server_without_tls() {
    let pg = PgCluster::start();
    let db = create_database(&pg.admin_url).await;
    let pki = TestPki::new();
    let why = refusal(vec![tls_url(&db, &pki.ca)]).await;
    eprintln!("{why}");
    assert!(why.contains("server does not support TLS"), "{why}");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (Debian's postgresql) and openssl; scripts/test.sh runs it"]
async fn a_shard_url_that_comes_to_reach_another_database_is_refused_while_running() {
    let pg = PgCluster::start();
    let db = create_database(&pg.admin_url).await;
    let s = node(vec![format!("a={db}")]).await;
    let mut c = s.client("w", "ann").await;
    c.ok(json!({"op": "join", "chat": "c"})).await;
    c.ok(json!({"op": "send", "chat": "c", "body": "before"})).await;
    let events =
        || async { admin(&db).await.query_one("SELECT count(*) FROM events", &[]).await.unwrap().get::<_, i64>(0) };
    let stored = events().await;
    // Another database behind the same URL (a moved DNS name, say): here the
    // same one under a new identity, with herald's connections cut.
    admin(&db).await.batch_execute("UPDATE herald_shard SET id = 'another'").await.unwrap();
    let db_name = db.rsplit('/').next().unwrap();
    admin(&pg.admin_url)
        .await
        .execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", &[&db_name])
        .await
        .unwrap();
    for i in 0..5 {
        let err = c.err(json!({"op": "send", "chat": "c", "body": i}), "unavailable").await;
        assert_eq!(err["message"], "storage shard a: unavailable", "{err}");
    }
    assert_eq!(events().await, stored, "nothing was written to the other database");
}
