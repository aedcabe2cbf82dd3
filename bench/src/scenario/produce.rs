//! The producer loop: put jobs with up to `depth` requests in flight on one connection,
//! until the [`Quota`] is used up, optionally paced and held back by a backlog limit.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::sync::Semaphore;

use super::timers::Delay;
use super::{Run, TaskOut};
use crate::body;
use crate::client::{Conn, Reply};

/// A producer stops after this many unexpected replies.
const MAX_FAILURES: usize = 10;

/// How many jobs the producers put, together.
pub enum Quota {
    /// As many as they can until the deadline.
    Until(Instant),
    /// Exactly this many (`claimed` counts the ones taken so far).
    Count { total: u64, claimed: AtomicU64 },
}

impl Quota {
    pub fn count(total: u64) -> Quota {
        Quota::Count {
            total,
            claimed: AtomicU64::new(0),
        }
    }

    /// Take one job: its index (for pacing), or None when the quota is used up.
    pub fn claim(&self) -> Option<u64> {
        match self {
            Quota::Until(deadline) => (Instant::now() < *deadline).then_some(0),
            Quota::Count { total, claimed } => {
                let i = claimed.fetch_add(1, Ordering::Relaxed);
                (i < *total).then_some(i)
            }
        }
    }
}

/// What the producers of one run share.
pub struct Plan {
    pub quota: Quota,
    /// Puts in flight per connection.
    pub depth: usize,
    /// Permits for jobs put but not deleted yet (consumers add one per delete).
    pub backlog: Option<Arc<Semaphore>>,
    /// Job `i` is not sent before `start + i * interval`.
    pub pace: Option<(Instant, Duration)>,
    pub delay: Delay,
}

enum Sent {
    Use,
    Put(i64),
}

/// Put `jobs` jobs with `producers` as fast as the server takes them (a fill before
/// the measured phase: pipelined, no backlog, no delay).
pub async fn fill_with(run: &Arc<Run>, producers: Vec<Conn>, jobs: u64) -> TaskOut {
    let plan = Arc::new(Plan {
        quota: Quota::count(jobs),
        depth: run.args.pipeline.max(16),
        backlog: None,
        pace: None,
        delay: Delay::Secs(0),
    });
    produce_all(run, producers, plan).await
}

/// Run `produce` on every producer connection at once and merge what they report.
pub async fn produce_all(run: &Arc<Run>, producers: Vec<Conn>, plan: Arc<Plan>) -> TaskOut {
    let handles = producers
        .into_iter()
        .enumerate()
        .map(|(i, c)| tokio::spawn(produce(run.clone(), c, i, plan.clone())))
        .collect();
    super::join_all(handles).await
}

/// Put jobs on `conn` (producer number `idx`) until the plan's quota is used up.
/// With more than one tube in the run, each put is preceded by a `use` of the next
/// tube in turn.
pub async fn produce(
    run: Arc<Run>,
    mut conn: Conn,
    idx: usize,
    plan: Arc<Plan>,
) -> Result<TaskOut> {
    let a = &run.args;
    let size = a.body_size;
    let multi = run.tubes.len() > 1;
    let mut next_tube = idx;
    let mut out = TaskOut::default();
    let mut window: VecDeque<Sent> = VecDeque::with_capacity(2 * plan.depth);
    let mut puts = 0;
    let mut finished = false;
    loop {
        while !finished && puts < plan.depth {
            if let Some(sem) = &plan.backlog {
                match sem.try_acquire() {
                    Ok(p) => p.forget(),
                    Err(_) if !window.is_empty() => break,
                    Err(_) => {
                        conn.flush().await?;
                        sem.acquire().await?.forget();
                    }
                }
            }
            let Some(i) = plan.quota.claim() else {
                if let Some(sem) = &plan.backlog {
                    sem.add_permits(1);
                }
                finished = true;
                break;
            };
            if let Some((t0, interval)) = plan.pace {
                let due = t0 + interval.saturating_mul(u32::try_from(i).unwrap_or(u32::MAX));
                if due > Instant::now() {
                    conn.flush().await?;
                    tokio::time::sleep_until(due.into()).await;
                }
            }
            if multi {
                conn.command(&format!("use {}", run.tubes[next_tube % run.tubes.len()]));
                next_tube += 1;
                window.push_back(Sent::Use);
            }
            let ts = run.now_ns();
            let stamp = u64::try_from(ts).unwrap_or(0);
            conn.put_with(a.pri, plan.delay.written(stamp), a.ttr, size, |b| {
                body::write(b, stamp, size)
            });
            window.push_back(Sent::Put(ts));
            puts += 1;
        }
        conn.flush().await?;
        let Some(sent) = window.pop_front() else {
            break;
        };
        let reply = conn.read_reply().await?;
        let now = run.now_ns();
        match (sent, reply) {
            (Sent::Use, Reply::Using(_)) => {}
            (Sent::Put(ts), Reply::Inserted(id)) => {
                puts -= 1;
                out.ledger.put.push(id);
                out.latency.push(now - ts);
                out.last_ns = now;
            }
            (Sent::Put(_), other) => {
                puts -= 1;
                out.failures
                    .push(format!("put answered {}", other.describe()));
                if let Some(sem) = &plan.backlog {
                    sem.add_permits(1);
                }
            }
            (Sent::Use, other) => {
                out.failures
                    .push(format!("use answered {}", other.describe()));
            }
        }
        if out.failures.len() >= MAX_FAILURES {
            finished = true;
        }
    }
    Ok(out)
}
