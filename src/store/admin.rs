//! What the operator API asks of a store besides beanstalkd's transitions: a tube's jobs
//! in one state, in the order the server takes them, from a cursor ([`ListQuery`],
//! [`ListPage`]); one job's figures with its body size and holder ([`JobEntry`]); and
//! changes in place ([`Edit`]: move, priority, delay, bury), each one atomic step.
//!
//! Invariants:
//! - a [`ListKey`] is the sort key of a listed job in its state's order (ready: (pri,
//!   id); delayed: (due, id); buried: (FIFO position, id); reserved: (deadline, id)),
//!   so a page after it starts where the last one ended in O(log n), whatever the page;
//! - a page holds at most `limit` jobs and looks at most `scan` jobs, so a call is
//!   bounded however large the tube.

use bytes::Bytes;

use super::keys::Key;
use super::{JobId, JobInfo, JobState, Nanos};
use crate::protocol::TubeName;

/// The largest page a listing returns.
pub const MAX_LIST: usize = 1_000;

/// Where a listing resumes: the sort key of the last job of the previous page.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListKey {
    /// Priority (ready), due time in ns (delayed), FIFO position (buried), deadline in
    /// ns (reserved).
    pub primary: u64,
    pub id: JobId,
}

/// One listing (or search) request on one tube and state.
#[derive(Clone, Debug)]
pub struct ListQuery {
    pub tube: TubeName,
    pub state: JobState,
    /// Resume after this key (`None`: from the start).
    pub after: Option<ListKey>,
    /// At most this many jobs in the page.
    pub limit: usize,
    /// Look at most this many jobs (the page may end earlier with `next` set).
    pub scan: usize,
    /// Only jobs whose body contains these bytes.
    pub contains: Option<Bytes>,
}

/// A page of a listing.
#[derive(Clone, Debug, Default)]
pub struct ListPage {
    pub jobs: Vec<JobEntry>,
    /// Jobs looked at.
    pub scanned: u64,
    /// Where the next page starts; `None` when the state's jobs are all seen.
    pub next: Option<ListKey>,
}

/// Who holds a reserved job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservedBy {
    /// The instance whose connection holds it (shared mode); `None`: this one.
    pub instance: Option<String>,
    pub conn: u64,
}

/// A job's `stats-job` figures, its body size, its holder, its sort key and, for a
/// keyed job, its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEntry {
    pub info: JobInfo,
    pub body_size: u64,
    pub holder: Option<ReservedBy>,
    pub key: ListKey,
    /// The key a keyed put gave the job (docs/EXTENSIONS.md, *Keys*).
    pub job_key: Option<Key>,
    /// Why a dead letter rule buried it (store/policy.rs), while it stays buried.
    pub dead: Option<crate::store::policy::DeadReason>,
    /// Its events so far, while retention is on (store/retention.rs).
    pub history: Option<crate::store::retention::History>,
}

/// A change in place to one job (the operator API's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// To another tube, keeping id, priority, remaining delay, TTR and counters
    /// (ready, delayed or buried).
    Move(TubeName),
    /// New priority (ready, delayed or buried).
    Pri(u32),
    /// Delay from now (ready or delayed); 0 makes it ready.
    Delay(u32),
    /// Bury in place (ready or delayed).
    Bury,
}

impl Edit {
    /// Whether a job in `state` may take this change.
    pub fn allowed_in(&self, state: JobState) -> bool {
        match self {
            Edit::Move(_) | Edit::Pri(_) => state != JobState::Reserved,
            Edit::Delay(_) | Edit::Bury => {
                matches!(state, JobState::Ready | JobState::Delayed)
            }
        }
    }

    /// The action's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Edit::Move(_) => "move",
            Edit::Pri(_) => "pri",
            Edit::Delay(_) => "delay",
            Edit::Bury => "bury",
        }
    }
}

/// What an [`Edit`] did.
// One is returned per edit and never stored, so boxing `Done`'s entry (the common
// answer) would cost an allocation for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edited {
    NotFound,
    /// The job's state does not take this change.
    Conflict(JobState),
    /// Done: the job as it is now; `ready_in` names its tube when it is ready now (a
    /// waiting reserve may take it).
    Done {
        entry: JobEntry,
        ready_in: Option<TubeName>,
    },
}

/// The due time of a job delayed `delay_ms` from `now`.
pub fn due(now: Nanos, delay_ms: u64) -> Nanos {
    now + crate::time::millis(delay_ms)
}
