//! What every listener's connections share about who may connect: the access control
//! (roles, the token check), the TLS configurations, the bound on pending connections
//! (handshaking or not yet authenticated) and its timeouts, the instance secret of
//! leader mode's relays, and the figures `/metrics` shows (failed handshakes and
//! authentications by reason, refusals by role, reloads).
//!
//! Ownership: one [`Security`] per process, shared by the accept loop, every
//! connection task and the HTTP listener. The figures are atomics, or small maps under
//! a mutex taken only on a failure or a refusal (never on a served command).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;

use super::tls::Tls;
use crate::access::{Control, Secret};
use crate::util::lock;

/// How long a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a client of a token listener has to authenticate (`--auth-timeout`).
pub const DEFAULT_AUTH_TIMEOUT: Duration = Duration::from_secs(10);
/// Pending connections at once (`--max-pending`).
pub const DEFAULT_MAX_PENDING: usize = 1024;

/// Who may connect, and the figures of those who tried.
#[derive(Debug)]
pub struct Security {
    pub control: Arc<Control>,
    /// The TLS of TLS listeners (`None`: there are none).
    pub tls: Option<Arc<Tls>>,
    /// Places for pending connections.
    pub pending: Arc<Semaphore>,
    pub max_pending: usize,
    pub handshake_timeout: Duration,
    pub auth_timeout: Duration,
    /// Leader mode: the secret instances prove to each other before one relays a
    /// client to another (`--relay-secret-file`).
    pub relay_secret: Option<Secret>,
    pub figures: Figures,
}

impl Security {
    /// Nothing configured: every listener open, as without any option.
    pub fn open() -> Arc<Security> {
        Security::new(
            Control::open(),
            None,
            DEFAULT_MAX_PENDING,
            DEFAULT_AUTH_TIMEOUT,
            None,
        )
    }

    pub fn new(
        control: Arc<Control>,
        tls: Option<Arc<Tls>>,
        max_pending: usize,
        auth_timeout: Duration,
        relay_secret: Option<Secret>,
    ) -> Arc<Security> {
        Arc::new(Security {
            control,
            tls,
            pending: Arc::new(Semaphore::new(max_pending)),
            max_pending,
            handshake_timeout: HANDSHAKE_TIMEOUT,
            auth_timeout,
            relay_secret,
            figures: Figures::default(),
        })
    }

    /// Pending connections now.
    pub fn pending_now(&self) -> usize {
        self.max_pending - self.pending.available_permits()
    }

    /// SIGHUP: read the roles file and the TLS files again. Each that fails keeps what
    /// is in force and says why; neither drops a connection.
    pub fn reload(&self) {
        match self.control.reload() {
            Ok(true) => {
                self.figures.reloaded("roles", "ok");
                tracing::info!("roles file reloaded");
            }
            Ok(false) => {}
            Err(err) => {
                self.figures.reloaded("roles", "failed");
                tracing::error!("roles file not reloaded, the roles in force stay: {err}");
            }
        }
        if let Some(tls) = &self.tls {
            match tls.reload() {
                Ok(()) => {
                    self.figures.reloaded("tls", "ok");
                    tracing::info!("TLS certificates reloaded");
                }
                Err(err) => {
                    self.figures.reloaded("tls", "failed");
                    tracing::error!("TLS certificates not reloaded, the ones in force stay: {err}");
                }
            }
        }
    }
}

/// Counts by label (a handful of fixed reasons, or the roles' names).
type Tally<K> = Mutex<BTreeMap<K, u64>>;

/// What `/metrics` shows of who tried to connect.
#[derive(Debug, Default)]
pub struct Figures {
    /// Connections closed at accept: too many pending.
    pub pending_refused: AtomicU64,
    handshake_failures: Tally<&'static str>,
    auth_failures: Tally<&'static str>,
    refusals: Tally<String>,
    reloads: Tally<(&'static str, &'static str)>,
}

impl Figures {
    pub fn handshake_failed(&self, reason: &'static str) {
        *lock(&self.handshake_failures).entry(reason).or_default() += 1;
    }

    pub fn auth_failed(&self, reason: &'static str) {
        *lock(&self.auth_failures).entry(reason).or_default() += 1;
    }

    pub fn refused(&self, role: &str) {
        let mut r = lock(&self.refusals);
        match r.get_mut(role) {
            Some(n) => *n += 1,
            None => {
                r.insert(role.to_string(), 1);
            }
        }
    }

    pub fn reloaded(&self, what: &'static str, outcome: &'static str) {
        *lock(&self.reloads).entry((what, outcome)).or_default() += 1;
    }

    pub fn pending_refused(&self) -> u64 {
        self.pending_refused.load(Ordering::Relaxed)
    }

    pub fn handshake_failures(&self) -> Vec<(&'static str, u64)> {
        lock(&self.handshake_failures)
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }

    pub fn auth_failures(&self) -> Vec<(&'static str, u64)> {
        lock(&self.auth_failures)
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect()
    }

    pub fn refusals(&self) -> Vec<(String, u64)> {
        lock(&self.refusals)
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    }

    pub fn reloads(&self) -> Vec<((&'static str, &'static str), u64)> {
        lock(&self.reloads).iter().map(|(k, v)| (*k, *v)).collect()
    }
}
