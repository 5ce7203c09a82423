//! The files capability (protocol v1.2): each uploaded file's metadata, kept in the shard of the
//! chat it was uploaded for. The bytes live outside the database (`files/`); a row says who
//! uploaded the file, as what, for which chat, which message attached it, and whether its bytes
//! are to be deleted.
//!
//! Creating a row, attaching a file to a message and marking a message's files gone are writes of
//! the log ([`super::Write::Upload`], `files` on `Append` and `Edit`, and `Delete`), under the batch
//! rules in `apply/files.rs`, so they commit with the event that uses them; so is forgetting a file
//! once the sweeper deleted its bytes ([`super::Write::ForgetFile`]). Here are the reads.

use super::{BoxFuture, StoreError};
use crate::model::ChatKey;
use crate::model::FileKey;

/// A file as its row keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredFile {
    pub id: String,
    /// The user it was uploaded by (and for).
    pub user: String,
    pub name: String,
    pub mime: String,
    pub size: u64,
    pub created_ms: i64,
    /// The message that attached it, once one did.
    pub seq: Option<u64>,
    /// Its message was deleted, or an edit removed it: its bytes are to be deleted.
    pub gone: bool,
}

/// What a new file's row is made of (`upload`).
#[derive(Debug, Clone)]
pub struct NewFile {
    pub id: String,
    pub name: String,
    pub mime: String,
    pub size: u64,
}

/// Files' metadata.
pub trait Files: Send + Sync + 'static {
    /// The files among `ids` that exist for chat `key` (a file of another chat is not returned).
    fn files<'a>(&'a self, key: &'a ChatKey, ids: &'a [String]) -> BoxFuture<'a, Result<Vec<StoredFile>, StoreError>>;
    /// Which chat of workspace `ws` each of `ids` was uploaded for, for those that exist (in any shard).
    fn file_chats<'a>(
        &'a self,
        ws: &'a str,
        ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<(String, String)>, StoreError>>;
    /// Up to `limit` files whose bytes are to be deleted: gone ones, and ones no message attached
    /// that were uploaded before `orphan_before_ms`.
    fn sweepable<'a>(&'a self, orphan_before_ms: i64, limit: u32) -> BoxFuture<'a, Result<Vec<FileKey>, StoreError>>;
}
