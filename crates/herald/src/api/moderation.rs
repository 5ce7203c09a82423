//! The server API's v1.1 chat routes: editing and deleting any message,
//! bans and mutes, and a user's inbox. Same rules as [`super::chats`]: the
//! api key, and workspaces of this node's cell only. The rules themselves
//! (who may, what is stored) are the store's, so every node enforces them.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use herald_protocol::ids::{invalid_id, invalid_user_id, is_valid_id, is_valid_user_id};
use herald_protocol::reply::{EmptyOk, InboxOk, SeqOk};
use serde::Deserialize;
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use super::chats::{MemberPath, chat_key, path};
use super::params::{ChatParam, Refusals, UserParam, WsParam};
use super::{ApiError, ApiResult, AppState, Body, authorize, bad, parse_json};
use crate::error::Error;

/// The `{seq}` of an event's path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct SeqParam {
    /// The seq of a `message` event of the chat.
    #[param(minimum = 1)]
    #[allow(dead_code)] // read by the path extractor, named here for the document
    seq: u64,
}

type EventPath = Result<Path<(String, String, u64)>, PathRejection>;

/// `PATCH .../events/{seq}`'s body.
#[derive(Deserialize, ToSchema)]
pub(super) struct EditBody {
    /// The message's new body: any JSON value, at most the body limit serialized.
    #[schema(value_type = serde_json::Value)]
    body: Box<RawValue>,
    /// The author of the `edit` event, if any (the message may be anyone's).
    #[schema(pattern = r"^[A-Za-z0-9_.:@+-]{1,128}$")]
    user: Option<String>,
    /// v1.2: the message's files from now on (file ids uploaded by the message's sender); left out:
    /// kept; `[]`: removed.
    #[serde(default, deserialize_with = "super::chats::present")]
    #[schema(value_type = Option<Vec<String>>)]
    files: Option<Box<serde_json::value::RawValue>>,
}

/// Edits any message of the chat: stores an `edit` event (404 when the
/// target is not a message of this chat, or is deleted).
#[utoipa::path(patch, path = "/v1/workspaces/{ws}/chats/{chat}/events/{seq}", tag = "chats",
    params(WsParam, ChatParam, SeqParam), request_body = EditBody,
    responses((status = 200, body = SeqOk), Refusals), security(("api_key" = [])))]
pub(super) async fn edit_event(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: EventPath,
    Body(body): Body,
) -> ApiResult<SeqOk> {
    authorize(&s, &headers)?;
    let (ws, chat, seq) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    let req: EditBody = parse_json(&body)?;
    if req.user.as_deref().is_some_and(|u| !is_valid_user_id(u)) {
        return Err(bad(invalid_user_id("user")));
    }
    let files = herald_protocol::args::files(req.files.as_deref()).map_err(bad)?;
    Ok(axum::Json(s.chats.writes().admin_edit(key, seq, req.body, req.user.as_deref(), files).await?))
}

/// Deletes any message of the chat: stores a `delete` event and erases the
/// message's body and the bodies of its edits (404 when the target is not a
/// message of this chat, or is already deleted).
#[utoipa::path(delete, path = "/v1/workspaces/{ws}/chats/{chat}/events/{seq}", tag = "chats",
    params(WsParam, ChatParam, SeqParam), responses((status = 200, body = SeqOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn delete_event(State(s): State<AppState>, headers: HeaderMap, p: EventPath) -> ApiResult<SeqOk> {
    authorize(&s, &headers)?;
    let (ws, chat, seq) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    Ok(axum::Json(s.chats.writes().admin_delete(key, seq).await?))
}

/// The chat and user of a member route, both checked.
fn member_route(s: &AppState, p: MemberPath) -> Result<(crate::model::ChatKey, String), ApiError> {
    let (ws, chat, user) = path(p)?;
    let key = chat_key(s, &ws, &chat)?;
    if !is_valid_user_id(&user) {
        return Err(bad(invalid_user_id("user")));
    }
    Ok((key, user))
}

/// Bans the user: removes them if a member (a `leave` event), and refuses
/// their `join` and their adding through this API until unbanned.
#[utoipa::path(put, path = "/v1/workspaces/{ws}/chats/{chat}/bans/{user}", tag = "moderation",
    params(WsParam, ChatParam, UserParam), responses((status = 200, body = EmptyOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn ban(State(s): State<AppState>, headers: HeaderMap, p: MemberPath) -> ApiResult<EmptyOk> {
    authorize(&s, &headers)?;
    let (key, user) = member_route(&s, p)?;
    Ok(axum::Json(s.chats.members().set_ban(key, &user, true).await?))
}

/// Lifts the user's ban (they may join again; they are not added back).
#[utoipa::path(delete, path = "/v1/workspaces/{ws}/chats/{chat}/bans/{user}", tag = "moderation",
    params(WsParam, ChatParam, UserParam), responses((status = 200, body = EmptyOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn unban(State(s): State<AppState>, headers: HeaderMap, p: MemberPath) -> ApiResult<EmptyOk> {
    authorize(&s, &headers)?;
    let (key, user) = member_route(&s, p)?;
    Ok(axum::Json(s.chats.members().set_ban(key, &user, false).await?))
}

/// `PUT .../mutes/{user}`'s body.
#[derive(Deserialize, ToSchema)]
pub(super) struct MuteBody {
    /// Muted until this time (ms since the Unix epoch); without it, until unmuted.
    until_ms: Option<i64>,
}

/// Mutes the user in the chat: their `send`, `react`, `edit`, `delete` and
/// `typing` are refused (`forbidden`) until `until_ms` if given, else until
/// unmuted. Reading is unaffected; a mute outlasts leaving and joining again.
#[utoipa::path(put, path = "/v1/workspaces/{ws}/chats/{chat}/mutes/{user}", tag = "moderation",
    params(WsParam, ChatParam, UserParam), request_body(content = Option<MuteBody>, description = "empty: until unmuted"),
    responses((status = 200, body = EmptyOk), Refusals), security(("api_key" = [])))]
pub(super) async fn mute(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: MemberPath,
    Body(body): Body,
) -> ApiResult<EmptyOk> {
    authorize(&s, &headers)?;
    let (key, user) = member_route(&s, p)?;
    let until_ms = if body.is_empty() { None } else { parse_json::<MuteBody>(&body)?.until_ms };
    Ok(axum::Json(s.chats.members().set_mute(key, &user, true, until_ms).await?))
}

/// Unmutes the user.
#[utoipa::path(delete, path = "/v1/workspaces/{ws}/chats/{chat}/mutes/{user}", tag = "moderation",
    params(WsParam, ChatParam, UserParam), responses((status = 200, body = EmptyOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn unmute(State(s): State<AppState>, headers: HeaderMap, p: MemberPath) -> ApiResult<EmptyOk> {
    authorize(&s, &headers)?;
    let (key, user) = member_route(&s, p)?;
    Ok(axum::Json(s.chats.members().set_mute(key, &user, false, None).await?))
}

/// `GET .../inbox`'s query.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct InboxQuery {
    /// At most this many chats (default 50, at most 200).
    #[param(minimum = 1)]
    limit: Option<u32>,
    /// The `cursor` of the previous page's answer.
    #[param(min_length = 1, max_length = 512)]
    cursor: Option<String>,
}

type UserPath = Result<Path<(String, String)>, PathRejection>;

/// The user's chats, latest activity first, each with the user's read
/// position, unread count and the latest message: as the `inbox` op.
#[utoipa::path(get, path = "/v1/workspaces/{ws}/users/{user}/inbox", tag = "moderation",
    params(WsParam, UserParam, InboxQuery), responses((status = 200, body = InboxOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn inbox(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: UserPath,
    query: Result<Query<InboxQuery>, QueryRejection>,
) -> ApiResult<InboxOk> {
    authorize(&s, &headers)?;
    let (ws, user) = path(p)?;
    if !is_valid_id(&ws) {
        return Err(bad(invalid_id("workspace")));
    }
    if !is_valid_user_id(&user) {
        return Err(bad(invalid_user_id("user")));
    }
    if let Some((cell, _)) = s.cells.elsewhere(&ws) {
        return Err(ApiError(Error::Forbidden(format!("workspace {ws} is served by cell {cell}"))));
    }
    let Query(q) = query.map_err(|e| bad(format!("bad query: {e}")))?;
    if q.limit == Some(0) {
        return Err(bad("limit must be at least 1"));
    }
    Ok(axum::Json(s.chats.inbox().page(&ws, &user, q.limit, q.cursor.as_deref()).await?))
}
