//! The web console's session cookie: issued by a login with the admin token, it stands
//! for the token in a same-origin request of that browser.
//!
//! Invariants: the cookie holds an HMAC-SHA256 of the token under a key drawn when the
//! process starts, never the token nor an unkeyed function of it: it is worthless after
//! a restart or a token change, and learning it does not help guess the token; it is
//! `HttpOnly; SameSite=Strict; Path=/`; it is taken only in a same-origin request, and
//! compared in constant time.

use axum::http::{HeaderMap, header};
use hmac::{KeyInit, Mac};
use rand::RngExt;

use super::origin::cross_origin;
use super::secret::Secret;

/// The cookie that carries a console session.
pub const COOKIE: &str = "redstalk_session";

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// What a valid session cookie holds for this process (`None` without a token: no
/// session can exist).
#[derive(Debug)]
pub struct SessionCookie {
    value: Option<Secret>,
}

impl SessionCookie {
    pub fn new(token: Option<&Secret>) -> SessionCookie {
        let key: [u8; 32] = rand::rng().random();
        SessionCookie {
            value: token
                .and_then(|t| hmac_hex(&key, t.expose().as_bytes()))
                .map(Secret::new),
        }
    }

    /// Whether `headers` carry this process's session cookie and come from this
    /// listener's own origin (a page of another site gets nothing from the cookie).
    pub fn accepts(&self, headers: &HeaderMap) -> bool {
        let Some(want) = &self.value else {
            return false;
        };
        !cross_origin(headers) && cookie_value(headers).is_some_and(|v| want.matches(v))
    }

    /// The `Set-Cookie` value that starts a session (`None` without a token).
    pub fn set(&self) -> Option<String> {
        let value = self.value.as_ref()?;
        Some(format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
            value.expose()
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

    fn cookie_of(s: &SessionCookie) -> String {
        let set = s.set().unwrap();
        let value = set.strip_prefix(&format!("{COOKIE}=")).unwrap();
        value.split(';').next().unwrap().to_string()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn a_cookie_holds_no_form_of_the_token() {
        let s = SessionCookie::new(Some(&Secret::new(TOKEN)));
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
        let other = SessionCookie::new(Some(&Secret::new(TOKEN)));
        assert_ne!(cookie_of(&other), cookie);
    }

    #[test]
    fn a_cookie_is_taken_only_from_the_same_origin() {
        let s = SessionCookie::new(Some(&Secret::new(TOKEN)));
        let cookie = cookie_of(&s);
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
        h.insert(header::COOKIE, format!("{COOKIE}={TOKEN}").parse().unwrap());
        assert!(!s.accepts(&h), "the token is not a cookie");
        assert!(!SessionCookie::new(None).accepts(&h));
        assert!(SessionCookie::new(None).set().is_none());
    }
}
