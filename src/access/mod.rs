//! Who may do what, for the beanstalk port and the HTTP API alike (docs/SECURITY.md):
//! tokens ([`Secret`], compared in constant time, never logged) and their guessing
//! bound ([`LoginLimit`], through [`TokenGate`]: one per process, every listener and
//! the API counting together), roles ([`Role`]: tube patterns, `manage`, `api`), the
//! roles file ([`Roles`]), and the check of a connection's commands against its role
//! ([`Grant`]).
//!
//! Pure but for the file read: no sockets, no HTTP, no engine. `server/` and `http/`
//! both import it.
//!
//! Ownership: the process's [`Control`] holds the roles now in force; a reload (SIGHUP)
//! swaps them whole and bumps a generation counter, which connections compare before
//! each command (one atomic load) to take their role from the new file.

mod grant;
mod limit;
mod role;
mod roles;
mod secret;
mod token;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

pub use grant::{Grant, IdentityKey, Note, Verdict};
pub use limit::{DEFAULT_PER_PEER, DEFAULT_WINDOW, GLOBAL_FACTOR, Limited, LoginLimit, MAX_PEERS};
pub use role::{ADMIN, Api, Pattern, Role, Tubes};
pub use roles::{Identity, MAX_TOKEN_LEN, Roles, RolesError, readable_by_others};
pub use secret::Secret;
pub use token::{TokenEntry, TokenGate, TokenRefused, TokenSet};

/// The settings the access control starts from.
#[derive(Clone, Debug, Default)]
pub struct AccessConfig {
    /// `--roles FILE`.
    pub roles_file: Option<PathBuf>,
    /// `--admin-token`: an identity of the role `admin`.
    pub admin_token: Option<Secret>,
    /// Wrong tokens per client address per `login_window` (0: no bound).
    pub login_limit: u32,
    pub login_window: Duration,
}

/// The roles in force and the token check, one per process.
#[derive(Debug)]
pub struct Control {
    config: AccessConfig,
    current: RwLock<Arc<Roles>>,
    /// Bumped by every reload that took.
    generation: AtomicU64,
    gate: Arc<TokenGate>,
}

impl Control {
    /// Read the roles file (if any); an error stops the start.
    pub fn new(config: AccessConfig) -> Result<Arc<Control>, RolesError> {
        let roles = Self::read(&config)?;
        Ok(Arc::new(Control {
            gate: TokenGate::new(config.login_limit, config.login_window),
            current: RwLock::new(Arc::new(roles)),
            generation: AtomicU64::new(0),
            config,
        }))
    }

    /// No roles file, no token: everything open, as without any option.
    pub fn open() -> Arc<Control> {
        Arc::new(Control {
            gate: TokenGate::new(DEFAULT_PER_PEER, DEFAULT_WINDOW),
            current: RwLock::new(Arc::new(Roles::builtin(None))),
            generation: AtomicU64::new(0),
            config: AccessConfig::default(),
        })
    }

    fn read(config: &AccessConfig) -> Result<Roles, RolesError> {
        match &config.roles_file {
            Some(path) => Roles::load(path, config.admin_token.as_ref()),
            None => Ok(Roles::builtin(config.admin_token.as_ref())),
        }
    }

    pub fn config(&self) -> &AccessConfig {
        &self.config
    }

    /// The roles in force.
    pub fn roles(&self) -> Arc<Roles> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Read the roles file again; on any error the roles in force stay (the caller
    /// logs why). Without a file there is nothing to read.
    pub fn reload(&self) -> Result<bool, RolesError> {
        if self.config.roles_file.is_none() {
            return Ok(false);
        }
        let roles = Self::read(&self.config)?;
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(roles);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(true)
    }

    /// The guessing bound's gate (for the HTTP API's forwarded tokens).
    pub fn gate(&self) -> &TokenGate {
        &self.gate
    }

    /// The identity `given`, sent from `peer`, is a token of; with its grant for a
    /// beanstalk connection.
    pub fn check_token(&self, peer: IpAddr, given: &[u8]) -> Result<Grant, TokenRefused> {
        let generation = self.generation();
        let roles = self.roles();
        let entry = self.gate.check(roles.tokens(), peer, given)?;
        Ok(Grant::new(
            IdentityKey::Token(*entry.secret.digest()),
            entry.value.clone(),
            generation,
        ))
    }

    /// The grant of an identity found by `key` (a certificate's names, a listener's
    /// role), if the roles name it.
    pub fn grant(&self, key: IdentityKey) -> Option<Grant> {
        let generation = self.generation();
        let identity = key.resolve(&self.roles())?;
        Some(Grant::new(key, identity, generation))
    }
}
