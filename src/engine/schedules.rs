//! The schedules' runner (docs/SCHEDULES.md): one task per engine that fires each
//! schedule's ticks through the store ([`Store::fire_tick`]), wakes the tube's waiting
//! reserves as a put does, and waits until the tick is durable before it plans the
//! schedule's next one.
//!
//! Where it runs: every engine that was given schedules — memory, `-b` and every
//! shared-mode instance (the store's cursor makes one of them fire each tick, the
//! others are answered `Stale`); in leader mode only the leader has an engine.
//!
//! Ownership and bounds: the task owns its plan (a heap of the next tick per unpaused
//! schedule, rebuilt from the store's cursors at start, at each change of the set and
//! every [`RESYNC`]); [`Fires`] (counters and the last [`RECENT`] fires per schedule)
//! is shared with the API. At most [`FIRES_PER_WAKE`] ticks are taken per wake-up,
//! [`IN_FLIGHT`] of them at once.
//!
//! Timing: a tick more than `MISSED_AFTER_MS` late is "missed" and handled as its
//! schedule says (skipped, or the latest fired once); a failed fire is tried again
//! after [`RETRY`] with the same tick, which a store that did apply it answers `Stale`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::watch;

use super::Engine;
use crate::schedule::{MISSED_AFTER_MS, Missed, Schedule, Schedules};
use crate::store::{Fired, JobId, NANOS_PER_SEC, ScheduleName, Store, StoreError};
use crate::util::lock;

/// How often the plan is rebuilt from the store's cursors (another instance, or a
/// `run` through the API, may have moved them).
pub const RESYNC: Duration = Duration::from_secs(10);

/// How long a failed fire waits before it is tried again.
pub const RETRY: Duration = Duration::from_secs(1);

/// A tick ahead of the store's clock (shared mode: Redis') is tried again after this.
const EARLY_RETRY_MS: u64 = 100;

/// The most ticks taken at one wake-up (the rest at the next, at once).
pub const FIRES_PER_WAKE: usize = 256;

/// The most fires waiting on the store at once.
pub const IN_FLIGHT: usize = 32;

/// The fires each schedule's ring keeps.
pub const RECENT: usize = 20;

/// The most missed ticks counted one by one (beyond: counted as this many).
const MISSED_COUNT_MAX: usize = 10_000;

/// What came of one fire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FireResult {
    Made(JobId),
    /// The key's job still waited: no job made.
    Deduped(JobId),
    /// Missed ticks passed over (this many).
    Skipped(u64),
    /// Could not be fired (tried again): why.
    Failed(String),
}

/// One fire, as the API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fire {
    pub tick_ms: u64,
    /// When it was fired (ms since the Unix epoch).
    pub at_ms: u64,
    pub result: FireResult,
}

/// The runner's figures, shared with the API and `/metrics`.
#[derive(Debug, Default)]
pub struct Fires {
    pub made: AtomicU64,
    pub deduped: AtomicU64,
    pub skipped: AtomicU64,
    /// Ticks another instance (or a retry's first try) had fired already.
    pub stale: AtomicU64,
    pub failed: AtomicU64,
    /// Each schedule's last fires, newest last; bounded by the schedules times
    /// [`RECENT`], and a deleted schedule's ring goes at the next change of the set.
    recent: std::sync::Mutex<HashMap<ScheduleName, VecDeque<Fire>>>,
    /// A failure was logged and none has succeeded since (one warning per streak).
    failing: AtomicBool,
}

impl Fires {
    /// `name`'s last fires, oldest first.
    pub fn recent(&self, name: &ScheduleName) -> Vec<Fire> {
        lock(&self.recent)
            .get(name)
            .map(|ring| ring.iter().cloned().collect())
            .unwrap_or_default()
    }

    fn note(&self, name: &ScheduleName, fire: Fire) {
        let (counter, n) = match fire.result {
            FireResult::Made(_) => (&self.made, 1),
            FireResult::Deduped(_) => (&self.deduped, 1),
            FireResult::Skipped(n) => (&self.skipped, n),
            FireResult::Failed(_) => (&self.failed, 1),
        };
        counter.fetch_add(n, Ordering::Relaxed);
        let mut recent = lock(&self.recent);
        let ring = recent.entry(name.clone()).or_default();
        if ring.len() == RECENT {
            ring.pop_front();
        }
        ring.push_back(fire);
    }

    fn forget_others(&self, set: &Schedules) {
        lock(&self.recent).retain(|name, _| set.get(name.as_str()).is_some());
    }
}

/// Fire the schedules of `set` until the engine stops.
pub(super) async fn run(engine: Arc<Engine>, mut set: watch::Receiver<Arc<Schedules>>) {
    let mut plan = Plan::default();
    let mut resync_at = tokio::time::Instant::now();
    loop {
        if tokio::time::Instant::now() >= resync_at || set.has_changed().unwrap_or(false) {
            let schedules = set.borrow_and_update().clone();
            engine.schedule_fires.forget_others(&schedules);
            match engine.store.schedule_cursors().await {
                Ok(cursors) => {
                    plan = Plan::new(
                        schedules,
                        cursors.into_iter().map(|(n, c)| (n, c.last_tick_ms)),
                    );
                    resync_at = tokio::time::Instant::now() + RESYNC;
                }
                Err(err) => {
                    engine.schedule_failed("cannot read the schedules' cursors", &err);
                    resync_at = tokio::time::Instant::now() + RETRY;
                }
            }
        }
        let now_ms = engine.now_ms();
        let due = plan.take_due(now_ms);
        if !due.is_empty() {
            let fired: Vec<(Arc<Schedule>, Next)> = futures_util::stream::iter(due)
                .map(|(schedule, tick)| {
                    let engine = &engine;
                    async move {
                        let next = engine.fire_due(&schedule, tick).await;
                        (schedule, next)
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .collect()
                .await;
            for (schedule, next) in fired {
                plan.after(&schedule, next);
            }
            tokio::task::yield_now().await;
            continue;
        }
        let wake = plan.soonest().map(|ms| {
            tokio::time::Instant::now() + Duration::from_millis(ms.saturating_sub(now_ms))
        });
        let until = wake.map_or(resync_at, |w| w.min(resync_at));
        tokio::select! {
            _ = engine.stop.cancelled() => return,
            changed = set.changed() => {
                if changed.is_err() {
                    return;
                }
                resync_at = tokio::time::Instant::now();
            }
            _ = tokio::time::sleep_until(until) => {}
        }
    }
}

/// What a fire says of the schedule's next tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// The cursor is at this tick: plan the one after it.
    After(u64),
    /// Try this tick again at this instant (ms).
    Retry { tick_ms: u64, at_ms: u64 },
}

/// The next tick of each unpaused schedule, soonest first.
#[derive(Default)]
struct Plan {
    schedules: Arc<Schedules>,
    /// (when to fire, the tick, the schedule's name).
    heap: BinaryHeap<Reverse<(u64, u64, ScheduleName)>>,
}

impl Plan {
    fn new(schedules: Arc<Schedules>, cursors: impl Iterator<Item = (ScheduleName, u64)>) -> Plan {
        let cursors: HashMap<ScheduleName, u64> = cursors.collect();
        let mut plan = Plan {
            schedules: schedules.clone(),
            heap: BinaryHeap::with_capacity(schedules.len()),
        };
        for s in schedules.iter() {
            let last = cursors.get(&s.name).copied().unwrap_or(0);
            plan.after(s, Next::After(last));
        }
        plan
    }

    fn after(&mut self, schedule: &Schedule, next: Next) {
        if schedule.paused {
            return;
        }
        let entry = match next {
            Next::After(last) => schedule.next_after(last).map(|t| (t, t)),
            Next::Retry { tick_ms, at_ms } => Some((at_ms, tick_ms)),
        };
        if let Some((at, tick)) = entry {
            self.heap.push(Reverse((at, tick, schedule.name.clone())));
        }
    }

    fn soonest(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Up to [`FIRES_PER_WAKE`] ticks due at `now_ms`, each with its schedule.
    fn take_due(&mut self, now_ms: u64) -> Vec<(Arc<Schedule>, u64)> {
        let mut due = Vec::new();
        while due.len() < FIRES_PER_WAKE {
            match self.heap.peek() {
                Some(Reverse((at, _, _))) if *at <= now_ms => {}
                _ => break,
            }
            let Some(Reverse((_, tick, name))) = self.heap.pop() else {
                break;
            };
            if let Some(s) = self.schedules.get(name.as_str()) {
                due.push((s.clone(), tick));
            }
        }
        due
    }
}

impl Engine {
    /// The runner's figures and each schedule's last fires.
    pub fn schedule_fires(&self) -> &Fires {
        &self.schedule_fires
    }

    fn now_ms(&self) -> u64 {
        self.clock.now() / (NANOS_PER_SEC / 1000)
    }

    /// Fire `schedule`'s tick `tick_ms`, which is due: as it is, or as a missed one.
    async fn fire_due(&self, schedule: &Schedule, tick_ms: u64) -> Next {
        let now_ms = self.now_ms();
        if now_ms.saturating_sub(tick_ms) <= MISSED_AFTER_MS {
            return self.fire(schedule, tick_ms, 0).await;
        }
        let Some(latest) = schedule.spec.last_at_or_before(now_ms, schedule.changed_ms) else {
            return Next::After(tick_ms);
        };
        let (ticks, _) = schedule.spec.ticks_between(
            tick_ms.saturating_sub(1),
            latest,
            schedule.changed_ms,
            MISSED_COUNT_MAX,
        );
        let missed = ticks.len().max(1) as u64;
        match schedule.missed {
            Missed::Once if now_ms - latest <= MISSED_AFTER_MS => {
                self.fire(schedule, latest, missed - 1).await
            }
            _ => self.skip(schedule, latest, missed).await,
        }
    }

    /// Pass over ticks up to `latest` without a job.
    async fn skip(&self, schedule: &Schedule, latest: u64, missed: u64) -> Next {
        match self.store.skip_to(&schedule.name, latest, missed).await {
            Ok(skipped) => {
                if skipped {
                    self.schedule_fires.note(
                        &schedule.name,
                        Fire {
                            tick_ms: latest,
                            at_ms: self.now_ms(),
                            result: FireResult::Skipped(missed),
                        },
                    );
                }
                Next::After(latest)
            }
            Err(err) => self.retry(schedule, latest, &err),
        }
    }

    /// Fire one tick: its job, the tube's waiters served, then durable.
    async fn fire(&self, schedule: &Schedule, tick_ms: u64, skipped: u64) -> Next {
        if self.is_draining() {
            // Drain mode refuses puts; the tick waits (and is missed if it lasts).
            return Next::Retry {
                tick_ms,
                at_ms: self.now_ms() + RETRY.as_millis() as u64,
            };
        }
        if schedule.body.len() > self.max_job_size as usize {
            // Set while -z was larger, or with -z lowered since: a put would be refused
            // (JOB_TOO_BIG), so the tick is; the API shows why, and the next is tried.
            self.schedule_fires.note(
                &schedule.name,
                Fire {
                    tick_ms,
                    at_ms: self.now_ms(),
                    result: FireResult::Failed(format!(
                        "the body is {} bytes, over -z ({})",
                        schedule.body.len(),
                        self.max_job_size
                    )),
                },
            );
            return Next::After(tick_ms);
        }
        let now = self.clock.now();
        let fired = match self
            .store
            .fire_tick(&schedule.tick(tick_ms, skipped), now)
            .await
        {
            Ok(fired) => fired,
            Err(err) => return self.retry(schedule, tick_ms, &err),
        };
        let result = match fired {
            Fired::Made(id) => {
                self.placed(schedule.tube.clone(), schedule.delay_ms, now)
                    .await;
                FireResult::Made(id)
            }
            Fired::Deduped(id, _) => FireResult::Deduped(id),
            Fired::Stale { last_tick_ms } => {
                self.schedule_fires.stale.fetch_add(1, Ordering::Relaxed);
                return Next::After(last_tick_ms.max(tick_ms));
            }
            Fired::Early => {
                return Next::Retry {
                    tick_ms,
                    at_ms: self.now_ms() + EARLY_RETRY_MS,
                };
            }
        };
        // The tick's job and cursor are in the store; the next tick is planned once
        // they are durable, so at most one unwritten tick per schedule.
        if let Err(err) = self.durable(self.store.last_change()).await {
            return self.retry(schedule, tick_ms, &err);
        }
        if self.schedule_fires.failing.swap(false, Ordering::Relaxed) {
            tracing::info!("schedules: firing again");
        }
        self.schedule_fires.note(
            &schedule.name,
            Fire {
                tick_ms,
                at_ms: self.now_ms(),
                result,
            },
        );
        Next::After(tick_ms)
    }

    fn retry(&self, schedule: &Schedule, tick_ms: u64, err: &StoreError) -> Next {
        self.schedule_failed("a tick could not be fired; trying it again", err);
        self.schedule_fires.note(
            &schedule.name,
            Fire {
                tick_ms,
                at_ms: self.now_ms(),
                result: FireResult::Failed(err.to_string()),
            },
        );
        Next::Retry {
            tick_ms,
            at_ms: self.now_ms() + RETRY.as_millis() as u64,
        }
    }

    /// Log a failure once per streak (a store away fails every schedule at once).
    fn schedule_failed(&self, what: &'static str, err: &StoreError) {
        if !self.schedule_fires.failing.swap(true, Ordering::Relaxed) {
            tracing::warn!(err = %err.chain(), "schedules: {what}");
        }
    }
}

#[cfg(test)]
mod tests;
