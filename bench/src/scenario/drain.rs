//! Drain of a pre-filled tube: put --jobs jobs (not measured), take the server's memory
//! figures while they are all queued, then measure draining them.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;

use super::produce::fill_with;
use super::put::drain_all;
use super::{PhaseMeter, Run, check_empty, connect_producers};
use crate::memory;
use crate::redis;
use crate::report::Outcome;

/// Memory figures of the server: (RSS, Redis used_memory), each when asked for.
async fn snapshot(run: &Run) -> Result<(Option<u64>, Option<u64>)> {
    let rss = match run.args.server_pid {
        Some(pid) => Some(memory::rss_bytes(pid)?),
        None => None,
    };
    let redis = match &run.args.redis_info {
        Some(addr) => Some(redis::used_memory(addr).await?),
        None => None,
    };
    Ok((rss, redis))
}

pub async fn run(run: Arc<Run>) -> Result<Outcome> {
    let a = &run.args;
    let jobs = a.jobs.unwrap_or(10_000);
    let producers = connect_producers(&run, a.connections, Some(&run.tubes[0])).await?;
    let before = snapshot(&run).await?;

    let fill_start = run.now_ns();
    let mut fill = fill_with(&run, producers, jobs).await;
    let fill_secs = (run.now_ns() - fill_start) as f64 / 1e9;
    let after = snapshot(&run).await?;

    let meter = PhaseMeter::start(a).await?;
    let drain_start = run.now_ns();
    let mut drained = drain_all(&run).await?;
    let (cpu, redis_commands) = meter.stop().await?;
    let elapsed = Duration::from_nanos(u64::try_from(drained.last_ns - drain_start).unwrap_or(0));

    let put = fill.ledger.put.len() as f64;
    let mut figures = vec![("fill puts/s", put / fill_secs.max(1e-9))];
    if let (Some(b), Some(e)) = before_after(before.0, after.0) {
        figures.push(("server rss before fill (bytes)", b));
        figures.push(("server rss after fill (bytes)", e));
        figures.push(("server rss per job (bytes)", (e - b) / put.max(1.0)));
    }
    if let (Some(b), Some(e)) = before_after(before.1, after.1) {
        figures.push(("redis used_memory before fill (bytes)", b));
        figures.push(("redis used_memory after fill (bytes)", e));
        let per_job = (e - b) / put.max(1.0);
        figures.push(("redis bytes per job (bytes)", per_job));
        figures.push((
            "redis bytes per job excluding body (bytes)",
            per_job - a.body_size as f64,
        ));
    }

    let mut failures = std::mem::take(&mut fill.failures);
    failures.append(&mut drained.failures);
    let reserve_rtt = std::mem::take(&mut drained.latency).summary();
    let delete_rtt = std::mem::take(&mut drained.delete_rtt).summary();
    let fill_rtt = std::mem::take(&mut fill.latency).summary();
    fill.ledger.merge(std::mem::take(&mut drained.ledger));
    let count = fill.ledger.deleted.len() as u64;
    failures.extend(fill.ledger.verify());
    check_empty(&run, &mut failures).await;

    Ok(Outcome {
        ops: count,
        unit: "jobs",
        elapsed,
        latency: ("reserve", reserve_rtt),
        others: vec![("delete", delete_rtt), ("fill put", fill_rtt)],
        figures,
        cpu,
        redis_commands,
        failures,
        tubes: run.tubes.clone(),
    })
}

fn before_after(b: Option<u64>, a: Option<u64>) -> (Option<f64>, Option<f64>) {
    match (b, a) {
        (Some(b), Some(a)) => (Some(b as f64), Some(a as f64)),
        _ => (None, None),
    }
}
