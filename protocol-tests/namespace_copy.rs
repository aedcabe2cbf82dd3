//! `redstalk-namespace copy` against real processes: two private redis-servers, redstalk
//! in both Redis modes, and the tool's binary.
//!
//! What the tests prove:
//! - `a_copied_namespace_is_served_at_the_target_and_never_again_at_the_source` — in
//!   shared and leader mode, a namespace with jobs ready, delayed and buried in three
//!   tubes, a paused tube, a used id counter, 1,200 jobs in a fourth tube (more than one
//!   chunk of each read) and a key with an expiry:
//!   - the copy is refused while an instance serves it (nothing written at the target);
//!   - a target holding keys of an interrupted copy is refused, and overwritten with
//!     `--resume` (with `--keep-source`: the source's lock is lifted afterwards);
//!   - copied to another Redis under another prefix, the tool reports each tube's jobs
//!     by state (the same on both sides), the expiry is kept, and an instance there
//!     serves every job as before: peek (body), stats-job (tube, state), the pause, the
//!     bulk tube's count, reserve order, the next id after the old ones;
//!   - the source holds the tombstone: an instance started on it refuses, saying where
//!     the namespace went, and a second copy of it is refused;
//!   - a copy onto a namespace that exists is refused.
//!
//!   Prints the tool's summary and how long the copy took.
//! - `a_standalone_namespace_moves_onto_a_cluster` — the same namespace, in both modes,
//!   copied from a standalone Redis onto a Redis Cluster (3 primaries, 3 replicas):
//!   every key on the primary of the namespace's slot (none on another primary), and an
//!   instance started with `redis+cluster://` serves every job as before and continues
//!   the ids.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::client::Client;
use support::cluster::Cluster;
use support::namespace::{assert_served, fill_namespace, keys_starting, redis_conn};
use support::redis::private_redis;
use support::sentinel::cli;
use support::{ServerKind, ServerProc, TEST_LEASE_MS, redstalk_on_as, serial, wait_served};

const REPLY: Duration = Duration::from_secs(10);
/// The lease key's value after a copy (src/redis/copy.rs).
const MOVED: &str = "0|moved|redstalk-namespace";
/// Jobs in one tube: more than a chunk of each kind the copy reads.
const BULK: usize = 1_200;

/// Runs the tool: exit code, stdout, stderr.
fn tool(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_redstalk-namespace"))
        .args(args)
        .output()
        .expect("run redstalk-namespace");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn copy_args<'a>(
    from: &'a str,
    to: &'a str,
    p: &'a str,
    q: &'a str,
    more: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "copy",
        "--from",
        from,
        "--to",
        to,
        "--prefix",
        p,
        "--to-prefix",
        q,
    ];
    args.extend_from_slice(more);
    args
}

fn get(conn: &mut ::redis::Connection, key: &str) -> Option<String> {
    ::redis::cmd("GET").arg(key).query(conn).unwrap()
}

fn stop(mut srv: ServerProc) {
    srv.signal("TERM").unwrap();
    assert!(
        srv.wait_exit(Duration::from_secs(30)).is_some(),
        "no clean stop"
    );
}

#[test]
fn a_copied_namespace_is_served_at_the_target_and_never_again_at_the_source() {
    let _serial = serial();
    let Some(a) = private_redis(&[], "namespace copy tests") else {
        return;
    };
    let b = private_redis(&[], "namespace copy tests").unwrap();
    let (mut ca, mut cb) = (redis_conn(&a), redis_conn(&b));
    let (url_a, url_b) = (a.url(), b.url());
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let mode = kind.redis_mode().unwrap();
        let (p, q, r) = (
            format!("src-{mode}"),
            format!("dst-{mode}"),
            format!("part-{mode}"),
        );
        let (srv, _) = redstalk_on_as(kind, &a, &p, &[]);
        let mut c = Client::connect(srv.addr, "fill");
        c.timeout = REPLY;
        let jobs = fill_namespace(&mut c);
        // More than one chunk of every kind the copy reads (1,000 set members, 100 hash
        // fields a call), and a key that expires (as the console's history minutes do).
        c.use_tube("bulk");
        let last_id = (0..BULK)
            .map(|i| c.put(10, 0, 60, format!("bulk {i}").as_bytes()))
            .max()
            .unwrap();
        let expiring = format!("{{{p}}}:history:1");
        let _: () = ::redis::pipe()
            .cmd("HSET")
            .arg(&expiring)
            .arg("bulk")
            .arg("1")
            .cmd("PEXPIRE")
            .arg(&expiring)
            .arg(600_000)
            .query(&mut ca)
            .unwrap();

        // Refused while an instance serves the namespace.
        let (code, _, err) = tool(&copy_args(&url_a, &url_b, &p, &q, &[]));
        assert_eq!(code, 1, "{mode}: copy beside a live instance: {err}");
        assert!(err.contains("stop"), "{err}");
        assert!(keys_starting(&mut cb, &format!("{{{q}}}")).is_empty());
        drop(c);
        stop(srv);

        // An interrupted copy's keys at the target: refused, then overwritten.
        let stray = format!("{{{r}}}:stats");
        let _: () = ::redis::cmd("SET")
            .arg(&stray)
            .arg("x")
            .query(&mut cb)
            .unwrap();
        let (code, _, err) = tool(&copy_args(&url_a, &url_b, &p, &r, &["--keep-source"]));
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("--resume"), "{err}");
        let (code, out, err) = tool(&copy_args(
            &url_a,
            &url_b,
            &p,
            &r,
            &["--keep-source", "--resume"],
        ));
        assert_eq!(code, 0, "{out}{err}");
        assert_eq!(
            get(&mut ca, &support::lease::lease_key(&p)),
            None,
            "the lock stayed"
        );

        // The copy.
        let started = Instant::now();
        let (code, out, err) = tool(&copy_args(&url_a, &url_b, &p, &q, &[]));
        let took = started.elapsed();
        assert_eq!(code, 0, "{out}{err}");
        let bulk_row = format!("bulk\t{BULK}\t0\t0\t0");
        for row in [
            "alpha\t2\t0\t0\t0",
            "beta\t0\t1\t0\t1",
            "gamma\t1\t0\t0\t0",
            &bulk_row,
        ] {
            assert!(out.lines().any(|l| l == row), "no row {row:?} in\n{out}");
        }
        assert_eq!(
            get(&mut ca, &support::lease::lease_key(&p)).as_deref(),
            Some(MOVED)
        );

        let ttl: i64 = ::redis::cmd("PTTL")
            .arg(format!("{{{q}}}:history:1"))
            .query(&mut cb)
            .unwrap();
        assert!(ttl > 0 && ttl <= 600_000, "expiry not copied: {ttl}");

        // Served at the target as before.
        let (srv, log) = redstalk_on_as(kind, &b, &q, &[]);
        let mut c = Client::connect(srv.addr, "after");
        c.timeout = REPLY;
        assert_served(&mut c, &jobs, &log);
        assert_eq!(
            c.dict_value("stats-tube bulk", "current-jobs-ready"),
            BULK.to_string()
        );
        c.watch_only("alpha");
        let (got, body) = c.reserve();
        assert_eq!((got, &body[..]), (jobs[1].0, &b"alpha urgent"[..]));
        let next = c.put(1, 0, 60, b"new");
        assert_eq!(next, last_id + 1);
        drop(c);
        stop(srv);

        // The source refuses to serve, and to be copied again.
        let refused = ServerProc::start_on_redis_as(kind, &url_a, &p, &[]);
        let err = refused.err().expect("an instance served a moved namespace");
        assert!(err.contains("moved away"), "{err}");
        let (code, _, err) = tool(&copy_args(&url_a, &url_b, &p, &q, &[]));
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("moved away already"), "{err}");

        // Onto a namespace that exists: refused.
        let (code, _, err) = tool(&copy_args(&url_b, &url_b, &q, &q, &["--keep-source"]));
        assert_eq!(code, 1, "{err}");
        assert!(err.contains("already holds"), "{err}");
        println!(
            "{mode} mode: copied in {} ms (tool run included): {}",
            took.as_millis(),
            out.lines().last().unwrap_or("")
        );
    }
}

/// A namespace of a standalone Redis copied onto a Redis Cluster (the move
/// docs/OPERATIONS.md describes), in both modes: every key lands in the namespace's slot
/// on that slot's primary (none on another primary), and an instance on the cluster
/// serves every job as before.
#[test]
fn a_standalone_namespace_moves_onto_a_cluster() {
    let _serial = serial();
    let Some(a) = private_redis(&[], "namespace copy tests") else {
        return;
    };
    let cluster = Cluster::start().expect("start a 6-node cluster");
    let (url_a, url_c) = (a.url(), cluster.url());
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let mode = kind.redis_mode().unwrap();
        let p = format!("onto-{mode}");
        let (srv, _) = redstalk_on_as(kind, &a, &p, &[]);
        let mut c = Client::connect(srv.addr, "fill");
        c.timeout = REPLY;
        let jobs = fill_namespace(&mut c);
        drop(c);
        stop(srv);

        let (code, out, err) = tool(&["copy", "--from", &url_a, "--to", &url_c, "--prefix", &p]);
        assert_eq!(code, 0, "{out}{err}");
        let slot: u16 = cli(
            cluster.nodes[0].port,
            &["CLUSTER", "KEYSLOT", &format!("{{{p}}}")],
        )
        .and_then(|s| s.trim().parse().ok())
        .expect("CLUSTER KEYSLOT");
        let owner = cluster.primary_of(slot).expect("the slot has a primary");
        let tag = format!("{{{p}}}:");
        assert!(
            cluster.keys_in_slot(owner, slot) > 0,
            "nothing on the slot's primary"
        );
        for i in cluster.primaries() {
            let stray: Vec<String> = cluster
                .keys_of(i)
                .into_iter()
                .filter(|k| k.starts_with(&tag) && i != owner)
                .collect();
            assert!(stray.is_empty(), "keys on another primary: {stray:?}");
        }

        let mut args: Vec<String> = Vec::new();
        if kind == ServerKind::Leader {
            args = vec!["--redis-lease".into(), TEST_LEASE_MS.into()];
        }
        let mut srv = ServerProc::start_on_redis_as(kind, &url_c, &p, &args)
            .unwrap_or_else(|e| panic!("start redstalk on the cluster: {e}"));
        let log = srv.capture_stderr();
        wait_served(srv.addr, Duration::from_secs(30), &log);
        let mut c = Client::connect(srv.addr, "after");
        c.timeout = REPLY;
        assert_served(&mut c, &jobs, &log);
        let next = c.put(1, 0, 60, b"new");
        assert_eq!(next, jobs.iter().map(|j| j.0).max().unwrap() + 1);
        drop(c);
        stop(srv);
        println!(
            "{mode} mode onto the cluster (slot {slot}, primary node {owner}): {}",
            out.lines().last().unwrap_or("")
        );
    }
}
