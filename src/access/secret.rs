//! A token as a value: compared in constant time, never shown.
//!
//! Invariants: [`Secret::matches`] takes the same time whatever the given token is and
//! wherever it differs, its length included: it compares SHA-256 digests, which are of
//! one length, with `subtle`'s constant-time equality; `Debug` prints no part of it.

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A secret that `Debug` does not show.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret {
    text: String,
    digest: [u8; 32],
}

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        let text = s.into();
        Secret {
            digest: Sha256::digest(text.as_bytes()).into(),
            text,
        }
    }

    /// The secret itself: the session cookie's key material, and the token a standby
    /// forwards for a session of its own.
    pub(crate) fn expose(&self) -> &str {
        &self.text
    }

    /// Its SHA-256 digest (what it is known by after a reload; not secret enough to
    /// log, since a short token can be found from it).
    pub fn digest(&self) -> &[u8; 32] {
        &self.digest
    }

    /// The SHA-256 digest of `given`.
    pub fn digest_of(given: &[u8]) -> [u8; 32] {
        Sha256::digest(given).into()
    }

    /// Whether `given` is this secret, in time independent of what it is.
    pub fn matches(&self, given: &[u8]) -> bool {
        Self::digest_of(given).ct_eq(&self.digest).into()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
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
        assert!(!s.matches(b""));
        assert!(!format!("{s:?}").contains("abc"));
    }
}
