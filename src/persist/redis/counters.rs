//! The namespace counters as leader mode writes them (`P:ids`, `P:seq` and the
//! `total_jobs`/`job_timeouts` fields of `P:stats`): what a put changes with every job
//! is not written with every batch.
//!
//! - **Ids are reserved in blocks.** `P:ids` holds an id at or above every id this
//!   leader handed out: when the last id passes what the key holds, the batch sets it
//!   [`ID_BLOCK`] ids ahead, so one batch in about [`ID_BLOCK`] puts writes it, not
//!   every one. The key only ever grows while serving (a failed write is followed by a
//!   write from the current last id, which is no lower), so no id is handed out twice
//!   across a failover: a leader that takes over after a kill -9 starts past the block,
//!   and the ids jump by at most [`ID_BLOCK`] (a gap clients cannot tell from jobs
//!   put and deleted meanwhile). A clean stop writes the exact last id
//!   ([`LazyCounters::take`] while finishing), so a restart continues with the next id.
//!   The block never goes past `i64::MAX` (the shared mode `INCR`s the key).
//! - **`total_jobs` and `job_timeouts` are held back** a second at most, as a tube's
//!   counters are (`figures.rs`): a kill -9 may lose up to a second of them (never a
//!   job). The first write and a clean stop write them at once; the sink's timer
//!   ([`LazyCounters::due`]) writes them when no change comes to carry them.
//! - `P:seq` (the buried FIFO's position) is written whenever it changes: a kick
//!   after a takeover must find the buried jobs in their order.
//!
//! After a failed write what Redis holds is unknown ([`LazyCounters::forget`]): the next
//! batch writes every counter again.

use std::time::Instant;

use super::figures::FIGURES_EVERY;
use crate::store::memory::StoreCounters;

/// How many ids one write of `P:ids` reserves ahead.
pub const ID_BLOCK: u64 = 1_000;

/// The highest value `P:ids` may hold: the shared mode increments it as a Redis integer.
const IDS_MAX: u64 = i64::MAX as u64;

/// What one batch writes of the counters (`None`: nothing).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CounterWrites {
    pub ids: Option<u64>,
    pub seq: Option<u64>,
    /// `total_jobs`, `job_timeouts`.
    pub stats: Option<[u64; 2]>,
}

/// What Redis holds of the counters, as far as the sink knows; see the module header.
#[derive(Debug, Default)]
pub struct LazyCounters {
    /// `P:ids` as last written (`None`: unknown).
    ids: Option<u64>,
    seq: Option<u64>,
    /// The stats as last written, and when.
    stats: Option<([u64; 2], Instant)>,
    /// Stats that changed and are not written yet.
    held: bool,
    finishing: bool,
}

impl LazyCounters {
    /// A namespace just loaded: the counters as read.
    pub fn loaded(c: StoreCounters, now: Instant) -> LazyCounters {
        LazyCounters {
            ids: Some(c.last_id),
            seq: Some(c.bury_seq),
            stats: Some(([c.total_jobs, c.job_timeouts], now)),
            ..LazyCounters::default()
        }
    }

    /// What to write of `c`, the counters as they are now; noted as written (the caller
    /// forgets it when the write fails).
    pub fn take(&mut self, c: StoreCounters, now: Instant) -> CounterWrites {
        let mut w = CounterWrites::default();
        if self.finishing {
            // A clean stop: the exact last id, so that a restart continues with the next.
            if self.ids != Some(c.last_id) {
                w.ids = Some(c.last_id);
            }
        } else if self.ids.is_none_or(|ids| c.last_id > ids) {
            w.ids = Some(
                c.last_id
                    .max(c.last_id.saturating_add(ID_BLOCK).min(IDS_MAX)),
            );
        }
        if let Some(ids) = w.ids {
            self.ids = Some(ids);
        }
        if self.seq != Some(c.bury_seq) {
            w.seq = Some(c.bury_seq);
            self.seq = Some(c.bury_seq);
        }
        let stats = [c.total_jobs, c.job_timeouts];
        match self.stats {
            Some((old, _)) if old == stats => self.held = false,
            Some((_, at)) if !self.finishing && now < at + FIGURES_EVERY => self.held = true,
            _ => {
                w.stats = Some(stats);
                self.stats = Some((stats, now));
                self.held = false;
            }
        }
        w
    }

    /// When the stats held back are due (`None`: nothing held).
    pub fn due(&self) -> Option<Instant> {
        if !self.held {
            return None;
        }
        match self.stats {
            Some((_, at)) if !self.finishing => Some(at + FIGURES_EVERY),
            _ => Some(Instant::now()),
        }
    }

    /// A write failed: what Redis holds is unknown (what is held is written next).
    pub fn forget(&mut self) {
        self.ids = None;
        self.seq = None;
        self.stats = None;
    }

    /// A clean stop: hold nothing back, and write the exact last id.
    pub fn finishing(&mut self) {
        self.finishing = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(last_id: u64, total_jobs: u64) -> StoreCounters {
        StoreCounters {
            last_id,
            bury_seq: 0,
            total_jobs,
            job_timeouts: 0,
        }
    }

    /// `P:ids` is written once per block, always at or above the last id handed out,
    /// and never lower than before while serving (a failover never reuses an id).
    #[test]
    fn ids_are_written_a_block_ahead_and_never_behind() {
        let now = Instant::now();
        let mut c = LazyCounters::loaded(counters(10, 10), now);
        let mut written = 10;
        let mut writes = 0;
        for id in 11..=3_000 {
            let w = c.take(counters(id, 10), now);
            if let Some(ids) = w.ids {
                assert!(
                    ids >= id && ids > written,
                    "{ids} after {written} at id {id}"
                );
                written = ids;
                writes += 1;
            }
            assert!(written >= id, "id {id} handed out past P:ids = {written}");
        }
        assert_eq!(writes, 3, "one write per block of {ID_BLOCK}");
        // A failed write: rewritten from the current id, no lower than what may have landed.
        c.forget();
        let w = c.take(counters(3_000, 10), now);
        assert_eq!(w.ids, Some(3_000 + ID_BLOCK));
        assert!(w.ids >= Some(written));
        // A clean stop writes the exact last id.
        c.finishing();
        assert_eq!(c.take(counters(3_001, 10), now).ids, Some(3_001));
        assert_eq!(c.take(counters(3_001, 10), now).ids, None);
    }

    /// Near the top the block stops at i64::MAX, which the shared mode can still INCR.
    #[test]
    fn the_id_block_stops_at_the_largest_redis_integer() {
        let now = Instant::now();
        let mut c = LazyCounters::loaded(counters(IDS_MAX - 5, 0), now);
        assert_eq!(c.take(counters(IDS_MAX - 4, 0), now).ids, Some(IDS_MAX));
        let mut c = LazyCounters::loaded(counters(u64::MAX - 1, 0), now);
        assert_eq!(c.take(counters(u64::MAX, 0), now).ids, Some(u64::MAX));
    }

    #[test]
    fn stats_are_held_back_a_second() {
        let start = Instant::now();
        let mut c = LazyCounters::default();
        let w = c.take(counters(1, 1), start);
        assert_eq!(w.stats, Some([1, 0]), "the first stats are written at once");
        assert_eq!(c.take(counters(2, 2), start).stats, None);
        assert_eq!(c.due(), Some(start + FIGURES_EVERY));
        let later = start + FIGURES_EVERY;
        assert_eq!(c.take(counters(2, 2), later).stats, Some([2, 0]));
        assert_eq!(c.due(), None);
        // Finishing: nothing is held back.
        assert_eq!(c.take(counters(3, 3), later).stats, None);
        c.finishing();
        assert!(c.due().is_some_and(|d| d <= Instant::now()));
        assert_eq!(c.take(counters(3, 3), later).stats, Some([3, 0]));
        // After a failed write everything is written again.
        c.forget();
        let w = c.take(counters(3, 3), later);
        assert_eq!(
            (w.ids, w.seq, w.stats),
            (Some(3), Some(0), Some([3, 0])),
            "rewritten whole"
        );
    }
}
