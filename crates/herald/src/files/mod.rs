//! Files (protocol v1.2): where an uploaded file's bytes live, behind one
//! seam, [`Blobs`]. herald never keeps the bytes in its database: the store
//! keeps each file's metadata (who uploaded it for which chat, its name,
//! type and size, and the message that attached it); a backend keeps the
//! bytes and signs the URLs clients upload to and download from.
//!
//! | backend | where the bytes live | who serves the URLs | file |
//! |---|---|---|---|
//! | embedded (default) | a folder beside the embedded store | herald itself | `local.rs` |
//! | S3-compatible (`--files-s3`) | a bucket | the bucket: presigned PUT and GET | `s3/` |
//!
//! Every event that leaves a node gets its files' download URLs in one place, `signed.rs`: the
//! store as the rest of the node reads it ([`signed::SignedStore`]), so no read path can hand out
//! an event whose files have no URL.
//!
//! Not here: which user may upload or attach what (`chat/files.rs`), the
//! metadata's rows (the store), or the sweeper that deletes the bytes of
//! deleted and never-attached files (`sweep.rs`).

pub mod local;
pub mod s3;
pub mod serve;
pub mod settings;
pub mod signed;
pub mod sweep;

use std::sync::Arc;

use herald_protocol::Event;

use crate::model::{BoxFuture, ChatKey};

pub use crate::model::FileKey;

/// What a backend needs to know of a file to sign its URLs.
#[derive(Debug, Clone)]
pub struct FileMeta {
    pub key: FileKey,
    /// As the uploader named it: 1 to 255 characters.
    pub name: String,
    /// The MIME type it was uploaded as, served back as `Content-Type`.
    pub mime: String,
    /// Exactly this many bytes were (or must be) uploaded.
    pub size: u64,
}

/// Where and how a client uploads a file's bytes: the `upload` op's answer.
#[derive(Debug, Clone)]
pub struct UploadTarget {
    /// Absolute.
    pub url: String,
    /// `PUT`.
    pub method: &'static str,
    /// Header names and values the client must send as given.
    pub headers: Vec<(String, String)>,
}

pub use crate::model::{URL_VALID_MS, UrlWindow};

/// Why a backend could not do what it was asked.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BlobError {
    /// The backend did not answer, or answered with an error; retry later.
    #[error("{0}")]
    Unavailable(String),
}

/// Where files' bytes live. Signing is local and instant; checking and
/// deleting may ask the backend over the network.
pub trait Blobs: Send + Sync + 'static {
    /// `local` or `s3`, for logs and metrics.
    fn kind(&self) -> &'static str;
    /// Where the client sends exactly `file.size` bytes of type `file.mime`,
    /// accepted until `expires_ms`. Sending more or fewer bytes, or another
    /// type, must be refused by that URL's answer (4xx).
    fn upload(&self, file: &FileMeta, now_ms: i64, expires_ms: i64) -> UploadTarget;
    /// A URL that answers a plain GET, with no other credentials, with the
    /// file's bytes and `Content-Type: file.mime`, within `window`; with
    /// `Content-Disposition: attachment` unless [`shown_inline`] allows the
    /// type. The same file and window give the same URL.
    fn download_url(&self, file: &FileMeta, window: UrlWindow) -> String;
    /// Whether the file's bytes are all there (exactly `file.size`).
    fn complete<'a>(&'a self, file: &'a FileMeta) -> BoxFuture<'a, Result<bool, BlobError>>;
    /// Deletes the file's bytes; a file already gone is not an error.
    fn delete<'a>(&'a self, key: &'a FileKey) -> BoxFuture<'a, Result<(), BlobError>>;
}

/// A new file's id: `f` and 22 characters of A-Z a-z 0-9 (about 131 random bits).
pub fn new_id() -> String {
    use rand::RngExt;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rng();
    let mut id = String::with_capacity(23);
    id.push('f');
    for _ in 0..22 {
        id.push(ALPHABET[rng.random_range(0..ALPHABET.len())] as char);
    }
    id
}

/// Signs the download URLs of events as they leave herald: every event that carries files gets a
/// URL per file, valid for at least an hour (the same URL within one hour, see [`UrlWindow`]).
/// Its one caller is [`signed::SignedStore`], the store every other part of a node reads.
pub struct FileUrls {
    blobs: Arc<dyn Blobs>,
}

impl FileUrls {
    pub fn new(blobs: Arc<dyn Blobs>) -> FileUrls {
        FileUrls { blobs }
    }

    /// The backend.
    pub fn blobs(&self) -> &Arc<dyn Blobs> {
        &self.blobs
    }

    /// Gives each file of `event` (of chat `key`) a fresh URL.
    pub fn sign(&self, key: &ChatKey, event: &mut Event) {
        let Some(files) = event.files.as_mut().filter(|f| !f.is_empty()) else { return };
        let window = UrlWindow::at(crate::store::now_ms());
        for f in files {
            let meta = FileMeta {
                key: FileKey { ws: key.ws.to_string(), chat: key.chat.to_string(), id: f.id.clone() },
                name: f.name.clone(),
                mime: f.mime.clone(),
                size: f.size,
            };
            f.url = self.blobs.download_url(&meta, window);
        }
    }
}

/// Whether a file of this MIME type may be shown inline: raster images,
/// audio and video. Every other type (HTML and SVG included) is served as
/// an attachment, so an upload never runs as a page of the origin serving it.
pub fn shown_inline(mime: &str) -> bool {
    let essence = mime.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    const RASTER: [&str; 9] = [
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
        "image/avif",
        "image/bmp",
        "image/apng",
        "image/x-icon",
        "image/vnd.microsoft.icon",
    ];
    RASTER.contains(&essence.as_str())
        || (essence.starts_with("audio/") || essence.starts_with("video/")) && !essence.contains("xml")
}

/// `Content-Disposition` for a download: `inline` for [`shown_inline`]
/// types, `attachment` otherwise, with the file's name (RFC 6266: an ASCII
/// fallback, then the UTF-8 name percent-encoded).
pub fn content_disposition(name: &str, mime: &str) -> String {
    let kind = if shown_inline(mime) { "inline" } else { "attachment" };
    let ascii: String =
        name.chars().map(|c| if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' { c } else { '_' }).collect();
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("{kind}; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_raster_images_audio_and_video_are_inline() {
        for t in ["image/png", "IMAGE/JPEG", "image/gif; x=1", "audio/ogg", "video/mp4"] {
            assert!(shown_inline(t), "{t}");
        }
        for t in ["image/svg+xml", "text/html", "application/pdf", "application/xhtml+xml", "text/plain", ""] {
            assert!(!shown_inline(t), "{t}");
        }
    }

    #[test]
    fn dispositions_name_the_file_safely() {
        let d = content_disposition("a\"b\r\n.html", "text/html");
        assert!(d.starts_with("attachment; filename=\"a_b__.html\"; filename*=UTF-8''a%22b%0D%0A.html"), "{d}");
        assert!(content_disposition("사진.png", "image/png").starts_with("inline; "));
    }

    #[test]
    fn windows_last_an_hour_at_least_and_repeat_within_an_hour() {
        let w = UrlWindow::at(7_200_000 + 1);
        assert_eq!(w, UrlWindow::at(7_200_000 + 3_599_999));
        assert!(w.end_ms - (7_200_000 + 3_599_999) >= URL_VALID_MS);
    }
}
