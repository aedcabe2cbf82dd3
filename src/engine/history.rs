//! The console's history: per tube, per minute, how many jobs were put, reserved and
//! deleted and how long the reserved ones had waited as ready. A sampler
//! (`http::history`) hands [`TubeMinutes::record`] the tubes' cumulative tallies once a
//! minute; this keeps the deltas.
//!
//! Invariants (100,000 tubes must not blow memory):
//! - at most [`MAX_TUBES`] tubes are kept, the first by name as the sampler lists
//!   them; the others are counted ([`TubeMinutes::omitted`]), not kept;
//! - a tube keeps at most [`KEEP`] minutes, and only minutes with something in them
//!   (an idle tube costs its name and an empty ring); a tube with no point within
//!   [`KEEP`] minutes is forgotten;
//! - a counter that went down (the tube was dropped and made again) counts from 0.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::TubeStats;

/// Minutes kept per tube: 24 hours.
pub const KEEP: usize = 1440;
/// Tubes kept: the first by name. Worst case about `MAX_TUBES * KEEP * 24` bytes (17
/// MiB) when every kept tube is busy every minute for a day.
pub const MAX_TUBES: usize = 500;

/// One tube's minute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Point {
    /// The minute, as Unix time in minutes (or in sampler periods, see `http::history`).
    pub minute: u64,
    pub puts: u32,
    pub reserves: u32,
    pub deletes: u32,
    /// The mean time the reserved jobs had waited as ready, in milliseconds.
    pub wait_ms: u32,
}

impl Point {
    fn is_empty(&self) -> bool {
        self.puts == 0 && self.reserves == 0 && self.deletes == 0
    }
}

/// A tube's cumulative tallies at a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub puts: u64,
    pub reserves: u64,
    pub deletes: u64,
    pub wait_sum_us: u64,
}

impl Tally {
    pub fn of(t: &TubeStats) -> Tally {
        Tally {
            puts: t.total_jobs,
            reserves: t.reserves,
            deletes: t.cmd_delete,
            wait_sum_us: t.wait_sum_us,
        }
    }

    /// What happened between `before` and `self` (a counter that went down restarted
    /// from 0).
    fn since(&self, before: &Tally, minute: u64) -> Point {
        let d = |now: u64, then: u64| if now >= then { now - then } else { now };
        let reserves = d(self.reserves, before.reserves);
        let wait_us = d(self.wait_sum_us, before.wait_sum_us);
        let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
        Point {
            minute,
            puts: clamp(d(self.puts, before.puts)),
            reserves: clamp(reserves),
            deletes: clamp(d(self.deletes, before.deletes)),
            wait_ms: clamp(wait_us.checked_div(reserves).unwrap_or(0) / 1_000),
        }
    }
}

/// Every kept tube's minutes, and the last sample's tallies to take deltas from.
#[derive(Debug, Default)]
pub struct TubeMinutes {
    tubes: BTreeMap<String, VecDeque<Point>>,
    last: Option<HashMap<String, Tally>>,
    omitted: u64,
    /// The last minute recorded.
    latest: u64,
}

impl TubeMinutes {
    /// The tallies of `tubes` at `minute` (at most [`MAX_TUBES`] of them are taken;
    /// `omitted` more exist). The first sample (or the first after [`TubeMinutes::rebase`])
    /// only sets the base; later ones record each tube's delta as that minute's point.
    pub fn record(&mut self, minute: u64, tubes: &[(String, Tally)], omitted: u64) {
        let kept = tubes.len().min(MAX_TUBES);
        self.omitted = omitted + (tubes.len() - kept) as u64;
        let now: HashMap<String, Tally> = tubes[..kept].iter().cloned().collect();
        if let Some(last) = self.last.take() {
            for (name, tally) in &now {
                // A tube made since the last sample: everything it did is new.
                let before = last.get(name).copied().unwrap_or_default();
                let point = tally.since(&before, minute);
                if !point.is_empty() {
                    self.push(name, point);
                }
            }
        }
        self.last = Some(now);
        self.latest = self.latest.max(minute);
        self.forget_old();
    }

    /// The next sample only sets the base (the engine changed: a new leader's counts
    /// are not the old one's).
    pub fn rebase(&mut self) {
        self.last = None;
    }

    /// Forget every point and the base (a new leader reads its history back from
    /// Redis instead).
    pub fn clear(&mut self) {
        *self = TubeMinutes::default();
    }

    /// Every tube's point of `minute` (what a leader writes to Redis).
    pub fn points_at(&self, minute: u64) -> Vec<(String, Point)> {
        self.tubes
            .iter()
            .filter_map(|(name, ring)| {
                ring.back()
                    .filter(|p| p.minute == minute)
                    .map(|p| (name.clone(), *p))
            })
            .collect()
    }

    /// Add a point kept elsewhere (a leader's history read back from Redis).
    pub fn push(&mut self, tube: &str, point: Point) {
        if !self.tubes.contains_key(tube) && self.tubes.len() >= MAX_TUBES {
            return;
        }
        let ring = self.tubes.entry(tube.to_string()).or_default();
        match ring.back_mut() {
            Some(last) if last.minute == point.minute => *last = point,
            Some(last) if last.minute > point.minute => return,
            _ => ring.push_back(point),
        }
        while ring.len() > KEEP {
            ring.pop_front();
        }
        self.latest = self.latest.max(point.minute);
    }

    /// Drop points older than [`KEEP`] minutes and tubes left with none.
    fn forget_old(&mut self) {
        let oldest = self.latest.saturating_sub(KEEP as u64 - 1);
        self.tubes.retain(|_, ring| {
            while ring.front().is_some_and(|p| p.minute < oldest) {
                ring.pop_front();
            }
            !ring.is_empty()
        });
    }

    /// The points of the last `minutes` minutes up to `now`, per tube (of one tube, or
    /// of every kept tube), oldest first; minutes with nothing in them are left out.
    pub fn query(&self, now: u64, minutes: u64, tube: Option<&str>) -> Vec<(&str, Vec<Point>)> {
        let from = now.saturating_sub(minutes.saturating_sub(1));
        let pick = |ring: &VecDeque<Point>| -> Vec<Point> {
            ring.iter()
                .filter(|p| p.minute >= from && p.minute <= now)
                .copied()
                .collect()
        };
        match tube {
            Some(t) => self
                .tubes
                .get_key_value(t)
                .map(|(k, r)| vec![(k.as_str(), pick(r))])
                .unwrap_or_default(),
            None => self
                .tubes
                .iter()
                .map(|(k, r)| (k.as_str(), pick(r)))
                .collect(),
        }
    }

    /// Tubes beyond [`MAX_TUBES`] at the last sample.
    pub fn omitted(&self) -> u64 {
        self.omitted
    }

    /// Tubes kept.
    pub fn tubes(&self) -> usize {
        self.tubes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(puts: u64, reserves: u64, deletes: u64, wait_sum_us: u64) -> Tally {
        Tally {
            puts,
            reserves,
            deletes,
            wait_sum_us,
        }
    }

    #[test]
    fn records_deltas_after_a_base() {
        let mut h = TubeMinutes::default();
        h.record(10, &[("a".into(), tally(5, 2, 1, 0))], 0);
        assert_eq!(h.tubes(), 0, "the first sample is the base");
        h.record(
            11,
            &[
                ("a".into(), tally(8, 4, 1, 2 * 30_000)),
                ("b".into(), tally(1, 0, 0, 0)),
            ],
            0,
        );
        let q = h.query(11, 60, None);
        println!("{q:?}");
        assert_eq!(
            q[0],
            (
                "a",
                vec![Point {
                    minute: 11,
                    puts: 3,
                    reserves: 2,
                    deletes: 0,
                    wait_ms: 30
                }]
            )
        );
        assert_eq!(q[1].1[0].puts, 1, "a new tube's counts are all new");
        // A counter that went down: the tube was dropped and made again.
        h.record(12, &[("a".into(), tally(2, 0, 0, 0))], 0);
        assert_eq!(h.query(12, 1, Some("a"))[0].1[0].puts, 2);
    }

    #[test]
    fn bounds_minutes_and_tubes() {
        let mut h = TubeMinutes::default();
        let many: Vec<(String, Tally)> = (0..MAX_TUBES + 7)
            .map(|i| (format!("t{i:06}"), tally(0, 0, 0, 0)))
            .collect();
        h.record(0, &many, 3);
        let mut busy = many.clone();
        for minute in 1..=(KEEP as u64 + 100) {
            for (_, t) in busy.iter_mut() {
                t.puts += 1;
            }
            h.record(minute, &busy, 3);
        }
        println!(
            "tubes kept {}, omitted {}, points of one {}",
            h.tubes(),
            h.omitted(),
            h.query(KEEP as u64 + 100, 100_000, Some("t000000"))[0]
                .1
                .len()
        );
        assert_eq!(h.tubes(), MAX_TUBES);
        assert_eq!(h.omitted(), 10);
        let ring = &h.query(KEEP as u64 + 100, 100_000, Some("t000000"))[0].1;
        assert_eq!(ring.len(), KEEP);
        assert_eq!(ring[0].minute, 101);
        // Idle for a day: forgotten.
        let idle = busy.clone();
        h.record(3 * KEEP as u64, &idle, 0);
        assert_eq!(h.tubes(), 0);
    }

    #[test]
    fn query_window() {
        let mut h = TubeMinutes::default();
        for m in [1, 5, 9] {
            h.push(
                "a",
                Point {
                    minute: m,
                    puts: 1,
                    ..Point::default()
                },
            );
        }
        let q = h.query(9, 5, Some("a"));
        assert_eq!(
            q[0].1.iter().map(|p| p.minute).collect::<Vec<_>>(),
            vec![5, 9]
        );
        assert!(h.query(9, 5, Some("zz")).is_empty());
    }
}
