//! What the store answers for the batch and flush extensions (docs/EXTENSIONS.md,
//! *Batches* and *Flush*): [`Store::batch`](super::Store::batch) applies a list
//! command's ids in one step, [`Store::flush_step`](super::Store::flush_step) deletes
//! one bounded step of a flush.
//!
//! Invariants: a batch is one atomic step of the store (one journal cut's worth of
//! changes: one `-b` write, one leader batch; one script call in shared mode), each id
//! handled in order exactly as the single command would handle it from the same
//! connection; a flush step deletes at most its `max` jobs, each with an id at most
//! the flush's `upto`, and counts no `cmd-delete` (rule 3 of the rules).

use super::JobId;
use crate::protocol::TubeName;
use crate::protocol::ext::FlushStates;
use crate::store::JobState;

/// What a list command did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchDone {
    /// The ids the single command would have answered NOT_FOUND, in the order given.
    pub missing: Vec<JobId>,
    /// Tubes that gained ready jobs (a `release-batch` without delay), each once.
    pub woken: Vec<TubeName>,
}

/// What one step of a flush did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushStep {
    /// Jobs deleted by this step.
    pub deleted: u64,
    /// The highest id the flush takes: the one it was given, or, on its first step,
    /// the highest id made so far (jobs put after the flush began stay).
    pub upto: JobId,
    /// Whether the step stopped at its bound (another step may find more).
    pub more: bool,
}

/// Whether a flush of `states` takes a job in `state`.
pub fn flushes(states: FlushStates, state: JobState) -> bool {
    match state {
        JobState::Ready => states.ready,
        JobState::Delayed => states.delayed,
        JobState::Buried => states.buried,
        JobState::Reserved => states.reserved,
    }
}
