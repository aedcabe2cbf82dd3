//! The Prometheus text exposition format (version 0.0.4) of one [`Snapshot`].
//!
//! Invariants: every figure comes from the snapshot, whose server and tube parts are
//! the very structs `stats` and `stats-tube` print, so a scrape and those commands
//! agree; every family has one `# HELP` and one `# TYPE` line before its samples;
//! label values and help texts are escaped as the format requires; histogram buckets
//! are cumulative and end with `+Inf` equal to `_count`. Pure: no I/O, no clock.

use std::fmt::{Display, Write};

use crate::engine::TubeStats;
use crate::engine::{Snapshot, WAIT_BUCKETS};
use crate::protocol::Counter;

/// The media type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition of `snap`.
pub fn render(snap: &Snapshot) -> String {
    let s = &snap.server;
    let mut out = Out(String::with_capacity(4096 + 1024 * snap.tubes.len()));

    out.family(
        "redstalk_info",
        "gauge",
        "Always 1; the labels describe this instance (id is stats' id, new at every start).",
    );
    out.sample(
        "redstalk_info",
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("protocol_version", &s.version),
            ("engine", snap.engine),
            ("id", &s.id),
            ("hostname", &s.hostname),
        ],
        1,
    );

    out.family(
        "redstalk_jobs",
        "gauge",
        "Jobs by state (stats current-jobs-*); urgent ones (ready, priority below 1024) are also counted as ready.",
    );
    for (state, v) in [
        ("urgent", s.current_jobs_urgent),
        ("ready", s.current_jobs_ready),
        ("reserved", s.current_jobs_reserved),
        ("delayed", s.current_jobs_delayed),
        ("buried", s.current_jobs_buried),
    ] {
        out.sample("redstalk_jobs", &[("state", state)], v);
    }

    out.family(
        "redstalk_commands_total",
        "counter",
        "Commands received by this instance, by kind (stats cmd-*).",
    );
    for c in Counter::ALL {
        let name = c.key().trim_start_matches("cmd-");
        out.sample(
            "redstalk_commands_total",
            &[("command", name)],
            s.cmd[c.index()],
        );
    }

    let plain: [(&str, &str, &str, &dyn Display); 10] = [
        (
            "redstalk_job_timeouts_total",
            "counter",
            "Reservations that ran out of time (stats job-timeouts).",
            &s.job_timeouts,
        ),
        (
            "redstalk_jobs_created_total",
            "counter",
            "Jobs created (stats total-jobs).",
            &s.total_jobs,
        ),
        (
            "redstalk_max_job_size_bytes",
            "gauge",
            "Largest job body accepted (stats max-job-size, the -z flag).",
            &s.max_job_size,
        ),
        (
            "redstalk_tubes",
            "gauge",
            "Tubes that exist (stats current-tubes).",
            &s.current_tubes,
        ),
        (
            "redstalk_connections",
            "gauge",
            "Open connections to this instance (stats current-connections).",
            &s.current_connections,
        ),
        (
            "redstalk_producers",
            "gauge",
            "Open connections that have put a job (stats current-producers).",
            &s.current_producers,
        ),
        (
            "redstalk_workers",
            "gauge",
            "Open connections that have reserved (stats current-workers).",
            &s.current_workers,
        ),
        (
            "redstalk_waiting",
            "gauge",
            "Connections blocked in a reserve (stats current-waiting).",
            &s.current_waiting,
        ),
        (
            "redstalk_connections_accepted_total",
            "counter",
            "Connections accepted since start (stats total-connections).",
            &s.total_connections,
        ),
        (
            "redstalk_uptime_seconds",
            "gauge",
            "Seconds since this instance started (stats uptime).",
            &s.uptime,
        ),
    ];
    for (name, kind, help, v) in plain {
        out.family(name, kind, help);
        out.sample(name, &[], v);
    }

    out.family(
        "redstalk_cpu_seconds_total",
        "counter",
        "CPU time used by this process (stats rusage-utime, rusage-stime).",
    );
    for (mode, (sec, us)) in [("user", s.rusage_utime), ("system", s.rusage_stime)] {
        out.sample(
            "redstalk_cpu_seconds_total",
            &[("mode", mode)],
            format_args!("{sec}.{us:06}"),
        );
    }

    out.family(
        "redstalk_draining",
        "gauge",
        "1 in drain mode (after SIGUSR1: puts are refused), else 0 (stats draining).",
    );
    out.sample("redstalk_draining", &[], u8::from(s.draining));

    tubes(&mut out, &snap.tubes);

    out.family(
        "redstalk_job_wait_seconds",
        "histogram",
        "How long a job had been ready when a reserve on this instance took it (since its put, the end of its delay, its release, kick or lapsed reservation); a delayed or buried job taken by reserve-job counts 0.",
    );
    for (bound, n) in WAIT_BUCKETS.iter().zip(snap.wait.cumulative) {
        out.sample(
            "redstalk_job_wait_seconds_bucket",
            &[("le", &seconds(*bound))],
            n,
        );
    }
    out.sample(
        "redstalk_job_wait_seconds_bucket",
        &[("le", "+Inf")],
        snap.wait.count,
    );
    out.sample(
        "redstalk_job_wait_seconds_sum",
        &[],
        seconds(snap.wait.sum_us * 1_000),
    );
    out.sample("redstalk_job_wait_seconds_count", &[], snap.wait.count);
    out.0
}

/// The per-tube families (stats-tube), one sample per tube each.
fn tubes(out: &mut Out, tubes: &[TubeStats]) {
    out.family(
        "redstalk_tube_jobs",
        "gauge",
        "Jobs in a tube by state (stats-tube current-jobs-*); urgent ones are also counted as ready.",
    );
    for t in tubes {
        for (state, v) in [
            ("urgent", t.current_jobs_urgent),
            ("ready", t.current_jobs_ready),
            ("reserved", t.current_jobs_reserved),
            ("delayed", t.current_jobs_delayed),
            ("buried", t.current_jobs_buried),
        ] {
            out.sample(
                "redstalk_tube_jobs",
                &[("tube", &t.name), ("state", state)],
                v,
            );
        }
    }
    let per_tube: [Family<TubeStats>; 8] = [
        (
            "redstalk_tube_jobs_created_total",
            "counter",
            "Jobs created in a tube since it was created (stats-tube total-jobs).",
            |t| t.total_jobs,
        ),
        (
            "redstalk_tube_using",
            "gauge",
            "Connections using a tube (stats-tube current-using).",
            |t| t.current_using,
        ),
        (
            "redstalk_tube_watching",
            "gauge",
            "Connections watching a tube (stats-tube current-watching).",
            |t| t.current_watching,
        ),
        (
            "redstalk_tube_waiting",
            "gauge",
            "Connections of this instance blocked in a reserve on a tube (stats-tube current-waiting).",
            |t| t.current_waiting,
        ),
        (
            "redstalk_tube_deletes_total",
            "counter",
            "Jobs deleted from a tube (stats-tube cmd-delete).",
            |t| t.cmd_delete,
        ),
        (
            "redstalk_tube_pauses_total",
            "counter",
            "pause-tube commands on a tube (stats-tube cmd-pause-tube).",
            |t| t.cmd_pause_tube,
        ),
        (
            "redstalk_tube_pause_seconds",
            "gauge",
            "The pause set on a paused tube in seconds, 0 when not paused (stats-tube pause).",
            |t| t.pause,
        ),
        (
            "redstalk_tube_pause_time_left_seconds",
            "gauge",
            "Seconds until a paused tube resumes, 0 when not paused (stats-tube pause-time-left).",
            |t| t.pause_time_left,
        ),
    ];
    for (name, kind, help, value) in per_tube {
        out.family(name, kind, help);
        for t in tubes {
            out.sample(name, &[("tube", &t.name)], value(t));
        }
    }
}

/// A family with one sample per item: name, type, help, and the figure.
type Family<T> = (&'static str, &'static str, &'static str, fn(&T) -> u64);

/// `nanos` as decimal seconds, exactly (no float rounding in bucket labels).
fn seconds(nanos: u64) -> String {
    let (whole, frac) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:09}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

struct Out(String);

impl Out {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {}", escape(help, false));
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape(v, true));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }
}

/// The format's escapes: backslash and line feed everywhere, and the double quote in
/// label values (a help text may contain it as is).
fn escape(s: &str, label: bool) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\\', '\n', '"']) {
        return s.into();
    }
    let mut e = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => e.push_str("\\\\"),
            '\n' => e.push_str("\\n"),
            '"' if label => e.push_str("\\\""),
            c => e.push(c),
        }
    }
    e.into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ServerStats;
    use crate::engine::WaitSnapshot;

    fn snapshot() -> Snapshot {
        Snapshot {
            engine: "memory",
            server: ServerStats {
                hostname: "a\"b\\c\nd".into(),
                version: "1.13".into(),
                ..ServerStats::default()
            },
            tubes: vec![TubeStats {
                name: "default".into(),
                current_jobs_ready: 2,
                ..TubeStats::default()
            }],
            wait: WaitSnapshot::default(),
        }
    }

    #[test]
    fn label_values_are_escaped() {
        let text = render(&snapshot());
        assert!(text.contains(r#"hostname="a\"b\\c\nd""#), "{text}");
    }

    #[test]
    fn every_sample_follows_its_help_and_type() {
        let text = render(&snapshot());
        let mut typed = std::collections::HashSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let name = rest.split(' ').next().unwrap_or("");
                assert!(typed.insert(name.to_string()), "{name} typed twice");
            } else if !line.starts_with('#') {
                let name = line.split(['{', ' ']).next().unwrap_or("");
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
                    .unwrap_or(name);
                assert!(typed.contains(family), "{line} before its TYPE");
            }
        }
        assert!(text.contains("redstalk_tube_jobs{tube=\"default\",state=\"ready\"} 2\n"));
        assert!(text.contains("redstalk_job_wait_seconds_bucket{le=\"+Inf\"} 0\n"));
        assert!(text.contains("redstalk_commands_total{command=\"reserve-with-timeout\"} 0\n"));
    }

    #[test]
    fn bucket_bounds_print_exactly() {
        assert_eq!(seconds(1_000_000), "0.001");
        assert_eq!(seconds(2_500_000), "0.0025");
        assert_eq!(seconds(2_500_000_000), "2.5");
        assert_eq!(seconds(3_600_000_000_000), "3600");
        assert_eq!(seconds(0), "0");
    }
}
