//! The web console (docs/CONSOLE.md): static pages under `/console/` that are clients
//! of the operator API, the login that turns the admin token into a session cookie, and
//! the security headers of every response of the listener. The live figures are
//! [`events`].
//!
//! Invariants:
//! - the console reads and changes nothing itself: its pages call `/api/v1`, under the
//!   API's access checks (token, read-only, read auth, cross-origin refusal);
//! - the session cookie holds an HMAC-SHA256 of the token under a key drawn at start,
//!   never the token: it is worthless after a restart or a token change, and it is
//!   `HttpOnly; SameSite=Strict; Path=/`; the API takes it as the token only for a
//!   same-origin request (see [`Session::accepts`]);
//! - a login's token is compared only within the guessing bound of [`limit`] (per
//!   client address and in all); beyond, `429` with `Retry-After`;
//! - every response carries a strict Content-Security-Policy (no inline script, no
//!   framing), `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer`; the
//!   assets are compiled in, nothing is loaded from elsewhere.

pub mod events;
pub mod limit;

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use hmac::{KeyInit, Mac};
use rand::RngExt;
use serde_json::json;

use super::api::access::{Secret, cross_origin};
use super::api::{ApiError, ApiResult, ok};
use super::{App, Peer};

/// The cookie that carries a console session.
pub const COOKIE: &str = "redstalk_session";
/// The largest login request read.
const MAX_LOGIN: usize = 4096;

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
form-action 'self'; frame-ancestors 'none'";

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// What a valid session cookie holds for this process: the HMAC of the token under a
/// per-process random key (`None` without a token: no session can exist).
#[derive(Debug)]
pub struct Session {
    cookie: Option<Secret>,
}

impl Session {
    pub fn new(token: Option<&Secret>) -> Session {
        let key: [u8; 32] = rand::rng().random();
        Session {
            cookie: token
                .and_then(|t| hmac_hex(&key, t.expose()))
                .map(Secret::new),
        }
    }

    /// Whether `headers` carry this process's session cookie and come from this
    /// listener's own origin (a page of another site gets nothing from the cookie).
    pub fn accepts(&self, headers: &HeaderMap) -> bool {
        let Some(want) = &self.cookie else {
            return false;
        };
        !cross_origin(headers) && cookie_value(headers).is_some_and(|v| want.matches(v))
    }
}

/// `key`'s HMAC-SHA256 of `token`, in hex.
fn hmac_hex(key: &[u8], token: &[u8]) -> Option<String> {
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(key).ok()?;
    mac.update(token);
    let tag = mac.finalize().into_bytes();
    Some(tag.iter().map(|b| format!("{b:02x}")).collect())
}

/// The session cookie's value among the request's cookies.
fn cookie_value(headers: &HeaderMap) -> Option<&[u8]> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b';'))
        .find_map(|c| {
            c.trim_ascii()
                .strip_prefix(COOKIE.as_bytes())
                .and_then(|rest| rest.strip_prefix(b"="))
        })
}

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
        .route("/console/favicon.svg", get(|| async { asset(ICON) }))
        .route("/console/session", get(session))
        .route("/console/login", post(login))
        .route("/console/logout", post(logout))
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
        json!({
            "logged_in": app.session.accepts(&headers),
            "token_configured": app.access.token.is_some(),
        }),
    )
}

/// `{"token": "..."}`: when it is the admin token, set the session cookie. Wrong tokens
/// count towards the guessing bound ([`limit`]).
async fn login(
    State(app): State<Arc<App>>,
    peer: Option<Extension<Peer>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Response> {
    let peer = peer.map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |p| p.0.0.ip());
    if let Err(limited) = app.login_limit.check(peer) {
        return Err(limited.into_response());
    }
    let r = check_login(&app, &headers, &body);
    if r.as_ref()
        .is_err_and(|e| e.status() == StatusCode::UNAUTHORIZED)
    {
        app.login_limit.failed(peer);
    }
    r.map_err(IntoResponse::into_response)
}

fn check_login(app: &App, headers: &HeaderMap, body: &[u8]) -> ApiResult {
    if cross_origin(headers) {
        return Err(ApiError::forbidden(
            "a login from another origin is refused (Origin / Sec-Fetch-Site)",
        ));
    }
    if body.len() > MAX_LOGIN {
        return Err(ApiError::bad_request("the login request is too large"));
    }
    let given: serde_json::Value = serde_json::from_slice(body)
        .map_err(|_| ApiError::bad_request("expected {\"token\": \"...\"}"))?;
    let given = given["token"].as_str().unwrap_or_default();
    let (Some(token), Some(cookie)) = (&app.access.token, &app.session.cookie) else {
        return Err(ApiError::unauthorized(
            "no admin token is configured: start redstalk with --admin-token",
        ));
    };
    if !token.matches(given.as_bytes()) {
        tracing::info!("console: a login with a wrong token");
        return Err(ApiError::unauthorized("wrong token"));
    }
    let set = format!(
        "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
        cookie.expose_str()
    );
    with_cookie(&set)
}

async fn logout() -> ApiResult {
    with_cookie(&format!(
        "{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"
    ))
}

fn with_cookie(set: &str) -> ApiResult {
    let mut r = ok(StatusCode::OK, json!({"ok": true}))?;
    let value = HeaderValue::from_str(set)
        .map_err(|_| ApiError::bad_request("the session cookie is not a header value"))?;
    r.headers_mut().insert(header::SET_COOKIE, value);
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_an_hmac_not_the_token_and_only_same_origin() {
        let s = Session::new(Some(&Secret::new("tok")));
        let cookie = s.cookie.as_ref().unwrap().expose_str().to_string();
        assert_eq!(cookie.len(), 64);
        assert!(!cookie.contains("tok"));
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:9".parse().unwrap());
        h.insert(
            header::COOKIE,
            format!("a=b; {COOKIE}={cookie}").parse().unwrap(),
        );
        assert!(s.accepts(&h));
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(!s.accepts(&h));
        h.remove(header::ORIGIN);
        h.insert(header::COOKIE, format!("{COOKIE}=tok").parse().unwrap());
        assert!(!s.accepts(&h));
        // Another process (another key) does not take this one's cookie.
        let other = Session::new(Some(&Secret::new("tok")));
        assert_ne!(other.cookie.unwrap().expose_str(), cookie);
        assert!(!Session::new(None).accepts(&h));
    }
}
