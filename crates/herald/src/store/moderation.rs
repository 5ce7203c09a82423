//! The moderation capability: the reads that moderation and erasure need
//! beyond one chat's log. Erasing a user (`chat/erase.rs`) pages through
//! every message they sent in a workspace, then deletes each through the log.
//!
//! Not here: bans, mutes, edits and deletes themselves: they are writes of
//! the log ([`super::Write`]), and the rules that check them (a banned user
//! cannot join, a muted one cannot send, only an author edits) run inside
//! the write's transaction ([`super::apply`], with each backend's `Tx`).

use super::{BoxFuture, StoreError};

/// Moderation's reads across chats.
pub trait Moderation: Send + Sync + 'static {
    /// A page of the `message` events that `user` sent in workspace `ws` and
    /// that are not deleted, as (chat, seq) in that order, those after
    /// `after` only, at most `limit`.
    fn user_messages<'a>(
        &'a self,
        ws: &'a str,
        user: &'a str,
        after: Option<(&'a str, u64)>,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<(String, u64)>, StoreError>>;
}
