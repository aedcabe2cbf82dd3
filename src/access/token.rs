//! The tokens an instance takes, and the one check of a presented token: compared in
//! constant time with every configured token ([`Secret`]: SHA-256 digests compared
//! with `subtle`), within the guessing bound ([`LoginLimit`]), a wrong one counted
//! against the client's address. It takes an address and bytes, nothing of HTTP or
//! of the beanstalk protocol, so every place that takes a token (the API's bearer
//! header, the console's login, a beanstalk listener's `auth`) checks it the same way
//! and counts towards the same bound.
//!
//! Invariant: the time a lookup takes depends on how many tokens are configured, never
//! on what was given or which token (if any) it matches: every digest is compared and
//! the index of the match is chosen with `subtle`'s conditional selection.

use std::net::IpAddr;
use std::sync::Arc;

use subtle::{ConditionallySelectable, ConstantTimeEq};

use super::limit::{Limited, LoginLimit};
use super::secret::Secret;

/// Why a presented token was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    #[error("no token is configured")]
    NotConfigured,
    #[error("wrong token")]
    Wrong,
    #[error("too many wrong tokens: try again in {} s", .0.retry_secs())]
    Limited(Limited),
}

impl TokenRefused {
    /// A metric label.
    pub fn reason(self) -> &'static str {
        match self {
            TokenRefused::NotConfigured => "no_token_configured",
            TokenRefused::Wrong => "wrong_token",
            TokenRefused::Limited(_) => "limited",
        }
    }
}

/// One configured token and what it stands for.
#[derive(Debug)]
pub struct TokenEntry<T> {
    pub secret: Secret,
    pub value: T,
}

/// Configured tokens, each standing for a `T`.
#[derive(Debug)]
pub struct TokenSet<T> {
    entries: Vec<TokenEntry<T>>,
}

impl<T> Default for TokenSet<T> {
    fn default() -> Self {
        TokenSet {
            entries: Vec::new(),
        }
    }
}

impl<T> TokenSet<T> {
    pub fn new(entries: Vec<TokenEntry<T>>) -> TokenSet<T> {
        TokenSet { entries }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &TokenEntry<T>> {
        self.entries.iter()
    }

    /// The entry `given` is, in time independent of `given` (see the module's
    /// invariant).
    pub fn find(&self, given: &[u8]) -> Option<&TokenEntry<T>> {
        let digest = Secret::digest_of(given);
        let mut found = subtle::Choice::from(0);
        let mut index = 0u32;
        for (i, e) in self.entries.iter().enumerate() {
            let hit = e.secret.digest().ct_eq(&digest);
            index.conditional_assign(&(i as u32), hit);
            found |= hit;
        }
        bool::from(found).then(|| &self.entries[index as usize])
    }

    /// The entry whose digest is `digest` (a token already checked, found again after
    /// a reload: no guessing can happen here).
    pub fn by_digest(&self, digest: &[u8; 32]) -> Option<&TokenEntry<T>> {
        self.entries.iter().find(|e| e.secret.digest() == digest)
    }
}

/// The check of a presented token within the guessing bound, one per process: the
/// HTTP API and every beanstalk listener count together.
#[derive(Debug)]
pub struct TokenGate {
    limit: LoginLimit,
}

impl TokenGate {
    /// At most `per_peer` wrong tokens per address per `window` (0: no bound).
    pub fn new(per_peer: u32, window: std::time::Duration) -> Arc<TokenGate> {
        Arc::new(TokenGate {
            limit: LoginLimit::new(per_peer, window),
        })
    }

    /// The entry of `tokens` that `given`, sent from `peer`, is. A limited `peer` is
    /// refused whatever it sends; a wrong token counts against it.
    pub fn check<'t, T>(
        &self,
        tokens: &'t TokenSet<T>,
        peer: IpAddr,
        given: &[u8],
    ) -> Result<&'t TokenEntry<T>, TokenRefused> {
        if tokens.is_empty() {
            return Err(TokenRefused::NotConfigured);
        }
        self.limit.check(peer).map_err(TokenRefused::Limited)?;
        match tokens.find(given) {
            Some(entry) => Ok(entry),
            None => {
                self.limit.failed(peer);
                Err(TokenRefused::Wrong)
            }
        }
    }

    /// The bound alone, for a token this instance passes on for another to decide (a
    /// leader-mode standby forwarding an API request: the leader sees every forwarded
    /// request come from the standby, so the client's address is known only here): a
    /// limited `peer` is refused, and a token that is none of `tokens` is counted.
    pub fn pass_on<T>(
        &self,
        tokens: &TokenSet<T>,
        peer: IpAddr,
        given: &[u8],
    ) -> Result<(), Limited> {
        self.limit.check(peer)?;
        if !tokens.is_empty() && tokens.find(given).is_none() {
            self.limit.failed(peer);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn set(tokens: &[&str]) -> TokenSet<usize> {
        TokenSet::new(
            tokens
                .iter()
                .enumerate()
                .map(|(i, t)| TokenEntry {
                    secret: Secret::new(*t),
                    value: i,
                })
                .collect(),
        )
    }

    #[test]
    fn a_token_finds_its_own_entry_and_nothing_else_does() {
        let s = set(&["alpha", "beta-token", "gamma"]);
        assert_eq!(s.find(b"alpha").map(|e| e.value), Some(0));
        assert_eq!(s.find(b"beta-token").map(|e| e.value), Some(1));
        assert_eq!(s.find(b"gamma").map(|e| e.value), Some(2));
        for wrong in [&b"alph"[..], b"alphaa", b"", b"beta", b"alpha\0"] {
            assert!(s.find(wrong).is_none(), "{wrong:?}");
        }
        assert!(set(&[]).find(b"").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn wrong_tokens_count_and_a_limited_address_is_refused_the_right_one_too() {
        let gate = TokenGate::new(2, Duration::from_secs(60));
        let tokens = set(&["tok"]);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert!(gate.check(&tokens, a, b"tok").is_ok());
        assert_eq!(
            gate.check(&tokens, a, b"x").map(|e| e.value),
            Err(TokenRefused::Wrong)
        );
        assert_eq!(gate.pass_on(&tokens, a, b"y"), Ok(()), "counted, passed on");
        assert!(matches!(
            gate.check(&tokens, a, b"tok"),
            Err(TokenRefused::Limited(_))
        ));
        assert!(gate.pass_on(&tokens, a, b"tok").is_err());
        let none = set(&[]);
        assert!(matches!(
            gate.check(&none, a, b"tok"),
            Err(TokenRefused::NotConfigured)
        ));
    }
}
