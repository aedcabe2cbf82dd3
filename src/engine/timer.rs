//! The deadline timer: one task that sleeps until the store's next due time (a delayed
//! job, a TTR deadline, the end of a pause), applies it, and serves waiters. No polling
//! interval: it wakes at the deadline, or earlier when told of an earlier one.
//!
//! Ownership: [`Timer`] is shared; the task is the only caller of `Store::tick`.
//! Invariant: after any change that creates a deadline earlier than the one the task
//! sleeps towards, [`Timer::hint`] is called, so the task re-plans (a `Notify` permit
//! is stored if the task is busy, so no hint is lost).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use super::Engine;
use crate::store::{NANOS_PER_SEC, Nanos, Store};

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

/// The timer task. Ends when the engine's stop token is cancelled.
pub async fn run(engine: Arc<Engine>) {
    let mut last_sweep = engine.clock.now();
    loop {
        let next = match engine.store.next_deadline().await {
            Ok(next) => next,
            Err(err) => {
                tracing::warn!(%err, "timer: cannot read the next deadline; retrying in 1 s");
                Some(engine.clock.now() + NANOS_PER_SEC)
            }
        };
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
            _ = engine.stop.cancelled() => return,
        }
        match engine.store.tick(engine.clock.now()).await {
            Ok(tubes) => engine.serve(tubes).await,
            Err(err) => tracing::warn!(%err, "timer: tick failed; retrying"),
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
