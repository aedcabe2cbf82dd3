//! Change tracking for a memory store whose changes are persisted (Redis leader mode,
//! `-b DIR`): which jobs and tubes changed since the last cut, and what persistence
//! already holds of each job.
//!
//! A cut ([`State::cut`]) takes the changed jobs and tubes as they are at that moment,
//! as records a sink writes in one batch. Changes coalesce: a job changed five times
//! between two cuts is written once, and a job put and deleted between two cuts never
//! reaches persistence at all. Each noted change takes the next [`Change`]; a cut that
//! holds every change noted so far says which was the last (`last_change`), and a
//! reply that depended on change `n` may be sent once a cut holding `n` was written.
//!
//! Invariants:
//! - a job's `stored` says what persistence holds once every cut taken so far has
//!   been written: several cuts may be in flight at once, each written only after the
//!   one before it (leader mode's batch sequence), so each is built on what the one
//!   before leaves. A failed cut ([`State::cut_failed`], told in the order the cuts
//!   were taken, and for every cut in flight after it, which cannot apply either)
//!   makes its jobs `Unknown` (the write may or may not have landed) until a later cut
//!   rewrites them whole; no new cut is taken until every cut in flight has answered;
//! - every job or tube changed since the last written cut is in `jobs`/`gone`/`tubes`,
//!   except a reservation of a job persistence holds as ready (or reserved): that is in
//!   `reserved`, takes no change number and is written by no cut until
//!   [`Journal::flush_reservations`] (a clean stop) or another change of the job. A
//!   takeover or restart makes every reserved job ready whether or not its reservation
//!   was written, so writing it would cost Redis three commands a job and buy nothing;
//!   a clean stop writes them so that a client's jobs stay held (the shared mode
//!   returns them at their TTR).

use foldhash::{HashMap, HashSet};

use bytes::Bytes;

use super::state::{Job, State};
use crate::protocol::TubeName;
use crate::store::{Change, JobId, JobState, Nanos};

/// What persistence holds of one job.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Stored {
    /// Nothing: the job was made after the last written cut.
    #[default]
    Never,
    /// The job, in this state (so a sink knows which set to take it out of).
    As(JobState),
    /// A write of this job failed without an answer: it may hold the old or the new
    /// record. A sink rewrites the job whole (and removes it from every state's set).
    Unknown,
    /// Only its body, written ahead of the job (a large put, see `DurableStore`): the
    /// job is in no state's set yet, and its body need not be written again.
    BodyOnly,
}

/// The changes noted since the last written cut.
#[derive(Debug, Default)]
pub struct Journal {
    last: Change,
    jobs: HashSet<JobId>,
    /// Keyed by job and tube: a job moved to another tube and then deleted is gone
    /// from each tube persistence may hold it in.
    gone: HashMap<(JobId, TubeName), Gone>,
    /// Jobs moved to another tube since the last written cut: the tubes persistence
    /// may still hold them in (and as what). Written in the same cut as the job.
    moved: HashMap<JobId, Vec<Gone>>,
    tubes: HashSet<TubeName>,
    /// Reservations not written (see the module header).
    reserved: HashSet<JobId>,
}

impl Journal {
    pub fn job_changed(&mut self, id: JobId, tube: &TubeName) {
        self.note();
        self.reserved.remove(&id);
        self.jobs.insert(id);
        if !self.tubes.contains(tube) {
            self.tubes.insert(tube.clone());
        }
    }

    pub fn job_removed(&mut self, id: JobId, tube: &TubeName, stored: Stored) {
        self.note();
        self.jobs.remove(&id);
        self.reserved.remove(&id);
        if stored != Stored::Never {
            self.gone_from(Gone {
                id,
                tube: tube.clone(),
                was: stored,
            });
        }
        for g in self.moved.remove(&id).unwrap_or_default() {
            self.gone_from(g);
        }
        self.tube_changed(tube);
    }

    /// Job `id`, which persistence holds as ready or reserved, was reserved (or
    /// touched): not a change a reply waits for, and written only by
    /// [`Journal::flush_reservations`] unless the job changes otherwise meanwhile.
    pub fn job_reserved(&mut self, id: JobId) {
        if !self.jobs.contains(&id) {
            self.reserved.insert(id);
        }
    }

    /// Make every reservation not yet written a change the next cut writes (a clean
    /// stop: the jobs clients hold stay held in persistence).
    /// Always a change, so that a clean stop waits for a batch taken after it.
    pub fn flush_reservations(&mut self) {
        self.note();
        let ids: Vec<JobId> = self.reserved.drain().collect();
        self.jobs.extend(ids);
    }

    /// Job `id` left tube `from`, where persistence holds it as `stored`, for another
    /// tube (a move keeps the id): its keys in `from` go in the cut that writes it.
    pub fn job_moved(&mut self, id: JobId, from: &TubeName, stored: Stored) {
        self.note();
        if stored != Stored::Never {
            let entries = self.moved.entry(id).or_default();
            match entries.iter_mut().find(|g| g.tube == *from) {
                Some(g) => g.was = merge(g.was, stored),
                None => entries.push(Gone {
                    id,
                    tube: from.clone(),
                    was: stored,
                }),
            }
        }
        self.tube_changed(from);
    }

    fn gone_from(&mut self, g: Gone) {
        let key = (g.id, g.tube.clone());
        let was = match self.gone.get(&key) {
            Some(old) => merge(old.was, g.was),
            None => g.was,
        };
        self.gone.insert(key, Gone { was, ..g });
    }

    pub fn tube_changed(&mut self, name: &TubeName) {
        self.note();
        if !self.tubes.contains(name) {
            self.tubes.insert(name.clone());
        }
    }

    /// The namespace's counters are in every cut; a change to them is still a change a
    /// reply may depend on (a consumed id).
    pub fn counters_changed(&mut self) {
        self.note();
    }

    /// The last change noted.
    pub fn last_change(&self) -> Change {
        self.last
    }

    /// A change: it takes the next number.
    fn note(&mut self) {
        self.last = self.last.next();
    }
}

/// What persistence holds of a job in one tube, told twice: the same, or unknown.
fn merge(a: Stored, b: Stored) -> Stored {
    match (a, b) {
        (Stored::Never, x) | (x, Stored::Never) => x,
        (x, y) if x == y => x,
        _ => Stored::Unknown,
    }
}

/// One job as persistence keeps it: every field of the memory store's job. `at` means
/// what it means there: the due time (delayed), the TTR deadline (reserved), when it
/// became ready (ready), its position in the buried FIFO (buried).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRecord {
    pub id: JobId,
    pub tube: TubeName,
    pub pri: u32,
    pub delay_secs: u32,
    pub ttr_secs: u32,
    pub state: JobState,
    pub created: Nanos,
    pub at: u64,
    /// The holding connection while reserved (0 otherwise).
    pub owner: u64,
    pub reserves: u32,
    pub timeouts: u32,
    pub releases: u32,
    pub buries: u32,
    pub kicks: u32,
    pub body: Bytes,
    /// What persistence held of the job before this record.
    pub was: Stored,
}

impl JobRecord {
    fn of(id: JobId, j: &Job) -> JobRecord {
        JobRecord {
            id,
            tube: j.tube.clone(),
            pri: j.pri,
            delay_secs: j.delay_secs,
            ttr_secs: j.ttr_secs,
            state: j.state,
            created: j.created,
            at: j.at,
            owner: j.owner,
            reserves: j.reserves,
            timeouts: j.timeouts,
            releases: j.releases,
            buries: j.buries,
            kicks: j.kicks,
            body: j.body.clone(),
            was: j.stored,
        }
    }

    /// Whether persistence may lack this job's body (a sink writes it then).
    pub fn needs_body(&self) -> bool {
        !matches!(self.was, Stored::As(_) | Stored::BodyOnly)
    }
}

/// A job deleted since the last written cut that persistence holds (or may hold).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gone {
    pub id: JobId,
    pub tube: TubeName,
    pub was: Stored,
}

/// One tube as persistence keeps it. A tube is kept while it exists in memory (it
/// holds jobs, a connection uses or watches it, or it is `default`), so its keys do
/// not come and go with its jobs; references die with their connections, so a tube
/// that only a connection kept alive is dropped when a restart reads it back (see
/// [`State::restore`]), as in beanstalkd.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TubeRecord {
    pub name: TubeName,
    pub kept: bool,
    pub total_jobs: u64,
    pub cmd_delete: u64,
    pub cmd_pause: u64,
    /// The pause as set (0: not paused) and when it ends.
    pub pause: u64,
    pub pause_until: Nanos,
    /// A time at or before the tube's earliest due time (a delayed job, a TTR deadline,
    /// the end of a pause); `None` when nothing in it is timed. May be early.
    pub next_due: Option<Nanos>,
}

/// The namespace's counters, in every cut.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// The last id handed out (0: none yet).
    pub last_id: JobId,
    pub bury_seq: u64,
    pub total_jobs: u64,
    pub job_timeouts: u64,
}

/// The changes one batch writes.
#[derive(Debug, Default)]
pub struct Cut {
    pub jobs: Vec<JobRecord>,
    pub gone: Vec<Gone>,
    /// Jobs of `jobs` that moved to another tube: the tubes they left (a sink that
    /// keeps a job's keys per tube removes them there; the job itself lives on).
    pub moved: Vec<Gone>,
    pub tubes: Vec<TubeRecord>,
    pub counters: StoreCounters,
    /// When the cut holds every change noted so far: the last of them. `None` when
    /// its size bound left changes for the next cut.
    pub last_change: Option<Change>,
}

impl Cut {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.gone.is_empty()
            && self.tubes.is_empty()
            && self.moved.is_empty()
    }
}

/// How much one cut may carry: a batch is built in memory and sent whole.
#[derive(Clone, Copy, Debug)]
pub struct CutLimit {
    pub records: usize,
    /// Bytes of bodies the cut will write (jobs persistence does not hold yet).
    pub body_bytes: usize,
}

impl Default for CutLimit {
    fn default() -> Self {
        CutLimit {
            records: 20_000,
            body_bytes: 16 << 20,
        }
    }
}

/// What a loaded namespace hands the store to start from.
#[derive(Debug, Default)]
pub struct StoreSnapshot {
    /// Every job; `was` is ignored (each is stored as the state it was read in).
    pub jobs: Vec<JobRecord>,
    /// Tubes in list order (`default` is added when missing).
    pub tubes: Vec<TubeRecord>,
    pub counters: StoreCounters,
}

impl State {
    /// The last change noted ([`Change::NONE`] without a journal).
    pub fn last_change(&self) -> Change {
        self.journal
            .as_ref()
            .map_or(Change::NONE, |j| j.last_change())
    }

    /// Take the changes since the last written cut (at most `limit`'s worth), as they
    /// are now. Each job in the cut is marked as stored in its current state; a failed
    /// write undoes that with [`State::cut_failed`].
    pub fn cut(&mut self, limit: CutLimit) -> Cut {
        let counters = self.counters();
        let Some(journal) = self.journal.as_deref_mut() else {
            return Cut::default();
        };
        let mut cut = Cut {
            counters,
            ..Cut::default()
        };
        let mut body_bytes = 0;
        let ids: Vec<JobId> = journal.jobs.iter().copied().collect();
        for id in ids {
            if cut.jobs.len() + cut.gone.len() >= limit.records || body_bytes >= limit.body_bytes {
                break;
            }
            journal.jobs.remove(&id);
            if let Some(job) = self.jobs.get_mut(&id) {
                for g in journal.moved.remove(&id).unwrap_or_default() {
                    if g.tube == job.tube {
                        // Moved back where persistence holds it.
                        job.stored = merge(job.stored, g.was);
                    } else {
                        cut.moved.push(g);
                    }
                }
                let record = JobRecord::of(id, job);
                if record.needs_body() {
                    body_bytes += record.body.len();
                }
                job.stored = Stored::As(job.state);
                cut.jobs.push(record);
            }
        }
        let gone: Vec<(JobId, TubeName)> = journal.gone.keys().cloned().collect();
        for key in gone {
            if cut.jobs.len() + cut.gone.len() >= limit.records {
                break;
            }
            if let Some(g) = journal.gone.remove(&key) {
                cut.gone.push(g);
            }
        }
        // Tubes go with the jobs of theirs in this cut; only once no job is left over
        // may a tube record (which says whether the tube still has jobs) be final.
        if journal.jobs.is_empty() && journal.gone.is_empty() {
            let names: Vec<TubeName> = journal.tubes.drain().collect();
            cut.last_change = Some(journal.last);
            for name in names {
                cut.tubes.push(match self.tubes.get(&name) {
                    // Kept as long as the tube exists here (it holds jobs, or a
                    // connection refers to it): a tube going empty between two jobs
                    // costs persistence nothing. Tubes that only connections kept are
                    // dropped at the next restart (`State::restore`).
                    Some(t) => TubeRecord {
                        kept: true,
                        total_jobs: t.total_jobs,
                        cmd_delete: t.cmd_delete,
                        cmd_pause: t.cmd_pause,
                        pause: t.pause,
                        pause_until: t.pause_until,
                        next_due: [
                            t.delayed.first().map(|&(d, _)| d),
                            t.reserved.first().map(|&(d, _)| d + 1),
                            (t.pause > 0).then_some(t.pause_until),
                        ]
                        .into_iter()
                        .flatten()
                        .min(),
                        name,
                    },
                    None => TubeRecord {
                        kept: false,
                        total_jobs: 0,
                        cmd_delete: 0,
                        cmd_pause: 0,
                        pause: 0,
                        pause_until: 0,
                        next_due: None,
                        name,
                    },
                });
            }
        }
        cut
    }

    /// Writing `cut` failed, and may or may not have landed: every job in it is now of
    /// unknown standing in persistence and is written again, whole, by the next cut.
    pub fn cut_failed(&mut self, cut: &Cut) {
        let Some(journal) = self.journal.as_deref_mut() else {
            return;
        };
        for r in &cut.jobs {
            if let Some(job) = self.jobs.get_mut(&r.id) {
                job.stored = Stored::Unknown;
                journal.jobs.insert(r.id);
            } else if let Some(g) = journal.gone.get_mut(&(r.id, r.tube.clone())) {
                // Deleted after the cut was taken: its removal must clear every set.
                g.was = Stored::Unknown;
            }
        }
        for g in cut.gone.iter().chain(&cut.moved) {
            let unknown = Gone {
                was: Stored::Unknown,
                ..g.clone()
            };
            match self.jobs.get(&g.id) {
                // A move not known to have landed: the job may still be in that tube.
                Some(_) => journal.moved.entry(g.id).or_default().push(unknown),
                None => journal.gone_from(unknown),
            }
        }
        for t in &cut.tubes {
            journal.tubes.insert(t.name.clone());
        }
        journal.note();
    }

    fn counters(&self) -> StoreCounters {
        StoreCounters {
            last_id: self.next_id.saturating_sub(1),
            bury_seq: self.bury_seq,
            total_jobs: self.totals.total_jobs,
            job_timeouts: self.totals.job_timeouts,
        }
    }

    /// A journaled state holding `snap`, as a restart finds it: jobs that were
    /// reserved go back to ready at `now` (their connections died with the process
    /// that served them), which the first cut writes.
    pub fn restore(snap: StoreSnapshot, now: Nanos) -> State {
        let mut s = State::new(true);
        // Building the state is not a change: the journal is set aside meanwhile (a
        // namespace of a million jobs would otherwise note each of them), and told
        // afterwards only what this start changed.
        let mut journal = s.journal.take();
        // Only tubes that hold jobs come back (and `default`): the connections that kept
        // others alive are gone. The rest are dropped from persistence by the first cut.
        let with_jobs: std::collections::HashSet<&TubeName> =
            snap.jobs.iter().map(|r| &r.tube).collect();
        let mut dropped = Vec::new();
        for t in &snap.tubes {
            if t.name.as_str() != "default" && !with_jobs.contains(&t.name) {
                dropped.push(t.name.clone());
                continue;
            }
            let tube = s.tube_entry(&t.name);
            tube.total_jobs = t.total_jobs;
            tube.cmd_delete = t.cmd_delete;
            tube.cmd_pause = t.cmd_pause;
            if t.pause > 0 {
                tube.pause = t.pause;
                tube.pause_until = t.pause_until;
                s.pauses.insert((t.pause_until, t.name.clone()));
            }
        }
        s.next_id = snap.counters.last_id + 1;
        s.bury_seq = snap.counters.bury_seq;
        s.totals.total_jobs = snap.counters.total_jobs;
        s.totals.job_timeouts = snap.counters.job_timeouts;
        let mut jobs = snap.jobs;
        // Inserted in the order of the ready sets they mostly go to, a million jobs
        // append to their B-trees rather than land at random places in them.
        jobs.sort_unstable_by_key(|r| (r.pri, r.id));
        s.jobs.reserve(jobs.len());
        let mut changed: Vec<JobId> = Vec::new();
        // Buried jobs keep their FIFO order through their sequence numbers, whatever
        // order they are read in.
        for r in jobs {
            s.next_id = s.next_id.max(r.id + 1);
            s.tube_entry(&r.tube);
            let tube_name = r.tube.clone();
            let (state, at) = match r.state {
                JobState::Reserved => {
                    changed.push(r.id);
                    (JobState::Ready, now)
                }
                state => (state, r.at),
            };
            s.jobs.insert(
                r.id,
                Box::new(Job {
                    tube: r.tube,
                    pri: r.pri,
                    delay_secs: r.delay_secs,
                    ttr_secs: r.ttr_secs,
                    state,
                    stored: Stored::As(r.state),
                    created: r.created,
                    at,
                    owner: 0,
                    reserves: r.reserves,
                    timeouts: r.timeouts,
                    releases: r.releases,
                    buries: r.buries,
                    kicks: r.kicks,
                    body: r.body,
                }),
            );
            if state == JobState::Buried {
                // `attach` would number it anew: place it at its own position.
                s.bury_seq = s.bury_seq.max(at);
                if let Some(tube) = s.tubes.get_mut(&tube_name) {
                    tube.buried.insert(at, r.id);
                }
                s.totals.buried += 1;
            } else {
                s.attach(r.id, state, at, None);
            }
        }
        // The first cut writes only what this start changed (reservations returned to
        // ready), plus every tube, to repair its due entry.
        if let Some(j) = journal.as_deref_mut() {
            j.note();
            j.jobs.extend(changed);
            for name in s.order.as_slice().iter().chain(&dropped) {
                j.tubes.insert(name.clone());
            }
        }
        s.journal = journal;
        s
    }
}
