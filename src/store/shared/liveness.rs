//! Instance liveness: each instance says it is alive (a heartbeat in `{P}:instances`),
//! and drops the tube references of instances that stopped saying so.
//!
//! An instance that misses its heartbeats for [`HEARTBEAT_LAPSES`] is taken for dead:
//! it crashed, so its connections are gone, and any instance may drop its references
//! (the `reap` script, atomically with the check that it is still dead, so one that
//! comes back is never reaped). If it was only stalled, it finds at its next heartbeat
//! that it had to register again, and restores its references.
//!
//! Ownership: `next_heartbeat` belongs to the store; its lock is never held across an
//! `.await`. Heartbeats ride on the timer's ticks.

use std::time::Duration;

use super::RedisStore;
use super::decode::Reaped;
use crate::redis::US;
use crate::redis::keys::NsKey;
use crate::store::{Nanos, StoreError, StoreResult};
use crate::util::lock;

/// How often an instance says it is alive, and how long until it counts as dead.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
const HEARTBEAT_LAPSES: Duration = Duration::from_secs(10);

/// How many times a reap is tried when the dead instance's references change under it.
const REAP_ATTEMPTS: usize = 3;

impl RedisStore {
    /// Say this instance is alive (at most every [`HEARTBEAT_EVERY`]), and drop the
    /// references of instances that stopped saying so. If this instance was itself
    /// taken for dead, its references were dropped: it restores them.
    pub(super) async fn heartbeat(&self, now: Nanos) -> StoreResult<()> {
        let first = {
            let mut next = lock(&self.next_heartbeat);
            if now < *next {
                return Ok(());
            }
            let first = *next == 0;
            *next = now + HEARTBEAT_EVERY.as_nanos() as u64;
            first
        };
        let registry = self.run.keys().instances();
        let lapses_us = (now + HEARTBEAT_LAPSES.as_nanos() as u64) / US;
        let generation = self.run.namespace().current();
        let (added, dead, found): (i64, Vec<String>, Option<String>) = redis::pipe()
            .cmd("ZADD")
            .arg(&registry)
            .arg(lapses_us)
            .arg(&self.instance)
            .cmd("ZRANGEBYSCORE")
            .arg(&registry)
            .arg("-inf")
            .arg(now / US)
            .cmd("GET")
            .arg(self.run.keys().ns(NsKey::Generation))
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("heartbeat", e))?;
        if !self
            .run
            .namespace()
            .still_ours(&generation, found.as_deref())
        {
            // Redis lost the namespace (restarted empty, flushed): the tick that
            // called this starts afresh.
            return Ok(());
        }
        if added == 1 && !first {
            tracing::warn!(
                instance = %self.instance,
                "this instance was taken for dead (it stalled); restoring its tube references"
            );
            self.refs.restore();
        }
        self.refs.sync_if_dirty();
        self.recheck_eviction_policy(now).await;
        for instance in dead {
            if instance != self.instance {
                self.reap(&instance).await?;
            }
        }
        Ok(())
    }

    /// Drop a dead instance's tube references (one atomic script; retried if the
    /// instance gained references between reading them and the script).
    async fn reap(&self, instance: &str) -> StoreResult<()> {
        let refs_key = self.run.keys().refs(instance);
        let registry = self.run.keys().instances();
        for _ in 0..REAP_ATTEMPTS {
            let fields: Vec<String> = redis::cmd("HKEYS")
                .arg(&refs_key)
                .query_async(&mut self.run.conn())
                .await
                .map_err(|e| StoreError::redis("HKEYS refs", e))?;
            let mut tubes: Vec<&str> = fields
                .iter()
                .filter_map(|f| f.split_once(':').map(|(_, t)| t))
                .collect();
            tubes.sort_unstable();
            tubes.dedup();
            let outcome = self
                .run
                .call(|s| &s.reap, &[&registry, &refs_key], &tubes)
                .arg(instance)
                .arg(&tubes)
                .run()
                .await?;
            match outcome {
                Reaped::Dropped => {
                    tracing::info!(
                        instance,
                        "dropped the tube references of an instance that stopped"
                    );
                    return Ok(());
                }
                Reaped::Alive => return Ok(()),
                Reaped::Retry => continue,
            }
        }
        Ok(())
    }
}
