//! Schedules as a store sees them (docs/SCHEDULES.md): a schedule's name, its cursor
//! (the last tick it fired and what came of its ticks) and one tick's put
//! ([`TickPut`], answered by [`Fired`]).
//!
//! Invariant, in every store: a tick `t` of schedule `S` is fired only if `t` is later
//! than `S`'s cursor, and the check, the tick's job and the cursor's advance to `t` are
//! one atomic, persisted step ([`super::Store::fire_tick`]). Ticks are therefore fired
//! in order and never twice, whichever instance or restart fires them; a retry of a
//! tick whose step did happen answers [`Fired::Stale`].

use std::fmt;
use std::sync::Arc;

use super::keys::{KeyState, PutKey};
use super::{JobId, NewJob};

/// The longest schedule name.
pub const MAX_NAME_LEN: usize = 64;

/// A schedule's name: 1 to 64 of `A-Z a-z 0-9 . _ -` (safe in a URL path, a Redis hash
/// field, a log line and a file name), unique in a namespace.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScheduleName(Arc<str>);

impl ScheduleName {
    /// Validate `name`; `None` when it is not a schedule name.
    pub fn new(name: &str) -> Option<ScheduleName> {
        let valid = !name.is_empty()
            && name.len() <= MAX_NAME_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        valid.then(|| ScheduleName(Arc::from(name)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ScheduleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ScheduleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// Where a schedule stands: persisted with the jobs, in the same step as each tick's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The last tick fired or skipped (ms since the Unix epoch); 0: none yet.
    pub last_tick_ms: u64,
    /// The job the last fired tick made or found (its key's job); 0: none.
    pub last_job: JobId,
    /// Ticks that made a job.
    pub fired: u64,
    /// Ticks that made none because the schedule's key still named a waiting job.
    pub deduped: u64,
    /// Ticks passed over (missed while nothing ran, or while paused).
    pub skipped: u64,
}

/// One tick of a schedule: its job, put as `put` (or a keyed put with `key`) would.
#[derive(Clone, Debug)]
pub struct TickPut {
    pub schedule: ScheduleName,
    /// The tick's instant (ms since the Unix epoch); fired only if past the cursor.
    pub tick_ms: u64,
    pub job: NewJob,
    /// The schedule's key, always [`super::keys::KeyMode::Dedupe`]: a tick while the
    /// key's job still waits makes nothing.
    pub key: Option<PutKey>,
    /// Ticks passed over before this one (missed while nothing ran), counted in the
    /// cursor in the same step.
    pub skipped: u64,
}

/// What firing a tick did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fired {
    /// A new job.
    Made(JobId),
    /// The key's job still waits (or is inside its window): nothing made, the cursor
    /// advanced all the same.
    Deduped(JobId, KeyState),
    /// The tick is not past the cursor (fired already, here or by another instance):
    /// nothing done.
    Stale { last_tick_ms: u64 },
    /// Shared mode: the tick is still ahead of Redis' clock; fire it again later.
    Early,
}
