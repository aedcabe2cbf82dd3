//! Where jobs live: one trait, [`Store`], that every storage engine implements, and
//! [`AnyStore`], the enum the engine dispatches through (no `dyn`, no boxing; `any.rs`).
//!
//! A store owns jobs and tubes: their states, orderings, per-tube and per-job counters,
//! pause state, and tube existence (a tube exists while it holds jobs or a connection
//! uses or watches it; `default` always exists). It knows nothing about connections'
//! sessions or waiting reserves: those belong to the engine.
//!
//! Every method takes `now` (nanoseconds since the Unix epoch) where time matters, so
//! the semantics are testable without sleeping. A method that changes state is atomic:
//! it either happens entirely or not at all (but for a Redis store's `close` of many
//! jobs and references, done in bounded steps: see [`Store::close`]).

pub mod admin;
mod any;
pub mod batch;
pub mod durable;
mod error;
pub mod keys;
#[cfg(test)]
pub mod lagging;
pub mod memory;
pub mod policy;
pub mod retention;
pub mod schedule;
pub mod shared;
mod values;

use std::future::Future;

use bytes::Bytes;

use crate::protocol::TubeName;
use crate::protocol::ext::{BatchOp, FlushStates};
pub use crate::time::{Clock, NANOS_PER_SEC, Nanos};

pub use admin::{Edit, Edited, JobEntry, ListKey, ListPage, ListQuery, ReservedBy};
pub use any::AnyStore;
pub use batch::{BatchDone, FlushStep};
pub use durable::DurableStore;
pub use error::{BoxError, StoreError, StoreResult};
pub use keys::{JobKey, KeyLimits, KeyOp, KeyOutcome, KeyedPut};
pub use memory::MemoryStore;
pub use policy::Policies;
pub use schedule::{Cursor, Fired, ScheduleName, TickPut};
pub use shared::RedisStore;
pub use values::{JobInfo, JobState, LogFigures, NewJob, Reserved, Totals, TubeInfo, UnknownState};

/// A job id. Ids start at 1 and are never reused.
pub type JobId = u64;

/// A position in a store's sequence of changes. A store whose changes are persisted in
/// batches (the journaled memory store under a committer) numbers each change it makes
/// (a job or tube touched, an id consumed); a reply that depended on the store's state
/// may be sent once every change up to the store's last one then is durable
/// ([`Store::durable`]). The journal, the cuts, the committer's progress, a reservation
/// and a reply's acknowledgement all speak of this one number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Change(u64);

impl Change {
    /// Before any change: the only position of a store that persists nothing in
    /// batches (its changes are durable when the call that made them returns).
    pub const NONE: Change = Change(0);

    /// The change after this one.
    pub fn next(self) -> Change {
        Change(self.0 + 1)
    }
}

/// Ready jobs with a priority below this are "urgent" (`current-jobs-urgent`). The one
/// definition: the Redis scripts are handed it as an argument.
pub const URGENT_PRI: u32 = 1024;

/// How long a `pause-tube` of `delay_ms` pauses. The reference stores a zero pause as
/// 1 ns: "resume now", which ends through the same path as any pause (so waiters are
/// served). The Redis scripts get the result, never recompute it.
pub fn pause_length(delay_ms: u64) -> Nanos {
    crate::time::millis(delay_ms).max(1)
}

/// The shortest TTR (ms): beanstalkd makes a TTR of 0 one second, and a TTR in
/// milliseconds is raised to it likewise, so DEADLINE_SOON's one-second margin keeps
/// its meaning (docs/EXTENSIONS.md, *Milliseconds*).
pub const MIN_TTR_MS: u64 = 1000;

/// Identifies one client connection (unique within this process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// The next [`ConnId`] to issue: one counter for the process, so that a store can tell
/// the connections opened before a moment from those opened after it (see
/// [`ConnId::issued`]).
///
/// Process-wide on purpose, the one static of its kind: it is an id source, like the
/// pid, not state anyone reads but to compare ids. An id names one connection for the
/// whole life of the process, whichever engine served it: a leader-mode process runs a
/// new engine and store for each term, and a test several stores at once, so ids kept
/// per engine would repeat in the logs (`conn=`), the clients listing and the jobs'
/// holders. And the store that needs the ordering (shared mode's floor, set when its
/// namespace is lost) sits below the engine that opens connections: a counter owned by
/// the engine would have to be handed down through every store for that one read.
static NEXT_CONN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl ConnId {
    /// A new connection's id, above every id issued before.
    pub fn next() -> ConnId {
        ConnId(NEXT_CONN.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
    }

    /// The id the next connection will get: every connection open now has a lower one.
    pub fn issued() -> ConnId {
        ConnId(NEXT_CONN.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// The operations the engine needs from storage. Each is one atomic transition (but
/// see [`Store::close`]).
pub trait Store: Send + Sync {
    /// Insert a job into `job.tube` (ready, or delayed when `delay_ms > 0`).
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

    /// Delete `id` unless it is reserved by another connection. A keyed job's key is
    /// freed, or its dedupe window opens at `now`.
    fn delete(
        &self,
        conn: ConnId,
        id: JobId,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// A put with a key (docs/EXTENSIONS.md, *Keys*): a new job when the key names
    /// nothing in `job.tube`, else the key's job deduped, replaced in place or in
    /// conflict. O(1) in the tube's size.
    fn put_keyed(
        &self,
        job: NewJob,
        key: &keys::PutKey,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<KeyedPut>> + Send;

    /// A command by key in `tube`, for connection `conn` (whose reservations it may
    /// touch). O(1) in the tube's size.
    fn by_key(
        &self,
        conn: ConnId,
        tube: &TubeName,
        key: &keys::Key,
        op: KeyOp,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<KeyOutcome>> + Send;

    /// Release `id` held by `conn`; `Some(tube)` when released.
    fn release(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_ms: u64,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<TubeName>>> + Send;

    /// Bury `id` held by `conn`.
    fn bury(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        now: Nanos,
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

    /// Pause `tube` for `delay_ms` (0 means "resume now"); false when it does not exist.
    fn pause(
        &self,
        tube: &TubeName,
        delay_ms: u64,
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

    /// A connection closed: with `release_jobs`, every job it holds goes back to ready
    /// at once (counters untouched); then its references go, each tube of `watching` in
    /// the order given, then `using` (tubes may be destroyed). Returns the tubes that
    /// gained ready jobs. (With no references, this returns the jobs of a connection
    /// that is already gone: a job reserved for a waiter whose connection closed
    /// meanwhile.)
    ///
    /// The memory store does it in one atomic step. The Redis store does it in calls of
    /// at most 500 jobs and references, jobs first, so a connection that watched 100,000
    /// tubes never blocks Redis for long: between those calls other commands may see the
    /// close half done (a tube still referred to a moment longer; with more than 500
    /// jobs, one of them still reserved).
    fn close(
        &self,
        conn: ConnId,
        watching: &[TubeName],
        using: Option<&TubeName>,
        release_jobs: bool,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Vec<TubeName>>> + Send;

    /// A reservation whose `RESERVED` never reached its holder (the reply was replaced
    /// by INTERNAL_ERROR: its change was not persisted in time) goes back to ready at
    /// once, counters untouched, as a closed holder's would; `Some(tube)` when `conn`
    /// held `id`. Without this the client, which does not know it holds the job, would
    /// keep it until its TTR.
    fn give_back(
        &self,
        conn: ConnId,
        id: JobId,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<TubeName>>> + Send;

    /// Apply everything due at `now`: delayed jobs become ready, lapsed reservations
    /// return to ready, pauses end. Returns the tubes that may now serve a reserve.
    fn tick(&self, now: Nanos) -> impl Future<Output = StoreResult<Vec<TubeName>>> + Send;

    /// When [`Store::tick`] next has work to do: never later than that, possibly
    /// earlier (a tick that then finds nothing due is harmless), `None` only when
    /// nothing is timed. Upkeep that a store with a [`Store::sweep_interval`] does in
    /// its ticks (a shared store's expiry of retained records, at every tick, and of
    /// ended dedupe windows, every so often; reads already treat both as gone) is timed
    /// by those ticks, not named here.
    fn next_deadline(&self) -> impl Future<Output = StoreResult<Option<Nanos>>> + Send;

    /// A connection started using `tube` (creating it if needed).
    fn use_tube(&self, tube: &TubeName) -> impl Future<Output = StoreResult<()>> + Send;
    /// A connection stopped using `tube` (which may be destroyed).
    fn unuse_tube(&self, tube: &TubeName) -> impl Future<Output = StoreResult<()>> + Send;
    /// A connection started watching `tube` (creating it if needed).
    fn watch_tube(&self, tube: &TubeName) -> impl Future<Output = StoreResult<()>> + Send;
    /// A connection stopped watching `tube` (which may be destroyed).
    fn unwatch_tube(&self, tube: &TubeName) -> impl Future<Output = StoreResult<()>> + Send;

    // The operator API's (see `admin.rs`).

    /// A page of `query.tube`'s jobs in `query.state`, in the order the server takes
    /// them, after `query.after`.
    fn list_jobs(
        &self,
        query: &ListQuery,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<ListPage>> + Send;

    /// One job's figures, body size and holder.
    fn job_entry(
        &self,
        id: JobId,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<JobEntry>>> + Send;

    /// Change job `id` in place, in one atomic step (see [`Edit`]).
    fn edit(
        &self,
        id: JobId,
        edit: &Edit,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Edited>> + Send;

    // Batches and flush (docs/EXTENSIONS.md; the answers are `batch.rs`').

    /// Reserve up to `max` ready jobs among the `watched` tubes that are not paused, in
    /// the order successive [`Store::reserve`]s would take them. By default those
    /// reserves one after another; the memory store takes them in one step, so a
    /// persisted store writes them as one change, and shared mode in one script call.
    /// A failure after some were reserved answers those (they are this connection's now).
    fn reserve_many(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        max: usize,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Vec<Reserved>>> + Send {
        async move {
            let mut jobs = Vec::new();
            while jobs.len() < max {
                match self.reserve(conn, watched, now).await {
                    Ok(Some(job)) => jobs.push(job),
                    Ok(None) => break,
                    Err(err) if jobs.is_empty() => return Err(err),
                    Err(_) => break,
                }
            }
            Ok(jobs)
        }
    }

    /// A list command: `op` on each of `ids` in order, as the single command from
    /// `conn` would (delete: unless reserved by another; release, bury, touch: held by
    /// `conn`), in one atomic step (see [`BatchDone`]).
    fn batch(
        &self,
        conn: ConnId,
        op: BatchOp,
        ids: &[JobId],
        now: Nanos,
    ) -> impl Future<Output = StoreResult<BatchDone>> + Send;

    /// One step of a flush of `tube`: delete at most `max` of its jobs in `states`
    /// whose id is at most `upto` (`None`: the highest id made so far), in one atomic
    /// step, without counting `cmd-delete`; the tube may then be destroyed, and a tube
    /// that does not exist is not made (see [`FlushStep`]). Flushed jobs' keys are
    /// freed at once (`now`: when).
    fn flush_step(
        &self,
        tube: &TubeName,
        states: FlushStates,
        upto: Option<JobId>,
        max: usize,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<FlushStep>> + Send;

    // Schedules (see `schedule.rs`).

    /// Fire one tick of a schedule: if `tick.tick_ms` is past the schedule's cursor,
    /// put its job (a keyed put that dedupes, when it has a key) and advance the cursor
    /// to the tick, in one atomic step that is persisted as one (a job is never
    /// persisted without its cursor). [`Fired::Stale`] when it is not past the cursor.
    fn fire_tick(
        &self,
        tick: &TickPut,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Fired>> + Send;

    /// Advance the cursor of `name` to `tick_ms` without a job, counting `skipped`
    /// ticks passed over; false (nothing done) when the cursor is already there or past.
    fn skip_to(
        &self,
        name: &ScheduleName,
        tick_ms: u64,
        skipped: u64,
    ) -> impl Future<Output = StoreResult<bool>> + Send;

    /// Every schedule's cursor, in name order.
    fn schedule_cursors(
        &self,
    ) -> impl Future<Output = StoreResult<Vec<(ScheduleName, Cursor)>>> + Send;

    /// Forget the cursor of `name` (its schedule was deleted).
    fn drop_cursor(&self, name: &ScheduleName) -> impl Future<Output = StoreResult<()>> + Send;

    // Retention (see `retention.rs`; off unless the engine sets limits that are on).

    /// How much of deleted jobs to keep (`--retain*`), set once by the engine at start.
    /// While on, every job keeps a [`retention::History`] of its events and a delete
    /// (or flush) moves its record into the store's retained set.
    fn set_retention(&self, limits: retention::RetentionLimits);

    /// The record of job `id`, deleted less than the retention period before `now`.
    fn retained(
        &self,
        id: JobId,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<retention::Retained>>> + Send;

    /// The newest retained record of a job of `tube` that had `key`.
    fn retained_by_key(
        &self,
        tube: &TubeName,
        key: &keys::Key,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Option<retention::Retained>>> + Send;

    /// A page of retained records, newest first (see [`retention::RetainedQuery`]).
    fn list_retained(
        &self,
        query: &retention::RetainedQuery,
        now: Nanos,
    ) -> impl Future<Output = StoreResult<Vec<retention::Retained>>> + Send;

    /// How many records are retained and their accounted size.
    fn retention_figures(
        &self,
    ) -> impl Future<Output = StoreResult<retention::RetentionFigures>> + Send;

    // What the engine asks of a store besides transitions. The defaults fit a store that
    // is local to this process (the memory store).

    /// Which engine this is, for logs, `/metrics` and `-V`.
    fn name(&self) -> &'static str;

    /// The clock the engine keeps time by (a shared store's clock follows Redis').
    fn clock(&self) -> Clock {
        Clock::new()
    }

    /// Tubes that gained ready jobs elsewhere (another instance), for a shared store.
    /// Taken once, by the engine. Unbounded: one entry per wake-up message Redis
    /// pushes, and the engine's serve task takes every queued one at each round.
    fn take_wake_events(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<TubeName>> {
        None
    }

    /// For a shared store, the longest the timer may sleep: another instance may have
    /// created a deadline this one was not told about (a safety sweep, not the pacing).
    fn sweep_interval(&self) -> Option<std::time::Duration> {
        None
    }

    /// The bounds on dedupe windows (`--key-windows-max`), set once by the engine.
    fn set_key_limits(&self, limits: KeyLimits) {
        let _ = limits;
    }

    /// The tubes' dead letter and backoff rules (store/policy.rs), applied from the
    /// next reservation that ends. Every store applies them; set by the engine at start
    /// and at each change.
    fn set_policies(&self, policies: std::sync::Arc<Policies>);

    /// How many dedupe windows ended early because too many were open (this
    /// instance's count, for `/metrics`).
    fn key_windows_evicted(&self) -> u64 {
        0
    }

    /// The figures of the local log the store's changes go to (`-b`), if any.
    fn log_figures(&self) -> Option<&LogFigures> {
        None
    }

    /// Where a persisted store's batches spent their time (`-b`, leader mode), if it
    /// has a committer.
    fn batch_stages(&self) -> Option<durable::StagesSnapshot> {
        None
    }

    /// For a shared store, a count that goes up each time the store found its
    /// namespace lost and started a fresh one: every connection open before then must
    /// be closed (they belonged to the old namespace).
    fn namespace_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    /// Resolves when a shared store has found its namespace lost, so that the timer
    /// ticks at once (its tick starts the fresh namespace) rather than at its plan.
    fn namespace_lost(&self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// Whether the store answers now (readiness probes).
    fn ping(&self) -> impl Future<Output = StoreResult<()>> + Send {
        std::future::ready(Ok(()))
    }

    /// The process is stopping cleanly (its connections are closed): a shared store
    /// says it is gone, so nothing waits for it to time out.
    fn shutdown(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// The last change this store made. A reply that depends on the store's state as
    /// it is now is written only once [`Store::durable`] of this change returned.
    /// Always [`Change::NONE`] for a store whose changes are durable when the call
    /// that made them returns.
    fn last_change(&self) -> Change {
        Change::NONE
    }

    /// Wait until every change up to `upto` is persisted (bounded: an error after about
    /// a second, and the command answers INTERNAL_ERROR).
    fn durable(&self, upto: Change) -> impl Future<Output = StoreResult<()>> + Send {
        let _ = upto;
        std::future::ready(Ok(()))
    }
}

/// Bodies at least this large take a path of their own to Redis: written ahead of
/// their job by plain commands on a connection of their own (leader mode: so other
/// clients' batches do not wait behind the transfer; shared mode: so Redis does not
/// copy them into a script and out again, serving nobody meanwhile).
pub const LARGE_BODY: usize = 1 << 20;
