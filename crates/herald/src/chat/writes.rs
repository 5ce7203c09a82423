//! The write path of the chat layer: a member's `send`, `edit`, `delete`, `react`, `read`,
//! `profile` and `pin`, and the server API's posts, edits and deletes. Each checks what only the
//! chat layer can (the body's size, the send hook, that named files were uploaded) and hands one
//! [`Write`] to the store, whose rules decide the rest; the write's event is published once it is
//! durable ([`Ground::write`]). Streamed text (`stream.rs`) and uploads (`files.rs`) are writes
//! too, in their own files.

use std::sync::Arc;

use herald_protocol::reply::SeqOk;
use herald_protocol::request::ProfilePatch;
use serde_json::value::RawValue;

use super::Caller;
use super::ground::Ground;
use super::screen::Screened;
use crate::error::Error;
use crate::hooks::send::HookOp;
use crate::model::ChatKey;
use crate::store::{Actor, Conversation, Write};

/// The write path; see the module's documentation.
#[derive(Clone, Copy)]
pub struct Writes<'a> {
    pub(super) g: &'a Ground,
}

impl<'a> Writes<'a> {
    pub(super) fn new(g: &'a Ground) -> Writes<'a> {
        Writes { g }
    }

    /// A member's message; v1.2's `conv` places it in a thread, quotes, mentions and streams.
    pub async fn send(
        &self,
        c: &Caller,
        chat: &str,
        body: Box<RawValue>,
        client_id: Option<String>,
        conv: Conversation,
    ) -> Result<SeqOk, Error> {
        self.g.check_body(&body)?;
        let key = c.key(chat);
        let body = match self.g.screen(c, &key, HookOp::Send, body, client_id.as_deref(), None).await? {
            Screened::Store(body) => body,
            Screened::Already(ok) => return Ok(ok),
        };
        if conv.stream {
            herald_protocol::args::check_stream_body(&body).map_err(Error::BadRequest)?;
        }
        if let Some(ids) = &conv.files {
            self.g.check_uploaded(&key, Some(&c.user), ids).await?;
        }
        let user = Some(c.user.clone());
        let w =
            self.g.write(Write::Append { key, user, system: false, body, client_id, member_only: true, conv }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    pub async fn react(&self, c: &Caller, chat: &str, target: u64, emoji: String, on: bool) -> Result<SeqOk, Error> {
        let w = self.g.write(Write::React { key: c.key(chat), user: c.user.clone(), target, emoji, on }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// Moves the user's read position in the chat, or (v1.2) in the thread under root `thread`.
    pub async fn read(&self, c: &Caller, chat: &str, seq: u64, thread: Option<u64>) -> Result<SeqOk, Error> {
        let w = self.g.write(Write::Read { key: c.key(chat), user: c.user.clone(), seq, thread }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// The server API's event; v1.2's `conv` as a client's `send` takes it (a `system` event takes none).
    pub async fn post_event(
        &self,
        key: ChatKey,
        system: bool,
        user: Option<&str>,
        body: Box<RawValue>,
        client_id: Option<String>,
        conv: Conversation,
    ) -> Result<SeqOk, Error> {
        self.g.check_body(&body)?;
        if conv.stream {
            herald_protocol::args::check_stream_body(&body).map_err(Error::BadRequest)?;
        }
        if let Some(ids) = &conv.files {
            self.g.check_uploaded(&key, user, ids).await?;
        }
        let user = user.map(Arc::from);
        let w = self.g.write(Write::Append { key, user, system, body, client_id, member_only: false, conv }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// A member's `edit` of their own message `target`; v1.2's `mentions` replace the message's.
    pub async fn edit(
        &self,
        c: &Caller,
        chat: &str,
        target: u64,
        body: Box<RawValue>,
        mentions: Option<Vec<String>>,
        files: Option<Vec<String>>,
    ) -> Result<SeqOk, Error> {
        self.g.check_body(&body)?;
        let key = c.key(chat);
        if let Some(ids) = &files {
            self.g.check_uploaded(&key, Some(&c.user), ids).await?;
        }
        let body = match self.g.screen(c, &key, HookOp::Edit, body, None, Some(target)).await? {
            Screened::Store(body) => body,
            Screened::Already(ok) => return Ok(ok),
        };
        let user = Some(c.user.clone());
        let w = self.g.write(Write::Edit { key, user, actor: Actor::Client, target, body, mentions, files }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// A member's `delete` of their own message `target`.
    pub async fn delete(&self, c: &Caller, chat: &str, target: u64) -> Result<SeqOk, Error> {
        let user = Some(c.user.clone());
        let w = self.g.write(Write::Delete { key: c.key(chat), user, actor: Actor::Client, target }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// The server API's edit of any message, by `user` if given.
    pub async fn admin_edit(
        &self,
        key: ChatKey,
        target: u64,
        body: Box<RawValue>,
        user: Option<&str>,
        files: Option<Vec<String>>,
    ) -> Result<SeqOk, Error> {
        self.g.check_body(&body)?;
        if let Some(ids) = &files {
            self.g.check_uploaded(&key, None, ids).await?;
        }
        let user = user.map(Arc::from);
        let w =
            self.g.write(Write::Edit { key, user, actor: Actor::Admin, target, body, mentions: None, files }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// The server API's delete of any message.
    pub async fn admin_delete(&self, key: ChatKey, target: u64) -> Result<SeqOk, Error> {
        let w = self.g.write(Write::Delete { key, user: None, actor: Actor::Admin, target }).await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// `profile`: changes the chat's profile; answers the `profile` event's seq (or the latest
    /// one's, when nothing changed).
    pub async fn profile(&self, c: &Caller, chat: &str, patch: ProfilePatch) -> Result<SeqOk, Error> {
        let w = self
            .g
            .write(Write::Profile { key: c.key(chat), user: Some(c.user.clone()), actor: Actor::Client, patch })
            .await?;
        Ok(SeqOk { seq: w.seq })
    }

    /// `pin`: pins or unpins message `target`.
    pub async fn pin(&self, c: &Caller, chat: &str, target: u64, on: bool) -> Result<SeqOk, Error> {
        let w = self.g.write(Write::Pin { key: c.key(chat), user: c.user.clone(), target, on }).await?;
        Ok(SeqOk { seq: w.seq })
    }
}
