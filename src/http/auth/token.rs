//! The one check of a presented admin token: [`TokenGate::check`] compares it in
//! constant time ([`Secret`]) within the guessing bound ([`LoginLimit`]), counting a
//! wrong one against the client's address. It takes an address and bytes, nothing of
//! HTTP, so every place that takes a token (the API's bearer header, the console's
//! login, and a beanstalk listener's authentication) checks it the same way and
//! counts towards the same bound.

use std::net::IpAddr;
use std::time::Duration;

use super::limit::{Limited, LoginLimit};
use super::secret::Secret;

/// Why a presented token was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenRefused {
    #[error("no admin token is configured")]
    NotConfigured,
    #[error("wrong token")]
    Wrong,
    #[error("too many wrong tokens: try again in {} s", .0.retry_secs())]
    Limited(Limited),
}

/// The admin token and its guessing bound, one per process's listener.
#[derive(Debug)]
pub struct TokenGate {
    token: Option<Secret>,
    limit: LoginLimit,
}

impl TokenGate {
    /// `token` (`None`: no token is ever taken), at most `per_peer` wrong ones per
    /// address per `window` (0: no bound).
    pub fn new(token: Option<Secret>, per_peer: u32, window: Duration) -> TokenGate {
        TokenGate {
            token,
            limit: LoginLimit::new(per_peer, window),
        }
    }

    pub fn token(&self) -> Option<&Secret> {
        self.token.as_ref()
    }

    /// Whether `given`, sent from `peer`, is the admin token. A limited `peer` is
    /// refused whatever it sends; a wrong token counts against it.
    pub fn check(&self, peer: IpAddr, given: &[u8]) -> Result<(), TokenRefused> {
        let Some(token) = &self.token else {
            return Err(TokenRefused::NotConfigured);
        };
        self.limit.check(peer).map_err(TokenRefused::Limited)?;
        if token.matches(given) {
            return Ok(());
        }
        self.limit.failed(peer);
        Err(TokenRefused::Wrong)
    }

    /// The bound alone, for a token this instance passes on for another to decide (a
    /// leader-mode standby: the leader sees every forwarded request come from the
    /// standby, so the client's address is known only here): a limited `peer` is
    /// refused, and a token that is not this instance's is counted.
    pub fn pass_on(&self, peer: IpAddr, given: &[u8]) -> Result<(), Limited> {
        self.limit.check(peer)?;
        if self.token.as_ref().is_some_and(|t| !t.matches(given)) {
            self.limit.failed(peer);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn wrong_tokens_count_and_a_limited_address_is_refused_the_right_one_too() {
        let gate = TokenGate::new(Some(Secret::new("tok")), 2, Duration::from_secs(60));
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(gate.check(a, b"tok"), Ok(()));
        assert_eq!(gate.check(a, b"x"), Err(TokenRefused::Wrong));
        assert_eq!(gate.pass_on(a, b"y"), Ok(()), "counted, passed on");
        assert!(matches!(
            gate.check(a, b"tok"),
            Err(TokenRefused::Limited(_))
        ));
        assert!(gate.pass_on(a, b"tok").is_err());
        let none = TokenGate::new(None, 2, Duration::from_secs(60));
        assert_eq!(none.check(a, b"tok"), Err(TokenRefused::NotConfigured));
    }
}
