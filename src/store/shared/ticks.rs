//! The Redis store's tick: what is due (delayed jobs, lapsed reservations, ended
//! pauses), a tube at a time in bounded calls, then undoing lost reserve attempts, the
//! sweep of ended dedupe windows, the expiry of retained records past their age (while
//! retention is on, `retained.rs`) and the heartbeat, so none delays a timer.
//!
//! The window sweep (`windows.lua`, at most every [`WINDOW_SWEEP_EVERY`], one call of
//! at most [`SCRIPT_CHUNK`] windows) is what ends a window when no delete comes to end
//! it: a lookup of its key treats it as gone from its end, but it holds its members in
//! Redis until something removes it. It runs sooner while a call finds a full chunk.
//!
//! The sweep of large bodies written ahead (`ahead.lua`, at most every
//! [`AHEAD_SWEEP_EVERY`], [`AHEAD_CHUNK`] a call) removes those whose job was never
//! made (large.rs): nothing else names them.
//!
//! Invariants: a tube whose data is damaged never stops the others: a job without meta
//! is dropped and reported by the script, a tube whose script still fails is set aside
//! for [`SET_ASIDE`] (its due entry moved) and reported; any other failure (Redis away
//! or refusing writes) fails the tick, which the timer retries with a backoff.

use std::sync::Mutex;
use std::time::Duration;

use super::RedisStore;
use super::SCRIPT_CHUNK;
use super::large::AHEAD_STALE_MS;
use super::policy_args;
use crate::protocol::TubeName;
use crate::redis::keys::NsKey;
use crate::redis::{Code, US};
use crate::store::{Nanos, StoreError, StoreResult};
use crate::util::lock;

/// How long a tube whose timers fail is set aside before its next try.
const SET_ASIDE: Duration = Duration::from_secs(10);

/// How often the ended dedupe windows are swept, while a sweep leaves none behind:
/// a window past its end already reads as gone, so the sweep only frees its memory
/// and need not cost a call on every tick.
const WINDOW_SWEEP_EVERY: Duration = Duration::from_secs(1);

/// How often the bodies written ahead are swept, while a sweep leaves none behind: one
/// is removed only once [`AHEAD_STALE_MS`] old, and a large put whose job was never
/// made is rare.
const AHEAD_SWEEP_EVERY: Duration = Duration::from_secs(10);

/// The most bodies written ahead one sweep looks at (each may be large to free).
const AHEAD_CHUNK: u32 = 100;

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
            .map_err(|e| StoreError::redis("ZRANGEBYSCORE due", e))?;
        for name in due {
            let Some(tube) = TubeName::new(&name) else {
                continue;
            };
            match self.tick_tube(&tube).await {
                Ok(true) => woken.push(tube),
                Ok(false) => {}
                // A tube whose script fails (its data damaged beyond what the script
                // mends) is set aside for a while; the other tubes keep their timing.
                Err(err @ StoreError::NotApplied { .. }) if is_script_error(&err) => {
                    self.set_aside(&tube, &err).await?;
                }
                Err(err) => return Err(err),
            }
        }
        let beat = self.heartbeat(now).await;
        if let Err(err) = self.reclaim_lost(&mut woken).await {
            tracing::debug!(%err, "undoing lost reserve attempts failed; the next tick retries");
        }
        if let Err(err) = self.sweep_windows(now).await {
            tracing::debug!(%err, "sweeping ended dedupe windows failed; the next tick retries");
        }
        if let Err(err) = self.sweep_ahead(now).await {
            tracing::debug!(%err, "sweeping bodies written ahead failed; the next tick retries");
        }
        if let Err(err) = self.expire_retained().await {
            tracing::debug!(%err, "expiring retained records failed; the next tick retries");
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
        // The tube's rule: a lapsed reservation may be a dead letter.
        let rule = policy_args::rule(&self.policies(), tube.as_str());
        loop {
            let step = self
                .run
                .on_tube(|s| &s.tick, &[], tube.as_str())
                .arg(SCRIPT_CHUNK)
                .arg(&rule)
                .arg(self.ret_arg0())
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

    /// End the dedupe windows past their end (and any over `--key-windows-max`), one
    /// bounded call, when [`WINDOW_SWEEP_EVERY`] has passed since the last sweep or
    /// that one found a full chunk (more may be waiting).
    async fn sweep_windows(&self, now: Nanos) -> StoreResult<()> {
        if !sweep_due(&self.next_window_sweep, now, WINDOW_SWEEP_EVERY) {
            return Ok(());
        }
        let ended = self
            .run
            .call(|s| &s.windows, &[], &[] as &[&str])
            .arg(self.windows_max())
            .arg(SCRIPT_CHUNK)
            .run()
            .await?;
        if ended >= u64::from(SCRIPT_CHUNK) {
            *lock(&self.next_window_sweep) = now;
        }
        Ok(())
    }

    /// Remove the large bodies written ahead of jobs never made ([`AHEAD_STALE_MS`]
    /// old), one bounded call, when [`AHEAD_SWEEP_EVERY`] has passed since the last
    /// sweep or that one found a full chunk.
    async fn sweep_ahead(&self, now: Nanos) -> StoreResult<()> {
        if !sweep_due(&self.next_ahead_sweep, now, AHEAD_SWEEP_EVERY) {
            return Ok(());
        }
        let swept = self
            .run
            .call(|s| &s.ahead, &[], &[] as &[&str])
            .arg(AHEAD_STALE_MS)
            .arg(AHEAD_CHUNK)
            .run()
            .await?;
        let (seen, dropped) = match swept[..] {
            [seen, dropped] => (seen, dropped),
            _ => return Err(StoreError::bad_reply("ahead", format!("{swept:?}"))),
        };
        if dropped > 0 {
            tracing::warn!(
                bodies = dropped,
                "removed large bodies written ahead of puts that never made their job \
                 (the put failed, or its instance stopped in between)"
            );
        }
        if seen >= u64::from(AHEAD_CHUNK) {
            *lock(&self.next_ahead_sweep) = now;
        }
        Ok(())
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
            .map_err(|e| StoreError::redis("ZADD due", e))
    }
}

/// Whether `err` (a call refused, nothing applied) is an error reply to the script, by
/// its code: a script that failed as it ran (a Lua error, a key of the wrong type), not
/// Redis refusing every call for a while (READONLY, OOM, NOSCRIPT, LOADING, MASTERDOWN,
/// BUSY, NOAUTH, NOPERM: see [`Code::refuses_every_call`]) nor a connection that could
/// not be made (no error reply at all).
fn is_script_error(err: &StoreError) -> bool {
    Code::found_in(err).is_some_and(|code| !code.refuses_every_call())
}

/// Whether a sweep whose next time is `next` is due at `now`; if so, its next time is
/// `every` later (a sweep that finds a full chunk sets it back to `now` itself).
fn sweep_due(next: &Mutex<Nanos>, now: Nanos, every: Duration) -> bool {
    let mut next = lock(next);
    if now < *next {
        return false;
    }
    *next = now + every.as_nanos() as u64;
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::error::error_reply;

    /// A tube whose script fails as it runs is set aside; Redis refusing every call
    /// is not (the tick fails, and the timer retries). Told by the reply's code: the
    /// words of a Lua error (which name fields, values, keys) decide nothing.
    #[test]
    fn a_script_error_is_known_by_its_code_not_its_words() {
        for (reply, set_aside) in [
            (
                "ERR user_script:9: attempt to compare nil with number script: 8f2c, on @user_script:9.",
                true,
            ),
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value script: 8f2c",
                true,
            ),
            // A Lua error whose words happen to contain a refusal's name.
            (
                "ERR user_script:12: bad argument to 'tonumber' (value 'room') script: 8f2c",
                true,
            ),
            (
                "ERR user_script:4: the busy tube's meta is not a table script: 8f2c",
                true,
            ),
            ("BUSY Redis is busy running a script.", false),
            (
                "READONLY You can't write against a read only replica. script: 8f2c",
                false,
            ),
            (
                "OOM command not allowed when used memory > 'maxmemory'. script: 8f2c",
                false,
            ),
            ("NOSCRIPT No matching script. Please use EVAL.", false),
            ("LOADING Redis is loading the dataset in memory", false),
            ("MASTERDOWN Link with MASTER is down", false),
        ] {
            let err = StoreError::redis("tick", error_reply(reply));
            eprintln!("{reply:?}: set aside {}", is_script_error(&err));
            assert_eq!(is_script_error(&err), set_aside, "{reply}");
        }
        let refused: redis::RedisError =
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        assert!(!is_script_error(&StoreError::redis("tick", refused)));
    }
}
