//! Redis failover under Sentinel, against real processes: a primary, one replica and
//! three sentinels (`redis-server --sentinel`, short timeouts) on free ports, and one
//! redstalk on `redis+sentinel://`. Under a put / reserve / delete load the primary is
//! killed with SIGKILL; the sentinels promote the replica; redstalk finds the new
//! primary by itself. The old primary is then started again (empty, as a supervisor
//! would), and the sentinels make it a replica of the new one. The tests run one at a
//! time and print their figures (`--nocapture`).
//!
//! What the tests prove, in each Redis mode:
//! - `*_with_wait_replicas_loses_no_acknowledged_job` — with `--redis-wait-replicas 1`
//!   every acknowledged job is deleted or found after the failover (lost 0, none
//!   deleted twice), and the load resumes on the new primary without a restart.
//! - `*_without_wait_replicas_reports_its_loss` — the same without waiting for the
//!   replica: the load resumes; the jobs acknowledged and then lost with the primary
//!   are counted and printed (what the option buys), not asserted.
//!
//! Figures printed: the time from the kill to the sentinels' promotion, and to the first
//! command acknowledged on the new primary; jobs acknowledged, lost, deleted twice.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::load::{Audit, Load};
use support::sentinel::{Sentinels, wait_for};
use support::{ServerKind, ServerProc, TEST_LEASE_MS, serial};

/// Run the load through a failover; the audit, after the figures are printed.
fn failover(kind: ServerKind, wait_replicas: bool) -> Option<Audit> {
    let _serial = serial();
    let mut set = Sentinels::start()?;
    let label = format!(
        "{} mode, {}",
        kind.redis_mode().unwrap(),
        if wait_replicas {
            "--redis-wait-replicas 1"
        } else {
            "no wait for replicas"
        }
    );
    let mut args: Vec<String> = Vec::new();
    if kind == ServerKind::Leader {
        args.extend(["--redis-lease".into(), TEST_LEASE_MS.into()]);
    }
    if wait_replicas {
        args.extend(
            ["--redis-wait-replicas", "1", "--redis-wait-timeout", "500"].map(String::from),
        );
    }
    let prefix = format!("sentinel-{}", kind.name());
    let mut srv = ServerProc::start_on_redis_as(kind, &set.url(), &prefix, &args)
        .unwrap_or_else(|e| panic!("start redstalk on the sentinels: {e}"));
    let log = srv.capture_stderr();
    let load = Load::for_failover(srv.addr);
    load.wait_until(
        "the load runs",
        Duration::from_secs(20),
        || log.tail(),
        |l| l.acked.len() > 300 && l.deleted.len() > 100,
    );
    let old = set.primary_port().expect("the sentinels name a primary");
    let acked_at_kill = load.ledger(|l| l.acked.len());
    let index = set.kill_server(old);
    let killed = Instant::now();
    wait_for(
        "the sentinels promote the replica",
        Duration::from_secs(30),
        || set.primary_port().is_some_and(|p| p != old),
    );
    let promoted = killed.elapsed();
    // Back empty, as a supervisor restarts it: the sentinels make it a replica.
    set.servers[index].spawn().expect("restart the old primary");
    // Two events, in either order: the first command acknowledged on the new primary,
    // and the old primary back in sync as a replica (with --redis-wait-replicas 1 and
    // a single replica, the first waits for the second). Both are waited for, so that
    // the audit comes after the demotion of the restarted old primary: jobs a redstalk
    // had put there (following a sentinel that had not heard of the failover) would be
    // wiped by then, and counted as lost.
    let (mut first_ack, mut rejoined) = (None, None);
    while first_ack.is_none() || rejoined.is_none() {
        // The demotion usually comes 17 s after the kill (a sentinel waits 8 s after
        // the restarted server reports itself a primary); a sentinel whose timer ran
        // late on the loaded machine enters TILT mode and acts on nothing for 30 s more.
        assert!(
            killed.elapsed() < Duration::from_secs(120),
            "after the failover: acknowledged again {first_ack:?}, old primary a replica \
             {rejoined:?}; {}\n{}\n{}",
            load.ledger(|l| l.counts()),
            set.diagnostics(),
            log.tail()
        );
        if first_ack.is_none() && load.ledger(|l| l.acked.len()) > acked_at_kill + 5 {
            first_ack = Some(killed.elapsed());
        }
        if rejoined.is_none() && set.is_synced_replica(index) {
            rejoined = Some(killed.elapsed());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (first_ack, rejoined) = (first_ack.unwrap(), rejoined.unwrap());
    let (ledger, audit) = load.finish(&mut srv, &log);
    println!(
        "sentinel failover ({label}): primary killed with {acked_at_kill} acknowledged; \
         replica promoted {} ms after the kill; old primary restarted and in sync as a \
         replica {} ms after the kill; first command acknowledged on the new primary {} ms \
         after the kill",
        promoted.as_millis(),
        rejoined.as_millis(),
        first_ack.as_millis()
    );
    println!("sentinel failover ({label}): {}", audit.summary());
    println!("sentinel failover ({label}): {}", ledger.counts());
    Some(audit)
}

#[test]
fn leader_mode_with_wait_replicas_loses_no_acknowledged_job() {
    if let Some(audit) = failover(ServerKind::Leader, true) {
        audit.assert_sound("leader mode, kill -9 of the primary, --redis-wait-replicas 1");
    }
}

#[test]
fn leader_mode_without_wait_replicas_reports_its_loss() {
    if let Some(audit) = failover(ServerKind::Leader, false) {
        assert!(audit.wrong.is_empty(), "{:?}", audit.wrong);
    }
}

#[test]
fn shared_mode_with_wait_replicas_loses_no_acknowledged_job() {
    if let Some(audit) = failover(ServerKind::Redis, true) {
        audit.assert_sound("shared mode, kill -9 of the primary, --redis-wait-replicas 1");
    }
}

#[test]
fn shared_mode_without_wait_replicas_reports_its_loss() {
    if let Some(audit) = failover(ServerKind::Redis, false) {
        assert!(audit.wrong.is_empty(), "{:?}", audit.wrong);
    }
}
