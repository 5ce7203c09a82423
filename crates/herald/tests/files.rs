//! Protocol v1.2's files over a real server with the embedded backend: `upload`, the bytes sent
//! to herald's signed URL, `files` on `send` and `edit`, the URLs events carry, and every refusal
//! the contract gives (uploads that lie, expired and forged URLs, another user's or chat's file,
//! a file attached twice), deletion with the message, the user or an edit, and orphans.
//!
//! Also run against PostgreSQL (`HERALD_TEST_STORE=postgres`). The S3 backend: `files_s3.rs`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n0123456789 not really a png but bytes all the same";

fn http_client() -> reqwest::Client {
    reqwest::Client::builder().timeout(WAIT).build().unwrap()
}

/// Sends `bytes` as an upload answer says to; returns the status.
async fn put(upload: &Value, bytes: Vec<u8>) -> u16 {
    put_as(upload, bytes, upload["headers"]["Content-Type"].as_str().unwrap()).await
}

async fn put_as(upload: &Value, bytes: Vec<u8>, content_type: &str) -> u16 {
    assert_eq!(upload["method"], "PUT");
    let res = http_client()
        .put(upload["url"].as_str().unwrap())
        .header("Content-Type", content_type)
        .body(bytes)
        .send()
        .await
        .unwrap();
    res.status().as_u16()
}

/// A GET of `url`: status, headers and bytes.
async fn get(url: &str, range: Option<&str>) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut req = http_client().get(url);
    if let Some(r) = range {
        req = req.header("Range", r);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    (status, headers, res.bytes().await.unwrap().to_vec())
}

/// Uploads `bytes` as `name` of `mime` for `chat`: the file's id and the upload answer.
async fn upload(c: &mut Client, chat: &str, name: &str, mime: &str, bytes: &[u8]) -> (String, Value) {
    let up = c.ok(json!({"op": "upload", "chat": chat, "name": name, "type": mime, "size": bytes.len()})).await;
    assert_eq!(put(&up, bytes.to_vec()).await, 200, "{up}");
    (up["file"].as_str().unwrap().to_string(), up)
}

/// The file's bytes on disk, if still there.
fn on_disk(s: &TestServer, ws: &str, chat: &str, id: &str) -> bool {
    s.data.path().join("files").join(ws).join(chat).join(id).exists()
}

/// Waits (at most `within`) until `cond` holds.
async fn eventually(within: Duration, mut cond: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    cond().await
}

#[tokio::test]
async fn a_file_is_uploaded_attached_pushed_fetched_and_downloaded() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "join", "chat": "g"})).await;
    bob.ok(json!({"op": "watch", "chat": "g"})).await;

    let before = herald_now();
    let up = alice
        .ok(json!({"op": "upload", "chat": "g", "name": "cat 猫.png", "type": "image/png", "size": PNG.len()}))
        .await;
    let id = up["file"].as_str().unwrap().to_string();
    assert!(id.starts_with('f') && id.len() == 23, "{up}");
    assert!(up["url"].as_str().unwrap().starts_with(&format!("http://{}/v1/files/acme/g/{id}?", s.addr)), "{up}");
    assert_eq!(up["headers"], json!({"Content-Type": "image/png"}));
    assert!(up["expires_ms"].as_i64().unwrap() >= before + 600_000, "at least 10 minutes ahead: {up}");
    assert_eq!(put(&up, PNG.to_vec()).await, 200);
    // Uploaded once: the URL does not take the bytes again.
    assert_eq!(put(&up, PNG.to_vec()).await, 409);

    let sent = alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "look"}, "files": [id]})).await;
    let pushed = bob.events("g", 1).await.remove(0);
    assert_eq!(pushed["seq"], sent["seq"]);
    let f = &pushed["files"][0];
    assert_eq!(
        (f["id"].as_str(), f["name"].as_str(), f["type"].as_str()),
        (Some(&*id), Some("cat 猫.png"), Some("image/png"))
    );
    assert_eq!(f["size"], PNG.len());
    let (code, headers, bytes) = get(f["url"].as_str().unwrap(), None).await;
    assert_eq!(code, 200);
    assert_eq!(bytes, PNG, "exactly the uploaded bytes");
    assert_eq!(headers["content-type"], "image/png");
    assert!(headers["content-disposition"].to_str().unwrap().starts_with("inline"), "{headers:?}");
    assert_eq!(headers["x-content-type-options"], "nosniff");

    // A range.
    let (code, headers, bytes) = get(f["url"].as_str().unwrap(), Some("bytes=2-5")).await;
    assert_eq!((code, bytes.as_slice()), (206, &PNG[2..6]));
    assert_eq!(headers["content-range"], format!("bytes 2-5/{}", PNG.len()));
    let (code, _, _) = get(f["url"].as_str().unwrap(), Some("bytes=9999-")).await;
    assert_eq!(code, 416);

    // fetch shows it with a URL; so does the server API.
    let fetched = bob.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    let m = fetched["events"].as_array().unwrap().iter().find(|e| e["seq"] == sent["seq"]).unwrap().clone();
    assert_eq!(m["files"][0]["id"], id.as_str());
    assert_eq!(get(m["files"][0]["url"].as_str().unwrap(), None).await.2, PNG);
    let (code, page) = s.http("GET", "/v1/workspaces/acme/chats/g/events?after=0", None).await;
    assert_eq!(code, 200, "{page}");
    let m = page["events"].as_array().unwrap().iter().find(|e| e["seq"] == sent["seq"]).unwrap().clone();
    assert_eq!(get(m["files"][0]["url"].as_str().unwrap(), None).await.2, PNG);

    // The inbox's last message carries it too.
    let inbox = bob.ok(json!({"op": "inbox"})).await;
    let last = &inbox["chats"][0]["last"];
    assert_eq!(get(last["files"][0]["url"].as_str().unwrap(), None).await.0, 200, "{inbox}");
}

fn herald_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[tokio::test]
async fn uploads_that_lie_are_refused_and_leave_the_file_unusable() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let declare =
        |size: usize| json!({"op": "upload", "chat": "g", "name": "a.bin", "type": "image/png", "size": size});

    let up = alice.ok(declare(10)).await;
    let status = put(&up, vec![7; 11]).await;
    assert!((400..500).contains(&status), "more bytes: {status}");
    let status = put(&up, vec![7; 9]).await;
    assert!((400..500).contains(&status), "fewer bytes: {status}");
    let status = put_as(&up, vec![7; 10], "text/html").await;
    assert!((400..500).contains(&status), "another type: {status}");
    let id = up["file"].as_str().unwrap();
    alice.err(json!({"op": "send", "chat": "g", "body": {}, "files": [id]}), "not_found").await;
    let fetched = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    assert_eq!(fetched["events"].as_array().unwrap().len(), 1, "only the join was stored: {fetched}");

    // A forged or tampered URL, and a URL whose time is up.
    let url = up["url"].as_str().unwrap();
    let tampered = url.replace("expires=", "expires=9");
    let res = http_client().put(&tampered).header("Content-Type", "image/png").body(vec![7; 10]).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 403);
    let expired = signed_url(&s, "PUT", &format!("acme/g/{id}"), herald_now() - 1_000);
    let res = http_client().put(&expired).header("Content-Type", "image/png").body(vec![7; 10]).send().await.unwrap();
    assert_eq!(res.status().as_u16(), 403, "an expired URL");
    let body = res.text().await.unwrap();
    assert!(body.contains("expired"), "{body}");

    // The honest upload still works after all that.
    assert_eq!(put(&up, vec![7; 10]).await, 200);
    alice.ok(json!({"op": "send", "chat": "g", "body": {}, "files": [id]})).await;
}

/// A URL of this server signed with its key (read from its data folder), as herald signs them.
fn signed_url(s: &TestServer, grant: &str, object: &str, expires: i64) -> String {
    let key = std::fs::read(s.data.path().join("files").join(".key")).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{grant}\n{object}\n{expires}").as_bytes());
    let sig: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
    format!("http://{}/v1/files/{object}?expires={expires}&sig={sig}", s.addr)
}

#[tokio::test]
async fn files_are_the_uploaders_for_one_chat_and_one_message() {
    let s = TestServer::start_with(|c| c.files.max_file_bytes = 1_000).await;
    let mut alice = s.client("acme", "alice").await;
    let mut bob = s.client("acme", "bob").await;
    for c in [&mut alice, &mut bob] {
        c.ok(json!({"op": "join", "chat": "g"})).await;
        c.ok(json!({"op": "join", "chat": "h"})).await;
    }
    let (mine, _) = upload(&mut alice, "g", "a.png", "image/png", PNG).await;
    let send = |files: Value| json!({"op": "send", "chat": "g", "body": {"text": "x"}, "files": files});
    // Another user's file, another chat's, an unknown one.
    bob.err(send(json!([mine])), "forbidden").await;
    let (other_chat, _) = upload(&mut alice, "h", "b.png", "image/png", PNG).await;
    alice.err(send(json!([other_chat])), "forbidden").await;
    alice.err(send(json!(["fNoSuchFile000000000000"])), "not_found").await;
    // Named twice, too many, not a list.
    alice.err(send(json!([mine, mine])), "bad_request").await;
    let eleven: Vec<String> = (0..11).map(|i| format!("f{i}")).collect();
    alice.err(send(json!(eleven)), "bad_request").await;
    alice.err(send(json!("x")), "bad_request").await;
    // Attached once: another message naming it is refused.
    alice.ok(send(json!([mine]))).await;
    alice.err(send(json!([mine])), "bad_request").await;
    // Declared wrong.
    let up = |name: Value, mime: Value, size: Value| json!({"op": "upload", "chat": "g", "name": name, "type": mime, "size": size});
    alice.err(up(json!("big.bin"), json!("application/octet-stream"), json!(1_001)), "too_large").await;
    alice.err(up(json!("x".repeat(256)), json!("image/png"), json!(1)), "bad_request").await;
    alice.err(up(json!(""), json!("image/png"), json!(1)), "bad_request").await;
    alice.err(up(json!("a"), json!("png"), json!(1)), "bad_request").await;
    alice.err(up(json!("a"), json!("image/png"), json!(-1)), "bad_request").await;
    alice.err(json!({"op": "upload", "chat": "g", "name": "a", "type": "image/png"}), "bad_request").await;
    // Members only, and not while muted.
    let mut carol = s.client("acme", "carol").await;
    carol.err(up(json!("a"), json!("image/png"), json!(1)), "forbidden").await;
    s.http("PUT", "/v1/workspaces/acme/chats/g/mutes/bob", Some(json!({}))).await;
    bob.err(up(json!("a"), json!("image/png"), json!(1)), "forbidden").await;
    // A zero-byte file is a file.
    let (empty, _) = upload(&mut alice, "g", "empty.txt", "text/plain", b"").await;
    alice.ok(send(json!([empty]))).await;
}

#[tokio::test]
async fn html_and_svg_are_served_as_attachments_never_as_pages() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "watch", "chat": "g"})).await;
    let html = b"<html><script>alert(document.cookie)</script></html>";
    let svg = b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>";
    let (h, _) = upload(&mut alice, "g", "x.html", "text/html", html).await;
    let (v, _) = upload(&mut alice, "g", "x.svg", "image/svg+xml", svg).await;
    alice.ok(json!({"op": "send", "chat": "g", "body": {}, "files": [h, v]})).await;
    let pushed = alice.events("g", 1).await.pop().unwrap();
    for (f, bytes) in pushed["files"].as_array().unwrap().iter().zip([&html[..], &svg[..]]) {
        let (code, headers, got) = get(f["url"].as_str().unwrap(), None).await;
        assert_eq!((code, got.as_slice()), (200, bytes));
        assert_eq!(headers["content-type"], f["type"].as_str().unwrap(), "Content-Type as uploaded");
        assert!(headers["content-disposition"].to_str().unwrap().starts_with("attachment"), "{headers:?}");
        assert_eq!(headers["content-security-policy"], "sandbox");
        assert_eq!(headers["x-content-type-options"], "nosniff");
    }
}

#[tokio::test]
async fn a_deleted_or_edited_away_file_is_gone_and_its_bytes_deleted() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "watch", "chat": "g"})).await;
    let (a, _) = upload(&mut alice, "g", "a.png", "image/png", PNG).await;
    let (b, _) = upload(&mut alice, "g", "b.png", "image/png", PNG).await;
    let (c, _) = upload(&mut alice, "g", "c.png", "image/png", PNG).await;
    let m = alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "two"}, "files": [a, b]})).await["seq"].clone();
    let urls: Vec<String> = alice.events("g", 1).await[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["url"].as_str().unwrap().to_string())
        .collect();

    // An edit without files keeps them; with files, the message has those (b kept, c added, a gone).
    alice.ok(json!({"op": "edit", "chat": "g", "target": m, "body": {"text": "kept"}})).await;
    let view = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    let msg = view["events"].as_array().unwrap().iter().find(|e| e["seq"] == m).unwrap().clone();
    assert_eq!(msg["files"].as_array().unwrap().len(), 2, "{msg}");
    alice.ok(json!({"op": "edit", "chat": "g", "target": m, "body": {"text": "b and c"}, "files": [b, c]})).await;
    let edit = alice.events("g", 2).await.pop().unwrap();
    let ids: Vec<&str> = edit["files"].as_array().unwrap().iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [b.as_str(), c.as_str()], "the edit carries the message's files: {edit}");
    let view = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    let msg = view["events"].as_array().unwrap().iter().find(|e| e["seq"] == m).unwrap().clone();
    let ids: Vec<&str> = msg["files"].as_array().unwrap().iter().map(|f| f["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [b.as_str(), c.as_str()]);
    assert_eq!(get(&urls[0], None).await.0, 404, "a file an edit removed is deleted");
    assert_eq!(get(&urls[1], None).await.0, 200);

    // Deleting the message deletes its files: the URLs answer 404 at once, the bytes go within 60 s.
    alice.ok(json!({"op": "delete", "chat": "g", "target": m})).await;
    assert_eq!(get(&urls[1], None).await.0, 404);
    let view = alice.ok(json!({"op": "fetch", "chat": "g", "after": 0})).await;
    let msg = view["events"].as_array().unwrap().iter().find(|e| e["seq"] == m).unwrap().clone();
    assert!(msg.get("files").is_none(), "a deleted message shows no files: {msg}");
    let gone =
        eventually(Duration::from_secs(60), async || [&a, &b, &c].iter().all(|id| !on_disk(&s, "acme", "g", id))).await;
    assert!(gone, "every file's bytes deleted within 60 s");
    // A file deleted is not attachable again.
    alice.err(json!({"op": "send", "chat": "g", "body": {}, "files": [b]}), "not_found").await;
}

#[tokio::test]
async fn a_file_never_attached_is_deleted_after_its_time() {
    // The contract's 24 hours, shortened for the test.
    let s = TestServer::start_with(|c| c.files.files_orphan_ms = 1_000).await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let (id, _) = upload(&mut alice, "g", "a.png", "image/png", PNG).await;
    assert!(on_disk(&s, "acme", "g", &id));
    let gone = eventually(Duration::from_secs(30), async || !on_disk(&s, "acme", "g", &id)).await;
    assert!(gone, "an orphan's bytes are deleted");
    alice.err(json!({"op": "send", "chat": "g", "body": {}, "files": [id]}), "not_found").await;
}

#[tokio::test]
async fn the_server_api_uploads_for_a_user_and_posts_and_edits_with_files() {
    let s = TestServer::start().await;
    s.http("PUT", "/v1/workspaces/acme/chats/g", Some(json!({}))).await;
    let (code, up) = s
        .http(
            "POST",
            "/v1/workspaces/acme/chats/g/files",
            Some(json!({"user": "bot", "name": "r.pdf", "type": "application/pdf", "size": 4})),
        )
        .await;
    assert_eq!(code, 200, "{up}");
    assert_eq!(put(&up, b"%PDF".to_vec()).await, 200);
    let id = up["file"].as_str().unwrap();
    // Only its uploader's message may carry it.
    let post = |user: &str| json!({"type": "message", "user": user, "body": {"text": "report"}, "files": [id]});
    let (code, e) = s.http("POST", "/v1/workspaces/acme/chats/g/events", Some(post("eve"))).await;
    assert_eq!(code, 403, "{e}");
    let (code, ok) = s.http("POST", "/v1/workspaces/acme/chats/g/events", Some(post("bot"))).await;
    assert_eq!(code, 200, "{ok}");
    let (_, page) = s.http("GET", "/v1/workspaces/acme/chats/g/events?after=0", None).await;
    let m = page["events"].as_array().unwrap().iter().find(|e| e["seq"] == ok["seq"]).unwrap().clone();
    let (code, headers, bytes) = get(m["files"][0]["url"].as_str().unwrap(), None).await;
    assert_eq!((code, bytes.as_slice()), (200, &b"%PDF"[..]));
    assert!(headers["content-disposition"].to_str().unwrap().starts_with("attachment; filename=\"r.pdf\""));
    // An edit with `files: []` removes them.
    let path = format!("/v1/workspaces/acme/chats/g/events/{}", ok["seq"]);
    let (code, _) = s.http("PATCH", &path, Some(json!({"body": {"text": "no files"}, "files": []}))).await;
    assert_eq!(code, 200);
    assert_eq!(get(m["files"][0]["url"].as_str().unwrap(), None).await.0, 404);
    // Bad declarations.
    for bad in [
        json!({"user": "bot", "name": "a", "type": "nope", "size": 1}),
        json!({"user": "bot", "name": "a", "type": "image/png"}),
        json!({"user": "b c", "name": "a", "type": "image/png", "size": 1}),
        json!({"name": "a", "type": "image/png", "size": 1}),
    ] {
        let (code, e) = s.http("POST", "/v1/workspaces/acme/chats/g/files", Some(bad.clone())).await;
        assert_eq!(code, 400, "{bad}: {e}");
    }
    let big = json!({"user": "bot", "name": "a", "type": "image/png", "size": 26 * 1024 * 1024});
    assert_eq!(s.http("POST", "/v1/workspaces/acme/chats/g/files", Some(big)).await.0, 413);
    let (code, _) = s
        .http(
            "POST",
            "/v1/workspaces/acme/chats/nope/files",
            Some(json!({"user": "bot", "name": "a", "type": "image/png", "size": 1})),
        )
        .await;
    assert_eq!(code, 404);
    let (code, _) = http(s.addr, "POST", "/v1/workspaces/acme/chats/g/files", None, Some(json!({}))).await;
    assert_eq!(code, 401, "the api key is needed");
}

#[tokio::test]
async fn an_erased_users_files_are_deleted() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    alice.ok(json!({"op": "watch", "chat": "g"})).await;
    let name = format!("me-{:016x}.png", rand::random::<u64>());
    let (id, _) = upload(&mut alice, "g", &name, "image/png", PNG).await;
    alice.ok(json!({"op": "send", "chat": "g", "body": {}, "files": [id]})).await;
    let url = alice.events("g", 1).await[0]["files"][0]["url"].as_str().unwrap().to_string();
    let (code, _) = s.http("DELETE", "/v1/workspaces/acme/users/alice", None).await;
    assert_eq!(code, 200);
    assert_eq!(get(&url, None).await.0, 404);
    let gone = eventually(Duration::from_secs(60), async || !on_disk(&s, "acme", "g", &id)).await;
    assert!(gone, "its bytes deleted within 60 s");
    if test_stores().await.is_empty() {
        let forgotten =
            eventually(Duration::from_secs(60), async || files_containing(s.data.path(), name.as_bytes()).is_empty())
                .await;
        assert!(forgotten, "its name is gone from the store's files too");
    }
}

#[tokio::test]
async fn browsers_may_upload_and_download_from_allowed_origins() {
    let s = TestServer::start_with(|c| c.gateway.limits.allowed_origins = vec!["https://app.example".into()]).await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let up = alice.ok(json!({"op": "upload", "chat": "g", "name": "a.png", "type": "image/png", "size": 3})).await;
    let url = up["url"].as_str().unwrap();
    let pre = http_client()
        .request(reqwest::Method::OPTIONS, url)
        .header("Origin", "https://app.example")
        .header("Access-Control-Request-Method", "PUT")
        .header("Access-Control-Request-Headers", "content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status().as_u16(), 204);
    assert_eq!(pre.headers()["access-control-allow-origin"], "https://app.example");
    assert!(pre.headers()["access-control-allow-methods"].to_str().unwrap().contains("PUT"));
    let res = http_client()
        .put(url)
        .header("Origin", "https://evil.example")
        .header("Content-Type", "image/png")
        .body(vec![1, 2, 3])
        .send()
        .await
        .unwrap();
    assert!(res.headers().get("access-control-allow-origin").is_none(), "another origin is not allowed");
}

#[tokio::test]
async fn a_users_export_carries_their_files_with_urls() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let (id, _) = upload(&mut alice, "g", "a.png", "image/png", PNG).await;
    alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "x"}, "files": [id]})).await;
    let (code, text) = http_raw(s.addr, "GET", "/v1/workspaces/acme/users/alice/export", Some(API_KEY), None).await;
    assert_eq!(code, 200, "{text}");
    let message: Value =
        text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).find(|l| l["kind"] == "message").unwrap();
    let url = message["event"]["files"][0]["url"].as_str().unwrap();
    assert_eq!(get(url, None).await.2, PNG);
}

#[tokio::test]
async fn webhook_events_carry_files_with_urls() {
    let (url, got) = webhook_receiver().await;
    let s = TestServer::start_with(move |c| {
        c.hooks.secret = Some("hook-secret-0123456789abcdef0123456789abcdef".into());
        c.hooks.webhook = Some(herald::hooks::WebhookSettings {
            url,
            events: Some(vec!["message".into()]),
            offline_max: herald::hooks::DEFAULT_WEBHOOK_OFFLINE_MAX,
            timeout: Duration::from_millis(300),
            retry_first: Duration::from_millis(40),
            retry_max: Duration::from_millis(400),
        });
    })
    .await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let (id, _) = upload(&mut alice, "g", "a.png", "image/png", PNG).await;
    alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "x"}, "files": [id]})).await;
    let delivered = eventually(WAIT, async || got.lock().unwrap().iter().any(|e| e["files"].is_array())).await;
    assert!(delivered, "the message reached the webhook with its files: {:?}", got.lock().unwrap());
    let event = got.lock().unwrap().iter().find(|e| e["files"].is_array()).cloned().unwrap();
    assert_eq!(event["files"][0]["id"], id.as_str());
    assert_eq!(get(event["files"][0]["url"].as_str().unwrap(), None).await.2, PNG);
}

#[tokio::test]
async fn search_results_carry_files_with_urls() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let (id, _) = upload(&mut alice, "g", "a.png", "image/png", PNG).await;
    alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "사진이에요"}, "files": [id]})).await;
    let found = eventually(WAIT, async || {
        let r = alice.ok(json!({"op": "search", "query": "사진"})).await;
        r["results"].as_array().is_some_and(|a| !a.is_empty())
    })
    .await;
    assert!(found, "the message was not found");
    let r = alice.ok(json!({"op": "search", "query": "사진"})).await;
    let url = r["results"][0]["files"][0]["url"].as_str().unwrap().to_string();
    assert_eq!(get(&url, None).await.2, PNG);
}

/// Every read that hands out a message gives its files a URL, the ones added after the first
/// reads too: a thread's root and latest reply in `threads`, a pinned message in `pins`.
#[tokio::test]
async fn threads_and_pins_carry_files_with_urls() {
    let s = TestServer::start().await;
    let mut alice = s.client("acme", "alice").await;
    alice.ok(json!({"op": "join", "chat": "g"})).await;
    let (root_file, _) = upload(&mut alice, "g", "root.png", "image/png", PNG).await;
    let root = alice.ok(json!({"op": "send", "chat": "g", "body": {"text": "root"}, "files": [root_file]})).await;
    let root_seq = root["seq"].as_u64().unwrap();
    let (reply_file, _) = upload(&mut alice, "g", "reply.png", "image/png", PNG).await;
    alice
        .ok(json!({"op": "send", "chat": "g", "body": {"text": "re"}, "thread": root_seq, "files": [reply_file]}))
        .await;
    let threads = alice.ok(json!({"op": "threads", "chat": "g"})).await;
    let t = &threads["threads"][0];
    for which in ["root", "last"] {
        let url = t[which]["files"][0]["url"].as_str().unwrap_or_default();
        assert_eq!(get(url, None).await.2, PNG, "the thread's {which}: {threads}");
    }
    alice.ok(json!({"op": "pin", "chat": "g", "target": root_seq})).await;
    let pins = alice.ok(json!({"op": "pins", "chat": "g"})).await;
    let url = pins["pins"][0]["message"]["files"][0]["url"].as_str().unwrap_or_default();
    assert_eq!(get(url, None).await.2, PNG, "the pinned message: {pins}");
}
