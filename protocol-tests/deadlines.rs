//! A job due just before a reserve's timeout, against the real binary on every engine,
//! and on beanstalkd for comparison.
//!
//! What the test proves:
//! - `a_job_due_just_before_a_timeout_goes_to_that_reserve` — put, reserve,
//!   `release <id> 0 2`, then `reserve-with-timeout 1` twice: the first times out (the
//!   job is not due yet), the second gets the job, whose delay ends a few milliseconds
//!   before that reserve's timeout (the reference moves due jobs before it times
//!   connections out). [`SEQUENCES`] such sequences run at once, each on its own tube
//!   and connection, on beanstalkd, memory, leader and shared mode; the misses out of
//!   [`SEQUENCES`] are printed per server, and must be 0. (Shared mode used to miss:
//!   its tick and serve pass are round trips to Redis, which on a loaded machine took
//!   longer than those few milliseconds, and the timeout fired first.)

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::client::Client;
use support::{ServerKind, ServerProc};

/// How many sequences run at once on each server.
const SEQUENCES: usize = 20;

/// How one sequence ended.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The second reserve got the job.
    Served,
    /// The second reserve timed out with the job due before its timeout.
    Missed,
}

/// One sequence on its own connection and tube.
fn sequence(server: &ServerProc, n: usize) -> Outcome {
    let mut c = Client::connect(server.addr, format!("sequence {n}"));
    let tube = format!("due-{n}");
    c.use_tube(&tube);
    c.watch_only(&tube);
    let id = c.put(0, 0, 60, b"due");
    assert_eq!(c.reserve().0, id);
    c.expect(&format!("release {id} 0 2"), "RELEASED");
    // Not due for another second: a job here would be a wrong answer, not a timing.
    let first = Instant::now();
    assert_eq!(
        c.reserve_timeout(1),
        None,
        "sequence {n}: the job came early"
    );
    let waited = first.elapsed();
    assert!(
        waited >= Duration::from_millis(990),
        "sequence {n}: the first reserve-with-timeout 1 ended after {waited:?}"
    );
    match c.reserve_timeout(1) {
        Some((got, _)) => {
            assert_eq!(got, id, "sequence {n}: another job");
            c.expect(&format!("delete {id}"), "DELETED");
            Outcome::Served
        }
        None => {
            // Timed out although the job was due before then: a miss. The job is
            // still there, for nobody else (still delayed if the server has not
            // applied its due time yet).
            let state = c.dict_value(&format!("stats-job {id}"), "state");
            assert!(
                state == "ready" || state == "delayed",
                "sequence {n}: after a timed-out reserve the job is {state}"
            );
            Outcome::Missed
        }
    }
}

/// Wait until `server` takes a put (a leader serves once it holds its lease).
fn wait_serving(server: &ServerProc, kind: ServerKind) {
    let mut c = Client::connect(server.addr, "probe");
    c.use_tube("probe");
    let started = Instant::now();
    loop {
        let r = c.put_reply(0, 0, 60, b"probe");
        if r.word() == "INSERTED" {
            c.expect(&format!("delete {}", r.id().unwrap()), "DELETED");
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{} does not take a put: {}",
            kind.name(),
            r.line
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_job_due_just_before_a_timeout_goes_to_that_reserve() {
    let mut failed = Vec::new();
    for kind in [
        ServerKind::Beanstalkd,
        ServerKind::Memory,
        ServerKind::Leader,
        ServerKind::Redis,
    ] {
        let Some(mut server) = ServerProc::start(kind, &[]).unwrap() else {
            continue;
        };
        let log = server.capture_stderr();
        wait_serving(&server, kind);
        let outcomes: Vec<Outcome> = std::thread::scope(|s| {
            let running: Vec<_> = (0..SEQUENCES)
                .map(|n| {
                    let server = &server;
                    s.spawn(move || sequence(server, n))
                })
                .collect();
            running.into_iter().map(|t| t.join().unwrap()).collect()
        });
        let misses = outcomes.iter().filter(|o| **o == Outcome::Missed).count();
        eprintln!(
            "deadlines: {}: {misses} of {SEQUENCES} reserves missed a job due just before their timeout",
            kind.name()
        );
        if misses > 0 {
            failed.push(format!(
                "{}: {misses} misses; log:\n{}",
                kind.name(),
                log.tail()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
