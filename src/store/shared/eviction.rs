//! The shared mode's checks of Redis' eviction policy (`crate::redis::policy`), and of
//! its replicas with `--redis-wait-replicas`: once at start, on the store's own
//! connection, then every [`CHECK_EVERY`], riding on the heartbeat.
//!
//! Ownership: the periodic check's state ([`EvictionChecks`]: whether eviction is
//! allowed, set at start, and when the next check is due) is the store's own; several
//! stores in one process (the contract tests) check each its own Redis.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::RedisStore;
use crate::redis::policy::{CHECK_EVERY, PolicyError, check, check_replicas, recheck};
use crate::store::Nanos;

/// The state of a store's eviction checks.
#[derive(Debug, Default)]
pub(super) struct EvictionChecks {
    /// `--redis-allow-eviction`: an evicting policy is a warning, not a refusal.
    allowed: AtomicBool,
    /// When the next periodic check is due (0: before the start check).
    next: AtomicU64,
}

impl RedisStore {
    /// The start check on the store's own connection (see [`check`]); `allow` holds
    /// for the periodic checks too.
    pub async fn check_eviction_policy(&self, allow: bool) -> Result<(), PolicyError> {
        let checks = &self.eviction;
        checks.allowed.store(allow, Ordering::SeqCst);
        check(&mut self.run.conn(), allow).await?;
        check_replicas(&mut self.run.conn(), self.run.wait_replicas()).await;
        checks.next.store(
            self.clock.now() + CHECK_EVERY.as_nanos() as u64,
            Ordering::SeqCst,
        );
        Ok(())
    }

    /// The periodic check (from the heartbeat): a policy that evicts is reported on
    /// every check, as an error (refused at start) or a warning (allowed).
    pub(super) async fn recheck_eviction_policy(&self, now: Nanos) {
        let checks = &self.eviction;
        if now < checks.next.load(Ordering::SeqCst) {
            return;
        }
        checks
            .next
            .store(now + CHECK_EVERY.as_nanos() as u64, Ordering::SeqCst);
        recheck(&mut self.run.conn(), checks.allowed.load(Ordering::SeqCst)).await;
        check_replicas(&mut self.run.conn(), self.run.wait_replicas()).await;
    }
}
