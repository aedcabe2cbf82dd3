//! The embedded in-memory store: exact beanstalkd semantics, fast. Alone it persists
//! nothing (the memory engine); with a journal it notes every change for a sink to
//! persist in batches (Redis leader mode, `-b DIR`): see `journal.rs` (what is noted)
//! and `persist.rs` (the cut, its failure, the restore). Schedules' cursors are part of
//! the contents: a tick's check, job and cursor are one transition (`schedules.rs`).
//!
//! Ownership: all state sits in one [`Contents`] (`contents.rs`, with its invariants)
//! behind a std `Mutex`. Every method takes the lock once, makes one complete transition and
//! releases it; no lock is held across an `.await` (the async methods contain none).

mod admin;
#[cfg(test)]
mod admin_tests;
mod contents;
mod journal;
mod keys;
#[cfg(test)]
mod keys_tests;
mod make;
mod persist;
mod retained;
#[cfg(test)]
mod retained_tests;
mod schedules;
#[cfg(test)]
mod schedules_tests;
#[cfg(test)]
mod tests;
mod transitions;

use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

use super::keys::{Key, KeyLimits, KeyOp, KeyOutcome, KeyedPut, PutKey};
use super::retention::{EventKind, Retained, RetainedQuery, RetentionFigures, RetentionLimits};
use super::{
    BatchDone, Change, ConnId, Cursor, Edit, Edited, Fired, FlushStep, JobEntry, JobId, JobInfo,
    JobState, ListPage, ListQuery, Nanos, NewJob, Reserved, ScheduleName, Store, StoreResult,
    TickPut, Totals, TubeInfo, pause_length,
};
use crate::protocol::TubeName;
use crate::protocol::ext::{BatchOp, FlushStates};
use crate::util::lock;
use contents::{Contents, Ref};
pub use journal::{
    Cut, CutLimit, Gone, JobRecord, ScheduleRecord, StoreCounters, StoreSnapshot, Stored,
    TubeRecord,
};
use make::{insert, put_keyed_new, put_new};

#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<Contents>,
    /// Whether the state keeps a journal (so a store without one answers
    /// [`Store::last_change`] without taking the lock).
    journaled: bool,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A store that persists nothing (the memory engine).
    pub fn new() -> MemoryStore {
        MemoryStore {
            state: Mutex::new(Contents::new(false)),
            journaled: false,
        }
    }

    /// An empty store that notes its changes for persistence (see [`Cut`]).
    pub fn journaled() -> MemoryStore {
        MemoryStore {
            state: Mutex::new(Contents::new(true)),
            journaled: true,
        }
    }

    /// A store that notes its changes, starting from a loaded namespace; jobs that were
    /// reserved are ready again at `now`, as after a beanstalkd restart.
    pub fn restored(snapshot: StoreSnapshot, now: Nanos) -> MemoryStore {
        MemoryStore {
            state: Mutex::new(Contents::restore(snapshot, now)),
            journaled: true,
        }
    }

    /// Take the changes since the last written cut, for a sink to write.
    pub fn cut(&self, limit: CutLimit) -> Cut {
        self.lock().cut(limit)
    }

    /// Make the reservations no cut wrote changes the next cut writes (a clean stop).
    pub fn flush_reservations(&self) {
        if let Some(j) = self.lock().journal.as_deref_mut() {
            j.flush_reservations();
        }
    }

    /// Writing `cut` failed (it may or may not have landed): the next cut rewrites it.
    pub fn cut_failed(&self, cut: &Cut) {
        self.lock().cut_failed(cut)
    }

    /// Begin a put whose body persistence writes ahead of the job (a large put, see
    /// `DurableStore`): its id, taken now, and the change that holds the tube. The
    /// tube's keys are kept in persistence until [`MemoryStore::put_staged`] or
    /// [`MemoryStore::abandon_staged`] ends it; a cut taken before that change may
    /// still drop them.
    pub fn begin_staged(&self, tube: &TubeName) -> (JobId, Change) {
        let mut s = self.lock();
        let id = s.alloc_id();
        s.tube_entry(tube).staging += 1;
        s.note_tube(tube);
        (id, s.last_change())
    }

    /// Make the job begun as `id`; `landed`: persistence holds its body (else the next
    /// cut writes the job whole, body and all).
    pub fn put_staged(&self, id: JobId, job: NewJob, now: Nanos, landed: bool) {
        let mut s = self.lock();
        s.unstage(&job.tube);
        let stored = if landed {
            Stored::BodyOnly
        } else {
            Stored::Unknown
        };
        insert(&mut s, id, job, now, stored);
    }

    /// The put begun as `id` will not be made (its caller went away): the body it may
    /// have left in persistence is removed by the next cut; the id stays used.
    pub fn abandon_staged(&self, id: JobId, tube: &TubeName) {
        let mut s = self.lock();
        s.unstage(tube);
        s.note_unmade(id, tube);
        s.maybe_drop_tube(tube);
    }

    fn lock(&self) -> MutexGuard<'_, Contents> {
        // A panic while holding the lock cannot leave a half-made transition visible to
        // clients any worse than crashing would, so keep serving.
        lock(&self.state)
    }
}

impl Store for MemoryStore {
    async fn put(&self, job: NewJob, now: Nanos) -> StoreResult<JobId> {
        Ok(put_new(&mut self.lock(), job, now))
    }

    async fn burn_id(&self) -> StoreResult<JobId> {
        Ok(self.lock().alloc_id())
    }

    async fn reserve(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        now: Nanos,
    ) -> StoreResult<Option<Reserved>> {
        Ok(self.lock().reserve_best(conn, watched, now))
    }

    async fn reserve_job(
        &self,
        conn: ConnId,
        id: JobId,
        now: Nanos,
    ) -> StoreResult<Option<Reserved>> {
        let mut s = self.lock();
        match s.jobs.get(&id) {
            Some(j) if j.state != JobState::Reserved => Ok(s.reserve_id(conn, id, now)),
            _ => Ok(None),
        }
    }

    async fn delete(&self, conn: ConnId, id: JobId, now: Nanos) -> StoreResult<bool> {
        Ok(self.lock().delete_by(conn, id, now, true))
    }

    async fn put_keyed(&self, job: NewJob, key: &PutKey, now: Nanos) -> StoreResult<KeyedPut> {
        Ok(put_keyed_new(&mut self.lock(), job, key, now))
    }

    async fn by_key(
        &self,
        conn: ConnId,
        tube: &TubeName,
        key: &Key,
        op: KeyOp,
        now: Nanos,
    ) -> StoreResult<KeyOutcome> {
        Ok(self.lock().key_op(conn, tube, key, op, now))
    }

    async fn release(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_ms: u64,
        now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        Ok(self.lock().release_by(conn, id, pri, delay_ms, now))
    }

    async fn bury(&self, conn: ConnId, id: JobId, pri: u32, now: Nanos) -> StoreResult<bool> {
        Ok(self.lock().bury_by(conn, id, pri, now))
    }

    async fn touch(&self, conn: ConnId, id: JobId, now: Nanos) -> StoreResult<Option<Nanos>> {
        Ok(self.lock().touch_by(conn, id, now))
    }

    async fn kick(&self, tube: &TubeName, bound: u32, now: Nanos) -> StoreResult<u32> {
        let mut s = self.lock();
        let Some(t) = s.tubes.get(tube) else {
            return Ok(0);
        };
        let ids: Vec<JobId> = if t.buried.is_empty() {
            t.delayed
                .iter()
                .take(bound as usize)
                .map(|&(_, id)| id)
                .collect()
        } else {
            t.buried.values().take(bound as usize).copied().collect()
        };
        for &id in &ids {
            s.kick_one(id, now);
        }
        Ok(ids.len() as u32)
    }

    async fn kick_job(&self, id: JobId, now: Nanos) -> StoreResult<Option<TubeName>> {
        let mut s = self.lock();
        let Some(job) = s.jobs.get(&id) else {
            return Ok(None);
        };
        if !matches!(job.state, JobState::Buried | JobState::Delayed) {
            return Ok(None);
        }
        let tube = job.tube.clone();
        s.kick_one(id, now);
        Ok(Some(tube))
    }

    async fn peek(&self, id: JobId) -> StoreResult<Option<(JobId, Bytes)>> {
        Ok(self.lock().peek_body(id))
    }

    async fn peek_ready(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        let s = self.lock();
        let head = s
            .tubes
            .get(tube)
            .and_then(|t| t.ready.first().map(|&(_, id)| id));
        Ok(head.and_then(|id| s.peek_body(id)))
    }

    async fn peek_delayed(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        let s = self.lock();
        let head = s
            .tubes
            .get(tube)
            .and_then(|t| t.delayed.first().map(|&(_, id)| id));
        Ok(head.and_then(|id| s.peek_body(id)))
    }

    async fn peek_buried(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        let s = self.lock();
        let head = s
            .tubes
            .get(tube)
            .and_then(|t| t.buried.values().next().copied());
        Ok(head.and_then(|id| s.peek_body(id)))
    }

    async fn job_info(&self, id: JobId, now: Nanos) -> StoreResult<Option<JobInfo>> {
        Ok(self.lock().entry(id, now).map(|e| e.info))
    }

    async fn list_jobs(&self, query: &ListQuery, now: Nanos) -> StoreResult<ListPage> {
        Ok(self.lock().list(query, now))
    }

    async fn job_entry(&self, id: JobId, now: Nanos) -> StoreResult<Option<JobEntry>> {
        Ok(self.lock().entry(id, now))
    }

    async fn edit(&self, id: JobId, edit: &Edit, now: Nanos) -> StoreResult<Edited> {
        Ok(self.lock().edit(id, edit, now))
    }

    async fn tube_info(&self, tube: &TubeName, now: Nanos) -> StoreResult<Option<TubeInfo>> {
        let s = self.lock();
        Ok(s.tubes.get(tube).map(|t| TubeInfo {
            urgent: t.urgent,
            ready: t.ready.len() as u64,
            reserved: t.reserved.len() as u64,
            delayed: t.delayed.len() as u64,
            buried: t.buried.len() as u64,
            total_jobs: t.total_jobs,
            using: t.using,
            watching: t.watching,
            cmd_delete: t.cmd_delete,
            cmd_pause: t.cmd_pause,
            pause: t.pause,
            pause_until: t.pause_until,
            now,
            reserves: t.reserves,
            wait_sum_us: t.wait_sum_us,
        }))
    }

    async fn totals(&self) -> StoreResult<Totals> {
        Ok(self.lock().totals.clone())
    }

    async fn list_tubes(&self) -> StoreResult<Vec<TubeName>> {
        Ok(self.lock().order.as_slice().to_vec())
    }

    async fn pause(&self, tube: &TubeName, delay_ms: u64, now: Nanos) -> StoreResult<bool> {
        let mut s = self.lock();
        let Some(t) = s.tubes.get_mut(tube) else {
            return Ok(false);
        };
        let old = (t.pause > 0).then_some((t.pause_until, tube.clone()));
        t.pause = pause_length(delay_ms);
        t.pause_until = now + t.pause;
        t.cmd_pause += 1;
        let until = t.pause_until;
        if let Some(old) = old {
            s.pauses.remove(&old);
        }
        s.pauses.insert((until, tube.clone()));
        s.note_tube(tube);
        Ok(true)
    }

    async fn has_ready(&self, watched: &[TubeName]) -> StoreResult<bool> {
        let s = self.lock();
        Ok(watched
            .iter()
            .any(|name| s.tubes.get(name).is_some_and(|t| !t.ready.is_empty())))
    }

    async fn soonest_deadline(&self, conn: ConnId) -> StoreResult<Option<Nanos>> {
        let s = self.lock();
        Ok(s.by_conn
            .get(&conn)
            .and_then(|set| set.first().map(|&(d, _)| d)))
    }

    async fn close(
        &self,
        conn: ConnId,
        watching: &[TubeName],
        using: Option<&TubeName>,
        release_jobs: bool,
        now: Nanos,
    ) -> StoreResult<Vec<TubeName>> {
        let mut s = self.lock();
        let woken = if release_jobs {
            s.release_held(conn, now)
        } else {
            Vec::new()
        };
        for t in watching {
            s.unref(t, Ref::Watching);
        }
        if let Some(using) = using {
            s.unref(using, Ref::Using);
        }
        Ok(woken)
    }

    async fn give_back(
        &self,
        conn: ConnId,
        id: JobId,
        now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        let mut s = self.lock();
        let Some(tube) = s.held_by(id, conn).map(|j| j.tube.clone()) else {
            return Ok(None);
        };
        s.note(id, EventKind::HolderClosed, conn, now);
        s.make_ready(id, now);
        Ok(Some(tube))
    }

    async fn tick(&self, now: Nanos) -> StoreResult<Vec<TubeName>> {
        let mut s = self.lock();
        let mut woken = Vec::new();
        while let Some(&(due, id)) = s.delayed.first() {
            if due > now {
                break;
            }
            // It has waited since its delay ended, not since this tick noticed.
            s.make_ready(id, due);
            if let Some(j) = s.jobs.get(&id) {
                woken.push(j.tube.clone());
            }
        }
        // A reservation lapses only once its deadline has passed (strictly).
        while let Some(&(deadline, id)) = s.reserved.first() {
            if deadline >= now {
                break;
            }
            s.totals.job_timeouts += 1;
            s.note_counters();
            let mut holder = ConnId(0);
            if let Some(j) = s.jobs.get_mut(&id) {
                j.timeouts += 1;
                holder = ConnId(j.owner);
            }
            s.note(id, EventKind::Timeout, holder, now);
            if s.dead_letter(id, now) {
                continue;
            }
            s.make_ready(id, deadline);
            if let Some(j) = s.jobs.get(&id) {
                woken.push(j.tube.clone());
            }
        }
        s.sweep_windows(now);
        s.expire_retained(now);
        while let Some((until, name)) = s.pauses.first().cloned() {
            if until > now {
                break;
            }
            s.pauses.remove(&(until, name.clone()));
            if let Some(t) = s.tubes.get_mut(&name) {
                t.pause = 0;
                t.pause_until = 0;
            }
            s.note_tube(&name);
            woken.push(name);
        }
        woken.sort();
        woken.dedup();
        Ok(woken)
    }

    async fn next_deadline(&self) -> StoreResult<Option<Nanos>> {
        let s = self.lock();
        let candidates = [
            s.delayed.first().map(|&(d, _)| d),
            s.reserved.first().map(|&(d, _)| d + 1),
            s.pauses.first().map(|(d, _)| *d),
            s.keys.next_end(),
            s.retained_expiry(),
        ];
        Ok(candidates.into_iter().flatten().min())
    }

    async fn use_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.lock().tube_entry(tube).using += 1;
        Ok(())
    }

    async fn unuse_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.lock().unref(tube, Ref::Using);
        Ok(())
    }

    async fn watch_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.lock().tube_entry(tube).watching += 1;
        Ok(())
    }

    async fn unwatch_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.lock().unref(tube, Ref::Watching);
        Ok(())
    }

    async fn reserve_many(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        max: usize,
        now: Nanos,
    ) -> StoreResult<Vec<Reserved>> {
        Ok(self.lock().reserve_many(conn, watched, max, now))
    }

    async fn batch(
        &self,
        conn: ConnId,
        op: BatchOp,
        ids: &[JobId],
        now: Nanos,
    ) -> StoreResult<BatchDone> {
        Ok(self.lock().batch(conn, op, ids, now))
    }

    async fn flush_step(
        &self,
        tube: &TubeName,
        states: FlushStates,
        upto: Option<JobId>,
        max: usize,
        now: Nanos,
    ) -> StoreResult<FlushStep> {
        Ok(self.lock().flush_step(tube, states, upto, max, now))
    }

    async fn fire_tick(&self, tick: &TickPut, now: Nanos) -> StoreResult<Fired> {
        Ok(self.lock().fire_tick(tick, now))
    }

    async fn skip_to(&self, name: &ScheduleName, tick_ms: u64, skipped: u64) -> StoreResult<bool> {
        Ok(self.lock().skip_to(name, tick_ms, skipped))
    }

    async fn schedule_cursors(&self) -> StoreResult<Vec<(ScheduleName, Cursor)>> {
        Ok(self.lock().schedule_cursors())
    }

    async fn drop_cursor(&self, name: &ScheduleName) -> StoreResult<()> {
        self.lock().drop_cursor(name);
        Ok(())
    }

    fn set_retention(&self, limits: RetentionLimits) {
        self.lock().set_retention(limits);
    }
    async fn retained(&self, id: JobId, now: Nanos) -> StoreResult<Option<Retained>> {
        Ok(self.lock().retained_record(id, now))
    }
    async fn retained_by_key(
        &self,
        tube: &TubeName,
        key: &Key,
        now: Nanos,
    ) -> StoreResult<Option<Retained>> {
        Ok(self.lock().retained_by_key(tube, key, now))
    }
    async fn list_retained(&self, query: &RetainedQuery, now: Nanos) -> StoreResult<Vec<Retained>> {
        Ok(self.lock().list_retained(query, now))
    }
    async fn retention_figures(&self) -> StoreResult<RetentionFigures> {
        Ok(self.lock().retention_figures())
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    fn set_policies(&self, policies: std::sync::Arc<crate::store::Policies>) {
        self.lock().policies = policies;
    }

    fn set_key_limits(&self, limits: KeyLimits) {
        self.lock().keys.limits = limits;
    }

    fn key_windows_evicted(&self) -> u64 {
        self.lock().keys.evicted
    }

    /// With a journal, the last change it noted: a reply that depends on the store's
    /// state as it is now may be sent once that change is persisted.
    fn last_change(&self) -> Change {
        if !self.journaled {
            return Change::NONE;
        }
        self.lock().last_change()
    }
}
