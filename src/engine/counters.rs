//! This instance's own counters: commands by kind, connections by role, and the
//! histogram of how long reserved jobs had waited as ready. Shared by every connection
//! task, so they are atomics (relaxed: each is an independent tally).
//!
//! Invariant: the wait histogram is a [`Histogram`] over [`WAIT_BUCKETS`], so its
//! `+Inf` bucket equals `_count` in the exposition even if an observation races a read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::protocol::{Counter, EXTENSION_VERBS};
use crate::time::Nanos;
use crate::util::histogram::Histogram;

#[derive(Debug)]
pub struct Counters {
    cmd: [AtomicU64; Counter::ALL.len()],
    /// Extension verbs, by [`EXTENSION_VERBS`] index: `/metrics` only, never `stats`.
    extension: [AtomicU64; EXTENSION_VERBS.len()],
    pub connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub producers: AtomicU64,
    pub workers: AtomicU64,
    /// How long jobs had been ready when a reserve took them (ns).
    pub wait: Histogram,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            cmd: Default::default(),
            extension: Default::default(),
            connections: AtomicU64::default(),
            total_connections: AtomicU64::default(),
            producers: AtomicU64::default(),
            workers: AtomicU64::default(),
            // The sum in microseconds: nanoseconds could wrap after a few million
            // hour-long waits.
            wait: Histogram::with_sum_unit(&WAIT_BUCKETS, 1_000),
        }
    }
}

impl Counters {
    pub fn count(&self, c: Counter) {
        self.cmd[c.index()].fetch_add(1, Relaxed);
    }

    /// An extension verb, by its [`EXTENSION_VERBS`] index.
    pub fn count_extension(&self, index: usize) {
        if let Some(c) = self.extension.get(index) {
            c.fetch_add(1, Relaxed);
        }
    }

    pub fn extension_snapshot(&self) -> [u64; EXTENSION_VERBS.len()] {
        std::array::from_fn(|i| self.extension[i].load(Relaxed))
    }

    pub fn cmd_snapshot(&self) -> [u64; Counter::ALL.len()] {
        std::array::from_fn(|i| self.cmd[i].load(Relaxed))
    }

    pub fn get(v: &AtomicU64) -> u64 {
        v.load(Relaxed)
    }

    pub fn inc(v: &AtomicU64) {
        v.fetch_add(1, Relaxed);
    }

    pub fn dec(v: &AtomicU64) {
        v.fetch_sub(1, Relaxed);
    }
}

const MS: Nanos = 1_000_000;
const SEC: Nanos = 1_000 * MS;

/// Upper bounds (inclusive, as Prometheus' `le`) of the wait histogram's buckets, from
/// 1 ms to 1 h: a queue that keeps up sits in the first few, a backlog shows in the
/// seconds-to-minutes range, and anything beyond an hour is a stuck consumer. Kept in
/// nanoseconds so a wait is placed by integer comparison and labels print exactly.
pub const WAIT_BUCKETS: [Nanos; 19] = [
    MS,
    5 * MS / 2,
    5 * MS,
    10 * MS,
    25 * MS,
    50 * MS,
    100 * MS,
    250 * MS,
    500 * MS,
    SEC,
    5 * SEC / 2,
    5 * SEC,
    10 * SEC,
    30 * SEC,
    60 * SEC,
    300 * SEC,
    900 * SEC,
    1800 * SEC,
    3600 * SEC,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_inclusive_and_cumulative() {
        let h = Counters::default();
        for w in [0, MS, MS + 1, 200 * MS, 2 * 3600 * SEC] {
            h.wait.observe(w);
        }
        let s = h.wait.snapshot();
        assert_eq!(s.cumulative[0], 2, "0 and exactly 1 ms are <= 1 ms");
        assert_eq!(s.cumulative[1], 3);
        assert_eq!(s.cumulative[6], 3, "200 ms is above 100 ms");
        assert_eq!(s.cumulative[7], 4, "and at most 250 ms");
        assert_eq!(s.cumulative[WAIT_BUCKETS.len() - 1], 4, "2 h is above 1 h");
        assert_eq!(s.count, 5);
        assert!(s.cumulative.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(
            s.sum,
            MS + MS + 200 * MS + 2 * 3600 * SEC,
            "in whole microseconds"
        );
    }
}
