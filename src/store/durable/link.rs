//! The link between a [`super::DurableStore`] and the committer that persists it: the
//! store tells the committer it changed something (`changed`), the committer publishes
//! how far it has written (`progress`, a watch channel; replies wait in the link's
//! queue of waiters, woken by the progress that covers them), and whoever
//! holds the right to acknowledge (a leader's lease keeper) says until when
//! (`valid`).
//!
//! Ownership: made by whoever starts a persisted engine (`crate::persist::engine`),
//! cloned into the store, the committer and (leader mode) the lease keeper. Only the
//! committer publishes progress ([`CommitLink::publish`]); only the lease keeper moves
//! `valid`.
//!
//! Waking: a reply waiting for its change ([`CommitLink::until_written`]) is kept in
//! change order and woken only by the progress that covers it (or the committer's
//! stop), not by every batch's answer: with a watch channel each batch woke every
//! waiting connection, ~5 polls per job at 10 connections. Invariant: a
//! waiter registers and then reads the progress; the committer publishes and then
//! wakes what the progress covers; both under one lock, so no waiter misses its wake.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Instant;

use tokio::sync::{Notify, oneshot, watch};

use super::stages::BatchStages;
use crate::store::{Change, StoreError};

/// How far the committer has written, as it publishes it.
#[derive(Clone, Debug, Default)]
pub struct CommitProgress {
    /// Every change up to this one is persisted.
    pub written: Change,
    /// The committer stopped for good (leadership lost, or the process shuts down):
    /// nothing more will be written, and nothing more may be acknowledged.
    pub stopped: bool,
    /// Why the last write failed, while no write has succeeded since (for readiness
    /// and the replies that time out waiting).
    pub failing: Option<Arc<StoreError>>,
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
    /// Where each batch's time went (`/metrics`): noted by the store and the committer.
    pub stages: Arc<BatchStages>,
    waiters: Arc<WaitingReplies>,
}

/// The replies waiting for their change, in change order (see the module header).
#[derive(Debug, Default)]
struct WaitingReplies {
    queue: Mutex<BTreeMap<(Change, u64), oneshot::Sender<()>>>,
    /// Tells apart waiters of one change.
    next: AtomicU64,
}

impl WaitingReplies {
    fn queue(&self) -> MutexGuard<'_, BTreeMap<(Change, u64), oneshot::Sender<()>>> {
        // A panic elsewhere while holding it leaves a map that is still whole.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A reply's wait for its change: resolves once it is written or the committer stopped
/// (the caller reads which from the progress). Dropped unresolved (a timeout), it leaves
/// the queue.
pub struct UntilWritten {
    waiters: Arc<WaitingReplies>,
    key: (Change, u64),
    rx: oneshot::Receiver<()>,
}

impl Future for UntilWritten {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A sender dropped unsent (the link itself gone) ends the wait as well.
        Pin::new(&mut self.rx).poll(cx).map(|_| ())
    }
}

impl Drop for UntilWritten {
    fn drop(&mut self) {
        self.waiters.queue().remove(&self.key);
    }
}

impl CommitLink {
    pub fn new() -> CommitLink {
        CommitLink {
            progress: watch::Sender::new(CommitProgress::default()),
            changed: Arc::new(Notify::new()),
            valid: Arc::new(ValidUntil::forever()),
            finishing: Arc::default(),
            stages: Arc::default(),
            waiters: Arc::default(),
        }
    }

    /// Publish the committer's progress (`f` changes it), then wake the replies it
    /// covers: those whose change is written, or every one once stopped.
    pub fn publish(&self, f: impl FnOnce(&mut CommitProgress)) {
        self.progress.send_modify(f);
        // Before any reply is woken, so each reads this publication's time.
        self.stages.published(Instant::now());
        let (written, stopped) = {
            let p = self.progress.borrow();
            (p.written, p.stopped)
        };
        let woken = {
            let mut queue = self.waiters.queue();
            if stopped {
                std::mem::take(&mut *queue)
            } else {
                let later = queue.split_off(&(written.next(), 0));
                std::mem::replace(&mut *queue, later)
            }
        };
        for (_, tx) in woken {
            let _ = tx.send(());
        }
    }

    /// Wait until change `upto` is written or the committer stopped.
    pub fn until_written(&self, upto: Change) -> UntilWritten {
        let (tx, rx) = oneshot::channel();
        let key = (upto, self.waiters.next.fetch_add(1, Ordering::Relaxed));
        let mut queue = self.waiters.queue();
        let p = self.progress.borrow();
        // Published before this registered: no one would wake it.
        if p.written >= upto || p.stopped {
            let _ = tx.send(());
        } else {
            queue.insert(key, tx);
        }
        drop(p);
        drop(queue);
        UntilWritten {
            waiters: Arc::clone(&self.waiters),
            key,
            rx,
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

#[cfg(test)]
mod tests {
    use std::task::Waker;

    use super::*;

    fn change(n: u64) -> Change {
        (0..n).fold(Change::NONE, |c, _| c.next())
    }

    /// Whether `w` has resolved, polled once.
    fn done(w: &mut UntilWritten) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        Pin::new(w).poll(&mut cx).is_ready()
    }

    /// A waiter is woken by the progress that covers its change, not by an earlier
    /// batch's; one that registers after its change was published resolves at once;
    /// a stop wakes every waiter; a waiter given up leaves the queue.
    #[test]
    fn waiters_wake_only_when_their_change_is_written() {
        let link = CommitLink::new();
        let mut w2 = link.until_written(change(2));
        let mut w5 = link.until_written(change(5));
        assert!(!done(&mut w2) && !done(&mut w5));
        link.publish(|p| p.written = change(1));
        assert!(!done(&mut w2) && !done(&mut w5));
        link.publish(|p| p.written = change(3));
        assert!(done(&mut w2), "its change is written");
        assert!(!done(&mut w5), "woken by an earlier batch");
        let mut late = link.until_written(change(3));
        assert!(done(&mut late), "registered after its change was published");
        let gone = link.until_written(change(9));
        assert_eq!(link.waiters.queue().len(), 2);
        drop(gone);
        assert_eq!(
            link.waiters.queue().len(),
            1,
            "a dropped waiter stays queued"
        );
        link.publish(|p| p.stopped = true);
        assert!(done(&mut w5), "a stop wakes every waiter");
        assert!(link.waiters.queue().is_empty());
        let mut after_stop = link.until_written(change(7));
        assert!(done(&mut after_stop));
    }
}
