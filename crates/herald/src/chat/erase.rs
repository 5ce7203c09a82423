//! Erasing a user from a workspace (`DELETE /v1/workspaces/{ws}/users/{user}`,
//! after their tokens were revoked): every chat membership ends with a
//! `leave` event, then every message they sent is deleted as the server
//! API's `delete` does (a `delete` event; the body and its edits' bodies
//! erased from storage).
//!
//! It runs in bounded steps, never one transaction over the whole user: a
//! page of memberships, then pages of [`ERASE_PAGE`] messages, each page's
//! deletes sent together so that the store commits them in a few batches.
//! Meanwhile each chat stays consistent on its own: every erasure is atomic
//! with its `delete` event, which watchers receive in seq order like any
//! other, so a client sees the user's messages turn into deleted ones chat
//! by chat, never a message half erased. A failure stops the erasure with
//! the store's error; running it again goes on where it stopped (what was
//! erased or left stays so and is not counted again).

use herald_protocol::limits::INBOX_MAX;

use super::{Members, Writes};
use crate::error::Error;
use crate::model::ChatKey;

/// Messages erased per step.
const ERASE_PAGE: u32 = 256;

impl Members<'_> {
    /// Ends `user`'s memberships in workspace `ws` and erases every message
    /// they sent there. Returns how many messages this call erased.
    pub async fn erase_user(&self, ws: &str, user: &str) -> Result<u64, Error> {
        self.leave_every_chat(ws, user).await?;
        let mut erased = 0u64;
        let mut after: Option<(String, u64)> = None;
        loop {
            let cursor = after.as_ref().map(|(chat, seq)| (chat.as_str(), *seq));
            let page = self.g.store.user_messages(ws, user, cursor, ERASE_PAGE).await?;
            let writes = Writes::new(self.g);
            let deletes = page.iter().map(|(chat, seq)| writes.admin_delete(ChatKey::new(ws, chat), *seq));
            for result in futures_util::future::join_all(deletes).await {
                match result {
                    Ok(_) => erased += 1,
                    // Deleted by someone else meanwhile.
                    Err(Error::NotFound(_)) => {}
                    Err(e) => {
                        tracing::warn!(workspace = ws, user, erased, error = %e, "erasing a user stopped");
                        metrics::counter!("herald_messages_erased_total").increment(erased);
                        return Err(e);
                    }
                }
            }
            if page.len() < ERASE_PAGE as usize {
                break;
            }
            after = page.last().cloned();
        }
        metrics::counter!("herald_messages_erased_total").increment(erased);
        metrics::counter!("herald_users_erased_total").increment(1);
        tracing::info!(workspace = ws, user, erased, "user erased");
        Ok(erased)
    }

    /// Removes `user` from each of their chats in `ws`, a page of their inbox at a time.
    async fn leave_every_chat(&self, ws: &str, user: &str) -> Result<(), Error> {
        loop {
            // The inbox lists only chats the user is still a member of: each
            // round starts over from the first page.
            let page = self.g.store.inbox(ws, user, None, INBOX_MAX).await?;
            if page.is_empty() {
                return Ok(());
            }
            let leaves = page.iter().map(|entry| self.remove_member(ChatKey::new(ws, &entry.chat), user));
            let mut removed = 0;
            for result in futures_util::future::join_all(leaves).await {
                match result {
                    Ok(_) => removed += 1,
                    Err(Error::NotFound(_)) => {}
                    Err(e) => return Err(e),
                }
            }
            if removed == 0 {
                // Listed but not removable (left meanwhile, on every entry): nothing more to do.
                return Ok(());
            }
        }
    }
}
