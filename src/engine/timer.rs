//! The deadline timer: one task that sleeps until the store's next due time (a delayed
//! job, a TTR deadline, the end of a pause), applies it, and serves waiters. No polling
//! interval: it wakes at the deadline, or earlier when told of an earlier one.
//!
//! A failing tick (the store away, or refusing writes) is retried after a backoff that
//! doubles up to 5 s, with at most one warning per 10 s, never in a busy loop.
//!
//! Ownership: [`Timer`] is shared; the task is the only caller of `Store::tick`. Its
//! [`Plan`] sits behind a std `Mutex`, never held across an `.await`.
//!
//! Invariants:
//! - after any change that creates a deadline earlier than the one the task sleeps
//!   towards, [`Timer::hint`] is called, so the task re-plans. A hint that arrives while
//!   the task reads the store's next deadline is kept and looked at once the read is
//!   back (the read may have been taken before the change: with a remote store, a hint
//!   compared then with the wake time just passed was dropped, and the deadline missed
//!   until the next read);
//! - a waiter whose timeout (or safety margin) is due first lets every deadline up to it
//!   be applied and served ([`Timer::catch_up`]), as the reference's tick moves due jobs
//!   before it times connections out: a job due 2 ms before a reserve's timeout goes to
//!   that reserve even when the tick and its serve pass take longer than 2 ms (a round
//!   trip or two to Redis on a loaded machine).

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;

use super::Engine;
use crate::store::Store;
use crate::time::{NANOS_PER_SEC, Nanos};
use crate::util::lock;

#[derive(Debug)]
pub struct Timer {
    plan: Mutex<Plan>,
    wake: Notify,
    /// Bumped whenever the plan's `read` or `applied` moved, for [`Timer::catch_up`].
    progress: watch::Sender<u64>,
}

/// What the timer task knows and intends.
#[derive(Debug)]
struct Plan {
    /// When the task wakes next (`u64::MAX`: when told). 0 while it reads the store's
    /// next deadline, so a hint then wakes nothing: it is in `hinted`, looked at after.
    wake: Nanos,
    /// The earliest deadline hinted since the task began its last read (`u64::MAX`:
    /// none).
    hinted: Nanos,
    /// The store's earliest deadline at the last read (`u64::MAX`: none), lowered by the
    /// hints that came before that read began.
    read: Nanos,
    /// Every deadline up to here has been applied and its jobs served: the `now` of the
    /// last tick that finished (or failed).
    applied: Nanos,
}

impl Default for Timer {
    fn default() -> Self {
        Timer {
            plan: Mutex::new(Plan {
                wake: u64::MAX,
                hinted: u64::MAX,
                read: u64::MAX,
                applied: 0,
            }),
            wake: Notify::new(),
            progress: watch::Sender::new(0),
        }
    }
}

impl Timer {
    fn plan(&self) -> MutexGuard<'_, Plan> {
        lock(&self.plan)
    }

    /// Something is due at `at`; wake the task if that is before its plan.
    pub fn hint(&self, at: Nanos) {
        let mut plan = self.plan();
        plan.hinted = plan.hinted.min(at);
        if at < plan.wake {
            plan.wake = at;
            self.wake.notify_one();
        }
    }

    /// A waiter's wake time `at` has come (`at` is not in the future): return once
    /// every deadline up to `at` that the timer knows of has been applied and its jobs
    /// handed to waiters, at once when there is none. Bounded by the timer task, which
    /// is due itself then (its plan is no later than `at`); ends at `stop`.
    pub async fn catch_up(&self, at: Nanos, stop: &CancellationToken) {
        let mut progress = self.progress.subscribe();
        loop {
            {
                let plan = self.plan();
                if plan.applied >= at || plan.read.min(plan.hinted) > at {
                    return;
                }
            }
            tokio::select! {
                changed = progress.changed() => if changed.is_err() { return },
                _ = stop.cancelled() => return,
            }
        }
    }

    /// The task begins a read of the store's next deadline.
    fn reading(&self) {
        let mut plan = self.plan();
        plan.read = plan.read.min(plan.hinted);
        plan.hinted = u64::MAX;
        plan.wake = 0;
    }

    /// The read is back with the store's earliest deadline `due` (`u64::MAX`: none);
    /// the task may sleep until `sleep` at the latest. When it wakes.
    fn planned(&self, due: Nanos, sleep: Nanos) -> Nanos {
        let wake = {
            let mut plan = self.plan();
            plan.read = due;
            plan.wake = sleep.min(due).min(plan.hinted);
            plan.wake
        };
        self.progress.send_modify(|n| *n += 1);
        wake
    }

    /// A tick at `now` finished (or failed).
    fn applied(&self, now: Nanos) {
        {
            let mut plan = self.plan();
            plan.applied = plan.applied.max(now);
        }
        self.progress.send_modify(|n| *n += 1);
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
        engine.timer.reading();
        let next = match engine.store.next_deadline().await {
            Ok(next) => next,
            Err(err) => {
                let at = failures.failed("reading the next deadline", &err, engine.clock.now());
                not_before = not_before.max(at);
                Some(at)
            }
        };
        let due = next.map_or(u64::MAX, |n| n.max(not_before));
        // A shared store may gain deadlines from other instances: never sleep past the
        // safety sweep.
        let sweep = engine
            .store
            .sweep_interval()
            .map_or(u64::MAX, |d| engine.clock.now() + d.as_nanos() as u64);
        let wake = engine.timer.planned(due, sweep);
        let sleep = async {
            match wake {
                u64::MAX => std::future::pending().await,
                at => tokio::time::sleep_until(engine.clock.instant_at(at)).await,
            }
        };
        tokio::select! {
            _ = sleep => {}
            _ = engine.timer.wake.notified() => continue,
            // The tick starts the fresh namespace: not after a backoff or the sweep.
            _ = engine.store.namespace_lost() => {}
            _ = engine.stop.cancelled() => return,
        }
        let now = engine.clock.now();
        match engine.store.tick(now).await {
            Ok(tubes) => {
                failures.succeeded();
                not_before = 0;
                // Waited for even while another pass is in flight: a waiter catching
                // up (see `Timer::catch_up`) must find these jobs handed over.
                engine.serve_and_wait(tubes).await;
            }
            Err(err) => not_before = failures.failed("a tick", &err, engine.clock.now()),
        }
        engine.timer.applied(now);
        if let Some(every) = engine.store.sweep_interval() {
            let now = engine.clock.now();
            if now >= last_sweep + every.as_nanos() as u64 {
                last_sweep = now;
                engine.sweep_waiting().await;
            }
        }
    }
}
