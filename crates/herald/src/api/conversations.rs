//! The server API's v1.2 conversation routes: the workspace's chat list, a chat's members a page
//! at a time, its pins, and appends to a streamed message. Every route needs the api key and works
//! only on workspaces of this node's cell.
//!
//! Not here: a chat's profile (`PUT`/`GET` of the chat, `chats.rs`) and streamed messages'
//! start (`POST .../events` with `stream`, `chats.rs`).

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use herald_protocol::ids::{invalid_id, is_valid_id};
use herald_protocol::reply::{ChatsOk, EmptyOk, MembersOk, PinsOk};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use super::chats::{ChatPath, chat_key, path};
use super::params::{ChatParam, Refusals, WsParam};
use super::{ApiError, ApiResult, AppState, Body, authorize, bad, parse_json};
use crate::error::Error;

/// A page's query: `limit` (default 100, at most 1,000) and the `cursor` of the page before.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct PageQuery {
    /// At most this many (default 100, at most 1,000).
    #[param(minimum = 1)]
    limit: Option<u32>,
    /// The `cursor` of the page before.
    #[param(max_length = 2048)]
    cursor: Option<String>,
}

/// The chat list's query: a page's, and a `prefix` that keeps the chats whose id starts with it.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct ChatsQuery {
    /// At most this many (default 100, at most 1,000).
    #[param(minimum = 1)]
    limit: Option<u32>,
    /// The `cursor` of the page before.
    #[param(max_length = 2048)]
    cursor: Option<String>,
    /// Only the chats whose id starts with this (the admin page finds chats so).
    #[param(pattern = r"^[A-Za-z0-9_.:-]{1,128}$")]
    prefix: Option<String>,
}

fn page(query: Result<Query<PageQuery>, QueryRejection>) -> Result<PageQuery, ApiError> {
    let Query(q) = query.map_err(|e| bad(format!("bad query: {e}")))?;
    if q.limit == Some(0) {
        return Err(bad("limit must be at least 1"));
    }
    Ok(q)
}

/// The workspace's chats sorted by id, each as `GET` of a chat answers it; with `prefix`, those
/// whose id starts with it.
#[utoipa::path(get, path = "/v1/workspaces/{ws}/chats", tag = "chats",
    params(WsParam, ChatsQuery), responses((status = 200, body = ChatsOk), Refusals), security(("api_key" = [])))]
pub(super) async fn chat_list(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: Result<Path<String>, PathRejection>,
    query: Result<Query<ChatsQuery>, QueryRejection>,
) -> ApiResult<ChatsOk> {
    authorize(&s, &headers)?;
    let ws = path(p)?;
    if !is_valid_id(&ws) {
        return Err(bad(invalid_id("workspace")));
    }
    if let Some((cell, _)) = s.cells.elsewhere(&ws) {
        return Err(ApiError(Error::Forbidden(format!("workspace {ws} is served by cell {cell}"))));
    }
    let Query(q) = query.map_err(|e| bad(format!("bad query: {e}")))?;
    if q.limit == Some(0) {
        return Err(bad("limit must be at least 1"));
    }
    match q.prefix.as_deref() {
        None => Ok(axum::Json(s.chats.reads().chat_list(&ws, q.limit, q.cursor.as_deref()).await?)),
        Some(prefix) if is_valid_id(prefix) => {
            Ok(axum::Json(s.chats.reads().find_chats(&ws, prefix, q.limit, q.cursor.as_deref()).await?))
        }
        Some(_) => Err(bad(invalid_id("prefix"))),
    }
}

/// The chat's members sorted by user id, each with their read position, and the member count.
#[utoipa::path(get, path = "/v1/workspaces/{ws}/chats/{chat}/members", tag = "chats",
    params(WsParam, ChatParam, PageQuery), responses((status = 200, body = MembersOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn member_list(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: ChatPath,
    query: Result<Query<PageQuery>, QueryRejection>,
) -> ApiResult<MembersOk> {
    authorize(&s, &headers)?;
    let (ws, chat) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    let q = page(query)?;
    Ok(axum::Json(s.chats.reads().member_page(&key, q.limit, q.cursor.as_deref()).await?))
}

/// The chat's pinned messages, latest pin first.
#[utoipa::path(get, path = "/v1/workspaces/{ws}/chats/{chat}/pins", tag = "chats",
    params(WsParam, ChatParam), responses((status = 200, body = PinsOk), Refusals), security(("api_key" = [])))]
pub(super) async fn pin_list(State(s): State<AppState>, headers: HeaderMap, p: ChatPath) -> ApiResult<PinsOk> {
    authorize(&s, &headers)?;
    let (ws, chat) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    Ok(axum::Json(s.chats.reads().pin_list(&key).await?))
}

/// `POST .../events/{seq}/append`'s body.
#[derive(Deserialize, ToSchema)]
pub(super) struct AppendBody {
    /// Text added to the end of the message's `text`; empty only with `done`.
    text: String,
    /// Ends the stream: the message's final body is stored as an `edit` event.
    #[serde(default)]
    done: bool,
}

/// The path of an event route.
type EventPath = Result<Path<(String, String, u64)>, PathRejection>;

/// Appends to a streamed message, as its sender: durable when answered, pushed to watchers as
/// `append` (not an event); `done` ends the stream with an `edit` of the final body.
#[utoipa::path(post, path = "/v1/workspaces/{ws}/chats/{chat}/events/{seq}/append", tag = "chats",
    params(WsParam, ChatParam, ("seq" = u64, Path, description = "The streamed message")),
    request_body = AppendBody, responses((status = 200, body = EmptyOk), Refusals), security(("api_key" = [])))]
pub(super) async fn append(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: EventPath,
    Body(body): Body,
) -> ApiResult<EmptyOk> {
    authorize(&s, &headers)?;
    let (ws, chat, seq) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    let req: AppendBody = parse_json(&body)?;
    if req.text.is_empty() && !req.done {
        return Err(bad("\"text\" must not be empty unless \"done\" is true"));
    }
    Ok(axum::Json(s.chats.writes().admin_append(key, seq, req.text, req.done).await?))
}
