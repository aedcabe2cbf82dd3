//! The values a [`Store`](super::Store) takes and gives besides jobs' ids: a new job, a
//! reservation, a job's and a tube's figures, the totals of `stats`, a job's state, and
//! the `-b` log's figures its sink writes and the store's commands read.
//!
//! Invariants: plain data (no I/O); a figure means what the reference's `stats*` reply
//! of the same name means.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;

use super::{Change, JobId};
use crate::protocol::TubeName;
use crate::time::Nanos;
use crate::util::lock;

/// What a store whose changes go to a local log (`-b`) shows of it, written by the
/// log's sink, read by the store's commands: the `binlog-*` figures of `stats` (the
/// reference's meanings: the oldest and the current file's number, records written,
/// compaction's rewrites included, and of those rewritten, and `-s`), whether the log
/// has room for new jobs, and which file holds each job (`stats-job`'s `file`).
#[derive(Debug, Default)]
pub struct LogFigures {
    pub oldest_index: AtomicU64,
    pub current_index: AtomicU64,
    pub records_migrated: AtomicU64,
    pub records_written: AtomicU64,
    pub max_size: AtomicU64,
    /// The log's disk is full: a put answers OUT_OF_MEMORY at once (nothing else is
    /// refused: other changes are written into the space the log holds in reserve).
    pub full: AtomicBool,
    /// The file holding each live job's record with its body, as beanstalkd's `file`
    /// names the file that holds a job. Kept by the sink after each write (its only
    /// home: the sink reads it back to know which jobs a compaction must move).
    pub job_files: Mutex<foldhash::HashMap<JobId, u64>>,
}

impl LogFigures {
    /// The file holding job `id`: the current one for a job whose first write is still
    /// on its way there.
    pub fn job_file(&self, id: JobId) -> u64 {
        let files = lock(&self.job_files);
        match files.get(&id) {
            Some(&n) => n,
            None => self.current_index.load(Ordering::Relaxed),
        }
    }
}

/// The state of a job, as `stats-job` names it (and the operator API's JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Ready,
    Reserved,
    Delayed,
    Buried,
}

impl JobState {
    pub const ALL: [JobState; 4] = [
        JobState::Ready,
        JobState::Reserved,
        JobState::Delayed,
        JobState::Buried,
    ];

    pub fn name(self) -> &'static str {
        match self {
            JobState::Ready => "ready",
            JobState::Reserved => "reserved",
            JobState::Delayed => "delayed",
            JobState::Buried => "buried",
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A state named otherwise than `stats-job` names them.
#[derive(Debug, thiserror::Error)]
#[error("state {0:?}: expected ready, delayed, buried or reserved")]
pub struct UnknownState(pub String);

impl std::str::FromStr for JobState {
    type Err = UnknownState;

    fn from_str(s: &str) -> Result<JobState, UnknownState> {
        JobState::ALL
            .into_iter()
            .find(|state| state.name() == s)
            .ok_or_else(|| UnknownState(s.to_string()))
    }
}

/// A job to insert.
#[derive(Clone, Debug)]
pub struct NewJob {
    pub tube: TubeName,
    pub pri: u32,
    /// Milliseconds (the finest unit a client can write, docs/EXTENSIONS.md).
    pub delay_ms: u64,
    /// Milliseconds, already raised to at least [`MIN_TTR_MS`].
    pub ttr_ms: u64,
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
    /// The store's last change before this reservation (`None` for a store that
    /// persists nothing in batches): the RESERVED reply may go out once that change is
    /// persisted, while this instance still holds its lease (the engine's
    /// acknowledgement, `engine::Ack`). The reservation itself need not be: a leader
    /// that takes over makes every reserved job ready again, persisted reservation or
    /// not (docs/LEADER.md).
    pub last_change: Option<Change>,
}

/// A job's figures for `stats-job` (the engine turns times into ages and time left).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub id: JobId,
    pub tube: TubeName,
    pub state: JobState,
    pub pri: u32,
    pub created: Nanos,
    pub delay_ms: u64,
    pub ttr_ms: u64,
    /// Due time when delayed, TTR deadline when reserved.
    pub deadline: Option<Nanos>,
    pub reserves: u64,
    pub timeouts: u64,
    pub releases: u64,
    pub buries: u64,
    pub kicks: u64,
    /// The number of the log file holding the job (`-b`); 0 for a store without one.
    pub file: u64,
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
    /// Reserves of this tube's jobs and the sum of how long they had waited as ready,
    /// in microseconds, since the tube was made (the console's history takes their
    /// deltas; not a `stats-tube` figure). 0 for a store that keeps no such tally
    /// (shared mode).
    pub reserves: u64,
    pub wait_sum_us: u64,
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
