//! Latency samples and their percentiles.
//!
//! Every sample is kept (nanoseconds, signed so that a delayed job delivered early shows
//! as a negative lateness) and sorted once at the end: exact percentiles, no buckets.
//! Percentiles are nearest-rank.

/// Samples of one measure, in nanoseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples(Vec<i64>);

impl Samples {
    pub fn push(&mut self, ns: i64) {
        self.0.push(ns);
    }

    pub fn extend(&mut self, other: Samples) {
        self.0.extend(other.0);
    }

    /// Shift every sample by `ns` (lateness = end-to-end time - the job's delay).
    pub fn offset(mut self, ns: i64) -> Samples {
        for s in &mut self.0 {
            *s += ns;
        }
        self
    }

    pub fn summary(mut self) -> Summary {
        self.0.sort_unstable();
        let v = &self.0;
        let rank = |p: f64| -> i64 {
            if v.is_empty() {
                return 0;
            }
            // Nearest rank: the smallest sample with at least p of them at or below it.
            let r = (p * v.len() as f64).ceil() as usize;
            v[r.clamp(1, v.len()) - 1]
        };
        let mean = if v.is_empty() {
            0.0
        } else {
            v.iter().map(|&s| s as f64).sum::<f64>() / v.len() as f64
        };
        Summary {
            count: v.len(),
            min: v.first().copied().unwrap_or(0),
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            p999: rank(0.999),
            max: v.last().copied().unwrap_or(0),
            mean: mean as i64,
        }
    }
}

/// Percentiles of one measure, in nanoseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    pub count: usize,
    pub min: i64,
    pub p50: i64,
    pub p90: i64,
    pub p99: i64,
    pub p999: i64,
    pub max: i64,
    pub mean: i64,
}

/// Nanoseconds as milliseconds.
pub fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let mut s = Samples::default();
        for v in 1..=100 {
            s.push(v);
        }
        let m = s.summary();
        assert_eq!((m.min, m.p50, m.p90, m.p99, m.max), (1, 50, 90, 99, 100));
        assert_eq!(m.p999, 100);
        assert_eq!(m.count, 100);
    }

    #[test]
    fn empty_and_single() {
        assert_eq!(Samples::default().summary(), Summary::default());
        let mut s = Samples::default();
        s.push(-5);
        let m = s.offset(2).summary();
        assert_eq!((m.min, m.p50, m.p99, m.max), (-3, -3, -3, -3));
    }
}
