//! The families of the exposition as tables: each family's name, type, help, and how
//! its samples are read ([`FAMILIES`] from a snapshot, [`LISTENER_FAMILIES`],
//! [`ACCESS_FAMILIES`], [`SCHEDULE_FAMILIES`], [`RETENTION_FAMILIES`] from the figures
//! read at every scrape), with the functions that write the samples of the larger ones.

use super::{AccessFigures, ListenerFigures, Out, ScheduleFigures};
use crate::engine::{ServerStats, Snapshot, TubeStats};
use crate::protocol::Counter;
use crate::redis::placement::Placement;
use crate::store::retention::RetentionFigures;
use crate::util::histogram::HistogramSnapshot;

/// A family's type, as its `# TYPE` line says it.
#[derive(Clone, Copy)]
pub(super) enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    pub(super) fn name(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// How a family's samples are read from a snapshot.
#[derive(Clone, Copy)]
pub(super) enum Samples {
    /// One unlabelled sample of the instance.
    Server(fn(&Snapshot) -> u64),
    /// Samples of the instance, written by the function.
    ServerWith(fn(&Snapshot, &mut Out<'_>)),
    /// One sample per listed tube, labelled `tube`.
    Tube(fn(&TubeStats) -> u64),
    /// Samples per listed tube, labelled `tube` and what the function adds.
    TubeWith(fn(&TubeStats, &mut Out<'_>)),
    /// Samples per namespace this instance reaches in Redis, written by the function.
    Redis(fn(&Placement, &mut Out<'_>)),
    /// One unlabelled sample of the listener's own figures.
    Listener(fn(&ListenerFigures) -> u64),
    /// Samples of the access figures, written by the function.
    Access(fn(&AccessFigures, &mut Out<'_>)),
    /// Samples of the schedules' figures, written by the function.
    Schedules(fn(&ScheduleFigures, &mut Out<'_>)),
    /// One unlabelled sample of retention's figures.
    Retention(fn(&RetentionFigures) -> u64),
}

pub(super) struct Family {
    pub(super) name: &'static str,
    pub(super) kind: MetricKind,
    pub(super) help: &'static str,
    pub(super) samples: Samples,
}

const fn family(
    name: &'static str,
    kind: MetricKind,
    help: &'static str,
    samples: Samples,
) -> Family {
    Family {
        name,
        kind,
        help,
        samples,
    }
}

use MetricKind::{Counter as C, Gauge as G};

/// Every family, in the order of the exposition.
pub(super) const FAMILIES: &[Family] = &[
    family(
        "redstalk_info",
        G,
        "Always 1; the labels describe this instance (id is stats' id, new at every start).",
        Samples::ServerWith(info),
    ),
    family(
        "redstalk_jobs",
        G,
        "Jobs by state (stats current-jobs-*); urgent ones (ready, priority below 1024) are also counted as ready.",
        Samples::ServerWith(|s, out| {
            let s = &s.server;
            states(
                out,
                [
                    s.current_jobs_urgent,
                    s.current_jobs_ready,
                    s.current_jobs_reserved,
                    s.current_jobs_delayed,
                    s.current_jobs_buried,
                ],
            )
        }),
    ),
    family(
        "redstalk_commands_total",
        C,
        "Commands received by this instance, by kind (stats cmd-*; the extension verbs, which stats does not count, too).",
        Samples::ServerWith(commands),
    ),
    family(
        "redstalk_job_timeouts_total",
        C,
        "Reservations that ran out of time (stats job-timeouts).",
        Samples::Server(|s| s.server.job_timeouts),
    ),
    family(
        "redstalk_jobs_created_total",
        C,
        "Jobs created (stats total-jobs).",
        Samples::Server(|s| s.server.total_jobs),
    ),
    family(
        "redstalk_key_windows_evicted_total",
        C,
        "Dedupe windows of keyed jobs ended early because --key-windows-max were open (in shared mode, Redis' {P}:stats key_windows_evicted counts them instead).",
        Samples::Server(|s| s.key_windows_evicted),
    ),
    family(
        "redstalk_max_job_size_bytes",
        G,
        "Largest job body accepted (stats max-job-size, the -z flag).",
        Samples::Server(|s| s.server.max_job_size),
    ),
    family(
        "redstalk_tubes",
        G,
        "Tubes that exist (stats current-tubes).",
        Samples::Server(|s| s.server.current_tubes),
    ),
    family(
        "redstalk_connections",
        G,
        "Open connections to this instance (stats current-connections).",
        Samples::Server(|s| s.server.current_connections),
    ),
    family(
        "redstalk_producers",
        G,
        "Open connections that have put a job (stats current-producers).",
        Samples::Server(|s| s.server.current_producers),
    ),
    family(
        "redstalk_workers",
        G,
        "Open connections that have reserved (stats current-workers).",
        Samples::Server(|s| s.server.current_workers),
    ),
    family(
        "redstalk_waiting",
        G,
        "Connections blocked in a reserve (stats current-waiting).",
        Samples::Server(|s| s.server.current_waiting),
    ),
    family(
        "redstalk_connections_accepted_total",
        C,
        "Connections accepted since start (stats total-connections).",
        Samples::Server(|s| s.server.total_connections),
    ),
    family(
        "redstalk_uptime_seconds",
        G,
        "Seconds since this instance started (stats uptime).",
        Samples::Server(|s| s.server.uptime),
    ),
    family(
        "redstalk_cpu_seconds_total",
        C,
        "CPU time used by this process (stats rusage-utime, rusage-stime).",
        Samples::ServerWith(cpu),
    ),
    family(
        "redstalk_draining",
        G,
        "1 in drain mode (after SIGUSR1: puts are refused), else 0 (stats draining).",
        Samples::Server(|s| u64::from(s.server.draining)),
    ),
    family(
        "redstalk_tubes_omitted",
        G,
        "Tubes left out of the per-tube families (redstalk_tube_*): beyond the first --metrics-tubes by name.",
        Samples::Server(|s| s.tubes_omitted),
    ),
    family(
        "redstalk_tube_jobs",
        G,
        "Jobs in a tube by state (stats-tube current-jobs-*); urgent ones are also counted as ready.",
        Samples::TubeWith(|t, out| {
            states(
                out,
                [
                    t.current_jobs_urgent,
                    t.current_jobs_ready,
                    t.current_jobs_reserved,
                    t.current_jobs_delayed,
                    t.current_jobs_buried,
                ],
            )
        }),
    ),
    family(
        "redstalk_tube_jobs_created_total",
        C,
        "Jobs created in a tube since it was created (stats-tube total-jobs).",
        Samples::Tube(|t| t.total_jobs),
    ),
    family(
        "redstalk_tube_using",
        G,
        "Connections using a tube (stats-tube current-using).",
        Samples::Tube(|t| t.current_using),
    ),
    family(
        "redstalk_tube_watching",
        G,
        "Connections watching a tube (stats-tube current-watching).",
        Samples::Tube(|t| t.current_watching),
    ),
    family(
        "redstalk_tube_waiting",
        G,
        "Connections of this instance blocked in a reserve on a tube (stats-tube current-waiting).",
        Samples::Tube(|t| t.current_waiting),
    ),
    family(
        "redstalk_tube_deletes_total",
        C,
        "Jobs deleted from a tube (stats-tube cmd-delete).",
        Samples::Tube(|t| t.cmd_delete),
    ),
    family(
        "redstalk_tube_pauses_total",
        C,
        "pause-tube commands on a tube (stats-tube cmd-pause-tube).",
        Samples::Tube(|t| t.cmd_pause_tube),
    ),
    family(
        "redstalk_tube_pause_seconds",
        G,
        "The pause set on a paused tube in seconds, 0 when not paused (stats-tube pause).",
        Samples::Tube(|t| t.pause),
    ),
    family(
        "redstalk_tube_pause_time_left_seconds",
        G,
        "Seconds until a paused tube resumes, 0 when not paused (stats-tube pause-time-left).",
        Samples::Tube(|t| t.pause_time_left),
    ),
    family(
        "redstalk_job_wait_seconds",
        MetricKind::Histogram,
        "How long a job had been ready when a reserve on this instance took it (since its put, the end of its delay, its release, kick or lapsed reservation); a delayed or buried job taken by reserve-job counts 0.",
        Samples::ServerWith(wait),
    ),
    family(
        "redstalk_batch_stage_seconds",
        MetricKind::Histogram,
        "Where a persisted change's acknowledgement time goes, per batch of the group commit (leader mode and -b): stage=wait (from the first change after the last batch was cut until this one is cut), build (the cut and the batch handed to the connection), write (until the answer is taken in: on the wire and in Redis, or the log written and synced), settle (until the progress is published), wake (from then until a waiting reply runs again, once per reply).",
        Samples::ServerWith(batch_stages),
    ),
    family(
        "redstalk_batch_jobs",
        MetricKind::Histogram,
        "Jobs a batch of the group commit writes or removes (leader mode and -b).",
        Samples::ServerWith(batch_jobs),
    ),
    family(
        "redstalk_redis_info",
        G,
        "Where the namespace lives in Redis: the topology (standalone, sentinel, cluster), the prefix, the hash slot of every key (cluster only) and the primary in use (HOST:PORT); always 1.",
        Samples::Redis(redis_info),
    ),
    family(
        "redstalk_redis_primary_changes_total",
        C,
        "How many times the Redis primary serving the namespace changed since this process started (a failover, a slot moved to another node, a primary the sentinels or the cluster name anew).",
        Samples::Redis(|p, out| out.sample("", &[("prefix", &p.prefix)], p.changes)),
    ),
];

/// The listener's own families, in the order of their exposition.
pub(super) const LISTENER_FAMILIES: &[Family] = &[
    family(
        "redstalk_console_event_streams",
        G,
        "Console event streams open (GET /api/v1/events).",
        Samples::Listener(|f| f.event_streams),
    ),
    family(
        "redstalk_console_snapshots_total",
        C,
        "Console live snapshots computed (at most one a second, while a stream is open).",
        Samples::Listener(|f| f.live_snapshots),
    ),
];

/// The access families, in the order of their exposition.
pub(super) const ACCESS_FAMILIES: &[Family] = &[
    family(
        "redstalk_listener_connections_total",
        C,
        "Connections accepted per beanstalk listener since the start (before TLS and authentication).",
        Samples::Access(|f, out| {
            for (l, accepted, _) in &f.listeners {
                out.sample("", &[("listener", l)], accepted);
            }
        }),
    ),
    family(
        "redstalk_listener_connections",
        G,
        "Connections open per beanstalk listener (authenticated or not).",
        Samples::Access(|f, out| {
            for (l, _, open) in &f.listeners {
                out.sample("", &[("listener", l)], open);
            }
        }),
    ),
    family(
        "redstalk_pending_connections",
        G,
        "Connections handshaking or not yet authenticated (at most --max-pending).",
        Samples::Access(|f, out| out.value(f.pending)),
    ),
    family(
        "redstalk_pending_refused_total",
        C,
        "Connections closed at accept because --max-pending connections were pending.",
        Samples::Access(|f, out| out.value(f.pending_refused)),
    ),
    family(
        "redstalk_tls_handshake_failures_total",
        C,
        "Failed TLS handshakes on the beanstalk port, by reason.",
        Samples::Access(|f, out| {
            for (reason, n) in &f.handshake_failures {
                out.sample("", &[("reason", reason)], n);
            }
        }),
    ),
    family(
        "redstalk_auth_failures_total",
        C,
        "Clients of the beanstalk port refused before they were served (or when their identity was revoked), by reason.",
        Samples::Access(|f, out| {
            for (reason, n) in &f.auth_failures {
                out.sample("", &[("reason", reason)], n);
            }
        }),
    ),
    family(
        "redstalk_refusals_total",
        C,
        "Commands answered FORBIDDEN (the connection's role may not run them), by role.",
        Samples::Access(|f, out| {
            for (role, n) in &f.refusals {
                out.sample("", &[("role", role)], n);
            }
        }),
    ),
    family(
        "redstalk_reloads_total",
        C,
        "SIGHUP reloads of the roles file and the TLS files, by what and outcome (failed: the old ones stay).",
        Samples::Access(|f, out| {
            for ((what, outcome), n) in &f.reloads {
                out.sample("", &[("what", what), ("outcome", outcome)], n);
            }
        }),
    ),
];

fn redis_info(p: &Placement, out: &mut Out<'_>) {
    let slot = p.slot.map(|s| s.to_string());
    let mut labels = vec![("topology", p.topology.name()), ("prefix", &p.prefix)];
    if let Some(slot) = &slot {
        labels.push(("slot", slot));
    }
    labels.push(("primary", &p.primary));
    out.sample("", &labels, 1);
}

fn info(snap: &Snapshot, out: &mut Out<'_>) {
    let s: &ServerStats = &snap.server;
    out.sample(
        "",
        &[
            ("version", env!("CARGO_PKG_VERSION")),
            ("protocol_version", &s.version),
            ("engine", snap.engine),
            ("id", &s.id),
            ("hostname", &s.hostname),
        ],
        1,
    );
}

/// The five `state` samples of a job count, in `stats` order.
fn states(out: &mut Out<'_>, [urgent, ready, reserved, delayed, buried]: [u64; 5]) {
    for (state, v) in [
        ("urgent", urgent),
        ("ready", ready),
        ("reserved", reserved),
        ("delayed", delayed),
        ("buried", buried),
    ] {
        out.sample("", &[("state", state)], v);
    }
}

fn commands(snap: &Snapshot, out: &mut Out<'_>) {
    for c in Counter::ALL {
        let name = c.key().trim_start_matches("cmd-");
        out.sample("", &[("command", name)], snap.server.cmd[c.index()]);
    }
    for (verb, n) in &snap.extension_commands {
        out.sample("", &[("command", verb)], n);
    }
}

fn cpu(snap: &Snapshot, out: &mut Out<'_>) {
    let s = &snap.server;
    for (mode, (sec, us)) in [("user", s.rusage_utime), ("system", s.rusage_stime)] {
        out.sample("", &[("mode", mode)], format_args!("{sec}.{us:06}"));
    }
}

fn wait(snap: &Snapshot, out: &mut Out<'_>) {
    histogram(out, &[], &snap.wait, seconds);
}

fn batch_stages(snap: &Snapshot, out: &mut Out<'_>) {
    let Some(b) = &snap.batch_stages else {
        return;
    };
    for (stage, h) in &b.stages {
        histogram(out, &[("stage", stage.name())], h, seconds);
    }
}

fn batch_jobs(snap: &Snapshot, out: &mut Out<'_>) {
    if let Some(b) = &snap.batch_stages {
        histogram(out, &[], &b.jobs, |n| n.to_string());
    }
}

/// A histogram's samples, each with `labels` first; `value` prints a bound or the sum.
/// Every histogram family is printed here, so all keep one layout: the cumulative
/// buckets in bound order, `+Inf` (the count), `_sum`, `_count`.
fn histogram(
    out: &mut Out<'_>,
    labels: &[(&str, &str)],
    h: &HistogramSnapshot,
    value: fn(u64) -> String,
) {
    let bounds = h.bounds.iter().map(|b| value(*b));
    let counts = h.cumulative.iter().copied();
    for (le, n) in bounds.zip(counts).chain([("+Inf".to_string(), h.count)]) {
        let all: Vec<(&str, &str)> = labels.iter().copied().chain([("le", &*le)]).collect();
        out.sample("_bucket", &all, n);
    }
    out.sample("_sum", labels, value(h.sum));
    out.sample("_count", labels, h.count);
}

/// `nanos` as decimal seconds, exactly (no float rounding in bucket labels).
pub(super) fn seconds(nanos: u64) -> String {
    let (whole, frac) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:09}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// The schedules' families, in the order of their exposition.
pub(super) const SCHEDULE_FAMILIES: &[Family] = &[
    family(
        "redstalk_schedules",
        G,
        "Schedules defined (docs/SCHEDULES.md).",
        Samples::Schedules(|f, out| out.value(f.defined)),
    ),
    family(
        "redstalk_schedule_fires_total",
        C,
        "Schedule ticks handled by this instance, by result: made a job, deduped (the key's job still waited), skipped (missed ticks passed over), stale (fired already, by another instance or an earlier try), failed (tried again).",
        Samples::Schedules(|f, out| {
            for (result, n) in [
                ("made", f.made),
                ("deduped", f.deduped),
                ("skipped", f.skipped),
                ("stale", f.stale),
                ("failed", f.failed),
            ] {
                out.sample("", &[("result", result)], n);
            }
        }),
    ),
];

/// Retention's families (docs/RETENTION.md), in the order of their exposition.
pub(super) const RETENTION_FAMILIES: &[Family] = &[
    family(
        "redstalk_retained_records",
        G,
        "Deleted jobs' records retained (--retain; docs/RETENTION.md).",
        Samples::Retention(|f| f.records),
    ),
    family(
        "redstalk_retained_bytes",
        G,
        "The retained records' accounted size in bytes, bounded by --retain-bytes.",
        Samples::Retention(|f| f.bytes),
    ),
];
