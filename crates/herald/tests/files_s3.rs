//! Protocol v1.2's files with `--files-s3`, over a real S3-compatible server (versitygw, started by
//! scripts/s3.sh): clients upload to and download from the bucket with the URLs herald signs, the
//! bytes never pass through herald, the bucket refuses uploads that lie, a deleted message's
//! objects are deleted, and a cell's nodes share the bucket: a file sent on one node is seen and
//! downloaded by a watcher on another. Ignored without `--include-ignored` (scripts/test.sh
//! builds the S3 server first).

mod common;

use std::time::{Duration, Instant};

use common::cell::LocalCell;
use common::s3::S3Server;
use common::*;
use serde_json::{Value, json};

const BYTES: &[u8] = b"\x89PNG\r\n\x1a\n an image, as far as the bucket knows";

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(WAIT).build().unwrap()
}

async fn put(up: &Value, bytes: &[u8], content_type: &str) -> u16 {
    let res = client().put(up["url"].as_str().unwrap()).header("Content-Type", content_type).body(bytes.to_vec());
    res.send().await.unwrap().status().as_u16()
}

async fn get(url: &str) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let res = client().get(url).send().await.unwrap();
    let (status, headers) = (res.status().as_u16(), res.headers().clone());
    (status, headers, res.bytes().await.unwrap().to_vec())
}

#[tokio::test]
#[ignore = "needs the S3 server scripts/s3.sh builds (scripts/test.sh runs it)"]
async fn files_go_straight_to_the_bucket_and_back() {
    let s3 = S3Server::start();
    let url = s3.url.clone();
    let s = TestServer::start_with(move |c| c.files.files_s3 = Some(url)).await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "watch", "chat": "g"})).await;

    let declare = json!({"op": "upload", "chat": "g", "name": "pic.png", "type": "image/png", "size": BYTES.len()});
    let up = alice.ok(declare.clone()).await;
    let url = up["url"].as_str().unwrap();
    assert!(url.starts_with(&s3.endpoint), "the client uploads to the bucket, not to herald: {url}");
    assert_eq!(up["method"], "PUT");
    assert_eq!(up["headers"]["Content-Type"], "image/png");
    let id = up["file"].as_str().unwrap().to_string();

    // Not uploaded yet: the bucket says so when the message names it.
    alice.err(json!({"op": "send", "chat": "g", "body": {}, "files": [id]}), "not_found").await;
    // The bucket refuses uploads that lie.
    let more = [BYTES, b"!"].concat();
    assert!((400..500).contains(&put(&up, &more, "image/png").await), "more bytes");
    assert!((400..500).contains(&put(&up, &BYTES[1..], "image/png").await), "fewer bytes");
    assert!((400..500).contains(&put(&up, BYTES, "text/html").await), "another type");
    alice.err(json!({"op": "send", "chat": "g", "body": {}, "files": [id]}), "not_found").await;
    assert_eq!(put(&up, BYTES, "image/png").await, 200);

    let m = alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "pic"}, "files": [id]})).await["seq"].clone();
    let pushed = bob.events("g", 1).await.remove(0);
    let file_url = pushed["files"][0]["url"].as_str().unwrap().to_string();
    assert!(file_url.starts_with(&s3.endpoint), "downloads come from the bucket: {file_url}");
    let (code, headers, bytes) = get(&file_url).await;
    assert_eq!((code, bytes.as_slice()), (200, BYTES));
    assert_eq!(headers["content-type"], "image/png");

    // A non-media type downloads as an attachment.
    let html = b"<script>alert(1)</script>";
    let up =
        alice.ok(json!({"op": "upload", "chat": "g", "name": "x.html", "type": "text/html", "size": html.len()})).await;
    assert_eq!(put(&up, html, "text/html").await, 200);
    alice.ok(json!({"op": "send", "chat": "g", "body": {}, "files": [up["file"]]})).await;
    let pushed = bob.events("g", 1).await.remove(0);
    let (code, headers, _) = get(pushed["files"][0]["url"].as_str().unwrap()).await;
    assert_eq!(code, 200);
    assert!(headers["content-disposition"].to_str().unwrap().starts_with("attachment"), "{headers:?}");

    // Deleting the message deletes the object within 60 s (the sweeper looks every 10 s).
    alice.ok(json!({"op": "delete", "chat": "g", "target": m})).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while get(&file_url).await.0 != 404 {
        assert!(Instant::now() < deadline, "the object is still in the bucket 60 s after its message was deleted");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // herald kept no bytes of its own.
    assert!(!s.data.path().join("files").exists(), "no files folder beside the store with a bucket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the S3 server scripts/s3.sh builds (scripts/test.sh runs it)"]
async fn a_cells_nodes_share_one_bucket() {
    let s3 = S3Server::start();
    let url = s3.url.clone();
    let cell = LocalCell::start_with(2, move |_, c| c.files.files_s3 = Some(url.clone())).await;
    let mut alice = cell.nodes[0].client("w", "alice").await;
    let mut bob = cell.nodes[1].client("w", "bob").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "watch", "chat": "g"})).await;
    let up =
        alice.ok(json!({"op": "upload", "chat": "g", "name": "a.png", "type": "image/png", "size": BYTES.len()})).await;
    assert_eq!(put(&up, BYTES, "image/png").await, 200);
    alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "from node 0"}, "files": [up["file"]]})).await;
    let pushed = bob.events("g", 1).await.remove(0);
    assert_eq!(get(pushed["files"][0]["url"].as_str().unwrap()).await.2, BYTES, "node 1's watcher downloads it");
    let fetched = bob.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    let m = fetched["events"].as_array().unwrap().iter().find(|e| e["files"].is_array()).unwrap().clone();
    assert_eq!(get(m["files"][0]["url"].as_str().unwrap()).await.2, BYTES, "and so does a fetch on node 1");
    // Node 1 may attach a file uploaded through node 0 by the same user.
    let up =
        alice.ok(json!({"op": "upload", "chat": "g", "name": "b.png", "type": "image/png", "size": BYTES.len()})).await;
    assert_eq!(put(&up, BYTES, "image/png").await, 200);
    let mut alice_elsewhere = cell.nodes[1].client("w", "alice").await;
    alice_elsewhere.ok(json!({"op": "send", "chat": "g", "body": {}, "files": [up["file"]]})).await;
}

#[tokio::test]
#[ignore = "needs the S3 server scripts/s3.sh builds (scripts/test.sh runs it)"]
async fn a_node_refuses_to_start_on_a_bucket_it_cannot_use() {
    let s3 = S3Server::start();
    for (url, why) in [
        (s3.url.replace("/herald", "/no-such-bucket"), "bucket"),
        (s3.url.replace(common::s3::SECRET_KEY, "wrong-secret-0123456789"), "key"),
    ] {
        let data = data_dir();
        let mut config = herald::Config::for_tests(data.path().to_path_buf(), SECRET, API_KEY);
        config.files.files_s3 = Some(url.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let ran = tokio::time::timeout(WAIT, herald::run(listener, config, std::future::pending())).await;
        let e = ran.expect("refused at once").expect_err("a bucket it cannot use stops the node");
        assert!(format!("{e:#}").contains("--files-s3"), "{why}: {e:#}");
    }
}
