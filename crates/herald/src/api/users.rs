//! The server API's user routes: revoking a user's tokens, and erasing a
//! user from a workspace. The api key, and workspaces of this node's cell
//! only, as every server route. What revoking does across the cell is
//! `revoke`'s; what erasing stores is `chat`'s.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use herald_protocol::ids::{invalid_id, invalid_user_id, is_valid_id, is_valid_user_id};
use herald_protocol::reply::EmptyOk;
use utoipa::ToSchema;

use super::chats::path;
use super::params::{Refusals, UserParam, WsParam};
use super::{ApiError, ApiResult, AppState, authorize, bad};
use crate::error::Error;

pub(super) type UserPath = Result<Path<(String, String)>, PathRejection>;

/// The workspace and user of a user route, both checked.
pub(super) fn user_route(s: &AppState, p: UserPath) -> Result<(String, String), ApiError> {
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
    Ok((ws, user))
}

/// Revokes the user's tokens: within 2 s every open connection of the user
/// in the cell closes with 4001, and `hello` refuses their tokens issued
/// (`iat`) at or before now, or without `iat`. Tokens issued later work.
/// 503 when it could not be stored everywhere: it already applies, and a
/// retry completes it.
#[utoipa::path(post, path = "/v1/workspaces/{ws}/users/{user}/revoke", tag = "users",
    params(WsParam, UserParam), responses((status = 200, body = EmptyOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn revoke(State(s): State<AppState>, headers: HeaderMap, p: UserPath) -> ApiResult<EmptyOk> {
    authorize(&s, &headers)?;
    let (ws, user) = user_route(&s, p)?;
    s.revocations.revoke(&ws, &user).await?;
    Ok(axum::Json(EmptyOk {}))
}

/// What erasing a user did.
#[derive(serde::Serialize, ToSchema)]
pub(super) struct ErasedOk {
    /// Messages whose bodies this call erased.
    erased: u64,
}

/// Erases the user from the workspace: revokes their tokens (as `revoke`),
/// removes them from every chat (`leave` events), and erases the body of
/// every message they sent there, as deleting each one does. Bounded steps,
/// not one transaction: after a 503, calling it again finishes the work.
#[utoipa::path(delete, path = "/v1/workspaces/{ws}/users/{user}", tag = "users",
    params(WsParam, UserParam), responses((status = 200, body = ErasedOk), Refusals),
    security(("api_key" = [])))]
pub(super) async fn erase(State(s): State<AppState>, headers: HeaderMap, p: UserPath) -> ApiResult<ErasedOk> {
    authorize(&s, &headers)?;
    let (ws, user) = user_route(&s, p)?;
    s.revocations.revoke(&ws, &user).await?;
    let erased = s.chats.members().erase_user(&ws, &user).await?;
    Ok(axum::Json(ErasedOk { erased }))
}
