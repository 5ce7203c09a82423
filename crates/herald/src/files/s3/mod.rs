//! The S3-compatible backend (`--files-s3`): files' bytes live in one bucket,
//! addressed path-style (`endpoint/BUCKET/ws/chat/id`); clients upload to and
//! download from it with URLs herald presigns (SigV4, `sigv4.rs`), so the
//! bytes never pass through herald. herald itself only asks the bucket
//! whether an upload is complete (HEAD), deletes (DELETE) and checks at start
//! that the bucket answers to its keys, each with a short-lived URL of its
//! own signing, sent with `reqwest`.
//!
//! What the bucket enforces: an upload URL signs `Content-Type` and
//! `Content-Length`, so another type or another number of bytes is refused
//! (403); a download URL signs `response-content-type` and
//! `response-content-disposition`, so the bucket serves the type as uploaded
//! and, unless [`shown_inline`](super::shown_inline), as an attachment.
//!
//! Not here: the flag's declaration (`settings.rs`), browsers' CORS (a rule
//! on the bucket, see docs/operations.md), which files to delete (`sweep.rs`).

mod sigv4;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use reqwest::{StatusCode, Url};

use self::sigv4::{Keys, Presign, encode_path};
use super::{BlobError, Blobs, FileKey, FileMeta, UploadTarget, UrlWindow, content_disposition};
use crate::model::BoxFuture;

/// The region signed into URLs when `--files-s3` names none.
const DEFAULT_REGION: &str = "us-east-1";
/// How long a URL herald signs for its own HEAD or DELETE is valid: it is
/// sent at once, so this only has to cover clocks a little apart.
const OWN_REQUEST_EXPIRES_S: i64 = 300;
/// herald's own requests to the bucket: no answer in this long is an error
/// (the caller retries later; the sweeper, say).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Files in an S3-compatible bucket. Built from `--files-s3`
/// ([`S3Blobs::from_url`]); its secret key never appears in logs or errors.
pub struct S3Blobs {
    /// `scheme://host[:port]`: where URLs point.
    origin: String,
    /// The `Host` header clients send to `origin`, as signed.
    host: String,
    bucket: String,
    region: String,
    keys: Keys,
    http: reqwest::Client,
}

impl std::fmt::Debug for S3Blobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Blobs")
            .field("origin", &self.origin)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key", &self.keys.access)
            .finish_non_exhaustive()
    }
}

impl S3Blobs {
    /// Reads `--files-s3`: `http(s)://ACCESS_KEY:SECRET_KEY@host:port/BUCKET?region=R`,
    /// the keys percent-encoded where they hold reserved characters (`/` is
    /// `%2F`), or taken from `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`
    /// when the URL has none. Errors are one line, without the secret.
    pub fn from_url(url: &str) -> anyhow::Result<S3Blobs> {
        Self::from_url_with(url, |name| std::env::var(name).ok())
    }

    fn from_url_with(url: &str, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<S3Blobs> {
        let parsed = Url::parse(url).map_err(|e| anyhow!("--files-s3 is not a URL ({e})"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            bail!("--files-s3 must be an http:// or https:// URL, not {}://", parsed.scheme());
        }
        let host_name = parsed.host_str().filter(|h| !h.is_empty()).context("--files-s3 names no host")?;
        let host = match parsed.port() {
            Some(port) => format!("{host_name}:{port}"),
            None => host_name.to_string(),
        };
        let origin = format!("{}://{host}", parsed.scheme());

        let segments: Vec<&str> = parsed.path().trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
        let bucket = match segments.as_slice() {
            [bucket] => bucket.to_string(),
            [] => bail!("--files-s3 names no bucket: its path must be /BUCKET (path-style addressing)"),
            _ => bail!("--files-s3's path must be just /BUCKET (path-style addressing), not {}", parsed.path()),
        };
        if !valid_bucket(&bucket) {
            bail!(
                "--files-s3: {bucket:?} is not a bucket name (3 to 63 of a-z 0-9 . -, starting and ending with a letter or digit)"
            );
        }

        let mut region = DEFAULT_REGION.to_string();
        for (k, v) in parsed.query_pairs() {
            match k.as_ref() {
                "region" if !v.is_empty() => region = v.into_owned(),
                "region" => bail!("--files-s3: region is empty"),
                other => bail!("--files-s3: unknown parameter {other:?} (only region is read)"),
            }
        }

        let access = percent_decode(parsed.username()).context("--files-s3: the access key is not valid UTF-8")?;
        let secret =
            percent_decode(parsed.password().unwrap_or("")).context("--files-s3: the secret key is not valid UTF-8")?;
        let keys = match (access.is_empty(), secret.is_empty()) {
            (false, false) => Keys::new(access, secret),
            (true, true) => match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
                (Some(access), Some(secret)) if !access.is_empty() && !secret.is_empty() => Keys::new(access, secret),
                _ => bail!(
                    "--files-s3 has no keys: give ACCESS_KEY:SECRET_KEY@ in the URL, or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
                ),
            },
            (false, true) => bail!("--files-s3 gives an access key but no secret key (ACCESS_KEY:SECRET_KEY@)"),
            (true, false) => bail!("--files-s3 gives a secret key but no access key (ACCESS_KEY:SECRET_KEY@)"),
        };

        let http = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| anyhow!("--files-s3: cannot make an HTTP client ({e})"))?;
        Ok(S3Blobs { origin, host, bucket, region, keys, http })
    }

    /// Checks that the bucket exists and answers to these keys (a HEAD of the
    /// bucket): the error says which of the two, or that it could not be reached.
    pub async fn check(&self) -> anyhow::Result<()> {
        let path = format!("/{}", self.bucket);
        let url = self.sign("HEAD", &path, &[], &[], now_ms(), OWN_REQUEST_EXPIRES_S);
        let where_ = format!("bucket {} at {}", self.bucket, self.origin);
        let resp = self.http.head(&url).send().await.map_err(|e| anyhow!("--files-s3: cannot reach {where_} ({e})"))?;
        match resp.status() {
            s if s.is_success() => Ok(()),
            StatusCode::NOT_FOUND => {
                bail!("--files-s3: {where_} answered 404: no such bucket (or the access key is unknown there)")
            }
            s @ (StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED) => {
                bail!("--files-s3: {where_} refused these keys ({s}): check the access key, secret key and region")
            }
            s => bail!("--files-s3: {where_} answered {s}"),
        }
    }

    /// `/BUCKET/ws/chat/id`, URI-encoded.
    fn object_path(&self, key: &FileKey) -> String {
        format!("/{}/{}", self.bucket, encode_path(&key.object()))
    }

    /// An absolute presigned URL.
    fn sign(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        headers: &[(&str, &str)],
        at_ms: i64,
        expires_s: i64,
    ) -> String {
        let req = Presign { method, host: &self.host, path, query, headers, at_s: at_ms.div_euclid(1000), expires_s };
        format!("{}{}", self.origin, sigv4::presign(&self.keys, &self.region, &req))
    }

    /// Sends herald's own request to an object.
    async fn own_request(&self, method: reqwest::Method, key: &FileKey) -> Result<reqwest::Response, BlobError> {
        let url = self.sign(method.as_str(), &self.object_path(key), &[], &[], now_ms(), OWN_REQUEST_EXPIRES_S);
        self.http
            .request(method.clone(), &url)
            .send()
            .await
            .map_err(|e| BlobError::Unavailable(format!("s3 {method} {}: {e}", key.object())))
    }
}

impl Blobs for S3Blobs {
    fn kind(&self) -> &'static str {
        "s3"
    }

    fn upload(&self, file: &FileMeta, now_ms: i64, expires_ms: i64) -> UploadTarget {
        let at_s = now_ms.div_euclid(1000);
        let length = file.size.to_string();
        let headers = [("content-length", length.as_str()), ("content-type", file.mime.as_str())];
        let url =
            self.sign("PUT", &self.object_path(&file.key), &[], &headers, now_ms, expires_ms.div_euclid(1000) - at_s);
        UploadTarget { url, method: "PUT", headers: vec![("Content-Type".to_string(), file.mime.clone())] }
    }

    fn download_url(&self, file: &FileMeta, window: UrlWindow) -> String {
        let disposition = content_disposition(&file.name, &file.mime);
        let query =
            [("response-content-disposition", disposition.as_str()), ("response-content-type", file.mime.as_str())];
        let expires_s = (window.end_ms - window.start_ms).div_euclid(1000);
        self.sign("GET", &self.object_path(&file.key), &query, &[], window.start_ms, expires_s)
    }

    fn complete<'a>(&'a self, file: &'a FileMeta) -> BoxFuture<'a, Result<bool, BlobError>> {
        Box::pin(async move {
            let resp = self.own_request(reqwest::Method::HEAD, &file.key).await?;
            match resp.status() {
                s if s.is_success() => {
                    let length = resp
                        .headers()
                        .get(reqwest::header::CONTENT_LENGTH)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok());
                    Ok(length == Some(file.size))
                }
                StatusCode::NOT_FOUND => Ok(false),
                s => Err(BlobError::Unavailable(format!("s3 HEAD {} answered {s}", file.key.object()))),
            }
        })
    }

    fn delete<'a>(&'a self, key: &'a FileKey) -> BoxFuture<'a, Result<(), BlobError>> {
        Box::pin(async move {
            let resp = self.own_request(reqwest::Method::DELETE, key).await?;
            match resp.status() {
                s if s.is_success() || s == StatusCode::NOT_FOUND => Ok(()),
                s => Err(BlobError::Unavailable(format!("s3 DELETE {} answered {s}", key.object()))),
            }
        })
    }
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// S3's rules for bucket names that path-style URLs can carry.
fn valid_bucket(name: &str) -> bool {
    let b = name.as_bytes();
    (3..=63).contains(&b.len())
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'.' || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// `%XX` sequences to bytes; `None` when the result is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (b[i], b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests;
