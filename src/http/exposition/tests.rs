//! The exposition against the format's rules and the figures it must carry.

use super::families::seconds;
use super::*;
use crate::engine::{ServerStats, TubeStats};
use crate::redis::placement::Topology;

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
        tubes_omitted: 3,
        wait: crate::engine::Counters::default().wait.snapshot(),
        extension_commands: vec![("list-extensions", 4)],
        key_windows_evicted: 0,
        batch_stages: None,
    }
}

#[test]
fn label_values_are_escaped() {
    let text = render(&snapshot(), &[]);
    assert!(text.contains(r#"hostname="a\"b\\c\nd""#), "{text}");
}

#[test]
fn every_sample_follows_its_help_and_type() {
    let redis = [Placement {
        topology: Topology::Cluster,
        prefix: "billing".into(),
        slot: Some(12682),
        primary: "10.0.0.7:6379".into(),
        changes: 2,
    }];
    let text = render(&snapshot(), &redis);
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
    assert_eq!(typed.len(), FAMILIES.len());
    assert!(text.contains("redstalk_tube_jobs{tube=\"default\",state=\"ready\"} 2\n"));
    assert!(text.contains("redstalk_tube_using{tube=\"default\"} 0\n"));
    assert!(text.contains("redstalk_tubes_omitted 3\n"));
    assert!(text.contains("redstalk_job_wait_seconds_bucket{le=\"+Inf\"} 0\n"));
    assert!(text.contains("redstalk_job_wait_seconds_sum 0\n"));
    assert!(text.contains("redstalk_commands_total{command=\"reserve-with-timeout\"} 0\n"));
    assert!(text.contains("redstalk_commands_total{command=\"list-extensions\"} 4\n"));
    assert!(text.contains("redstalk_cpu_seconds_total{mode=\"user\"} 0.000000\n"));
    assert!(text.contains(
        "redstalk_redis_info{topology=\"cluster\",prefix=\"billing\",slot=\"12682\",\
         primary=\"10.0.0.7:6379\"} 1\n"
    ));
    assert!(text.contains("redstalk_redis_primary_changes_total{prefix=\"billing\"} 2\n"));
    let standalone = [Placement {
        topology: Topology::Standalone,
        slot: None,
        ..redis[0].clone()
    }];
    let text = render(&snapshot(), &standalone);
    assert!(text.contains(
        "redstalk_redis_info{topology=\"standalone\",prefix=\"billing\",\
         primary=\"10.0.0.7:6379\"} 1\n"
    ));
}

#[test]
fn the_listener_figures_are_families_of_their_own() {
    let text = render_listener(&ListenerFigures {
        event_streams: 2,
        live_snapshots: 7,
    });
    assert_eq!(
        text,
        "# HELP redstalk_console_event_streams Console event streams open (GET /api/v1/events).\n\
         # TYPE redstalk_console_event_streams gauge\n\
         redstalk_console_event_streams 2\n\
         # HELP redstalk_console_snapshots_total Console live snapshots computed (at most one a second, while a stream is open).\n\
         # TYPE redstalk_console_snapshots_total counter\n\
         redstalk_console_snapshots_total 7\n"
    );
    let main = render(&snapshot(), &[]);
    assert!(
        !main.contains("redstalk_console_"),
        "not in the shared text"
    );
}

#[test]
fn the_schedule_figures_are_families_of_their_own() {
    let text = render_schedules(&ScheduleFigures {
        defined: 3,
        made: 10,
        deduped: 2,
        skipped: 1,
        stale: 4,
        failed: 0,
    });
    assert!(text.contains("# TYPE redstalk_schedules gauge\nredstalk_schedules 3\n"));
    assert!(text.contains("# TYPE redstalk_schedule_fires_total counter\n"));
    for line in [
        "redstalk_schedule_fires_total{result=\"made\"} 10\n",
        "redstalk_schedule_fires_total{result=\"deduped\"} 2\n",
        "redstalk_schedule_fires_total{result=\"skipped\"} 1\n",
        "redstalk_schedule_fires_total{result=\"stale\"} 4\n",
        "redstalk_schedule_fires_total{result=\"failed\"} 0\n",
    ] {
        assert!(text.contains(line), "{line} in {text}");
    }
    assert!(!render(&snapshot(), &[]).contains("redstalk_schedule"));
}

#[test]
fn the_retention_figures_are_families_of_their_own() {
    let text = render_retention(&RetentionFigures {
        records: 12,
        bytes: 3456,
    });
    assert!(
        text.contains("# TYPE redstalk_retained_records gauge\nredstalk_retained_records 12\n")
    );
    assert!(text.contains("# TYPE redstalk_retained_bytes gauge\nredstalk_retained_bytes 3456\n"));
    assert!(!render(&snapshot(), &[]).contains("redstalk_retained"));
}

#[test]
fn a_per_tube_family_without_tubes_keeps_its_help_and_type() {
    let mut snap = snapshot();
    snap.tubes.clear();
    let text = render(&snap, &[]);
    assert!(text.contains("# TYPE redstalk_tube_jobs gauge\n"));
    assert!(!text.contains("redstalk_tube_jobs{"));
}

#[test]
fn bucket_bounds_print_exactly() {
    assert_eq!(seconds(1_000_000), "0.001");
    assert_eq!(seconds(2_500_000), "0.0025");
    assert_eq!(seconds(2_500_000_000), "2.5");
    assert_eq!(seconds(3_600_000_000_000), "3600");
    assert_eq!(seconds(0), "0");
}
