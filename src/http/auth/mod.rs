//! Who may use the operator API and the console, in one home: the admin token
//! ([`Secret`], compared in constant time, never logged), its guessing bound
//! ([`LoginLimit`], through [`TokenGate`], the one check of a presented token), the
//! console's session cookie ([`SessionCookie`]), the refusal of cross-origin changes
//! ([`cross_origin`]), the settings ([`Access`]: whether reads need the token, the
//! read-only switch), and the guard before every `/api/v1` route ([`guard`]).
//!
//! Invariants: a request that changes something (any method but GET and HEAD) passes
//! every check — not read-only, same origin, the right token — before its handler
//! runs; reads pass the token check too under `--admin-read-auth`; the token's value
//! appears in no log, error or `Debug` output; a token in `Authorization: Bearer`
//! counts towards the bound the console's login has, per client address; the
//! session cookie stands for the token only in a same-origin request. A request a
//! leader-mode standby forwards is decided by the leader; the standby applies only the
//! bound (it alone knows the client's address) and sends its own session as its
//! token.

mod cookie;
mod guard;
mod limit;
mod origin;
mod secret;
mod token;

use std::net::IpAddr;

use axum::http::{HeaderMap, HeaderValue, header};

pub use cookie::{COOKIE, SessionCookie};
pub use guard::guard;
pub use limit::{DEFAULT_PER_PEER, DEFAULT_WINDOW, GLOBAL_FACTOR, Limited, LoginLimit, MAX_PEERS};
pub use origin::cross_origin;
pub use secret::Secret;
pub use token::{TokenGate, TokenRefused};

/// The access settings (`--admin-token`, `--admin-read-auth`, `--admin-read-only`,
/// `--admin-login-limit`).
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// `None`: no token configured, so every change is refused.
    pub token: Option<Secret>,
    pub reads_need_token: bool,
    pub read_only: bool,
    /// Wrong tokens per client address per `login_window`, wherever a token is
    /// presented (0: no bound; see [`LoginLimit`]).
    pub login_limit: u32,
    pub login_window: std::time::Duration,
}

impl Access {
    /// Whether a change may be made at all (a token configured, not read-only).
    pub fn changes_allowed(&self) -> bool {
        self.token.is_some() && !self.read_only
    }
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "no admin token is configured: start redstalk with --admin-token, \
         REDSTALK_ADMIN_TOKEN or --admin-token-file to allow changes"
    )]
    NoToken,
    #[error("send the admin token as Authorization: Bearer TOKEN")]
    MissingToken,
    #[error("wrong token")]
    WrongToken,
    #[error("too many wrong tokens: try again in {} s", .0.retry_secs())]
    Limited(Limited),
    #[error("this server was started with --admin-read-only: no changes")]
    ReadOnly,
    /// From a page of another origin (`what`: a change, a login).
    #[error("a {0} from another origin is refused (Origin / Sec-Fetch-Site)")]
    CrossOrigin(&'static str),
}

impl From<TokenRefused> for Refused {
    fn from(r: TokenRefused) -> Refused {
        match r {
            TokenRefused::NotConfigured => Refused::NoToken,
            TokenRefused::Wrong => Refused::WrongToken,
            TokenRefused::Limited(l) => Refused::Limited(l),
        }
    }
}

/// The access control of one HTTP listener.
#[derive(Debug)]
pub struct Auth {
    access: Access,
    gate: TokenGate,
    cookie: SessionCookie,
}

impl Auth {
    pub fn new(access: &Access) -> Auth {
        Auth {
            cookie: SessionCookie::new(access.token.as_ref()),
            gate: TokenGate::new(
                access.token.clone(),
                access.login_limit,
                access.login_window,
            ),
            access: access.clone(),
        }
    }

    pub fn access(&self) -> &Access {
        &self.access
    }

    /// The token check and its bound, for whatever else takes the admin token.
    pub fn gate(&self) -> &TokenGate {
        &self.gate
    }

    /// The checks before a request this instance answers itself: a `change` (not a
    /// GET or HEAD) is refused read-only and cross-origin, and needs the token; a read
    /// needs it under `--admin-read-auth`.
    pub fn check(&self, change: bool, headers: &HeaderMap, peer: IpAddr) -> Result<(), Refused> {
        if change {
            if self.access.read_only {
                return Err(Refused::ReadOnly);
            }
            if cross_origin(headers) {
                return Err(Refused::CrossOrigin("change"));
            }
        } else if !self.access.reads_need_token {
            return Ok(());
        }
        if self.gate.token().is_none() {
            return Err(Refused::NoToken);
        }
        match bearer(headers) {
            Some(given) => Ok(self.gate.check(peer, given)?),
            None if self.cookie.accepts(headers) => Ok(()),
            None => Err(Refused::MissingToken),
        }
    }

    /// A request a standby passes on to the leader: a token is held to the bound,
    /// and a session of this standby's own goes on as its token (the cookie is an
    /// HMAC under this process's key, which the leader cannot check).
    pub fn pass_on(&self, headers: &mut HeaderMap, peer: IpAddr) -> Result<(), Refused> {
        if let Some(given) = bearer(headers) {
            self.gate.pass_on(peer, given).map_err(Refused::Limited)?;
            return Ok(());
        }
        let Some(token) = self.gate.token() else {
            return Ok(());
        };
        if !self.cookie.accepts(headers) {
            return Ok(());
        }
        if let Ok(bearer) = HeaderValue::from_str(&format!("Bearer {}", token.expose())) {
            headers.remove(header::COOKIE);
            headers.insert(header::AUTHORIZATION, bearer);
        }
        Ok(())
    }

    /// A console login with `given` from `peer`: the `Set-Cookie` value of the
    /// session it starts.
    pub fn login(&self, headers: &HeaderMap, peer: IpAddr, given: &str) -> Result<String, Refused> {
        if cross_origin(headers) {
            return Err(Refused::CrossOrigin("login"));
        }
        if let Err(refused) = self.gate.check(peer, given.as_bytes()) {
            if refused == TokenRefused::Wrong {
                tracing::info!(%peer, "console: a login with a wrong token");
            }
            return Err(refused.into());
        }
        self.cookie.set().ok_or(Refused::NoToken)
    }

    /// Whether `headers` carry a session of this process (from this origin).
    pub fn logged_in(&self, headers: &HeaderMap) -> bool {
        self.cookie.accepts(headers)
    }
}

/// The token of `Authorization: Bearer TOKEN`, if the request has one.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(reads_need_token: bool, read_only: bool) -> Auth {
        Auth::new(&Access {
            token: Some(Secret::new("tok")),
            reads_need_token,
            read_only,
            login_limit: 10,
            login_window: DEFAULT_WINDOW,
        })
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:9100".parse().unwrap());
        for (k, v) in pairs {
            h.insert(
                header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[tokio::test]
    async fn changes_need_the_token_from_this_origin_and_reads_only_under_read_auth() {
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let a = auth(false, false);
        assert_eq!(a.check(false, &headers(&[]), peer), Ok(()));
        assert_eq!(
            a.check(true, &headers(&[]), peer),
            Err(Refused::MissingToken)
        );
        let good = headers(&[("authorization", "Bearer tok")]);
        assert_eq!(a.check(true, &good, peer), Ok(()));
        let evil = headers(&[
            ("authorization", "Bearer tok"),
            ("origin", "http://evil.example"),
        ]);
        assert_eq!(
            a.check(true, &evil, peer),
            Err(Refused::CrossOrigin("change"))
        );
        assert_eq!(
            auth(false, true).check(true, &good, peer),
            Err(Refused::ReadOnly)
        );
        let ra = auth(true, false);
        assert_eq!(
            ra.check(false, &headers(&[]), peer),
            Err(Refused::MissingToken)
        );
        let wrong = headers(&[("authorization", "Bearer nope")]);
        assert_eq!(ra.check(false, &wrong, peer), Err(Refused::WrongToken));
    }

    #[tokio::test]
    async fn a_standby_passes_its_session_on_as_its_token() {
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let a = auth(false, false);
        let cookie = a.login(&headers(&[]), peer, "tok").unwrap();
        let value = cookie.split(';').next().unwrap().to_string();
        let mut h = headers(&[("cookie", &value)]);
        assert_eq!(a.pass_on(&mut h, peer), Ok(()));
        assert_eq!(h[header::AUTHORIZATION], "Bearer tok");
        assert!(h.get(header::COOKIE).is_none());
        // From another origin the session stands for nothing: passed on as it came.
        let mut evil = headers(&[("cookie", &value), ("origin", "http://evil.example")]);
        assert_eq!(a.pass_on(&mut evil, peer), Ok(()));
        assert!(evil.get(header::AUTHORIZATION).is_none());
    }
}
