//! v1.2's rules for files in a write batch: a new file's row (`upload`), and the files a message
//! names on `send` and `edit`: each must be the sender's, uploaded for this chat, and attached to
//! no other message; a file belongs to the first message that attached it. A file a message stops
//! naming (an edit removed it, or the message was deleted) is marked gone, and the sweeper deletes
//! its bytes.
//!
//! Not here: whether a file's bytes were all uploaded (the chat layer asks the backend before the
//! write: it may take a network call), or the sweeper (`files/sweep.rs`).

use herald_protocol::FileRef;

use super::{Batch, ChatRow, Outcome, Tx};
use crate::model::ChatKey;
use crate::store::{Actor, NewFile, StoreError, Written};

/// A new file's row, uploaded by `user` for the chat in `batch`. A client must be a member and
/// not muted.
pub(super) async fn upload<T: Tx>(
    batch: &mut Batch,
    tx: &mut T,
    key: &ChatKey,
    row: ChatRow,
    user: &str,
    actor: Actor,
    file: &NewFile,
) -> Result<Outcome, T::Error> {
    if actor == Actor::Client
        && let Some(refused) = batch.check_member(tx, key, row.id, user).await?
    {
        return Ok(Err(refused));
    }
    tx.insert_file(row.id, user, file, batch.now_ms).await?;
    Ok(Ok(Written { event: None, seq: row.seq, info: row.info(), at: None }))
}

/// The files `ids` as message `message` (`None`: the message being sent) of `user` may carry
/// them, or why it may not.
pub(super) async fn claim_files<T: Tx>(
    tx: &mut T,
    key: &ChatKey,
    row: ChatRow,
    user: Option<&str>,
    ids: &[String],
    message: Option<u64>,
) -> Result<Result<Vec<FileRef>, StoreError>, T::Error> {
    let mut refs = Vec::with_capacity(ids.len());
    for id in ids {
        let Some((chat, f)) = tx.load_file(id).await?.filter(|(_, f)| !f.gone) else {
            return Ok(Err(StoreError::NotFound(format!("no file {id}: upload it first"))));
        };
        if chat != row.id {
            return Ok(Err(StoreError::Forbidden(format!("file {id} was uploaded for another chat"))));
        }
        if user != Some(f.user.as_str()) {
            return Ok(Err(StoreError::Forbidden(format!("file {id} is another user's"))));
        }
        if let Some(s) = f.seq.filter(|&s| Some(s) != message) {
            let chat = &key.chat;
            return Ok(Err(StoreError::BadRequest(format!("file {id} belongs to message {s} of {chat}"))));
        }
        refs.push(FileRef { id: f.id, name: f.name, mime: f.mime, size: f.size, url: String::new() });
    }
    Ok(Ok(refs))
}

/// Attaches `files` to message `seq` (those it already has stay).
pub(super) async fn attach_files<T: Tx>(tx: &mut T, seq: u64, files: &[FileRef]) -> Result<(), T::Error> {
    for f in files {
        tx.attach_file(&f.id, seq).await?;
    }
    Ok(())
}
