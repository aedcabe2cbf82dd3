//! The link between a [`super::DurableStore`] and the committer that persists it: the
//! store tells the committer it changed something (`changed`), the committer publishes
//! how far it has written (`progress`, a watch channel replies wait on), and whoever
//! holds the right to acknowledge (a leader's lease keeper) says until when
//! (`valid`).
//!
//! Ownership: made by whoever starts a persisted engine (`crate::persist::engine`),
//! cloned into the store, the committer and (leader mode) the lease keeper. Only the
//! committer publishes progress; only the lease keeper moves `valid`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tokio::sync::{Notify, watch};

use crate::store::Change;

/// How far the committer has written, as it publishes it.
#[derive(Clone, Debug, Default)]
pub struct CommitProgress {
    /// Every change up to this one is persisted.
    pub written: Change,
    /// The committer stopped for good (leadership lost, or the process shuts down):
    /// nothing more will be written, and nothing more may be acknowledged.
    pub stopped: bool,
    /// The last write failed and no write has succeeded since (for logs and readiness).
    pub failing: Option<Arc<str>>,
}

/// Until when this instance may acknowledge anything: a leader's lease, as its holder
/// last renewed it (on the monotonic clock). Without a lease (`-b`), forever.
#[derive(Debug)]
pub struct ValidUntil {
    base: Instant,
    /// Nanoseconds after `base`; `u64::MAX`: no end.
    until: AtomicU64,
}

impl ValidUntil {
    pub fn forever() -> ValidUntil {
        ValidUntil {
            base: Instant::now(),
            until: AtomicU64::new(u64::MAX),
        }
    }

    pub fn set(&self, until: Instant) {
        let nanos = until.saturating_duration_since(self.base).as_nanos();
        self.until
            .store(u64::try_from(nanos).unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// Nothing may be acknowledged from now on.
    pub fn end(&self) {
        self.until.store(0, Ordering::SeqCst);
    }

    pub fn is_valid(&self) -> bool {
        let now = self.base.elapsed().as_nanos();
        u128::from(self.until.load(Ordering::SeqCst)) > now
    }
}

/// The committer's side of the link: it publishes progress and is told of changes.
#[derive(Clone, Debug)]
pub struct CommitLink {
    pub progress: watch::Sender<CommitProgress>,
    /// Notified after every call that may have changed the store (a permit is kept
    /// when the committer is busy, so no change is missed).
    pub changed: Arc<Notify>,
    pub valid: Arc<ValidUntil>,
    /// Set by a clean stop before its last change: the sink writes everything it
    /// holds back (see `persist::Sink::finishing`) with the batches that follow.
    pub finishing: Arc<std::sync::atomic::AtomicBool>,
}

impl CommitLink {
    pub fn new() -> CommitLink {
        CommitLink {
            progress: watch::Sender::new(CommitProgress::default()),
            changed: Arc::new(Notify::new()),
            valid: Arc::new(ValidUntil::forever()),
            finishing: Arc::default(),
        }
    }

    /// Whether every change up to `upto` was written; waits for it, and false once
    /// the committer stopped without writing it.
    pub async fn written(&self, upto: Change) -> bool {
        let mut progress = self.progress.subscribe();
        progress
            .wait_for(|p| p.written >= upto || p.stopped)
            .await
            .is_ok_and(|p| p.written >= upto)
    }
}

impl Default for CommitLink {
    fn default() -> Self {
        Self::new()
    }
}
