//! A tube's figures (its meta hash: total_jobs, cmd_delete, cmd_pause, pause,
//! pause_until) as leader mode writes them: what changes with every job (the two
//! counters) is written at most once a second per tube, so a busy or drained tube does
//! not cost Redis a write of its figures with every batch. A pause, and a tube's first
//! figures, are written with the batch that changes them.
//!
//! What a kill -9 may lose: up to a second of a tube's `total-jobs` and `cmd-delete`
//! (jobs themselves are never held back). A clean stop writes everything held
//! ([`LazyFigures::finishing`]); so does the sink's own timer ([`LazyFigures::due`]) when no
//! change comes to carry them.
//!
//! After a failed write what Redis holds is unknown: every tube's figures are written
//! whole again the next time, and what was held back is still held (and written).

use std::cell::Cell;
use std::time::{Duration, Instant};

use foldhash::HashMap;

use crate::protocol::TubeName;

/// How long a tube's counters may be held back.
pub const FIGURES_EVERY: Duration = Duration::from_secs(1);

/// The figures of a tube's meta hash, in this order.
pub const TUBE_FIELDS: [&str; 5] = [
    "total_jobs",
    "cmd_delete",
    "cmd_pause",
    "pause",
    "pause_until",
];

/// A tube's figures, in [`TUBE_FIELDS`] order.
pub type TubeFigures = [u64; 5];

/// What was written of each tube's figures, and what is held back.
#[derive(Debug, Default)]
pub struct LazyFigures {
    /// As last written, and when.
    written: HashMap<TubeName, (TubeFigures, Instant)>,
    /// Figures not written yet (the latest of each tube).
    held: HashMap<TubeName, TubeFigures>,
    finishing: bool,
    /// [`LazyFigures::due`] as last worked out, until a change (`None`: not known). The
    /// committer asks for it at every turn of its loop, and working it out looks up
    /// every held tube; only a batch changes it.
    due: Cell<Option<Option<Instant>>>,
}

impl LazyFigures {
    /// The fields of `name` to write now (index and value, into `out`), given its
    /// figures as they are: none when unchanged or held back.
    pub fn take(
        &mut self,
        name: &TubeName,
        figures: TubeFigures,
        now: Instant,
        out: &mut Vec<(usize, u64)>,
    ) {
        out.clear();
        self.due.set(None);
        let old = self.written.get(name).copied();
        if let Some((o, at)) = old {
            if o == figures {
                self.held.remove(name);
                return;
            }
            // Only the counters moved (not the pause): held back for a while.
            if o[2..] == figures[2..] && !self.finishing && now < at + FIGURES_EVERY {
                self.held.insert(name.clone(), figures);
                return;
            }
        }
        for (i, v) in figures.iter().enumerate() {
            if old.map(|(o, _)| o[i]) != Some(*v) {
                out.push((i, *v));
            }
        }
        self.written.insert(name.clone(), (figures, now));
        self.held.remove(name);
    }

    /// The held tubes whose time came (every one, once finishing), with their figures:
    /// the caller writes each through [`LazyFigures::take`].
    pub fn due_now(&self, now: Instant) -> Vec<(TubeName, TubeFigures)> {
        self.held
            .iter()
            .filter(|(n, _)| self.finishing || self.due_of(n).is_none_or(|d| d <= now))
            .map(|(n, f)| (n.clone(), *f))
            .collect()
    }

    fn due_of(&self, name: &TubeName) -> Option<Instant> {
        self.written.get(name).map(|(_, at)| *at + FIGURES_EVERY)
    }

    /// When the earliest held figures are due (`None`: nothing held). An instant in
    /// the past stays due: caching it is safe.
    pub fn due(&self) -> Option<Instant> {
        if let Some(due) = self.due.get() {
            return due;
        }
        let due = self.work_out_due();
        self.due.set(Some(due));
        due
    }

    fn work_out_due(&self) -> Option<Instant> {
        let now = Instant::now();
        self.held
            .keys()
            .map(|n| {
                if self.finishing {
                    now
                } else {
                    self.due_of(n).unwrap_or(now)
                }
            })
            .min()
    }

    /// The tube is gone: nothing of it is written any more.
    pub fn dropped(&mut self, name: &TubeName) {
        self.due.set(None);
        self.written.remove(name);
        self.held.remove(name);
    }

    /// A write failed: what Redis holds is unknown (what is held stays held).
    pub fn forget(&mut self) {
        self.due.set(None);
        self.written.clear();
    }

    /// A clean stop: hold nothing back any more.
    pub fn finishing(&mut self) {
        self.due.set(None);
        self.finishing = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_held_back_a_second_and_a_pause_is_not() {
        let t = TubeName::new(b"t").unwrap();
        let mut f = LazyFigures::default();
        let mut out = Vec::new();
        let start = Instant::now();
        f.take(&t, [1, 0, 0, 0, 0], start, &mut out);
        assert_eq!(out.len(), 5, "a tube's first figures are written whole");
        f.take(&t, [2, 1, 0, 0, 0], start, &mut out);
        assert!(out.is_empty(), "counters written at once: {out:?}");
        assert_eq!(f.due(), Some(start + FIGURES_EVERY));
        assert!(f.due_now(start).is_empty());
        let due = f.due_now(start + FIGURES_EVERY);
        assert_eq!(due, vec![(t.clone(), [2, 1, 0, 0, 0])]);
        f.take(&t, due[0].1, start + FIGURES_EVERY, &mut out);
        assert_eq!(out, vec![(0, 2), (1, 1)]);
        assert_eq!(f.due(), None);
        // A pause goes at once, with the counters held meanwhile.
        f.take(&t, [3, 1, 0, 0, 0], start + FIGURES_EVERY, &mut out);
        assert!(out.is_empty());
        f.take(&t, [3, 1, 1, 5, 9], start + FIGURES_EVERY, &mut out);
        assert_eq!(out, vec![(0, 3), (2, 1), (3, 5), (4, 9)]);
        // Finishing: nothing is held back.
        f.take(&t, [4, 1, 1, 5, 9], start + FIGURES_EVERY, &mut out);
        assert!(out.is_empty());
        f.finishing();
        assert_eq!(f.due_now(start).len(), 1);
        f.take(&t, [4, 1, 1, 5, 9], start, &mut out);
        assert_eq!(out, vec![(0, 4)]);
    }
}
