//! The YAML documents of `stats`, `stats-tube`, `stats-job`, `list-tubes` and
//! `list-tubes-watched`, rendered exactly as beanstalkd 1.13 renders them.
//!
//! Invariant: keys appear in the reference's emitted order (which is not the order of
//! its protocol document), strings are quoted with plain `"` and never escaped, and each
//! document is `---\n` plus one `\n`-terminated line per key.

use std::fmt::Write;

use bytes::Bytes;

use super::command::{Counter, TubeName};

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
}

/// Everything `stats-job` prints, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JobStats {
    pub id: u64,
    pub tube: String,
    pub state: &'static str,
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

struct Doc(String);

impl Doc {
    fn new() -> Doc {
        let mut s = String::with_capacity(1024);
        s.push_str("---\n");
        Doc(s)
    }
    fn num(&mut self, key: &str, v: impl std::fmt::Display) {
        let _ = writeln!(self.0, "{key}: {v}");
    }
    fn quoted(&mut self, key: &str, v: &str) {
        let _ = writeln!(self.0, "{key}: \"{v}\"");
    }
    fn secs(&mut self, key: &str, (s, us): (u64, u32)) {
        let _ = writeln!(self.0, "{key}: {s}.{us:06}");
    }
    fn done(self) -> Bytes {
        Bytes::from(self.0)
    }
}

pub fn server_stats(s: &ServerStats) -> Bytes {
    let mut d = Doc::new();
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
    d.num("pid", s.pid);
    d.quoted("version", &s.version);
    d.secs("rusage-utime", s.rusage_utime);
    d.secs("rusage-stime", s.rusage_stime);
    d.num("uptime", s.uptime);
    d.num("binlog-oldest-index", 0);
    d.num("binlog-current-index", 0);
    d.num("binlog-records-migrated", 0);
    d.num("binlog-records-written", 0);
    d.num("binlog-max-size", s.binlog_max_size);
    d.num("draining", s.draining);
    d.num("id", &s.id);
    d.quoted("hostname", &s.hostname);
    d.quoted("os", &s.os);
    d.quoted("platform", &s.platform);
    d.done()
}

pub fn tube_stats(t: &TubeStats) -> Bytes {
    let mut d = Doc::new();
    d.quoted("name", &t.name);
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
    d.done()
}

pub fn job_stats(j: &JobStats) -> Bytes {
    let mut d = Doc::new();
    d.num("id", j.id);
    d.quoted("tube", &j.tube);
    d.num("state", j.state);
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

/// `list-tubes` / `list-tubes-watched`: names are not quoted.
pub fn tube_list<'a>(names: impl IntoIterator<Item = &'a TubeName>) -> Bytes {
    let mut d = Doc::new();
    for n in names {
        d.0.push_str("- ");
        d.0.push_str(n.as_str());
        d.0.push('\n');
    }
    d.done()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_matches_reference_bytes() {
        assert_eq!(
            &tube_list([&TubeName::default_tube()])[..],
            b"---\n- default\n"
        );
    }

    #[test]
    fn tube_stats_order() {
        let y = tube_stats(&TubeStats {
            name: "default".into(),
            ..Default::default()
        });
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
