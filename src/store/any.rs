//! [`AnyStore`]: the storage engines behind one type, each [`Store`] method forwarded
//! to whichever engine this is by a `match` (static dispatch: no `dyn`, no boxing).
//!
//! Invariant: this file only forwards; every behaviour is the engine's own (the
//! test-only lagging store adds its delay after the call, see `lagging.rs`).

use bytes::Bytes;

use super::keys::{Key, KeyLimits, KeyOp, KeyOutcome, KeyedPut, PutKey};
#[cfg(test)]
use super::lagging;
use super::retention::{Retained, RetainedQuery, RetentionFigures, RetentionLimits};
use super::{
    BatchDone, Change, ConnId, Cursor, DurableStore, Edit, Edited, Fired, FlushStep, JobEntry,
    JobId, JobInfo, ListPage, ListQuery, LogFigures, MemoryStore, Nanos, NewJob, RedisStore,
    Reserved, ScheduleName, Store, StoreResult, TickPut, Totals, TubeInfo,
};
use crate::protocol::TubeName;
use crate::protocol::ext::{BatchOp, FlushStates};
use crate::time::Clock;

/// The storage engines, dispatched statically.
// One value per process, so the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum AnyStore {
    Memory(MemoryStore),
    Durable(DurableStore),
    Redis(RedisStore),
    /// The memory store answering late (the engine's in-process tests).
    #[cfg(test)]
    Lagging(lagging::LaggingStore),
}

/// Forward a [`Store`] method to whichever engine this is.
macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            AnyStore::Memory($s) => $call.await,
            AnyStore::Durable($s) => $call.await,
            AnyStore::Redis($s) => $call.await,
            #[cfg(test)]
            AnyStore::Lagging(lagging) => {
                let $s = &lagging.inner;
                let answer = $call.await;
                lagging.lag().await;
                answer
            }
        }
    };
}

impl Store for AnyStore {
    async fn put(&self, job: NewJob, now: Nanos) -> StoreResult<JobId> {
        dispatch!(self, s => s.put(job, now))
    }
    async fn burn_id(&self) -> StoreResult<JobId> {
        dispatch!(self, s => s.burn_id())
    }
    async fn reserve(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        now: Nanos,
    ) -> StoreResult<Option<Reserved>> {
        dispatch!(self, s => s.reserve(conn, watched, now))
    }
    async fn reserve_job(
        &self,
        conn: ConnId,
        id: JobId,
        now: Nanos,
    ) -> StoreResult<Option<Reserved>> {
        dispatch!(self, s => s.reserve_job(conn, id, now))
    }
    async fn delete(&self, conn: ConnId, id: JobId, now: Nanos) -> StoreResult<bool> {
        dispatch!(self, s => s.delete(conn, id, now))
    }
    async fn put_keyed(&self, job: NewJob, key: &PutKey, now: Nanos) -> StoreResult<KeyedPut> {
        dispatch!(self, s => s.put_keyed(job, key, now))
    }
    async fn by_key(
        &self,
        conn: ConnId,
        tube: &TubeName,
        key: &Key,
        op: KeyOp,
        now: Nanos,
    ) -> StoreResult<KeyOutcome> {
        dispatch!(self, s => s.by_key(conn, tube, key, op, now))
    }
    async fn release(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_ms: u64,
        now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        dispatch!(self, s => s.release(conn, id, pri, delay_ms, now))
    }
    async fn bury(&self, conn: ConnId, id: JobId, pri: u32, now: Nanos) -> StoreResult<bool> {
        dispatch!(self, s => s.bury(conn, id, pri, now))
    }
    async fn touch(&self, conn: ConnId, id: JobId, now: Nanos) -> StoreResult<Option<Nanos>> {
        dispatch!(self, s => s.touch(conn, id, now))
    }
    async fn kick(&self, tube: &TubeName, bound: u32, now: Nanos) -> StoreResult<u32> {
        dispatch!(self, s => s.kick(tube, bound, now))
    }
    async fn kick_job(&self, id: JobId, now: Nanos) -> StoreResult<Option<TubeName>> {
        dispatch!(self, s => s.kick_job(id, now))
    }
    async fn peek(&self, id: JobId) -> StoreResult<Option<(JobId, Bytes)>> {
        dispatch!(self, s => s.peek(id))
    }
    async fn peek_ready(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        dispatch!(self, s => s.peek_ready(tube))
    }
    async fn peek_delayed(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        dispatch!(self, s => s.peek_delayed(tube))
    }
    async fn peek_buried(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        dispatch!(self, s => s.peek_buried(tube))
    }
    async fn job_info(&self, id: JobId, now: Nanos) -> StoreResult<Option<JobInfo>> {
        dispatch!(self, s => s.job_info(id, now))
    }
    async fn tube_info(&self, tube: &TubeName, now: Nanos) -> StoreResult<Option<TubeInfo>> {
        dispatch!(self, s => s.tube_info(tube, now))
    }
    async fn totals(&self) -> StoreResult<Totals> {
        dispatch!(self, s => s.totals())
    }
    async fn list_tubes(&self) -> StoreResult<Vec<TubeName>> {
        dispatch!(self, s => s.list_tubes())
    }
    async fn pause(&self, tube: &TubeName, delay_ms: u64, now: Nanos) -> StoreResult<bool> {
        dispatch!(self, s => s.pause(tube, delay_ms, now))
    }
    async fn has_ready(&self, watched: &[TubeName]) -> StoreResult<bool> {
        dispatch!(self, s => s.has_ready(watched))
    }
    async fn soonest_deadline(&self, conn: ConnId) -> StoreResult<Option<Nanos>> {
        dispatch!(self, s => s.soonest_deadline(conn))
    }
    async fn close(
        &self,
        conn: ConnId,
        watching: &[TubeName],
        using: Option<&TubeName>,
        release_jobs: bool,
        now: Nanos,
    ) -> StoreResult<Vec<TubeName>> {
        dispatch!(self, s => s.close(conn, watching, using, release_jobs, now))
    }
    async fn give_back(
        &self,
        conn: ConnId,
        id: JobId,
        now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        dispatch!(self, s => s.give_back(conn, id, now))
    }
    async fn tick(&self, now: Nanos) -> StoreResult<Vec<TubeName>> {
        dispatch!(self, s => s.tick(now))
    }
    async fn next_deadline(&self) -> StoreResult<Option<Nanos>> {
        #[cfg(test)]
        if let AnyStore::Lagging(lagging) = self {
            let answer = lagging.inner.next_deadline().await;
            lagging.read_lag().await;
            return answer;
        }
        dispatch!(self, s => s.next_deadline())
    }
    async fn use_tube(&self, tube: &TubeName) -> StoreResult<()> {
        dispatch!(self, s => s.use_tube(tube))
    }
    async fn unuse_tube(&self, tube: &TubeName) -> StoreResult<()> {
        dispatch!(self, s => s.unuse_tube(tube))
    }
    async fn watch_tube(&self, tube: &TubeName) -> StoreResult<()> {
        dispatch!(self, s => s.watch_tube(tube))
    }
    async fn unwatch_tube(&self, tube: &TubeName) -> StoreResult<()> {
        dispatch!(self, s => s.unwatch_tube(tube))
    }
    async fn list_jobs(&self, query: &ListQuery, now: Nanos) -> StoreResult<ListPage> {
        dispatch!(self, s => s.list_jobs(query, now))
    }
    async fn job_entry(&self, id: JobId, now: Nanos) -> StoreResult<Option<JobEntry>> {
        dispatch!(self, s => s.job_entry(id, now))
    }
    async fn edit(&self, id: JobId, edit: &Edit, now: Nanos) -> StoreResult<Edited> {
        dispatch!(self, s => s.edit(id, edit, now))
    }
    async fn reserve_many(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        max: usize,
        now: Nanos,
    ) -> StoreResult<Vec<Reserved>> {
        dispatch!(self, s => s.reserve_many(conn, watched, max, now))
    }
    async fn batch(
        &self,
        conn: ConnId,
        op: BatchOp,
        ids: &[JobId],
        now: Nanos,
    ) -> StoreResult<BatchDone> {
        dispatch!(self, s => s.batch(conn, op, ids, now))
    }
    async fn flush_step(
        &self,
        tube: &TubeName,
        states: FlushStates,
        upto: Option<JobId>,
        max: usize,
        now: Nanos,
    ) -> StoreResult<FlushStep> {
        dispatch!(self, s => s.flush_step(tube, states, upto, max, now))
    }
    async fn fire_tick(&self, tick: &TickPut, now: Nanos) -> StoreResult<Fired> {
        dispatch!(self, s => s.fire_tick(tick, now))
    }
    async fn skip_to(&self, name: &ScheduleName, tick_ms: u64, skipped: u64) -> StoreResult<bool> {
        dispatch!(self, s => s.skip_to(name, tick_ms, skipped))
    }
    async fn schedule_cursors(&self) -> StoreResult<Vec<(ScheduleName, Cursor)>> {
        dispatch!(self, s => s.schedule_cursors())
    }
    async fn drop_cursor(&self, name: &ScheduleName) -> StoreResult<()> {
        dispatch!(self, s => s.drop_cursor(name))
    }
    fn set_retention(&self, limits: RetentionLimits) {
        match self {
            AnyStore::Memory(s) => s.set_retention(limits),
            AnyStore::Durable(s) => s.set_retention(limits),
            AnyStore::Redis(s) => s.set_retention(limits),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.set_retention(limits),
        }
    }
    async fn retained(&self, id: JobId, now: Nanos) -> StoreResult<Option<Retained>> {
        dispatch!(self, s => s.retained(id, now))
    }
    async fn retained_by_key(
        &self,
        tube: &TubeName,
        key: &Key,
        now: Nanos,
    ) -> StoreResult<Option<Retained>> {
        dispatch!(self, s => s.retained_by_key(tube, key, now))
    }
    async fn list_retained(&self, query: &RetainedQuery, now: Nanos) -> StoreResult<Vec<Retained>> {
        dispatch!(self, s => s.list_retained(query, now))
    }
    async fn retention_figures(&self) -> StoreResult<RetentionFigures> {
        dispatch!(self, s => s.retention_figures())
    }
    fn name(&self) -> &'static str {
        match self {
            AnyStore::Memory(s) => s.name(),
            AnyStore::Durable(s) => s.name(),
            AnyStore::Redis(s) => s.name(),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.name(),
        }
    }
    fn clock(&self) -> Clock {
        match self {
            AnyStore::Memory(s) => s.clock(),
            AnyStore::Durable(s) => s.clock(),
            AnyStore::Redis(s) => s.clock(),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.clock(),
        }
    }
    fn take_wake_events(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<TubeName>> {
        match self {
            AnyStore::Memory(s) => s.take_wake_events(),
            AnyStore::Durable(s) => s.take_wake_events(),
            AnyStore::Redis(s) => s.take_wake_events(),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.take_wake_events(),
        }
    }
    fn sweep_interval(&self) -> Option<std::time::Duration> {
        match self {
            AnyStore::Memory(s) => s.sweep_interval(),
            AnyStore::Durable(s) => s.sweep_interval(),
            AnyStore::Redis(s) => s.sweep_interval(),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.sweep_interval(),
        }
    }

    fn set_policies(&self, policies: std::sync::Arc<crate::store::Policies>) {
        match self {
            AnyStore::Memory(s) => s.set_policies(policies),
            AnyStore::Durable(s) => s.set_policies(policies),
            AnyStore::Redis(s) => s.set_policies(policies),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.set_policies(policies),
        }
    }

    fn set_key_limits(&self, limits: KeyLimits) {
        match self {
            AnyStore::Memory(s) => s.set_key_limits(limits),
            AnyStore::Durable(s) => s.set_key_limits(limits),
            AnyStore::Redis(s) => s.set_key_limits(limits),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.set_key_limits(limits),
        }
    }
    fn key_windows_evicted(&self) -> u64 {
        match self {
            AnyStore::Memory(s) => s.key_windows_evicted(),
            AnyStore::Durable(s) => s.key_windows_evicted(),
            AnyStore::Redis(s) => s.key_windows_evicted(),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.key_windows_evicted(),
        }
    }
    fn log_figures(&self) -> Option<&LogFigures> {
        match self {
            AnyStore::Memory(s) => s.log_figures(),
            AnyStore::Durable(s) => s.log_figures(),
            AnyStore::Redis(s) => s.log_figures(),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.log_figures(),
        }
    }
    fn batch_stages(&self) -> Option<super::durable::StagesSnapshot> {
        match self {
            AnyStore::Memory(s) => s.batch_stages(),
            AnyStore::Durable(s) => s.batch_stages(),
            AnyStore::Redis(s) => s.batch_stages(),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.batch_stages(),
        }
    }
    fn namespace_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match self {
            AnyStore::Memory(s) => s.namespace_changes(),
            AnyStore::Durable(s) => s.namespace_changes(),
            AnyStore::Redis(s) => s.namespace_changes(),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.namespace_changes(),
        }
    }
    async fn namespace_lost(&self) {
        dispatch!(self, s => s.namespace_lost())
    }
    async fn ping(&self) -> StoreResult<()> {
        dispatch!(self, s => s.ping())
    }
    fn last_change(&self) -> Change {
        match self {
            AnyStore::Memory(s) => s.last_change(),
            AnyStore::Durable(s) => s.last_change(),
            AnyStore::Redis(s) => s.last_change(),
            #[cfg(test)]
            AnyStore::Lagging(l) => l.inner.last_change(),
        }
    }
    async fn durable(&self, upto: Change) -> StoreResult<()> {
        dispatch!(self, s => s.durable(upto))
    }
    async fn shutdown(&self) {
        dispatch!(self, s => s.shutdown())
    }
}
