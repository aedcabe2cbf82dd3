//! put -> reserve -> delete with separate producer and worker connections: the cycle
//! (one tube), tubes (many tubes) and delay (delayed jobs, paced puts, lateness).
//!
//! Workers start first and block in `reserve`; producers put until their quota is used
//! up; then the run waits (up to --settle-timeout) until every job put has been
//! deleted, stops the workers, and checks the ledger and the server.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use tokio::sync::{Semaphore, watch};

use super::produce::{Plan, Quota, produce_all};
use super::timers::Delay;
use super::{
    PhaseMeter, Run, check_empty, connect_consumers, connect_producers, consume, join_all, secs,
};
use crate::cli::Scenario;
use crate::report::Outcome;

pub async fn run(run: Arc<Run>) -> Result<Outcome> {
    let a = &run.args;
    let delayed = a.scenario == Scenario::Delay;
    let workers = a.workers();
    let single = (run.tubes.len() == 1).then(|| run.tubes[0].as_str());
    let producers = connect_producers(&run, a.connections, single).await?;
    let consumers = connect_consumers(&run, workers).await?;

    let backlog = if delayed {
        None
    } else {
        let n = a
            .backlog
            .unwrap_or(2 * (a.connections * a.pipeline).max(workers));
        Some(Arc::new(Semaphore::new(n)))
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let worker_handles: Vec<_> = consumers
        .into_iter()
        .map(|c| {
            tokio::spawn(consume::work(
                run.clone(),
                c,
                backlog.clone(),
                stop_rx.clone(),
                consume::end_to_end,
            ))
        })
        .collect();

    let meter = PhaseMeter::start(a).await?;
    let started = run.now_ns();
    let (quota, pace, delay) = if delayed {
        let n = a.jobs.unwrap_or(200);
        let interval = secs(a.duration / n as f64);
        (Quota::count(n), Some((Instant::now(), interval)), a.delay)
    } else {
        let q = match a.jobs {
            Some(n) => Quota::count(n),
            None => Quota::Until(Instant::now() + secs(a.duration)),
        };
        (q, None, 0)
    };
    let plan = Arc::new(Plan {
        quota,
        depth: a.pipeline,
        backlog: backlog.clone(),
        pace,
        delay: Delay::Secs(delay),
    });
    let puts = produce_all(&run, producers, plan).await;
    let total = puts.ledger.put.len() as u64;

    // Wait for the workers to delete every job put (a delayed job needs its delay first).
    let give_up = Instant::now() + secs(a.settle_timeout) + Duration::from_secs(u64::from(delay));
    while run.deleted() < total
        && Instant::now() < give_up
        && !worker_handles.iter().all(|h| h.is_finished())
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (cpu, redis_commands) = meter.stop().await?;
    let _ = stop_tx.send(true);
    let mut work = join_all(worker_handles).await;

    let mut failures = puts.failures;
    failures.append(&mut work.failures);
    let mut ledger = puts.ledger;
    ledger.merge(std::mem::take(&mut work.ledger));
    let cycled = ledger.deleted.len() as u64;
    failures.extend(ledger.verify());

    let put_rtt = puts.latency.summary();
    let delete_rtt = std::mem::take(&mut work.delete_rtt).summary();
    let e2e = std::mem::take(&mut work.latency);
    let mut others = vec![("put", put_rtt), ("delete", delete_rtt)];
    let latency = if delayed {
        let late = e2e
            .clone()
            .offset(-i64::from(delay) * 1_000_000_000)
            .summary();
        let tolerance = (a.early_tolerance_ms * 1e6) as i64;
        if late.count > 0 && late.min < -tolerance {
            failures.push(format!(
                "a job delayed {delay} s was reserved {:.3} ms before its delay ran out",
                -late.min as f64 / 1e6
            ));
        }
        others.insert(0, ("end-to-end", e2e.summary()));
        ("lateness", late)
    } else {
        ("end-to-end", e2e.summary())
    };
    check_empty(&run, &mut failures).await;

    Ok(Outcome {
        ops: cycled,
        unit: "jobs",
        elapsed: Duration::from_nanos(u64::try_from(work.last_ns - started).unwrap_or(0)),
        latency,
        others,
        figures: vec![],
        cpu,
        redis_commands,
        failures,
        tubes: run.tubes.clone(),
    })
}
