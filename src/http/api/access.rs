//! Who may use the operator API: the admin token (compared in constant time, never
//! logged), whether reads need it, the read-only switch, and the refusal of changes
//! made cross-origin (a browser page of another site must not drive them with an
//! operator's credentials).
//!
//! Invariants: a request that changes something (any method but GET and HEAD) passes
//! every check — not read-only, same origin, the right token — before its handler
//! runs; the token's value appears in no log, error or `Debug` output. The console's
//! session cookie (see `http::console`) stands for the token only in a same-origin
//! request. A token in `Authorization: Bearer` counts towards the guessing bound the
//! console's login has (`http::console::limit`): wrong ones are counted per client
//! address, and a limited address is answered `429` whatever token it sends.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::ApiError;
use crate::http::console::Session;
use crate::http::console::limit::{Limited, LoginLimit};
use crate::http::{App, Peer};

/// A secret that `Debug` does not show.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    /// The secret itself, to derive the console's session cookie from it.
    pub(in crate::http) fn expose(&self) -> &[u8] {
        self.0.as_bytes()
    }

    pub(in crate::http) fn expose_str(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this secret, in time independent of where they differ.
    pub(in crate::http) fn matches(&self, given: &[u8]) -> bool {
        let want = self.0.as_bytes();
        let mut diff = want.len() ^ given.len();
        for (i, &w) in want.iter().enumerate() {
            diff |= usize::from(w ^ given.get(i).copied().unwrap_or(!w));
        }
        diff == 0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// The API's access settings (`--admin-token`, `--admin-read-auth`, `--admin-read-only`,
/// `--admin-login-limit`).
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// `None`: no token configured, so every change is refused.
    pub token: Option<Secret>,
    pub reads_need_token: bool,
    pub read_only: bool,
    /// Wrong tokens per client address per `login_window` the console's login and the
    /// API's bearer tokens take together (0: no bound; see `http::console::limit`).
    pub login_limit: u32,
    pub login_window: std::time::Duration,
}

impl Access {
    /// Whether a change may be made at all (a token configured, not read-only).
    pub fn changes_allowed(&self) -> bool {
        self.token.is_some() && !self.read_only
    }

    /// The token is in `Authorization: Bearer` (a wrong one counted against `peer`, and
    /// none taken while `peer` is limited), or in the console's session cookie of a
    /// same-origin request.
    fn authorized(
        &self,
        headers: &HeaderMap,
        session: &Session,
        limit: &LoginLimit,
        peer: std::net::IpAddr,
    ) -> Result<(), Refused> {
        let Some(token) = &self.token else {
            return Err(ApiError::unauthorized(
                "no admin token is configured: start redstalk with --admin-token, \
                 REDSTALK_ADMIN_TOKEN or --admin-token-file to allow changes",
            )
            .into());
        };
        match bearer(headers) {
            Some(given) => {
                limit.check(peer).map_err(Refused::Limited)?;
                if token.matches(given) {
                    return Ok(());
                }
                limit.failed(peer);
                Err(ApiError::unauthorized("wrong token").into())
            }
            None if session.accepts(headers) => Ok(()),
            None => Err(ApiError::unauthorized(
                "send the admin token as Authorization: Bearer TOKEN",
            )
            .into()),
        }
    }
}

/// The token of `Authorization: Bearer TOKEN`, if the request has one.
pub(in crate::http) fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
}

/// The client address of a request (unspecified when the connection did not say).
pub(in crate::http) fn peer_ip(req: &Request) -> std::net::IpAddr {
    req.extensions()
        .get::<Peer>()
        .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |p| p.0.ip())
}

/// Whether a request came from a page of another origin: its `Sec-Fetch-Site` says
/// so, or its `Origin` is not this listener's own host.
pub(in crate::http) fn cross_origin(headers: &HeaderMap) -> bool {
    let site = headers
        .get("sec-fetch-site")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if matches!(site, "cross-site" | "same-site") {
        return true;
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    origin_host.is_none_or(|o| !o.eq_ignore_ascii_case(host))
}

/// The checks before every API handler.
pub(in crate::http) async fn guard(
    State(app): State<Arc<App>>,
    req: Request,
    next: Next,
) -> Response {
    let refused = checks(&app, &req);
    match refused {
        Ok(()) => next.run(req).await,
        Err(refused) => refused.into_response(),
    }
}

/// Why the checks refused a request.
enum Refused {
    Api(ApiError),
    /// Too many wrong tokens from this address.
    Limited(Limited),
}

impl From<ApiError> for Refused {
    fn from(e: ApiError) -> Refused {
        Refused::Api(e)
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::Api(e) => e.into_response(),
            Refused::Limited(l) => l.into_response(),
        }
    }
}

/// What [`guard`] decides (apart, so no borrow of the request lives across its await:
/// a request is not `Sync`).
fn checks(app: &App, req: &Request) -> Result<(), Refused> {
    let access = &app.access;
    let change = !matches!(*req.method(), Method::GET | Method::HEAD);
    let authorized =
        || access.authorized(req.headers(), &app.session, &app.login_limit, peer_ip(req));
    if change {
        if access.read_only {
            Err(ApiError::read_only().into())
        } else if cross_origin(req.headers()) {
            Err(ApiError::forbidden(
                "a change from another origin is refused (Origin / Sec-Fetch-Site)",
            )
            .into())
        } else {
            authorized()
        }
    } else if access.reads_need_token {
        authorized()
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_matches_only_itself_and_does_not_show() {
        let s = Secret::new("abc");
        assert!(s.matches(b"abc"));
        assert!(!s.matches(b"abd") && !s.matches(b"ab") && !s.matches(b"abcd"));
        assert!(!format!("{s:?}").contains("abc"));
    }

    #[test]
    fn origins_are_compared_with_the_host() {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:9100".parse().unwrap());
        assert!(!cross_origin(&h));
        h.insert(header::ORIGIN, "http://127.0.0.1:9100".parse().unwrap());
        assert!(!cross_origin(&h));
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(cross_origin(&h));
        h.remove(header::ORIGIN);
        h.insert("sec-fetch-site", "cross-site".parse().unwrap());
        assert!(cross_origin(&h));
    }
}
