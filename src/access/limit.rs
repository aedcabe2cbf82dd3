//! A bound on guessing a token, wherever a token is presented (the console's login,
//! the API's `Authorization: Bearer`, a beanstalk listener's `auth`; all count
//! together): at most
//! [`LoginLimit::per_peer`] wrong tokens per client address and [`LoginLimit::global`]
//! in all per window (a minute by default); beyond, a token is refused with
//! [`Limited`] until the window ends, the right token included (a guesser cannot tell
//! a hit from a miss while limited).
//!
//! Invariants:
//! - memory is bounded: at most [`MAX_PEERS`] addresses are counted in a window; the
//!   addresses beyond are bounded by the global count alone;
//! - an IPv6 client counts by its /64 (one host usually holds a whole /64);
//! - a limit reached is logged once per window, with the address, never the token;
//! - fixed windows: every count resets together when the window ends, so the table
//!   never needs sweeping;
//! - no HTTP here: a client address in, a verdict out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Addresses counted in one window.
pub const MAX_PEERS: usize = 4096;
/// Wrong tokens a client address may send per window (`--admin-login-limit`).
pub const DEFAULT_PER_PEER: u32 = 10;
/// Wrong tokens from all addresses per window, as a multiple of the per-address limit.
pub const GLOBAL_FACTOR: u32 = 10;
/// The window (a hidden flag shortens it for tests).
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// The guessing bound; shared by everything of the process that takes a token.
#[derive(Debug)]
pub struct LoginLimit {
    per_peer: u32,
    global: u32,
    window: Duration,
    state: Mutex<Window>,
}

/// The counts of the current window.
#[derive(Debug)]
struct Window {
    began: Instant,
    total: u32,
    peers: HashMap<IpAddr, u32>,
    /// The limit was reached (and said so in the log) in this window.
    logged: bool,
}

/// A token refused for now: the client may try again after this long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limited(pub Duration);

impl Limited {
    /// Whole seconds to wait, at least 1 (what `Retry-After` says).
    pub fn retry_secs(self) -> u64 {
        let left = self.0;
        (left.as_secs() + u64::from(left.subsec_nanos() > 0)).max(1)
    }
}

impl LoginLimit {
    /// `per_peer` wrong tokens per address per `window` (0: no bound), ten times that
    /// in all.
    pub fn new(per_peer: u32, window: Duration) -> LoginLimit {
        LoginLimit {
            per_peer,
            global: per_peer.saturating_mul(GLOBAL_FACTOR),
            window,
            state: Mutex::new(Window {
                began: Instant::now(),
                total: 0,
                peers: HashMap::new(),
                logged: false,
            }),
        }
    }

    /// Whether `peer` may try a token now.
    pub fn check(&self, peer: IpAddr) -> Result<(), Limited> {
        if self.per_peer == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut w = self.window(now);
        let mine = w.peers.get(&key(peer)).copied().unwrap_or(0);
        if mine < self.per_peer && w.total < self.global {
            return Ok(());
        }
        let left = (w.began + self.window).saturating_duration_since(now);
        if !w.logged {
            w.logged = true;
            let scope = if mine >= self.per_peer {
                "this address"
            } else {
                "all addresses"
            };
            tracing::warn!(
                %peer,
                "tokens refused for {}s: {scope} sent too many wrong tokens \
                 (at most {} per address and {} in all per {}s); logged once per window",
                left.as_secs().max(1),
                self.per_peer,
                self.global,
                self.window.as_secs_f64(),
            );
        }
        Err(Limited(left))
    }

    /// Count a wrong token from `peer`.
    pub fn failed(&self, peer: IpAddr) {
        if self.per_peer == 0 {
            return;
        }
        let mut w = self.window(Instant::now());
        w.total = w.total.saturating_add(1);
        let full = w.peers.len() >= MAX_PEERS;
        match w.peers.get_mut(&key(peer)) {
            Some(n) => *n = n.saturating_add(1),
            // Beyond the table, the global count alone bounds this address.
            None if full => {}
            None => {
                w.peers.insert(key(peer), 1);
            }
        }
    }

    /// The current window, a new one when the last has ended.
    fn window(&self, now: Instant) -> std::sync::MutexGuard<'_, Window> {
        let mut w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if now >= w.began + self.window {
            w.began = now;
            w.total = 0;
            w.peers.clear();
            w.logged = false;
        }
        w
    }
}

/// What an address counts as: itself, or its /64 for IPv6.
fn key(peer: IpAddr) -> IpAddr {
    match peer {
        IpAddr::V4(_) => peer,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let mut s = v6.segments();
                s[4..].fill(0);
                IpAddr::V6(s.into())
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_peer_is_limited_until_the_window_ends() {
        let l = LoginLimit::new(3, Duration::from_secs(60));
        let a = ip("10.0.0.1");
        for _ in 0..3 {
            assert_eq!(l.check(a), Ok(()));
            l.failed(a);
        }
        let Err(Limited(left)) = l.check(a) else {
            panic!("not limited after 3 wrong tokens");
        };
        assert_eq!(left, Duration::from_secs(60));
        assert_eq!(l.check(ip("10.0.0.2")), Ok(()), "another address is not");
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert_eq!(l.check(a), Err(Limited(Duration::from_secs(1))));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(l.check(a), Ok(()), "a new window");
    }

    #[tokio::test(start_paused = true)]
    async fn the_global_cap_holds_across_addresses_and_the_table_is_bounded() {
        let l = LoginLimit::new(2, Duration::from_secs(60));
        // 20 in all: ten addresses at one each, then the next ten.
        for i in 0..20u32 {
            let a = IpAddr::V4(i.into());
            assert_eq!(l.check(a), Ok(()), "address {i}");
            l.failed(a);
        }
        assert!(l.check(ip("192.0.2.1")).is_err(), "the global cap");

        let l = LoginLimit::new(u32::MAX / GLOBAL_FACTOR, Duration::from_secs(60));
        for i in 0..(MAX_PEERS as u32 + 100) {
            l.failed(IpAddr::V4(i.into()));
        }
        let w = l.window(Instant::now());
        assert_eq!(w.peers.len(), MAX_PEERS);
        assert_eq!(w.total, MAX_PEERS as u32 + 100);
    }

    #[tokio::test(start_paused = true)]
    async fn ipv6_counts_by_its_64_and_zero_is_off() {
        let l = LoginLimit::new(2, Duration::from_secs(60));
        l.failed(ip("2001:db8:1:2::1"));
        l.failed(ip("2001:db8:1:2::ffff"));
        assert!(l.check(ip("2001:db8:1:2:abcd::9")).is_err(), "same /64");
        assert_eq!(l.check(ip("2001:db8:1:3::1")), Ok(()), "another /64");
        l.failed(ip("::ffff:10.1.1.1"));
        l.failed(ip("10.1.1.1"));
        assert!(
            l.check(ip("10.1.1.1")).is_err(),
            "v4-mapped is the v4 address"
        );

        let off = LoginLimit::new(0, Duration::from_secs(60));
        for _ in 0..100 {
            off.failed(ip("10.0.0.1"));
        }
        assert_eq!(off.check(ip("10.0.0.1")), Ok(()));
    }
}
