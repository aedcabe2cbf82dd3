//! The Redis options of both modes: where Redis is (`--redis`, its TLS files and the
//! sentinels' password), the prefix of every key, and how many replicas a change waits
//! for; and what the connectors made from them share ([`Lookups`]).
//!
//! Invariants: the options are never shown with their credentials (see the `Debug`
//! impl); a process reads its options once, so every connector it makes from them (and
//! their clones) shares one [`Lookups`].

use std::time::Duration;

use super::error::CallError;
use super::target::{Lookups, Target};
use super::{Connector, TlsFiles, redact};

/// Where and under which prefix to keep jobs, and how to reach Redis.
#[derive(Clone, Default)]
pub struct RedisConfig {
    /// `redis://`, `rediss://`, `redis+sentinel://` or `redis+cluster://` (see
    /// [`super::target`]).
    pub url: String,
    pub prefix: String,
    pub tls: TlsFiles,
    /// The sentinels' own password (the URL's is the data nodes').
    pub sentinel_password: Option<String>,
    /// Acknowledge a change only once this many replicas have it (Redis WAIT); 0: do
    /// not wait.
    pub wait_replicas: u32,
    pub wait_timeout: Duration,
    /// In leader mode, the lease: a Redis Cluster primary's `cluster-node-timeout` is
    /// checked against it.
    pub leader_lease: Option<Duration>,
    /// What every connector made from these options shares (where the namespace was
    /// found, for `/metrics`; a cluster's last answer).
    pub lookups: Lookups,
}

impl RedisConfig {
    /// The connector for these options; an error says which option is wrong.
    pub fn connector(&self) -> Result<Connector, CallError> {
        let target = Target::new(
            &self.url,
            &self.tls,
            self.sentinel_password.as_deref(),
            &self.prefix,
            &self.lookups,
        )
        .map_err(CallError::connect)?;
        Ok(Connector::to(match self.leader_lease {
            Some(lease) => target.with_leader_lease(lease),
            None => target,
        }))
    }
}

/// Never shows credentials: the URL redacted, the sentinel password hidden.
impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("tls", &self.tls)
            .field(
                "sentinel_password",
                &self.sentinel_password.as_ref().map(|_| "***"),
            )
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .field("leader_lease", &self.leader_lease)
            .finish()
    }
}
