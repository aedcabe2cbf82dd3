//! Where jobs live: one trait, [`Store`], that every storage engine implements, and
//! [`AnyStore`], the enum the engine dispatches through (no `dyn`, no boxing).
//!
//! A store owns jobs and tubes: their states, orderings, per-tube and per-job counters,
//! pause state, and tube existence (a tube exists while it holds jobs or a connection
//! uses or watches it; `default` always exists). It knows nothing about connections'
//! sessions or waiting reserves: those belong to the engine.
//!
//! Every method takes `now` (nanoseconds since the Unix epoch) where time matters, so
//! the semantics are testable without sleeping. A method that changes state is atomic:
//! it either happens entirely or not at all.

pub mod memory;
pub mod redis_store;

use std::future::Future;

use bytes::Bytes;

use crate::engine::Clock;
use crate::protocol::TubeName;

pub use memory::MemoryStore;
pub use redis_store::{RedisConfig, RedisStore};

/// A job id. Ids start at 1 and are never reused.
pub type JobId = u64;

/// Nanoseconds since the Unix epoch.
pub type Nanos = u64;

pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Identifies one client connection (unique within this process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// The state of a job, as `stats-job` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobState {
    Ready,
    Reserved,
    Delayed,
    Buried,
}

impl JobState {
    pub fn name(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Reserved => "reserved",
            JobState::Delayed => "delayed",
            JobState::Buried => "buried",
        }
    }
}

/// A job to insert.
#[derive(Clone, Debug)]
pub struct NewJob {
    pub tube: TubeName,
    pub pri: u32,
    pub delay_secs: u32,
    /// Already raised to at least 1 second.
    pub ttr_secs: u32,
    pub body: Bytes,
}

/// A job handed to a connection by a reserve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reserved {
    pub id: JobId,
    pub tube: TubeName,
    pub body: Bytes,
    /// When the reservation lapses, on the engine's clock ([`AnyStore::clock`]).
    pub deadline: Nanos,
    /// How long the job had been ready when it was reserved: since its put, the end of
    /// its delay, its release, kick or lapsed reservation, or its holder's close (0 for
    /// a delayed or buried job taken by reserve-job). `None` when the store cannot tell
    /// (a job written by a version that did not record it).
    pub waited: Option<Nanos>,
}

/// A job's figures for `stats-job` (the engine turns times into ages and time left).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub id: JobId,
    pub tube: TubeName,
    pub state: JobState,
    pub pri: u32,
    pub created: Nanos,
    pub delay_secs: u32,
    pub ttr_secs: u32,
    /// Due time when delayed, TTR deadline when reserved.
    pub deadline: Option<Nanos>,
    pub reserves: u64,
    pub timeouts: u64,
    pub releases: u64,
    pub buries: u64,
    pub kicks: u64,
    /// The store's time when these figures were read (ages and time left are relative
    /// to it, so a shared store's own clock decides them).
    pub now: Nanos,
}

/// A tube's figures for `stats-tube` (except `current-waiting`, which is the engine's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TubeInfo {
    pub urgent: u64,
    pub ready: u64,
    pub reserved: u64,
    pub delayed: u64,
    pub buried: u64,
    pub total_jobs: u64,
    pub using: u64,
    pub watching: u64,
    pub cmd_delete: u64,
    pub cmd_pause: u64,
    /// The pause as set (nanoseconds; 0 when not paused).
    pub pause: u64,
    /// When the pause ends.
    pub pause_until: Nanos,
    /// The store's time when these figures were read.
    pub now: Nanos,
}

/// Store-wide figures for `stats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub urgent: u64,
    pub ready: u64,
    pub reserved: u64,
    pub delayed: u64,
    pub buried: u64,
    pub total_jobs: u64,
    pub job_timeouts: u64,
    pub tubes: u64,
}

/// A store could not do what was asked; the command answers `INTERNAL_ERROR` and the
/// client may retry. Nothing was changed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage unavailable: {0}")]
    Unavailable(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The operations the engine needs from storage. Each is one atomic transition.
pub trait Store: Send + Sync {
    /// Insert a job into `job.tube` (ready, or delayed when `delay_secs > 0`).
    fn put(&self, job: NewJob, now: Nanos) -> impl Future<Output = StoreResult<JobId>> + Send;

    /// Consume an id without making a job (a put that ended in EXPECTED_CRLF or DRAINING).
    fn burn_id(&self) -> impl Future<Output = StoreResult<JobId>> + Send;

    /// Reserve the most urgent ready job, by (pri, id), among the `watched` tubes that
    /// are not paused.
    fn reserve(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<Reserved>>> + Send;

    /// Reserve job `id` if it is ready, delayed or buried (any tube, pause ignored).
    fn reserve_job(
        &self,
        conn: ConnId,
        id: JobId,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<Reserved>>> + Send;

    /// Delete `id` unless it is reserved by another connection.
    fn delete(&self, conn: ConnId, id: JobId) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Release `id` held by `conn`; `Some(tube)` when released.
    fn release(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_secs: u32,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<TubeName>>> + Send;

    /// Bury `id` held by `conn`.
    fn bury(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Restart the TTR of `id` held by `conn`; the new deadline when held.
    fn touch(
        &self,
        conn: ConnId,
        id: JobId,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<Nanos>>> + Send;

    /// Kick up to `bound` jobs in `tube`: buried ones if any, else delayed ones.
    fn kick(
        &self,
        tube: &TubeName,
        bound: u32,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<u32>> + Send;

    /// Kick one buried or delayed job; `Some(tube)` when kicked.
    fn kick_job(
        &self,
        id: JobId,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<TubeName>>> + Send;

    fn peek(&self, id: JobId) -> impl Future<Output = StoreResult<Option<(JobId, Bytes)>>> + Send;
    fn peek_ready(
        &self,
        tube: &TubeName,
    ) -> impl Future<Output = StoreResult<Option<(JobId, Bytes)>>> + Send;
    fn peek_delayed(
        &self,
        tube: &TubeName,
    ) -> impl Future<Output = StoreResult<Option<(JobId, Bytes)>>> + Send;
    fn peek_buried(
        &self,
        tube: &TubeName,
    ) -> impl Future<Output = StoreResult<Option<(JobId, Bytes)>>> + Send;

    fn job_info(
        &self,
        id: JobId,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<JobInfo>>> + Send;
    fn tube_info(
        &self,
        tube: &TubeName,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<TubeInfo>>> + Send;
    fn totals(&self) -> impl Future<Output = StoreResult<Totals>> + Send;

    /// All existing tubes, in the reference's list order.
    fn list_tubes(&self) -> impl Future<Output = StoreResult<Vec<TubeName>>> + Send;

    /// Pause `tube` for `delay_secs` (0 means "resume now"); false when it does not exist.
    fn pause(
        &self,
        tube: &TubeName,
        delay_secs: u32,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Whether any watched tube has a ready job, paused or not (the reference's
    /// `conn_ready`, which decides an immediate DEADLINE_SOON).
    fn has_ready(&self, watched: &[TubeName]) -> impl Future<Output = StoreResult<bool>> + Send;

    /// The soonest TTR deadline among the jobs `conn` holds.
    fn soonest_deadline(
        &self,
        conn: ConnId,
    ) -> impl Future<Output = StoreResult<Option<Nanos>>> + Send;

    /// Return every job `conn` holds to ready at once, counters untouched (the
    /// connection closed). Returns the tubes that gained ready jobs.
    fn release_all(
        &self,
        conn: ConnId,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Vec<TubeName>>> + Send;

    /// A connection closed, as one atomic step: with `release_jobs`, every job it holds
    /// goes back to ready at once (counters untouched); then its references go, each
    /// tube of `watching` in the order given, then `using` (tubes may be destroyed).
    /// Returns the tubes that gained ready jobs.
    fn close(
        &self,
        conn: ConnId,
        watching: &[TubeName],
        using: &TubeName,
        release_jobs: bool,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Vec<TubeName>>> + Send;

    /// Apply everything due at `now`: delayed jobs become ready, lapsed reservations
    /// return to ready, pauses end. Returns the tubes that may now serve a reserve.
    fn tick(&self, now: Nanos) -> impl Future<Output = StoreResult<Vec<TubeName>>> + Send;

    /// When [`Store::tick`] next has work to do: never later than that, possibly
    /// earlier (a tick that then finds nothing due is harmless), `None` only when
    /// nothing is timed.
    fn next_deadline(&self) -> impl Future<Output = StoreResult<Option<Nanos>>> + Send;

    /// A connection started using `tube` (creating it if needed).
    fn use_tube(&self, tube: &TubeName) -> impl Future<Output = StoreResult<()>> + Send;
    /// A connection stopped using `tube` (which may be destroyed).
    fn unuse_tube(&self, tube: &TubeName) -> impl Future<Output = StoreResult<()>> + Send;
    /// A connection started watching `tube` (creating it if needed).
    fn watch_tube(&self, tube: &TubeName) -> impl Future<Output = StoreResult<()>> + Send;
    /// A connection stopped watching `tube` (which may be destroyed).
    fn unwatch_tube(&self, tube: &TubeName) -> impl Future<Output = StoreResult<()>> + Send;
}

/// The storage engines, dispatched statically.
// One value per process, so the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
pub enum AnyStore {
    Memory(MemoryStore),
    Redis(RedisStore),
}

impl AnyStore {
    /// The engine's clock: the local one, or one that reads the Redis clock.
    pub fn clock(&self) -> Clock {
        match self {
            AnyStore::Memory(_) => Clock::new(),
            AnyStore::Redis(s) => s.clock(),
        }
    }

    /// Tubes that gained ready jobs elsewhere (other instances), if the store is shared.
    pub fn take_wake_events(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<TubeName>> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(s) => s.take_wake_events(),
        }
    }

    /// For a shared store, the longest the timer may sleep: another instance may have
    /// created a deadline this one was not told about (a safety sweep, not the pacing).
    pub fn sweep_interval(&self) -> Option<std::time::Duration> {
        match self {
            AnyStore::Memory(_) => None,
            AnyStore::Redis(_) => Some(std::time::Duration::from_secs(1)),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            AnyStore::Memory(_) => "memory",
            AnyStore::Redis(_) => "redis",
        }
    }

    /// Whether the store answers now (readiness): always for memory; for Redis, one
    /// PING, bounded by the store's response timeout.
    pub async fn ping(&self) -> StoreResult<()> {
        match self {
            AnyStore::Memory(_) => Ok(()),
            AnyStore::Redis(s) => s.ping().await,
        }
    }
}

/// Forward a [`Store`] method to whichever engine this is.
macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            AnyStore::Memory($s) => $call.await,
            AnyStore::Redis($s) => $call.await,
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
    async fn delete(&self, conn: ConnId, id: JobId) -> StoreResult<bool> {
        dispatch!(self, s => s.delete(conn, id))
    }
    async fn release(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_secs: u32,
        now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        dispatch!(self, s => s.release(conn, id, pri, delay_secs, now))
    }
    async fn bury(&self, conn: ConnId, id: JobId, pri: u32) -> StoreResult<bool> {
        dispatch!(self, s => s.bury(conn, id, pri))
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
    async fn pause(&self, tube: &TubeName, delay_secs: u32, now: Nanos) -> StoreResult<bool> {
        dispatch!(self, s => s.pause(tube, delay_secs, now))
    }
    async fn has_ready(&self, watched: &[TubeName]) -> StoreResult<bool> {
        dispatch!(self, s => s.has_ready(watched))
    }
    async fn soonest_deadline(&self, conn: ConnId) -> StoreResult<Option<Nanos>> {
        dispatch!(self, s => s.soonest_deadline(conn))
    }
    async fn release_all(&self, conn: ConnId, now: Nanos) -> StoreResult<Vec<TubeName>> {
        dispatch!(self, s => s.release_all(conn, now))
    }
    async fn close(
        &self,
        conn: ConnId,
        watching: &[TubeName],
        using: &TubeName,
        release_jobs: bool,
        now: Nanos,
    ) -> StoreResult<Vec<TubeName>> {
        dispatch!(self, s => s.close(conn, watching, using, release_jobs, now))
    }
    async fn tick(&self, now: Nanos) -> StoreResult<Vec<TubeName>> {
        dispatch!(self, s => s.tick(now))
    }
    async fn next_deadline(&self) -> StoreResult<Option<Nanos>> {
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
}
