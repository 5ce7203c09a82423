//! The server API's chat routes: chats, members, events. Every route needs
//! the api key and works only on workspaces of this node's cell.

use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use herald_protocol::ids::{invalid_id, invalid_user_id, is_valid_id, is_valid_user_id};
use herald_protocol::reply::{ChatView, FetchOk, PresenceOk, SeqOk};
use serde::Deserialize;
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};

use super::params::{ChatParam, Refusals, UserParam, WsParam};
use super::{ApiError, ApiResult, AppState, Body, authorize, bad, parse_json};
use crate::error::Error;
use crate::model::ChatKey;
use crate::store::Conversation;
use herald_protocol::request::ProfilePatch;

/// The key of a chat this node's cell serves.
pub(super) fn chat_key(s: &AppState, ws: &str, chat: &str) -> Result<ChatKey, ApiError> {
    if !is_valid_id(ws) || !is_valid_id(chat) {
        return Err(bad(invalid_id("workspace and chat")));
    }
    if let Some((cell, _)) = s.cells.elsewhere(ws) {
        return Err(ApiError(Error::Forbidden(format!("workspace {ws} is served by cell {cell}"))));
    }
    Ok(ChatKey::new(ws, chat))
}

/// `PUT .../chats/{chat}`'s body.
#[derive(Deserialize, ToSchema)]
pub(super) struct PutChatBody {
    /// Whether clients may `join` the chat themselves; a closed chat's members are added through
    /// this API. Left out: true, except in a request that changes the profile of a chat that
    /// exists, which keeps it as it is.
    open: Option<bool>,
    /// v1.2: the chat's name (up to 200 characters); `null` clears it, left out keeps it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    name: Option<Box<RawValue>>,
    /// v1.2: the chat's image URL (up to 2,000 characters); `null` clears it, left out keeps it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    image: Option<Box<RawValue>>,
    /// v1.2: any JSON value the app keeps with the chat (up to 4 KiB serialized); `null` clears it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<serde_json::Value>)]
    data: Option<Box<RawValue>>,
}

/// A field given, even as `null` (which serde's `Option` would read as left out).
pub(super) fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Box<RawValue>>, D::Error> {
    Box::<RawValue>::deserialize(d).map(Some)
}

/// The path of a chat route, refused as `bad_request` when it cannot be read.
pub(super) type ChatPath = Result<Path<(String, String)>, PathRejection>;
pub(super) type MemberPath = Result<Path<(String, String, String)>, PathRejection>;

pub(super) fn path<T>(p: Result<Path<T>, PathRejection>) -> Result<T, ApiError> {
    p.map(|Path(t)| t).map_err(|e| bad(format!("bad path: {e}")))
}

/// Creates the chat, or sets whether it is open; with `name`, `image` or `data` (v1.2), changes
/// its profile (a `profile` event with no user, when something changed).
#[utoipa::path(put, path = "/v1/workspaces/{ws}/chats/{chat}", tag = "chats",
    params(WsParam, ChatParam), request_body(content = Option<PutChatBody>, description = "empty: open"),
    responses((status = 200, body = ChatView), Refusals), security(("api_key" = [])))]
pub(super) async fn put_chat(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: ChatPath,
    Body(body): Body,
) -> ApiResult<ChatView> {
    authorize(&s, &headers)?;
    let (ws, chat) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    if body.is_empty() {
        return Ok(axum::Json(s.chats.members().put_chat(key, true, None).await?));
    }
    let req = parse_json::<PutChatBody>(&body)?;
    let changes_profile = req.name.is_some() || req.image.is_some() || req.data.is_some();
    let patch = changes_profile
        .then(|| ProfilePatch::read(req.name.as_deref(), req.image.as_deref(), req.data.as_deref()))
        .transpose()
        .map_err(bad)?;
    let open = match req.open {
        Some(open) => open,
        None if changes_profile => s.chats.members().get_chat(key.clone()).await.map_or(true, |v| v.open),
        None => true,
    };
    Ok(axum::Json(s.chats.members().put_chat(key, open, patch).await?))
}

/// The chat: its latest seq, member count, whether it is open, and its profile.
#[utoipa::path(get, path = "/v1/workspaces/{ws}/chats/{chat}", tag = "chats",
    params(WsParam, ChatParam), responses((status = 200, body = ChatView), Refusals), security(("api_key" = [])))]
pub(super) async fn get_chat(State(s): State<AppState>, headers: HeaderMap, p: ChatPath) -> ApiResult<ChatView> {
    authorize(&s, &headers)?;
    let (ws, chat) = path(p)?;
    Ok(axum::Json(s.chats.members().get_chat(chat_key(&s, &ws, &chat)?).await?))
}

/// Adds a member to an existing chat (a `join` event; none if already a member).
/// The chat must exist, or the answer is 404: `PUT .../chats/{chat}` creates it.
#[utoipa::path(put, path = "/v1/workspaces/{ws}/chats/{chat}/members/{user}", tag = "chats",
    params(WsParam, ChatParam, UserParam), responses((status = 200, body = SeqOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn add_member(State(s): State<AppState>, headers: HeaderMap, p: MemberPath) -> ApiResult<SeqOk> {
    authorize(&s, &headers)?;
    let (ws, chat, user) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    if !is_valid_user_id(&user) {
        return Err(bad(invalid_user_id("user")));
    }
    Ok(axum::Json(s.chats.members().add_member(key, &user).await?))
}

/// Removes a member (a `leave` event, which ends their watches).
#[utoipa::path(delete, path = "/v1/workspaces/{ws}/chats/{chat}/members/{user}", tag = "chats",
    params(WsParam, ChatParam, UserParam), responses((status = 200, body = SeqOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn remove_member(State(s): State<AppState>, headers: HeaderMap, p: MemberPath) -> ApiResult<SeqOk> {
    authorize(&s, &headers)?;
    let (ws, chat, user) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    if !is_valid_user_id(&user) {
        return Err(bad(invalid_user_id("user")));
    }
    Ok(axum::Json(s.chats.members().remove_member(key, &user).await?))
}

/// The type of a posted event.
#[derive(Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub(super) enum PostedType {
    Message,
    System,
}

/// `POST .../events`'s body.
#[derive(Deserialize, ToSchema)]
pub(super) struct PostEventBody {
    #[serde(rename = "type")]
    kind: PostedType,
    /// The author: required for a `message`, optional for a `system` event.
    #[schema(pattern = r"^[A-Za-z0-9_.:@+-]{1,128}$")]
    user: Option<String>,
    /// Any JSON value, at most the body limit serialized.
    #[schema(value_type = serde_json::Value)]
    body: Box<RawValue>,
    /// Sending again with the same `client_id` returns the first seq and stores nothing new.
    #[schema(min_length = 1, max_length = 128)]
    client_id: Option<String>,
    /// v1.2, a `message` only: a streamed message (its body an object whose `text` is a string),
    /// grown by `POST .../events/{seq}/append`.
    #[serde(default)]
    stream: bool,
    /// v1.2, a `message` only: the seq of the thread root it replies in.
    #[schema(minimum = 1)]
    thread: Option<u64>,
    /// v1.2, a `message` only: the seq of the message it quotes.
    #[schema(minimum = 1)]
    quote: Option<u64>,
    /// v1.2, a `message` only: up to 50 user ids it mentions.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    mentions: Option<Box<RawValue>>,
    /// v1.2, a `message` only: up to 10 file ids from `POST .../files`, uploaded by `user`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>)]
    files: Option<Box<RawValue>>,
}

/// Posts a `message` or `system` event to an existing chat, as the server
/// (the author need not be a member; 404 when the chat does not exist).
#[utoipa::path(post, path = "/v1/workspaces/{ws}/chats/{chat}/events", tag = "chats",
    params(WsParam, ChatParam), request_body = PostEventBody,
    responses((status = 200, body = SeqOk), Refusals), security(("api_key" = [])))]
pub(super) async fn post_event(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: ChatPath,
    Body(body): Body,
) -> ApiResult<SeqOk> {
    authorize(&s, &headers)?;
    let (ws, chat) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    let req: PostEventBody = parse_json(&body)?;
    let system = matches!(req.kind, PostedType::System);
    if let Some(u) = &req.user {
        if !is_valid_user_id(u) {
            return Err(bad(invalid_user_id("user")));
        }
    } else if !system {
        return Err(bad("a message needs a user"));
    }
    if req.client_id.as_ref().is_some_and(|c| c.is_empty() || c.len() > herald_protocol::request::MAX_CLIENT_ID_LEN) {
        return Err(bad("client_id must be 1 to 128 bytes"));
    }
    let mentions = herald_protocol::args::mentions(req.mentions.as_deref()).map_err(bad)?;
    let files = herald_protocol::args::files(req.files.as_deref()).map_err(bad)?;
    if system && (req.stream || req.thread.is_some() || req.quote.is_some() || mentions.is_some() || files.is_some()) {
        return Err(bad("only a message can stream, reply in a thread, quote, mention or carry files"));
    }
    let conv = Conversation { thread: req.thread, quote: req.quote, mentions, stream: req.stream, files };
    Ok(axum::Json(s.chats.writes().post_event(key, system, req.user.as_deref(), req.body, req.client_id, conv).await?))
}

/// `GET .../events`'s query.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(super) struct EventsQuery {
    /// Events with seq above this (default 0: from the start).
    after: Option<u64>,
    /// At most this many (default 100, at most 500; a page is also cut by size, then `more` is true).
    #[param(minimum = 1)]
    limit: Option<u32>,
}

/// A page of the chat's events, in seq order.
#[utoipa::path(get, path = "/v1/workspaces/{ws}/chats/{chat}/events", tag = "chats",
    params(WsParam, ChatParam, EventsQuery), responses((status = 200, body = FetchOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn get_events(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: ChatPath,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> ApiResult<FetchOk> {
    authorize(&s, &headers)?;
    let (ws, chat) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    let Query(q) = query.map_err(|e| bad(format!("bad query: {e}")))?;
    if q.limit == Some(0) {
        return Err(bad("limit must be at least 1"));
    }
    Ok(axum::Json(s.chats.reads().admin_fetch(key, q.after.unwrap_or(0), q.limit).await?))
}

/// Who is present in the chat: users with a connection watching it on any
/// node of the cell. `users` lists at most 100 of them, sorted.
#[utoipa::path(get, path = "/v1/workspaces/{ws}/chats/{chat}/presence", tag = "chats",
    params(WsParam, ChatParam), responses((status = 200, body = PresenceOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn get_presence(State(s): State<AppState>, headers: HeaderMap, p: ChatPath) -> ApiResult<PresenceOk> {
    authorize(&s, &headers)?;
    let (ws, chat) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    Ok(axum::Json(s.chats.live().admin_presence(key).await?))
}
