//! Keyed jobs as every store sees them (docs/EXTENSIONS.md, *Keys*): what a keyed put
//! did ([`KeyedPut`]), the commands that act on a job by its key ([`KeyOp`],
//! [`KeyOutcome`]), the key a job carries ([`JobKey`]), the state of a key as
//! persistence writes it ([`KeyRecord`]) and the bounds on dedupe windows
//! ([`KeyLimits`]).
//!
//! Invariants: a key names at most one job per tube, live or inside its window; a
//! window is never longer than [`KeyLimits::window_max_ms`] (the engine cuts it before
//! the store sees it), and a store holds at most [`KeyLimits::windows_max`] windows at
//! once (the one nearest its end ends early, counted).

use crate::protocol::TubeName;
pub use crate::protocol::ext::{Key, KeyMode, KeyState, PutKey};
use crate::store::{JobId, JobState, Nanos};

/// How long and how many dedupe windows a store keeps (`--key-window-max`,
/// `--key-windows-max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyLimits {
    /// The longest window (ms); a put asking for more gets this.
    pub window_max_ms: u64,
    /// The most windows open at once; beyond it the window nearest its end ends early.
    pub windows_max: u64,
}

impl KeyLimits {
    /// 24 hours.
    pub const WINDOW_MAX_MS: u64 = 24 * 3600 * 1000;
    pub const WINDOWS_MAX: u64 = 1_000_000;
}

impl Default for KeyLimits {
    fn default() -> Self {
        KeyLimits {
            window_max_ms: KeyLimits::WINDOW_MAX_MS,
            windows_max: KeyLimits::WINDOWS_MAX,
        }
    }
}

/// What a keyed put did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyedPut {
    /// No job had the key: a new job (`INSERTED <id>`).
    Inserted(JobId),
    /// Dedupe: the key's job (or its window), untouched (`INSERTED <id> <STATE>`).
    Existing(JobId, KeyState),
    /// Replace: the key's waiting job changed in place, in this state after it.
    Replaced(JobId, KeyState),
    /// Replace refused: the key's job is reserved, buried, or deleted inside its window.
    Conflict(JobId, KeyState),
}

/// A command by key, in the used tube.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOp {
    /// `find-key`: the id and state.
    Find,
    /// `delete-key`: as `delete` (not by another connection's reservation), opening
    /// the job's window; not counted in `cmd-delete`.
    Delete,
    /// `kick-key`: as `kick-job`.
    Kick,
    /// `bury-key`: a waiting job, or one the caller holds, buried with this priority.
    Bury { pri: u32 },
    /// `retime-key`: a waiting job due this long from now (0: ready at once).
    Retime { delay_ms: u64 },
}

/// What a [`KeyOp`] found or did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyOutcome {
    /// No job and no window (or, for a change, no job it may touch).
    NotFound,
    /// [`KeyOp::Find`]: the key's job, or its window (`Deleted`).
    Found(JobId, KeyState),
    /// The change was made to this job.
    Done(JobId),
    /// The job's state does not allow the change (bury, retime).
    Conflict(JobId, KeyState),
}

/// The key a job carries, and the window its put asked for (ms, already bounded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobKey {
    pub key: Key,
    pub window_ms: u64,
}

/// What a key names now, as persistence writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySlot {
    /// A live job.
    Live(JobId),
    /// A deleted job, until the window ends.
    Window { id: JobId, until: Nanos },
    /// Nothing: the key is free.
    Free,
}

/// One key of one tube and what it names (a cut's record, a loaded window).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRecord {
    pub tube: TubeName,
    pub key: Key,
    pub slot: KeySlot,
}

/// The state word of a job's state.
pub fn key_state(state: JobState) -> KeyState {
    match state {
        JobState::Ready => KeyState::Ready,
        JobState::Reserved => KeyState::Reserved,
        JobState::Delayed => KeyState::Delayed,
        JobState::Buried => KeyState::Buried,
    }
}

/// What a keyed put does given what its key names now (`None`: nothing); the one rule
/// every store follows (the Lua scripts spell it again, see `put_key.lua`).
pub fn put_decision(mode: KeyMode, found: Option<(JobId, KeyState)>) -> PutDecision {
    match (found, mode) {
        (None, _) => PutDecision::Insert,
        (Some((id, state)), KeyMode::Dedupe) => PutDecision::Answer(KeyedPut::Existing(id, state)),
        (Some((id, KeyState::Ready | KeyState::Delayed)), KeyMode::Replace) => {
            PutDecision::Replace(id)
        }
        (Some((id, state)), KeyMode::Replace) => PutDecision::Answer(KeyedPut::Conflict(id, state)),
    }
}

/// See [`put_decision`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutDecision {
    Insert,
    Replace(JobId),
    Answer(KeyedPut),
}
