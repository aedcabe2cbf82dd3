//! Where a persisted change's acknowledgement time goes, batch by batch: histograms of
//! the stages of the group-commit path, and of how many jobs each batch carries, for
//! `/metrics` (`redstalk_batch_stage_seconds`, `redstalk_batch_jobs`).
//!
//! The stages of one batch, in order ([`Stage`]):
//! - `wait`: from the first change noted after the previous batch was cut until this
//!   batch is cut (the longest any of its changes waited for a batch to start);
//! - `build`: the cut, and the batch built and handed to the sink's connection;
//! - `write`: from then until the medium's answer is taken in (Redis: the call on the
//!   wire, run by Redis, its reply read and handed back; `-b`: the log written and
//!   synced);
//! - `settle`: from the answer until the progress is published and the waiting
//!   replies are woken;
//! - `wake`: from that publication until a waiting reply's task runs again (one
//!   observation per reply that waited, not per batch).
//!
//! Cost: relaxed atomics and a clock read or two per batch, one clock read per change
//! that starts a batch's wait (the first after a cut) and per reply that waited;
//! nothing is done at a scrape but reading the atomics. Shared by the store, the
//! committer and the exposition through the [`super::CommitLink`].
//!
//! Invariant: each histogram is a [`Histogram`] (its sum exact: nanoseconds for a
//! stage, jobs for a size), so its `+Inf` bucket equals `_count` even if an
//! observation races a read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crate::time::Nanos;
use crate::util::histogram::{Histogram, HistogramSnapshot};

const US: Nanos = 1_000;
const MS: Nanos = 1_000 * US;

/// Upper bounds (inclusive) of the stage histograms' buckets, 10 µs to 1 s in steps of
/// about 1.5×: a batch's stages on one host run from microseconds (settle, wake) to a
/// few milliseconds (a write under load), and medians read off the buckets must tell
/// apart changes of a few tens of percent.
pub const STAGE_BUCKETS: [Nanos; 31] = [
    10 * US,
    15 * US,
    20 * US,
    30 * US,
    50 * US,
    70 * US,
    100 * US,
    150 * US,
    200 * US,
    300 * US,
    500 * US,
    700 * US,
    MS,
    3 * MS / 2,
    2 * MS,
    3 * MS,
    5 * MS,
    7 * MS,
    10 * MS,
    15 * MS,
    20 * MS,
    30 * MS,
    50 * MS,
    70 * MS,
    100 * MS,
    150 * MS,
    200 * MS,
    300 * MS,
    500 * MS,
    700 * MS,
    1_000 * MS,
];

/// Upper bounds (inclusive) of the batch size histogram's buckets, in jobs.
pub const JOBS_BUCKETS: [u64; 19] = [
    0, 1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 1_000, 5_000,
];

/// One stage of a batch's way (see the module header).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Wait,
    Build,
    Write,
    Settle,
    Wake,
}

impl Stage {
    pub const ALL: [Stage; 5] = [
        Stage::Wait,
        Stage::Build,
        Stage::Write,
        Stage::Settle,
        Stage::Wake,
    ];

    /// The value of the `stage` label.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Wait => "wait",
            Stage::Build => "build",
            Stage::Write => "write",
            Stage::Settle => "settle",
            Stage::Wake => "wake",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The stage histograms of one persisted store, and the instants that link the stages
/// of one batch across the tasks that see them.
#[derive(Debug)]
pub struct BatchStages {
    base: Instant,
    stages: [Histogram; 5],
    jobs: Histogram,
    /// When the first change after the last cut was noted: nanoseconds after `base`,
    /// plus one (0: none since the cut).
    pending_since: AtomicU64,
    /// When the committer last published its progress, as `pending_since`.
    published: AtomicU64,
}

/// What [`BatchStages::snapshot`] reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagesSnapshot {
    /// In [`Stage::ALL`] order; nanoseconds.
    pub stages: Vec<(Stage, HistogramSnapshot)>,
    pub jobs: HistogramSnapshot,
}

impl Default for BatchStages {
    fn default() -> Self {
        BatchStages {
            base: Instant::now(),
            stages: std::array::from_fn(|_| Histogram::new(&STAGE_BUCKETS)),
            jobs: Histogram::new(&JOBS_BUCKETS),
            pending_since: AtomicU64::new(0),
            published: AtomicU64::new(0),
        }
    }
}

impl BatchStages {
    fn stamp(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX - 1)
            + 1
    }

    /// How long ago `stamp` was, at `now` (0 for no stamp).
    fn since(&self, stamp: u64, now: Instant) -> Option<Nanos> {
        (stamp > 0).then(|| self.stamp(now).saturating_sub(stamp))
    }

    pub fn observe(&self, stage: Stage, took: Duration) {
        self.stages[stage.index()].observe(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX));
    }

    /// The store noted a change: the first since the last cut starts the next batch's
    /// wait. Reads the clock only for that first one.
    pub fn changed(&self) {
        if self.pending_since.load(Relaxed) == 0 {
            let _ = self.pending_since.compare_exchange(
                0,
                self.stamp(Instant::now()),
                Relaxed,
                Relaxed,
            );
        }
    }

    /// The committer cuts a batch at `now`: the wait ends.
    pub fn cut(&self, now: Instant) {
        if let Some(waited) = self.since(self.pending_since.swap(0, Relaxed), now) {
            self.stages[Stage::Wait.index()].observe(waited);
        }
    }

    /// The committer found nothing changed since its last cut (it was woken by a call
    /// that changed nothing): the wait noted since belongs to no batch. A change noted
    /// while the committer looked loses its start (one observation missing, never one
    /// too long).
    pub fn nothing_changed(&self) {
        self.pending_since.store(0, Relaxed);
    }

    /// The committer hands a batch of `jobs` jobs to the sink.
    pub fn batch(&self, jobs: usize) {
        self.jobs.observe(jobs as u64);
    }

    /// The committer published its progress at `now`, before waking the replies.
    pub fn published(&self, now: Instant) {
        self.published.store(self.stamp(now), Relaxed);
    }

    /// A reply that waited for its batch runs again.
    pub fn woken(&self) {
        if let Some(took) = self.since(self.published.load(Relaxed), Instant::now()) {
            self.stages[Stage::Wake.index()].observe(took);
        }
    }

    pub fn snapshot(&self) -> StagesSnapshot {
        StagesSnapshot {
            stages: Stage::ALL
                .iter()
                .map(|&s| (s, self.stages[s.index()].snapshot()))
                .collect(),
            jobs: self.jobs.snapshot(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_cumulative() {
        let s = BatchStages::default();
        s.observe(Stage::Write, Duration::from_micros(10));
        s.observe(Stage::Write, Duration::from_micros(11));
        s.observe(Stage::Write, Duration::from_secs(2));
        let snap = s.snapshot();
        let (stage, w) = &snap.stages[2];
        assert_eq!(*stage, Stage::Write);
        assert_eq!(w.cumulative[0], 1, "exactly 10 µs is <= 10 µs");
        assert_eq!(w.cumulative[1], 2);
        assert_eq!(w.cumulative[STAGE_BUCKETS.len() - 1], 2, "2 s is above 1 s");
        assert_eq!(w.count, 3);
        assert_eq!(w.sum, 2_000_021_000);
        assert_eq!(snap.stages[0].1.count, 0);
    }

    #[test]
    fn the_wait_runs_from_the_first_change_after_a_cut() {
        let s = BatchStages::default();
        let t0 = Instant::now();
        s.cut(t0);
        assert_eq!(s.snapshot().stages[0].1.count, 0, "no change, no wait");
        s.changed();
        s.nothing_changed();
        s.cut(t0);
        assert_eq!(
            s.snapshot().stages[0].1.count,
            0,
            "a call that changed nothing"
        );
        s.changed();
        let first = s.pending_since.load(Relaxed);
        s.changed();
        assert_eq!(
            s.pending_since.load(Relaxed),
            first,
            "the first change counts"
        );
        s.cut(Instant::now() + Duration::from_millis(3));
        s.batch(0);
        s.batch(2);
        let snap = s.snapshot();
        assert_eq!(snap.stages[0].1.count, 1);
        assert!(snap.stages[0].1.sum >= 3_000_000);
        assert_eq!(snap.jobs.count, 2);
        assert_eq!(snap.jobs.cumulative[0], 1, "the empty batch");
        assert_eq!(snap.jobs.cumulative[2], 2, "2 jobs is <= 2");
        s.published(Instant::now());
        s.woken();
        assert_eq!(s.snapshot().stages[4].1.count, 1);
    }
}
