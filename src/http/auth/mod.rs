//! Who may use the operator API and the console: the identities and roles of the
//! process's access control (`crate::access`: tokens compared in constant time, their
//! guessing bound, roles with their `api` right), the console's session cookie
//! ([`SessionCookie`]), the refusal of cross-origin changes ([`cross_origin`]), the
//! settings ([`Access`]: whether reads need a token, the read-only switch), and the
//! guard before every `/api/v1` route ([`guard`]).
//!
//! Invariants: a request that changes something (any method but GET and HEAD) passes
//! every check — not read-only, same origin, a token whose role has `api = "admin"` —
//! before its handler runs; reads need a token whose role has `api = "read"` or more
//! under `--admin-read-auth`; a token appears in no log, error or `Debug` output; a
//! token in `Authorization: Bearer` counts towards the same bound as the console's
//! login and the beanstalk port's `auth`, per client address; the session cookie
//! stands for its token only in a same-origin request. A request a leader-mode
//! standby forwards is decided by the leader; the standby applies only the bound (it
//! alone knows the client's address) and sends its own session on as its token.

mod cookie;
mod guard;
mod origin;

use std::net::IpAddr;
use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, header};

use crate::access::{Api, Control, Limited, TokenRefused};
pub use cookie::{COOKIE, SessionCookie};
pub use guard::guard;
pub use origin::cross_origin;

/// The API's own settings (`--admin-read-auth`, `--admin-read-only`); who holds which
/// token is the access control's.
#[derive(Clone, Debug, Default)]
pub struct Access {
    pub reads_need_token: bool,
    pub read_only: bool,
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "no token may use the API: start redstalk with --admin-token, \
         REDSTALK_ADMIN_TOKEN or --admin-token-file, or give a role api = \"admin\" in \
         the roles file (--roles)"
    )]
    NoToken,
    #[error("send a token as Authorization: Bearer TOKEN")]
    MissingToken,
    #[error("wrong token")]
    WrongToken,
    #[error("too many wrong tokens: try again in {} s", .0.retry_secs())]
    Limited(Limited),
    #[error("this server was started with --admin-read-only: no changes")]
    ReadOnly,
    /// A token whose role may not do this.
    #[error("this token's role may not {0} (its api right in the roles file)")]
    Role(&'static str),
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
    control: Arc<Control>,
    cookie: SessionCookie,
}

impl Auth {
    pub fn new(access: &Access, control: Arc<Control>) -> Auth {
        Auth {
            cookie: SessionCookie::new(),
            control,
            access: access.clone(),
        }
    }

    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Whether any token may use the API (reads or changes).
    pub fn token_configured(&self) -> bool {
        self.control
            .roles()
            .tokens()
            .iter()
            .any(|e| e.value.role.api >= Api::Read)
    }

    /// Whether a change may be made at all (a token may, and not read-only).
    pub fn changes_allowed(&self) -> bool {
        !self.access.read_only
            && self
                .control
                .roles()
                .tokens()
                .iter()
                .any(|e| e.value.role.api == Api::Admin)
    }

    /// The checks before a request this instance answers itself: a `change` (not a
    /// GET or HEAD) is refused read-only and cross-origin, and needs a token of a role
    /// with `api = "admin"`; a read needs one of `api = "read"` under
    /// `--admin-read-auth`.
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
        let roles = self.control.roles();
        if roles.tokens().is_empty() {
            return Err(Refused::NoToken);
        }
        let identity = match bearer(headers) {
            Some(given) => {
                let entry = self.control.gate().check(roles.tokens(), peer, given)?;
                entry.value.clone()
            }
            None => match self.cookie.identity(headers, &roles) {
                Some(identity) => identity,
                None => return Err(Refused::MissingToken),
            },
        };
        let (need, what) = match change {
            true => (Api::Admin, "change anything"),
            false => (Api::Read, "read"),
        };
        if identity.role.api < need {
            tracing::info!(%peer, identity = %identity.name, role = %identity.role.name, "api: refused to a role without the right");
            return Err(Refused::Role(what));
        }
        Ok(())
    }

    /// A request a standby passes on to the leader: a token is held to the bound,
    /// and a session of this standby's own goes on as its token (the cookie is an
    /// HMAC under this process's key, which the leader cannot check).
    pub fn pass_on(&self, headers: &mut HeaderMap, peer: IpAddr) -> Result<(), Refused> {
        let roles = self.control.roles();
        if let Some(given) = bearer(headers) {
            self.control
                .gate()
                .pass_on(roles.tokens(), peer, given)
                .map_err(Refused::Limited)?;
            return Ok(());
        }
        let Some(entry) = self.cookie.entry(headers, &roles) else {
            return Ok(());
        };
        if let Ok(bearer) = HeaderValue::from_str(&format!("Bearer {}", entry.secret.expose())) {
            headers.remove(header::COOKIE);
            headers.insert(header::AUTHORIZATION, bearer);
        }
        Ok(())
    }

    /// A console login with `given` from `peer`: the `Set-Cookie` value of the
    /// session it starts (a token whose role may at least read).
    pub fn login(&self, headers: &HeaderMap, peer: IpAddr, given: &str) -> Result<String, Refused> {
        if cross_origin(headers) {
            return Err(Refused::CrossOrigin("login"));
        }
        let roles = self.control.roles();
        let entry = match self
            .control
            .gate()
            .check(roles.tokens(), peer, given.as_bytes())
        {
            Ok(entry) => entry,
            Err(refused) => {
                if refused == TokenRefused::Wrong {
                    tracing::info!(%peer, "console: a login with a wrong token");
                }
                return Err(refused.into());
            }
        };
        if entry.value.role.api < Api::Read {
            return Err(Refused::Role("use the console"));
        }
        self.cookie.set(&entry.secret).ok_or(Refused::NoToken)
    }

    /// Whether `headers` carry a session of this process (from this origin).
    pub fn logged_in(&self, headers: &HeaderMap) -> bool {
        self.cookie
            .identity(headers, &self.control.roles())
            .is_some()
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
        auth_with(reads_need_token, read_only, None)
    }

    fn auth_with(reads_need_token: bool, read_only: bool, roles: Option<&str>) -> Auth {
        let roles_file = roles.map(|text| {
            let path = std::env::temp_dir().join(format!(
                "redstalk-http-auth-{}-{}.toml",
                std::process::id(),
                rand::random::<u64>()
            ));
            std::fs::write(&path, text).unwrap();
            path
        });
        let control = Control::new(crate::access::AccessConfig {
            roles_file: roles_file.clone(),
            admin_token: Some(crate::access::Secret::new("tok")),
            login_limit: 10,
            login_window: crate::access::DEFAULT_WINDOW,
        })
        .unwrap();
        if let Some(p) = roles_file {
            let _ = std::fs::remove_file(p);
        }
        Auth::new(
            &Access {
                reads_need_token,
                read_only,
            },
            control,
        )
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
    async fn a_roles_file_gives_the_api_to_roles_with_the_right() {
        let peer: IpAddr = "10.0.0.2".parse().unwrap();
        let a = auth_with(
            true,
            false,
            Some(
                "[roles.dash]\napi = \"read\"\n[roles.app]\nput = [\"*\"]\n\
                 [[token]]\nname = \"d\"\ntoken = \"dash-tok\"\nrole = \"dash\"\n\
                 [[token]]\nname = \"p\"\ntoken = \"app-tok\"\nrole = \"app\"\n",
            ),
        );
        let dash = headers(&[("authorization", "Bearer dash-tok")]);
        assert_eq!(a.check(false, &dash, peer), Ok(()));
        assert_eq!(
            a.check(true, &dash, peer),
            Err(Refused::Role("change anything"))
        );
        let app = headers(&[("authorization", "Bearer app-tok")]);
        assert_eq!(a.check(false, &app, peer), Err(Refused::Role("read")));
        let admin = headers(&[("authorization", "Bearer tok")]);
        assert_eq!(
            a.check(true, &admin, peer),
            Ok(()),
            "--admin-token stays the admin"
        );
        let cookie = a.login(&headers(&[]), peer, "dash-tok").unwrap();
        let value = cookie.split(';').next().unwrap().to_string();
        assert!(a.logged_in(&headers(&[("cookie", &value)])));
        assert_eq!(
            a.login(&headers(&[]), peer, "app-tok"),
            Err(Refused::Role("use the console"))
        );
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
