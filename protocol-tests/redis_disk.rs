//! Redis unable to write its append-only file (a full disk under its `--dir`: a small
//! tmpfs the test mounts, then grows), in each Redis mode and under Sentinel, against
//! real processes. Redis then refuses every write (`MISCONF`); what it still runs are
//! reads and scripts flagged `no-writes`.
//!
//! What the test proves, for shared mode, leader mode, and leader mode on Sentinel
//! (figures printed, `--nocapture`):
//! - a put answers INTERNAL_ERROR (within about a second), never INSERTED, while Redis
//!   cannot persist;
//! - shared mode keeps serving reads (`peek`, `stats-job`, `stats`): its read scripts
//!   are flagged `no-writes` (before, every script was refused, reads included, and
//!   they answered INTERNAL_ERROR);
//! - leader mode cannot renew its lease (a write) and steps down within it; no instance
//!   can lead while Redis refuses writes, so its clients are closed at once rather than
//!   left waiting, and reads are not served (every reply of a leader is fenced by its
//!   lease; see docs/RELIABILITY.md);
//! - when the filesystem grows, service comes back by itself (no restart), and every put
//!   acknowledged before is there.
//!
//! Needs root for the mount: skipped with a notice otherwise, unless
//! `REDSTALK_REQUIRE_ORACLE=1`.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use support::client::Client;
use support::redis::private_redis;
use support::sentinel::Sentinels;
use support::tmpfs::Tmpfs;
use support::{ServerKind, ServerProc, TEST_LEASE_MS, oracle_required, serial, wait_served};

const WITHIN: Duration = Duration::from_secs(30);

fn tmpfs() -> Option<Tmpfs> {
    match Tmpfs::mount("3m") {
        Ok(fs) => Some(fs),
        Err(e) if !oracle_required() => {
            eprintln!("!!! cannot mount a tmpfs (not root?): the AOF tests are SKIPPED: {e}");
            None
        }
        Err(e) => panic!("cannot mount a tmpfs for the AOF tests: {e}"),
    }
}

/// The arguments that put a Redis' AOF on `fs`.
fn aof_on(fs: &Tmpfs) -> Vec<String> {
    [
        "--dir",
        &fs.dir.display().to_string(),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--auto-aof-rewrite-percentage",
        "0",
    ]
    .map(String::from)
    .to_vec()
}

/// A reply within `t`, or what failed, as text.
fn ask(c: &mut Option<Client>, addr: SocketAddr, line: &str, t: Duration) -> (String, Duration) {
    let start = Instant::now();
    if c.is_none() {
        *c = Client::try_connect(addr, "reader").ok();
    }
    let out = match c
        .as_mut()
        .map(|c| c.try_call(format!("{line}\r\n").as_bytes(), t))
    {
        Some(Ok(r)) => r.word().to_string(),
        Some(Err(e)) => {
            *c = None;
            format!("{:?}", e.kind())
        }
        None => "refused".into(),
    };
    (out, start.elapsed())
}

/// Fill Redis' disk through `srv`, look at what is served while it is full, grow the
/// disk, and check nothing acknowledged was lost.
fn full_disk(name: &str, fs: &Tmpfs, srv: &ServerProc, log: &support::Log, leader: bool) {
    wait_served(srv.addr, WITHIN, log);
    let mut c = Client::connect(srv.addr, "producer");
    let mut acked: Vec<(u64, Vec<u8>)> = Vec::new();
    for n in 0..20 {
        let body = format!("{name}: small job {n}").into_bytes();
        acked.push((c.put(0, 0, 60, &body), body));
    }
    // Fill: 40 KB puts until Redis refuses one.
    let mut first_refusal = None;
    for n in 0..500 {
        let mut body = format!("{name}: filler {n} ").into_bytes();
        body.resize(40_000, b'f');
        let start = Instant::now();
        let r = c.try_put(0, 0, 60, &body, Duration::from_secs(10)).unwrap();
        match (r.word(), r.id()) {
            ("INSERTED", Some(id)) => acked.push((id, body)),
            ("INTERNAL_ERROR", _) => {
                first_refusal = Some(start.elapsed());
                break;
            }
            _ => panic!("{name}: put answered {:?}", r.line),
        }
    }
    let refused_in = first_refusal.unwrap_or_else(|| panic!("{name}: 500 puts of 40 KB fit"));
    // While full: puts refused; reads, as each mode can.
    let known = acked[0].0;
    let mut reader = None;
    let mut seen: Vec<String> = Vec::new();
    let full_since = Instant::now();
    while full_since.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(200));
        let r = c.try_put(0, 0, 60, b"while full", Duration::from_secs(10));
        let put = match &r {
            Ok(r) => r.word().to_string(),
            Err(e) => format!("{:?}", e.kind()),
        };
        assert_ne!(
            put, "INSERTED",
            "{name}: a put was acknowledged while Redis cannot persist"
        );
        if r.is_err() {
            c = Client::connect(srv.addr, "producer");
        }
        for line in [
            format!("peek {known}"),
            format!("stats-job {known}"),
            "stats".into(),
        ] {
            let (out, took) = ask(&mut reader, srv.addr, &line, Duration::from_secs(5));
            seen.push(format!("{line}: {out} ({} ms)", took.as_millis()));
        }
        seen.push(format!("put: {put}"));
    }
    let reads_ok = seen
        .iter()
        .filter(|s| !s.starts_with("put") && (s.contains(": FOUND") || s.contains(": OK")))
        .count();
    let reads = seen.iter().filter(|s| !s.starts_with("put")).count();
    if !leader {
        assert_eq!(
            reads_ok,
            reads,
            "{name}: reads while full: {seen:?}\n{}",
            log.tail()
        );
    }
    // Room again: service resumes by itself.
    fs.resize("64m");
    let grown = Instant::now();
    let resumed = loop {
        if let Ok(mut p) = Client::try_connect(srv.addr, "after")
            && let Ok(r) = p.try_put(0, 0, 60, b"after the disk grew", Duration::from_secs(5))
            && r.word() == "INSERTED"
        {
            break grown.elapsed();
        }
        assert!(
            grown.elapsed() < WITHIN,
            "{name}: no put accepted after the disk grew\n{}",
            log.tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut a = Client::connect(srv.addr, "auditor");
    let lost: Vec<u64> = acked
        .iter()
        .filter(|(id, body)| {
            let r = a.cmd(&format!("peek {id}"));
            r.word() != "FOUND" || r.body.as_ref() != Some(body)
        })
        .map(|(id, _)| *id)
        .collect();
    println!(
        "Redis AOF on a full disk ({name}): {} puts acknowledged, then a put answered \
         INTERNAL_ERROR after {} ms; while full, {reads_ok} of {reads} reads served (last: \
         {:?}); puts accepted again {} ms after the disk grew; acknowledged puts lost: {}",
        acked.len(),
        refused_in.as_millis(),
        &seen[seen.len().saturating_sub(4)..],
        resumed.as_millis(),
        lost.len()
    );
    assert!(lost.is_empty(), "{name}: acknowledged puts lost: {lost:?}");
}

/// One redstalk of `kind` on a standalone Redis whose AOF is on a small tmpfs.
fn standalone(kind: ServerKind) {
    let _serial = serial();
    let Some(fs) = tmpfs() else { return };
    let args = aof_on(&fs);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(redis) = private_redis(&args, "AOF tests") else {
        return;
    };
    let (srv, log) = support::redstalk_on_as(kind, &redis, "aof", &[]);
    let name = format!("{} mode", kind.redis_mode().unwrap());
    full_disk(&name, &fs, &srv, &log, kind == ServerKind::Leader);
}

#[test]
fn shared_mode_on_a_redis_that_cannot_write_its_aof() {
    standalone(ServerKind::Redis);
}

#[test]
fn leader_mode_on_a_redis_that_cannot_write_its_aof() {
    standalone(ServerKind::Leader);
}

#[test]
fn sentinel_primary_that_cannot_write_its_aof() {
    let _serial = serial();
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let Some(fs) = tmpfs() else { return };
        let args = aof_on(&fs);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let Some(set) = Sentinels::start_with(&args) else {
            return;
        };
        let mut extra: Vec<String> = Vec::new();
        if kind == ServerKind::Leader {
            extra.extend(["--redis-lease".into(), TEST_LEASE_MS.into()]);
        }
        let mut srv = ServerProc::start_on_redis_as(kind, &set.url(), "aof", &extra)
            .unwrap_or_else(|e| panic!("start redstalk on the sentinels: {e}"));
        let log = srv.capture_stderr();
        let name = format!("Sentinel, {} mode", kind.redis_mode().unwrap());
        full_disk(&name, &fs, &srv, &log, kind == ServerKind::Leader);
        drop(srv);
        drop(set);
    }
}
