//! The Redis store's tick: what is due (delayed jobs, lapsed reservations, ended
//! pauses), a tube at a time in bounded calls, then undoing lost reserve attempts and
//! the heartbeat, so neither delays a timer.
//!
//! Invariants: a tube whose data is damaged never stops the others: a job without meta
//! is dropped and reported by the script, a tube whose script still fails is set aside
//! for [`SET_ASIDE`] (its due entry moved) and reported; any other failure (Redis away
//! or refusing writes) fails the tick, which the timer retries with a backoff.

use std::time::Duration;

use super::RedisStore;
use super::SCRIPT_CHUNK;
use super::keys::NsKey;
use super::reply::{US, redis_error};
use crate::protocol::TubeName;
use crate::store::{Nanos, StoreError, StoreResult};

/// How long a tube whose timers fail is set aside before its next try.
const SET_ASIDE: Duration = Duration::from_secs(10);

impl RedisStore {
    /// A tick of the timer (see [`crate::store::Store::tick`]).
    pub(super) async fn run_tick(&self, now: Nanos) -> StoreResult<Vec<TubeName>> {
        // A namespace found gone by a command since the last tick: start afresh before
        // anything else (see namespace.rs).
        self.start_fresh_if_lost().await?;
        // Due work first, so neither a heartbeat nor undoing lost reserves delays a
        // timer; their failures are reported once the due work is done.
        let mut woken = Vec::new();
        let due: Vec<Vec<u8>> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.run.keys().ns(NsKey::Due))
            .arg("-inf")
            .arg(now / US)
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| redis_error("ZRANGEBYSCORE due", e))?;
        for name in due {
            let Some(tube) = TubeName::new(&name) else {
                continue;
            };
            match self.tick_tube(&tube).await {
                Ok(true) => woken.push(tube),
                Ok(false) => {}
                // A tube whose script fails (its data damaged beyond what the script
                // mends) is set aside for a while; the other tubes keep their timing.
                Err(err @ StoreError::NotApplied { .. }) if self.is_script_error(&err) => {
                    self.set_aside(&tube, &err).await?;
                }
                Err(err) => return Err(err),
            }
        }
        let beat = self.heartbeat(now).await;
        if let Err(err) = self.reclaim_lost(&mut woken).await {
            tracing::debug!(%err, "undoing lost reserve attempts failed; the next tick retries");
        }
        // The heartbeat may have found the namespace gone (an instance with nothing to
        // do notices within a heartbeat).
        self.start_fresh_if_lost().await?;
        match beat {
            Err(err) if woken.is_empty() => Err(err),
            Err(err) => {
                tracing::debug!(%err, "heartbeat failed; the next tick retries");
                Ok(woken)
            }
            Ok(()) => Ok(woken),
        }
    }

    /// Everything due in `tube`, a chunk per call; whether a job may now be reserved.
    /// Jobs found damaged (their meta missing) were dropped by the script: reported.
    async fn tick_tube(&self, tube: &TubeName) -> StoreResult<bool> {
        let mut woke = false;
        loop {
            let step = self
                .run
                .on_tube(|s| &s.tick, &[], tube.as_str())
                .arg(SCRIPT_CHUNK)
                .run()
                .await?;
            if step.damaged > 0 {
                tracing::error!(
                    tube = tube.as_str(),
                    jobs = step.damaged,
                    "damaged jobs (their data is missing in Redis: evicted or deleted) \
                     dropped from the tube's timers"
                );
            }
            woke |= step.woke;
            if !step.more {
                return Ok(woke);
            }
        }
    }

    /// Whether `err` is a script that Redis ran and that failed (a Lua error), rather
    /// than Redis refusing every write (READONLY, OOM) or being away.
    fn is_script_error(&self, err: &StoreError) -> bool {
        let text = err.chain().to_ascii_lowercase();
        let refused = [
            "readonly",
            "oom",
            "noscript",
            "loading",
            "masterdown",
            "busy",
        ];
        text.contains("script") && !refused.iter().any(|r| text.contains(r))
    }

    /// Move `tube`'s due time [`SET_ASIDE`] ahead: its tick failed with `err`.
    async fn set_aside(&self, tube: &TubeName, err: &StoreError) -> StoreResult<()> {
        tracing::error!(
            tube = tube.as_str(),
            error = %err.chain(),
            "a tube's timers fail (its data in Redis is damaged); retried in {} s, \
             the other tubes go on",
            SET_ASIDE.as_secs()
        );
        let at = self.clock.now() / US + SET_ASIDE.as_micros() as u64;
        redis::cmd("ZADD")
            .arg(self.run.keys().ns(NsKey::Due))
            .arg("XX")
            .arg(at)
            .arg(tube.as_str())
            .query_async::<()>(&mut self.run.conn())
            .await
            .map_err(|e| redis_error("ZADD due", e))
    }
}
