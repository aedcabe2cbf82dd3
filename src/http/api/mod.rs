//! The operator API, `/api/v1/...` (docs/API.md): JSON over the one HTTP listener.
//! Reads list tubes and jobs, show a job and its body, find a job by key, search
//! bodies, list the live connections, the per-minute history and the live figures;
//! changes (token required, see `http::auth`) put, delete, move, re-prioritise,
//! re-delay, bury and kick jobs (delete, re-delay and kick also by key), pause tubes,
//! and change many jobs by filter; the tube policies and the schedules are listed and
//! changed (admin) here too.
//!
//! Files: `types.rs` (the contract: every request and answer, shared with
//! redstalkctl), `error.rs` (the error and its status), `extract.rs` (body, query,
//! path and engine extractors), `cursor.rs` (what each list's cursor holds),
//! `forward.rs` (where a request is answered; a standby forwards to the leader),
//! `reads.rs`, `retained.rs`, `changes.rs`, `clients.rs`, `history.rs`, `events.rs`, `policies.rs`,
//! `schedules.rs` (the routes).
//!
//! Invariants: every answer is a type of `types.rs`, every error an `ApiError`
//! (`{"error": {"code", "message"}}` with the status its code names), from any layer:
//! a route, an extractor, the guard, the forwarder, an unknown route (404) or method
//! (405), a body over [`MAX_API_BODY`] (413); every list pages by `cursor` and
//! `next_cursor`; every change is logged at info (action, jobs or count, peer), never a
//! token. A new route is one handler and its types.

mod changes;
mod clients;
mod cursor;
pub mod error;
mod events;
pub mod extract;
pub mod forward;
mod history;
mod policies;
mod reads;
mod retained;
mod schedules;
pub mod types;

use std::borrow::Cow;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde::Serialize;

pub use error::{ApiError, ApiResult};
pub use events::Events;
use types::{ErrorCode, HeldBy, Job};

use super::App;
use crate::engine::admin::AdminJob;

/// Where the API's routes are (nested there: a route sees its path without it).
pub const API_PREFIX: &str = "/api/v1";

/// The largest request body an API route reads (a job body in base64 fits).
pub const MAX_API_BODY: usize = 256 * 1024;

/// A JSON answer (never cached).
pub fn ok(status: StatusCode, body: impl Serialize) -> ApiResult {
    let mut r = (status, axum::Json(body)).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(r)
}

/// A job as the API shows it, borrowing the engine's figures: a page of 1,000 jobs
/// built as JSON values first cost about 20 times more
/// (bench/results/2026-11-26-admin-api.md), on the thread that also serves the
/// beanstalk port.
pub fn job_view(j: &AdminJob) -> Job<'_> {
    Job {
        stats: Cow::Borrowed(&j.stats),
        key: j.key.as_ref().map(|k| Cow::Borrowed(k.as_str())),
        body_size: j.body_size,
        holder: j.holder.as_ref().map(|h| HeldBy {
            instance: Cow::Borrowed(&h.instance),
            addr: h.addr.as_deref().map(Cow::Borrowed),
            conn: h.conn,
        }),
        dead_letter: j.dead.map(|why| Box::new(why.into())),
    }
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
        .route("/tubes/{tube}/flush", post(changes::flush))
        .route(
            "/tubes/{tube}/keys/{key}",
            get(reads::by_key).delete(changes::delete_key),
        )
        .route("/tubes/{tube}/keys/{key}/kick", post(changes::kick_key))
        .route("/tubes/{tube}/keys/{key}/delay", post(changes::delay_key))
        .route("/tubes/{tube}/keys/{key}/bury", post(changes::bury_key))
        .route("/jobs/{id}", get(reads::job).delete(changes::delete))
        .route("/jobs/{id}/body", get(reads::body))
        .route("/jobs/{id}/move", post(changes::move_job))
        .route("/jobs/{id}/pri", post(changes::pri))
        .route("/jobs/{id}/delay", post(changes::delay))
        .route("/jobs/{id}/bury", post(changes::bury))
        .route("/jobs/{id}/kick", post(changes::kick_job))
        .route("/retained", get(retained::list))
        .route("/search", get(reads::search))
        .route("/bulk", post(changes::bulk))
        .route("/history", get(history::history))
        .route("/policies", get(policies::list))
        .route(
            "/policies/{tubes}",
            axum::routing::put(policies::set).delete(policies::remove),
        )
        .route("/schedules", get(schedules::list))
        .route(
            "/schedules/{name}",
            get(schedules::show)
                .put(schedules::set)
                .delete(schedules::remove),
        )
        .route("/schedules/{name}/pause", post(schedules::pause))
        .route("/schedules/{name}/resume", post(schedules::resume))
        .route("/schedules/{name}/run", post(schedules::run))
        .route("/clients", get(clients::clients))
        .route("/events", get(events::stream))
        // After every route: it applies to the routes already added. The `Allow`
        // header of each route is kept.
        .method_not_allowed_fallback(method_not_allowed)
        .fallback(not_found)
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "this route does not take this method (see Allow, and docs/API.md)",
    )
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such API route (see docs/API.md)")
}
