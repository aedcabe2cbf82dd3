//! The deadline timer: one task that sleeps until the store's next due time (a delayed
//! job, a TTR deadline, the end of a pause), applies it, and serves waiters. No polling
//! interval: it wakes at the deadline, or earlier when told of an earlier one.
//!
//! A failing tick (the store away, or refusing writes) is retried after a backoff that
//! doubles up to 5 s, with at most one warning per 10 s, never in a busy loop.
//!
//! Ownership: [`Timer`] is shared; the task is the only caller of `Store::tick`.
//! Invariant: after any change that creates a deadline earlier than the one the task
//! sleeps towards, [`Timer::hint`] is called, so the task re-plans (a `Notify` permit
//! is stored if the task is busy, so no hint is lost).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use super::Engine;
use crate::store::Store;
use crate::time::{NANOS_PER_SEC, Nanos};

#[derive(Debug)]
pub struct Timer {
    planned: AtomicU64,
    wake: Notify,
}

impl Default for Timer {
    fn default() -> Self {
        Timer {
            planned: AtomicU64::new(u64::MAX),
            wake: Notify::new(),
        }
    }
}

impl Timer {
    /// Something is due at `at`; wake the task if that is before its plan.
    pub fn hint(&self, at: Nanos) {
        if at < self.planned.load(Ordering::SeqCst) {
            self.planned.store(at, Ordering::SeqCst);
            self.wake.notify_one();
        }
    }
}

/// The first pause after a failed tick, doubled on each failure in a row up to
/// [`MOST_BACKOFF`]: a store that refuses every write (a Redis made a replica) or an
/// outage must not turn the timer into a busy loop.
const FIRST_BACKOFF: Nanos = NANOS_PER_SEC / 10;
const MOST_BACKOFF: Nanos = 5 * NANOS_PER_SEC;

/// While failures go on, at most one warning per this long (with how many there were).
const LOG_EVERY: Nanos = 10 * NANOS_PER_SEC;

/// Failures in a row of the timer's store calls: the backoff, and rate-limited logs.
#[derive(Default)]
struct Failures {
    in_a_row: u32,
    since_log: u64,
    last_log: Option<Nanos>,
}

impl Failures {
    /// A call failed at `now`: log it unless one was logged within [`LOG_EVERY`], and
    /// return when to try again.
    fn failed(&mut self, what: &str, err: &dyn std::fmt::Display, now: Nanos) -> Nanos {
        self.in_a_row = self.in_a_row.saturating_add(1);
        self.since_log += 1;
        if self.last_log.is_none_or(|at| now >= at + LOG_EVERY) {
            tracing::warn!(
                %err,
                failures = self.since_log,
                "timer: {what} failed; retrying with backoff (one warning per {} s)",
                LOG_EVERY / NANOS_PER_SEC
            );
            self.last_log = Some(now);
            self.since_log = 0;
        }
        let shift = self.in_a_row.saturating_sub(1).min(16);
        now + FIRST_BACKOFF.saturating_mul(1 << shift).min(MOST_BACKOFF)
    }

    fn succeeded(&mut self) {
        if self.in_a_row > 0 {
            tracing::info!(failures = self.in_a_row, "timer: working again");
        }
        *self = Failures::default();
    }
}

/// The timer task. Ends when the engine's stop token is cancelled.
pub async fn run(engine: Arc<Engine>) {
    let mut last_sweep = engine.clock.now();
    let mut failures = Failures::default();
    // While failing, no tick before this.
    let mut not_before: Nanos = 0;
    loop {
        let next = match engine.store.next_deadline().await {
            Ok(next) => next,
            Err(err) => {
                let at = failures.failed("reading the next deadline", &err, engine.clock.now());
                not_before = not_before.max(at);
                Some(at)
            }
        };
        let next = next.map(|n| n.max(not_before));
        // A shared store may gain deadlines from other instances: never sleep past the
        // safety sweep.
        let sweep = engine
            .store
            .sweep_interval()
            .map(|d| engine.clock.now() + d.as_nanos() as u64);
        let next = match (next, sweep) {
            (Some(n), Some(s)) => Some(n.min(s)),
            (n, s) => n.or(s),
        };
        engine
            .timer
            .planned
            .store(next.unwrap_or(u64::MAX), Ordering::SeqCst);
        let sleep = async {
            match next {
                Some(at) => tokio::time::sleep_until(engine.clock.instant_at(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = engine.timer.wake.notified() => continue,
            // The tick starts the fresh namespace: not after a backoff or the sweep.
            _ = engine.store.namespace_lost() => {}
            _ = engine.stop.cancelled() => return,
        }
        match engine.store.tick(engine.clock.now()).await {
            Ok(tubes) => {
                failures.succeeded();
                not_before = 0;
                engine.serve(tubes).await;
            }
            Err(err) => not_before = failures.failed("a tick", &err, engine.clock.now()),
        }
        if let Some(every) = engine.store.sweep_interval() {
            let now = engine.clock.now();
            if now >= last_sweep + every.as_nanos() as u64 {
                last_sweep = now;
                engine.sweep_waiting().await;
            }
        }
    }
}
