//! The server API's user export (protocol v1.2, "A user's data"):
//! `GET /v1/workspaces/{ws}/users/{user}/export` answers the user's memberships and messages as
//! NDJSON, streamed as the store is read. The api key, and workspaces of this node's cell only,
//! as every user route.
//!
//! Not here: what the lines hold and how the store is paged and merged (`chat/export.rs`).

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use herald_protocol::Event;
use utoipa::ToSchema;

use super::params::{Refusals, UserParam, WsParam};
use super::users::{UserPath, user_route};
use super::{ApiError, AppState, authorize};

/// The media type of the answer: one JSON object per line.
const NDJSON: &str = "application/x-ndjson";

/// What a line is.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)] // the document's shape of what `chat/export.rs` writes
pub(super) enum ExportKind {
    Member,
    Message,
}

/// One line of an export: a membership (`kind` `member`, with `read`), or a message the user sent
/// (`kind` `message`, with `event` as `fetch` shows it).
#[derive(ToSchema)]
#[allow(dead_code)]
pub(super) struct ExportLine {
    kind: ExportKind,
    chat: String,
    /// `member` lines: the user's read position in the chat.
    read: Option<u64>,
    /// `message` lines: the message in its stored view.
    event: Option<Event>,
}

/// The user's data in the workspace, as NDJSON: one `member` line per chat they are a member of
/// (sorted by chat), then one `message` line per message they sent (in chats they left too, and
/// those posted as them through the server API), oldest first (then by chat, then seq). A user
/// never seen gets an empty answer. Streamed: a store failure midway cuts the body off (the
/// transfer fails), never ends it early as if complete.
#[utoipa::path(get, path = "/v1/workspaces/{ws}/users/{user}/export", tag = "users",
    params(WsParam, UserParam),
    responses((status = 200, description = "One JSON object per line", content_type = "application/x-ndjson",
        body = ExportLine), Refusals),
    security(("api_key" = [])))]
pub(super) async fn export(State(s): State<AppState>, headers: HeaderMap, p: UserPath) -> Result<Response, ApiError> {
    authorize(&s, &headers)?;
    let (ws, user) = user_route(&s, p)?;
    let body = s.chats.reads().export_user(&ws, &user).await?;
    let headers = [(header::CONTENT_TYPE, NDJSON), (header::CACHE_CONTROL, "no-store")];
    Ok((headers, axum::body::Body::from_stream(body)).into_response())
}
