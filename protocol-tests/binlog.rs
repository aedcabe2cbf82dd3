//! `-b DIR` (the write-ahead log) against the real binary: crashes, restarts, damaged
//! logs and disk growth. Each test runs redstalk in a fresh directory of its own.
//!
//! What the tests prove:
//! - `kill_9_under_load_loses_nothing` — for `-f 0`, the default (`-f 50`) and `-F`:
//!   `kill -9` in the middle of a put/reserve/delete load, then a restart on the same
//!   directory: every put answered `INSERTED` is deleted (`DELETED` received) or found;
//!   no job answered `DELETED` comes back. (`-f N` and `-F` lose nothing either: a
//!   change is acknowledged once its `write()` returned, and kill -9 of the process
//!   does not lose what the OS holds.)
//! - `restart_brings_every_state_back` — ready, delayed (due at its original time),
//!   reserved (ready again, as beanstalkd), buried (in bury order), a paused tube, the
//!   priorities and the id counter are all back after kill -9.
//! - `damaged_log_keeps_every_record_before_the_damage` — the log cut at random byte
//!   offsets, and with one byte flipped: redstalk starts, says where the damage is, and
//!   serves every job whose record lies before it.
//! - `disk_stays_bounded_under_churn` — a few old jobs stay alive while tens of
//!   thousands are put and deleted: the directory never grows past 2 × live data + one
//!   file (plus one batch), and the old jobs survive a restart.
//! - `stats_shows_the_logs_files_and_records` — `stats`'s `binlog-*` figures follow
//!   the log as beanstalkd's do: records written and migrated, the oldest and current
//!   file numbers, and `-s`.
//! - `stats_job_names_the_file_holding_the_job` — `stats-job`'s `file` is the log
//!   file holding the job, before and after a restart.
//! - `milliseconds_survive_compaction_and_restart` — a delay and a TTR written in
//!   milliseconds (docs/EXTENSIONS.md) are kept to the millisecond when compaction
//!   rewrites their records and after kill -9: the delayed job is due at its original
//!   time, the TTR lapses 1.5 s after the reserve, not 1 s.
//! - `keys_and_windows_survive_compaction_and_kill_9` — keyed jobs (docs/EXTENSIONS.md,
//!   *Keys*) and the dedupe windows of deleted ones are found by key after compaction
//!   rewrote their records and after kill -9, and a put with each key dedupes to its
//!   id; a window that ended before the restart is not brought back.
//!
//! Figures are printed (`--nocapture`).

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use support::client::{Client, MsJobs};
use support::keyed::KeyLedger;
use support::load::{Load, LoadConfig};
use support::{Log, ServerKind, ServerProc, fresh_dir, serial, signal_pid};

const REPLY: Duration = Duration::from_secs(5);

/// redstalk on `dir` with `extra` flags, and its stderr.
fn start(dir: &Path, extra: &[&str]) -> (ServerProc, Log) {
    let mut args = vec!["-b".to_string(), dir.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut srv = ServerProc::start(ServerKind::Memory, &args)
        .expect("start redstalk -b")
        .expect("redstalk is always there");
    let log = srv.capture_stderr();
    (srv, log)
}

fn kill_9(srv: &mut ServerProc) {
    signal_pid(srv.pid(), "KILL");
    assert!(srv.wait_exit(REPLY).is_some(), "redstalk survived kill -9");
}

/// Bytes of the files in `dir` now. A file a compaction deletes between the listing
/// and its `stat` is gone: it counts for nothing.
fn disk_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("binlog."))
        })
        .collect();
    files.sort();
    files
}

#[test]
fn kill_9_under_load_loses_nothing() {
    let _serial = serial();
    for flags in [&["-f", "0"][..], &[][..], &["-F"][..]] {
        let dir = fresh_dir();
        let (mut srv, log) = start(&dir, flags);
        let load = Load::start(
            srv.addr,
            LoadConfig {
                producers: 4,
                workers: 4,
                tube: "crash".into(),
                ttr: 60,
                reply_timeout: REPLY,
            },
        );
        load.wait_until(
            "before the kill",
            Duration::from_secs(30),
            || log.tail(),
            |l| l.acked.len() >= 2_000 && l.deleted.len() >= 500,
        );
        kill_9(&mut srv);
        let ledger = load.stop();
        let started = Instant::now();
        let (srv2, log2) = start(&dir, flags);
        let restart = started.elapsed();
        let mut c = Client::connect(srv2.addr, "audit");
        let audit = ledger.audit(&mut c);
        let resurrected = ledger
            .deleted
            .iter()
            .filter(|(id, _)| c.cmd(&format!("peek {id}")).word() == "FOUND")
            .count();
        println!(
            "-b {flags:?}: {} (restart {} ms), deleted jobs back after restart: {resurrected}",
            audit.summary(),
            restart.as_millis()
        );
        assert!(
            ledger.surprises.is_empty(),
            "unexpected replies: {:?}",
            ledger.surprises
        );
        audit.assert_sound(&format!("kill -9 with -b {flags:?}\n{}", log2.tail()));
        assert_eq!(resurrected, 0, "jobs answered DELETED came back");
        drop(srv2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn restart_brings_every_state_back() {
    let _serial = serial();
    let dir = fresh_dir();
    let (mut srv, _log) = start(&dir, &[]);
    let mut c = Client::connect(srv.addr, "c");
    c.use_tube("t");
    c.watch_only("t");
    let ready = c.put(10, 0, 60, b"ready");
    let urgent = c.put(1, 0, 60, b"urgent");
    let delayed = c.put(5, 8, 60, b"delayed");
    let put_at = Instant::now();
    let buried: Vec<u64> = (0..3).map(|i| c.put(20 + i, 0, 60, b"b")).collect();
    // Buried in the reverse of their ids: kicks must follow bury order.
    for &id in buried.iter().rev() {
        assert_eq!(c.cmd(&format!("reserve-job {id}")).word(), "RESERVED");
        c.expect(&format!("bury {id} 7"), "BURIED");
    }
    let reserved = c.put(30, 0, 60, b"held");
    assert_eq!(c.cmd(&format!("reserve-job {reserved}")).word(), "RESERVED");
    let mut p = Client::connect(srv.addr, "p");
    p.use_tube("paused");
    let in_paused = p.put(0, 0, 60, b"p");
    p.expect("pause-tube paused 600", "PAUSED");
    kill_9(&mut srv);
    let (srv2, log2) = start(&dir, &[]);
    let mut c = Client::connect(srv2.addr, "c2");
    let state = |c: &mut Client, id: u64| c.dict_value(&format!("stats-job {id}"), "state");
    assert_eq!(state(&mut c, ready), "ready");
    assert_eq!(state(&mut c, urgent), "ready");
    assert_eq!(state(&mut c, delayed), "delayed");
    assert_eq!(
        state(&mut c, reserved),
        "ready",
        "reserved jobs come back ready"
    );
    assert_eq!(state(&mut c, in_paused), "ready");
    assert_eq!(c.dict_value(&format!("stats-job {urgent}"), "pri"), "1");
    assert_eq!(
        c.dict_value("stats-tube paused", "pause"),
        "600",
        "{}",
        log2.tail()
    );
    c.use_tube("t");
    c.watch_only("t");
    for &id in buried.iter().rev() {
        c.expect("kick 1", "KICKED 1");
        assert_eq!(state(&mut c, id), "ready", "kicked in bury order");
    }
    let next = c.put(0, 0, 60, b"next");
    assert_eq!(next, in_paused + 1, "the id counter continues");
    c.expect(&format!("delete {next}"), "DELETED");
    assert_eq!(c.reserve().0, urgent, "the most urgent job first");
    // The delayed job is due at its original time (8 s after its put), not 8 s after
    // the restart.
    while state(&mut c, delayed) == "delayed" {
        assert!(put_at.elapsed() < Duration::from_secs(30), "never came due");
        thread::sleep(Duration::from_millis(50));
    }
    let due_after = put_at.elapsed();
    println!(
        "every state back after kill -9; the delayed job (8 s) became ready {} ms after its put",
        due_after.as_millis()
    );
    assert!(due_after >= Duration::from_millis(7_900), "due early");
    drop(srv2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Put `n` jobs one at a time (each acknowledged before the next is sent, so each is
/// its own record in the log, in id order), then kill the server.
fn log_of_puts(dir: &Path, n: u64) {
    let (mut srv, _log) = start(dir, &["-f", "0"]);
    let mut c = Client::connect(srv.addr, "writer");
    for i in 1..=n {
        assert_eq!(c.put(0, 0, 60, format!("job-{i}").as_bytes()), i);
    }
    kill_9(&mut srv);
}

/// Start on `dir` and return (how many of ids 1..=n are there, whether every present
/// id is below every missing one, the server's stderr).
fn survivors(dir: &Path, n: u64) -> (u64, bool, String) {
    let (srv, log) = start(dir, &[]);
    let mut c = Client::connect(srv.addr, "check");
    let present: Vec<bool> = (1..=n)
        .map(|i| {
            let r = c.cmd(&format!("peek {i}"));
            assert!(r.word() == "FOUND" || r.word() == "NOT_FOUND", "{r:?}");
            if r.word() == "FOUND" {
                assert_eq!(r.text(), format!("job-{i}"), "body of {i}");
            }
            r.word() == "FOUND"
        })
        .collect();
    let kept = present.iter().filter(|&&p| p).count() as u64;
    let prefix = present.iter().skip_while(|&&p| p).all(|&p| !p);
    drop(srv);
    // Its stderr is read on a thread that may not have caught up with the process:
    // wait for the pipe's end (a loaded machine left the report unread once).
    (kept, prefix, log.final_tail(Duration::from_secs(30)))
}

#[test]
fn damaged_log_keeps_every_record_before_the_damage() {
    let _serial = serial();
    const JOBS: u64 = 200;
    let source = fresh_dir();
    log_of_puts(&source, JOBS);
    let file = log_files(&source).pop().expect("a log file");
    let whole = std::fs::read(&file).unwrap();
    let name = file.file_name().unwrap().to_owned();
    let mut rng = support::rng::Rng::new(0x5eed_b10c);
    let mut offsets: Vec<usize> = (0..6)
        .map(|_| rng.below(whole.len() as u64) as usize)
        .collect();
    offsets.extend([whole.len() - 1, 20]);
    for cut in offsets {
        let dir = fresh_dir();
        std::fs::write(dir.join(&name), &whole[..cut]).unwrap();
        let (kept, prefix, said) = survivors(&dir, JOBS);
        println!(
            "log cut at byte {cut} of {}: {kept} of {JOBS} jobs kept",
            whole.len()
        );
        assert!(prefix, "cut at {cut}: a job is missing before a kept one");
        assert!(
            said.contains("binlog damaged"),
            "cut at {cut}: no report:\n{said}"
        );
        // Every record wholly before the cut is kept: at most the torn one is lost
        // (plus the counters and tube records batched with it).
        let per_job = (whole.len() - 16) as u64 / JOBS;
        let before = (cut.saturating_sub(16) as u64) / per_job;
        assert!(
            kept + 1 >= before,
            "cut at {cut}: kept {kept}, about {before} were whole"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    // One byte flipped in the middle: every job before it kept, the server starts.
    let flip_at = whole.len() / 2;
    let dir = fresh_dir();
    let mut bad = whole.clone();
    bad[flip_at] ^= 0x20;
    std::fs::write(dir.join(&name), &bad).unwrap();
    let (kept, prefix, said) = survivors(&dir, JOBS);
    println!("byte {flip_at} flipped: {kept} of {JOBS} jobs kept");
    assert!(prefix);
    assert!(said.contains("binlog damaged"), "{said}");
    assert!(kept + 2 >= JOBS / 2, "kept {kept} of the first half");
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&source);
}

#[test]
fn disk_stays_bounded_under_churn() {
    let _serial = serial();
    const FILE: u64 = 64 * 1024;
    const CHURN: usize = 30_000;
    let dir = fresh_dir();
    let (mut srv, log) = start(&dir, &["-s", &FILE.to_string()]);
    let mut c = Client::connect(srv.addr, "old");
    c.use_tube("old");
    let old: Vec<u64> = (0..5).map(|_| c.put(0, 0, 60, &[b'o'; 1000])).collect();
    let body = [b'x'; 200];
    let mut peak = 0;
    let threads: Vec<_> = (0..3)
        .map(|t| {
            let addr = srv.addr;
            thread::spawn(move || {
                let mut c = Client::connect(addr, format!("churn-{t}"));
                c.use_tube("churn");
                c.watch_only("churn");
                for _ in 0..CHURN / 3 {
                    let id = c.put(0, 0, 60, &body);
                    c.expect(&format!("delete {id}"), "DELETED");
                }
            })
        })
        .collect();
    let started = Instant::now();
    while !threads.iter().all(|t| t.is_finished()) {
        peak = peak.max(disk_bytes(&dir));
        thread::sleep(Duration::from_millis(5));
    }
    for t in threads {
        t.join().unwrap();
    }
    peak = peak.max(disk_bytes(&dir));
    let live = 5 * 1100;
    let written = CHURN as u64 * 2 * 300;
    println!(
        "churn of {CHURN} jobs (about {written} bytes of records) beside 5 old ones \
         (about {live} bytes live), -s {FILE}: peak disk {peak} bytes, {} ms",
        started.elapsed().as_millis()
    );
    assert!(
        peak <= 2 * live + 3 * FILE,
        "disk reached {peak} bytes, more than 2 x live + 3 files\n{}",
        log.tail()
    );
    kill_9(&mut srv);
    let (srv2, _log2) = start(&dir, &[]);
    let mut c = Client::connect(srv2.addr, "after");
    for id in old {
        assert_eq!(c.cmd(&format!("peek {id}")).word(), "FOUND", "old job {id}");
    }
    assert_eq!(c.stat_u64("current-jobs-ready"), 5);
    drop(srv2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `binlog-*` figures of `stats`, in one line.
fn binlog_figures(c: &mut Client) -> [u64; 5] {
    [
        "binlog-oldest-index",
        "binlog-current-index",
        "binlog-records-migrated",
        "binlog-records-written",
        "binlog-max-size",
    ]
    .map(|k| c.stat_u64(k))
}

/// `stats` tells what the log is doing, as beanstalkd's `-b` does: records written
/// (a put and a delete one each; compaction's rewrites counted in both written and
/// migrated), the oldest and current file numbers, and `-s`.
#[test]
fn stats_shows_the_logs_files_and_records() {
    let _serial = serial();
    const FILE: u64 = 100_000;
    let dir = fresh_dir();
    let (srv, log) = start(&dir, &["-s", &FILE.to_string()]);
    let mut c = Client::connect(srv.addr, "c");
    let [oldest, current, migrated, written, max] = binlog_figures(&mut c);
    assert_eq!((migrated, written, max), (0, 0, FILE), "{}", log.tail());
    assert!(oldest >= 1 && current >= oldest, "{oldest} {current}");
    let ids: Vec<u64> = (0..3).map(|_| c.put(0, 0, 60, b"abc")).collect();
    c.expect(&format!("delete {}", ids[0]), "DELETED");
    // The same four commands leave beanstalkd 1.12 -b at written 4, migrated 0.
    let [_, _, migrated, written, _] = binlog_figures(&mut c);
    assert_eq!((migrated, written), (0, 4), "{}", log.tail());
    // Churn: files roll at -s, and compaction rewrites the live jobs of old files.
    for round in 0..4 {
        let ids = put_3000(&mut c);
        if round < 3 {
            delete_all(&mut c, &ids);
        }
    }
    let [oldest2, current2, migrated, written, max] = binlog_figures(&mut c);
    println!(
        "-b -s {FILE}: after 4 + 21,000 changes: binlog-oldest-index {oldest2}, \
         binlog-current-index {current2}, binlog-records-migrated {migrated}, \
         binlog-records-written {written}"
    );
    assert_eq!(max, FILE);
    assert!(current2 > current, "no new file: {current} -> {current2}");
    assert!(
        oldest2 > oldest,
        "no file compacted away: {oldest} -> {oldest2}"
    );
    assert!(migrated > 0, "nothing rewritten");
    assert_eq!(written, 4 + 21_000 + migrated, "{}", log.tail());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `stats-job`'s `file` names the log file holding the job, as beanstalkd's `-b` does:
/// the file its record with its body went to, kept across state changes and restarts.
#[test]
fn stats_job_names_the_file_holding_the_job() {
    let _serial = serial();
    let dir = fresh_dir();
    let (mut srv, log) = start(&dir, &[]);
    let mut c = Client::connect(srv.addr, "c");
    let file = |c: &mut Client, id: u64| -> u64 {
        c.dict_value(&format!("stats-job {id}"), "file")
            .parse()
            .unwrap()
    };
    let first = c.stat_u64("binlog-current-index");
    let id = c.put(0, 0, 60, b"kept");
    assert_eq!(file(&mut c, id), first, "{}", log.tail());
    kill_9(&mut srv);
    let (srv2, log2) = start(&dir, &[]);
    let mut c = Client::connect(srv2.addr, "c2");
    let now = c.stat_u64("binlog-current-index");
    assert!(now > first, "a new file at each start: {first} -> {now}");
    // A change of state is a record without the body: the job stays where it lives.
    assert_eq!(c.cmd(&format!("reserve-job {id}")).word(), "RESERVED");
    c.expect(&format!("release {id} 5 0"), "RELEASED");
    assert_eq!(file(&mut c, id), first, "{}", log2.tail());
    let later = c.put(0, 0, 60, b"later");
    assert_eq!(file(&mut c, later), now, "{}", log2.tail());
    println!(
        "stats-job file: {first} for a job written before a restart, {now} for one \
         written after it"
    );
    drop(srv2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Put 3000 jobs of 100 bytes, pipelined; their ids.
fn put_3000(c: &mut Client) -> Vec<u64> {
    let body = [b'x'; 100];
    let mut req = Vec::new();
    for _ in 0..3000 {
        req.extend_from_slice(&support::client::put_request(0, 0, 60, &body));
    }
    c.send(&req);
    (0..3000).map(|_| c.reply().id().unwrap()).collect()
}

/// Delete `ids`, pipelined.
fn delete_all(c: &mut Client, ids: &[u64]) {
    let mut req = Vec::new();
    for id in ids {
        req.extend_from_slice(format!("delete {id}\r\n").as_bytes());
    }
    c.send(&req);
    for _ in ids {
        assert_eq!(c.reply().line, "DELETED");
    }
}

#[test]
fn milliseconds_survive_compaction_and_restart() {
    let _serial = serial();
    let dir = fresh_dir();
    let (mut srv, log) = start(&dir, &["-s", "100000"]);
    let mut c = Client::connect(srv.addr, "c");
    c.use_tube("ms");
    let jobs = MsJobs::put(&mut c, 9500);
    // Files roll at the small -s, and compaction rewrites the live jobs of old ones.
    for _ in 0..3 {
        let ids = put_3000(&mut c);
        delete_all(&mut c, &ids);
    }
    let [_, _, migrated, _, _] = binlog_figures(&mut c);
    assert!(migrated >= 2, "the jobs were not rewritten: {}", log.tail());
    kill_9(&mut srv);
    let (srv2, _log2) = start(&dir, &[]);
    let mut c = Client::connect(srv2.addr, "c2");
    c.watch_only("ms");
    let what = format!("after compaction ({migrated} records rewritten) and kill -9");
    jobs.check(&mut c, &what);
    drop(srv2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn keys_and_windows_survive_compaction_and_kill_9() {
    let _serial = serial();
    let dir = fresh_dir();
    let (mut srv, log) = start(&dir, &["-s", "100000"]);
    let mut c = Client::connect(srv.addr, "c");
    let ledger = KeyLedger::put(&mut c, "keys", "k", 400);
    // A window that ends before the restart.
    c.expect("use short", "USING short");
    let r = c
        .try_call(b"put 0 0 60 1 idp:brief:300ms\r\nx\r\n", REPLY)
        .unwrap();
    c.expect(&format!("delete {}", r.id().unwrap()), "DELETED");
    c.use_tube("keys");
    for _ in 0..3 {
        let ids = put_3000(&mut c);
        delete_all(&mut c, &ids);
    }
    let [_, _, migrated, _, _] = binlog_figures(&mut c);
    assert!(migrated >= 2, "the jobs were not rewritten: {}", log.tail());
    ledger.audit(&mut c, "-b before the kill");
    thread::sleep(Duration::from_millis(400));
    kill_9(&mut srv);
    let (srv2, _log2) = start(&dir, &[]);
    let mut c = Client::connect(srv2.addr, "c2");
    c.use_tube("keys");
    ledger.audit(
        &mut c,
        &format!("-b after compaction ({migrated} rewritten) and kill -9"),
    );
    c.expect("use short", "USING short");
    assert_eq!(
        c.line("find-key brief"),
        "NOT_FOUND",
        "an ended window came back"
    );
    drop(srv2);
    let _ = std::fs::remove_dir_all(&dir);
}
