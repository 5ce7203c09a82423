//! The one error type of requests, and its single mapping to protocol codes
//! and HTTP statuses. Layers below return their own errors; they become an
//! [`Error`] here and nowhere else.

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
