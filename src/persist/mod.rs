//! Persistence beside the store: the group-commit path that writes a journaled memory
//! store's changes in batches, and the sinks it writes to.
//!
//! - [`committer`]: the one task per persisted store that takes cuts of the store and
//!   writes them through a [`Sink`], as many batches in flight as the sink takes
//!   ([`Sink::depth`]: one for `-b`, several for leader mode); every change made while
//!   the sink is busy goes into the next one (group commit).
//! - [`engine`]: the one place a persisted engine is built and ended: restored store,
//!   commit link, committer, durable store, engine, final flush (`-b` and leader mode).
//! - [`redis`]: the Redis sink of leader mode (one script call per batch, fenced by the
//!   lease and the batch sequence, several in flight; the shared mode's schema), and
//!   the loader that reads a namespace back.
//! - [`binlog`]: `-b DIR`'s sink, a local write-ahead log, and its replay at start.
//! - [`book`]: where an operator's definitions are kept (this process, `-b DIR`'s
//!   file, a Redis hash) and how a change reaches every instance: [`policies`] (the
//!   tube policies) and `schedules`.
//!
//! Layering: this module uses `store` (the cut and snapshot types), `crate::redis`, and
//! `engine` (to build a persisted one); neither store nor engine knows anything of it
//! but the [`crate::store::durable::CommitLink`] the store is handed.

pub mod binlog;
pub mod book;
pub mod books;
pub mod committer;
pub mod engine;
pub mod policies;
pub mod redis;
pub mod schedules;

use std::future::Future;
use std::time::Duration;

use crate::redis::fenced::FenceError;
use crate::store::StoreError;
use crate::store::memory::Cut;

/// Why a batch was not written.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// Another instance holds the namespace now: this one must stop writing (and
    /// acknowledging) for good. Nothing of the batch was applied.
    #[error("fenced: another instance leads this namespace")]
    Fenced,
    /// The write failed; it may or may not have been applied. The committer retries
    /// (the next cut rewrites everything this one held).
    #[error(transparent)]
    Failed(#[from] StoreError),
}

impl From<FenceError> for SinkError {
    fn from(e: FenceError) -> SinkError {
        match e {
            FenceError::Fenced => SinkError::Fenced,
            FenceError::Failed(e) => SinkError::Failed(e.into()),
        }
    }
}

/// Where cuts are written. A write is started ([`Sink::start`]) and then completes on its
/// own ([`Sink::Pending`]); at most [`Sink::depth`] are pending at once, and their
/// outcomes are told back ([`Sink::finished`]) in the order they were started.
pub trait Sink: Send + 'static {
    /// The rest of a started write; it owns what it needs, so the sink may start the
    /// next meanwhile.
    type Pending: Future<Output = Result<(), SinkError>> + Send + 'static;

    /// Begin writing one cut whole (`Ok` of the pending write: all of it persisted). A
    /// sink whose writes cannot overlap (depth 1) may do the whole write here.
    fn start(&mut self, cut: &Cut)
    -> impl Future<Output = Result<Self::Pending, SinkError>> + Send;

    /// What a started write came to (or that starting it failed), in start order.
    fn finished(&mut self, _result: &Result<(), SinkError>) {}

    /// When the sink must write what it holds back of its own accord (figures it
    /// writes lazily), even if the store has no change by then; `None`: nothing held.
    fn due(&self) -> Option<std::time::Instant> {
        None
    }

    /// A clean stop is under way: from now on hold nothing back.
    fn finishing(&mut self) {}

    /// How many started writes may be pending at once.
    fn depth(&self) -> usize {
        1
    }

    /// What the logs call this sink ("redis", "binlog").
    fn name(&self) -> &'static str;

    /// While the sink refuses new jobs for want of space (a full disk), how often it
    /// wants [`Sink::probe`] called when there is nothing to write; `None` otherwise.
    fn probe_every(&self) -> Option<Duration> {
        None
    }

    /// Look whether what made the sink refuse new jobs is gone (see `probe_every`).
    fn probe(&mut self) {}
}
