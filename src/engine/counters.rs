//! This instance's own counters: commands by kind and connections by role. Shared by
//! every connection task, so they are atomics (relaxed: each is an independent tally).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::protocol::Counter;

#[derive(Debug, Default)]
pub struct Counters {
    cmd: [AtomicU64; Counter::ALL.len()],
    pub connections: AtomicU64,
    pub total_connections: AtomicU64,
    pub producers: AtomicU64,
    pub workers: AtomicU64,
}

impl Counters {
    pub fn count(&self, c: Counter) {
        self.cmd[c.index()].fetch_add(1, Relaxed);
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
