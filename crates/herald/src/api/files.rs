//! The server API's v1.2 files route: where to upload a file for a user of a chat, as the
//! `upload` op answers. The api key, and workspaces of this node's cell only, as every server
//! route. Attaching files is `files` on `POST .../events` (`chats.rs`) and on `PATCH` of an event
//! (`moderation.rs`).

use axum::extract::State;
use axum::http::HeaderMap;
use herald_protocol::args::FileDeclared;
use herald_protocol::ids::{invalid_user_id, is_valid_user_id};
use herald_protocol::reply::UploadOk;
use serde::Deserialize;
use serde_json::value::RawValue;
use utoipa::ToSchema;

use super::chats::{ChatPath, chat_key, path, present};
use super::params::{ChatParam, Refusals, WsParam};
use super::{ApiResult, AppState, Body, authorize, bad, parse_json};

/// `POST .../files`' body: the file a user will upload.
#[derive(Deserialize, ToSchema)]
pub(super) struct UploadBody {
    /// Who uploads it: the file is theirs to attach.
    #[schema(pattern = r"^[A-Za-z0-9_.:@+-]{1,128}$")]
    user: String,
    /// 1 to 255 characters.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = String, min_length = 1, max_length = 255)]
    name: Option<Box<RawValue>>,
    /// Its MIME type, served back as `Content-Type`.
    #[serde(default, rename = "type", deserialize_with = "present")]
    #[schema(value_type = String, example = "image/png")]
    mime: Option<Box<RawValue>>,
    /// Its size in bytes: exactly this many must be uploaded.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = u64, minimum = 0)]
    size: Option<Box<RawValue>>,
}

/// Where and how `user` uploads a file for the chat: a URL to send exactly `size` bytes to with
/// `method` and `headers`, before `expires_ms`. 413 past `--max-file-bytes`.
#[utoipa::path(post, path = "/v1/workspaces/{ws}/chats/{chat}/files", tag = "chats",
    params(WsParam, ChatParam), request_body = UploadBody,
    responses((status = 200, body = UploadOk), Refusals), security(("api_key" = [])))]
pub(super) async fn upload(
    State(s): State<AppState>,
    headers: HeaderMap,
    p: ChatPath,
    Body(body): Body,
) -> ApiResult<UploadOk> {
    authorize(&s, &headers)?;
    let (ws, chat) = path(p)?;
    let key = chat_key(&s, &ws, &chat)?;
    let req: UploadBody = parse_json(&body)?;
    if !is_valid_user_id(&req.user) {
        return Err(bad(invalid_user_id("user")));
    }
    let file = FileDeclared::read(req.name.as_deref(), req.mime.as_deref(), req.size.as_deref()).map_err(bad)?;
    Ok(axum::Json(s.chats.writes().admin_upload(key, &req.user, file).await?))
}
