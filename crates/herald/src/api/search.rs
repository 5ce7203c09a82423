//! The server API's v1.2 search: `GET /v1/workspaces/{ws}/search?q=&user=&chat=&limit=&cursor=`,
//! messages by their words as the `search` op finds them: as `user` would (the chats they are a
//! member of now), or over the whole workspace without one. Needs the api key, and works only on
//! workspaces of this node's cell.
//!
//! Not here: the search itself (`chat/search.rs`, the store's `Search`).

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use herald_protocol::args::search_query;
use herald_protocol::ids::{invalid_id, invalid_user_id, is_valid_id, is_valid_user_id};
use herald_protocol::reply::SearchOk;
use serde::Deserialize;
use utoipa::IntoParams;

use super::chats::path;
use super::params::{Refusals, WsParam};
use super::{ApiError, ApiResult, AppState, authorize, bad};
use crate::error::Error;

/// The search's query string.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct SearchParams {
    /// The query: whitespace-separated terms, each of which a message must contain (after case
    /// folding, anywhere in a word). 1 to 200 characters, at least one term.
    #[param(min_length = 1, max_length = 200)]
    q: Option<String>,
    /// Search as this user: only the chats they are a member of now. Without it, the whole workspace.
    #[param(pattern = r"^[A-Za-z0-9_.:@+-]{1,128}$")]
    user: Option<String>,
    /// Only this chat (with `user`: they must be a member).
    #[param(pattern = r"^[A-Za-z0-9_.:-]{1,128}$")]
    chat: Option<String>,
    /// At most this many (default 20, at most 100).
    #[param(minimum = 1)]
    limit: Option<u32>,
    /// The `cursor` of the page before.
    #[param(min_length = 1, max_length = 512)]
    cursor: Option<String>,
}

/// Messages matching every term of `q`, newest first, each as `fetch` shows it with its chat.
#[utoipa::path(get, path = "/v1/workspaces/{ws}/search", tag = "search",
    params(WsParam, SearchParams), responses((status = 200, body = SearchOk), Refusals), security(("api_key" = [])))]
pub(super) async fn search(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: Result<Path<String>, PathRejection>,
    query: Result<Query<SearchParams>, QueryRejection>,
) -> ApiResult<SearchOk> {
    authorize(&s, &headers)?;
    let ws = path(p)?;
    if !is_valid_id(&ws) {
        return Err(bad(invalid_id("workspace")));
    }
    let Query(q) = query.map_err(|e| bad(format!("bad query: {e}")))?;
    if q.user.as_deref().is_some_and(|u| !is_valid_user_id(u)) {
        return Err(bad(invalid_user_id("user")));
    }
    if q.chat.as_deref().is_some_and(|c| !is_valid_id(c)) {
        return Err(bad(invalid_id("chat")));
    }
    if q.limit == Some(0) {
        return Err(bad("limit must be at least 1"));
    }
    if q.cursor.as_ref().is_some_and(|c| c.is_empty() || c.len() > 512) {
        return Err(bad("cursor must be a cursor from an earlier search answer"));
    }
    let text = search_query(q.q).map_err(|e| bad(e.replace("\"query\"", "q")))?;
    if let Some((cell, _)) = s.cells.elsewhere(&ws) {
        return Err(ApiError(Error::Forbidden(format!("workspace {ws} is served by cell {cell}"))));
    }
    let found = s
        .chats
        .reads()
        .search_as(&ws, q.user.as_deref(), &text, q.chat.as_deref(), q.limit, q.cursor.as_deref())
        .await?;
    Ok(axum::Json(found))
}
