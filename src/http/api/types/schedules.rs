//! The schedules' part of the API contract (docs/API.md, *Schedules*): a schedule as
//! the API shows it (its definition, its cursor, its next ticks, on its own page its
//! last fires), the list, and the answers of run and remove.
//!
//! Invariant: pure data, as `types.rs`. A view's definition is the [`ScheduleDoc`]
//! every home keeps, flattened, with `name` always present; instants are both ms since
//! the Unix epoch (for programs) and RFC 3339 text (for people).

use serde::{Deserialize, Serialize};

use crate::schedule::ScheduleDoc;
use crate::store::JobId;

/// `GET /schedules`: every schedule by name, and whether they persist (`false`: memory
/// mode, this process only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleView>,
    pub persisted: bool,
}

/// One schedule: `GET /schedules/{name}` (with `last`), each of the list's (without),
/// and the answer of each change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScheduleView {
    #[serde(flatten)]
    pub doc: ScheduleDoc,
    pub cursor: ScheduleCursor,
    /// The next ticks after the later of now and the cursor; empty when paused.
    pub next: Vec<NextTick>,
    /// This instance's last fires, oldest first (only on the schedule's own page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Vec<FireView>>,
}

/// Where a schedule stands in the store (all zero before its first tick).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleCursor {
    pub last_tick_ms: u64,
    pub last_job: JobId,
    pub fired: u64,
    pub deduped: u64,
    pub skipped: u64,
}

/// A coming tick: UTC, in the schedule's time zone (with its offset), and in ms.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextTick {
    pub utc: String,
    pub local: String,
    pub ms: u64,
}

/// What a fire came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FireKind {
    Made,
    Deduped,
    Skipped,
    Failed,
}

/// One of a schedule's last fires.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FireView {
    pub tick_ms: u64,
    /// The tick, RFC 3339 UTC.
    pub tick: String,
    /// When it was fired (ms since the Unix epoch).
    pub at_ms: u64,
    pub result: FireKind,
    /// The job made, or the key's job that still waited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobId>,
    /// How many missed ticks were passed over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped: Option<u64>,
    /// Why it failed (it is tried again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /schedules/{name}/run`: the job made, or (`deduped`) the key's job that
/// still waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRan {
    pub id: JobId,
    pub deduped: bool,
}

/// `DELETE /schedules/{name}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleRemoved {
    pub removed: bool,
}
