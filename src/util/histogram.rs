//! A histogram over fixed bucket bounds, of relaxed atomics: the one type behind every
//! histogram `/metrics` exposes (the engine's job waits, the group commit's batch
//! stages and sizes). Here because both the engine and the store fill one, and the
//! exposition prints any of them the same way from a [`HistogramSnapshot`].
//!
//! Invariants: the bounds are ascending upper bounds, inclusive as Prometheus' `le`
//! (an observation equal to a bound counts in that bound's bucket); a snapshot's
//! `cumulative` never decreases and its `count` is the sum of every bucket, so the
//! `+Inf` bucket equals `_count` even if an observation races a read; a snapshot's
//! `sum` is in the bounds' unit, each observation cut down to a whole `sum_unit` before
//! it is added (a coarser unit keeps the sum from wrapping when observations are large).
//! Costs two relaxed atomic adds per observation, nothing but loads per snapshot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [u64],
    /// Per bucket, not cumulative; one slot more than `bounds`, the last above every
    /// bound.
    buckets: Box<[AtomicU64]>,
    /// In units of `sum_unit`.
    sum: AtomicU64,
    sum_unit: u64,
}

/// A copy of a [`Histogram`], cumulative as the exposition format wants it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub bounds: &'static [u64],
    /// Observations of at most `bounds[i]`.
    pub cumulative: Vec<u64>,
    pub count: u64,
    /// The sum of the observations, in the bounds' unit.
    pub sum: u64,
}

impl Histogram {
    /// A histogram whose sum is kept exactly.
    pub fn new(bounds: &'static [u64]) -> Histogram {
        Histogram::with_sum_unit(bounds, 1)
    }

    /// A histogram whose sum is kept in whole `sum_unit`s (at least 1).
    pub fn with_sum_unit(bounds: &'static [u64], sum_unit: u64) -> Histogram {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "ascending bounds");
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum: AtomicU64::new(0),
            sum_unit: sum_unit.max(1),
        }
    }

    pub fn observe(&self, v: u64) {
        let i = self.bounds.partition_point(|&bound| bound < v);
        if let Some(b) = self.buckets.get(i) {
            b.fetch_add(1, Relaxed);
        }
        self.sum.fetch_add(v / self.sum_unit, Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = Vec::with_capacity(self.bounds.len());
        let mut running = 0;
        for b in self.buckets.iter() {
            running += b.load(Relaxed);
            if cumulative.len() < self.bounds.len() {
                cumulative.push(running);
            }
        }
        HistogramSnapshot {
            bounds: self.bounds,
            cumulative,
            count: running,
            sum: self.sum.load(Relaxed).saturating_mul(self.sum_unit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: [u64; 4] = [10, 20, 50, 100];

    #[test]
    fn bounds_are_inclusive_and_cumulative() {
        let h = Histogram::new(&BOUNDS);
        for v in [0, 10, 11, 20, 99, 1_000] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.bounds, &BOUNDS);
        assert_eq!(
            s.cumulative,
            [2, 4, 4, 5],
            "10 and 20 count at their own bound"
        );
        assert_eq!(s.count, 6, "1,000 is above every bound");
        assert_eq!(s.sum, 1_140);
    }

    #[test]
    fn a_coarser_sum_drops_each_remainder() {
        let h = Histogram::with_sum_unit(&BOUNDS, 10);
        h.observe(19);
        h.observe(25);
        let s = h.snapshot();
        assert_eq!(s.sum, 30, "19 -> 10, 25 -> 20");
        assert_eq!(s.count, 2);
    }

    #[test]
    fn an_empty_histogram_reads_zero() {
        let s = Histogram::new(&BOUNDS).snapshot();
        assert_eq!((s.cumulative, s.count, s.sum), (vec![0; 4], 0, 0));
    }
}
