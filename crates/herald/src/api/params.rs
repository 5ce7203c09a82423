//! What the HTTP handlers' annotations name besides their own bodies: the path parameters
//! (`{ws}`, `{chat}`, `{user}`, with the characters an id may hold) and the refusals every route
//! that needs the api key can answer. Handlers and the OpenAPI document (`openapi.rs`) both read
//! them from here, so neither depends on the other.

use herald_protocol::frame::ErrorBody;
use utoipa::{IntoParams, IntoResponses, ToSchema};

/// The `{ws}` of a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct WsParam {
    /// The workspace.
    #[param(pattern = r"^[A-Za-z0-9_.:-]{1,128}$")]
    #[allow(dead_code)] // read by the path extractor, named here for the document
    ws: String,
}

/// The `{chat}` of a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ChatParam {
    /// The chat.
    #[param(pattern = r"^[A-Za-z0-9_.:-]{1,128}$")]
    #[allow(dead_code)]
    chat: String,
}

/// The `{user}` of a path.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub struct UserParam {
    /// The user (v1.2: `@` and `+` too, so an email address can be one).
    #[param(pattern = r"^[A-Za-z0-9_.:@+-]{1,128}$")]
    #[allow(dead_code)]
    user: String,
}

/// An HTTP error: `{"error": {"code", "message", "retry_after_ms"?}}`.
#[derive(ToSchema)]
#[allow(dead_code)] // the document's shape of what `ApiError` writes
pub struct ErrorEnvelope {
    error: ErrorBody,
}

/// The answers of a route that needs the api key, besides its success.
#[derive(IntoResponses)]
#[allow(dead_code)]
pub enum Refusals {
    /// A bad id, body or query.
    #[response(status = 400)]
    BadRequest(ErrorEnvelope),
    /// No api key, or a wrong one.
    #[response(status = 401)]
    Unauthenticated(ErrorEnvelope),
    /// Not allowed: another cell's workspace, a closed chat, a member missing.
    #[response(status = 403)]
    Forbidden(ErrorEnvelope),
    /// No such chat or event.
    #[response(status = 404)]
    NotFound(ErrorEnvelope),
    /// A body over the limit.
    #[response(status = 413)]
    TooLarge(ErrorEnvelope),
    /// Throttled: retry after `retry_after_ms` (also the `Retry-After` header).
    #[response(status = 429)]
    Throttled(ErrorEnvelope),
    /// Storage unavailable: retry after `retry_after_ms` (also the `Retry-After` header).
    #[response(status = 503)]
    Unavailable(ErrorEnvelope),
}
