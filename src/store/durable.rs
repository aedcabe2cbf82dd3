//! The memory store with its changes persisted in batches by a committer (Redis leader
//! mode, `-b DIR`): every transition is applied in memory, exactly as the memory engine
//! applies it, and a reply that depends on it is written only once the batch holding
//! the change was written ([`Store::durable`]).
//!
//! Ownership: the [`MemoryStore`] is shared with the committer task (`crate::persist`),
//! which takes cuts of it and publishes how far it has written on a watch channel
//! ([`CommitProgress`]). This type only applies transitions and waits on that channel.
//!
//! Invariant: after any call that may have changed the store, the committer is told
//! (`kick`), so no change waits for a write that is not coming.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::{Notify, mpsc, oneshot, watch};

use super::{
    Clock, ConnId, JobId, JobInfo, LARGE_BODY, LogFigures, MemoryStore, Nanos, NewJob, Reserved,
    Store, StoreError, StoreResult, Totals, TubeInfo,
};
use crate::protocol::TubeName;

/// How long a reply waits for the batch holding its change before the command answers
/// INTERNAL_ERROR (the change stays, and is written when the store comes back).
pub const COMMIT_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a put waits for its body's write to start (the batches before it applied,
/// the writer free); then the job is made anyway and its batch writes the body with it
/// (as for a small job). A write that started is waited for: it is bounded by the
/// writer's Redis timeouts.
const STAGE_TIMEOUT: Duration = Duration::from_millis(500);

/// A request to write one job's body ahead of the job. The writer claims it on `start`
/// before sending, and skips it when that fails (the asker gave up: its job is written
/// with its batch instead); an asker whose request was claimed waits for `done`, so no
/// body lands after its put stopped waiting for it.
#[derive(Debug)]
pub struct StageRequest {
    pub tube: TubeName,
    pub id: JobId,
    pub body: Bytes,
    pub start: oneshot::Sender<()>,
    pub done: oneshot::Sender<bool>,
}

/// The asking side of a writer of large bodies (a task of the persistence layer).
#[derive(Clone, Debug)]
pub struct Stager {
    requests: mpsc::Sender<StageRequest>,
}

impl Stager {
    /// A stager, and the queue its writer serves.
    pub fn channel() -> (Stager, mpsc::Receiver<StageRequest>) {
        let (requests, queue) = mpsc::channel(64);
        (Stager { requests }, queue)
    }

    /// Whether the body of job `id` landed ahead of it; given up when its write has
    /// not started by `deadline`.
    async fn stage(&self, tube: TubeName, id: JobId, body: Bytes, deadline: Instant) -> bool {
        let (start, mut started) = oneshot::channel();
        let (done, landed) = oneshot::channel();
        let request = StageRequest {
            tube,
            id,
            body,
            start,
            done,
        };
        let claimed =
            async { self.requests.send(request).await.is_ok() && (&mut started).await.is_ok() };
        let claimed = match tokio::time::timeout_at(deadline.into(), claimed).await {
            Ok(claimed) => claimed,
            Err(_) => {
                // Withdrawn, unless the writer claimed it at the last moment.
                started.close();
                started.try_recv().is_ok()
            }
        };
        claimed && landed.await == Ok(true)
    }
}

/// A put begun with its body written ahead: if the put is dropped before its job is
/// made, the id stays used and whatever body landed is removed by the next cut.
struct Begun<'a> {
    store: &'a DurableStore,
    id: JobId,
    tube: Option<TubeName>,
}

impl Drop for Begun<'_> {
    fn drop(&mut self) {
        if let Some(tube) = self.tube.take() {
            self.store.memory.abandon_staged(self.id, &tube);
            self.store.kick();
        }
    }
}

/// How far the committer has written, as it publishes it.
#[derive(Clone, Debug, Default)]
pub struct CommitProgress {
    /// Every change up to this one is persisted.
    pub written: u64,
    /// The committer stopped for good (leadership lost, or the process shuts down):
    /// nothing more will be written, and nothing more may be acknowledged.
    pub stopped: bool,
    /// The last write failed and no write has succeeded since (for logs and readiness).
    pub failing: Option<Arc<str>>,
}

/// Until when this instance may acknowledge anything: a leader's lease, as its holder
/// last renewed it (on the monotonic clock). Without a lease (`-b`), forever.
#[derive(Debug)]
pub struct ValidUntil {
    base: Instant,
    /// Nanoseconds after `base`; `u64::MAX`: no end.
    until: AtomicU64,
}

impl ValidUntil {
    pub fn forever() -> ValidUntil {
        ValidUntil {
            base: Instant::now(),
            until: AtomicU64::new(u64::MAX),
        }
    }

    pub fn set(&self, until: Instant) {
        let nanos = until.saturating_duration_since(self.base).as_nanos();
        self.until
            .store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// Nothing may be acknowledged from now on.
    pub fn end(&self) {
        self.until.store(0, Ordering::SeqCst);
    }

    pub fn is_valid(&self) -> bool {
        let now = self.base.elapsed().as_nanos();
        u128::from(self.until.load(Ordering::SeqCst)) > now
    }
}

/// The committer's side of the link: it publishes progress and is told of changes.
#[derive(Clone, Debug)]
pub struct CommitLink {
    pub progress: watch::Sender<CommitProgress>,
    pub changed: Arc<Notify>,
    pub valid: Arc<ValidUntil>,
}

impl CommitLink {
    pub fn new() -> CommitLink {
        CommitLink {
            progress: watch::Sender::new(CommitProgress::default()),
            changed: Arc::new(Notify::new()),
            valid: Arc::new(ValidUntil::forever()),
        }
    }
}

impl Default for CommitLink {
    fn default() -> Self {
        Self::new()
    }
}

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

    /// A put whose body is written ahead of its job. The id is taken first, as
    /// beanstalkd takes it once the body is in; the job is made (visible) once its body
    /// landed, or once that took too long, and then waits for its batch like any put.
    async fn put_staged(&self, stager: &Stager, job: NewJob) -> JobId {
        let (id, begun_at) = self.memory.begin_staged(&job.tube);
        self.kick();
        let mut begun = Begun {
            store: self,
            id,
            tube: Some(job.tube.clone()),
        };
        let deadline = Instant::now() + STAGE_TIMEOUT;
        // Every batch taken before the tube was held is applied first: one of them may
        // drop the tube's keys (it held no job then), and the body with them.
        let clear = tokio::time::timeout_at(deadline.into(), self.written_upto(begun_at))
            .await
            .unwrap_or(false);
        let landed = clear
            && stager
                .stage(job.tube.clone(), id, job.body.clone(), deadline)
                .await;
        begun.tube = None;
        // The put takes effect now, as beanstalkd's does once the body is in.
        self.memory.put_staged(id, job, self.clock.now(), landed);
        self.kick();
        id
    }

    /// Whether every change up to `upto` was written (false: the committer stopped).
    async fn written_upto(&self, upto: u64) -> bool {
        let mut progress = self.link.progress.subscribe();
        progress
            .wait_for(|p| p.written >= upto || p.stopped)
            .await
            .is_ok_and(|p| p.written >= upto)
    }

    /// A store whose committer writes the local log these figures describe (`-b`).
    pub fn with_log_figures(mut self, figures: Arc<LogFigures>) -> DurableStore {
        self.log = Some(figures);
        self
    }

    fn kick(&self) {
        self.link.changed.notify_one();
    }

    /// Run a transition and tell the committer.
    async fn changed<T>(&self, f: impl Future<Output = StoreResult<T>>) -> StoreResult<T> {
        let result = f.await;
        self.kick();
        result
    }
}

impl Store for DurableStore {
    async fn put(&self, job: NewJob, now: Nanos) -> StoreResult<JobId> {
        // A full log refuses new jobs before one is made (beanstalkd reserves a put's
        // log space first); the other changes go on, into the log's reserve.
        if self
            .log
            .as_ref()
            .is_some_and(|l| l.full.load(Ordering::Relaxed))
        {
            return Err(StoreError::LogFull);
        }
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
    async fn delete(&self, conn: ConnId, id: JobId) -> StoreResult<bool> {
        self.changed(self.memory.delete(conn, id)).await
    }
    async fn release(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_secs: u32,
        now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        self.changed(self.memory.release(conn, id, pri, delay_secs, now))
            .await
    }
    async fn bury(&self, conn: ConnId, id: JobId, pri: u32) -> StoreResult<bool> {
        self.changed(self.memory.bury(conn, id, pri)).await
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
    async fn tube_info(&self, tube: &TubeName, now: Nanos) -> StoreResult<Option<TubeInfo>> {
        self.memory.tube_info(tube, now).await
    }
    async fn totals(&self) -> StoreResult<Totals> {
        self.memory.totals().await
    }
    async fn list_tubes(&self) -> StoreResult<Vec<TubeName>> {
        self.memory.list_tubes().await
    }
    async fn pause(&self, tube: &TubeName, delay_secs: u32, now: Nanos) -> StoreResult<bool> {
        self.changed(self.memory.pause(tube, delay_secs, now)).await
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

    fn name(&self) -> &'static str {
        self.name
    }

    fn log_figures(&self) -> Option<&LogFigures> {
        self.log.as_deref()
    }

    fn clock(&self) -> Clock {
        self.clock
    }

    fn last_change(&self) -> u64 {
        self.memory.change_seq()
    }

    async fn durable(&self, upto: u64) -> StoreResult<()> {
        // Most replies find their change written already (or depend on none new).
        let written = self.link.progress.borrow().written >= upto;
        if written && self.link.valid.is_valid() {
            return Ok(());
        }
        let mut progress = self.link.progress.subscribe();
        let outcome = {
            let reached = progress.wait_for(|p| p.written >= upto || p.stopped);
            match tokio::time::timeout(COMMIT_TIMEOUT, reached).await {
                Ok(Ok(p)) => Some(p.written >= upto),
                Ok(Err(_)) => Some(false),
                Err(_) => None,
            }
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
                source: progress
                    .borrow()
                    .failing
                    .as_deref()
                    .map(|f| -> crate::store::BoxError { f.to_string().into() }),
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
                source: Some(why.to_string().into()),
            }),
            None => Ok(()),
        }
    }
}
