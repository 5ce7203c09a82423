//! The one error type of requests, and its single mapping to protocol codes
//! and HTTP statuses. Layers below return their own errors; they become an
//! [`Error`] here and nowhere else.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use herald_protocol::ErrorCode;
use herald_protocol::frame::ErrorBody;

/// A request's failure, as the client will see it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{message}")]
    Throttled { message: String, retry_after_ms: u64 },
    #[error("{message}")]
    Unavailable { message: String, retry_after_ms: u64 },
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::BadRequest(_) => ErrorCode::BadRequest,
            Error::Unauthenticated(_) => ErrorCode::Unauthenticated,
            Error::Forbidden(_) => ErrorCode::Forbidden,
            Error::NotFound(_) => ErrorCode::NotFound,
            Error::Throttled { .. } => ErrorCode::Throttled,
            Error::Unavailable { .. } => ErrorCode::Unavailable,
            Error::TooLarge(_) => ErrorCode::TooLarge,
            Error::Internal(_) => ErrorCode::Internal,
        }
    }

    /// The protocol's error object for this error.
    pub fn body(&self) -> ErrorBody {
        let retry_after_ms = match self {
            Error::Throttled { retry_after_ms, .. } | Error::Unavailable { retry_after_ms, .. } => {
                Some(*retry_after_ms)
            }
            _ => None,
        };
        ErrorBody { code: self.code(), message: self.to_string(), retry_after_ms }
    }

    /// The metrics label of this error's outcome.
    pub fn outcome(&self) -> &'static str {
        self.code().as_str()
    }
}

/// An error as HTTP answers it: `{"error": {...}}` with its code's status.
impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let body = self.body();
        let status = StatusCode::from_u16(body.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        http_answer(status, body)
    }
}

/// The one JSON shape of an HTTP error, `{"error": {"code", "message", "retry_after_ms"?}}`, under
/// `status`, with `Retry-After` (whole seconds) when the error says when to retry.
pub fn http_answer(status: StatusCode, body: ErrorBody) -> Response {
    let retry_after_ms = body.retry_after_ms;
    let mut resp = (status, axum::Json(serde_json::json!({ "error": body }))).into_response();
    if let Some(ms) = retry_after_ms
        && let Ok(v) = header::HeaderValue::from_str(&ms.div_ceil(1000).to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// A refusal whose status the protocol's codes do not name (a 405, a 426), in the same JSON
/// shape, with the nearest code.
pub fn http_refusal(status: StatusCode, message: impl Into<String>) -> Response {
    let code = match status {
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthenticated,
        StatusCode::FORBIDDEN => ErrorCode::Forbidden,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::TooLarge,
        StatusCode::TOO_MANY_REQUESTS => ErrorCode::Throttled,
        StatusCode::SERVICE_UNAVAILABLE => ErrorCode::Unavailable,
        s if s.is_server_error() => ErrorCode::Internal,
        _ => ErrorCode::BadRequest,
    };
    http_answer(status, ErrorBody { code, message: message.into(), retry_after_ms: None })
}

impl From<crate::store::StoreError> for Error {
    fn from(e: crate::store::StoreError) -> Self {
        use crate::store::StoreError;
        match e {
            StoreError::NotFound(m) => Error::NotFound(m),
            StoreError::Forbidden(m) => Error::Forbidden(m),
            StoreError::BadRequest(m) => Error::BadRequest(m),
            StoreError::TooLarge(m) => Error::TooLarge(m),
            StoreError::Unavailable(m) => Error::Unavailable { message: m, retry_after_ms: STORE_RETRY_MS },
            StoreError::Refused { message, retry_after_ms } => Error::Unavailable { message, retry_after_ms },
        }
    }
}

/// How long a client should wait after the store failed: long enough for a
/// restarted writer or a recovered disk, short enough not to feel stuck.
const STORE_RETRY_MS: u64 = 1_000;
