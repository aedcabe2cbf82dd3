//! The API's error as a response: an [`ErrorCode`], a message, and the status the code
//! names (the one table of code and status, docs/API.md "Errors"); and what each
//! engine error ([`AdminError`]) and each refused extraction is, in those terms.
//!
//! Invariant: every error a route, an extractor, the access guard or the standby's
//! forwarder answers is an [`ApiError`], so its body is always `{"error": {"code",
//! "message"}}`; a 401 carries `WWW-Authenticate: Bearer`, a 429 `Retry-After`; none
//! is cached.

use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::types::{ErrorBody, ErrorCode, ErrorDetail};
use crate::engine::admin::AdminError;
use crate::store::StoreError;

/// An API error: what went wrong, and the message for people.
#[derive(Debug)]
pub struct ApiError {
    code: ErrorCode,
    message: String,
    /// Seconds a client should wait before it tries again (`Retry-After`).
    retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(m: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::BadRequest, m)
    }

    pub fn not_found(m: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::NotFound, m)
    }

    pub fn unavailable(m: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::Unavailable, m)
    }

    /// A body larger than the route reads.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("the request body is larger than {limit} bytes"),
        )
    }

    /// The same, answered after `secs` (at least 1) by `Retry-After`.
    pub fn retry_after(mut self, secs: u64) -> ApiError {
        self.retry_after = Some(secs.max(1));
        self
    }

    pub fn code(&self) -> ErrorCode {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// The HTTP status of each code.
pub fn status(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
        ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
        ErrorCode::Forbidden | ErrorCode::ReadOnly => StatusCode::FORBIDDEN,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        ErrorCode::Conflict => StatusCode::CONFLICT,
        ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        ErrorCode::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Unknown => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = status(self.code);
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
            },
        };
        let mut r = (status, axum::Json(body)).into_response();
        let h = r.headers_mut();
        if status == StatusCode::UNAUTHORIZED {
            h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(secs) = self.retry_after {
            h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r
    }
}

/// The error with its sources, as one line (the OS's or Redis' own words last).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> ApiError {
        let code = match &e {
            AdminError::NoJob(_) | AdminError::NoTube(_) | AdminError::NoKey { .. } => {
                ErrorCode::NotFound
            }
            AdminError::Unchangeable { .. }
            | AdminError::Held(_)
            | AdminError::ChangedMeanwhile(_) => ErrorCode::Conflict,
            AdminError::OutOfRange { .. }
            | AdminError::ReservedInBulk
            | AdminError::TooBig { .. } => ErrorCode::BadRequest,
            AdminError::Draining | AdminError::Store(_) | AdminError::NotPersisted(_) => {
                ErrorCode::Unavailable
            }
        };
        ApiError::new(code, chain(&e))
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::from(AdminError::Store(e))
    }
}

/// A body that could not be read: too large for the route (by its status: axum's
/// length limit), or cut short.
impl From<BytesRejection> for ApiError {
    fn from(r: BytesRejection) -> ApiError {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::new(
                ErrorCode::PayloadTooLarge,
                "the request body is larger than this route reads",
            );
        }
        ApiError::bad_request(r.body_text())
    }
}

impl From<QueryRejection> for ApiError {
    fn from(r: QueryRejection) -> ApiError {
        ApiError::bad_request(r.body_text())
    }
}

impl From<PathRejection> for ApiError {
    fn from(r: PathRejection) -> ApiError {
        ApiError::bad_request(r.body_text())
    }
}

pub type ApiResult<T = Response> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::JobState;

    #[test]
    fn engine_errors_map_to_codes_and_keep_their_source() {
        let code = |e: AdminError| ApiError::from(e).code();
        assert_eq!(code(AdminError::NoJob(7)), ErrorCode::NotFound);
        assert_eq!(
            code(AdminError::Unchangeable {
                id: 7,
                state: JobState::Reserved,
                change: "move"
            }),
            ErrorCode::Conflict
        );
        assert_eq!(code(AdminError::TooBig { max: 9 }), ErrorCode::BadRequest);
        let lost = ApiError::from(AdminError::NotPersisted(StoreError::TimedOut {
            op: "durable",
            source: Some("WAIT said 0 of 1".into()),
        }));
        assert_eq!(lost.code(), ErrorCode::Unavailable);
        assert!(
            lost.message().ends_with("WAIT said 0 of 1"),
            "{}",
            lost.message()
        );
    }
}
