//! The embedded backend's URLs, served by herald: `PUT` takes an upload's bytes, `GET` and
//! `HEAD` answer them (with single ranges), `OPTIONS` answers a browser's CORS preflight. A URL is
//! good only with its signature and before its expiry; a file is looked up in the store on every
//! request, so a deleted message's files answer 404 at once, before the sweeper removes the bytes.
//!
//! Every answer says `X-Content-Type-Options: nosniff`; a type that may not be shown inline is
//! served with `Content-Disposition: attachment` and `Content-Security-Policy: sandbox`, so an
//! upload never runs as a page of herald's origin.
//!
//! Not here: signing the URLs (`local.rs`), who may upload (`chat/files.rs`).

use std::io::SeekFrom;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Router, routing::MethodRouter};
use futures_util::StreamExt;
use herald_protocol::ids::is_valid_id;
use tokio::io::{AsyncSeekExt, AsyncWriteExt};

use super::local::{Grant, LocalBlobs};
use super::{FileKey, content_disposition, shown_inline};
use crate::model::ChatKey;
use crate::store::{Store, StoredFile, now_ms};

/// What the file routes share.
#[derive(Clone)]
pub struct Served {
    pub store: Arc<dyn Store>,
    pub blobs: Arc<LocalBlobs>,
    /// Origins a browser may upload and download from (`--allowed-origins`; empty: any).
    pub origins: Arc<[String]>,
    /// Uploads whose bytes are being written at once: each holds a write buffer, so the node's
    /// memory for uploads is bounded whatever the number of uploaders (the others wait, unread).
    pub writing: Arc<tokio::sync::Semaphore>,
}

/// Uploads written at once per node (see [`Served::writing`]).
pub const UPLOADS_AT_ONCE: usize = 64;

/// The routes of the embedded backend's URLs.
pub fn routes(served: Served) -> Router {
    let files: MethodRouter<Served> = get(download).head(download).put(upload).options(preflight);
    Router::new().route("/v1/files/{ws}/{chat}/{id}", files).with_state(served)
}

/// A URL's signature and expiry.
#[derive(serde::Deserialize)]
struct Signed {
    expires: Option<i64>,
    sig: Option<String>,
}

fn plain(status: StatusCode, text: &str) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], format!("{text}\n")).into_response()
}

/// The file a signed URL names, if the URL is good for `grant` now and the file exists.
async fn signed_file(
    s: &Served,
    grant: Grant,
    (ws, chat, id): &(String, String, String),
    q: &Signed,
) -> Result<(FileKey, StoredFile), Response> {
    if ![ws, chat, id].iter().all(|p| is_valid_id(p)) {
        return Err(plain(StatusCode::NOT_FOUND, "no such file"));
    }
    let key = FileKey { ws: ws.clone(), chat: chat.clone(), id: id.clone() };
    let (Some(expires), Some(sig)) = (q.expires, q.sig.as_deref()) else {
        return Err(plain(StatusCode::FORBIDDEN, "this URL is not signed"));
    };
    if !s.blobs.verify(grant, &key, expires, sig) {
        metrics::counter!("herald_file_requests_refused_total", "why" => "signature").increment(1);
        return Err(plain(StatusCode::FORBIDDEN, "this URL's signature does not match"));
    }
    if now_ms() > expires {
        metrics::counter!("herald_file_requests_refused_total", "why" => "expired").increment(1);
        return Err(plain(StatusCode::FORBIDDEN, "this URL has expired: ask for a fresh one"));
    }
    let chat_key = ChatKey::new(ws, chat);
    let found = s.store.files(&chat_key, std::slice::from_ref(id)).await.map_err(|e| {
        tracing::warn!(error = %e, "reading a file's row failed");
        plain(StatusCode::SERVICE_UNAVAILABLE, "the store is unavailable; try again")
    })?;
    match found.into_iter().next().filter(|f| !f.gone) {
        Some(f) => Ok((key, f)),
        None => Err(plain(StatusCode::NOT_FOUND, "no such file (or it was deleted)")),
    }
}

/// CORS headers for a request from `origin`, when it may be answered.
fn cors(s: &Served, headers: &HeaderMap, answer: &mut HeaderMap) {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|o| o.to_str().ok()) else { return };
    let allowed = s.origins.is_empty() || s.origins.iter().any(|o| o == origin);
    if allowed && let Ok(v) = HeaderValue::from_str(if s.origins.is_empty() { "*" } else { origin }) {
        answer.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, v);
        answer.insert(header::VARY, HeaderValue::from_static("Origin"));
        answer.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static("Content-Length, Content-Range, Content-Disposition"),
        );
    }
}

async fn preflight(State(s): State<Served>, headers: HeaderMap) -> Response {
    let mut answer = HeaderMap::new();
    cors(&s, &headers, &mut answer);
    answer.insert(header::ACCESS_CONTROL_ALLOW_METHODS, HeaderValue::from_static("GET, HEAD, PUT"));
    answer.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, HeaderValue::from_static("Content-Type, Range"));
    answer.insert(header::ACCESS_CONTROL_MAX_AGE, HeaderValue::from_static("600"));
    (StatusCode::NO_CONTENT, answer).into_response()
}

/// Takes exactly the declared bytes of the declared type, once: more, fewer or another type are
/// refused (4xx) and leave the file incomplete.
async fn upload(
    State(s): State<Served>,
    Path(path): Path<(String, String, String)>,
    Query(q): Query<Signed>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let mut answer = HeaderMap::new();
    cors(&s, &headers, &mut answer);
    let refused = |status: StatusCode, why: &'static str, text: &str| {
        metrics::counter!("herald_file_uploads_refused_total", "why" => why).increment(1);
        let mut r = plain(status, text);
        r.headers_mut().extend(answer.clone());
        r
    };
    let (key, file) = match signed_file(&s, Grant::Put, &path, &q).await {
        Ok(found) => found,
        Err(mut r) => {
            r.headers_mut().extend(answer.clone());
            return r;
        }
    };
    let final_path = s.blobs.path(&key);
    if file.seq.is_some() || tokio::fs::try_exists(&final_path).await.unwrap_or(false) {
        return refused(StatusCode::CONFLICT, "again", "this file is already uploaded");
    }
    let given_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if given_type != file.mime {
        let text = format!("Content-Type must be {} as declared, not {given_type:?}", file.mime);
        return refused(StatusCode::BAD_REQUEST, "type", &text);
    }
    let declared = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n != file.size) {
        let text = format!("the upload must be exactly {} bytes, as declared", file.size);
        return refused(StatusCode::BAD_REQUEST, "size", &text);
    }
    let Ok(_writing) = s.writing.acquire().await else {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "the node is stopping");
    };
    let part = s.blobs.part_path(&key);
    match receive(body, &part, file.size).await {
        Ok(()) => {}
        Err(Received::TooMany) => {
            let _ = tokio::fs::remove_file(&part).await;
            let text = format!("more than the {} bytes declared", file.size);
            return refused(StatusCode::PAYLOAD_TOO_LARGE, "size", &text);
        }
        Err(Received::TooFew(n)) => {
            let _ = tokio::fs::remove_file(&part).await;
            let text = format!("{n} bytes arrived, not the {} declared", file.size);
            return refused(StatusCode::BAD_REQUEST, "size", &text);
        }
        Err(Received::Failed(e)) => {
            let _ = tokio::fs::remove_file(&part).await;
            tracing::error!(error = %e, "storing an upload failed");
            metrics::counter!("herald_file_uploads_refused_total", "why" => "storage").increment(1);
            let mut r = plain(StatusCode::SERVICE_UNAVAILABLE, "storing the file failed; try again");
            r.headers_mut().extend(answer);
            return r;
        }
    }
    let placed = async {
        if let Some(dir) = final_path.parent() {
            tokio::fs::create_dir_all(dir).await?;
        }
        tokio::fs::rename(&part, &final_path).await
    };
    if let Err(e) = placed.await {
        let _ = tokio::fs::remove_file(&part).await;
        tracing::error!(error = %e, "placing an upload failed");
        return plain(StatusCode::SERVICE_UNAVAILABLE, "storing the file failed; try again");
    }
    metrics::counter!("herald_file_uploads_total", "backend" => "local").increment(1);
    metrics::counter!("herald_file_upload_bytes_total").increment(file.size);
    (StatusCode::OK, answer).into_response()
}

enum Received {
    TooMany,
    TooFew(u64),
    Failed(std::io::Error),
}

/// Writes `body` to `part` (fsynced), refusing more or fewer than `size` bytes.
async fn receive(body: Body, part: &std::path::Path, size: u64) -> Result<(), Received> {
    let mut out = tokio::fs::File::create(part).await.map_err(Received::Failed)?;
    let mut stream = body.into_data_stream();
    let mut n = 0u64;
    while let Some(chunk) = stream.next().await {
        // A body cut off midway is fewer bytes than declared.
        let Ok(chunk) = chunk else { return Err(Received::TooFew(n)) };
        n += chunk.len() as u64;
        if n > size {
            return Err(Received::TooMany);
        }
        out.write_all(&chunk).await.map_err(Received::Failed)?;
    }
    if n < size {
        return Err(Received::TooFew(n));
    }
    out.sync_all().await.map_err(Received::Failed)
}

/// The bytes, with `Content-Type` as uploaded and a single range if one is asked for.
async fn download(
    State(s): State<Served>,
    method: Method,
    Path(path): Path<(String, String, String)>,
    Query(q): Query<Signed>,
    headers: HeaderMap,
) -> Response {
    let mut answer = HeaderMap::new();
    cors(&s, &headers, &mut answer);
    let (key, file) = match signed_file(&s, Grant::Get, &path, &q).await {
        Ok(found) => found,
        Err(mut r) => {
            r.headers_mut().extend(answer);
            return r;
        }
    };
    let mut f = match tokio::fs::File::open(s.blobs.path(&key)).await {
        Ok(f) => f,
        Err(_) => {
            let mut r = plain(StatusCode::NOT_FOUND, "no such file (or it was never uploaded)");
            r.headers_mut().extend(answer);
            return r;
        }
    };
    let size = file.size;
    if let Ok(v) = HeaderValue::from_str(&file.mime) {
        answer.insert(header::CONTENT_TYPE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&content_disposition(&file.name, &file.mime)) {
        answer.insert(header::CONTENT_DISPOSITION, v);
    }
    if !shown_inline(&file.mime) {
        answer.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static("sandbox"));
    }
    answer.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    answer.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    answer.insert(header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=3600"));
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok()).map(|r| parse_range(r, size));
    let (status, start, len) = match range {
        None | Some(Range::Ignored) => (StatusCode::OK, 0, size),
        Some(Range::Bytes(a, b)) => {
            if let Ok(v) = HeaderValue::from_str(&format!("bytes {a}-{b}/{size}")) {
                answer.insert(header::CONTENT_RANGE, v);
            }
            (StatusCode::PARTIAL_CONTENT, a, b - a + 1)
        }
        Some(Range::Unsatisfiable) => {
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
                answer.insert(header::CONTENT_RANGE, v);
            }
            return (StatusCode::RANGE_NOT_SATISFIABLE, answer).into_response();
        }
    };
    answer.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if method == Method::HEAD {
        return (status, answer).into_response();
    }
    if start > 0 && f.seek(SeekFrom::Start(start)).await.is_err() {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "reading the file failed");
    }
    metrics::counter!("herald_file_downloads_total", "backend" => "local").increment(1);
    let stream = tokio_util::io::ReaderStream::new(tokio::io::AsyncReadExt::take(f, len));
    (status, answer, Body::from_stream(stream)).into_response()
}

/// A `Range` header as this server answers it.
#[derive(Debug, PartialEq, Eq)]
enum Range {
    /// `bytes=a-b`: bytes a to b inclusive, within the file.
    Bytes(u64, u64),
    /// Several ranges, or another unit: the whole file is answered (RFC 9110 allows it).
    Ignored,
    Unsatisfiable,
}

fn parse_range(value: &str, size: u64) -> Range {
    let Some(spec) = value.trim().strip_prefix("bytes=") else { return Range::Ignored };
    if spec.contains(',') {
        return Range::Ignored;
    }
    let Some((a, b)) = spec.trim().split_once('-') else { return Range::Unsatisfiable };
    let (a, b) = (a.trim(), b.trim());
    let range = match (a.parse::<u64>().ok(), b.parse::<u64>().ok()) {
        (Some(a), Some(b)) if a <= b => Some((a, b.min(size.saturating_sub(1)))),
        (Some(a), None) if b.is_empty() => Some((a, size.saturating_sub(1))),
        (None, Some(n)) if a.is_empty() && n > 0 => Some((size.saturating_sub(n), size.saturating_sub(1))),
        _ => None,
    };
    match range {
        Some((a, b)) if a < size && a <= b => Range::Bytes(a, b),
        _ => Range::Unsatisfiable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_as_the_rfc_says() {
        assert_eq!(parse_range("bytes=0-9", 100), Range::Bytes(0, 9));
        assert_eq!(parse_range("bytes=90-200", 100), Range::Bytes(90, 99));
        assert_eq!(parse_range("bytes=95-", 100), Range::Bytes(95, 99));
        assert_eq!(parse_range("bytes=-10", 100), Range::Bytes(90, 99));
        assert_eq!(parse_range("bytes=-200", 100), Range::Bytes(0, 99));
        assert_eq!(parse_range("bytes=100-", 100), Range::Unsatisfiable);
        assert_eq!(parse_range("bytes=5-2", 100), Range::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-0", 0), Range::Unsatisfiable);
        assert_eq!(parse_range("bytes=0-1,4-5", 100), Range::Ignored);
        assert_eq!(parse_range("items=0-1", 100), Range::Ignored);
    }
}
