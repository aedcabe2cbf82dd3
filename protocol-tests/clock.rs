//! Wall-clock steps, against real processes: each server runs under libfaketime
//! (`LD_PRELOAD`, Debian's `libfaketime`) with its clock offset read from a file the
//! test rewrites, so the process's wall clock (`CLOCK_REALTIME`) jumps an hour forward
//! or back while it runs, as an NTP step does; its monotonic clock is left alone
//! (`FAKETIME_DONT_FAKE_MONOTONIC=1`). A time namespace would not do: it offsets only
//! the monotonic and boot clocks. Redis is never faked (libfaketime cannot start
//! redis-server: its allocator calls `clock_gettime` before libfaketime is ready).
//!
//! What the tests prove (figures printed, `--nocapture`):
//! - `a_wall_clock_step_moves_no_delay_or_ttr` — a job delayed 20 s and a job reserved
//!   with TTR 20 s, then the wall clock stepped +1 h and -1 h: beanstalkd (measured)
//!   makes both due at once at the +1 h step (0 s left; ready at its next tick: its
//!   timers read the wall clock, so a worker's job is handed to another mid-work);
//!   redstalk on every engine (memory, `-b`, shared, leader) keeps both where they
//!   were, their time-left counting down by the seconds that really passed: its timers
//!   run on the monotonic clock (`src/time.rs`), the Redis modes' on Redis' `TIME`.
//! - `wall_clock_steps_on_a_leader_and_a_standby` — leader mode under a recorded
//!   workload (through the standby): the leader's clock stepped +1 h then -1 h, then
//!   the standby's: no failover (the lease is counted on each process's monotonic
//!   clock), and the history checker finds nothing lost, undone or held twice.
//! - `a_wall_clock_step_on_one_of_two_shared_instances` — shared mode: one instance's
//!   clock stepped ±1 h under a workload: the other keeps it alive (heartbeats are
//!   timed by Redis), a delay and a TTR set through the stepped instance run out when
//!   they should, as the other instance sees them; the history is sound.
//!
//! Skipped with a notice without libfaketime, unless `REDSTALK_REQUIRE_ORACLE=1`.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

mod clock_schedules;

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::client::Client;
use support::redis::{RedisServer, private_redis};
use support::workload::{Connect, Side, Workload, WorkloadConfig, judge};
use support::{
    Log, beanstalkd_path, free_port, fresh_dir, oracle_required, redis_args, redstalk_path, serial,
    spawn_logged, wait_child_listening,
};

const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
const WITHIN: Duration = Duration::from_secs(30);

/// A wall-clock offset file for libfaketime, and the environment that reads it.
struct FakeClock {
    file: PathBuf,
}

impl FakeClock {
    /// `None` (after a notice) without libfaketime.
    fn new() -> Option<FakeClock> {
        if !std::path::Path::new(LIBFAKETIME).exists() {
            assert!(
                !oracle_required(),
                "libfaketime is required (REDSTALK_REQUIRE_ORACLE=1) but not installed"
            );
            eprintln!("!!! libfaketime is not installed: the clock tests are SKIPPED.");
            return None;
        }
        let file = fresh_dir().join("faketime");
        let c = FakeClock { file };
        c.set("+0");
        Some(c)
    }

    /// Offset the wall clock of every process on this file by `offset` (`+1h`, `-1h`,
    /// `+0`) from the real one, from their next reading of it on.
    fn set(&self, offset: &str) {
        std::fs::write(&self.file, format!("{offset}\n")).expect("write the faketime file");
    }

    fn apply(&self, cmd: &mut Command) {
        cmd.env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME_TIMESTAMP_FILE", &self.file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
}

impl Drop for FakeClock {
    fn drop(&mut self) {
        if let Some(dir) = self.file.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A server under a fake clock; killed when dropped.
struct Proc {
    child: Child,
    log: Log,
    addr: SocketAddr,
}

impl Proc {
    fn start(clock: &FakeClock, program: &std::path::Path, args: &[String]) -> Proc {
        let port = free_port();
        let mut cmd = Command::new(program);
        cmd.args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args(args);
        clock.apply(&mut cmd);
        let (mut child, log) = spawn_logged(&mut cmd).expect("spawn a server");
        wait_child_listening(&mut child, port, WITHIN, &log);
        Proc {
            child,
            log,
            addr: ([127, 0, 0, 1], port).into(),
        }
    }

    fn redstalk(clock: &FakeClock, args: &[&str]) -> Proc {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Proc::start(clock, &redstalk_path(), &args)
    }

    fn client(&self, name: &str) -> Client {
        Client::connect(self.addr, name)
    }

    fn connect(&self) -> Connect {
        let addr = self.addr;
        Arc::new(move || TcpStream::connect_timeout(&addr, Duration::from_secs(2)))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `state` and `time-left` of job `id`.
fn job(c: &mut Client, id: u64) -> (String, u64) {
    let d = c.dict(&format!("stats-job {id}"));
    let get = |k: &str| {
        d.iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    (get("state"), get("time-left").parse().unwrap_or(0))
}

/// Delay a job 20 s, reserve another with TTR 20 s, then step the clock +1 h and -1 h:
/// what the server then says of both, after each step.
fn steps(name: &str, clock: &FakeClock, p: &Proc) -> Vec<String> {
    let mut c = p.client(name);
    let delayed = c.put(0, 20, 30, b"delayed");
    let held = c.put(0, 0, 20, b"held");
    assert_eq!(c.reserve().0, held, "{name}");
    let mut seen = Vec::new();
    let mut look = |when: &str, c: &mut Client| {
        let (ds, dl) = job(c, delayed);
        let (hs, hl) = job(c, held);
        seen.push(format!(
            "{when}: delayed job {ds} ({dl} s left), reserved job {hs} ({hl} s left)"
        ));
        (ds, dl, hs, hl)
    };
    let before = look("before", &mut c);
    let mut auditor = p.client("auditor");
    clock.set("+1h");
    std::thread::sleep(Duration::from_millis(1500));
    let forward = look("+1 h", &mut auditor);
    clock.set("-1h");
    std::thread::sleep(Duration::from_millis(1500));
    let back = look("-1 h", &mut auditor);
    clock.set("+0");
    if name != "beanstalkd" {
        for (when, (ds, dl, hs, hl)) in [("+1 h", &forward), ("-1 h", &back)] {
            assert_eq!(
                (ds.as_str(), hs.as_str()),
                ("delayed", "reserved"),
                "{name} after the {when} step\n{}",
                p.log.tail()
            );
            assert!(
                (10..=19).contains(dl) && (10..=19).contains(hl) && *dl <= before.1,
                "{name} after the {when} step: time left {dl} s and {hl} s"
            );
        }
    }
    seen
}

#[test]
fn a_wall_clock_step_moves_no_delay_or_ttr() {
    let _serial = serial();
    let Some(clock) = FakeClock::new() else {
        return;
    };
    let mut table = Vec::new();
    match beanstalkd_path() {
        Some(b) => {
            let p = Proc::start(&clock, &b, &[]);
            table.push(("beanstalkd", steps("beanstalkd", &clock, &p)));
        }
        None => assert!(!oracle_required(), "beanstalkd is required"),
    }
    let p = Proc::redstalk(&clock, &[]);
    table.push(("memory", steps("memory", &clock, &p)));
    let dir = fresh_dir();
    let p = Proc::redstalk(&clock, &["-b", &dir.display().to_string()]);
    table.push(("-b", steps("-b", &clock, &p)));
    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
    if let Some(redis) = private_redis(&[], "clock tests") {
        for mode in ["shared", "leader"] {
            let url = redis.url();
            let args = redis_args(&url, mode, mode);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let p = Proc::redstalk(&clock, &args);
            support::wait_served(p.addr, WITHIN, &p.log);
            table.push((mode, steps(mode, &clock, &p)));
        }
    }
    for (name, seen) in &table {
        for line in seen {
            println!("wall clock step, {name}: {line}");
        }
    }
    let beanstalkd = table.iter().find(|(n, _)| *n == "beanstalkd");
    if let Some((_, seen)) = beanstalkd {
        // What the reference does, kept true: its timers read the wall clock, so both
        // jobs are due at once (made ready at its next tick).
        assert_eq!(
            seen[1].matches("(0 s left)").count(),
            2,
            "beanstalkd after +1 h: {}",
            seen[1]
        );
    }
}

/// Leader and standby on a private Redis, each under a clock of its own.
#[test]
fn wall_clock_steps_on_a_leader_and_a_standby() {
    let _serial = serial();
    let (Some(ca), Some(cb)) = (FakeClock::new(), FakeClock::new()) else {
        return;
    };
    let Some(redis) = private_redis(&["--appendonly", "yes"], "clock tests") else {
        return;
    };
    let url = redis.url();
    let args = redis_args(&url, "clock", "leader");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let a = Proc::redstalk(&ca, &args);
    support::wait_served(a.addr, WITHIN, &a.log);
    let b = Proc::redstalk(&cb, &args);
    support::wait_served(b.addr, WITHIN, &b.log);
    let logs = || {
        format!(
            "--- leader:\n{}\n--- standby:\n{}",
            a.log.tail(),
            b.log.tail()
        )
    };
    let seed = 0x5eed_c10c;
    let w = Workload::start(
        &[
            Side::new("direct", a.connect(), 2, 2),
            Side::new("relayed", b.connect(), 2, 2),
        ],
        WorkloadConfig::new(seed),
    );
    w.wait_progress(100, WITHIN, logs);
    let leader = lease_holder(&redis);
    let mut figures = Vec::new();
    for (who, clock) in [("leader", &ca), ("standby", &cb)] {
        for step in ["+1h", "-1h", "+0"] {
            clock.set(step);
            let took = w.wait_progress(30, WITHIN, logs);
            std::thread::sleep(Duration::from_millis(1500));
            assert_eq!(
                lease_holder(&redis),
                leader,
                "the lease changed hands after the {who}'s clock stepped {step}\n{}",
                logs()
            );
            figures.push(format!(
                "{who} {step}: progress within {} ms",
                took.as_millis()
            ));
        }
    }
    let history = w.stop();
    history.dump("wall clock steps on a leader and a standby");
    let verdict = judge(&history, &b.connect());
    println!("wall clock steps, leader mode: {}", figures.join("; "));
    println!("wall clock steps, leader mode: {}", verdict.summary());
    verdict.assert_sound(&format!(
        "wall clock steps on a leader and a standby\n{}",
        logs()
    ));
}

/// The lease's token (its epoch changes with every new leadership).
fn lease_holder(redis: &RedisServer) -> String {
    support::lease::lease_token(&mut support::namespace::redis_conn(redis), "clock")
        .unwrap_or_default()
}

/// Two shared instances; the first's clock steps.
#[test]
fn a_wall_clock_step_on_one_of_two_shared_instances() {
    let _serial = serial();
    let (Some(c1), Some(c2)) = (FakeClock::new(), FakeClock::new()) else {
        return;
    };
    let Some(redis) = private_redis(&["--appendonly", "yes"], "clock tests") else {
        return;
    };
    let url = redis.url();
    let args = redis_args(&url, "sc", "shared");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s1 = Proc::redstalk(&c1, &args);
    let s2 = Proc::redstalk(&c2, &args);
    let logs = || {
        format!(
            "--- stepped:\n{}\n--- other:\n{}",
            s1.log.tail(),
            s2.log.tail()
        )
    };
    let w = Workload::start(
        &[
            Side::new("s1", s1.connect(), 2, 2),
            Side::new("s2", s2.connect(), 2, 2),
        ],
        WorkloadConfig::new(0x5eed_005c),
    );
    w.wait_progress(100, WITHIN, logs);
    let mut figures = Vec::new();
    for step in ["+1h", "-1h"] {
        c1.set(step);
        std::thread::sleep(Duration::from_millis(500));
        // A delay and a TTR set through the stepped instance, watched from the other.
        let mut x = s1.client("stepped");
        x.use_tube("timing");
        x.watch_only("timing");
        // Before the puts: the delay and the TTR both run out at least 3 s after it.
        let put_at = Instant::now();
        let delayed = x.put(0, 3, 60, b"delayed 3 s");
        let held = x.put(0, 0, 3, b"held, TTR 3 s");
        assert_eq!(x.reserve().0, held);
        let mut y = s2.client("other");
        let (ds, dl) = job(&mut y, delayed);
        let (hs, hl) = job(&mut y, held);
        assert!(
            ds == "delayed" && hs == "reserved" && (2..=3).contains(&dl) && (2..=3).contains(&hl),
            "after {step}: delayed job {ds} {dl} s left, held job {hs} {hl} s left\n{}",
            logs()
        );
        y.watch_only("timing");
        let mut ready = Vec::new();
        for _ in 0..2 {
            let (id, _) = y
                .reserve_timeout(10)
                .unwrap_or_else(|| panic!("{}", logs()));
            ready.push((id, put_at.elapsed()));
            y.cmd(&format!("delete {id}"));
        }
        for (id, at) in &ready {
            assert!(
                *at >= Duration::from_millis(2950) && *at < Duration::from_secs(10),
                "after {step}: job {id} came to the other instance {at:?} after the put\n{}",
                logs()
            );
        }
        // Past the 10 s a silent instance is given: the stepped one is alive to the
        // other (its heartbeat's expiry is Redis' time, not its own).
        std::thread::sleep(Duration::from_secs(1));
        figures.push(format!(
            "{step}: delayed 3 s and TTR 3 s jobs reached the other instance after {} ms and \
             {} ms",
            ready[0].1.as_millis(),
            ready[1].1.as_millis()
        ));
    }
    c1.set("+0");
    let alive = instances_alive(&redis);
    assert_eq!(alive, 2, "instances alive by the registry\n{}", logs());
    w.wait_progress(30, WITHIN, logs);
    let history = w.stop();
    history.dump("a wall clock step on one of two shared instances");
    let verdict = judge(&history, &s2.connect());
    println!("wall clock step, shared mode: {}", figures.join("; "));
    println!("wall clock step, shared mode: {}", verdict.summary());
    verdict.assert_sound(&format!(
        "a wall clock step on one of two shared instances\n{}",
        logs()
    ));
}

/// Instances whose heartbeat in `{sc}:instances` has not lapsed, by Redis' clock.
fn instances_alive(redis: &RedisServer) -> usize {
    let mut c = support::namespace::redis_conn(redis);
    let (secs, micros): (u64, u64) = ::redis::cmd("TIME").query(&mut c).expect("TIME");
    let live: Vec<String> = ::redis::cmd("ZRANGEBYSCORE")
        .arg("{sc}:instances")
        .arg(secs * 1_000_000 + micros)
        .arg("+inf")
        .query(&mut c)
        .expect("ZRANGEBYSCORE");
    live.len()
}
