//! Durability of the Redis engine, proven against real processes: the `redstalk` binary
//! and a private `redis-server` per test (never the Redis on 6379), killed with SIGKILL
//! where the test says so. Every wait is bounded, so a hung server fails a test rather
//! than hanging it.
//!
//! What the tests prove:
//! - `kill_9_keeps_every_job` — after `kill -9` of redstalk and a new redstalk on the
//!   same Redis and prefix, every job is there with the same id, tube, state, priority,
//!   body (binary: CR, LF, NUL, empty, 64 KiB), delay, TTR and counters (reserves,
//!   timeouts, releases, buries, kicks); `age` and `time-left` differ by the elapsed
//!   time only; the peeks, `list-tubes` and the `stats` job figures are unchanged; the
//!   buried jobs kick out in bury order; delayed jobs become ready at their original
//!   due time (not restarted by the restart); the job the dead process had reserved
//!   returns to ready when its TTR runs out (not earlier, not never) and is handed to a
//!   waiting reserve; ready jobs reserve in (priority, id) order; a new put gets an id
//!   above every old one.
//! - `redis_down_answers_internal_error_and_recovers` — with Redis killed, commands
//!   that need it answer `INTERNAL_ERROR` promptly (< 2.5 s each), the process neither
//!   crashes nor hangs, a reserve already waiting keeps its own timeout (TIMED_OUT at
//!   ~3 s), a new connection is refused or answered at once (never left hanging); when
//!   Redis comes back on the same port with its data (AOF), service resumes on the same
//!   connections without restarting redstalk.
//! - `redis_frozen_answers_internal_error_and_recovers` — the same with Redis frozen
//!   (SIGSTOP: its sockets accept but nothing answers), which exercises the 1 s response
//!   timeout rather than a refused connection; after SIGCONT service resumes at once.
//!   It also reports what the timed-out commands did once Redis resumed.
//! - `failed_reserve_holds_no_job` — a `reserve` that answered `INTERNAL_ERROR` because
//!   Redis was frozen past the response timeout leaves no job reserved once Redis is
//!   back: the job it would have taken is reservable by another connection.
//! - `aof_always_loses_no_acknowledged_put` — with `appendonly yes, appendfsync always`,
//!   Redis killed and restarted in the middle of a multi-connection put load: every put
//!   answered `INSERTED <id>` is found afterwards by `peek <id>` with its body, and no
//!   id was handed out twice.
//! - `scripts_reload_after_flush_and_restart` (Redis Functions) and
//!   `scripts_reload_without_functions` (FUNCTION renamed away: EVALSHA) — after
//!   `SCRIPT FLUSH` and `FUNCTION FLUSH`, and after a Redis restart (empty script
//!   cache), the first call of every script still works (FCALL → "Function not found",
//!   or EVALSHA → NOSCRIPT; then the reload).
//!
//! The tests run one at a time (about 20 s in all). Each prints its figures
//! (`--nocapture` shows them). Without `redis-server` they are skipped with a notice,
//! unless `REDSTALK_REQUIRE_ORACLE=1`.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::thread;
use std::time::{Duration, Instant};

use support::client::{Client, Reply, parse_dict};
use support::load::{Load, LoadConfig};
use support::redis::{RedisServer, private_redis};
use support::{Log, redstalk_on, serial, signal_pid};

/// How long an ordinary reply may take.
const REPLY: Duration = Duration::from_secs(5);
/// The bound on an `INTERNAL_ERROR` while Redis is down.
const PROMPT_ERROR: Duration = Duration::from_millis(2500);
/// Slack for comparing the test's clock with the Redis clock (same machine).
const CLOCK_SLACK: Duration = Duration::from_millis(50);
/// How late a due time may be acted on (the timer wakes at the deadline).
const LATE: Duration = Duration::from_millis(1500);

fn try_connect(addr: SocketAddr) -> io::Result<Client> {
    Client::try_connect(addr, "producer")
}

/// `waiter` sends `reserve-with-timeout 3` (nothing is ready for it); once `observer`
/// sees it waiting, a thread collects its reply: (reply, time since sent, connection).
fn wait_in_reserve(
    observer: &mut Client,
    mut waiter: Client,
) -> thread::JoinHandle<(io::Result<Reply>, Duration, Client)> {
    waiter.send(b"reserve-with-timeout 3\r\n");
    let waiting_since = Instant::now();
    let deadline = Instant::now() + REPLY;
    while observer.stat("current-waiting") != "1" {
        assert!(Instant::now() < deadline, "the reserve never waited");
        thread::sleep(Duration::from_millis(10));
    }
    thread::spawn(move || {
        let r = waiter.try_reply(Duration::from_secs(10));
        (r, waiting_since.elapsed(), waiter)
    })
}

/// Put `after` until it is INSERTED (INTERNAL_ERROR meanwhile), for at most 5 s after
/// Redis came back. Returns the id, how long it took and the number of attempts.
fn put_until_inserted(c: &mut Client, log: &Log, event: &str) -> (u64, Duration, u32) {
    let up_at = Instant::now();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let r = c
            .try_put(0, 0, 60, b"after", REPLY)
            .unwrap_or_else(|e| panic!("put after Redis {event}: {e}\n{}", log.tail()));
        if r.word() == "INSERTED" {
            return (r.id().unwrap(), up_at.elapsed(), attempts);
        }
        assert_eq!(r.line, "INTERNAL_ERROR");
        assert!(
            up_at.elapsed() < Duration::from_secs(5),
            "no INSERTED within 5 s of Redis {event} ({attempts} attempts)\n{}",
            log.tail()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Put in `tube`; the new id.
fn put_in(c: &mut Client, tube: &str, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> u64 {
    c.use_tube(tube);
    c.put(pri, delay, ttr, body)
}

/// `put_in`, recording the job's id and body in `sent`.
fn put_rec(
    c: &mut Client,
    sent: &mut Vec<(u64, Vec<u8>)>,
    tube: &str,
    pri: u32,
    delay: u32,
    ttr: u32,
    body: &[u8],
) -> u64 {
    let id = put_in(c, tube, pri, delay, ttr, body);
    sent.push((id, body.to_vec()));
    id
}

/// A YAML dictionary reply as a map, or None on NOT_FOUND.
fn dict(c: &mut Client, line: &str) -> Option<BTreeMap<String, String>> {
    let r = c.cmd(line);
    match r.word() {
        "OK" => Some(parse_dict(&r.text()).into_iter().collect()),
        "NOT_FOUND" => None,
        _ => panic!("{line}: {}", show(&r)),
    }
}

fn stats_job(c: &mut Client, id: u64) -> Option<BTreeMap<String, String>> {
    dict(c, &format!("stats-job {id}"))
}

fn show(r: &Reply) -> String {
    match &r.body {
        Some(b) => format!("{:?} + {} body bytes", r.line, b.len()),
        None => format!("{:?}", r.line),
    }
}

fn num(map: &BTreeMap<String, String>, key: &str) -> u64 {
    map.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key} in {map:?}"))
}

// ---------------------------------------------------------------------------------------
// Processes.

/// A private Redis, or None (skip) when redis-server is missing and not required.
fn redis_with(extra: &[&str]) -> Option<RedisServer> {
    private_redis(extra, "durability tests")
}

/// A plain (synchronous) connection to the private Redis, for admin commands.
fn redis_admin(redis: &RedisServer) -> redis::Connection {
    redis::Client::open(redis.url())
        .and_then(|c| c.get_connection_with_timeout(REPLY))
        .expect("connect to the private Redis")
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

// ---------------------------------------------------------------------------------------
// A. kill -9 of redstalk.

/// Bodies that a text protocol could mangle.
fn bodies() -> Vec<Vec<u8>> {
    let mut big = Vec::with_capacity(65_535);
    let mut x: u32 = 0x1234_5678;
    while big.len() < 65_535 {
        x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        big.push((x >> 24) as u8);
    }
    vec![
        b"plain".to_vec(),
        Vec::new(),
        b"\r\n".to_vec(),
        b"a\r\nb\0c\r\n\r\nd\n\re".to_vec(),
        (0..=255u8).collect(),
        b"put 0 0 1 1\r\nx\r\nstats\r\n".to_vec(),
        b"\0\0\0".to_vec(),
        big,
    ]
}

/// What a job looked like, with when its snapshot was taken.
#[derive(Clone, Debug)]
struct Snapshot {
    jobs: BTreeMap<u64, (BTreeMap<String, String>, Reply)>,
    peeks: Vec<(String, Reply)>,
    stats: BTreeMap<String, String>,
    tubes: Reply,
    at: Instant,
}

const TUBES: [&str; 5] = ["default", "alpha", "beta", "gamma", "delta"];
const STATS_KEYS: [&str; 8] = [
    "current-jobs-urgent",
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "total-jobs",
    "job-timeouts",
    "current-tubes",
];

fn snapshot(c: &mut Client, ids: &[u64]) -> Snapshot {
    let at = Instant::now();
    let mut jobs = BTreeMap::new();
    for &id in ids {
        let Some(stats) = stats_job(c, id) else {
            continue;
        };
        let peek = c.cmd(&format!("peek {id}"));
        jobs.insert(id, (stats, peek));
    }
    let mut peeks = Vec::new();
    for tube in TUBES {
        c.expect(&format!("use {tube}"), &format!("USING {tube}"));
        for p in ["peek-ready", "peek-delayed", "peek-buried"] {
            peeks.push((format!("{tube} {p}"), c.cmd(p)));
        }
    }
    c.expect("use default", "USING default");
    let all = dict(c, "stats").expect("stats");
    let stats = STATS_KEYS
        .iter()
        .map(|k| (k.to_string(), all.get(*k).cloned().unwrap_or_default()))
        .collect();
    let tubes = c.cmd("list-tubes");
    Snapshot {
        jobs,
        peeks,
        stats,
        tubes,
        at,
    }
}

/// Poll `stats-job id` until its state is `state`; the instant it was first seen.
fn wait_state(c: &mut Client, id: u64, state: &str, timeout: Duration) -> Instant {
    let deadline = Instant::now() + timeout;
    loop {
        let s = stats_job(c, id).unwrap_or_else(|| panic!("job {id} vanished"));
        if s.get("state").map(String::as_str) == Some(state) {
            return Instant::now();
        }
        assert!(
            Instant::now() < deadline,
            "job {id} not {state} within {timeout:?}: {s:?}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn kill_9_keeps_every_job() {
    let _serial = serial();
    let Some(redis) = redis_with(&[]) else { return };
    let (mut first, _log1) = redstalk_on(&redis, "dur-a");
    let bodies = bodies();
    let body_of = |i: usize| bodies[i % bodies.len()].clone();
    let mut p = Client::connect(first.addr, "p");
    // Every job put, with the body it was put with.
    let mut sent: Vec<(u64, Vec<u8>)> = Vec::new();

    // Timed out once: reserved with TTR 1 by a connection that stays open.
    let timeout_job = put_rec(&mut p, &mut sent, "default", 3, 0, 1, &body_of(3));
    let mut t = Client::connect(first.addr, "t");
    assert_eq!(
        t.cmd(&format!("reserve-job {timeout_job}")).word(),
        "RESERVED"
    );

    // Ready, with various priorities (equal ones too), in three tubes.
    for (i, pri) in [0u32, 5, 5, 1023, 1024, 4_294_967_295, 2, 9]
        .into_iter()
        .enumerate()
    {
        put_rec(&mut p, &mut sent, "alpha", pri, 0, 60, &body_of(i));
    }
    for i in 0..3 {
        put_rec(
            &mut p,
            &mut sent,
            "beta",
            100,
            0,
            30 + i as u32,
            &body_of(i + 4),
        );
    }
    put_rec(&mut p, &mut sent, "default", 1, 0, 120, &body_of(5));

    let mut w = Client::connect(first.addr, "w");
    // Released once (to a new priority).
    let released = put_rec(&mut p, &mut sent, "alpha", 40, 0, 60, &body_of(2));
    assert_eq!(w.cmd(&format!("reserve-job {released}")).word(), "RESERVED");
    w.expect(&format!("release {released} 7 0"), "RELEASED");
    // Kicked once.
    let kicked = put_rec(&mut p, &mut sent, "beta", 50, 0, 60, &body_of(3));
    assert_eq!(w.cmd(&format!("reserve-job {kicked}")).word(), "RESERVED");
    w.expect(&format!("bury {kicked} 51"), "BURIED");
    w.expect(&format!("kick-job {kicked}"), "KICKED");
    // Buried, in an order that is not the id order, with new priorities.
    let gamma: Vec<u64> = (0..4)
        .map(|i| {
            put_rec(
                &mut p,
                &mut sent,
                "gamma",
                200 + i,
                0,
                60,
                &body_of(i as usize + 1),
            )
        })
        .collect();
    for &id in &gamma {
        assert_eq!(w.cmd(&format!("reserve-job {id}")).word(), "RESERVED");
    }
    let bury_order = [gamma[2], gamma[0], gamma[3], gamma[1]];
    for (i, id) in bury_order.iter().enumerate() {
        w.expect(&format!("bury {id} {}", 300 + i), "BURIED");
    }
    // Delayed, due a few seconds ahead: two put with a delay, one released with one.
    const DELAY: u32 = 6;
    let mut delayed = Vec::new(); // (id, sent, acknowledged)
    for (tube, pri) in [("alpha", 10), ("beta", 20)] {
        let sent_at = Instant::now();
        let id = put_rec(
            &mut p,
            &mut sent,
            tube,
            pri,
            DELAY,
            60,
            &body_of(pri as usize),
        );
        delayed.push((id, sent_at, Instant::now()));
    }
    let rel_delayed = put_rec(&mut p, &mut sent, "default", 60, 0, 60, &body_of(7));
    assert_eq!(
        w.cmd(&format!("reserve-job {rel_delayed}")).word(),
        "RESERVED"
    );
    let sent_at = Instant::now();
    w.expect(&format!("release {rel_delayed} 61 {DELAY}"), "RELEASED");
    delayed.push((rel_delayed, sent_at, Instant::now()));

    // The timed-out job must have timed out by now (TTR 1).
    wait_state(&mut p, timeout_job, "ready", Duration::from_secs(4));

    // Reserved by a live connection, with TTR 5, as the last step before the kill.
    const TTR: u32 = 5;
    let reserved = put_rec(&mut p, &mut sent, "delta", 70, 0, TTR, &body_of(4));
    let mut r = Client::connect(first.addr, "r");
    r.expect("watch delta", "WATCHING 2");
    r.expect("ignore default", "WATCHING 1");
    let reserve_sent = Instant::now();
    let got = r.cmd("reserve-with-timeout 0");
    let reserve_acked = Instant::now();
    assert_eq!(
        got.line,
        format!("RESERVED {reserved} {}", body_of(4).len())
    );

    let ids: Vec<u64> = sent.iter().map(|(id, _)| *id).collect();
    let before = snapshot(&mut p, &ids);
    assert_eq!(
        before.jobs.len(),
        ids.len(),
        "every job exists before the kill"
    );
    let states = |s: &Snapshot, state: &str| {
        s.jobs
            .values()
            .filter(|(j, _)| j.get("state").map(String::as_str) == Some(state))
            .count()
    };
    assert_eq!(states(&before, "reserved"), 1);
    assert_eq!(states(&before, "delayed"), 3);
    assert_eq!(states(&before, "buried"), 4);
    let max_id = *ids.iter().max().unwrap();

    // kill -9, and a new redstalk on the same Redis and prefix.
    first.signal("KILL").expect("kill -9 redstalk");
    assert!(
        first.wait_exit(Duration::from_secs(5)).is_some(),
        "redstalk survived SIGKILL"
    );
    drop((t, w, r));
    let kill_to_serve = Instant::now();
    let (mut second, log2) = redstalk_on(&redis, "dur-a");
    let mut c = Client::connect(second.addr, "c");
    let restart = kill_to_serve.elapsed();
    let after = snapshot(&mut c, &ids);
    let elapsed = after.at.duration_since(before.at);

    // Every job, field by field.
    let mut lost = Vec::new();
    for (id, (b, bpeek)) in &before.jobs {
        let Some((a, apeek)) = after.jobs.get(id) else {
            lost.push(*id);
            continue;
        };
        assert_eq!(apeek, bpeek, "job {id}: peek differs");
        let put_body = sent.iter().find(|(i, _)| i == id).map(|(_, b)| b);
        assert_eq!(apeek.body.as_ref(), put_body, "job {id}: body");
        for key in b.keys().chain(a.keys()) {
            let (bv, av) = (b.get(key), a.get(key));
            match key.as_str() {
                "age" => {
                    let (bn, an) = (num(b, key), num(a, key));
                    assert!(
                        an >= bn && an - bn <= elapsed.as_secs() + 1,
                        "job {id}: age {bn} -> {an} over {elapsed:?}"
                    );
                }
                "time-left" => {
                    let (bn, an) = (num(b, key), num(a, key));
                    assert!(
                        an <= bn && bn - an <= elapsed.as_secs() + 1,
                        "job {id}: time-left {bn} -> {an} over {elapsed:?}"
                    );
                }
                _ => assert_eq!(av, bv, "job {id}: {key}"),
            }
        }
    }
    assert!(lost.is_empty(), "jobs lost by kill -9: {lost:?}");
    assert_eq!(after.peeks, before.peeks, "peeks differ after the restart");
    assert_eq!(after.stats, before.stats, "stats job figures differ");
    assert_eq!(after.tubes, before.tubes, "list-tubes differs");
    // Spot checks that the comparison covered what it should.
    let job = |id: u64| &after.jobs[&id].0;
    assert_eq!(job(timeout_job)["timeouts"], "1");
    assert_eq!(job(released)["releases"], "1");
    assert_eq!(job(released)["pri"], "7");
    assert_eq!(
        (
            job(kicked)["buries"].as_str(),
            job(kicked)["kicks"].as_str()
        ),
        ("1", "1")
    );
    assert_eq!(job(reserved)["state"], "reserved");

    // A new put gets an id above every old one.
    let new_id = put_in(&mut c, "default", 0, 0, 60, b"new");
    assert!(new_id > max_id, "new id {new_id} <= old max {max_id}");
    c.expect(&format!("delete {new_id}"), "DELETED");

    // The dead process's reservation comes back when its TTR runs out, to a waiter.
    let waiter = thread::spawn({
        let addr = second.addr;
        move || {
            let mut q = Client::connect(addr, "q");
            q.expect("watch delta", "WATCHING 2");
            q.expect("ignore default", "WATCHING 1");
            let r = q
                .try_call(b"reserve-with-timeout 20\r\n", Duration::from_secs(25))
                .expect("reserve on delta");
            (r, Instant::now(), q)
        }
    });
    // Delayed jobs become ready at their original due time.
    let mut due_report = Vec::new();
    for &(id, sent_at, acked_at) in &delayed {
        let seen = wait_state(&mut c, id, "ready", Duration::from_secs(15));
        let (from_sent, from_acked) = (seen - sent_at, seen - acked_at);
        let due = Duration::from_secs(DELAY.into());
        assert!(
            from_sent + CLOCK_SLACK >= due,
            "job {id} ready {from_sent:?} after its put/release: before its delay {due:?}"
        );
        assert!(
            from_acked <= due + LATE,
            "job {id} ready {from_acked:?} after its put/release: its due time {due:?} \
             was not kept (restarted by the restart?)"
        );
        due_report.push(ms(from_sent));
    }
    let (got, seen, mut q) = waiter.join().expect("waiter thread");
    assert_eq!(
        got.line,
        format!("RESERVED {reserved} {}", body_of(4).len()),
        "the dead process's job to the waiter"
    );
    let ttr = Duration::from_secs(TTR.into());
    let back_after = seen - reserve_sent;
    assert!(
        back_after + CLOCK_SLACK >= ttr,
        "reserved job back after {back_after:?}, before its TTR {ttr:?}"
    );
    assert!(
        seen - reserve_acked <= ttr + LATE,
        "reserved job back only after {back_after:?} (TTR {ttr:?})"
    );
    let s = stats_job(&mut c, reserved).expect("the returned job");
    assert_eq!((s["timeouts"].as_str(), s["reserves"].as_str()), ("1", "2"));
    q.expect(&format!("delete {reserved}"), "DELETED");

    // Buried jobs kick out in bury order.
    c.expect("use gamma", "USING gamma");
    let mut kicked_order = Vec::new();
    for _ in 0..bury_order.len() {
        let head = c.cmd("peek-buried");
        assert_eq!(head.word(), "FOUND", "peek-buried: {}", show(&head));
        kicked_order.push(head.id().unwrap());
        c.expect("kick 1", "KICKED 1");
    }
    assert_eq!(kicked_order, bury_order, "buried order after the restart");
    assert_eq!(c.cmd("peek-buried").line, "NOT_FOUND");

    // Ready jobs reserve in (priority, id) order.
    let mut expect_order: Vec<(u64, u64)> = ids
        .iter()
        .filter_map(|&id| {
            let s = stats_job(&mut c, id)?;
            (s["tube"] == "alpha" && s["state"] == "ready").then(|| (num(&s, "pri"), id))
        })
        .collect();
    expect_order.sort();
    let mut a = Client::connect(second.addr, "a");
    a.expect("watch alpha", "WATCHING 2");
    a.expect("ignore default", "WATCHING 1");
    let mut order = Vec::new();
    loop {
        let r = a.cmd("reserve-with-timeout 0");
        if r.word() != "RESERVED" {
            assert_eq!(r.line, "TIMED_OUT");
            break;
        }
        order.push(r.id().unwrap());
    }
    let want: Vec<u64> = expect_order.iter().map(|&(_, id)| id).collect();
    assert_eq!(order, want, "alpha's reserve order after the restart");

    assert!(second.is_running(), "redstalk died: {}", log2.tail());
    println!(
        "kill -9: {} jobs before, {} after, lost {} (new redstalk serving {} ms after the \
         kill; delayed jobs ready {:?} ms after their put, due {} ms; reserved job back \
         {} ms after its reserve, TTR {} ms; new id {new_id} > {max_id})",
        before.jobs.len(),
        after.jobs.len(),
        lost.len(),
        ms(restart),
        due_report,
        DELAY * 1000,
        ms(back_after),
        TTR * 1000,
    );
}

// ---------------------------------------------------------------------------------------
// B. Redis stopped and started again.

#[test]
fn redis_down_answers_internal_error_and_recovers() {
    let _serial = serial();
    // Redis comes back with its data (a Redis that comes back empty has lost the
    // namespace: its connections are closed, see hardening.rs).
    let Some(mut redis) = redis_with(&["--appendonly", "yes", "--appendfsync", "always"]) else {
        return;
    };
    let (mut srv, log) = redstalk_on(&redis, "dur-b");
    let mut c = Client::connect(srv.addr, "c");
    let c2 = Client::connect(srv.addr, "c2");
    let id = put_in(&mut c, "default", 0, 0, 60, b"before");
    assert_eq!(c.cmd("reserve-with-timeout 0").id(), Some(id));
    c.expect(&format!("delete {id}"), "DELETED");

    // A reserve that waits (nothing is ready) before Redis goes away.
    let waiter = wait_in_reserve(&mut c, c2);

    redis.kill();
    let down_at = Instant::now();
    let commands: [&[u8]; 12] = [
        b"put 0 0 60 3\r\nabc\r\n",
        b"reserve-with-timeout 0\r\n",
        b"stats\r\n",
        b"peek 1\r\n",
        b"use elsewhere\r\n",
        b"stats-job 1\r\n",
        b"peek-ready\r\n",
        b"stats-tube default\r\n",
        b"watch elsewhere\r\n",
        b"kick 1\r\n",
        b"delete 1\r\n",
        b"list-tubes\r\n",
    ];
    let mut slowest = Duration::ZERO;
    let mut answered = 0;
    for round in 0..2 {
        for req in commands {
            let name = String::from_utf8_lossy(req.split(|&b| b == b'\r').next().unwrap());
            let start = Instant::now();
            let r = c
                .try_call(req, REPLY)
                .unwrap_or_else(|e| panic!("round {round}, {name}: {e}\n{}", log.tail()));
            let took = start.elapsed();
            assert_eq!(r.line, "INTERNAL_ERROR", "round {round}, {name}");
            assert!(
                took < PROMPT_ERROR,
                "round {round}, {name}: INTERNAL_ERROR after {took:?}"
            );
            slowest = slowest.max(took);
            answered += 1;
        }
        // A command that needs no Redis still answers normally.
        c.expect("list-tube-used", "USING default");
        assert!(srv.is_running(), "redstalk died: {}", log.tail());
        thread::sleep(Duration::from_millis(300));
    }
    // A new connection while Redis is down is answered or closed, never left hanging.
    let start = Instant::now();
    let fresh = try_connect(srv.addr).and_then(|mut n| n.try_call(b"stats\r\n", REPLY));
    let fresh_took = start.elapsed();
    let fresh_outcome = match &fresh {
        Ok(r) => r.line.clone(),
        Err(e) => format!("{:?}", e.kind()),
    };
    assert!(
        fresh_took < PROMPT_ERROR
            && match &fresh {
                Ok(r) => r.line == "INTERNAL_ERROR",
                Err(e) => matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe
                ),
            },
        "a new connection while Redis is down: {fresh_outcome} after {fresh_took:?}"
    );

    // The reserve that was waiting kept its own timeout.
    let (r, waited, mut c2) = waiter.join().expect("waiter thread");
    let r = r.unwrap_or_else(|e| panic!("waiting reserve: {e}\n{}", log.tail()));
    assert_eq!(r.line, "TIMED_OUT", "the waiting reserve");
    assert!(
        waited >= Duration::from_millis(2950) && waited < Duration::from_millis(4000),
        "the waiting reserve answered after {waited:?}, not at its 3 s timeout"
    );
    let down_for = down_at.elapsed();

    // Redis back on the same port: service resumes without a restart.
    redis.spawn().expect("restart redis-server");
    let (id, recovery, attempts) = put_until_inserted(&mut c, &log, "coming back");
    let r = c2.cmd("reserve-with-timeout 2");
    assert_eq!(r.line, format!("RESERVED {id} 5"));
    assert_eq!(r.body.as_deref(), Some(&b"after"[..]));
    c2.expect(&format!("delete {id}"), "DELETED");
    c.expect(&format!("peek {id}"), "NOT_FOUND");
    c.expect("use elsewhere", "USING elsewhere");
    let id2 = put_in(&mut c, "elsewhere", 1, 0, 60, b"x");
    c2.expect("watch elsewhere", "WATCHING 2");
    assert_eq!(c2.cmd("reserve-with-timeout 2").id(), Some(id2));
    c2.expect(&format!("delete {id2}"), "DELETED");
    assert_eq!(dict(&mut c, "stats").map(|s| s.len() > 10), Some(true));
    let mut n = Client::connect(srv.addr, "n");
    n.expect("list-tube-used", "USING default");
    assert!(srv.is_running(), "redstalk died: {}", log.tail());

    println!(
        "Redis down {} ms: {answered} commands answered INTERNAL_ERROR, slowest {} ms; \
         a new connection got {fresh_outcome} in {} ms; the waiting reserve-with-timeout 3 \
         answered TIMED_OUT after {} ms; recovery: first INSERTED {} ms after Redis came \
         back ({attempts} attempts)",
        ms(down_for),
        ms(slowest),
        ms(fresh_took),
        ms(waited),
        ms(recovery),
    );
}

// ---------------------------------------------------------------------------------------
// B'. Redis frozen (SIGSTOP): connections to it stay open but nothing answers.

#[test]
fn redis_frozen_answers_internal_error_and_recovers() {
    let _serial = serial();
    let Some(redis) = redis_with(&[]) else {
        return;
    };
    let (mut srv, log) = redstalk_on(&redis, "dur-e");
    let mut c = Client::connect(srv.addr, "c");
    let mut c2 = Client::connect(srv.addr, "c2");
    let mut c3 = Client::connect(srv.addr, "c3");
    let id = put_in(&mut c, "default", 0, 0, 60, b"before");
    c3.use_tube("frozen");
    c2.watch_only("empty");
    let waiter = wait_in_reserve(&mut c, c2);

    let pid = redis.pid().expect("redis pid");
    signal_pid(pid, "STOP");
    let frozen_at = Instant::now();
    let put_req: &[u8] = b"put 0 0 60 6\r\nfrozen\r\n";
    let peek_req = format!("peek {id}\r\n");
    // The put goes through c3, which uses the tube `frozen`.
    let commands: [(bool, &[u8]); 6] = [
        (true, put_req),
        (false, b"reserve-with-timeout 0\r\n"),
        (false, b"stats\r\n"),
        (false, peek_req.as_bytes()),
        (false, b"use elsewhere\r\n"),
        (false, b"stats-job 1\r\n"),
    ];
    let mut slowest = Duration::ZERO;
    let mut times = Vec::new();
    for (on_c3, req) in commands {
        let client = if on_c3 { &mut c3 } else { &mut c };
        let name = String::from_utf8_lossy(req.split(|&b| b == b'\r').next().unwrap());
        let start = Instant::now();
        let r = client
            .try_call(req, REPLY)
            .unwrap_or_else(|e| panic!("{name} with Redis frozen: {e}\n{}", log.tail()));
        let took = start.elapsed();
        assert_eq!(r.line, "INTERNAL_ERROR", "{name} with Redis frozen");
        assert!(
            took < PROMPT_ERROR,
            "{name} with Redis frozen: INTERNAL_ERROR after {took:?}"
        );
        slowest = slowest.max(took);
        times.push(ms(took));
    }
    c.expect("list-tube-used", "USING default");
    assert!(srv.is_running(), "redstalk died: {}", log.tail());
    let (r, waited, _c2) = waiter.join().expect("waiter thread");
    let r = r.unwrap_or_else(|e| panic!("waiting reserve: {e}\n{}", log.tail()));
    assert_eq!(r.line, "TIMED_OUT", "the waiting reserve");
    assert!(
        waited >= Duration::from_millis(2950) && waited < Duration::from_millis(4000),
        "the waiting reserve answered after {waited:?}, not at its 3 s timeout"
    );
    let frozen_for = frozen_at.elapsed();

    signal_pid(pid, "CONT");
    let (new_id, recovery, attempts) = put_until_inserted(&mut c, &log, "resuming");
    c.expect(&format!("delete {new_id}"), "DELETED");
    // The full cycle on a new connection and tube.
    let mut n = Client::connect(srv.addr, "n");
    n.use_tube("resumed");
    n.watch_only("resumed");
    let rid = n.put(0, 0, 60, b"resumed");
    assert_eq!(n.reserve_timeout(2).map(|(i, _)| i), Some(rid));
    n.expect(&format!("delete {rid}"), "DELETED");
    // What the commands that timed out did once Redis resumed (reported; the test
    // `failed_reserve_holds_no_job` judges the reserve).
    let before_state = stats_job(&mut c, id).map_or("gone".into(), |s| s["state"].clone());
    // The put that answered INTERNAL_ERROR may still have been applied once Redis
    // resumed (the script was sent before the timeout): report which.
    let frozen_put = dict(&mut c, "stats-tube frozen").map_or(0, |s| num(&s, "current-jobs-ready"));
    assert!(srv.is_running(), "redstalk died: {}", log.tail());
    println!(
        "Redis frozen {} ms: put, reserve-with-timeout 0, stats, peek, use, stats-job \
         answered INTERNAL_ERROR in {times:?} ms (slowest {} ms); the waiting \
         reserve-with-timeout 3 answered TIMED_OUT after {} ms; recovery: first INSERTED {} \
         ms after SIGCONT ({attempts} attempts); afterwards, the put that got \
         INTERNAL_ERROR while frozen exists: {}; the job that was ready when the \
         reserve-with-timeout 0 got INTERNAL_ERROR is {before_state}",
        ms(frozen_for),
        ms(slowest),
        ms(waited),
        ms(recovery),
        if frozen_put > 0 { "yes" } else { "no" },
    );
}

/// A reserve that answered INTERNAL_ERROR (Redis frozen past the response timeout)
/// must not leave a job reserved by a connection that was told it got none: once Redis
/// is back, the job is reservable (not only after its TTR).
#[test]
fn failed_reserve_holds_no_job() {
    let _serial = serial();
    let Some(redis) = redis_with(&[]) else {
        return;
    };
    let (mut srv, log) = redstalk_on(&redis, "dur-f");
    let mut c = Client::connect(srv.addr, "c");
    let mut p = Client::connect(srv.addr, "p");
    const TTR: u32 = 30;
    // Once, so the reserve script is in Redis' cache (an uncached one would meet
    // NOSCRIPT when Redis resumes, and nobody would load it any more).
    c.expect("reserve-with-timeout 0", "TIMED_OUT");
    let id = p.put(0, 0, TTR, b"job");
    let pid = redis.pid().expect("redis pid");
    signal_pid(pid, "STOP");
    let sent = Instant::now();
    let r = c.try_call(b"reserve-with-timeout 0\r\n", REPLY);
    let took = sent.elapsed();
    signal_pid(pid, "CONT");
    let r = r.unwrap_or_else(|e| panic!("reserve with Redis frozen: {e}\n{}", log.tail()));
    assert_eq!(r.line, "INTERNAL_ERROR", "reserve with Redis frozen");
    assert!(took < PROMPT_ERROR, "INTERNAL_ERROR after {took:?}");
    let up_at = Instant::now();
    while p.line("stats-tube default").starts_with("INTERNAL_ERROR") {
        assert!(up_at.elapsed() < Duration::from_secs(5), "no recovery");
        thread::sleep(Duration::from_millis(50));
    }
    let state = stats_job(&mut p, id).map(|s| (s["state"].clone(), s["reserves"].clone()));
    let mut q = Client::connect(srv.addr, "q");
    let got = q.reserve_timeout(2).map(|(i, _)| i);
    // The weaker guarantee: closing the connection returns what it may hold.
    drop(c);
    thread::sleep(Duration::from_millis(300));
    let after_close = stats_job(&mut p, id).map(|s| s["state"].clone());
    assert!(srv.is_running(), "redstalk died: {}", log.tail());
    assert_eq!(
        got,
        Some(id),
        "job {id} was ready when `reserve-with-timeout 0` answered INTERNAL_ERROR (Redis \
         frozen); after Redis resumed its (state, reserves) is {state:?}: the timed-out \
         reserve script ran anyway and the job is held by a connection that was told it \
         got nothing, so nobody can reserve it until its TTR ({TTR} s) runs out; 300 ms \
         after that connection closed its state is {after_close:?}"
    );
    q.expect(&format!("delete {id}"), "DELETED");
}

// ---------------------------------------------------------------------------------------
// C. No acknowledged put lost with appendfsync always.

#[test]
fn aof_always_loses_no_acknowledged_put() {
    let _serial = serial();
    let Some(mut redis) = redis_with(&["--appendonly", "yes", "--appendfsync", "always"]) else {
        return;
    };
    let (mut srv, log) = redstalk_on(&redis, "dur-c");
    const PRODUCERS: usize = 4;
    const BEFORE_KILL: usize = 200;
    const AFTER_RESTART: usize = 200;
    let load = Load::start(
        srv.addr,
        LoadConfig {
            producers: PRODUCERS,
            workers: 0,
            tube: "default".into(),
            ttr: 60,
            reply_timeout: REPLY,
        },
    );
    let acked = |n: usize| move |l: &support::load::Ledger| l.acked.len() >= n;
    let bound = Duration::from_secs(20);
    load.wait_until("before the kill", bound, || log.tail(), acked(BEFORE_KILL));
    redis.kill();
    let at_kill = load.ledger(|l| l.acked.len());
    thread::sleep(Duration::from_millis(300));
    redis.spawn().expect("restart redis-server");
    let at_up = load.ledger(|l| l.acked.len());
    let first_after = load.wait_until("after the restart", bound, || log.tail(), acked(at_up + 1));
    load.wait_until(
        "after the restart",
        bound,
        || log.tail(),
        acked(at_up + AFTER_RESTART),
    );
    let load_took = load.elapsed();
    let ledger = load.stop();
    assert!(
        ledger.surprises.is_empty(),
        "unexpected replies: {:?}",
        ledger.surprises
    );
    let audit = ledger.audit(&mut Client::connect(srv.addr, "c"));
    assert!(srv.is_running(), "redstalk died: {}", log.tail());
    println!(
        "acknowledged {}, found {}, lost {} ({PRODUCERS} connections, {at_kill} acknowledged \
         before Redis was killed, {} put attempts failed while it was down, first INSERTED \
         {} ms after it came back, load {} ms)",
        audit.acknowledged,
        audit.found,
        audit.lost.len(),
        ledger.put_failed.len() + ledger.put_unanswered.len(),
        ms(first_after),
        ms(load_took),
    );
    audit.assert_sound("Redis killed and restarted under a put load");
}

// ---------------------------------------------------------------------------------------
// D. Scripts reloaded after SCRIPT FLUSH and FUNCTION FLUSH and after a Redis restart,
// called as Redis Functions, and by EVALSHA where Redis has no FUNCTION command.

/// The scripts Redis holds: (cached scripts, function libraries).
fn loaded_scripts(admin: &mut redis::Connection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query(admin)
        .expect("INFO memory");
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in INFO memory"))
    };
    (
        field("number_of_cached_scripts"),
        field("number_of_libraries"),
    )
}

/// Clients connected to the private Redis other than `admin` itself.
fn other_clients(admin: &mut redis::Connection) -> usize {
    let me: i64 = redis::cmd("CLIENT")
        .arg("ID")
        .query(admin)
        .expect("CLIENT ID");
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(admin)
        .expect("CLIENT LIST");
    list.lines()
        .filter(|l| !l.starts_with(&format!("id={me} ")))
        .count()
}

/// A command for each script, each its first call since the cache was emptied. Leaves
/// one job reserved by `w`; returns its id.
fn every_script_once(c: &mut Client, w: &mut Client, tag: &str) -> u64 {
    let tube = format!("d-{tag}");
    c.expect(&format!("use {tube}"), &format!("USING {tube}")); // tube_ref
    let id = put_in(c, &tube, 5, 0, 60, b"d\r\n\0"); // put
    let r = c.cmd("peek-ready"); // peek
    assert_eq!(r.id(), Some(id));
    assert!(stats_job(c, id).is_some()); // job_info
    assert!(dict(c, &format!("stats-tube {tube}")).is_some()); // tube_info
    w.expect(&format!("watch {tube}"), "WATCHING 2");
    assert_eq!(w.cmd("reserve-with-timeout 0").id(), Some(id)); // reserve
    w.expect(&format!("touch {id}"), "TOUCHED"); // touch
    w.expect(&format!("release {id} 5 0"), "RELEASED"); // release
    assert_eq!(w.cmd(&format!("reserve-job {id}")).id(), Some(id)); // reserve_job
    w.expect(&format!("bury {id} 5"), "BURIED"); // bury
    c.expect("kick 1", "KICKED 1"); // kick
    assert_eq!(w.cmd(&format!("reserve-job {id}")).id(), Some(id));
    w.expect(&format!("bury {id} 5"), "BURIED");
    c.expect(&format!("kick-job {id}"), "KICKED"); // kick_job
    c.expect(&format!("pause-tube {tube} 0"), "PAUSED"); // pause
    c.expect(&format!("delete {id}"), "DELETED"); // delete
    w.expect(&format!("ignore {tube}"), "WATCHING 1");
    let id = put_in(c, &tube, 5, 0, 60, b"held");
    assert_eq!(w.cmd(&format!("reserve-job {id}")).id(), Some(id));
    id
}

/// Redis 7 and later: the scripts are function libraries, loaded again after
/// `FUNCTION FLUSH` (FCALL → "Function not found" → FUNCTION LOAD).
#[test]
fn scripts_reload_after_flush_and_restart() {
    scripts_reload(&[]);
}

/// A Redis whose FUNCTION command is gone (renamed away, as an older Redis or a
/// restricted one lacks it): the scripts are called by EVALSHA, and loaded again after
/// `SCRIPT FLUSH` and after a restart (EVALSHA → NOSCRIPT → SCRIPT LOAD).
#[test]
fn scripts_reload_without_functions() {
    scripts_reload(&["--rename-command", "FUNCTION", ""]);
}

fn scripts_reload(redis_args: &[&str]) {
    let _serial = serial();
    let functions = redis_args.is_empty();
    let args = [
        &["--appendonly", "yes", "--appendfsync", "always"],
        redis_args,
    ]
    .concat();
    let Some(mut redis) = redis_with(&args) else {
        return;
    };
    let mut admin = redis_admin(&redis);
    // An older build's library, and one of the user's own.
    let old = "redstalk_put_0123456789abcdef";
    if functions {
        for name in [old, "mylib"] {
            let _: String = redis::cmd("FUNCTION")
                .arg("LOAD")
                .arg(format!(
                    "#!lua name={name}\nredis.register_function('{name}', function() return 1 end)"
                ))
                .query(&mut admin)
                .expect("FUNCTION LOAD");
        }
    }
    let (mut srv, log) = redstalk_on(&redis, "dur-d");
    let mut c = Client::connect(srv.addr, "c");
    let mut w = Client::connect(srv.addr, "w");
    let _ = every_script_once(&mut c, &mut w, "warm");
    if functions {
        // Other builds' libraries go at start (Redis keeps those of the builds that
        // run, not all since it started); anything else stays.
        let listed: String = redis::cmd("FUNCTION")
            .arg("LIST")
            .query::<redis::Value>(&mut admin)
            .map(|v| format!("{v:?}"))
            .expect("FUNCTION LIST");
        assert!(!listed.contains(old), "{listed}");
        assert!(listed.contains("mylib"), "{listed}");
        let _: () = redis::cmd("FUNCTION")
            .arg("DELETE")
            .arg("mylib")
            .query(&mut admin)
            .expect("FUNCTION DELETE");
    }
    let (scripts, libraries) = loaded_scripts(&mut admin);
    let loaded = if functions { libraries } else { scripts };
    assert!(loaded > 5, "scripts {scripts}, libraries {libraries}");
    // Falling back is said at start (at WARN, shown by default).
    assert_eq!(
        log.text().contains("Redis refused FUNCTION LOAD"),
        !functions,
        "{}",
        log.text()
    );
    if functions {
        // Only the others (the lease's, the lock-out's) are scripts.
        assert!(scripts < 5, "scripts {scripts}, libraries {libraries}");
    } else {
        assert_eq!(libraries, 0);
    }

    // SCRIPT FLUSH (and FUNCTION FLUSH, where Redis has it) under a running redstalk.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut admin)
        .expect("SCRIPT FLUSH");
    if functions {
        let _: () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query(&mut admin)
            .expect("FUNCTION FLUSH");
    }
    assert_eq!(loaded_scripts(&mut admin), (0, 0));
    let held = every_script_once(&mut c, &mut w, "flushed");
    // A closed connection's reservation goes back at once (the unreserve script).
    let closed_at = Instant::now();
    drop(w);
    let back = wait_state(&mut c, held, "ready", Duration::from_secs(3)) - closed_at;
    assert!(back < Duration::from_secs(1), "unreserve took {back:?}");
    let (scripts, libraries) = loaded_scripts(&mut admin);
    let reloaded = if functions { libraries } else { scripts };
    assert!(
        reloaded > 5,
        "reloaded: scripts {scripts}, libraries {libraries}"
    );

    // A Redis restart: the new process has no scripts (libraries are kept in its AOF).
    // Wait until redstalk has reconnected (its timer talks to Redis at least every
    // second), then the first protocol command must work.
    let kept = put_in(&mut c, "d-kept", 0, 0, 60, b"kept across the restart");
    redis.kill();
    redis.spawn().expect("restart redis-server");
    let up_at = Instant::now();
    let mut admin = redis_admin(&redis);
    while other_clients(&mut admin) == 0 {
        assert!(
            up_at.elapsed() < Duration::from_secs(5),
            "redstalk did not reconnect within 5 s\n{}",
            log.tail()
        );
        thread::sleep(Duration::from_millis(20));
    }
    let reconnected = up_at.elapsed();
    let (scripts, libraries) = loaded_scripts(&mut admin);
    assert_eq!(scripts, 0, "scripts survived the restart");
    let r = c.cmd(&format!("peek {kept}"));
    assert_eq!(
        (r.line.as_str(), r.body.as_deref()),
        (
            format!("FOUND {kept} 23").as_str(),
            Some(&b"kept across the restart"[..])
        ),
        "the first command after the restart\n{}",
        log.tail()
    );
    let mut w = Client::connect(srv.addr, "w");
    let _ = every_script_once(&mut c, &mut w, "restarted");
    assert!(srv.is_running(), "redstalk died: {}", log.tail());
    println!(
        "{}: {loaded} loaded, 0 after the flush, {reloaded} after the next calls (all \
         answered normally); after a Redis restart ({libraries} libraries kept in the \
         AOF) redstalk reconnected in {} ms and its first command (peek) worked",
        if functions {
            "functions"
        } else {
            "scripts by EVALSHA"
        },
        ms(reconnected),
    );
}
