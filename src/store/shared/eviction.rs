//! The shared mode's checks of Redis' eviction policy (`crate::redis::policy`), and of
//! its replicas with `--redis-wait-replicas`: once at start, on the store's own
//! connection, then every [`CHECK_EVERY`], riding on the heartbeat.
//!
//! Ownership: the periodic check's state is process-wide (one store per process):
//! whether eviction is allowed (set at start) and when the next check is due.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::RedisStore;
use crate::redis::policy::{CHECK_EVERY, PolicyError, check, check_replicas, recheck};
use crate::store::Nanos;

static ALLOWED: AtomicBool = AtomicBool::new(false);
static NEXT_CHECK: AtomicU64 = AtomicU64::new(0);

impl RedisStore {
    /// The start check on the store's own connection (see [`check`]); `allow` holds
    /// for the periodic checks too.
    pub async fn check_eviction_policy(&self, allow: bool) -> Result<(), PolicyError> {
        ALLOWED.store(allow, Ordering::SeqCst);
        check(&mut self.run.conn(), allow).await?;
        check_replicas(&mut self.run.conn(), self.run.wait_replicas()).await;
        NEXT_CHECK.store(
            self.clock.now() + CHECK_EVERY.as_nanos() as u64,
            Ordering::SeqCst,
        );
        Ok(())
    }

    /// The periodic check (from the heartbeat): a policy that evicts is reported on
    /// every check, as an error (refused at start) or a warning (allowed).
    pub(super) async fn recheck_eviction_policy(&self, now: Nanos) {
        let next = NEXT_CHECK.load(Ordering::SeqCst);
        if now < next {
            return;
        }
        NEXT_CHECK.store(now + CHECK_EVERY.as_nanos() as u64, Ordering::SeqCst);
        recheck(&mut self.run.conn(), ALLOWED.load(Ordering::SeqCst)).await;
        check_replicas(&mut self.run.conn(), self.run.wait_replicas()).await;
    }
}
