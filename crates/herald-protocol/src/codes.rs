//! Error codes of replies and HTTP errors, and WebSocket close codes.

use serde::{Deserialize, Serialize};

/// The `code` of an `err` reply or of an HTTP error body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadRequest,
    Unauthenticated,
    Forbidden,
    NotFound,
    /// Comes with `retry_after_ms`.
    Throttled,
    /// Storage or broker unavailable; comes with `retry_after_ms`.
    Unavailable,
    TooLarge,
    Internal,
}

impl ErrorCode {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Throttled => "throttled",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::Internal => "internal",
        }
    }

    /// The HTTP status the HTTP API answers this code with.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::TooLarge => 413,
            ErrorCode::Throttled => 429,
            ErrorCode::Unavailable => 503,
            ErrorCode::Internal => 500,
        }
    }
}

/// WebSocket close codes herald sends. Codes in 4000-4999 are herald's own;
/// whether a client should reconnect is part of each code's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CloseCode(pub u16);

impl CloseCode {
    /// Normal closure (the client asked, or the server closed an idle link).
    pub const NORMAL: CloseCode = CloseCode(1000);
    /// The peer went away: used when nothing arrived for the idle timeout.
    pub const GOING_AWAY: CloseCode = CloseCode(1001);
    /// A frame over the frame limit.
    pub const TOO_BIG: CloseCode = CloseCode(1009);
    /// Frames that are not JSON objects of this protocol. Reconnecting sends the same bytes again.
    pub const BAD_PROTOCOL: CloseCode = CloseCode(4000);
    /// No valid `hello`. Reconnect only with a new token.
    pub const UNAUTHENTICATED: CloseCode = CloseCode(4001);
    /// The outbound queue passed its limit. Reconnect and resume with `watch` `after`.
    pub const SLOW_CONSUMER: CloseCode = CloseCode(4008);
    /// Drain or rebalance. Reconnect after the `reconnect` push's `after_ms`.
    pub const GOING_AWAY_RECONNECT: CloseCode = CloseCode(4012);
    /// Too many requests for too long. Reconnect after a long backoff.
    pub const TOO_MANY_REQUESTS: CloseCode = CloseCode(4029);
}
