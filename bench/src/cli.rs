//! Command-line options of `redstalk-bench`.

use clap::{Parser, ValueEnum};

/// What a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    /// Producers put jobs as fast as the server answers (put round-trip latency);
    /// the jobs are drained afterwards, outside the measurement, and checked.
    Put,
    /// put -> reserve -> delete: producer connections put, separate worker connections
    /// reserve and delete (end-to-end latency: put sent -> job reserved by a worker).
    Cycle,
    /// Fill a tube with --jobs jobs, then measure draining it (reserve-with-timeout 0 and
    /// delete, pipelined). With --server-pid / --redis-info, reports memory per job.
    Drain,
    /// Put --jobs jobs with --delay seconds, spread over --duration; workers block in
    /// reserve; reports how late each job became reservable (lateness).
    Delay,
    /// The cycle over --tubes tubes (default 100): producers `use` each tube in turn,
    /// workers watch them all.
    Tubes,
    /// Each connection alone on a tube of its own, one command at a time: put ->
    /// reserve-with-timeout -> delete, so the tube empties after every job (a queue
    /// whose workers keep up).
    Solo,
    /// Fill a tube with --jobs jobs (default 100,000), then -c workers empty it: each
    /// `reserve-batch <--batch> 1` and one `delete-batch` of what it got, or with
    /// --batch 0 `reserve-with-timeout 1` and `delete` (redstalk's batches).
    Batch,
    /// Fill a tube with --jobs jobs (default 1,000,000), probe another tube with put ->
    /// reserve -> delete for --duration, then `flush-tube` the full one while the
    /// probe goes on: its round trips before and during the flush (redstalk's flush).
    Flush,
    /// Put --jobs jobs (default 10,000) paced over --duration, each delayed by its own
    /// 0..=--spread-ms, written in --unit (ms: redstalk's milliseconds; s: rounded up
    /// to whole seconds); workers block in reserve; reports lateness (received - due).
    Timers,
}

/// How the timers scenario writes its delays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DelayUnit {
    /// `<n>ms` (docs/EXTENSIONS.md; the server must list `milliseconds`).
    Ms,
    /// Whole seconds, rounded up, as a beanstalkd client writes them.
    S,
}

impl Scenario {
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Put => "put",
            Scenario::Cycle => "cycle",
            Scenario::Drain => "drain",
            Scenario::Delay => "delay",
            Scenario::Tubes => "tubes",
            Scenario::Solo => "solo",
            Scenario::Batch => "batch",
            Scenario::Flush => "flush",
            Scenario::Timers => "timers",
        }
    }
}

/// Load generator for beanstalk servers: measures ops/s and latency percentiles, and
/// checks that every job put is reserved and deleted exactly once and that the server
/// is empty at the end. Exit status: 0 all good, 1 a correctness failure, 2 an error.
#[derive(Parser, Debug, Clone)]
#[command(name = "redstalk-bench", version)]
pub struct Args {
    /// Scenario to run.
    #[arg(value_enum)]
    pub scenario: Scenario,

    /// Server address, host:port.
    #[arg(short = 'a', long, default_value = "127.0.0.1:11300")]
    pub addr: String,

    /// Connect over TLS, trusting the CA in this PEM file (a server's TLS listener).
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,

    /// Send `auth TOKEN` first on every connection (a token listener).
    #[arg(long, value_name = "TOKEN")]
    pub auth: Option<String>,

    /// Address for the worker and draining connections, when they should talk to
    /// another server than the producers (such as a second redstalk on the same Redis).
    #[arg(long, value_name = "HOST:PORT")]
    pub worker_addr: Option<String>,

    /// Producer connections (drain: filling and draining connections; solo: connections,
    /// each with a tube of its own).
    #[arg(short = 'c', long, default_value_t = 1)]
    pub connections: usize,

    /// Worker connections (cycle, tubes, delay); default: as many as --connections.
    #[arg(short = 'w', long)]
    pub workers: Option<usize>,

    /// Requests in flight per producer (and per draining) connection. Workers that block
    /// in `reserve` always run one command at a time.
    #[arg(short = 'd', long = "pipeline", default_value_t = 1)]
    pub pipeline: usize,

    /// Seconds to put jobs for (put, cycle, tubes), or over which the delayed jobs are
    /// spread (delay, timers). Ignored when --jobs is given, except by delay and timers.
    #[arg(short = 't', long, default_value_t = 2.0)]
    pub duration: f64,

    /// Jobs to put instead of a duration (default for drain 10000, for delay 200, for
    /// timers 10000).
    #[arg(short = 'n', long)]
    pub jobs: Option<u64>,

    /// Body size in bytes (at least 16: the body carries its send time).
    #[arg(short = 's', long, default_value_t = 16)]
    pub body_size: usize,

    /// Tubes (tubes scenario; default 100).
    #[arg(long)]
    pub tubes: Option<usize>,

    /// Delay of each job in seconds (delay scenario).
    #[arg(long, default_value_t = 1)]
    pub delay: u32,

    /// Longest delay of the timers scenario, in ms: each job's is spread over 0..=this.
    #[arg(long, default_value_t = 2000)]
    pub spread_ms: u64,

    /// How the timers scenario writes its delays: `ms` or whole seconds (`s`).
    #[arg(long, value_enum, default_value_t = DelayUnit::Ms)]
    pub unit: DelayUnit,

    /// Most jobs put but not yet deleted in the cycle, so producers cannot outrun workers
    /// without bound; default 2 x max(producers x pipeline, workers).
    #[arg(long)]
    pub backlog: Option<usize>,

    /// Priority of every job.
    #[arg(long, default_value_t = 1024)]
    pub pri: u32,

    /// TTR of every job in seconds.
    #[arg(long, default_value_t = 120)]
    pub ttr: u32,

    /// Start of the tube names; each run adds its pid, a time stamp and the scenario, so
    /// runs never share a tube and a shared server is fine.
    #[arg(long, default_value = "bench")]
    pub tube_prefix: String,

    /// Also require the whole server (`stats`) to hold no job at the end; for a server
    /// this run has to itself.
    #[arg(long)]
    pub check_server_empty: bool,

    /// Pid of the server process: drain reports its RSS before and after the fill.
    #[arg(long)]
    pub server_pid: Option<u32>,

    /// Pid of a server process (repeat for several, such as redstalk and its
    /// redis-server): the run reports the CPU time (user + system) each spent during the
    /// measured phase, and the total per op.
    #[arg(long = "cpu-pid", value_name = "PID")]
    pub cpu_pids: Vec<u32>,

    /// host:port of the Redis behind the server (redstalk --redis): the run reports the
    /// commands Redis ran during the measured phase (INFO commandstats, by name, and per
    /// op); drain also reports Redis' used_memory before and after the fill.
    #[arg(long, value_name = "HOST:PORT")]
    pub redis_info: Option<String>,

    /// Solo: each job is released (delay 0) and reserved again this many times before
    /// its delete, as a job whose worker fails does (the release path tube policies act
    /// on, docs/POLICIES.md).
    #[arg(long, default_value_t = 0)]
    pub retries: u32,

    /// Seconds of the `reserve-with-timeout` that solo sends after each put. The job
    /// just put is the only one on the connection's tube, so TIMED_OUT is a failure.
    #[arg(long, default_value_t = 1)]
    pub reserve_timeout: u32,

    /// Seconds to wait, once producers are done, for every job to be reserved and
    /// deleted before declaring the missing ones lost.
    #[arg(long, default_value_t = 10.0)]
    pub settle_timeout: f64,

    /// A delayed job reserved more than this many ms before its delay ran out is a
    /// correctness failure.
    #[arg(long, default_value_t = 5.0)]
    pub early_tolerance_ms: f64,

    /// Threads of the load generator (1 leaves the other core to the server).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,

    /// Free text copied into the report (compare puts the server's name here).
    #[arg(long)]
    pub label: Option<String>,

    /// Jobs per `reserve-batch` in the batch scenario (0: the one-command worker).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,

    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

impl Args {
    /// Reject combinations that cannot run.
    pub fn validate(&self) -> Result<(), String> {
        if self.body_size < crate::body::MIN_SIZE {
            return Err(format!(
                "--body-size must be at least {} (the body carries its send time)",
                crate::body::MIN_SIZE
            ));
        }
        if self.connections == 0 || self.pipeline == 0 || self.threads == 0 {
            return Err("--connections, --pipeline and --threads must be at least 1".into());
        }
        if self.workers == Some(0) || self.tubes == Some(0) || self.backlog == Some(0) {
            return Err("--workers, --tubes and --backlog must be at least 1".into());
        }
        if !(self.duration > 0.0 && self.duration.is_finite()) {
            return Err("--duration must be a positive number of seconds".into());
        }
        if self.batch > 1000 {
            return Err("--batch takes at most 1000 (reserve-batch's bound)".into());
        }
        if self.spread_ms > 86_400_000 {
            return Err("--spread-ms takes at most a day (86400000)".into());
        }
        if self.jobs == Some(0) {
            return Err("--jobs must be at least 1".into());
        }
        if self.scenario == Scenario::Solo
            && (self.pipeline != 1
                || self.workers.is_some()
                || self.worker_addr.is_some()
                || self.tubes.is_some()
                || self.backlog.is_some())
        {
            return Err(
                "solo runs one command at a time on each connection's own tube: \
                        -d, -w, --worker-addr, --tubes and --backlog do not apply"
                    .into(),
            );
        }
        Ok(())
    }

    /// Where consumers connect: --worker-addr, else --addr.
    pub fn worker_addr(&self) -> &str {
        self.worker_addr.as_deref().unwrap_or(&self.addr)
    }

    pub fn workers(&self) -> usize {
        self.workers.unwrap_or(self.connections)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let a = Args::try_parse_from(["b", "cycle", "-c", "10", "-s", "1024", "--json"]).unwrap();
        assert_eq!(a.scenario, Scenario::Cycle);
        assert_eq!((a.connections, a.workers(), a.body_size), (10, 10, 1024));
        assert!(a.validate().is_ok());
        let small = Args::try_parse_from(["b", "put", "-s", "8"]).unwrap();
        assert!(small.validate().is_err());
        let solo =
            Args::try_parse_from(["b", "solo", "-c", "50", "--reserve-timeout", "3"]).unwrap();
        assert_eq!((solo.scenario, solo.reserve_timeout), (Scenario::Solo, 3));
        assert!(solo.validate().is_ok());
        let piped = Args::try_parse_from(["b", "solo", "-d", "4"]).unwrap();
        assert!(piped.validate().is_err());
    }
}
