//! The embedded files backend: each file's bytes in a folder beside the embedded store
//! (`DATA/files/WS/CHAT/ID`), served by herald itself (`serve.rs`) at URLs it signs with a key
//! kept in that folder, so a URL stays good across a restart. One node only: a cell keeps its
//! files in a shared bucket (`s3.rs`).
//!
//! Not here: the HTTP side (`serve.rs`), which checks what a URL signs and writes the bytes.

use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{BlobError, Blobs, FileKey, FileMeta, UploadTarget, UrlWindow};
use crate::model::BoxFuture;

/// Where an upload's bytes go while they arrive; renamed into place once all are there.
const PARTS: &str = ".parts";

/// Files beside the embedded store, served by herald.
pub struct LocalBlobs {
    dir: PathBuf,
    /// `http://host:port`, what URLs start with.
    base: String,
    key: [u8; 32],
}

/// What a URL lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    Put,
    Get,
}

impl LocalBlobs {
    /// Files in `dir` (created if missing, with its signing key), at URLs under `base`.
    pub fn open(dir: &Path, base: &str) -> anyhow::Result<LocalBlobs> {
        use anyhow::Context;
        std::fs::create_dir_all(dir.join(PARTS)).with_context(|| format!("creating {}", dir.display()))?;
        let key_path = dir.join(".key");
        let key = match std::fs::read(&key_path) {
            Ok(k) if k.len() == 32 => k,
            _ => {
                use rand::RngExt;
                let k: [u8; 32] = rand::rng().random();
                write_private(&key_path, &k).with_context(|| format!("writing {}", key_path.display()))?;
                k.to_vec()
            }
        };
        let mut fixed = [0u8; 32];
        fixed.copy_from_slice(&key);
        Ok(LocalBlobs { dir: dir.to_owned(), base: base.trim_end_matches('/').to_owned(), key: fixed })
    }

    /// Where a file's bytes are once complete.
    pub fn path(&self, key: &FileKey) -> PathBuf {
        self.dir.join(&key.ws).join(&key.chat).join(&key.id)
    }

    /// Where an upload's bytes go while they arrive.
    pub fn part_path(&self, key: &FileKey) -> PathBuf {
        self.dir.join(PARTS).join(format!("{}.{}", key.id, rand_suffix()))
    }

    /// The signature of `grant` on `key` until `expires_ms`.
    pub fn signature(&self, grant: Grant, key: &FileKey, expires_ms: i64) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        let g = match grant {
            Grant::Put => "PUT",
            Grant::Get => "GET",
        };
        mac.update(format!("{g}\n{}\n{expires_ms}", key.object()).as_bytes());
        mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether `sig` is the signature of `grant` on `key` until `expires_ms` (compared in constant time).
    pub fn verify(&self, grant: Grant, key: &FileKey, expires_ms: i64, sig: &str) -> bool {
        let want = self.signature(grant, key, expires_ms);
        want.len() == sig.len() && want.bytes().zip(sig.bytes()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    fn url(&self, grant: Grant, key: &FileKey, expires_ms: i64) -> String {
        let sig = self.signature(grant, key, expires_ms);
        format!("{}/v1/files/{}/{}/{}?expires={expires_ms}&sig={sig}", self.base, key.ws, key.chat, key.id)
    }
}

fn rand_suffix() -> u64 {
    use rand::RngExt;
    rand::rng().random()
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}

impl Blobs for LocalBlobs {
    fn kind(&self) -> &'static str {
        "local"
    }

    fn upload(&self, file: &FileMeta, _now_ms: i64, expires_ms: i64) -> UploadTarget {
        UploadTarget {
            url: self.url(Grant::Put, &file.key, expires_ms),
            method: "PUT",
            headers: vec![("Content-Type".into(), file.mime.clone())],
        }
    }

    fn download_url(&self, file: &FileMeta, window: UrlWindow) -> String {
        self.url(Grant::Get, &file.key, window.end_ms)
    }

    fn complete<'a>(&'a self, file: &'a FileMeta) -> BoxFuture<'a, Result<bool, BlobError>> {
        Box::pin(async move {
            match tokio::fs::metadata(self.path(&file.key)).await {
                Ok(m) => Ok(m.len() == file.size),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(BlobError::Unavailable(format!("reading a file's size failed: {e}"))),
            }
        })
    }

    fn delete<'a>(&'a self, key: &'a FileKey) -> BoxFuture<'a, Result<(), BlobError>> {
        Box::pin(async move {
            match tokio::fs::remove_file(self.path(key)).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(BlobError::Unavailable(format!("deleting a file failed: {e}"))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_signed_for_one_grant_one_file_and_one_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let blobs = LocalBlobs::open(dir.path(), "http://127.0.0.1:1/").unwrap();
        let key = FileKey { ws: "w".into(), chat: "c".into(), id: "fA".into() };
        let sig = blobs.signature(Grant::Get, &key, 10);
        assert!(blobs.verify(Grant::Get, &key, 10, &sig));
        assert!(!blobs.verify(Grant::Put, &key, 10, &sig));
        assert!(!blobs.verify(Grant::Get, &key, 11, &sig));
        let other = FileKey { id: "fB".into(), ..key.clone() };
        assert!(!blobs.verify(Grant::Get, &other, 10, &sig));
        // The key survives a restart: the same URL is still good.
        let again = LocalBlobs::open(dir.path(), "http://127.0.0.1:1").unwrap();
        assert!(again.verify(Grant::Get, &key, 10, &sig));
        let meta = FileMeta { key, name: "a".into(), mime: "image/png".into(), size: 1 };
        let url = blobs.download_url(&meta, UrlWindow::at(0));
        assert!(url.starts_with("http://127.0.0.1:1/v1/files/w/c/fA?expires="), "{url}");
    }
}
