//! v1.2's `search` in the chat layer: a client's search over the chats it is a member of now
//! (or one of them: a member's only), and the server API's over a user's chats or a whole
//! workspace. Page limits, the cursor and the terms are read here; matching and the index live in
//! the store ([`crate::store::Search`]).
//!
//! Not here: checking the query's length (`herald_protocol::args::search_query`, for the op and
//! the route alike).

use herald_protocol::limits::{SEARCH_DEFAULT, SEARCH_MAX};
use herald_protocol::reply::{SearchHit, SearchOk};

use super::{Caller, Reads};
use crate::error::Error;
use crate::store::search_text::terms;
use crate::store::{SearchCursor, SearchQuery};

impl Reads<'_> {
    /// `search`: messages of `c`'s chats (or of `chat`, for a member) matching every term of `query`.
    pub async fn search(
        &self,
        c: &Caller,
        query: &str,
        chat: Option<&str>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<SearchOk, Error> {
        self.search_as(&c.ws, Some(&c.user), query, chat, limit, cursor).await
    }

    /// The server API's search: as `user` would (without a user, over the whole workspace `ws`).
    /// With both `user` and `chat`, the user must be a member of the chat.
    pub async fn search_as(
        &self,
        ws: &str,
        user: Option<&str>,
        query: &str,
        chat: Option<&str>,
        limit: Option<u32>,
        cursor: Option<&str>,
    ) -> Result<SearchOk, Error> {
        if let (Some(chat), Some(user)) = (chat, user) {
            self.g.check_member(&crate::model::ChatKey::new(ws, chat), user, false).await?;
        }
        let terms = terms(query);
        if terms.is_empty() {
            return Err(Error::BadRequest("\"query\" must hold at least one term".into()));
        }
        let after = cursor
            .map(|s| {
                SearchCursor::decode(s)
                    .ok_or_else(|| Error::BadRequest("\"cursor\" is not a cursor from an earlier search reply".into()))
            })
            .transpose()?;
        let limit = limit.unwrap_or(SEARCH_DEFAULT).clamp(1, SEARCH_MAX);
        let q = SearchQuery {
            ws: ws.to_owned(),
            user: user.map(str::to_owned),
            chat: chat.map(str::to_owned),
            terms,
            after,
            limit,
        };
        let started = std::time::Instant::now();
        let mut hits = self.g.store.search(&q).await?;
        metrics::histogram!("herald_search_seconds").record(started.elapsed().as_secs_f64());
        let more = hits.len() > limit as usize;
        hits.truncate(limit as usize);
        let cursor = hits.last().filter(|_| more).map(|h| SearchCursor::after(h).encode());
        let results = hits.into_iter().map(|h| SearchHit { chat: h.chat, event: h.event }).collect();
        Ok(SearchOk { results, more, cursor })
    }
}
