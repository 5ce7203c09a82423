//! v1.2 files, the chat layer's side: `upload` (a client's, and the server API's for a user),
//! and the check that every file a `send` or `edit` names was uploaded completely. The URLs every
//! event carrying files gets as it leaves herald are signed in one place,
//! [`crate::files::signed::SignedStore`].
//!
//! Not here: which files a message may carry (the store's batch rules, `store/apply/files.rs`,
//! in the same transaction as the message), or where the bytes live (`crate::files`).

use std::collections::BTreeMap;
use std::sync::Arc;

use herald_protocol::args::FileDeclared;
use herald_protocol::limits::size_in_words;
use herald_protocol::reply::UploadOk;

use super::ground::Ground;
use super::{Caller, Writes};
use crate::error::Error;
use crate::files::{FileKey, FileMeta, FileUrls, new_id};
use crate::model::ChatKey;
use crate::store::{Actor, NewFile, Write, now_ms};

/// An upload URL is good for this long (the contract: at least 10 minutes).
pub const UPLOAD_VALID_MS: i64 = 15 * 60_000;

/// Files as the chat layer uses them: the backend (through its URL signer) and the size limit.
pub struct FileService {
    pub urls: Arc<FileUrls>,
    /// `--max-file-bytes`.
    pub max_bytes: u64,
    /// The embedded backend's routes, which herald serves itself; `None` with S3.
    pub served: Option<crate::files::serve::Served>,
}

fn not_kept() -> Error {
    let message = "this cell keeps no files: its nodes need --files-s3 (a bucket they share)".into();
    Error::Unavailable { message, retry_after_ms: 60_000 }
}

impl Writes<'_> {
    /// A member's `upload`: where to send the bytes of a file for `chat`.
    pub async fn upload(&self, c: &Caller, chat: &str, file: FileDeclared) -> Result<UploadOk, Error> {
        self.upload_as(c.key(chat), &c.user, Actor::Client, file).await
    }

    /// The server API's upload, for `user`.
    pub async fn admin_upload(&self, key: ChatKey, user: &str, file: FileDeclared) -> Result<UploadOk, Error> {
        self.upload_as(key, user, Actor::Admin, file).await
    }

    async fn upload_as(&self, key: ChatKey, user: &str, actor: Actor, file: FileDeclared) -> Result<UploadOk, Error> {
        let Some(files) = &self.g.files else { return Err(not_kept()) };
        if file.size > files.max_bytes {
            return Err(Error::TooLarge(format!("a file may be at most {}", size_in_words(files.max_bytes))));
        }
        let id = new_id();
        let row = NewFile { id: id.clone(), name: file.name.clone(), mime: file.mime.clone(), size: file.size };
        self.g.write(Write::Upload { key: key.clone(), user: user.into(), actor, file: row }).await?;
        let now = now_ms();
        let expires_ms = now + UPLOAD_VALID_MS;
        let meta = FileMeta {
            key: FileKey { ws: key.ws.to_string(), chat: key.chat.to_string(), id: id.clone() },
            name: file.name,
            mime: file.mime,
            size: file.size,
        };
        let target = files.urls.blobs().upload(&meta, now, expires_ms);
        metrics::counter!("herald_file_upload_urls_total", "backend" => files.urls.blobs().kind()).increment(1);
        Ok(UploadOk {
            file: id,
            url: target.url,
            method: target.method.into(),
            headers: target.headers.into_iter().collect::<BTreeMap<_, _>>(),
            expires_ms,
        })
    }
}

impl Ground {
    /// Refuses `files` (named by a `send` or `edit` of `user` in `key`) unless each one's bytes
    /// are all uploaded. Which files the message may carry is the store's to say, in the write.
    pub(super) async fn check_uploaded(&self, key: &ChatKey, user: Option<&str>, ids: &[String]) -> Result<(), Error> {
        if ids.is_empty() {
            return Ok(());
        }
        let Some(files) = &self.files else { return Err(not_kept()) };
        let rows = self.store.files(key, ids).await?;
        // A file of another chat may live in another shard, where this chat's write cannot see it.
        let missing: Vec<String> = ids.iter().filter(|id| !rows.iter().any(|r| &r.id == *id)).cloned().collect();
        if !missing.is_empty()
            && let Some((id, _)) = self.store.file_chats(&key.ws, &missing).await?.into_iter().next()
        {
            return Err(Error::Forbidden(format!("file {id} was uploaded for another chat")));
        }
        for row in rows.iter().filter(|r| user.is_none_or(|u| r.user == u) && !r.gone && r.seq.is_none()) {
            let meta = FileMeta {
                key: FileKey { ws: key.ws.to_string(), chat: key.chat.to_string(), id: row.id.clone() },
                name: row.name.clone(),
                mime: row.mime.clone(),
                size: row.size,
            };
            let complete = files
                .urls
                .blobs()
                .complete(&meta)
                .await
                .map_err(|e| Error::Unavailable { message: e.to_string(), retry_after_ms: 1_000 })?;
            if !complete {
                return Err(Error::NotFound(format!(
                    "file {} is not uploaded completely: send its {} bytes first",
                    row.id, row.size
                )));
            }
        }
        Ok(())
    }
}
