//! The operator API, `/api/v1/...` (docs/API.md): JSON over the one HTTP listener.
//! Reads list tubes and jobs, show a job and its body, search bodies; changes (token
//! required, see [`access`]) put, delete, move, re-prioritise, re-delay, bury and kick
//! jobs, pause tubes, and change many jobs by filter.
//!
//! Files: `mod.rs` (router, errors, cursors, a job's JSON), `access.rs` (token, origin,
//! read-only), `reads.rs`, `changes.rs`, `clients.rs` (the live connections), `forward.rs` (a leader-mode standby forwards
//! each request to the leader's API).
//!
//! Invariants: every error is `{"error": {"code", "message"}}` with the status its code
//! names; cursors are opaque to clients (base64 of a sort key), so their format may
//! change; every change is logged at info (action, jobs or count, peer), never a token.

pub mod access;
mod changes;
mod clients;
pub mod forward;
pub(in crate::http) mod reads;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Serialize;
use serde_json::json;

use super::{App, Source};
use crate::engine::Engine;
use crate::engine::admin::{AdminError, AdminJob};
use crate::store::JobState;

pub use access::{Access, Secret};

/// Where the API's routes are (nested there: a route sees its path without it).
pub const API_PREFIX: &str = "/api/v1";

/// The largest request body an API route reads (a job body in base64 fits).
pub const MAX_API_BODY: usize = 256 * 1024;

/// An API error: status, code, message.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }
    pub fn bad_request(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m)
    }
    pub fn unauthorized(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", m)
    }
    pub fn forbidden(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", m)
    }
    pub fn read_only() -> ApiError {
        ApiError::new(
            StatusCode::FORBIDDEN,
            "read_only",
            "this server was started with --admin-read-only: no changes",
        )
    }
    pub fn not_found(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", m)
    }
    pub fn unavailable(m: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", m)
    }
    pub fn message(&self) -> &str {
        &self.message
    }
    pub fn status(&self) -> StatusCode {
        self.status
    }
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> ApiError {
        let (status, code) = match &e {
            AdminError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            AdminError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            AdminError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            AdminError::Unsupported(_) => (StatusCode::NOT_IMPLEMENTED, "unsupported"),
            AdminError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
        };
        ApiError::new(status, code, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut r = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r
    }
}

pub type ApiResult = Result<Response, ApiError>;

/// A JSON answer.
pub fn ok(status: StatusCode, body: impl Serialize) -> ApiResult {
    let mut r = (status, axum::Json(body)).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(r)
}

/// The engine that serves this instance's API, or why there is none here (a standby
/// forwards before this is asked, see `forward.rs`: only one that lost or took the lead
/// since gets here).
pub(super) fn engine_of(app: &App) -> Result<Arc<Engine>, ApiError> {
    match &app.source {
        Source::Engine(e) => Ok(e.clone()),
        Source::Cluster(c) => c.engine().ok_or_else(|| {
            ApiError::unavailable("this instance does not lead and cannot reach the leader's API")
        }),
    }
}

/// A job's JSON: `stats-job`'s names, its body size, its holder. Serialized straight
/// from the figures, borrowing them: a page of 1,000 jobs built as `Value`s first cost
/// about 20 times more (bench/results/2026-11-26-admin-api.md), on the thread that also
/// serves the beanstalk port.
#[derive(Serialize)]
pub struct JobJson<'a> {
    id: u64,
    tube: &'a str,
    state: &'a str,
    pri: u32,
    age: u64,
    delay: u64,
    ttr: u64,
    #[serde(rename = "time-left")]
    time_left: u64,
    file: u64,
    reserves: u64,
    timeouts: u64,
    releases: u64,
    buries: u64,
    kicks: u64,
    body_size: u64,
    holder: Option<HolderJson<'a>>,
}

#[derive(Serialize)]
struct HolderJson<'a> {
    instance: &'a str,
    addr: Option<&'a str>,
    conn: u64,
}

impl<'a> JobJson<'a> {
    pub fn of(j: &'a AdminJob) -> JobJson<'a> {
        let s = &j.stats;
        JobJson {
            id: s.id,
            tube: &s.tube,
            state: s.state,
            pri: s.pri,
            age: s.age,
            delay: s.delay,
            ttr: s.ttr,
            time_left: s.time_left,
            file: s.file,
            reserves: s.reserves,
            timeouts: s.timeouts,
            releases: s.releases,
            buries: s.buries,
            kicks: s.kicks,
            body_size: j.body_size,
            holder: j.holder.as_ref().map(|h| HolderJson {
                instance: &h.instance,
                addr: h.addr.as_deref(),
                conn: h.conn,
            }),
        }
    }
}

pub fn parse_state(s: &str) -> Result<JobState, ApiError> {
    Ok(match s {
        "ready" => JobState::Ready,
        "delayed" => JobState::Delayed,
        "buried" => JobState::Buried,
        "reserved" => JobState::Reserved,
        _ => {
            return Err(ApiError::bad_request(format!(
                "state {s:?}: expected ready, delayed, buried or reserved"
            )));
        }
    })
}

/// An opaque cursor for `text`.
pub fn encode_cursor(text: &str) -> String {
    URL_SAFE_NO_PAD.encode(text)
}

pub fn decode_cursor(cursor: &str) -> Result<String, ApiError> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| ApiError::bad_request("cursor: not one this server gave"))
}

/// The `/api/v1` routes.
pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/whoami", get(reads::whoami))
        .route("/stats", get(reads::stats))
        .route("/tubes", get(reads::tubes))
        .route("/tubes/{tube}", get(reads::tube))
        .route("/tubes/{tube}/jobs", get(reads::jobs).post(changes::put))
        .route("/tubes/{tube}/kick", post(changes::kick_tube))
        .route("/tubes/{tube}/pause", post(changes::pause))
        .route("/jobs/{id}", get(reads::job).delete(changes::delete))
        .route("/jobs/{id}/body", get(reads::body))
        .route("/jobs/{id}/move", post(changes::move_job))
        .route("/jobs/{id}/pri", post(changes::pri))
        .route("/jobs/{id}/delay", post(changes::delay))
        .route("/jobs/{id}/bury", post(changes::bury))
        .route("/jobs/{id}/kick", post(changes::kick_job))
        .route("/search", get(reads::search))
        .route("/bulk", post(changes::bulk))
        .route("/history", get(crate::http::history::api))
        .route("/clients", get(clients::clients))
        .fallback(|| async { ApiError::not_found("no such API route (see docs/API.md)") })
}
