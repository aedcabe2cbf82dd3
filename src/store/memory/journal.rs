//! Change tracking for a memory store whose changes are persisted (Redis leader mode,
//! `-b DIR`): which jobs and tubes changed since the last cut, and what persistence
//! already holds of each job.
//!
//! A cut (`Contents::cut`, in `persist.rs` with the rest of what persistence asks
//! of the store's contents) takes the changed jobs and tubes as they are at that moment,
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
//!   before leaves. A failed cut (`Contents::cut_failed`, told in the order the cuts
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
//!   returns them at their TTR);
//! - every schedule whose cursor changed since the last written cut is in `schedules`,
//!   with the jobs its ticks made meanwhile: the cut that writes the cursor writes
//!   those jobs too (`persist.rs`), so persistence never holds a tick's job without
//!   its cursor (a duplicate at the next fire) nor its cursor a cut before its job.

use foldhash::{HashMap, HashSet};

use bytes::Bytes;

use crate::protocol::TubeName;
use crate::store::keys::{Key, KeyRecord};
use crate::store::policy::DeadReason;
use crate::store::{Change, Cursor, JobId, JobKey, JobState, Nanos, ScheduleName};

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

/// The changes noted since the last written cut. The transitions note them through
/// the methods below; the cut (`persist.rs`) takes them out.
#[derive(Debug, Default)]
pub struct Journal {
    pub(super) last: Change,
    pub(super) jobs: HashSet<JobId>,
    /// Keyed by job and tube: a job moved to another tube and then deleted is gone
    /// from each tube persistence may hold it in.
    pub(super) gone: HashMap<(JobId, TubeName), Gone>,
    /// Jobs moved to another tube since the last written cut: the tubes persistence
    /// may still hold them in (and as what). Written in the same cut as the job.
    pub(super) moved: HashMap<JobId, Vec<Gone>>,
    pub(super) tubes: HashSet<TubeName>,
    /// Keys whose slot changed (a job keyed, a window opened or ended).
    pub(super) keys: HashSet<(TubeName, Key)>,
    /// Reservations not written (see the module header).
    reserved: HashSet<JobId>,
    /// Schedules whose cursor changed (or went), and the jobs their ticks made since
    /// the last written cut: at most a few per schedule, since the scheduler waits for
    /// a tick to be durable before it fires that schedule's next one.
    pub(super) schedules: HashMap<ScheduleName, Vec<JobId>>,
    /// Retained records kept (true) or evicted (false) since the last written cut.
    pub(super) retained: HashMap<JobId, bool>,
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

    pub(super) fn gone_from(&mut self, g: Gone) {
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

    /// What `key` names in `tube` changed (`store/memory/keys.rs`).
    pub fn key_changed(&mut self, tube: &TubeName, key: &Key) {
        self.note();
        self.keys.insert((tube.clone(), key.clone()));
    }

    /// The cursor of schedule `name` changed (or went); `made`: the job its tick made.
    pub fn schedule_changed(&mut self, name: &ScheduleName, made: Option<JobId>) {
        self.note();
        let jobs = match self.schedules.get_mut(name) {
            Some(jobs) => jobs,
            None => self.schedules.entry(name.clone()).or_default(),
        };
        jobs.extend(made);
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
    /// Job `id`'s record was kept by retention (its delete is noted apart).
    pub fn retained_kept(&mut self, id: JobId) {
        self.note();
        self.retained.insert(id, true);
    }

    /// The record of job `id` was evicted.
    pub fn retained_gone(&mut self, id: JobId) {
        self.note();
        self.retained.insert(id, false);
    }

    pub(super) fn note(&mut self) {
        self.last = self.last.next();
    }
}

/// What persistence holds of a job in one tube, told twice: the same, or unknown.
pub(super) fn merge(a: Stored, b: Stored) -> Stored {
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
    pub delay_ms: u64,
    pub ttr_ms: u64,
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
    /// Its key and window (a keyed put's job).
    pub key: Option<JobKey>,
    /// Why a dead letter rule buried it (buried jobs only).
    pub dead: Option<DeadReason>,
    pub body: Bytes,
    /// What persistence held of the job before this record.
    pub was: Stored,
}

impl JobRecord {
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
/// `Contents::restore`), as in beanstalkd.
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

/// One schedule's cursor as persistence keeps it (or its removal).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScheduleRecord {
    pub name: ScheduleName,
    /// The cursor now (default when `gone`).
    pub cursor: Cursor,
    /// The schedule's cursor was dropped: persistence forgets it.
    pub gone: bool,
    /// The jobs its ticks made that this cut carries in `jobs` (so a failed cut puts
    /// them back together; a sink writes them as jobs, not here). Empty when read back.
    pub jobs: Vec<JobId>,
}

/// The changes one batch writes.
#[derive(Debug, Default)]
pub struct Cut {
    /// Cursors changed since the last written cut. Each one's jobs are in `jobs`, past
    /// the cut's limit if need be; a sink writing records one after the other writes
    /// these first (a torn write then loses a tick, never doubles one).
    pub schedules: Vec<ScheduleRecord>,
    pub jobs: Vec<JobRecord>,
    pub gone: Vec<Gone>,
    /// Jobs of `jobs` that moved to another tube: the tubes they left (a sink that
    /// keeps a job's keys per tube removes them there; the job itself lives on).
    pub moved: Vec<Gone>,
    pub tubes: Vec<TubeRecord>,
    /// Keys whose slot changed, as they are now.
    pub keys: Vec<KeyRecord>,
    pub counters: StoreCounters,
    /// When the cut holds every change noted so far: the last of them. `None` when
    /// its size bound left changes for the next cut.
    pub last_change: Option<Change>,
}

impl Cut {
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
            && self.schedules.is_empty()
            && self.gone.is_empty()
            && self.tubes.is_empty()
            && self.moved.is_empty()
            && self.keys.is_empty()
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
    /// Open dedupe windows (live jobs' keys come with their jobs); past ones are
    /// dropped at the restore.
    pub windows: Vec<KeyRecord>,
    /// Schedules' cursors.
    pub cursors: Vec<(ScheduleName, Cursor)>,
}
