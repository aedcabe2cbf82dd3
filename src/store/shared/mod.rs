//! The shared mode's store ([`RedisStore`]): jobs in per-tube sorted sets, each job a
//! hash of its own, shared by every redstalk instance that uses the same Redis and
//! prefix, and kept across restarts. What leader mode uses too (connections, the key
//! schema, fenced transactions, the eviction check, error classification) is
//! `crate::redis`'s.
//!
//! Every state change is one Lua script (`lua/`), called as a Redis Function (by
//! EVALSHA on a Redis without them) over a shared multiplexed connection (concurrent
//! calls are pipelined; puts, reserves and deletes made while 4 are in flight go
//! together as one call of `many.lua`, each run as its own script:
//! `scripts/combine.rs`), touching only the keys it is given. Times come from
//! Redis `TIME`, so instances with skewed clocks agree.
//! Scripts that make a job ready publish the tube on the wake-up channel when another
//! instance listens; every instance subscribes and serves its waiting connections (an
//! instance serves its own waiters after its own commands, so it skips its own
//! messages). A script whose work grows with the data (tick, kick, reclaim) does at
//! most [`SCRIPT_CHUNK`] jobs a call, and is called again while it reports more.
//!
//! Module map:
//! - `scripts`: the scripts, each with its reply type, and [`scripts::Runner`], the one
//!   way to call them (shared by the store and the reference keeper), which combines
//!   the hot calls made at once (`scripts/combine.rs`); the KEYS layout is
//!   `crate::redis::keys`'.
//! - `shake`: each script's prelude cut to the definitions its body uses.
//! - `decode`: typed reading of each reply ([`decode::Decode`]).
//! - `connect`: connecting (commands and the wake-up subscription on connections of
//!   their own), loading the scripts.
//! - `store_impl`: [`Store`](crate::store::Store) for [`RedisStore`], the transitions.
//! - `close`: a connection's end (its held jobs back, its references dropped) and the
//!   give-back of one job.
//! - `admin`: the operator API's listing, job entry and changes in place.
//! - `large`: puts of large bodies, whose bodies stay out of Lua.
//! - `held`: the reservations this instance's connections hold.
//! - `schedules`: a schedule's tick (its cursor check, job and advance in one script),
//!   skips, and the cursors' hash.
//! - `policy_args`: the tubes' dead letter and backoff rules as the scripts take them
//!   where a reservation ends (release, a list release, a lapsed TTR, a close).
//! - `retained`: retention's argument to the scripts, and the reads of the retained
//!   set they keep (records of deleted jobs; store/retention.rs).
//! - `reclaim`: owner tokens of reserve attempts, and undoing those whose answer was lost.
//! - `refs`: this instance's tube references and the task that keeps them in Redis.
//! - `ticks`: the timer's tick: due work a tube at a time, damaged tubes set aside,
//!   the sweep of ended dedupe windows.
//! - `totals`: the server's `stats` figures, summed over the tubes' sets in bounded
//!   pipelines.
//! - `liveness`: the heartbeat, and dropping the references of dead instances.
//! - `eviction`: the eviction policy check (`crate::redis::policy`) at start and on
//!   the heartbeat.
//! - `namespace`: the namespace's generation, and noticing that Redis lost it.
//! - `fresh`: joining the namespace at connect; starting afresh when Redis lost it.
//!
//! Ownership: Redis owns the jobs. This store owns only its view of its connections'
//! reservations (`held`), its reference counts (`refs`), the tokens of reserve attempts
//! whose answer was lost (`reclaim`), and when its checks and sweeps are due
//! (`liveness`, `eviction`, `ticks`): nothing is process-wide, so several stores may
//! share a process.

mod admin;
mod batch;
mod close;
mod connect;
mod decode;
mod eviction;
mod fresh;
mod held;
mod keys;
mod large;
mod liveness;
mod namespace;
mod policy_args;
mod reclaim;
mod refs;
mod retained;
mod schedules;
mod scripts;
mod shake;
mod store_impl;
mod ticks;
mod totals;

use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::protocol::TubeName;
use crate::redis::keys::JOB_TUBE;
use crate::redis::{Connector, US};
use crate::store::{ConnId, JobId, Nanos, Reserved, StoreError, StoreResult};
use crate::time::Clock;
use decode::{Decode, Reservation};
use eviction::EvictionChecks;
use held::{Held, HeldJobs};
use reclaim::Attempts;
use refs::References;
use scripts::{Call, Lua, Runner, Scripts};

/// The most jobs one call of a script moves or looks at (tick, kick, reclaim), so no
/// call blocks Redis for long; the caller calls again while there is more.
pub const SCRIPT_CHUNK: u32 = 1000;

pub struct RedisStore {
    run: Runner,
    /// Makes the connection of each large put's body (see `large::put_large`).
    connector: Connector,
    /// This process's id in owner strings and in the instance registry.
    instance: String,
    clock: Clock,
    held: HeldJobs,
    attempts: Attempts,
    refs: References,
    wake: Mutex<Option<mpsc::UnboundedReceiver<TubeName>>>,
    next_heartbeat: Mutex<Nanos>,
    /// When the tick next sweeps the ended dedupe windows (ticks.rs).
    next_window_sweep: Mutex<Nanos>,
    /// When the tick next sweeps the large bodies written ahead of jobs never made
    /// (ticks.rs, large.rs).
    next_ahead_sweep: Mutex<Nanos>,
    eviction: EvictionChecks,
    /// `--key-windows-max`, handed to the scripts that may open a dedupe window.
    windows_max: std::sync::atomic::AtomicU64,
    /// The tubes' dead letter and backoff rules, handed to the scripts where a
    /// reservation ends (set by the engine; the lock is held only to clone the `Arc`).
    policies: Mutex<std::sync::Arc<crate::store::Policies>>,
    /// What to retain of deleted jobs (`--retain*`, set by the engine), handed to the
    /// scripts (retained.rs); `retention_on` lets the hot paths skip the lock.
    retention: Mutex<crate::store::retention::RetentionLimits>,
    retention_on: std::sync::atomic::AtomicBool,
    /// A fresh start found the namespace in a later key layout (fresh.rs): said once.
    layout_refused: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A time `at_us` of the Redis clock, read by a script at `now_us`, on this
    /// process's clock: as far after our now as it was after the script's. Reservation
    /// deadlines are kept this way so that the DEADLINE_SOON margin is never decided
    /// by a skew between the two clocks (the reply arrives after the script ran, so the
    /// local deadline is never earlier than Redis').
    fn local_time(&self, at_us: u64, now_us: u64) -> Nanos {
        self.clock.now() + at_us.saturating_sub(now_us) * US
    }

    /// The tubes of jobs `ids` (`None` for an id that names no job), in one round trip
    /// (the field [`JOB_TUBE`] of each job's hash, pipelined), for scripts to act on:
    /// the lookup may have read a fresh namespace, and an id of the old one must not act
    /// there (see namespace.rs). The one place outside a script that reads where a job
    /// is from its id alone (docs/REDIS.md; the scripts called by
    /// [`RedisStore::on_job`] find it themselves); a script given the tube checks it again
    /// (`get_job` in the prelude: the job may have moved since). A large body written
    /// ahead of its job has no tube yet: no job.
    pub(super) async fn tubes_of(&self, ids: &[JobId]) -> StoreResult<Vec<Option<TubeName>>> {
        let generation = self.run.namespace().current();
        let keys = self.run.keys();
        let mut pipe = redis::pipe();
        for &id in ids {
            pipe.hget(keys.job(id), JOB_TUBE);
        }
        let names: Vec<Option<Vec<u8>>> = pipe
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("HGET job tube", e))?;
        if self.run.namespace().current() != generation {
            return Err(StoreError::NamespaceLost { op: "job lookup" });
        }
        Ok(names
            .into_iter()
            .map(|n| n.as_deref().and_then(TubeName::new))
            .collect())
    }

    /// The tube of job `id` ([`RedisStore::tubes_of`]).
    async fn job_tube(&self, id: JobId) -> StoreResult<Option<TubeName>> {
        Ok(self.tubes_of(&[id]).await?.pop().flatten())
    }

    /// A call of the single-tube script `pick` on the tube of job `id` (found by
    /// [`RedisStore::tubes_of`]), with the id as its first argument; `None` when there is
    /// no such job. Two round trips: for a caller that needs the tube before the call
    /// (`reserve-job` records its attempt by tube, so a lost answer can be undone);
    /// others find it inside their script ([`RedisStore::on_job`]).
    async fn job_call<R: Decode + 'static>(
        &self,
        pick: impl FnOnce(&Scripts) -> &Lua<R>,
        id: JobId,
    ) -> StoreResult<Option<(TubeName, Call<'_, R>)>> {
        let Some(tube) = self.job_tube(id).await? else {
            return Ok(None);
        };
        let mut call = self.run.on_tube(pick, &[], tube.as_str());
        call.arg(id);
        Ok(Some((tube, call)))
    }

    /// A call of the script `pick` on job `id` found by its id alone (`find_job` in the
    /// prelude; a script that changes the job names its tube's keys with
    /// `tube_group_of`): the namespace's keys only, the id its first argument. One
    /// round trip, where [`RedisStore::job_call`] takes two.
    fn on_job<R: 'static>(&self, pick: impl FnOnce(&Scripts) -> &Lua<R>, id: JobId) -> Call<'_, R> {
        let mut call = self.run.call(pick, &[], &[] as &[&str]);
        call.arg(id);
        call
    }

    /// A call of the single-tube script `pick` on a job `conn` holds, with the id and
    /// the reservation's owner token as its first arguments; `None` when `conn` holds
    /// no such job.
    fn held_call<R: Decode + 'static>(
        &self,
        pick: impl FnOnce(&Scripts) -> &Lua<R>,
        conn: ConnId,
        id: JobId,
    ) -> Option<(Held, Call<'_, R>)> {
        let held = self.held.get(conn, id)?;
        let mut call = self.run.on_tube(pick, &[], held.tube.as_str());
        call.arg((id, &held.owner));
        Some((held, call))
    }

    /// A job a reserve got for `conn` (its body read whole), now held by it.
    fn reserved(
        &self,
        conn: ConnId,
        tube: TubeName,
        owner: String,
        r: Reservation,
        body: Bytes,
    ) -> Reserved {
        let deadline = self.local_time(r.deadline_us, r.now_us);
        let held = Held {
            tube: tube.clone(),
            deadline,
            owner,
        };
        self.held.hold(conn, r.id, held);
        Reserved {
            id: r.id,
            tube,
            body,
            deadline,
            waited: r.waited_us.map(|us| us * US),
            last_change: None,
        }
    }
}
