//! Put only: producers put for the duration (or --jobs), measured; then the tube is
//! drained outside the measurement so every job is accounted for.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::produce::{Plan, Quota, produce_all};
use super::timers::Delay;
use super::{
    PhaseMeter, Run, TaskOut, check_empty, connect_consumers, connect_producers, consume, join_all,
    secs,
};
use crate::report::Outcome;

pub async fn run(run: Arc<Run>) -> Result<Outcome> {
    let a = &run.args;
    let producers = connect_producers(&run, a.connections, Some(&run.tubes[0])).await?;
    let meter = PhaseMeter::start(a).await?;
    let started = run.now_ns();
    let quota = match a.jobs {
        Some(n) => Quota::count(n),
        None => Quota::Until(Instant::now() + secs(a.duration)),
    };
    let plan = Arc::new(Plan {
        quota,
        depth: a.pipeline,
        backlog: None,
        pace: None,
        delay: Delay::Secs(0),
    });
    let mut puts = produce_all(&run, producers, plan).await;
    let ended = run.now_ns();
    let (cpu, redis_commands) = meter.stop().await?;
    let put_rtt = std::mem::take(&mut puts.latency);

    let drained = drain_all(&run).await?;
    let mut failures = std::mem::take(&mut puts.failures);
    puts.merge(drained);
    failures.append(&mut puts.failures);
    failures.extend(puts.ledger.verify());
    check_empty(&run, &mut failures).await;

    let count = puts.latency.summary().count as u64;
    let rtt = put_rtt.summary();
    Ok(Outcome {
        ops: rtt.count as u64,
        unit: "puts",
        elapsed: Duration::from_nanos(u64::try_from(ended - started).unwrap_or(0)),
        latency: ("put", rtt),
        others: vec![],
        figures: vec![("jobs drained afterwards", count as f64)],
        cpu,
        redis_commands,
        failures,
        tubes: run.tubes.clone(),
    })
}

/// Drain every tube of the run with as many connections as producers, 16 reserves in
/// flight each (at least the run's pipeline depth).
pub async fn drain_all(run: &Arc<Run>) -> Result<TaskOut> {
    let a = &run.args;
    let consumers = connect_consumers(run, a.connections).await?;
    let depth = a.pipeline.max(16);
    let handles = consumers
        .into_iter()
        .map(|c| tokio::spawn(consume::drain(run.clone(), c, depth)))
        .collect();
    Ok(join_all(handles).await)
}
