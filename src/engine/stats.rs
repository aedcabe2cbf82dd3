//! The figures of `stats`, `stats-tube` and `stats-job` and the metrics snapshot: how
//! the engine assembles them from the store's figures and its own (connections,
//! waiters, counters, host), and their YAML documents in the reference's emitted key
//! order (which is not the order of its protocol document), and the same figures for
//! the operator API's JSON (one list of keys for both: [`Figures`]). `/metrics` reads the same
//! structs, through the same functions, so the two never disagree.
//!
//! Invariant: ages and times left are computed against the time the store read its
//! figures (`now` in its answer), so a shared store's clock decides them.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{Counters, Engine, host};
use crate::protocol::yaml::Doc;
use crate::protocol::{Counter, Dialect, TubeName};
use crate::store::durable::StagesSnapshot;
use crate::store::{JobInfo, JobState, NANOS_PER_SEC, Nanos, Store, StoreResult};
use crate::util::histogram::HistogramSnapshot;

/// The protocol version redstalk implements (the reference's); `stats` reports the one
/// it answers as ([`Dialect::version`]).
pub const PROTOCOL_VERSION: &str = "1.13";

/// The reference reports its default binlog size even without a binlog.
const BINLOG_MAX_SIZE: u64 = 10_485_760;

/// Every figure the metrics endpoint exposes, read through the same functions that
/// build the `stats` and `stats-tube` documents, so the two never disagree.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub engine: &'static str,
    pub server: ServerStats,
    /// The first tubes by name, at most the limit given to [`Engine::snapshot`].
    pub tubes: Vec<TubeStats>,
    /// Tubes that existed but were beyond that limit.
    pub tubes_omitted: u64,
    pub wait: HistogramSnapshot,
    /// The extension verbs served and how often each ran (`/metrics` only, never
    /// `stats`: rule 3 of docs/EXTENSIONS.md).
    pub extension_commands: Vec<(&'static str, u64)>,
    /// Dedupe windows this instance ended early (`--key-windows-max`).
    pub key_windows_evicted: u64,
    /// Where the batches of a persisted store spent their time (`-b`, leader mode).
    pub batch_stages: Option<StagesSnapshot>,
}

/// Everything `stats` prints, in order.
#[derive(Clone, Debug, Default)]
pub struct ServerStats {
    pub current_jobs_urgent: u64,
    pub current_jobs_ready: u64,
    pub current_jobs_reserved: u64,
    pub current_jobs_delayed: u64,
    pub current_jobs_buried: u64,
    /// Indexed by [`Counter::index`], printed in [`Counter::ALL`] order.
    pub cmd: [u64; Counter::ALL.len()],
    pub job_timeouts: u64,
    pub total_jobs: u64,
    pub max_job_size: u64,
    pub current_tubes: u64,
    pub current_connections: u64,
    pub current_producers: u64,
    pub current_workers: u64,
    pub current_waiting: u64,
    pub total_connections: u64,
    pub pid: u32,
    pub version: String,
    pub rusage_utime: (u64, u32),
    pub rusage_stime: (u64, u32),
    pub uptime: u64,
    pub binlog_max_size: u64,
    /// The `binlog-*` figures: all 0 without a binlog (as the reference reports them).
    pub binlog: BinlogStats,
    pub draining: bool,
    pub id: String,
    pub hostname: String,
    pub os: String,
    pub platform: String,
}

/// Everything `stats-tube` prints, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TubeStats {
    pub name: String,
    pub current_jobs_urgent: u64,
    pub current_jobs_ready: u64,
    pub current_jobs_reserved: u64,
    pub current_jobs_delayed: u64,
    pub current_jobs_buried: u64,
    pub total_jobs: u64,
    pub current_using: u64,
    pub current_watching: u64,
    pub current_waiting: u64,
    pub cmd_delete: u64,
    pub cmd_pause_tube: u64,
    pub pause: u64,
    pub pause_time_left: u64,
    /// Not `stats-tube` figures: the tally the console's history takes its reserves
    /// and wait time from ([`TubeInfo::reserves`](crate::store::TubeInfo)).
    pub reserves: u64,
    pub wait_sum_us: u64,
}

/// Everything `stats-job` prints, in order (and the operator API's job, under the same
/// names).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct JobStats {
    pub id: u64,
    pub tube: String,
    pub state: JobState,
    pub pri: u32,
    pub age: u64,
    pub delay: u64,
    pub ttr: u64,
    pub time_left: u64,
    pub file: u64,
    pub reserves: u64,
    pub timeouts: u64,
    pub releases: u64,
    pub buries: u64,
    pub kicks: u64,
}

/// The reference's `binlog-*` figures.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BinlogStats {
    pub oldest_index: u64,
    pub current_index: u64,
    pub records_migrated: u64,
    pub records_written: u64,
}

/// Where a stats document's figures go, key by key in the reference's order: the
/// protocol's YAML ([`Doc`]) or the operator API's JSON. One list of keys per document
/// ([`ServerStats::emit`], [`TubeStats::emit`]) feeds both, so they never disagree.
pub trait Figures {
    fn num(&mut self, key: &str, v: u64);
    /// A flag (`draining`), `true` or `false`.
    fn flag(&mut self, key: &str, v: bool);
    /// A string every release prints bare (`id`).
    fn bare(&mut self, key: &str, v: &str);
    /// A string every release quotes (`version`).
    fn quoted(&mut self, key: &str, v: &str);
    /// A string 1.13 quotes and 1.12 prints bare (`name`, `hostname`, `os`, `platform`).
    fn string(&mut self, key: &str, v: &str);
    /// Seconds and microseconds (`rusage-*`).
    fn secs(&mut self, key: &str, v: (u64, u32));
}

impl Figures for Doc {
    fn num(&mut self, key: &str, v: u64) {
        Doc::num(self, key, v);
    }
    fn flag(&mut self, key: &str, v: bool) {
        Doc::num(self, key, v);
    }
    fn bare(&mut self, key: &str, v: &str) {
        Doc::num(self, key, v);
    }
    fn quoted(&mut self, key: &str, v: &str) {
        Doc::quoted(self, key, v);
    }
    fn string(&mut self, key: &str, v: &str) {
        Doc::string(self, key, v);
    }
    fn secs(&mut self, key: &str, v: (u64, u32)) {
        Doc::secs(self, key, v);
    }
}

impl ServerStats {
    pub fn to_yaml(&self, dialect: Dialect) -> Bytes {
        let mut d = Doc::new(dialect);
        self.emit(&mut d);
        d.done()
    }

    /// Every figure of `stats`, in the reference's order.
    pub fn emit(&self, d: &mut impl Figures) {
        let s = self;
        d.num("current-jobs-urgent", s.current_jobs_urgent);
        d.num("current-jobs-ready", s.current_jobs_ready);
        d.num("current-jobs-reserved", s.current_jobs_reserved);
        d.num("current-jobs-delayed", s.current_jobs_delayed);
        d.num("current-jobs-buried", s.current_jobs_buried);
        for c in Counter::ALL {
            d.num(c.key(), s.cmd[c.index()]);
        }
        d.num("job-timeouts", s.job_timeouts);
        d.num("total-jobs", s.total_jobs);
        d.num("max-job-size", s.max_job_size);
        d.num("current-tubes", s.current_tubes);
        d.num("current-connections", s.current_connections);
        d.num("current-producers", s.current_producers);
        d.num("current-workers", s.current_workers);
        d.num("current-waiting", s.current_waiting);
        d.num("total-connections", s.total_connections);
        d.num("pid", u64::from(s.pid));
        d.quoted("version", &s.version);
        d.secs("rusage-utime", s.rusage_utime);
        d.secs("rusage-stime", s.rusage_stime);
        d.num("uptime", s.uptime);
        d.num("binlog-oldest-index", s.binlog.oldest_index);
        d.num("binlog-current-index", s.binlog.current_index);
        d.num("binlog-records-migrated", s.binlog.records_migrated);
        d.num("binlog-records-written", s.binlog.records_written);
        d.num("binlog-max-size", s.binlog_max_size);
        d.flag("draining", s.draining);
        d.bare("id", &s.id);
        d.string("hostname", &s.hostname);
        d.string("os", &s.os);
        d.string("platform", &s.platform);
    }
}

impl TubeStats {
    pub fn to_yaml(&self, dialect: Dialect) -> Bytes {
        let mut d = Doc::new(dialect);
        self.emit(&mut d);
        d.done()
    }

    /// Every figure of `stats-tube`, in the reference's order.
    pub fn emit(&self, d: &mut impl Figures) {
        let t = self;
        d.string("name", &t.name);
        d.num("current-jobs-urgent", t.current_jobs_urgent);
        d.num("current-jobs-ready", t.current_jobs_ready);
        d.num("current-jobs-reserved", t.current_jobs_reserved);
        d.num("current-jobs-delayed", t.current_jobs_delayed);
        d.num("current-jobs-buried", t.current_jobs_buried);
        d.num("total-jobs", t.total_jobs);
        d.num("current-using", t.current_using);
        d.num("current-watching", t.current_watching);
        d.num("current-waiting", t.current_waiting);
        d.num("cmd-delete", t.cmd_delete);
        d.num("cmd-pause-tube", t.cmd_pause_tube);
        d.num("pause", t.pause);
        d.num("pause-time-left", t.pause_time_left);
    }
}

impl JobStats {
    /// `stats-job`'s figures of the store's `j` (ages and time left against the time
    /// the store read them).
    pub fn of(j: &JobInfo) -> JobStats {
        let now = j.now;
        JobStats {
            id: j.id,
            tube: j.tube.to_string(),
            state: j.state,
            pri: j.pri,
            age: now.saturating_sub(j.created) / NANOS_PER_SEC,
            delay: crate::time::whole_secs(j.delay_ms),
            ttr: crate::time::whole_secs(j.ttr_ms),
            time_left: j
                .deadline
                .map_or(0, |d| d.saturating_sub(now) / NANOS_PER_SEC),
            file: j.file,
            reserves: j.reserves,
            timeouts: j.timeouts,
            releases: j.releases,
            buries: j.buries,
            kicks: j.kicks,
        }
    }

    pub fn to_yaml(&self, dialect: Dialect) -> Bytes {
        let j = self;
        let mut d = Doc::new(dialect);
        d.num("id", j.id);
        d.string("tube", &j.tube);
        d.num("state", j.state.name());
        d.num("pri", j.pri);
        d.num("age", j.age);
        d.num("delay", j.delay);
        d.num("ttr", j.ttr);
        d.num("time-left", j.time_left);
        d.num("file", j.file);
        d.num("reserves", j.reserves);
        d.num("timeouts", j.timeouts);
        d.num("releases", j.releases);
        d.num("buries", j.buries);
        d.num("kicks", j.kicks);
        d.done()
    }
}

impl Engine {
    /// The `stats-job` figures; `None` when the job does not exist.
    pub(super) async fn job_stats(&self, id: u64, now: Nanos) -> StoreResult<Option<JobStats>> {
        let info = self.store.job_info(id, now).await?;
        Ok(info.as_ref().map(JobStats::of))
    }

    /// The `stats-tube` document's figures; `None` when the tube does not exist.
    pub async fn tube_stats(&self, tube: &TubeName, now: Nanos) -> StoreResult<Option<TubeStats>> {
        let Some(t) = self.store.tube_info(tube, now).await? else {
            return Ok(None);
        };
        let now = t.now;
        let paused = t.pause > 0 && t.pause_until > now;
        Ok(Some(TubeStats {
            name: tube.to_string(),
            current_jobs_urgent: t.urgent,
            current_jobs_ready: t.ready,
            current_jobs_reserved: t.reserved,
            current_jobs_delayed: t.delayed,
            current_jobs_buried: t.buried,
            total_jobs: t.total_jobs,
            current_using: t.using,
            current_watching: t.watching,
            current_waiting: self.waiters.waiting_on(tube),
            cmd_delete: t.cmd_delete,
            cmd_pause_tube: t.cmd_pause,
            pause: if paused { t.pause / NANOS_PER_SEC } else { 0 },
            pause_time_left: if paused {
                (t.pause_until - now) / NANOS_PER_SEC
            } else {
                0
            },
            reserves: t.reserves,
            wait_sum_us: t.wait_sum_us,
        }))
    }

    /// The `stats` document's figures.
    pub async fn server_stats(&self, now: Nanos) -> StoreResult<ServerStats> {
        let totals = self.store.totals().await?;
        let (utime, stime) = host::rusage();
        let c = &self.counters;
        // A store without a log (`-b`) reports 0s and the reference's default size.
        let (binlog_max_size, binlog) = match self.store.log_figures() {
            Some(f) => (
                f.max_size.load(Ordering::Relaxed),
                BinlogStats {
                    oldest_index: f.oldest_index.load(Ordering::Relaxed),
                    current_index: f.current_index.load(Ordering::Relaxed),
                    records_migrated: f.records_migrated.load(Ordering::Relaxed),
                    records_written: f.records_written.load(Ordering::Relaxed),
                },
            ),
            None => (BINLOG_MAX_SIZE, BinlogStats::default()),
        };
        Ok(ServerStats {
            current_jobs_urgent: totals.urgent,
            current_jobs_ready: totals.ready,
            current_jobs_reserved: totals.reserved,
            current_jobs_delayed: totals.delayed,
            current_jobs_buried: totals.buried,
            cmd: c.cmd_snapshot(),
            job_timeouts: totals.job_timeouts,
            total_jobs: totals.total_jobs,
            max_job_size: u64::from(self.max_job_size),
            current_tubes: totals.tubes,
            current_connections: Counters::get(&c.connections),
            current_producers: Counters::get(&c.producers),
            current_workers: Counters::get(&c.workers),
            current_waiting: self.waiters.total(),
            total_connections: Counters::get(&c.total_connections),
            pid: self.host.pid,
            version: self.dialect.version().to_string(),
            rusage_utime: utime,
            rusage_stime: stime,
            uptime: now.saturating_sub(self.started) / NANOS_PER_SEC,
            binlog_max_size,
            binlog,
            draining: self.is_draining(),
            id: self.host.id.clone(),
            hostname: self.host.hostname.clone(),
            os: self.host.os.clone(),
            platform: self.host.platform.clone(),
        })
    }

    /// Everything the metrics endpoint shows, through [`Engine::server_stats`] and
    /// [`Engine::tube_stats`] (the functions behind `stats` and `stats-tube`), with the
    /// figures of at most `max_tubes` tubes: the first by name, so the same tubes keep
    /// their series from one scrape to the next and the store is asked about
    /// `max_tubes` tubes, not about every tube a client made. A tube that disappears
    /// between the list and its figures is left out.
    pub async fn snapshot(&self, max_tubes: usize) -> StoreResult<Snapshot> {
        // Between two tubes' figures the runtime may serve others (a memory store's
        // call never yields by itself).
        const YIELD_EVERY: usize = 256;
        let now = self.clock.now();
        let server = self.server_stats(now).await?;
        let mut names = self.store.list_tubes().await?;
        let listed = names.len();
        if max_tubes == 0 {
            names.clear();
        } else if names.len() > max_tubes {
            names.select_nth_unstable(max_tubes - 1);
            names.truncate(max_tubes);
        }
        names.sort_unstable();
        let mut tubes = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            if i % YIELD_EVERY == YIELD_EVERY - 1 {
                tokio::task::yield_now().await;
            }
            if let Some(t) = self.tube_stats(name, now).await? {
                tubes.push(t);
            }
        }
        Ok(Snapshot {
            engine: self.store_name(),
            server,
            tubes,
            tubes_omitted: (listed - names.len()) as u64,
            wait: self.counters.wait.snapshot(),
            extension_commands: self.extension_commands(),
            key_windows_evicted: self.store.key_windows_evicted(),
            batch_stages: self.store.batch_stages(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tube_stats_order() {
        let y = TubeStats {
            name: "default".into(),
            ..Default::default()
        }
        .to_yaml(Dialect::V1_13);
        let text = std::str::from_utf8(&y).unwrap();
        let keys: Vec<&str> = text
            .lines()
            .skip(1)
            .map(|l| l.split(':').next().unwrap())
            .collect();
        assert_eq!(keys[8], "current-watching");
        assert_eq!(keys[9], "current-waiting");
        assert!(text.starts_with("---\nname: \"default\"\n"));
    }
}
