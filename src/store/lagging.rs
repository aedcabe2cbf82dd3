//! A memory store that answers late, as a remote one does (tests only): each call is
//! applied at once and its answer arrives `lag` later, on tokio's clock (use a paused
//! one). The engine's in-process tests use it to open, deterministically, the windows
//! a round trip to Redis opens: a job reserved for a waiter that hangs up before the
//! answer arrives, a tick that ends after a waiter's timeout, a hint that arrives while
//! the timer reads its next deadline.
//!
//! `next_deadline` may lag longer than the rest (`read_lag`), so a change made after
//! its read, and hinted, is answered before the read is.

use std::time::Duration;

use super::MemoryStore;

pub struct LaggingStore {
    pub(super) inner: MemoryStore,
    lag: Duration,
    read_lag: Duration,
}

impl LaggingStore {
    /// Every answer `lag` late.
    pub fn new(lag: Duration) -> LaggingStore {
        LaggingStore {
            inner: MemoryStore::new(),
            lag,
            read_lag: lag,
        }
    }

    /// `next_deadline` answers `read_lag` late instead.
    pub fn with_read_lag(mut self, read_lag: Duration) -> LaggingStore {
        self.read_lag = read_lag;
        self
    }

    /// Wait as long as an answer takes.
    pub(super) async fn lag(&self) {
        if !self.lag.is_zero() {
            tokio::time::sleep(self.lag).await;
        }
    }

    /// Wait as long as the answer to a `next_deadline` takes.
    pub(super) async fn read_lag(&self) {
        if !self.read_lag.is_zero() {
            tokio::time::sleep(self.read_lag).await;
        }
    }
}
