//! `timers`: how late delayed jobs become reservable when their delays are written in
//! milliseconds (redstalk's extension, docs/EXTENSIONS.md *Milliseconds*) or, as a
//! client of beanstalkd must write them, in whole seconds.
//!
//! One producer connection (-c) puts --jobs jobs (default 10,000), paced evenly over
//! --duration. Each job wants a delay spread over 0..=--spread-ms (default 2,000),
//! derived from the time stamp its body carries, so a worker knows a job's delay from
//! the body alone. With `--unit ms` the put says `<n>ms`; with `--unit s` the delay is
//! rounded *up* to whole seconds, since a job must not run before its time. -w workers
//! block in `reserve`, one command at a time, and record for every job `received −
//! due`, due = the put's send time + its delay: against the delay the put was written
//! with (the timer's own lateness) and against the delay the job wanted (what a user
//! sees; for `--unit ms` the same). The workers are the cycle's ([`consume::work`]). A job received more than --early-tolerance-ms
//! before its written due time is a failure.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use tokio::sync::watch;

use super::produce::{Plan, Quota, produce_all};
use super::{
    PhaseMeter, Run, TaskOut, check_empty, connect_consumers, connect_producers, consume, join_all,
    secs,
};
use crate::cli::DelayUnit;
use crate::client::{Conn, Reply};
use crate::report::Outcome;

const NS_PER_MS: i64 = 1_000_000;

/// The delay a producer writes on each put.
#[derive(Debug, Clone, Copy)]
pub enum Delay {
    /// The same whole seconds on every job.
    Secs(u32),
    /// Each job its own delay in 0..=max_ms (from its stamp), written in `unit`.
    Spread { max_ms: u64, unit: DelayUnit },
}

/// A delay as the put line carries it: `<n>` seconds or `<n>ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    n: u64,
    ms: bool,
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ms {
            write!(f, "{}ms", self.n)
        } else {
            write!(f, "{}", self.n)
        }
    }
}

impl Delay {
    /// The delay the job stamped `stamp` wants, in ms.
    fn wanted_ms(self, stamp: u64) -> u64 {
        match self {
            Delay::Secs(s) => u64::from(s) * 1000,
            Delay::Spread { max_ms, .. } => mix(stamp) % (max_ms + 1),
        }
    }

    /// What the put of the job stamped `stamp` says.
    pub fn written(self, stamp: u64) -> Written {
        let ms = self.wanted_ms(stamp);
        match self {
            Delay::Spread {
                unit: DelayUnit::Ms,
                ..
            } => Written { n: ms, ms: true },
            // Rounded up: a whole-second user may not run a job early.
            _ => Written {
                n: ms.div_ceil(1000),
                ms: false,
            },
        }
    }

    fn wanted_ns(self, stamp: u64) -> i64 {
        i64::try_from(self.wanted_ms(stamp)).unwrap_or(i64::MAX / NS_PER_MS) * NS_PER_MS
    }

    fn written_ns(self, stamp: u64) -> i64 {
        let w = self.written(stamp);
        let unit = if w.ms { NS_PER_MS } else { 1000 * NS_PER_MS };
        i64::try_from(w.n).unwrap_or(i64::MAX / unit) * unit
    }
}

/// splitmix64's finaliser: send times 200 µs apart get delays spread over the whole
/// range, so jobs fall due in another order than they were put (as in real use).
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A server that would read `<n>ms` as BAD_FORMAT runs the put's body as commands
/// (docs/EXTENSIONS.md, *Probing*): ask first.
async fn require_milliseconds(addr: &str) -> Result<()> {
    let mut conn = Conn::connect(addr).await?;
    match conn.call("list-extensions").await? {
        Reply::Ok(yaml) if String::from_utf8_lossy(&yaml).contains("- milliseconds") => Ok(()),
        other => bail!(
            "{addr} does not serve delays in milliseconds (list-extensions answered {}); \
             use --unit s",
            other.describe()
        ),
    }
}

pub async fn run(run: Arc<Run>) -> Result<Outcome> {
    let a = &run.args;
    let delay = Delay::Spread {
        max_ms: a.spread_ms,
        unit: a.unit,
    };
    if a.unit == DelayUnit::Ms {
        require_milliseconds(&a.addr).await?;
    }
    let producers = connect_producers(&run, a.connections, Some(&run.tubes[0])).await?;
    let consumers = connect_consumers(&run, a.workers()).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let workers: Vec<_> = consumers
        .into_iter()
        .map(|c| {
            let record = move |out: &mut TaskOut, ts, got| record(out, delay, ts, got);
            tokio::spawn(consume::work(run.clone(), c, None, stop_rx.clone(), record))
        })
        .collect();

    let meter = PhaseMeter::start(a).await?;
    let started = run.now_ns();
    let n = a.jobs.unwrap_or(10_000);
    let plan = Arc::new(Plan {
        quota: Quota::count(n),
        depth: a.pipeline,
        backlog: None,
        pace: Some((Instant::now(), secs(a.duration / n as f64))),
        delay,
    });
    let puts = produce_all(&run, producers, plan).await;
    let total = puts.ledger.put.len() as u64;
    // The last job may want the whole spread, rounded up to a second.
    let longest = Duration::from_millis(a.spread_ms.div_ceil(1000) * 1000);
    let give_up = Instant::now() + secs(a.settle_timeout) + longest;
    while run.deleted() < total && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let (cpu, redis_commands) = meter.stop().await?;
    let _ = stop_tx.send(true);
    let mut work = join_all(workers).await;
    finish(&run, puts, &mut work, started, (cpu, redis_commands)).await
}

/// Check the ledger and the lateness, and fill in the outcome.
async fn finish(
    run: &Run,
    mut puts: TaskOut,
    work: &mut TaskOut,
    started: i64,
    (cpu, redis_commands): PhaseFigures,
) -> Result<Outcome> {
    let a = &run.args;
    let mut failures = std::mem::take(&mut puts.failures);
    failures.append(&mut work.failures);
    let mut ledger = std::mem::take(&mut puts.ledger);
    ledger.merge(std::mem::take(&mut work.ledger));
    let delivered = ledger.deleted.len() as u64;
    failures.extend(ledger.verify());
    let late = std::mem::take(&mut work.latency).summary();
    let wanted = std::mem::take(&mut work.late_wanted).summary();
    let tolerance = (a.early_tolerance_ms * 1e6) as i64;
    if late.count > 0 && late.min < -tolerance {
        failures.push(format!(
            "a job was reserved {:.3} ms before its delay ran out",
            -late.min as f64 / 1e6
        ));
    }
    check_empty(run, &mut failures).await;
    Ok(Outcome {
        ops: delivered,
        unit: "jobs",
        elapsed: Duration::from_nanos(u64::try_from(work.last_ns - started).unwrap_or(0)),
        latency: ("lateness", late),
        others: vec![
            ("late vs wanted", wanted),
            ("put", puts.latency.summary()),
            ("delete", std::mem::take(&mut work.delete_rtt).summary()),
        ],
        figures: vec![
            ("delay spread (ms)", a.spread_ms as f64),
            (
                "delays written in ms",
                f64::from(u8::from(a.unit == DelayUnit::Ms)),
            ),
        ],
        cpu,
        redis_commands,
        failures,
        tubes: run.tubes.clone(),
    })
}

type PhaseFigures = (
    Vec<crate::cpu::ProcessCpu>,
    Option<crate::redis::RedisCommands>,
);

/// The lateness of a job sent at `ts` and received at `got`.
fn record(out: &mut TaskOut, delay: Delay, ts: u64, got: i64) {
    let sent = i64::try_from(ts).unwrap_or(0);
    out.latency.push(got - sent - delay.written_ns(ts));
    out.late_wanted.push(got - sent - delay.wanted_ns(ts));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Samples;

    #[test]
    fn delays_written_in_each_unit() {
        let ms = Delay::Spread {
            max_ms: 2000,
            unit: DelayUnit::Ms,
        };
        let s = Delay::Spread {
            max_ms: 2000,
            unit: DelayUnit::S,
        };
        let mut seen = Samples::default();
        for stamp in 0..10_000u64 {
            let want = ms.wanted_ms(stamp);
            assert!(want <= 2000);
            assert_eq!(ms.written(stamp).to_string(), format!("{want}ms"));
            assert_eq!(ms.written_ns(stamp), ms.wanted_ns(stamp));
            // Seconds: never early, less than a second late.
            let early = s.written_ns(stamp) - s.wanted_ns(stamp);
            assert!((0..1_000_000_000).contains(&early), "{stamp}: {early}");
            seen.push(i64::try_from(want).unwrap());
        }
        let spread = seen.summary();
        assert!(spread.min < 20 && spread.max > 1980, "{spread:?}");
        assert!((900..1100).contains(&spread.p50), "{spread:?}");
        assert_eq!(Delay::Secs(3).written(7).to_string(), "3");
        assert_eq!(Delay::Secs(3).written_ns(7), 3_000_000_000);
    }
}
