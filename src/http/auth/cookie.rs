//! The web console's session cookie: issued by a login with a token, it stands for
//! that token in a same-origin request of that browser.
//!
//! Invariants: the cookie holds an HMAC-SHA256 of the token under a key drawn when the
//! process starts, never the token nor an unkeyed function of it: it is worthless after
//! a restart or once its token leaves the roles file, and learning it does not help
//! guess the token; it is `HttpOnly; SameSite=Strict; Path=/`; it is taken only in a
//! same-origin request, and compared in constant time with every token's.

use axum::http::{HeaderMap, header};
use hmac::{KeyInit, Mac};
use rand::RngExt;
use subtle::ConstantTimeEq;

use super::origin::cross_origin;
use crate::access::{Identity, Roles, Secret, TokenEntry};

/// The cookie that carries a console session.
pub const COOKIE: &str = "redstalk_session";

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// This process's key for session cookies.
pub struct SessionCookie {
    key: [u8; 32],
}

impl std::fmt::Debug for SessionCookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionCookie(<key>)")
    }
}

impl Default for SessionCookie {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionCookie {
    pub fn new() -> SessionCookie {
        SessionCookie {
            key: rand::rng().random(),
        }
    }

    /// The token entry of `roles` whose session `headers` carry, from this listener's
    /// own origin (a page of another site gets nothing from the cookie).
    pub fn entry<'r>(
        &self,
        headers: &HeaderMap,
        roles: &'r Roles,
    ) -> Option<&'r TokenEntry<Identity>> {
        if cross_origin(headers) {
            return None;
        }
        let given = cookie_value(headers)?;
        let mut found = None;
        // Every token's cookie is computed and compared: the time does not tell which.
        for e in roles.tokens().iter() {
            let Some(want) = hmac_hex(&self.key, e.secret.expose().as_bytes()) else {
                continue;
            };
            if bool::from(want.as_bytes().ct_eq(given)) {
                found = Some(e);
            }
        }
        found
    }

    /// The identity whose session `headers` carry (see [`Self::entry`]).
    pub fn identity(&self, headers: &HeaderMap, roles: &Roles) -> Option<Identity> {
        self.entry(headers, roles).map(|e| e.value.clone())
    }

    /// The `Set-Cookie` value that starts a session of `token`.
    pub fn set(&self, token: &Secret) -> Option<String> {
        let value = hmac_hex(&self.key, token.expose().as_bytes())?;
        Some(format!(
            "{COOKIE}={value}; HttpOnly; SameSite=Strict; Path=/"
        ))
    }

    /// The `Set-Cookie` value that ends a session.
    pub fn clear() -> String {
        format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
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

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use sha2::Digest;

    use super::*;

    const TOKEN: &str = "correct-horse-battery-staple-42";

    fn roles() -> Roles {
        Roles::builtin(Some(&Secret::new(TOKEN)))
    }

    fn cookie_of(s: &SessionCookie) -> String {
        let set = s.set(&Secret::new(TOKEN)).unwrap();
        let value = set.strip_prefix(&format!("{COOKIE}=")).unwrap();
        value.split(';').next().unwrap().to_string()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn a_cookie_holds_no_form_of_the_token() {
        let s = SessionCookie::new();
        let cookie = cookie_of(&s);
        assert_eq!(cookie.len(), 64, "{cookie}");
        let b64 = base64::engine::general_purpose::STANDARD;
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let forms = [
            TOKEN.to_string(),
            TOKEN.to_ascii_uppercase(),
            hex(TOKEN.as_bytes()),
            hex(TOKEN.as_bytes()).to_ascii_uppercase(),
            b64.encode(TOKEN),
            url.encode(TOKEN),
            // Unkeyed digests would let a cookie's reader test guesses offline.
            hex(&sha2::Sha256::digest(TOKEN)),
            hmac_hex(&[], TOKEN.as_bytes()).unwrap(),
        ];
        for form in &forms {
            // Any 8 characters of a form: a cookie that carries part of it fails too.
            for part in form.as_bytes().windows(8) {
                let part = std::str::from_utf8(part).unwrap();
                assert!(
                    !cookie.contains(part),
                    "the cookie {cookie} holds {part:?} of {form}"
                );
            }
        }
        // Keyed per process: another process with the same token has another cookie.
        let other = SessionCookie::new();
        assert_ne!(cookie_of(&other), cookie);
    }

    #[test]
    fn a_cookie_is_taken_only_from_the_same_origin() {
        let s = SessionCookie::new();
        let roles = roles();
        let cookie = cookie_of(&s);
        let mut h = HeaderMap::new();
        h.insert(header::HOST, "127.0.0.1:9".parse().unwrap());
        h.insert(
            header::COOKIE,
            format!("a=b; {COOKIE}={cookie}").parse().unwrap(),
        );
        assert!(s.identity(&h, &roles).is_some());
        h.insert(header::ORIGIN, "http://evil.example".parse().unwrap());
        assert!(s.identity(&h, &roles).is_none());
        h.remove(header::ORIGIN);
        h.insert(header::COOKIE, format!("{COOKIE}={TOKEN}").parse().unwrap());
        assert!(
            s.identity(&h, &roles).is_none(),
            "the token is not a cookie"
        );
        let c = format!("{COOKIE}={cookie}");
        h.insert(header::COOKIE, c.parse().unwrap());
        assert!(
            s.identity(&h, &Roles::builtin(None)).is_none(),
            "a token no longer configured has no session"
        );
    }
}
