//! `batch`: the batch worker against the one-command worker (docs/EXTENSIONS.md,
//! *Batches*). Fill one tube with --jobs jobs (not measured), then -c worker
//! connections empty it: with `--batch N` each sends `reserve-batch N 1` and then one
//! `delete-batch` of what it got; with `--batch 0` each sends `reserve-with-timeout 1`
//! and `delete`, one command at a time, as a worker written for beanstalkd does. The
//! measured phase runs from the first reserve to the last delete; every job is checked
//! (body, reserved and deleted exactly once).
//!
//! `flush`: another client's latency while a large tube is flushed. Fill a tube with
//! --jobs jobs (not measured); a probe connection loops put -> reserve-with-timeout ->
//! delete on a tube of its own for --duration seconds, then keeps looping while a
//! second connection sends `flush-tube` of the full tube; the probe's round trips
//! before and during the flush are reported apart, with the flush's duration.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::produce::fill_with;
use super::{
    PhaseMeter, Run, TaskOut, check_empty, connect_consumers, connect_producers, join_all,
};
use crate::body;
use crate::client::{Conn, Reply};
use crate::report::Outcome;
use crate::stats::{Samples, ms};

/// Fill the run's first tube with `jobs` jobs, unmeasured.
async fn fill(run: &Arc<Run>, jobs: u64) -> Result<TaskOut> {
    let producers = connect_producers(run, run.args.connections, Some(&run.tubes[0])).await?;
    Ok(fill_with(run, producers, jobs).await)
}

pub async fn run(run: Arc<Run>) -> Result<Outcome> {
    let a = &run.args;
    let mut filled = fill(&run, a.jobs.unwrap_or(100_000)).await?;
    let workers = connect_consumers(&run, a.connections).await?;
    let meter = PhaseMeter::start(a).await?;
    let started = run.now_ns();
    let handles = workers
        .into_iter()
        .map(|c| tokio::spawn(work(run.clone(), c, a.batch)))
        .collect();
    let mut done = join_all(handles).await;
    let (cpu, redis_commands) = meter.stop().await?;
    let elapsed = Duration::from_nanos(u64::try_from(done.last_ns - started).unwrap_or(0));
    let mut failures = std::mem::take(&mut filled.failures);
    failures.append(&mut done.failures);
    let reserve_rtt = std::mem::take(&mut done.latency).summary();
    let delete_rtt = std::mem::take(&mut done.delete_rtt).summary();
    filled.ledger.merge(std::mem::take(&mut done.ledger));
    let count = filled.ledger.deleted.len() as u64;
    failures.extend(filled.ledger.verify());
    check_empty(&run, &mut failures).await;
    let label = if a.batch > 0 {
        "reserve-batch"
    } else {
        "reserve"
    };
    Ok(Outcome {
        ops: count,
        unit: "jobs",
        elapsed,
        latency: (label, reserve_rtt),
        others: vec![("delete", delete_rtt)],
        figures: vec![("jobs per reserve (most)", a.batch.max(1) as f64)],
        cpu,
        redis_commands,
        failures,
        tubes: run.tubes.clone(),
    })
}

/// One worker: reserve (a batch of up to `batch`, or one job when 0) and delete until
/// the tube has nothing ready for a second.
async fn work(run: Arc<Run>, mut conn: Conn, batch: usize) -> Result<TaskOut> {
    let size = run.args.body_size;
    let mut out = TaskOut::default();
    loop {
        let sent = run.now_ns();
        let jobs = if batch > 0 {
            conn.command(&format!("reserve-batch {batch} 1"));
            conn.flush().await?;
            read_batch(&mut conn).await?
        } else {
            conn.command("reserve-with-timeout 1");
            conn.flush().await?;
            match conn.read_reply().await? {
                Reply::Reserved { id, body } => vec![(id, body)],
                Reply::TimedOut => Vec::new(),
                other => bail!("reserve-with-timeout answered {}", other.describe()),
            }
        };
        if jobs.is_empty() {
            return Ok(out);
        }
        let got = run.now_ns();
        out.latency.push(got - sent);
        for (id, body) in &jobs {
            out.ledger.reserved.push(*id);
            if let Err(e) = body::check(body, size) {
                out.failures.push(format!("job {id}: {e:#}"));
            }
        }
        let ids: Vec<u64> = jobs.iter().map(|(id, _)| *id).collect();
        delete(&mut conn, &ids, batch > 0).await?;
        let done = run.now_ns();
        out.ledger.deleted.extend(&ids);
        out.delete_rtt.push(done - got);
        out.last_ns = done;
        run.deleted.fetch_add(ids.len() as u64, Ordering::Relaxed);
    }
}

/// `RESERVED_BATCH <k>` and its k jobs.
async fn read_batch(conn: &mut Conn) -> Result<Vec<(u64, Vec<u8>)>> {
    let head = conn.read_reply().await?;
    let k: usize = match &head {
        Reply::Other(line) => line
            .strip_prefix("RESERVED_BATCH ")
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("reserve-batch answered {line}"))?,
        other => bail!("reserve-batch answered {}", other.describe()),
    };
    let mut jobs = Vec::with_capacity(k);
    for _ in 0..k {
        match conn.read_reply().await? {
            Reply::Reserved { id, body } => jobs.push((id, body)),
            other => bail!("a batch's job was {}", other.describe()),
        }
    }
    Ok(jobs)
}

/// Delete `ids`: one `delete-batch` (`batched`), or one `delete` (a single id).
async fn delete(conn: &mut Conn, ids: &[u64], batched: bool) -> Result<()> {
    if !batched {
        conn.delete(ids[0]);
        conn.flush().await?;
        return match conn.read_reply().await? {
            Reply::Deleted => Ok(()),
            other => bail!("delete {} answered {}", ids[0], other.describe()),
        };
    }
    let line: String = ids.iter().map(|id| format!(" {id}")).collect();
    conn.command(&format!("delete-batch{line}"));
    conn.flush().await?;
    let want = format!("DELETED_BATCH {} 0", ids.len());
    match conn.read_reply().await? {
        Reply::Other(line) if line == want => Ok(()),
        other => bail!("delete-batch answered {} (not {want})", other.describe()),
    }
}

/// The flush-under-load scenario (see the module header).
pub async fn flush(run: Arc<Run>) -> Result<Outcome> {
    let a = &run.args;
    let jobs = a.jobs.unwrap_or(1_000_000);
    let filled = fill(&run, jobs).await?;
    let probe_tube = format!("{}-probe", run.tubes[0]);
    let mut probe = connect_producers(&run, 1, Some(&probe_tube))
        .await?
        .remove(0);
    for line in [format!("watch {probe_tube}"), "ignore default".to_string()] {
        if !matches!(probe.call(&line).await?, Reply::Watching(_)) {
            bail!("{line}: not WATCHING");
        }
    }
    let flusher = Conn::connect(&a.addr).await?;
    let (mut before, mut during) = (Samples::default(), Samples::default());
    let until = run.now_ns() + i64::try_from(super::secs(a.duration).as_nanos()).unwrap_or(0);
    while run.now_ns() < until {
        before.push(probe_cycle(&run, &mut probe).await?);
    }
    let meter = PhaseMeter::start(a).await?;
    let flush_start = run.now_ns();
    // The flush on a task of its own; the probe's cycles run whole until it answers
    // (a cycle cut short would leave its job behind).
    let line = format!("flush-tube {}", run.tubes[0]);
    let flushing = tokio::spawn(async move {
        let mut flusher = flusher;
        let reply = flusher.call(&line).await;
        (reply, Instant::now())
    });
    while !flushing.is_finished() {
        during.push(probe_cycle(&run, &mut probe).await?);
    }
    let (reply, answered) = flushing.await.context("the flushing task")?;
    let reply = reply?;
    let flush_ns = i64::try_from(answered.duration_since(run.start).as_nanos()).unwrap_or(i64::MAX)
        - flush_start;
    let (cpu, redis_commands) = meter.stop().await?;
    let mut failures = filled.failures;
    let want = format!("FLUSHED {}", filled.ledger.put.len());
    if !matches!(&reply, Reply::Other(line) if *line == want) {
        failures.push(format!(
            "flush-tube answered {} (not {want})",
            reply.describe()
        ));
    }
    let (before, during) = (before.summary(), during.summary());
    let figures = vec![
        ("jobs flushed", filled.ledger.put.len() as f64),
        ("flush duration (ms)", flush_ns as f64 / 1e6),
        ("probe cycles before", before.count as f64),
        ("probe p50 before (ms)", ms(before.p50)),
        ("probe p99 before (ms)", ms(before.p99)),
        ("probe max before (ms)", ms(before.max)),
        ("probe cycles during", during.count as f64),
        ("probe p50 during (ms)", ms(during.p50)),
        ("probe p99 during (ms)", ms(during.p99)),
        ("probe max during (ms)", ms(during.max)),
    ];
    check_empty(&run, &mut failures).await;
    Ok(Outcome {
        ops: filled.ledger.put.len() as u64,
        unit: "jobs flushed",
        elapsed: Duration::from_nanos(u64::try_from(flush_ns).unwrap_or(0)),
        latency: ("probe cycle during the flush", during),
        others: vec![("probe cycle before", before)],
        figures,
        cpu,
        redis_commands,
        failures,
        tubes: run.tubes.clone(),
    })
}

/// One put -> reserve-with-timeout 1 -> delete on the probe's own tube; its duration.
async fn probe_cycle(run: &Run, conn: &mut Conn) -> Result<i64> {
    let start = run.now_ns();
    let size = run.args.body_size;
    let stamp = u64::try_from(start).unwrap_or(0);
    conn.put_with(0, 0, 60, size, |b| body::write(b, stamp, size));
    conn.flush().await?;
    let id = match conn.read_reply().await? {
        Reply::Inserted(id) => id,
        other => bail!("probe put answered {}", other.describe()),
    };
    match conn.call("reserve-with-timeout 1").await? {
        Reply::Reserved { id: got, .. } if got == id => {}
        other => bail!("probe reserve answered {}", other.describe()),
    }
    if conn.call(&format!("delete {id}")).await? != Reply::Deleted {
        bail!("probe delete {id} failed");
    }
    Ok(run.now_ns() - start)
}
