//! What Redis holds of leader mode's namespace, as far as the sink knows ([`Written`]),
//! so that a batch writes only what changed: the tube list is changed entry by entry,
//! a tube's figures and the namespace counters are written only when they changed (a
//! tube's counters and the namespace's at most once a second, the id counter a block of
//! ids ahead: `figures.rs`, `counters.rs`), and a tube's due-index entry only when it
//! must come earlier (an entry may be early, never late: the shared mode's timer sets
//! an early one right, and the leader does not read it). After a failed write all of it
//! is unknown ([`Written::forget`]) and is written again whole; only the retained
//! records' key index is kept (it says what each record is, which a failed write does
//! not change; the store's next cut rewrites the records of the failed one).
//!
//! Ownership: one per sink, updated by the batch builder as if each batch lands.

use std::time::Instant;

use foldhash::HashMap;

use super::counters::LazyCounters;
use super::figures::LazyFigures;
use super::retained::RetainedIndex;
use crate::protocol::TubeName;
use crate::store::memory::StoreCounters;
use crate::util::SwapList;

/// What Redis holds, as far as the sink knows; see the module header.
#[derive(Debug, Default)]
pub struct Written {
    /// The tube list; `None`: unknown (read it back before the next batch).
    pub tubes: Option<SwapList<TubeName>>,
    /// The namespace counters.
    pub counters: LazyCounters,
    /// Each tube's due-index entry as last written.
    due: HashMap<TubeName, u64>,
    /// Each tube's figures: as last written, and those held back.
    pub figures: LazyFigures,
    /// The retained records' key index (`retained.rs`).
    pub retained: RetainedIndex,
}

impl Written {
    /// A namespace just loaded: its tube list and counters as read.
    pub fn loaded(tubes: SwapList<TubeName>, counters: StoreCounters) -> Written {
        Written {
            tubes: Some(tubes),
            counters: LazyCounters::loaded(counters, Instant::now()),
            ..Written::default()
        }
    }

    /// A write failed: it may or may not have landed. Figures held back stay held.
    pub fn forget(&mut self) {
        let mut figures = std::mem::take(&mut self.figures);
        figures.forget();
        let mut counters = std::mem::take(&mut self.counters);
        counters.forget();
        let retained = std::mem::take(&mut self.retained);
        *self = Written {
            figures,
            counters,
            retained,
            ..Written::default()
        };
    }

    /// When the earliest figures or counters held back are due (`None`: nothing held).
    pub fn due(&self) -> Option<Instant> {
        match (self.figures.due(), self.counters.due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether tube `name`'s due entry must be written as `due` (it holds none, or a
    /// later one), which is then what it holds.
    pub fn lower_due(&mut self, name: &TubeName, due: u64) -> bool {
        if self.due.get(name).is_some_and(|&w| w <= due) {
            return false;
        }
        self.due.insert(name.clone(), due);
        true
    }

    /// Tube `name`'s keys are deleted: nothing of it is held any more.
    pub fn dropped(&mut self, name: &TubeName) {
        self.figures.dropped(name);
        self.due.remove(name);
    }

    /// A clean stop: hold nothing back.
    pub fn finishing(&mut self) {
        self.figures.finishing();
        self.counters.finishing();
    }
}
