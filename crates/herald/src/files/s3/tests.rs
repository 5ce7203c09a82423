//! `--files-s3` parsing and what the backend signs (no server: the real
//! bucket's answers are in tests/s3_blobs.rs).

use super::*;

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(url: &str) -> anyhow::Result<S3Blobs> {
    S3Blobs::from_url_with(url, no_env)
}

fn err(url: &str) -> String {
    format!("{:#}", parse(url).expect_err(url))
}

fn file(mime: &str) -> FileMeta {
    FileMeta {
        key: FileKey { ws: "acme".into(), chat: "general".into(), id: "fAbCdEfGhIjKlMnOpQrStUv".into() },
        name: "report.html".into(),
        mime: mime.into(),
        size: 1234,
    }
}

#[test]
fn reads_endpoint_bucket_keys_and_region() {
    let s = parse("http://AKIA:se%2Fcr%2Bet@127.0.0.1:9000/files?region=eu-west-3").unwrap();
    assert_eq!(s.origin, "http://127.0.0.1:9000");
    assert_eq!(s.host, "127.0.0.1:9000");
    assert_eq!(s.bucket, "files");
    assert_eq!(s.region, "eu-west-3");
    assert_eq!(s.keys.access, "AKIA");
    assert_eq!(s.keys.secret, "se/cr+et");

    let s = parse("https://a:b@s3.example.com/my.bucket-1/").unwrap();
    assert_eq!((s.origin.as_str(), s.host.as_str()), ("https://s3.example.com", "s3.example.com"));
    assert_eq!((s.bucket.as_str(), s.region.as_str()), ("my.bucket-1", "us-east-1"));
}

#[test]
fn keys_may_come_from_the_environment() {
    let env = |name: &str| match name {
        "AWS_ACCESS_KEY_ID" => Some("ENVKEY".to_string()),
        "AWS_SECRET_ACCESS_KEY" => Some("envsecret".to_string()),
        _ => None,
    };
    let s = S3Blobs::from_url_with("http://127.0.0.1:9000/files", env).unwrap();
    assert_eq!((s.keys.access.as_str(), s.keys.secret.as_str()), ("ENVKEY", "envsecret"));
    // Keys in the URL win.
    let s = S3Blobs::from_url_with("http://k:s@127.0.0.1:9000/files", env).unwrap();
    assert_eq!(s.keys.access, "k");
}

#[test]
fn bad_urls_get_one_line_errors_without_the_secret() {
    for (url, says) in [
        ("not a url", "not a URL"),
        ("ftp://k:s@h/b", "http:// or https://"),
        ("http://k:s@127.0.0.1:9000", "no bucket"),
        ("http://k:s@127.0.0.1:9000/", "no bucket"),
        ("http://k:s@127.0.0.1:9000/a/b", "just /BUCKET"),
        ("http://k:s@127.0.0.1:9000/Bad_Bucket", "not a bucket name"),
        ("http://k:s@127.0.0.1:9000/bkt?region=", "region is empty"),
        ("http://k:s@127.0.0.1:9000/bkt?style=virtual", "unknown parameter"),
        ("http://127.0.0.1:9000/files", "no keys"),
        ("http://k@127.0.0.1:9000/files", "no secret key"),
        ("http://:topsecret@127.0.0.1:9000/files", "no access key"),
    ] {
        let e = err(url);
        assert!(e.contains(says), "{url}: {e}");
        assert!(!e.contains('\n'), "{url}: {e}");
        assert!(!e.contains("topsecret"), "{url}: {e}");
    }
    let s = parse("http://k:topsecret@127.0.0.1:9000/files").unwrap();
    assert!(!format!("{s:?}").contains("topsecret"));
}

#[test]
fn upload_urls_sign_the_type_and_length_until_the_expiry() {
    let s = parse("http://k:s@127.0.0.1:9000/files").unwrap();
    let now_ms = 1_700_000_000_500;
    let t = s.upload(&file("text/html"), now_ms, now_ms + 600_000);
    assert_eq!(t.method, "PUT");
    assert_eq!(t.headers, vec![("Content-Type".to_string(), "text/html".to_string())]);
    assert!(t.url.starts_with("http://127.0.0.1:9000/files/acme/general/fAbCdEfGhIjKlMnOpQrStUv?"), "{}", t.url);
    assert!(t.url.contains("X-Amz-SignedHeaders=content-length%3Bcontent-type%3Bhost"), "{}", t.url);
    assert!(t.url.contains("X-Amz-Expires=600&"), "{}", t.url);
    assert!(t.url.contains("X-Amz-Date=20231114T221320Z"), "{}", t.url);
    // Another size or type is another signature.
    let mut bigger = file("text/html");
    bigger.size += 1;
    assert_ne!(sig(&s.upload(&bigger, now_ms, now_ms + 600_000).url), sig(&t.url));
    assert_ne!(sig(&s.upload(&file("text/plain"), now_ms, now_ms + 600_000).url), sig(&t.url));
}

fn sig(url: &str) -> &str {
    url.rsplit_once("X-Amz-Signature=").map(|(_, s)| s).unwrap_or("")
}

#[test]
fn download_urls_are_the_same_within_a_window_and_name_the_disposition() {
    let s = parse("http://k:s@127.0.0.1:9000/files").unwrap();
    let f = file("text/html");
    let w = UrlWindow::at(1_700_000_000_000);
    let a = s.download_url(&f, w);
    assert_eq!(a, s.download_url(&f, UrlWindow::at(1_700_000_000_000 + 1_000)));
    assert_eq!(a, s.download_url(&f, w));
    assert_ne!(a, s.download_url(&f, UrlWindow::at(1_700_000_000_000 + 3_600_000)));
    assert!(a.contains("X-Amz-Expires=7200&"), "{a}");
    assert!(a.contains("response-content-type=text%2Fhtml"), "{a}");
    assert!(a.contains("response-content-disposition=attachment%3B%20filename%3D%22report.html%22"), "{a}");
    assert!(a.contains("X-Amz-SignedHeaders=host&"), "{a}");
    let png = s.download_url(&file("image/png"), w);
    assert!(png.contains("response-content-disposition=inline%3B"), "{png}");
}

#[test]
fn expiries_stay_within_what_sigv4_allows() {
    let s = parse("http://k:s@127.0.0.1:9000/files").unwrap();
    let t = s.upload(&file("a/b"), 10_000_000, 10_000_000 + 30 * 86_400_000);
    assert!(t.url.contains("X-Amz-Expires=604800&"), "{}", t.url);
    let t = s.upload(&file("a/b"), 10_000_000, 9_000_000);
    assert!(t.url.contains("X-Amz-Expires=1&"), "{}", t.url);
}
