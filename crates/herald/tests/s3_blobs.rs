//! The S3 backend against a real S3-compatible server (versitygw, through
//! scripts/s3.sh): what a bucket accepts and refuses with the URLs herald
//! signs, as a browser would send them.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::s3::S3Server;
use herald::files::s3::S3Blobs;
use herald::files::{Blobs, FileKey, FileMeta, UploadTarget, UrlWindow};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn file(id: &str, name: &str, mime: &str, size: u64) -> FileMeta {
    FileMeta {
        key: FileKey { ws: "acme".into(), chat: "general".into(), id: id.into() },
        name: name.into(),
        mime: mime.into(),
        size,
    }
}

/// Sends `body` as a browser would: the target's headers, Content-Length
/// from the body. `content_type` replaces the target's when given.
async fn put(target: &UploadTarget, body: Vec<u8>, content_type: Option<Option<&str>>) -> u16 {
    let mut req = reqwest::Client::new().put(&target.url);
    for (k, v) in &target.headers {
        let v = match (k.eq_ignore_ascii_case("content-type"), content_type) {
            (true, Some(None)) => continue,
            (true, Some(Some(other))) => other,
            _ => v.as_str(),
        };
        req = req.header(k, v);
    }
    req.body(body).send().await.expect("PUT reaches the server").status().as_u16()
}

async fn get(url: &str) -> reqwest::Response {
    reqwest::get(url).await.expect("GET reaches the server")
}

#[tokio::test]
#[ignore = "needs versitygw (scripts/s3.sh builds it); scripts/test.sh runs it"]
async fn exactly_size_bytes_upload_complete_and_download_as_uploaded_until_deleted() {
    let s3 = S3Server::start();
    let blobs = S3Blobs::from_url(&s3.url).unwrap();
    blobs.check().await.expect("the bucket answers to its keys");
    let page = file("fPage0000000000000000000", "page one.html", "text/html", 1000);
    assert!(!blobs.complete(&page).await.unwrap(), "nothing uploaded yet");

    let now = now_ms();
    let target = blobs.upload(&page, now, now + 600_000);
    assert_eq!(target.method, "PUT");
    let bytes: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(put(&target, bytes.clone(), None).await, 200);
    assert!(blobs.complete(&page).await.unwrap());

    let url = blobs.download_url(&page, UrlWindow::at(now));
    let resp = get(&url).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/html");
    let disposition = resp.headers()["content-disposition"].to_str().unwrap().to_string();
    assert!(disposition.starts_with("attachment; filename=\"page one.html\""), "{disposition}");
    assert_eq!(resp.bytes().await.unwrap().as_ref(), &bytes[..]);

    blobs.delete(&page.key).await.unwrap();
    assert_eq!(get(&url).await.status(), 404, "a deleted file's URL answers 404");
    assert!(!blobs.complete(&page).await.unwrap());
    blobs.delete(&page.key).await.expect("deleting a file already gone is fine");
}

#[tokio::test]
#[ignore = "needs versitygw (scripts/s3.sh builds it); scripts/test.sh runs it"]
async fn images_are_inline_and_empty_files_upload() {
    let s3 = S3Server::start();
    let blobs = S3Blobs::from_url(&s3.url).unwrap();
    let now = now_ms();
    let png = file("fPng00000000000000000000", "사진.png", "image/png", 3);
    assert_eq!(put(&blobs.upload(&png, now, now + 600_000), vec![1, 2, 3], None).await, 200);
    let resp = get(&blobs.download_url(&png, UrlWindow::at(now))).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "image/png");
    let disposition = resp.headers()["content-disposition"].to_str().unwrap();
    assert!(disposition.starts_with("inline; filename=\"__.png\"; filename*=UTF-8''%EC%82%AC"), "{disposition}");

    let empty = file("fEmpty000000000000000000", "empty.txt", "text/plain; charset=utf-8", 0);
    assert!(!blobs.complete(&empty).await.unwrap());
    assert_eq!(put(&blobs.upload(&empty, now, now + 600_000), Vec::new(), None).await, 200);
    assert!(blobs.complete(&empty).await.unwrap());
    let resp = get(&blobs.download_url(&empty, UrlWindow::at(now))).await;
    assert_eq!(resp.headers()["content-type"], "text/plain; charset=utf-8");
    assert!(resp.bytes().await.unwrap().is_empty());
}

#[tokio::test]
#[ignore = "needs versitygw (scripts/s3.sh builds it); scripts/test.sh runs it"]
async fn the_bucket_refuses_more_or_fewer_bytes_another_type_and_late_uploads() {
    let s3 = S3Server::start();
    let blobs = S3Blobs::from_url(&s3.url).unwrap();
    let doc = file("fDoc00000000000000000000", "doc.pdf", "application/pdf", 100);
    let now = now_ms();
    let target = blobs.upload(&doc, now, now + 600_000);
    for (what, body, content_type) in [
        ("one byte more", vec![7; 101], None),
        ("one byte fewer", vec![7; 99], None),
        ("another type", vec![7; 100], Some(Some("text/html"))),
        ("no type", vec![7; 100], Some(None)),
    ] {
        let status = put(&target, body, content_type).await;
        assert!((400..500).contains(&status), "{what}: {status}");
        assert!(!blobs.complete(&doc).await.unwrap(), "{what} leaves the file incomplete");
    }

    let late = blobs.upload(&doc, now - 120_000, now - 60_000);
    let status = put(&late, vec![7; 100], None).await;
    assert!((400..500).contains(&status), "an expired upload URL: {status}");
    assert!(!blobs.complete(&doc).await.unwrap());

    // The right bytes still go in, and an expired download URL is refused.
    assert_eq!(put(&target, vec![7; 100], None).await, 200);
    let stale = blobs.download_url(&doc, UrlWindow { start_ms: now - 7_200_000, end_ms: now - 60_000 });
    let status = get(&stale).await.status().as_u16();
    assert!((400..500).contains(&status), "an expired download URL: {status}");
}

#[tokio::test]
#[ignore = "needs versitygw (scripts/s3.sh builds it); scripts/test.sh runs it"]
async fn the_start_check_says_what_is_wrong() {
    let s3 = S3Server::start();
    let base = s3.endpoint.trim_start_matches("http://");
    let keys = format!("{}:{}", common::s3::ACCESS_KEY, common::s3::SECRET_KEY);

    let no_bucket = S3Blobs::from_url(&format!("http://{keys}@{base}/elsewhere")).unwrap();
    let e = no_bucket.check().await.unwrap_err().to_string();
    assert!(e.contains("no such bucket"), "{e}");

    let wrong_secret = S3Blobs::from_url(&format!("http://{}:wrong@{base}/herald", common::s3::ACCESS_KEY)).unwrap();
    let e = wrong_secret.check().await.unwrap_err().to_string();
    assert!(e.contains("refused these keys"), "{e}");
    assert!(!e.contains("wrong"), "the secret stays out of errors: {e}");

    let port = common::free_port();
    let nobody = S3Blobs::from_url(&format!("http://{keys}@127.0.0.1:{port}/herald")).unwrap();
    let e = nobody.check().await.unwrap_err().to_string();
    assert!(e.contains("cannot reach"), "{e}");
    assert!(!e.contains(common::s3::SECRET_KEY), "{e}");
}

#[tokio::test]
#[ignore = "needs versitygw (scripts/s3.sh builds it); scripts/test.sh runs it"]
async fn the_documented_cors_rule_lets_the_apps_origin_upload_and_fetch() {
    let s3 = S3Server::start_with_cors("http://app.test");
    let blobs = S3Blobs::from_url(&s3.url).unwrap();
    let note = file("fNote0000000000000000000", "note.txt", "text/plain", 5);
    let now = now_ms();
    let target = blobs.upload(&note, now, now + 600_000);
    let http = reqwest::Client::new();
    let preflight = |origin: &'static str| {
        http.request(reqwest::Method::OPTIONS, &target.url)
            .header("Origin", origin)
            .header("Access-Control-Request-Method", "PUT")
            .header("Access-Control-Request-Headers", "content-type")
            .send()
    };
    let ok = preflight("http://app.test").await.unwrap();
    assert!(ok.status().is_success(), "{}", ok.status());
    assert_eq!(ok.headers()["access-control-allow-origin"], "http://app.test");
    let other = preflight("http://elsewhere.test").await.unwrap();
    assert!(other.headers().get("access-control-allow-origin").is_none(), "another origin is not let in");

    let put = http.put(&target.url).header("Origin", "http://app.test").header("Content-Type", "text/plain");
    let resp = put.body(b"hello".to_vec()).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["access-control-allow-origin"], "http://app.test");
    let url = blobs.download_url(&note, UrlWindow::at(now));
    let resp = http.get(&url).header("Origin", "http://app.test").send().await.unwrap();
    assert_eq!(resp.headers()["access-control-allow-origin"], "http://app.test");
    assert_eq!(resp.text().await.unwrap(), "hello");
}
