//! Redis' eviction policy: redstalk's data must never be evicted (an evicted job is
//! lost silently, or half of it: a job without its body). At start, and every
//! [`CHECK_EVERY`] after, a `maxmemory-policy` other than `noeviction` is refused, or,
//! with `--redis-allow-eviction`, warned about on every check.
//!
//! [`check`] takes any connection, so leader mode (which loads with its own) can make
//! the same start check. A Redis that does not let us read its configuration (CONFIG
//! renamed or forbidden by a managed service) is warned about, not refused.
//!
//! Ownership: the periodic check's state is process-wide (one store per process):
//! whether eviction is allowed (set at start) and when the next check is due.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;

use super::RedisStore;
use super::reply::redis_error;
use crate::store::{Nanos, StoreError};

/// How often a running instance reads the policy again.
pub const CHECK_EVERY: Duration = Duration::from_secs(30);

/// The one policy under which Redis never drops a key.
const SAFE: &str = "noeviction";

static ALLOWED: AtomicBool = AtomicBool::new(false);
static NEXT_CHECK: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "Redis may evict redstalk's keys (maxmemory-policy is {0}): acknowledged jobs \
         would vanish. Set `maxmemory-policy noeviction` in Redis (CONFIG SET \
         maxmemory-policy noeviction, and in redis.conf), or start with \
         --redis-allow-eviction to run anyway"
    )]
    Evicting(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Redis' `maxmemory-policy`; `None` when Redis does not let us read it.
async fn read_policy<C: ConnectionLike>(conn: &mut C) -> Result<Option<String>, StoreError> {
    // A map in RESP3, a flat [name, value] array in RESP2: read as a map either way.
    let reply: redis::RedisResult<std::collections::HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    match reply {
        Ok(mut map) => Ok(map.remove("maxmemory-policy")),
        // An error reply: CONFIG is renamed, forbidden or unknown here.
        Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => Ok(None),
        Err(e) => Err(redis_error("CONFIG GET maxmemory-policy", e)),
    }
}

/// Check the policy once: `Err` when Redis may evict and `allow` is false; with
/// `allow`, a warning instead. Also records `allow` for the periodic checks.
pub async fn check<C: ConnectionLike>(conn: &mut C, allow: bool) -> Result<(), PolicyError> {
    ALLOWED.store(allow, Ordering::SeqCst);
    match read_policy(conn).await? {
        None => {
            tracing::warn!(
                "cannot read Redis' maxmemory-policy (CONFIG GET refused); make sure it is \
                 noeviction, or acknowledged jobs may vanish"
            );
            Ok(())
        }
        Some(p) if p == SAFE => Ok(()),
        Some(p) if allow => {
            tracing::warn!(policy = %p, "{}", PolicyError::Evicting(p.clone()));
            Ok(())
        }
        Some(p) => Err(PolicyError::Evicting(p)),
    }
}

impl RedisStore {
    /// The start check on the store's own connection (see [`check`]).
    pub async fn check_eviction_policy(&self, allow: bool) -> Result<(), PolicyError> {
        check(&mut self.run.conn(), allow).await?;
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
    }
}

/// One periodic check (both modes): a policy that evicts is reported, as an error (it
/// was refused at start) or, with `allow`, a warning; a failed read waits for the next.
pub async fn recheck<C: ConnectionLike>(conn: &mut C, allow: bool) {
    match check(conn, allow).await {
        Ok(()) => {}
        Err(PolicyError::Evicting(p)) => {
            tracing::error!(policy = %p, "{}", PolicyError::Evicting(p.clone()));
        }
        Err(PolicyError::Store(err)) => {
            tracing::debug!(%err, "could not read Redis' maxmemory-policy; next check later");
        }
    }
}
