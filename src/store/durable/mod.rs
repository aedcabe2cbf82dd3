//! The memory store with its changes persisted in batches by a committer (Redis leader
//! mode, `-b DIR`): every transition is applied in memory, exactly as the memory engine
//! applies it, and a reply that depends on it is written only once the batch holding
//! the change was written ([`Store::durable`]).
//!
//! Ownership: the [`MemoryStore`] is shared with the committer task (`crate::persist`),
//! which takes cuts of it and publishes how far it has written on a watch channel
//! ([`CommitProgress`]). This type only applies transitions and waits for that progress
//! (`CommitLink::until_written`).
//!
//! Files: `mod.rs` (the store), `link.rs` (the [`CommitLink`] between the store and its
//! committer), `staging.rs` (large bodies written ahead of their jobs).
//!
//! Invariant: after any call that may have changed the store, the committer is told
//! (`wake_committer`), so no change waits for a write that is not coming.

mod link;
mod stages;
mod staging;

pub use link::{CommitLink, CommitProgress, ValidUntil};
pub use stages::{BatchStages, JOBS_BUCKETS, STAGE_BUCKETS, Stage, StagesSnapshot};
pub use staging::{StageRequest, Stager};

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;

use super::keys::{Key, KeyLimits, KeyOp, KeyOutcome, KeyedPut, PutKey};
use super::retention::{Retained, RetainedQuery, RetentionFigures, RetentionLimits};
use super::{
    BatchDone, Change, Clock, ConnId, Cursor, Edit, Edited, Fired, FlushStep, JobEntry, JobId,
    JobInfo, LARGE_BODY, ListPage, ListQuery, LogFigures, MemoryStore, Nanos, NewJob, Reserved,
    ScheduleName, Store, StoreError, StoreResult, TickPut, Totals, TubeInfo,
};
use crate::protocol::TubeName;
use crate::protocol::ext::{BatchOp, FlushStates};

/// How long a reply waits for the batch holding its change before the command answers
/// INTERNAL_ERROR (the change stays, and is written when the store comes back).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(1);

/// A memory store whose changes a committer persists.
#[derive(Debug)]
pub struct DurableStore {
    memory: Arc<MemoryStore>,
    link: CommitLink,
    clock: Clock,
    name: &'static str,
    /// The `binlog-*` figures, for a store whose committer writes a local log.
    log: Option<Arc<LogFigures>>,
    /// Where large bodies are written ahead of their jobs (leader mode).
    stager: Option<Stager>,
}

impl DurableStore {
    /// `memory` must be journaled ([`MemoryStore::journaled`] or `restored`), and a
    /// committer must serve `link`.
    pub fn new(
        memory: Arc<MemoryStore>,
        link: CommitLink,
        clock: Clock,
        name: &'static str,
    ) -> DurableStore {
        DurableStore {
            memory,
            link,
            clock,
            name,
            log: None,
            stager: None,
        }
    }

    /// A store whose large bodies `stager` writes ahead of their jobs (leader mode).
    pub fn with_stager(mut self, stager: Stager) -> DurableStore {
        self.stager = Some(stager);
        self
    }

    /// A store whose committer writes the local log these figures describe (`-b`).
    pub fn with_log_figures(mut self, figures: Arc<LogFigures>) -> DurableStore {
        self.log = Some(figures);
        self
    }

    /// Tell the committer the store may have changed.
    fn wake_committer(&self) {
        self.link.stages.changed();
        self.link.changed.notify_one();
    }

    /// A full log refuses new jobs before one is made (beanstalkd reserves a put's log
    /// space first); the other changes go on, into the log's reserve.
    fn refuse_when_full(&self) -> StoreResult<()> {
        if self
            .log
            .as_ref()
            .is_some_and(|l| l.full.load(Ordering::Relaxed))
        {
            return Err(StoreError::LogFull);
        }
        Ok(())
    }

    /// Run a transition and tell the committer.
    async fn changed<T>(&self, f: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
        let result = f.await;
        self.wake_committer();
        result
    }
}

impl Store for DurableStore {
    async fn put(&self, job: NewJob, now: Nanos) -> StoreResult<JobId> {
        self.refuse_when_full()?;
        match &self.stager {
            Some(stager) if job.body.len() >= LARGE_BODY => Ok(self.put_staged(stager, job).await),
            _ => self.changed(self.memory.put(job, now)).await,
        }
    }
    async fn burn_id(&self) -> StoreResult<JobId> {
        self.changed(self.memory.burn_id()).await
    }
    async fn reserve(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        now: Nanos,
    ) -> StoreResult<Option<Reserved>> {
        self.changed(self.memory.reserve(conn, watched, now)).await
    }
    async fn reserve_job(
        &self,
        conn: ConnId,
        id: JobId,
        now: Nanos,
    ) -> StoreResult<Option<Reserved>> {
        self.changed(self.memory.reserve_job(conn, id, now)).await
    }
    async fn delete(&self, conn: ConnId, id: JobId, now: Nanos) -> StoreResult<bool> {
        self.changed(self.memory.delete(conn, id, now)).await
    }
    async fn put_keyed(&self, job: NewJob, key: &PutKey, now: Nanos) -> StoreResult<KeyedPut> {
        // A keyed put's body goes with its job in the batch (no staging): its key is
        // decided under the store's lock, which a staged put would have to hold
        // across the body's write.
        self.refuse_when_full()?;
        self.changed(self.memory.put_keyed(job, key, now)).await
    }
    async fn by_key(
        &self,
        conn: ConnId,
        tube: &TubeName,
        key: &Key,
        op: KeyOp,
        now: Nanos,
    ) -> StoreResult<KeyOutcome> {
        self.changed(self.memory.by_key(conn, tube, key, op, now))
            .await
    }
    async fn release(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_ms: u64,
        now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        self.changed(self.memory.release(conn, id, pri, delay_ms, now))
            .await
    }
    async fn bury(&self, conn: ConnId, id: JobId, pri: u32, now: Nanos) -> StoreResult<bool> {
        self.changed(self.memory.bury(conn, id, pri, now)).await
    }
    async fn touch(&self, conn: ConnId, id: JobId, now: Nanos) -> StoreResult<Option<Nanos>> {
        self.changed(self.memory.touch(conn, id, now)).await
    }
    async fn kick(&self, tube: &TubeName, bound: u32, now: Nanos) -> StoreResult<u32> {
        self.changed(self.memory.kick(tube, bound, now)).await
    }
    async fn kick_job(&self, id: JobId, now: Nanos) -> StoreResult<Option<TubeName>> {
        self.changed(self.memory.kick_job(id, now)).await
    }
    async fn peek(&self, id: JobId) -> StoreResult<Option<(JobId, Bytes)>> {
        self.memory.peek(id).await
    }
    async fn peek_ready(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        self.memory.peek_ready(tube).await
    }
    async fn peek_delayed(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        self.memory.peek_delayed(tube).await
    }
    async fn peek_buried(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        self.memory.peek_buried(tube).await
    }
    async fn job_info(&self, id: JobId, now: Nanos) -> StoreResult<Option<JobInfo>> {
        let info = self.memory.job_info(id, now).await?;
        Ok(match &self.log {
            Some(log) => info.map(|i| JobInfo {
                file: log.job_file(id),
                ..i
            }),
            None => info,
        })
    }
    async fn list_jobs(&self, query: &ListQuery, now: Nanos) -> StoreResult<ListPage> {
        let mut page = self.memory.list_jobs(query, now).await?;
        for e in &mut page.jobs {
            e.info.file = self.log.as_ref().map_or(0, |l| l.job_file(e.info.id));
        }
        Ok(page)
    }
    async fn job_entry(&self, id: JobId, now: Nanos) -> StoreResult<Option<JobEntry>> {
        let entry = self.memory.job_entry(id, now).await?;
        Ok(entry.map(|mut e| {
            e.info.file = self.log.as_ref().map_or(0, |l| l.job_file(id));
            e
        }))
    }
    async fn edit(&self, id: JobId, edit: &Edit, now: Nanos) -> StoreResult<Edited> {
        self.changed(self.memory.edit(id, edit, now)).await
    }
    async fn tube_info(&self, tube: &TubeName, now: Nanos) -> StoreResult<Option<TubeInfo>> {
        self.memory.tube_info(tube, now).await
    }
    async fn totals(&self) -> StoreResult<Totals> {
        self.memory.totals().await
    }
    async fn list_tubes(&self) -> StoreResult<Vec<TubeName>> {
        self.memory.list_tubes().await
    }
    async fn pause(&self, tube: &TubeName, delay_ms: u64, now: Nanos) -> StoreResult<bool> {
        self.changed(self.memory.pause(tube, delay_ms, now)).await
    }
    async fn has_ready(&self, watched: &[TubeName]) -> StoreResult<bool> {
        self.memory.has_ready(watched).await
    }
    async fn soonest_deadline(&self, conn: ConnId) -> StoreResult<Option<Nanos>> {
        self.memory.soonest_deadline(conn).await
    }
    async fn close(
        &self,
        conn: ConnId,
        watching: &[TubeName],
        using: Option<&TubeName>,
        release_jobs: bool,
        now: Nanos,
    ) -> StoreResult<Vec<TubeName>> {
        self.changed(self.memory.close(conn, watching, using, release_jobs, now))
            .await
    }
    async fn give_back(
        &self,
        conn: ConnId,
        id: JobId,
        now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        self.changed(self.memory.give_back(conn, id, now)).await
    }
    async fn tick(&self, now: Nanos) -> StoreResult<Vec<TubeName>> {
        self.changed(self.memory.tick(now)).await
    }
    async fn next_deadline(&self) -> StoreResult<Option<Nanos>> {
        self.memory.next_deadline().await
    }
    async fn use_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.changed(self.memory.use_tube(tube)).await
    }
    async fn unuse_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.changed(self.memory.unuse_tube(tube)).await
    }
    async fn watch_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.changed(self.memory.watch_tube(tube)).await
    }
    async fn unwatch_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.changed(self.memory.unwatch_tube(tube)).await
    }
    async fn reserve_many(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        max: usize,
        now: Nanos,
    ) -> StoreResult<Vec<Reserved>> {
        self.changed(self.memory.reserve_many(conn, watched, max, now))
            .await
    }
    async fn batch(
        &self,
        conn: ConnId,
        op: BatchOp,
        ids: &[JobId],
        now: Nanos,
    ) -> StoreResult<BatchDone> {
        self.changed(self.memory.batch(conn, op, ids, now)).await
    }
    async fn flush_step(
        &self,
        tube: &TubeName,
        states: FlushStates,
        upto: Option<JobId>,
        max: usize,
        now: Nanos,
    ) -> StoreResult<FlushStep> {
        self.changed(self.memory.flush_step(tube, states, upto, max, now))
            .await
    }

    async fn fire_tick(&self, tick: &TickPut, now: Nanos) -> StoreResult<Fired> {
        // The tick's body goes with its job and cursor in one batch (no staging): a
        // schedule's body is below LARGE_BODY (src/schedule).
        self.refuse_when_full()?;
        self.changed(self.memory.fire_tick(tick, now)).await
    }
    async fn skip_to(&self, name: &ScheduleName, tick_ms: u64, skipped: u64) -> StoreResult<bool> {
        self.changed(self.memory.skip_to(name, tick_ms, skipped))
            .await
    }
    async fn schedule_cursors(&self) -> StoreResult<Vec<(ScheduleName, Cursor)>> {
        self.memory.schedule_cursors().await
    }
    async fn drop_cursor(&self, name: &ScheduleName) -> StoreResult<()> {
        self.changed(self.memory.drop_cursor(name)).await
    }

    fn set_retention(&self, limits: RetentionLimits) {
        self.memory.set_retention(limits);
    }
    async fn retained(&self, id: JobId, now: Nanos) -> StoreResult<Option<Retained>> {
        self.memory.retained(id, now).await
    }
    async fn retained_by_key(
        &self,
        tube: &TubeName,
        key: &Key,
        now: Nanos,
    ) -> StoreResult<Option<Retained>> {
        self.memory.retained_by_key(tube, key, now).await
    }
    async fn list_retained(&self, query: &RetainedQuery, now: Nanos) -> StoreResult<Vec<Retained>> {
        self.memory.list_retained(query, now).await
    }
    async fn retention_figures(&self) -> StoreResult<RetentionFigures> {
        self.memory.retention_figures().await
    }

    fn name(&self) -> &'static str {
        self.name
    }

    fn log_figures(&self) -> Option<&LogFigures> {
        self.log.as_deref()
    }

    fn batch_stages(&self) -> Option<StagesSnapshot> {
        Some(self.link.stages.snapshot())
    }

    fn set_policies(&self, policies: std::sync::Arc<crate::store::Policies>) {
        self.memory.set_policies(policies);
    }

    fn set_key_limits(&self, limits: KeyLimits) {
        self.memory.set_key_limits(limits);
    }

    fn key_windows_evicted(&self) -> u64 {
        self.memory.key_windows_evicted()
    }

    fn clock(&self) -> Clock {
        self.clock
    }

    fn last_change(&self) -> Change {
        self.memory.last_change()
    }

    async fn durable(&self, upto: Change) -> StoreResult<()> {
        // Most replies find their change written already (or depend on none new).
        let written = self.link.progress.borrow().written >= upto;
        if written && self.link.valid.is_valid() {
            return Ok(());
        }
        let outcome =
            match tokio::time::timeout(COMMIT_TIMEOUT, self.link.until_written(upto)).await {
                Ok(()) => {
                    self.link.stages.woken();
                    Some(self.link.progress.borrow().written >= upto)
                }
                Err(_) => None,
            };
        match outcome {
            // The write happened under this instance's lease; the reply is sent only
            // while the lease still covers it, so no answer leaves an instance that
            // another may have replaced (a leader frozen past its lease, say).
            Some(true) if self.link.valid.is_valid() => Ok(()),
            Some(true) => Err(StoreError::TimedOut {
                op: "commit",
                source: Some("this instance's lease ran out".into()),
            }),
            // Stopped: this process no longer persists (it lost its lease, or shuts
            // down). An earlier write that failed may still have carried the change.
            Some(false) => Err(StoreError::TimedOut {
                op: "commit",
                source: Some("this instance stopped persisting (leadership lost)".into()),
            }),
            None => Err(StoreError::TimedOut {
                op: "commit",
                source: self
                    .link
                    .progress
                    .borrow()
                    .failing
                    .clone()
                    .map(|why| -> crate::store::BoxError { Box::new(why) }),
            }),
        }
    }

    async fn ping(&self) -> StoreResult<()> {
        let p = self.link.progress.borrow().clone();
        if p.stopped {
            return Err(StoreError::NotApplied {
                op: "commit",
                source: Some("this instance stopped persisting".into()),
            });
        }
        match p.failing {
            Some(why) => Err(StoreError::TimedOut {
                op: "commit",
                source: Some(Box::new(why)),
            }),
            None => Ok(()),
        }
    }
}
