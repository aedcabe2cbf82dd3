//! The scenarios and what they share: the run's clock and tube names ([`Run`]), the
//! meters of the measured phase ([`PhaseMeter`]), the producer loop ([`produce`]) and
//! the two consumer loops ([`consume`]: blocking workers and pipelined drainers). Each
//! scenario file wires these together and fills in an [`Outcome`].

pub mod batch;
pub mod consume;
pub mod cycle;
pub mod drain;
pub mod produce;
pub mod put;
pub mod solo;
pub mod timers;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::check::Ledger;
use crate::cli::{Args, Scenario};
use crate::client::{Conn, Reply};
use crate::cpu::{CpuMeter, ProcessCpu};
use crate::redis::{CommandMeter, RedisCommands};
use crate::report::Outcome;
use crate::stats::Samples;

/// State shared by every task of one run.
pub struct Run {
    pub args: Args,
    /// Zero of every time stamp (the ones in job bodies too).
    pub start: Instant,
    /// Jobs deleted so far, by all consumers.
    pub deleted: AtomicU64,
    /// The tubes this run uses; nobody else's run uses them.
    pub tubes: Vec<String>,
}

impl Run {
    pub fn new(args: Args) -> Run {
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() % 1_000_000_000_000)
            .unwrap_or(0);
        let base = format!(
            "{}-{}-{stamp}-{}",
            args.tube_prefix,
            std::process::id(),
            args.scenario.name()
        );
        let count = match args.scenario {
            Scenario::Tubes => args.tubes.unwrap_or(100),
            Scenario::Solo => args.connections,
            _ => args.tubes.unwrap_or(1),
        };
        let tubes = if count == 1 {
            vec![base]
        } else {
            (0..count).map(|i| format!("{base}-{i}")).collect()
        };
        Run {
            args,
            start: Instant::now(),
            deleted: AtomicU64::new(0),
            tubes,
        }
    }

    /// Nanoseconds since the run started.
    pub fn now_ns(&self) -> i64 {
        i64::try_from(self.start.elapsed().as_nanos()).unwrap_or(i64::MAX)
    }

    pub fn deleted(&self) -> u64 {
        self.deleted.load(Ordering::Relaxed)
    }
}

/// Run the scenario the arguments name.
pub async fn run(args: Args) -> Result<Outcome> {
    let run = std::sync::Arc::new(Run::new(args));
    match run.args.scenario {
        Scenario::Put => put::run(run).await,
        Scenario::Cycle | Scenario::Tubes | Scenario::Delay => cycle::run(run).await,
        Scenario::Drain => drain::run(run).await,
        Scenario::Solo => solo::run(run).await,
        Scenario::Batch => batch::run(run).await,
        Scenario::Flush => batch::flush(run).await,
        Scenario::Timers => timers::run(run).await,
    }
}

/// What the server side spent during the measured phase: the CPU time of every
/// `--cpu-pid` process and the commands the Redis of `--redis-info` ran. Each scenario
/// starts it at the first operation it counts and stops it after the last, so warm-up,
/// fill and drain work outside that phase is in neither figure.
pub struct PhaseMeter {
    cpu: CpuMeter,
    redis: Option<CommandMeter>,
}

impl PhaseMeter {
    pub async fn start(args: &Args) -> Result<PhaseMeter> {
        // Redis first: its INFO round trip then lies outside the CPU reading.
        let redis = match &args.redis_info {
            Some(addr) => Some(CommandMeter::start(addr).await?),
            None => None,
        };
        Ok(PhaseMeter {
            cpu: CpuMeter::start(&args.cpu_pids)?,
            redis,
        })
    }

    pub async fn stop(self) -> Result<(Vec<ProcessCpu>, Option<RedisCommands>)> {
        let cpu = self.cpu.stop()?;
        let redis = match self.redis {
            Some(meter) => Some(meter.stop().await?),
            None => None,
        };
        Ok((cpu, redis))
    }
}

/// Open `n` connections, each `use`-ing `tube` when one is given.
pub async fn connect_producers(run: &Run, n: usize, tube: Option<&str>) -> Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let mut conn = Conn::connect(&run.args.addr).await?;
        if let Some(tube) = tube {
            match conn.call(&format!("use {tube}")).await? {
                Reply::Using(_) => {}
                other => anyhow::bail!("use {tube} answered {}", other.describe()),
            }
        }
        conns.push(conn);
    }
    Ok(conns)
}

/// Open `n` connections (to --worker-addr) watching every tube of the run (and not
/// `default`).
pub async fn connect_consumers(run: &Run, n: usize) -> Result<Vec<Conn>> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let mut conn = Conn::connect(run.args.worker_addr()).await?;
        for tube in &run.tubes {
            conn.command(&format!("watch {tube}"));
        }
        conn.command("ignore default");
        conn.flush().await?;
        for _ in 0..=run.tubes.len() {
            match conn
                .read_reply()
                .await
                .context("watching the run's tubes")?
            {
                Reply::Watching(_) => {}
                other => anyhow::bail!("watch/ignore answered {}", other.describe()),
            }
        }
        conns.push(conn);
    }
    Ok(conns)
}

/// What every producer and consumer task hands back.
#[derive(Debug, Default)]
pub struct TaskOut {
    pub ledger: Ledger,
    /// Main latency of the task (put round trip, reserve round trip, or end to end).
    pub latency: Samples,
    /// Round trips a task measures beside its main latency: puts and reserves (solo),
    /// deletes (consumers, solo).
    pub put_rtt: Samples,
    pub reserve_rtt: Samples,
    pub delete_rtt: Samples,
    /// Lateness against the delay a job wanted, beside `latency`'s against the delay
    /// its put was written with (timers: they differ when whole seconds round it up).
    pub late_wanted: Samples,
    /// Time of the task's last completed job, ns since the run started.
    pub last_ns: i64,
    pub failures: Vec<String>,
}

impl TaskOut {
    pub fn merge(&mut self, other: TaskOut) {
        self.ledger.merge(other.ledger);
        self.latency.extend(other.latency);
        self.put_rtt.extend(other.put_rtt);
        self.reserve_rtt.extend(other.reserve_rtt);
        self.delete_rtt.extend(other.delete_rtt);
        self.late_wanted.extend(other.late_wanted);
        self.last_ns = self.last_ns.max(other.last_ns);
        self.failures.extend(other.failures);
    }
}

/// Join tasks and merge what they return; a task that failed outright (lost its
/// connection, got a malformed reply) becomes a failure of the run.
pub async fn join_all(handles: Vec<tokio::task::JoinHandle<Result<TaskOut>>>) -> TaskOut {
    let mut all = TaskOut::default();
    for h in handles {
        match h.await {
            Ok(Ok(out)) => all.merge(out),
            Ok(Err(e)) => all.failures.push(format!("{e:#}")),
            Err(e) => all.failures.push(format!("task ended abnormally: {e}")),
        }
    }
    all
}

/// Seconds as a Duration, for the options given in seconds.
pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.max(0.0))
}

/// Ask the server whether the run left anything behind; its complaints become failures.
pub async fn check_empty(run: &Run, failures: &mut Vec<String>) {
    // Give the server a moment to process the closing of the worker connections.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut addrs = vec![run.args.addr.as_str()];
    if run.args.worker_addr() != run.args.addr {
        addrs.push(run.args.worker_addr());
    }
    for addr in addrs {
        match crate::check::server_empty(addr, &run.tubes, run.args.check_server_empty).await {
            Ok(f) => failures.extend(f.into_iter().map(|f| format!("{addr}: {f}"))),
            Err(e) => failures.push(format!("final stats check on {addr}: {e:#}")),
        }
    }
}
