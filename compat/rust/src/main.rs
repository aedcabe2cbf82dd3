//! A producer/worker session with beanstalkc (crates.io), used the way its README shows:
//! a blocking `Beanstalkc` connection per role and `Job` handles from reserve and peek.
//!
//! Run against any beanstalk server: BEANSTALK_ADDR=host:port redstalk-compat-rust
//! Exits non-zero on the first behaviour that differs from beanstalkd's.

use std::collections::HashMap;
use std::fmt::Debug;
use std::process::ExitCode;
use std::thread;
use std::time::{Duration, Instant};

use beanstalkc::{Beanstalkc, BeanstalkcError, BeanstalkcResult};

type Check<T = ()> = Result<T, String>;

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn addr(var: &str) -> (String, u16) {
    let addr = std::env::var(var).unwrap_or_else(|_| "127.0.0.1:11300".into());
    let (host, port) = addr.rsplit_once(':').expect("BEANSTALK_ADDR is host:port");
    (host.to_string(), port.parse().expect("BEANSTALK_ADDR port"))
}

fn connect() -> Check<Beanstalkc> {
    connect_to("BEANSTALK_ADDR")
}

fn connect_to(var: &str) -> Check<Beanstalkc> {
    let (host, port) = addr(var);
    Beanstalkc::new()
        .host(&host)
        .port(port)
        .connection_timeout(Some(secs(5)))
        .connect()
        .map_err(|e| format!("connect to {host}:{port}: {e}"))
}

/// The command succeeded.
fn ok<T>(result: BeanstalkcResult<T>, what: &str) -> Check<T> {
    result.map_err(|e| format!("{what}: {e}"))
}

/// The command failed with this status, as beanstalkc names it (`NotFound`, `TimedOut`…).
fn fails<T: Debug>(result: BeanstalkcResult<T>, status: &str, what: &str) -> Check {
    match result {
        Err(BeanstalkcError::CommandFailed(got)) if got == status => Ok(()),
        other => Err(format!("{what}: expected {status}, got {other:?}")),
    }
}

fn same<T: PartialEq + Debug>(got: T, want: T, what: &str) -> Check {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, expected {want:?}"))
    }
}

/// The listed keys of a parsed stats mapping have these values.
fn stats_are(stats: &HashMap<String, String>, want: &[(&str, &str)], what: &str) -> Check {
    for (key, value) in want {
        if stats.get(*key).map(String::as_str) != Some(*value) {
            return Err(format!(
                "{what}: {key} is {:?}, expected {value:?} in {stats:?}",
                stats.get(*key)
            ));
        }
    }
    Ok(())
}

/// A loaded machine delays replies (and this process) by seconds: only a wrong answer
/// may fail the scenario. Something early is wrong; late is only slow, by up to this.
const LATE: f64 = 5.0;
/// A reserve that must find a job already there waits this long at most (it is
/// answered at once; the bound only ends a wrong answer).
const READY: u64 = 10;

fn waited(started: Instant, lo: f64, hi: f64, what: &str) -> Check {
    let waited = started.elapsed().as_secs_f64();
    if (lo..hi + LATE).contains(&waited) {
        Ok(())
    } else {
        Err(format!(
            "{what}: waited {waited:.3} s, expected {lo}..{hi} s (+{LATE} s on a loaded machine)"
        ))
    }
}

fn sorted(mut list: Vec<String>) -> Vec<String> {
    list.sort();
    list
}

fn scenario() -> Check {
    let mut producer = connect()?;
    let mut worker = connect()?;
    let mut admin = connect()?;

    // use / watch / ignore and the tube lists
    same(ok(producer.use_tube("emails"), "use")?, "emails".into(), "use")?;
    same(ok(producer.using(), "list-tube-used")?, "emails".into(), "list-tube-used")?;
    same(ok(admin.using(), "list-tube-used")?, "default".into(), "list-tube-used of a new connection")?;
    same(ok(worker.watch("emails"), "watch")?, 2, "watch")?;
    same(ok(worker.ignore("default"), "ignore")?, 1, "ignore")?;
    same(ok(worker.watching(), "list-tubes-watched")?, vec!["emails".to_string()], "list-tubes-watched")?;
    fails(worker.ignore("emails"), "NotIgnored", "ignore of the last watched tube")?;
    let tubes = sorted(ok(admin.tubes(), "list-tubes")?);
    same(tubes, vec!["default".into(), "emails".into()], "list-tubes")?;

    // put with priorities; the more urgent job (lower number) is reserved first, and a
    // binary body with CR, LF, NUL and bytes that are not UTF-8 comes back byte for byte
    let binary: &[u8] = b"\x00b\r\n\r\x00\n\xff\xfe\r\n";
    let hello = ok(producer.put(b"hello", 10, secs(0), secs(30)), "put")?;
    let urgent = ok(producer.put(binary, 1, secs(0), secs(30)), "put binary")?;
    same(urgent, hello + 1, "job ids")?;
    {
        let job = ok(producer.peek_ready(), "peek-ready")?;
        same((job.id(), job.body()), (urgent, binary), "peek-ready")?;
    }
    let tube = ok(admin.stats_tube("emails"), "stats-tube")?;
    stats_are(
        &tube,
        &[
            ("name", "emails"),
            ("current-jobs-urgent", "2"),
            ("current-jobs-ready", "2"),
            ("current-jobs-reserved", "0"),
            ("current-jobs-delayed", "0"),
            ("current-jobs-buried", "0"),
            ("total-jobs", "2"),
            ("current-using", "1"),
            ("current-watching", "1"),
            ("current-waiting", "0"),
            ("cmd-delete", "0"),
            ("cmd-pause-tube", "0"),
            ("pause", "0"),
            ("pause-time-left", "0"),
        ],
        "stats-tube emails after two puts",
    )?;
    {
        let mut job = ok(worker.reserve(), "reserve")?;
        same((job.id(), job.body()), (urgent, binary), "reserve")?;
        let stats = ok(job.stats(), "stats-job")?;
        let id = urgent.to_string();
        stats_are(
            &stats,
            &[
                ("id", id.as_str()),
                ("tube", "emails"),
                ("state", "reserved"),
                ("pri", "1"),
                ("delay", "0"),
                ("ttr", "30"),
                ("file", "0"),
                ("reserves", "1"),
                ("timeouts", "0"),
                ("releases", "0"),
                ("buries", "0"),
                ("kicks", "0"),
            ],
            "stats-job of a reserved job",
        )?;
        let left: u64 = stats["time-left"].parse().map_err(|e| format!("time-left: {e}"))?;
        if !(25..=30).contains(&left) {
            return Err(format!("stats-job time-left {left}"));
        }
        ok(job.delete(), "delete")?;
    }

    // reserve-with-timeout and touch: only the holder may touch
    {
        let mut job = ok(worker.reserve_with_timeout(secs(READY)), "reserve-with-timeout")?;
        same((job.id(), job.body()), (hello, &b"hello"[..]), "reserve-with-timeout")?;
        ok(job.touch(), "touch")?;
        fails(admin.touch(hello), "NotFound", "touch by another connection")?;

        // release with a delay: delayed, then reservable again after about a second
        ok(job.release(20, secs(1)), "release with delay")?;
    }
    let started = Instant::now();
    stats_are(
        &ok(admin.stats_tube("emails"), "stats-tube")?,
        &[("current-jobs-delayed", "1"), ("current-jobs-ready", "0"), ("current-jobs-reserved", "0")],
        "stats-tube after release with delay",
    )?;
    same(ok(producer.peek_delayed(), "peek-delayed")?.id(), hello, "peek-delayed")?;
    stats_are(
        &ok(admin.stats_job(hello), "stats-job")?,
        &[("state", "delayed"), ("pri", "20"), ("delay", "1"), ("releases", "1"), ("reserves", "1")],
        "stats-job of a released job",
    )?;
    {
        let mut job = ok(worker.reserve_with_timeout(secs(READY)), "reserve after the release delay")?;
        waited(started, 0.9, 1.5, "release with delay 1")?;
        same(job.id(), hello, "reserve after the release delay")?;

        // bury, peek-buried, kick, kick-job
        ok(job.bury(7), "bury")?;
    }
    {
        let job = ok(producer.peek_buried(), "peek-buried")?;
        same((job.id(), job.body()), (hello, &b"hello"[..]), "peek-buried")?;
    }
    stats_are(
        &ok(admin.stats_job(hello), "stats-job")?,
        &[("state", "buried"), ("pri", "7"), ("buries", "1")],
        "stats-job of a buried job",
    )?;
    stats_are(
        &ok(admin.stats_tube("emails"), "stats-tube")?,
        &[("current-jobs-buried", "1")],
        "stats-tube with a buried job",
    )?;
    fails(producer.peek_ready(), "NotFound", "peek-ready with only a buried job")?;
    same(ok(producer.kick(10), "kick")?, 1, "kick of one buried job")?;
    same(ok(producer.peek_ready(), "peek-ready")?.id(), hello, "peek-ready after kick")?;
    {
        let mut job = ok(worker.reserve(), "reserve")?;
        same(job.id(), hello, "reserve of the kicked job")?;
        ok(job.bury(7), "bury")?;
    }
    ok(ok(producer.peek_buried(), "peek-buried")?.kick(), "kick-job of the peeked job")?;
    stats_are(
        &ok(admin.stats_job(hello), "stats-job")?,
        &[("state", "ready"), ("kicks", "2"), ("buries", "2")],
        "stats-job after kick-job",
    )?;
    fails(producer.kick_job(hello), "NotFound", "kick-job of a ready job")?;
    let later = ok(producer.put(b"later", 0, secs(60), secs(30)), "put with delay 60")?;
    fails(producer.peek_buried(), "NotFound", "peek-buried with none buried")?;
    same(ok(producer.kick(10), "kick")?, 1, "kick of one delayed job")?;
    stats_are(
        &ok(admin.stats_job(later), "stats-job")?,
        &[("state", "ready"), ("kicks", "1"), ("delay", "60")],
        "stats-job of a kicked delayed job",
    )?;
    {
        let job = ok(admin.peek(hello), "peek")?;
        same((job.id(), job.body()), (hello, &b"hello"[..]), "peek by id")?;
    }

    // delete: any connection may delete a ready job; then nothing is left
    ok(admin.delete(later), "delete of a ready job")?;
    {
        let mut job = ok(worker.reserve(), "reserve")?;
        same(job.id(), hello, "reserve of the kicked job")?;
        ok(job.delete(), "delete")?;
    }
    fails(worker.reserve_with_timeout(secs(0)), "TimedOut", "reserve-with-timeout 0 on an empty tube")?;
    fails(admin.peek(hello), "NotFound", "peek of a deleted job")?;
    fails(worker.delete(hello), "NotFound", "delete of a deleted job")?;

    // a worker blocked in reserve gets the job put afterwards
    let blocked = thread::spawn(|| -> Check<(u64, Vec<u8>)> {
        let mut worker = connect()?;
        ok(worker.watch("emails"), "watch")?;
        let mut job = ok(worker.reserve(), "blocked reserve")?;
        let taken = (job.id(), job.body().to_vec());
        ok(job.delete(), "delete")?;
        Ok(taken)
    });
    thread::sleep(Duration::from_millis(200));
    let wake = ok(producer.put(b"wake up", 100, secs(0), secs(30)), "put")?;
    let taken = blocked.join().map_err(|_| "blocked worker panicked".to_string())??;
    same(taken, (wake, b"wake up".to_vec()), "blocked reserve")?;

    // put with a delay of one second
    let started = Instant::now();
    let delayed = ok(producer.put(b"in a second", 5, secs(1), secs(30)), "put with delay 1")?;
    same(ok(producer.peek_delayed(), "peek-delayed")?.id(), delayed, "peek-delayed of a delayed put")?;
    stats_are(
        &ok(admin.stats_job(delayed), "stats-job")?,
        &[("state", "delayed"), ("delay", "1"), ("pri", "5")],
        "stats-job of a delayed put",
    )?;
    {
        let mut job = ok(worker.reserve_with_timeout(secs(READY)), "reserve of the delayed put")?;
        waited(started, 0.9, 1.5, "put with delay 1")?;
        same(job.id(), delayed, "reserve of the delayed put")?;
        ok(job.delete(), "delete")?;
    }

    // TTR: a one-second job is in its deadline margin at once (DEADLINE_SOON), and
    // returns to ready after its TTR, for another worker to take
    let short = ok(producer.put(b"hurry", 0, secs(0), secs(1)), "put with ttr 1")?;
    let started = Instant::now();
    same(ok(worker.reserve(), "reserve")?.id(), short, "reserve of the ttr-1 job")?;
    let second = thread::spawn(move || -> Check<(u64, f64)> {
        let mut second = connect()?;
        ok(second.watch("emails"), "watch")?;
        let mut job = ok(second.reserve_with_timeout(secs(READY)), "reserve of the timed-out job")?;
        let at = started.elapsed().as_secs_f64();
        let id = job.id();
        stats_are(
            &ok(job.stats(), "stats-job")?,
            &[("state", "reserved"), ("timeouts", "1"), ("reserves", "2"), ("ttr", "1")],
            "stats-job after a timeout",
        )?;
        ok(job.delete(), "delete")?;
        Ok((id, at))
    });
    fails(worker.reserve_with_timeout(secs(2)), "DeadlineSoon", "reserve while holding a ttr-1 job")?;
    if started.elapsed().as_secs_f64() > 0.5 + LATE {
        return Err("DEADLINE_SOON came late".into());
    }
    // The slow worker comes back after its TTR: its touch is refused. (beanstalkd 1.12
    // can miss the TTR tick of an idle connection until that connection sends a
    // command, so the worker sends one before the touch, as in the protocol cases.)
    thread::sleep(Duration::from_millis(1500));
    ok(worker.watching(), "list-tubes-watched")?;
    fails(worker.touch(short), "NotFound", "touch of a job whose TTR expired")?;
    let (id, at) = second.join().map_err(|_| "second worker panicked".to_string())??;
    same(id, short, "reserve of the timed-out job")?;
    if !(0.9..1.5 + LATE).contains(&at) {
        return Err(format!("ttr 1 expiry: the job came back after {at:.3} s, expected 0.9..1.5 s"));
    }

    // pause-tube: no reserve from the tube until the pause ends
    ok(admin.pause_tube("emails", secs(1)), "pause-tube")?;
    let started = Instant::now();
    let paused = ok(producer.put(b"after the pause", 0, secs(0), secs(30)), "put")?;
    let tube = ok(admin.stats_tube("emails"), "stats-tube")?;
    stats_are(
        &tube,
        &[("pause", "1"), ("cmd-pause-tube", "1"), ("current-jobs-ready", "1")],
        "stats-tube of a paused tube",
    )?;
    if !["0", "1"].contains(&tube["pause-time-left"].as_str()) {
        return Err(format!("pause-time-left {}", tube["pause-time-left"]));
    }
    {
        let mut job = ok(worker.reserve_with_timeout(secs(READY)), "reserve after the pause")?;
        waited(started, 0.9, 1.5, "pause-tube 1")?;
        same(job.id(), paused, "reserve after the pause")?;
        ok(job.delete(), "delete")?;
    }
    fails(admin.pause_tube("no-such-tube", secs(1)), "NotFound", "pause-tube of a missing tube")?;

    // the largest body the server takes (65535 bytes, every byte value), and one more
    let big: Vec<u8> = (0..65535u32).map(|i| (i * 7) as u8).collect();
    let big_id = ok(producer.put(&big, 0, secs(0), secs(30)), "put of 65535 bytes")?;
    {
        let mut job = ok(worker.reserve_with_timeout(secs(READY)), "reserve of 65535 bytes")?;
        same(job.id(), big_id, "reserve of 65535 bytes")?;
        if job.body() != &big[..] {
            return Err(format!("65535-byte body came back as {} different bytes", job.body().len()));
        }
        ok(job.delete(), "delete")?;
    }
    fails(producer.put(&vec![b'\n'; 65536], 0, secs(0), secs(30)), "JobTooBig", "a 65536-byte put")?;
    let after_big = ok(producer.put(b"still in sync", 0, secs(0), secs(30)), "put after JOB_TOO_BIG")?;
    same(after_big, big_id + 1, "the put after JOB_TOO_BIG takes the next id")?;
    {
        let mut job = ok(worker.reserve_with_timeout(secs(READY)), "reserve after JOB_TOO_BIG")?;
        same((job.id(), job.body()), (after_big, &b"still in sync"[..]), "reserve after JOB_TOO_BIG")?;
        ok(job.delete(), "delete")?;
    }

    // a worker loop on its own thread: done jobs are deleted, failed ones buried, and
    // one retried after a one-second release; it stops when the tube stays empty
    same(ok(producer.use_tube("thumbnails"), "use")?, "thumbnails".into(), "use")?;
    for body in [&b"ok"[..], b"retry", b"broken", b"ok"] {
        ok(producer.put_default(body), "put_default")?;
    }
    let started = Instant::now();
    let looped = thread::spawn(|| -> Check<Vec<String>> {
        let mut conn = connect()?;
        ok(conn.watch("thumbnails"), "watch")?;
        ok(conn.ignore("default"), "ignore")?;
        let mut log = Vec::new();
        let mut retried = false;
        loop {
            let mut job = match conn.reserve_with_timeout(secs(5)) {
                Ok(job) => job,
                Err(BeanstalkcError::CommandFailed(status)) if status == "TimedOut" => break,
                Err(e) => return Err(format!("worker loop reserve: {e}")),
            };
            let body = String::from_utf8_lossy(job.body()).into_owned();
            log.push(body.clone());
            match body.as_str() {
                "retry" if !retried => {
                    retried = true;
                    ok(job.release(10, secs(1)), "release")?;
                }
                "broken" => ok(job.bury_default(), "bury")?,
                _ => ok(job.delete(), "delete")?,
            }
        }
        Ok(log)
    });
    let log = looped.join().map_err(|_| "worker loop panicked".to_string())??;
    same(log.iter().map(String::as_str).collect::<Vec<_>>(), vec!["ok", "retry", "broken", "ok", "retry"], "worker loop order")?;
    if started.elapsed() < Duration::from_millis(2900) {
        return Err("worker loop ended before its released job came back and it timed out".into());
    }
    stats_are(
        &ok(admin.stats_tube("thumbnails"), "stats-tube")?,
        &[
            ("current-jobs-buried", "1"),
            ("current-jobs-ready", "0"),
            ("current-jobs-urgent", "0"),
            ("total-jobs", "4"),
            ("cmd-delete", "3"),
            ("current-using", "1"),
            ("current-watching", "0"),
        ],
        "stats-tube thumbnails after the worker",
    )?;
    {
        let mut job = ok(producer.peek_buried(), "peek-buried")?;
        same(job.body(), &b"broken"[..], "peek-buried in thumbnails")?;
        // bury_default keeps the job's priority (the client reads it with stats-job)
        stats_are(
            &ok(job.stats(), "stats-job")?,
            &[("state", "buried"), ("pri", "2147483648"), ("ttr", "120"), ("buries", "1")],
            "stats-job of the buried job",
        )?;
    }

    // server stats, parsed: the counters of this whole session
    let mut stats = HashMap::new();
    for _ in 0..20 {
        stats = ok(admin.stats(), "stats")?;
        if stats.get("current-connections").map(String::as_str) == Some("3") {
            break;
        }
        thread::sleep(Duration::from_millis(50));
    }
    stats_are(
        &stats,
        &[
            ("current-connections", "3"),
            ("total-connections", "6"),
            ("current-jobs-buried", "1"),
            ("current-jobs-ready", "0"),
            ("current-jobs-reserved", "0"),
            ("current-jobs-delayed", "0"),
            ("current-jobs-urgent", "0"),
            ("total-jobs", "13"),
            ("cmd-put", "14"),
            ("cmd-peek", "2"),
            ("cmd-peek-ready", "3"),
            ("cmd-peek-delayed", "2"),
            ("cmd-peek-buried", "4"),
            ("cmd-reserve", "5"),
            ("cmd-reserve-with-timeout", "15"),
            ("cmd-delete", "13"),
            ("cmd-release", "2"),
            ("cmd-use", "2"),
            ("cmd-watch", "4"),
            ("cmd-ignore", "3"),
            ("cmd-bury", "3"),
            ("cmd-kick", "2"),
            ("cmd-touch", "3"),
            ("cmd-stats-job", "9"),
            ("cmd-stats-tube", "5"),
            ("cmd-list-tubes", "1"),
            ("cmd-list-tube-used", "2"),
            ("cmd-list-tubes-watched", "2"),
            ("cmd-pause-tube", "2"),
            ("job-timeouts", "1"),
            ("current-tubes", "3"),
            ("current-producers", "1"),
            ("current-workers", "1"),
            ("current-waiting", "0"),
            ("max-job-size", "65535"),
            ("draining", "false"),
        ],
        "stats",
    )?;
    let tubes = sorted(ok(admin.tubes(), "list-tubes")?);
    same(tubes, vec!["default".into(), "emails".into(), "thumbnails".into()], "list-tubes")?;

    // a second server: with the Redis engine it serves the same queue (a job put on one
    // is reserved on the other); beanstalkd and the memory engine are independent
    if std::env::var_os("BEANSTALK_ADDR2").is_some() {
        let mut other = connect_to("BEANSTALK_ADDR2")?;
        ok(producer.use_tube("shared"), "use")?;
        let shared = ok(producer.put(b"across servers", 0, secs(0), secs(30)), "put")?;
        same(ok(other.watch("shared"), "watch on the second server")?, 2, "watch on the second server")?;
        if matches!(std::env::var("BEANSTALK_SERVER").as_deref(), Ok("redis" | "leader")) {
            let mut job = ok(other.reserve_with_timeout(secs(READY)), "reserve on the second server")?;
            same((job.id(), job.body()), (shared, &b"across servers"[..]), "reserve on the second server")?;
            ok(job.delete(), "delete on the second server")?;
            fails(admin.peek(shared), "NotFound", "peek of a job deleted on the second server")?;
        } else {
            fails(other.reserve_with_timeout(secs(0)), "TimedOut", "reserve on an independent server")?;
            ok(admin.delete(shared), "delete")?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match scenario() {
        Ok(()) => {
            println!("beanstalkc scenario: ok");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("beanstalkc scenario FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
