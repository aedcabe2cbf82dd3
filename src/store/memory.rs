//! The embedded in-memory store: exact beanstalkd semantics, fast, nothing persisted.
//!
//! Ownership: all state sits in one [`State`] behind a std `Mutex`. Every method takes
//! the lock once, makes one complete transition and releases it; no lock is held across
//! an `.await` (the async methods contain none).
//!
//! Invariants of [`State`]:
//! - a job is in exactly one place matching its state: its tube's `ready` set
//!   (pri, id), its tube's and the global `delayed` sets (due, id), the global
//!   `reserved` set and its owner's set (deadline, id), or its tube's `buried` FIFO;
//! - `totals` and each tube's counts equal the sizes of those places;
//! - a tube is in `tubes` (and `order`) while it has jobs, users or watchers, or is
//!   `default`.

use std::collections::{BTreeMap, BTreeSet};

// Every lookup of a job, tube or connection hashes its key: foldhash (seeded per
// process) instead of SipHash, which was the largest single cost of a command.
use foldhash::HashMap;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;

use super::{
    ConnId, JobId, JobInfo, JobState, NANOS_PER_SEC, Nanos, NewJob, Reserved, Store, StoreResult,
    Totals, TubeInfo,
};
use crate::protocol::TubeName;
use crate::util::SwapList;

/// The two kinds of reference a connection holds on a tube.
#[derive(Clone, Copy, Debug)]
enum Ref {
    Using,
    Watching,
}

/// Jobs with a priority below this are "urgent" in the stats.
pub const URGENT_PRI: u32 = 1024;

/// One job. Kept small, because a queue may hold millions (each is boxed, so the job
/// table's spare capacity costs a pointer per slot, not a whole job): one time field
/// serves every state, the counters are 32-bit as in the reference.
#[derive(Debug)]
struct Job {
    tube: TubeName,
    pri: u32,
    delay_secs: u32,
    ttr_secs: u32,
    state: JobState,
    created: Nanos,
    /// By state: delayed, the due time; reserved, the TTR deadline; ready, when it
    /// became ready (a reserve reports how long it waited); buried, its position in
    /// the tube's buried FIFO.
    at: u64,
    /// The reserving connection's id while reserved, else 0 (ids start at 1).
    owner: u64,
    reserves: u32,
    timeouts: u32,
    releases: u32,
    buries: u32,
    kicks: u32,
    body: Bytes,
}

impl Job {
    fn owned_by(&self, conn: ConnId) -> bool {
        self.state == JobState::Reserved && self.owner == conn.0
    }
}

#[derive(Debug, Default)]
struct Tube {
    ready: BTreeSet<(u32, JobId)>,
    delayed: BTreeSet<(Nanos, JobId)>,
    buried: BTreeMap<u64, JobId>,
    reserved: u64,
    urgent: u64,
    total_jobs: u64,
    using: u64,
    watching: u64,
    cmd_delete: u64,
    cmd_pause: u64,
    pause: u64,
    pause_until: Nanos,
}

impl Tube {
    fn job_count(&self) -> u64 {
        self.ready.len() as u64
            + self.delayed.len() as u64
            + self.buried.len() as u64
            + self.reserved
    }

    fn paused_at(&self, now: Nanos) -> bool {
        self.pause > 0 && self.pause_until > now
    }
}

#[derive(Debug, Default)]
struct State {
    next_id: JobId,
    jobs: HashMap<JobId, Box<Job>>,
    tubes: HashMap<TubeName, Tube>,
    order: SwapList<TubeName>,
    delayed: BTreeSet<(Nanos, JobId)>,
    reserved: BTreeSet<(Nanos, JobId)>,
    by_conn: HashMap<ConnId, BTreeSet<(Nanos, JobId)>>,
    pauses: BTreeSet<(Nanos, TubeName)>,
    bury_seq: u64,
    totals: Totals,
}

/// The in-memory store. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        let mut state = State {
            next_id: 1,
            ..State::default()
        };
        state.tube_entry(&TubeName::default_tube());
        MemoryStore {
            state: Mutex::new(state),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-made transition visible to
        // clients any worse than crashing would, so keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn tube_entry(&mut self, name: &TubeName) -> &mut Tube {
        if !self.tubes.contains_key(name) {
            self.order.insert(name.clone());
            self.totals.tubes += 1;
        }
        self.tubes.entry(name.clone()).or_default()
    }

    /// Destroy `name` if nothing refers to it any more; its counters and pause go too.
    fn maybe_drop_tube(&mut self, name: &TubeName) {
        let Some(t) = self.tubes.get(name) else {
            return;
        };
        if name.as_str() == "default" || t.job_count() > 0 || t.using > 0 || t.watching > 0 {
            return;
        }
        if t.pause > 0 {
            self.pauses.remove(&(t.pause_until, name.clone()));
        }
        self.tubes.remove(name);
        self.order.remove(name);
        self.totals.tubes -= 1;
    }

    fn alloc_id(&mut self) -> JobId {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Take job `id` out of the place its state puts it, keeping counts true.
    /// The job's `state` field is left for the caller to overwrite.
    fn detach(&mut self, id: JobId) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let Some(tube) = self.tubes.get_mut(&job.tube) else {
            return;
        };
        match job.state {
            JobState::Ready => {
                tube.ready.remove(&(job.pri, id));
                if job.pri < URGENT_PRI {
                    tube.urgent -= 1;
                    self.totals.urgent -= 1;
                }
                self.totals.ready -= 1;
            }
            JobState::Delayed => {
                tube.delayed.remove(&(job.at, id));
                self.delayed.remove(&(job.at, id));
                self.totals.delayed -= 1;
            }
            JobState::Reserved => {
                tube.reserved -= 1;
                self.reserved.remove(&(job.at, id));
                let owner = ConnId(job.owner);
                if let Some(set) = self.by_conn.get_mut(&owner) {
                    set.remove(&(job.at, id));
                    if set.is_empty() {
                        self.by_conn.remove(&owner);
                    }
                }
                self.totals.reserved -= 1;
            }
            JobState::Buried => {
                tube.buried.remove(&job.at);
                self.totals.buried -= 1;
            }
        }
    }

    /// Place a detached job in `state`. `due` is the due time (delayed), the deadline
    /// (reserved) or when it became ready (ready); `owner` the reserving connection.
    fn attach(&mut self, id: JobId, state: JobState, due: Nanos, owner: Option<ConnId>) {
        let bury_seq = if state == JobState::Buried {
            self.bury_seq += 1;
            self.bury_seq
        } else {
            0
        };
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        job.state = state;
        job.at = if state == JobState::Buried {
            bury_seq
        } else {
            due
        };
        job.owner = owner.map_or(0, |c| c.0);
        let Some(tube) = self.tubes.get_mut(&job.tube) else {
            return;
        };
        match state {
            JobState::Ready => {
                tube.ready.insert((job.pri, id));
                if job.pri < URGENT_PRI {
                    tube.urgent += 1;
                    self.totals.urgent += 1;
                }
                self.totals.ready += 1;
            }
            JobState::Delayed => {
                tube.delayed.insert((due, id));
                self.delayed.insert((due, id));
                self.totals.delayed += 1;
            }
            JobState::Reserved => {
                tube.reserved += 1;
                self.reserved.insert((due, id));
                if let Some(owner) = owner {
                    self.by_conn.entry(owner).or_default().insert((due, id));
                }
                self.totals.reserved += 1;
            }
            JobState::Buried => {
                tube.buried.insert(bury_seq, id);
                self.totals.buried += 1;
            }
        }
    }

    fn move_to(&mut self, id: JobId, state: JobState, due: Nanos, owner: Option<ConnId>) {
        self.detach(id);
        self.attach(id, state, due, owner);
    }

    /// Move job `id` to ready, having become ready at `since` (which may be earlier
    /// than now: the end of its delay, or its lapsed deadline).
    fn make_ready(&mut self, id: JobId, since: Nanos) {
        self.move_to(id, JobState::Ready, since, None);
    }

    fn held_by(&self, id: JobId, conn: ConnId) -> Option<&Job> {
        self.jobs
            .get(&id)
            .map(|j| &**j)
            .filter(|j| j.owned_by(conn))
    }

    fn reserve_id(&mut self, conn: ConnId, id: JobId, now: Nanos) -> Option<Reserved> {
        let job = self.jobs.get(&id)?;
        let ttr = u64::from(job.ttr_secs);
        // A delayed or buried job taken by reserve-job never waited as ready.
        let waited = match job.state {
            JobState::Ready => now.saturating_sub(job.at),
            _ => 0,
        };
        let deadline = now + ttr * NANOS_PER_SEC;
        self.move_to(id, JobState::Reserved, deadline, Some(conn));
        let job = self.jobs.get_mut(&id)?;
        job.reserves += 1;
        Some(Reserved {
            id,
            tube: job.tube.clone(),
            body: job.body.clone(),
            deadline,
            waited: Some(waited),
        })
    }

    /// Place a detached (or new) job: delayed when `delay_secs > 0`, else ready.
    fn attach_after(&mut self, id: JobId, delay_secs: u32, now: Nanos) {
        if delay_secs > 0 {
            self.attach(
                id,
                JobState::Delayed,
                now + u64::from(delay_secs) * NANOS_PER_SEC,
                None,
            );
        } else {
            self.attach(id, JobState::Ready, now, None);
        }
    }

    /// Drop one use or watch reference to `tube`, destroying it if that was the last.
    fn unref(&mut self, tube: &TubeName, kind: Ref) {
        if let Some(t) = self.tubes.get_mut(tube) {
            let count = match kind {
                Ref::Using => &mut t.using,
                Ref::Watching => &mut t.watching,
            };
            *count = count.saturating_sub(1);
        }
        self.maybe_drop_tube(tube);
    }

    /// Every job `conn` holds back to ready, counters untouched; the tubes that gained.
    fn release_held(&mut self, conn: ConnId, now: Nanos) -> Vec<TubeName> {
        let Some(held) = self.by_conn.get(&conn).cloned() else {
            return Vec::new();
        };
        let mut tubes = Vec::new();
        for (_, id) in held {
            self.make_ready(id, now);
            if let Some(j) = self.jobs.get(&id) {
                tubes.push(j.tube.clone());
            }
        }
        tubes.sort();
        tubes.dedup();
        tubes
    }

    fn peek_body(&self, id: JobId) -> Option<(JobId, Bytes)> {
        self.jobs.get(&id).map(|j| (id, j.body.clone()))
    }
}

impl Store for MemoryStore {
    async fn put(&self, job: NewJob, now: Nanos) -> StoreResult<JobId> {
        let mut s = self.lock();
        let id = s.alloc_id();
        let tube = s.tube_entry(&job.tube);
        tube.total_jobs += 1;
        s.totals.total_jobs += 1;
        s.jobs.insert(
            id,
            Box::new(Job {
                tube: job.tube,
                pri: job.pri,
                delay_secs: job.delay_secs,
                ttr_secs: job.ttr_secs,
                state: JobState::Ready,
                created: now,
                at: now,
                owner: 0,
                reserves: 0,
                timeouts: 0,
                releases: 0,
                buries: 0,
                kicks: 0,
                body: job.body,
            }),
        );
        s.attach_after(id, job.delay_secs, now);
        Ok(id)
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
        let mut s = self.lock();
        let best = watched
            .iter()
            .filter_map(|name| s.tubes.get(name))
            .filter(|t| !t.paused_at(now))
            .filter_map(|t| t.ready.first().copied())
            .min();
        Ok(best.and_then(|(_, id)| s.reserve_id(conn, id, now)))
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

    async fn delete(&self, conn: ConnId, id: JobId) -> StoreResult<bool> {
        let mut s = self.lock();
        let Some(job) = s.jobs.get(&id) else {
            return Ok(false);
        };
        if job.state == JobState::Reserved && !job.owned_by(conn) {
            return Ok(false);
        }
        s.detach(id);
        let Some(job) = s.jobs.remove(&id) else {
            return Ok(false);
        };
        if let Some(t) = s.tubes.get_mut(&job.tube) {
            t.cmd_delete += 1;
        }
        s.maybe_drop_tube(&job.tube);
        Ok(true)
    }

    async fn release(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_secs: u32,
        now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        let mut s = self.lock();
        if s.held_by(id, conn).is_none() {
            return Ok(None);
        }
        s.detach(id);
        let Some(job) = s.jobs.get_mut(&id) else {
            return Ok(None);
        };
        job.pri = pri;
        job.delay_secs = delay_secs;
        job.releases += 1;
        let tube = job.tube.clone();
        s.attach_after(id, delay_secs, now);
        Ok(Some(tube))
    }

    async fn bury(&self, conn: ConnId, id: JobId, pri: u32) -> StoreResult<bool> {
        let mut s = self.lock();
        if s.held_by(id, conn).is_none() {
            return Ok(false);
        }
        s.detach(id);
        if let Some(job) = s.jobs.get_mut(&id) {
            job.pri = pri;
            job.buries += 1;
        }
        s.attach(id, JobState::Buried, 0, None);
        Ok(true)
    }

    async fn touch(&self, conn: ConnId, id: JobId, now: Nanos) -> StoreResult<Option<Nanos>> {
        let mut s = self.lock();
        let Some(job) = s.held_by(id, conn) else {
            return Ok(None);
        };
        let deadline = now + u64::from(job.ttr_secs) * NANOS_PER_SEC;
        s.move_to(id, JobState::Reserved, deadline, Some(conn));
        Ok(Some(deadline))
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
            s.make_ready(id, now);
            if let Some(j) = s.jobs.get_mut(&id) {
                j.kicks += 1;
            }
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
        s.make_ready(id, now);
        if let Some(j) = s.jobs.get_mut(&id) {
            j.kicks += 1;
        }
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
        let s = self.lock();
        Ok(s.jobs.get(&id).map(|j| JobInfo {
            id,
            tube: j.tube.clone(),
            state: j.state,
            pri: j.pri,
            created: j.created,
            delay_secs: j.delay_secs,
            ttr_secs: j.ttr_secs,
            deadline: matches!(j.state, JobState::Delayed | JobState::Reserved).then_some(j.at),
            reserves: j.reserves.into(),
            timeouts: j.timeouts.into(),
            releases: j.releases.into(),
            buries: j.buries.into(),
            kicks: j.kicks.into(),
            now,
        }))
    }

    async fn tube_info(&self, tube: &TubeName, now: Nanos) -> StoreResult<Option<TubeInfo>> {
        let s = self.lock();
        Ok(s.tubes.get(tube).map(|t| TubeInfo {
            urgent: t.urgent,
            ready: t.ready.len() as u64,
            reserved: t.reserved,
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
        }))
    }

    async fn totals(&self) -> StoreResult<Totals> {
        Ok(self.lock().totals.clone())
    }

    async fn list_tubes(&self) -> StoreResult<Vec<TubeName>> {
        Ok(self.lock().order.as_slice().to_vec())
    }

    async fn pause(&self, tube: &TubeName, delay_secs: u32, now: Nanos) -> StoreResult<bool> {
        let mut s = self.lock();
        let Some(t) = s.tubes.get_mut(tube) else {
            return Ok(false);
        };
        let old = (t.pause > 0).then_some((t.pause_until, tube.clone()));
        // The reference stores a zero pause as 1 ns: "resume now", through the same path
        // that ends any pause, so waiters are woken.
        t.pause = (u64::from(delay_secs) * NANOS_PER_SEC).max(1);
        t.pause_until = now + t.pause;
        t.cmd_pause += 1;
        let until = t.pause_until;
        if let Some(old) = old {
            s.pauses.remove(&old);
        }
        s.pauses.insert((until, tube.clone()));
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

    async fn release_all(&self, conn: ConnId, now: Nanos) -> StoreResult<Vec<TubeName>> {
        Ok(self.lock().release_held(conn, now))
    }

    async fn close(
        &self,
        conn: ConnId,
        watching: &[TubeName],
        using: &TubeName,
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
        s.unref(using, Ref::Using);
        Ok(woken)
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
            s.make_ready(id, deadline);
            s.totals.job_timeouts += 1;
            if let Some(j) = s.jobs.get_mut(&id) {
                j.timeouts += 1;
                woken.push(j.tube.clone());
            }
        }
        while let Some((until, name)) = s.pauses.first().cloned() {
            if until > now {
                break;
            }
            s.pauses.remove(&(until, name.clone()));
            if let Some(t) = s.tubes.get_mut(&name) {
                t.pause = 0;
                t.pause_until = 0;
            }
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
}
