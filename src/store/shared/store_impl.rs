//! [`Store`] for [`RedisStore`]: each transition is one script call (or, for the
//! scripts whose work grows with the data, calls of at most [`SCRIPT_CHUNK`] jobs until
//! the script reports no more), plus the few reads that are plain commands. A
//! connection's close and a give-back are `close.rs`'s.
//!
//! Invariants: only the holding connection's owner token lets release, bury, touch or
//! delete act on a reserved job (the scripts check it); `held` follows every reply
//! that starts, renews or ends a reservation of this instance; a reserve whose answer
//! was lost is remembered for reclaim before its error is returned.

use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::decode::KickSet;
use super::held::Held;
use super::refs::RefKind;
use super::scripts::{Call, Lua, Scripts};
use super::{RedisStore, SCRIPT_CHUNK, policy_args};
use crate::protocol::TubeName;
use crate::protocol::ext::{BatchOp, FlushStates};
use crate::redis::error::redis_error_in;
use crate::redis::keys::{NsKey, RESERVE_KEYS, TubeKey};
use crate::redis::{Code, US};
use crate::store::keys::{Key, KeyOp, KeyOutcome, KeyedPut, PutKey};
use crate::store::retention::{Retained, RetainedQuery, RetentionFigures, RetentionLimits};
use crate::store::{
    BatchDone, ConnId, Cursor, Edit, Edited, Fired, FlushStep, JobEntry, JobId, JobInfo,
    LARGE_BODY, ListPage, ListQuery, Nanos, NewJob, Reserved, ScheduleName, Store, StoreError,
    StoreResult, TickPut, Totals, TubeInfo, URGENT_PRI, pause_length,
};
use crate::time::Clock;
use crate::util::lock;

/// How often the timer runs a tick even when nothing local is due: deadlines created by
/// an instance that then died, wake-ups lost while Redis was unreachable.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);

/// A reserve met a job that lost its body or meta in Redis (the script dropped it and
/// answered a DAMAGED error, see reserve.lua): say which, loudly.
fn report_damage(err: &StoreError) {
    if let Some(e) = redis_error_in(err)
        && Code::of(e) == Some(Code::Damaged)
    {
        tracing::error!("DAMAGED {}", e.detail().unwrap_or_default());
    }
}

/// The tube a reserve script's reply names by its 1-based index into `watched` (the
/// order [`RedisStore::reserve_call`] passed them in).
pub(super) fn watched_tube(
    watched: &[TubeName],
    index: usize,
    op: &'static str,
) -> StoreResult<TubeName> {
    watched
        .get(index.wrapping_sub(1))
        .cloned()
        .ok_or_else(|| StoreError::bad_reply(op, "tube index out of range"))
}

impl RedisStore {
    /// A reserve script's call by `conn` over `watched`, under a fresh owner token (the
    /// one a lost answer is reclaimed by): ARGV the origin, the owner, `max` (a batch's
    /// most jobs, when given), then the tube names, whose order the reply's tube index
    /// counts in ([`watched_tube`]).
    pub(super) fn reserve_call<'a, R: 'static>(
        &'a self,
        conn: ConnId,
        op: &'static str,
        pick: impl FnOnce(&Scripts) -> &Lua<R>,
        watched: &[TubeName],
        max: Option<usize>,
    ) -> StoreResult<(String, Call<'a, R>)> {
        self.check_conn(conn, op)?;
        let owner = self.attempts.owner(conn);
        let mut call = self.run.call_with(pick, &[], watched, RESERVE_KEYS);
        call.arg(self.run.origin()).arg(&owner);
        if let Some(max) = max {
            call.arg(max);
        }
        call.arg(self.ret_arg(conn));
        for t in watched {
            call.arg(t.as_str());
        }
        Ok((owner, call))
    }

    /// A peek at the head of `tube`'s set `which` ("ready", "delayed" or "buried").
    async fn peek_in(&self, tube: &str, which: &str) -> StoreResult<Option<(JobId, Bytes)>> {
        let mut call = self.run.on_tube(|s| &s.peek, &[], tube);
        call.arg(which);
        let peeked = call.run().await?;
        self.peeked(peeked, call.generation()).await
    }
}

impl Store for RedisStore {
    async fn put(&self, job: NewJob, _now: Nanos) -> StoreResult<JobId> {
        if job.body.len() >= LARGE_BODY {
            return self.put_large(job).await;
        }
        self.run
            .on_tube(|s| &s.put, &[], job.tube.as_str())
            .arg((job.pri, job.delay_ms, job.ttr_ms, &job.body[..]))
            .arg(self.ret_arg0())
            .run()
            .await
    }

    async fn burn_id(&self) -> StoreResult<JobId> {
        redis::cmd("INCR")
            .arg(self.run.keys().ns(NsKey::Ids))
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("INCR ids", e))
    }

    async fn reserve(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        _now: Nanos,
    ) -> StoreResult<Option<Reserved>> {
        let (owner, call) = self.reserve_call(conn, "reserve", |s| &s.reserve, watched, None)?;
        let reservation = match call.run().await {
            Ok(r) => r,
            Err(err) => {
                // The script may still run (a timeout does not cancel it).
                self.attempts.failed(watched, &owner, &err);
                report_damage(&err);
                return Err(err);
            }
        };
        let Some(mut r) = reservation else {
            return Ok(None);
        };
        let tube = watched_tube(watched, r.tube_index, "reserve")?;
        let body = self
            .reserved_body(&tube, &owner, &mut r, call.generation())
            .await?;
        Ok(Some(self.reserved(conn, tube, owner, r, body)))
    }

    async fn reserve_job(
        &self,
        conn: ConnId,
        id: JobId,
        _now: Nanos,
    ) -> StoreResult<Option<Reserved>> {
        self.check_conn(conn, "reserve-job")?;
        let Some((tube, mut call)) = self.job_call(|s| &s.reserve_job, id).await? else {
            return Ok(None);
        };
        let owner = self.attempts.owner(conn);
        let reservation = call
            .arg(&owner)
            .arg(self.ret_arg(conn))
            .run()
            .await
            .inspect_err(|err| {
                self.attempts
                    .failed(std::slice::from_ref(&tube), &owner, err);
                report_damage(err);
            })?;
        let Some(mut r) = reservation else {
            return Ok(None);
        };
        let body = self
            .reserved_body(&tube, &owner, &mut r, call.generation())
            .await?;
        Ok(Some(self.reserved(conn, tube, owner, r, body)))
    }

    async fn put_keyed(&self, job: NewJob, key: &PutKey, now: Nanos) -> StoreResult<KeyedPut> {
        self.put_keyed_in(job, key, now).await
    }

    async fn by_key(
        &self,
        conn: ConnId,
        tube: &TubeName,
        key: &Key,
        op: KeyOp,
        now: Nanos,
    ) -> StoreResult<KeyOutcome> {
        self.by_key_in(conn, tube, key, op, now).await
    }

    async fn delete(&self, conn: ConnId, id: JobId, _now: Nanos) -> StoreResult<bool> {
        self.check_conn(conn, "delete")?;
        // Only the holder may delete a reserved job: its token proves it. A job this
        // connection holds needs no lookup of its tube.
        let max = self.windows_max();
        let deleted = match self.held_call(|s| &s.delete, conn, id) {
            Some((held, mut call)) => {
                let referred = if self.refs.refers(&held.tube) {
                    "1"
                } else {
                    "0"
                };
                call.arg(max)
                    .arg(self.ret_arg(conn))
                    .arg(referred)
                    .run()
                    .await?
            }
            None => {
                let mut call = self.on_job(|s| &s.delete_job, id);
                call.arg(max).arg(self.ret_arg(conn)).run().await?
            }
        };
        if deleted {
            self.held.unhold(conn, id);
        }
        Ok(deleted)
    }

    async fn release(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_ms: u64,
        _now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        self.check_conn(conn, "release")?;
        let Some((held, mut call)) = self.held_call(|s| &s.release, conn, id) else {
            return Ok(None);
        };
        let policies = self.policies();
        let tube = held.tube.as_str();
        let released = call
            .arg((pri, delay_ms))
            .arg(policy_args::rule(&policies, tube))
            .arg(policy_args::spread(&policies, tube).to_string())
            .arg(self.ret_arg(conn))
            .run()
            .await?;
        self.held.unhold(conn, id);
        Ok(released.then_some(held.tube))
    }

    async fn bury(&self, conn: ConnId, id: JobId, pri: u32, now: Nanos) -> StoreResult<bool> {
        let _ = now;
        self.check_conn(conn, "bury")?;
        let Some((_, mut call)) = self.held_call(|s| &s.bury, conn, id) else {
            return Ok(false);
        };
        let buried = call.arg(pri).arg(self.ret_arg(conn)).run().await?;
        self.held.unhold(conn, id);
        Ok(buried)
    }

    async fn touch(&self, conn: ConnId, id: JobId, _now: Nanos) -> StoreResult<Option<Nanos>> {
        self.check_conn(conn, "touch")?;
        let Some((held, call)) = self.held_call(|s| &s.touch, conn, id) else {
            return Ok(None);
        };
        let Some(touched) = call.run().await? else {
            self.held.unhold(conn, id);
            return Ok(None);
        };
        let deadline = self.local_time(touched.deadline_us, touched.now_us);
        self.held.hold(conn, id, Held { deadline, ..held });
        Ok(Some(deadline))
    }

    async fn kick(&self, tube: &TubeName, bound: u32, _now: Nanos) -> StoreResult<u32> {
        // A chunk at a time; the first call chooses buried or delayed jobs, and the
        // rest keep to its choice, so one kick never mixes the two.
        let (mut kicked, mut from) = (0u32, None::<KickSet>);
        while kicked < bound {
            let chunk = (bound - kicked).min(SCRIPT_CHUNK);
            let step = match self
                .run
                .on_tube(|s| &s.kick, &[], tube.as_str())
                .arg((chunk, from.map_or("", KickSet::name)))
                .arg(self.ret_arg0())
                .run()
                .await
            {
                Ok(step) => step,
                // Jobs already kicked stay kicked: say so rather than INTERNAL_ERROR.
                Err(err) if kicked > 0 => {
                    tracing::warn!(%err, kicked, bound, "a kick stopped part way");
                    return Ok(kicked);
                }
                Err(err) => return Err(err),
            };
            kicked = kicked.saturating_add(step.count);
            from = Some(step.from);
            if step.count < chunk {
                break;
            }
        }
        Ok(kicked)
    }

    async fn kick_job(&self, id: JobId, _now: Nanos) -> StoreResult<Option<TubeName>> {
        let mut call = self.on_job(|s| &s.kick_job, id);
        call.arg(self.run.origin()).arg(self.ret_arg0()).run().await
    }

    async fn peek(&self, id: JobId) -> StoreResult<Option<(JobId, Bytes)>> {
        let call = self.on_job(|s| &s.peek_job, id);
        let peeked = call.run().await?;
        self.peeked(peeked, call.generation()).await
    }

    async fn peek_ready(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        self.peek_in(tube.as_str(), "ready").await
    }

    async fn peek_delayed(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        self.peek_in(tube.as_str(), "delayed").await
    }

    async fn peek_buried(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        self.peek_in(tube.as_str(), "buried").await
    }

    async fn job_info(&self, id: JobId, _now: Nanos) -> StoreResult<Option<JobInfo>> {
        let found = self.on_job(|s| &s.job_info, id).run().await?;
        Ok(found.map(|f| f.reply.into_info(id, f.tube)))
    }

    async fn tube_info(&self, tube: &TubeName, _now: Nanos) -> StoreResult<Option<TubeInfo>> {
        self.run
            .on_tube(|s| &s.tube_info, &[], tube.as_str())
            .arg(URGENT_PRI)
            .run()
            .await
    }

    async fn totals(&self) -> StoreResult<Totals> {
        self.read_totals().await
    }

    async fn list_tubes(&self) -> StoreResult<Vec<TubeName>> {
        let names: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(self.run.keys().ns(NsKey::Tubes))
            .arg(0)
            .arg(-1)
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("LRANGE tubes", e))?;
        let mut tubes: Vec<TubeName> = names.iter().filter_map(|n| TubeName::new(n)).collect();
        // `default` always exists, and first (beanstalkd makes it at start). A namespace
        // lacks it only between Redis losing its data and the fresh namespace's `init`.
        let default = TubeName::default_tube();
        if !tubes.contains(&default) {
            tubes.insert(0, default);
        }
        Ok(tubes)
    }

    async fn pause(&self, tube: &TubeName, delay_ms: u64, _now: Nanos) -> StoreResult<bool> {
        // Scripts keep microseconds: rounding up keeps a zero pause's 1 ns at 1 us.
        let pause_us = pause_length(delay_ms).div_ceil(US);
        self.run
            .on_tube(|s| &s.pause, &[], tube.as_str())
            .arg(pause_us)
            .run()
            .await
    }

    async fn has_ready(&self, watched: &[TubeName]) -> StoreResult<bool> {
        if watched.is_empty() {
            return Ok(false);
        }
        let keys = self.run.keys();
        let mut pipe = redis::pipe();
        for t in watched {
            pipe.cmd("ZCARD")
                .arg(keys.tube_key(t.as_str(), TubeKey::Ready));
        }
        let counts: Vec<u64> = pipe
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("ZCARD ready", e))?;
        Ok(counts.iter().any(|&n| n > 0))
    }

    async fn soonest_deadline(&self, conn: ConnId) -> StoreResult<Option<Nanos>> {
        Ok(self.held.soonest_deadline(conn, self.clock.now()))
    }

    async fn close(
        &self,
        conn: ConnId,
        watching: &[TubeName],
        using: Option<&TubeName>,
        release_jobs: bool,
        _now: Nanos,
    ) -> StoreResult<Vec<TubeName>> {
        self.close_conn(conn, watching, using, release_jobs).await
    }

    async fn give_back(
        &self,
        conn: ConnId,
        id: JobId,
        _now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        self.give_back_held(conn, id).await
    }

    async fn tick(&self, now: Nanos) -> StoreResult<Vec<TubeName>> {
        self.run_tick(now).await
    }

    async fn next_deadline(&self) -> StoreResult<Option<Nanos>> {
        let head: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
            .arg(self.run.keys().ns(NsKey::Due))
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("ZRANGE due", e))?;
        Ok(head.first().map(|(_, score)| (*score as u64) * US))
    }

    async fn list_jobs(&self, query: &ListQuery, _now: Nanos) -> StoreResult<ListPage> {
        self.admin_list(query).await
    }

    async fn job_entry(&self, id: JobId, _now: Nanos) -> StoreResult<Option<JobEntry>> {
        self.admin_job_entry(id).await
    }

    async fn edit(&self, id: JobId, edit: &Edit, _now: Nanos) -> StoreResult<Edited> {
        self.admin_edit(id, edit).await
    }

    async fn reserve_many(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        max: usize,
        _now: Nanos,
    ) -> StoreResult<Vec<Reserved>> {
        self.reserve_batch(conn, watched, max).await
    }

    async fn batch(
        &self,
        conn: ConnId,
        op: BatchOp,
        ids: &[JobId],
        _now: Nanos,
    ) -> StoreResult<BatchDone> {
        self.batch_ids(conn, op, ids).await
    }

    async fn flush_step(
        &self,
        tube: &TubeName,
        states: FlushStates,
        upto: Option<JobId>,
        max: usize,
        _now: Nanos,
    ) -> StoreResult<FlushStep> {
        self.flush_tube_step(tube, states, upto, max).await
    }

    async fn use_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.refs.change(tube, RefKind::Using, 1).await
    }

    async fn unuse_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.refs.change(tube, RefKind::Using, -1).await
    }

    async fn watch_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.refs.change(tube, RefKind::Watching, 1).await
    }

    async fn unwatch_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.refs.change(tube, RefKind::Watching, -1).await
    }

    /// Whether Redis answers now, and still holds the namespace this instance serves:
    /// one PING and a read of the generation on the shared connection (so it also
    /// tells whether the connection commands use has come back after an outage),
    /// bounded by the response timeout. Until a namespace found lost has been started
    /// afresh, the instance is not ready.
    async fn ping(&self) -> StoreResult<()> {
        let generation = self.run.namespace().current();
        let ((), found): ((), Option<String>) = redis::pipe()
            .cmd("PING")
            .cmd("GET")
            .arg(self.run.keys().ns(NsKey::Generation))
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("PING", e))?;
        if !self
            .run
            .namespace()
            .still_ours(&generation, found.as_deref())
        {
            return Err(StoreError::NamespaceLost { op: "PING" });
        }
        Ok(())
    }

    async fn namespace_lost(&self) {
        self.run.namespace().wait_lost().await;
    }

    /// A clock that reads (approximately) the Redis clock, for the engine.
    fn clock(&self) -> Clock {
        self.clock
    }

    /// The wake-up events from the channel (taken once, by the engine).
    fn take_wake_events(&self) -> Option<mpsc::UnboundedReceiver<TubeName>> {
        lock(&self.wake).take()
    }

    async fn fire_tick(&self, tick: &TickPut, _now: Nanos) -> StoreResult<Fired> {
        self.fire_tick_in(tick).await
    }

    async fn skip_to(&self, name: &ScheduleName, tick_ms: u64, skipped: u64) -> StoreResult<bool> {
        self.skip_to_in(name, tick_ms, skipped).await
    }

    async fn schedule_cursors(&self) -> StoreResult<Vec<(ScheduleName, Cursor)>> {
        self.schedule_cursors_in().await
    }

    async fn drop_cursor(&self, name: &ScheduleName) -> StoreResult<()> {
        self.drop_cursor_in(name).await
    }

    fn set_retention(&self, limits: RetentionLimits) {
        self.set_retention_limits(limits);
    }

    async fn retained(&self, id: JobId, now: Nanos) -> StoreResult<Option<Retained>> {
        self.retained_in(id, now).await
    }

    async fn retained_by_key(
        &self,
        tube: &TubeName,
        key: &Key,
        now: Nanos,
    ) -> StoreResult<Option<Retained>> {
        self.retained_by_key_in(tube, key, now).await
    }

    async fn list_retained(&self, query: &RetainedQuery, now: Nanos) -> StoreResult<Vec<Retained>> {
        self.list_retained_in(query, now).await
    }

    async fn retention_figures(&self) -> StoreResult<RetentionFigures> {
        self.retention_figures_in().await
    }

    fn name(&self) -> &'static str {
        "redis"
    }

    async fn shutdown(&self) {
        // Leave the registry of live instances, so the namespace is free at once (for
        // an instance of leader mode, which refuses to start next to live ones).
        let removed: redis::RedisResult<i64> = redis::cmd("ZREM")
            .arg(self.run.keys().instances())
            .arg(&self.instance)
            .query_async(&mut self.run.conn())
            .await;
        if let Err(err) = removed {
            tracing::warn!(%err, "could not leave the registry of live instances; it lapses in 10 s");
        }
    }

    fn set_policies(&self, policies: std::sync::Arc<crate::store::Policies>) {
        *crate::util::lock(&self.policies) = policies;
    }

    fn set_key_limits(&self, limits: crate::store::KeyLimits) {
        self.set_windows_max(limits);
    }

    fn sweep_interval(&self) -> Option<Duration> {
        Some(SWEEP_INTERVAL)
    }

    fn namespace_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.run.namespace().changes())
    }
}
