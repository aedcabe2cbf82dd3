//! The memory store's contents: jobs, tubes and the orderings beanstalkd's commands
//! need, and the two primitives every transition is made of, [`Contents::detach`] (take
//! a job out of the place its state puts it) and [`Contents::attach`] (put it in its
//! new place).
//!
//! Ownership: one `Contents` per [`super::MemoryStore`], behind its mutex.
//!
//! Invariants:
//! - a job is in exactly one place matching its state: its tube's `ready` set
//!   (pri, id), its tube's and the global `delayed` sets (due, id), its tube's and the
//!   global `reserved` sets and its owner's set (deadline, id), or its tube's `buried`
//!   FIFO;
//! - `totals` and each tube's counts equal the sizes of those places;
//! - a tube is in `tubes` (and `order`) while it has jobs, users or watchers, or is
//!   `default`;
//! - with a journal (a persisted store), every job and tube a transition changes is
//!   noted in it by `attach`, `remove_job` and the tube counters' setters, so a cut
//!   finds every change (see `journal.rs`; the cut itself is in `persist.rs`);
//! - `retained` holds the records of deleted jobs while retention is on, bounded by
//!   its limits (`retained.rs`);
//! - `cursors` holds a cursor per schedule that fired or skipped a tick and was not
//!   dropped (bounded by the schedules, at most 10,000; `schedules.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

// Every lookup of a job, tube or connection hashes its key: foldhash (seeded per
// process) instead of SipHash, which was the largest single cost of a command.
use foldhash::HashMap;

use bytes::Bytes;

use super::journal::{Journal, Stored};
use super::keys::KeyIndex;
use crate::protocol::TubeName;
use crate::store::policy::{DeadReason, Policies};
use crate::store::retention::{EventKind, History, RetainedSet};
use crate::store::{
    ConnId, Cursor, JobId, JobKey, JobState, Nanos, Reserved, ScheduleName, Totals, URGENT_PRI,
};
use crate::time::millis;
use crate::util::SwapList;

/// The two kinds of reference a connection holds on a tube.
#[derive(Clone, Copy, Debug)]
pub(super) enum Ref {
    Using,
    Watching,
}

/// One job. Kept small, because a queue may hold millions (each is boxed, so the job
/// table's spare capacity costs a pointer per slot, not a whole job): one time field
/// serves every state, the counters are 32-bit as in the reference. Delay and TTR are
/// 64-bit milliseconds: a client may write milliseconds, up to `u32::MAX` seconds.
#[derive(Debug)]
pub(super) struct Job {
    pub tube: TubeName,
    pub pri: u32,
    pub delay_ms: u64,
    pub ttr_ms: u64,
    pub state: JobState,
    /// What persistence holds of this job (always `Never` without a journal).
    pub stored: Stored,
    pub created: Nanos,
    /// By state: delayed, the due time; reserved, the TTR deadline; ready, when it
    /// became ready (a reserve reports how long it waited); buried, its position in
    /// the tube's buried FIFO.
    pub at: u64,
    /// The reserving connection's id while reserved, else 0 (ids start at 1).
    pub owner: u64,
    pub reserves: u32,
    pub timeouts: u32,
    pub releases: u32,
    pub buries: u32,
    pub kicks: u32,
    /// Its key and window, for a keyed put's job (boxed: most jobs have none).
    pub key: Option<Box<JobKey>>,
    /// Why a dead letter rule buried it, while it stays buried (store/policy.rs).
    pub dead: Option<DeadReason>,
    /// Its events, while retention is on (`retained.rs`; boxed: off, it costs a
    /// pointer).
    pub history: Option<Box<History>>,
    pub body: Bytes,
}

impl Job {
    pub fn owned_by(&self, conn: ConnId) -> bool {
        self.state == JobState::Reserved && self.owner == conn.0
    }
}

#[derive(Debug, Default)]
pub(super) struct Tube {
    pub ready: BTreeSet<(u32, JobId)>,
    pub delayed: BTreeSet<(Nanos, JobId)>,
    pub buried: BTreeMap<u64, JobId>,
    /// Its reserved jobs by (deadline, id): the order their TTRs run out.
    pub reserved: BTreeSet<(Nanos, JobId)>,
    pub urgent: u64,
    pub total_jobs: u64,
    pub using: u64,
    pub watching: u64,
    pub cmd_delete: u64,
    pub cmd_pause: u64,
    pub pause: u64,
    pub pause_until: Nanos,
    /// Reserves of its jobs and their summed wait as ready (µs), for the history.
    pub reserves: u64,
    pub wait_sum_us: u64,
    /// Puts into this tube whose bodies persistence is writing ahead of them: the
    /// tube's keys must outlive those writes.
    pub staging: u64,
}

impl Tube {
    pub fn job_count(&self) -> u64 {
        self.ready.len() as u64
            + self.delayed.len() as u64
            + self.buried.len() as u64
            + self.reserved.len() as u64
    }

    /// Whether persistence must keep this tube's keys: it has jobs, or bodies are being
    /// written into it ahead of their jobs.
    pub fn holds_data(&self) -> bool {
        self.job_count() > 0 || self.staging > 0
    }

    pub fn paused_at(&self, now: Nanos) -> bool {
        self.pause > 0 && self.pause_until > now
    }
}

#[derive(Debug, Default)]
pub(super) struct Contents {
    pub next_id: JobId,
    pub jobs: HashMap<JobId, Box<Job>>,
    pub tubes: HashMap<TubeName, Tube>,
    pub order: SwapList<TubeName>,
    pub delayed: BTreeSet<(Nanos, JobId)>,
    pub reserved: BTreeSet<(Nanos, JobId)>,
    pub by_conn: HashMap<ConnId, BTreeSet<(Nanos, JobId)>>,
    pub pauses: BTreeSet<(Nanos, TubeName)>,
    pub bury_seq: u64,
    pub totals: Totals,
    /// Keys and dedupe windows (`keys.rs`).
    pub keys: KeyIndex,
    /// Changes not yet persisted; `None` for a store that persists nothing.
    pub journal: Option<Box<Journal>>,
    /// The tubes' dead letter and backoff rules, applied where a reservation ends.
    pub policies: Arc<Policies>,
    /// Each schedule's cursor (`schedules.rs`).
    pub cursors: HashMap<ScheduleName, Cursor>,
    /// Whether retention is on: jobs record their events (`retained.rs`).
    pub recording: bool,
    /// Deleted jobs' records, bounded by the retention limits.
    pub retained: RetainedSet,
}

impl Contents {
    pub fn new(journal: bool) -> Contents {
        let mut state = Contents {
            next_id: 1,
            journal: journal.then(Box::default),
            ..Contents::default()
        };
        state.tube_entry(&TubeName::default_tube());
        state
    }

    pub fn tube_entry(&mut self, name: &TubeName) -> &mut Tube {
        if !self.tubes.contains_key(name) {
            self.order.insert(name.clone());
            self.totals.tubes += 1;
            self.note_tube(name);
        }
        self.tubes.entry(name.clone()).or_default()
    }

    /// Destroy `name` if nothing refers to it any more; its counters and pause go too.
    pub fn maybe_drop_tube(&mut self, name: &TubeName) {
        let Some(t) = self.tubes.get(name) else {
            return;
        };
        if name.as_str() == "default" || t.holds_data() || t.using > 0 || t.watching > 0 {
            return;
        }
        if t.pause > 0 {
            self.pauses.remove(&(t.pause_until, name.clone()));
        }
        self.tubes.remove(name);
        self.order.remove(name);
        self.totals.tubes -= 1;
        self.note_tube(name);
    }

    pub fn alloc_id(&mut self) -> JobId {
        let id = self.next_id;
        self.next_id += 1;
        self.note_counters();
        id
    }

    /// Take job `id` out of the place its state puts it, keeping counts true.
    /// The job's `state` field is left for the caller to overwrite.
    pub fn detach(&mut self, id: JobId) {
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
                tube.reserved.remove(&(job.at, id));
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
    pub fn attach(&mut self, id: JobId, state: JobState, due: Nanos, owner: Option<ConnId>) {
        let bury_seq = if state == JobState::Buried {
            self.bury_seq += 1;
            self.bury_seq
        } else {
            0
        };
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        // A reservation of a job persistence holds as ready is not written (see the
        // journal's header); one taken from the delayed or buried set is.
        let unwritten_reservation = state == JobState::Reserved
            && matches!(job.state, JobState::Ready | JobState::Reserved)
            && matches!(
                job.stored,
                Stored::As(JobState::Ready) | Stored::As(JobState::Reserved)
            );
        job.state = state;
        if state != JobState::Buried {
            job.dead = None;
        }
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
                tube.reserved.insert((due, id));
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
        if let Some(journal) = self.journal.as_deref_mut() {
            if unwritten_reservation {
                journal.job_reserved(id);
            } else {
                journal.job_changed(id, &job.tube);
            }
        }
    }

    pub fn move_to(&mut self, id: JobId, state: JobState, due: Nanos, owner: Option<ConnId>) {
        self.detach(id);
        self.attach(id, state, due, owner);
    }

    /// Move job `id` to ready, having become ready at `since` (which may be earlier
    /// than now: the end of its delay, or its lapsed deadline).
    pub fn make_ready(&mut self, id: JobId, since: Nanos) {
        self.move_to(id, JobState::Ready, since, None);
    }

    /// A put into `tube` whose body was written ahead ended (made or abandoned).
    pub fn unstage(&mut self, tube: &TubeName) {
        let t = self.tube_entry(tube);
        t.staging = t.staging.saturating_sub(1);
    }

    /// A job that was never made (a put begun with its body written ahead, then
    /// abandoned) may have left that body in persistence: the next cut removes it.
    pub fn note_unmade(&mut self, id: JobId, tube: &TubeName) {
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.job_removed(id, tube, Stored::Unknown);
        }
    }

    /// Remove a detached job for good (a delete); its tube may then be destroyed.
    pub fn remove_job(&mut self, id: JobId) -> Option<Box<Job>> {
        let job = self.jobs.remove(&id)?;
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.job_removed(id, &job.tube, job.stored);
        }
        Some(job)
    }

    pub fn held_by(&self, id: JobId, conn: ConnId) -> Option<&Job> {
        self.jobs
            .get(&id)
            .map(|j| &**j)
            .filter(|j| j.owned_by(conn))
    }

    pub fn reserve_id(&mut self, conn: ConnId, id: JobId, now: Nanos) -> Option<Reserved> {
        let last_change = self.journal.as_ref().map(|j| j.last_change());
        let job = self.jobs.get(&id)?;
        let ttr = millis(job.ttr_ms);
        // A delayed or buried job taken by reserve-job never waited as ready.
        let waited = match job.state {
            JobState::Ready => now.saturating_sub(job.at),
            _ => 0,
        };
        let deadline = now + ttr;
        let job = self.jobs.get_mut(&id)?;
        job.reserves += 1;
        self.move_to(id, JobState::Reserved, deadline, Some(conn));
        self.note(id, EventKind::Reserve, conn, now);
        let job = self.jobs.get(&id)?;
        // The per-tube tally of the console's history: one more lookup of a tube
        // already in cache, under the lock this reserve holds anyway.
        if let Some(t) = self.tubes.get_mut(&job.tube) {
            t.reserves += 1;
            t.wait_sum_us += waited / 1_000;
        }
        Some(Reserved {
            id,
            tube: job.tube.clone(),
            body: job.body.clone(),
            deadline,
            waited: Some(waited),
            last_change,
        })
    }

    /// Place a detached (or new) job: delayed when `delay_ms > 0`, else ready.
    pub fn attach_after(&mut self, id: JobId, delay_ms: u64, now: Nanos) {
        if delay_ms > 0 {
            self.attach(id, JobState::Delayed, now + millis(delay_ms), None);
        } else {
            self.attach(id, JobState::Ready, now, None);
        }
    }

    /// Drop one use or watch reference to `tube`, destroying it if that was the last.
    pub fn unref(&mut self, tube: &TubeName, kind: Ref) {
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
    pub fn release_held(&mut self, conn: ConnId, now: Nanos) -> Vec<TubeName> {
        let Some(held) = self.by_conn.get(&conn).cloned() else {
            return Vec::new();
        };
        let mut tubes = Vec::new();
        for (_, id) in held {
            self.note(id, EventKind::HolderClosed, conn, now);
            if self.dead_letter(id, now) {
                continue;
            }
            self.make_ready(id, now);
            if let Some(j) = self.jobs.get(&id) {
                tubes.push(j.tube.clone());
            }
        }
        tubes.sort();
        tubes.dedup();
        tubes
    }

    pub fn peek_body(&self, id: JobId) -> Option<(JobId, Bytes)> {
        self.jobs.get(&id).map(|j| (id, j.body.clone()))
    }

    /// Job `id` changed in a way its place does not show (a field of a delayed or
    /// buried job): persistence must write it again.
    pub fn note_job(&mut self, id: JobId) {
        if let (Some(journal), Some(job)) = (self.journal.as_deref_mut(), self.jobs.get(&id)) {
            journal.job_changed(id, &job.tube);
        }
    }

    /// A tube's persisted figures changed (its counters, its pause, its existence).
    pub fn note_tube(&mut self, name: &TubeName) {
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.tube_changed(name);
        }
    }

    /// The namespace's counters changed (ids, totals).
    pub fn note_counters(&mut self) {
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.counters_changed();
        }
    }
}
