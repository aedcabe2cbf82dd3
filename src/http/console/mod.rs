//! The web console (docs/CONSOLE.md): static pages under `/console/` that are clients
//! of the operator API, the login that turns the admin token into a session cookie
//! (checked and issued by `http::auth`), and the security headers of every response of
//! the listener. The live figures are the API's `/events`.
//!
//! Invariants:
//! - the console reads and changes nothing itself: its pages call `/api/v1`, under the
//!   API's access checks (token, read-only, read auth, cross-origin refusal);
//! - a login's token is checked by the one token check, within the guessing bound
//!   (`http::auth`); beyond, `429` with `Retry-After`; a login body is at most
//!   [`MAX_LOGIN`] bytes; every error is the API's JSON error;
//! - every response carries a strict Content-Security-Policy (no inline script, no
//!   framing), `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer`; the
//!   assets are compiled in, nothing is loaded from elsewhere.

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use super::api::extract::ApiJson;
use super::api::types::{Done, Login, SessionState};
use super::api::{ApiError, ApiResult, ok};
use super::auth::SessionCookie;
use super::{App, Peer};

/// The largest login request read.
pub const MAX_LOGIN: usize = 4096;

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
form-action 'self'; frame-ancestors 'none'";

/// The console's routes: its pages and assets, login and logout.
pub(super) fn router() -> Router<Arc<App>> {
    Router::new()
        .route("/console", get(|| async { Redirect::to("/console/") }))
        .route("/console/", get(|| async { asset(INDEX) }))
        .route("/console/app.css", get(|| async { asset(CSS) }))
        .route("/console/app.js", get(|| async { asset(APP_JS) }))
        .route("/console/pages.js", get(|| async { asset(PAGES_JS) }))
        .route("/console/history.js", get(|| async { asset(HISTORY_JS) }))
        .route("/console/clients.js", get(|| async { asset(CLIENTS_JS) }))
        .route("/console/policies.js", get(|| async { asset(POLICIES_JS) }))
        .route(
            "/console/schedules.js",
            get(|| async { asset(SCHEDULES_JS) }),
        )
        .route("/console/retained.js", get(|| async { asset(RETAINED_JS) }))
        .route("/console/favicon.svg", get(|| async { asset(ICON) }))
        .route("/console/session", get(session))
        .route("/console/login", post(login))
        .route("/console/logout", post(logout))
        .layer(DefaultBodyLimit::max(MAX_LOGIN))
}

/// A compiled-in file: its content type and text.
type Asset = (&'static str, &'static str);
const INDEX: Asset = (
    "text/html; charset=utf-8",
    include_str!("assets/index.html"),
);
const CLIENTS_JS: Asset = (
    "text/javascript; charset=utf-8",
    include_str!("assets/clients.js"),
);
const POLICIES_JS: Asset = (
    "text/javascript; charset=utf-8",
    include_str!("assets/policies.js"),
);
const SCHEDULES_JS: Asset = (
    "text/javascript; charset=utf-8",
    include_str!("assets/schedules.js"),
);
const RETAINED_JS: Asset = (
    "text/javascript; charset=utf-8",
    include_str!("assets/retained.js"),
);
const CSS: Asset = ("text/css; charset=utf-8", include_str!("assets/app.css"));
const APP_JS: Asset = (
    "text/javascript; charset=utf-8",
    include_str!("assets/app.js"),
);
const PAGES_JS: Asset = (
    "text/javascript; charset=utf-8",
    include_str!("assets/pages.js"),
);
const HISTORY_JS: Asset = (
    "text/javascript; charset=utf-8",
    include_str!("assets/history.js"),
);
const ICON: Asset = ("image/svg+xml", include_str!("assets/favicon.svg"));

fn asset((content_type, text): Asset) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        text,
    )
        .into_response()
}

/// Add the security headers to every response of the listener.
pub(super) async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

/// Whether this browser has a session, and whether it could have one.
async fn session(State(app): State<Arc<App>>, headers: HeaderMap) -> ApiResult {
    ok(
        StatusCode::OK,
        SessionState {
            logged_in: app.auth.logged_in(&headers),
            token_configured: app.auth.token_configured(),
        },
    )
}

/// `{"token": "..."}`: when it is the admin token, set the session cookie.
async fn login(
    State(app): State<Arc<App>>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<Login>,
) -> ApiResult {
    let peer = peer.map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |p| p.0.0.ip());
    let set = app.auth.login(&headers, peer, &req.token)?;
    with_cookie(&set)
}

async fn logout() -> ApiResult {
    with_cookie(&SessionCookie::clear())
}

fn with_cookie(set: &str) -> ApiResult {
    let mut r = ok(StatusCode::OK, Done { ok: true })?;
    let value = HeaderValue::from_str(set)
        .map_err(|_| ApiError::bad_request("the session cookie is not a header value"))?;
    r.headers_mut().insert(header::SET_COOKIE, value);
    Ok(r)
}
