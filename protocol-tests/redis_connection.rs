//! redstalk's connections to Redis, against real processes (a private redis-server,
//! never the one on 6379): large replies, and a Redis that stops answering.
//!
//! What the tests prove:
//! - `a_job_beyond_the_pubsub_buffer_limit_goes_in_and_out` — in shared mode, a job
//!   larger than Redis' pub/sub output-buffer hard limit (32 MiB) is put, peeked,
//!   reserved and deleted. Before, the wake-up SUBSCRIBE shared the command connection,
//!   Redis applied the pub/sub limit to it, and dropped it on the first large reply
//!   (every command of every client answered INTERNAL_ERROR). The same job through
//!   leader mode. No script call ran 50 ms or more (Redis' slow log): a large body
//!   never passes through Lua (before, its put, peek and reserve each held Redis about
//!   0.1 s). Prints the time each command took.
//! - `a_large_put_does_not_hold_up_other_clients` — leader mode: while a 48 MiB body
//!   is on its way to Redis (seen in Redis' `CLIENT LIST`: a client's query buffer
//!   holds more than 1 MiB), another client's put and delete are written and answered,
//!   and the large put answers after them. Before, the large body travelled in the
//!   batch, and every change made meanwhile waited for the batch after it (the large
//!   put was always answered first). Then a large job survives the leader's kill -9
//!   whole, and a body left without its job (a put cut short) is removed by the next
//!   leader's load. Prints the small cycle's time and the large put's.
//! - `a_hung_redis_answers_within_a_second_and_session_commands_never_wait` — with
//!   Redis stopped (SIGSTOP: it accepts connections and never replies), every command
//!   that needs Redis answers INTERNAL_ERROR within about a second, and the commands
//!   that need none (`list-tube-used`, `list-tubes-watched`, `quit`), on an old or a
//!   new connection, answer at once. Prints every time.
//! - `a_change_no_replica_confirms_answers_internal_error` — with
//!   `--redis-wait-replicas 1` and no replica, a put answers INTERNAL_ERROR once the
//!   WAIT timeout has passed, in both Redis modes.
//! - `a_refused_wait_leaves_the_change_counted_as_maybe_applied` — shared mode, a Redis
//!   user that may not run WAIT (as a primary just demoted to replica refuses it): a
//!   reserve's script ran, its WAIT failed; the attempt counts as "may have been
//!   applied", so the job is given back at once instead of staying reserved, by an owner
//!   no client is, until its TTR. Before, the whole pipeline's error was the WAIT's and
//!   read as "nothing was applied". Prints how soon the job was ready again.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::client::Client;
use support::redis::private_redis;
use support::sentinel::cli;
use support::{ServerKind, ServerProc, redstalk_on_as, serial, signal_pid};

const REPLY: Duration = Duration::from_secs(10);

#[test]
fn a_job_beyond_the_pubsub_buffer_limit_goes_in_and_out() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "Redis connection tests") else {
        return;
    };
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        large_job(kind, &redis);
    }
}

/// A 33 MiB job through an instance of `kind` on `redis`.
fn large_job(kind: ServerKind, redis: &support::redis::RedisServer) {
    let size = 33 << 20;
    let (srv, log) = redstalk_on_as(
        kind,
        redis,
        &format!("big-{}", kind.name()),
        &["-z", &(40u32 << 20).to_string()],
    );
    let mut c = Client::connect(srv.addr, "client");
    c.timeout = REPLY;
    // Scripts slower than 50 ms are logged: a large body through Lua takes about
    // 100 ms, a script without one well under a millisecond.
    cli(
        redis.port,
        &["CONFIG", "SET", "slowlog-log-slower-than", "50000"],
    )
    .unwrap();
    cli(redis.port, &["SLOWLOG", "RESET"]).unwrap();
    let body: Vec<u8> = (0..size).map(|i| b'a' + (i % 26) as u8).collect();
    let t = Instant::now();
    let put = c.put_reply(1, 0, 60, &body);
    let put_ms = t.elapsed().as_millis();
    assert_eq!(put.word(), "INSERTED", "{}", log.tail());
    let id = put.id().unwrap();
    let t = Instant::now();
    let peeked = c.cmd(&format!("peek {id}"));
    let peek_ms = t.elapsed().as_millis();
    assert_eq!(peeked.line, format!("FOUND {id} {size}"), "{}", log.tail());
    assert!(
        peeked.body.as_deref() == Some(&body[..]),
        "peek: another body"
    );
    let t = Instant::now();
    let (got, reserved) = c.reserve();
    let reserve_ms = t.elapsed().as_millis();
    assert_eq!(got, id);
    assert!(reserved == body, "reserve: another body");
    c.expect(&format!("delete {id}"), "DELETED");
    // The connection survived: other commands still work.
    c.expect("use other", "USING other");
    assert_eq!(c.put_reply(1, 0, 60, b"small").word(), "INSERTED");
    // No script carried the body: Redis copies a script's arguments and reply through
    // Lua, serving nobody meanwhile (about 0.1 s for this body).
    let slow = cli(redis.port, &["SLOWLOG", "GET", "128"]).unwrap();
    assert!(
        !slow
            .lines()
            .any(|l| l.trim().eq_ignore_ascii_case("evalsha")),
        "a script ran 50 ms or more:\n{slow}"
    );
    println!(
        "large job: {} MiB put {put_ms} ms, peek {peek_ms} ms, reserve {reserve_ms} ms \
         ({} mode)",
        size >> 20,
        kind.redis_mode().unwrap()
    );
}

/// Whether one of Redis' clients is reading an argument of more than 1 MiB (its query
/// buffer holds it).
fn redis_reads_a_large_argument(port: u16) -> bool {
    let list = cli(port, &["CLIENT", "LIST"]).unwrap_or_default();
    list.split_whitespace().any(|field| {
        field
            .strip_prefix("qbuf=")
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|n| n > 1 << 20)
    })
}

#[test]
fn a_large_put_does_not_hold_up_other_clients() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "Redis connection tests") else {
        return;
    };
    let z = (64u32 << 20).to_string();
    let body: Vec<u8> = (0..48 << 20).map(|i| b'a' + (i % 26) as u8).collect();
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let prefix = format!("big-ahead-{}", kind.name());
        let (srv, log) = redstalk_on_as(kind, &redis, &prefix, &["-z", &z]);
        let mut big = Client::connect(srv.addr, "big");
        big.timeout = REPLY;
        small_changes_pass_a_large_body(&mut big, srv.addr, &body, &redis, &log, kind);
        // Acknowledged large jobs survive the instance whole.
        let id = big.put(1, 0, 60, &body);
        srv.signal("KILL").unwrap();
        drop(srv);
        // A body left without its job, as an instance that died mid-put leaves one: a
        // job hash with a body only, its id in the bodies written ahead (written long
        // ago).
        let (orphan, ahead) = (
            format!("{{{prefix}}}:j:999999"),
            format!("{{{prefix}}}:ahead"),
        );
        cli(redis.port, &["HSET", &orphan, "b", "orphan"]).unwrap();
        cli(redis.port, &["ZADD", &ahead, "0", "999999"]).unwrap();
        let (srv, log) = redstalk_on_as(kind, &redis, &prefix, &["-z", &z]);
        let mut c = Client::connect(srv.addr, "after");
        c.timeout = REPLY;
        let peeked = c.cmd(&format!("peek {id}"));
        assert_eq!(
            peeked.line,
            format!("FOUND {id} {}", body.len()),
            "{}",
            log.tail()
        );
        assert!(peeked.body.as_deref() == Some(&body[..]), "another body");
        // Leader mode's load removes it before the leader serves; shared mode's tick
        // once it is a minute old (this one is).
        let removed = Instant::now();
        loop {
            let left = cli(redis.port, &["EXISTS", &orphan, &ahead]).unwrap();
            if left.trim() == "0" {
                break;
            }
            assert!(
                kind == ServerKind::Redis && removed.elapsed() < Duration::from_secs(30),
                "the orphaned body was not removed: {left}\n{}",
                log.tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        println!(
            "{}: the orphaned body was gone {} ms after the instance served",
            kind.name(),
            removed.elapsed().as_millis()
        );
    }
}

/// While a large put's body travels to Redis, a small put and delete on another
/// connection are answered, before the large put (3 times).
fn small_changes_pass_a_large_body(
    big: &mut Client,
    addr: std::net::SocketAddr,
    body: &[u8],
    redis: &support::redis::RedisServer,
    log: &support::Log,
    kind: ServerKind,
) {
    let mut small = Client::connect(addr, "small");
    let (mut attempts, mut caught, mut small_first) = (0, 0, 0);
    while caught < 3 {
        attempts += 1;
        assert!(
            attempts <= 20,
            "Redis was never seen reading the large body"
        );
        big.send_put(1, 0, 60, body);
        // Poll without pause: the transfer lasts tens of milliseconds.
        let line = loop {
            if redis_reads_a_large_argument(redis.port) {
                break None;
            }
            if let Ok(line) = big.try_line(Duration::from_millis(1)) {
                break Some(line);
            }
        };
        let line = match line {
            // Missed the transfer: try again.
            Some(line) => line,
            None => {
                caught += 1;
                let t = Instant::now();
                let id = small.put(1, 0, 60, b"small");
                small.expect(&format!("delete {id}"), "DELETED");
                let small_ms = t.elapsed().as_secs_f64() * 1e3;
                let answered = big.try_line(Duration::from_millis(1)).ok();
                let came_first = answered.is_some();
                let t = Instant::now();
                let line = match answered {
                    Some(line) => line,
                    None => {
                        small_first += 1;
                        big.try_line(REPLY).expect("the large put's answer")
                    }
                };
                println!(
                    "{} mode: small put + delete {small_ms:.1} ms while a 48 MiB body \
                     travelled; the large put answered {:.1} ms later{}",
                    kind.redis_mode().unwrap(),
                    t.elapsed().as_secs_f64() * 1e3,
                    if came_first { " (it came first)" } else { "" }
                );
                line
            }
        };
        assert!(line.starts_with("INSERTED "), "{line}: {}", log.tail());
        let big_id: u64 = line[9..].parse().unwrap();
        big.expect(&format!("delete {big_id}"), "DELETED");
    }
    assert!(
        small_first >= 2,
        "{} mode: the small change waited for the large body in {} of 3 attempts",
        kind.redis_mode().unwrap(),
        3 - small_first
    );
}

/// `request` on `c`: the reply's first word and how long it took.
fn timed(c: &mut Client, request: &str) -> (String, Duration) {
    let t = Instant::now();
    let r = c
        .try_call(format!("{request}\r\n").as_bytes(), REPLY)
        .unwrap_or_else(|e| panic!("{request}: {e}"));
    (r.word().to_string(), t.elapsed())
}

#[test]
fn a_hung_redis_answers_within_a_second_and_session_commands_never_wait() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "Redis connection tests") else {
        return;
    };
    let (srv, log) = redstalk_on_as(ServerKind::Redis, &redis, "hung", &[]);
    let mut c = Client::connect(srv.addr, "client");
    let id = c.put(1, 0, 60, b"before");
    signal_pid(redis.pid().unwrap(), "STOP");
    let mut needs_redis = Vec::new();
    for request in [
        "put 1 0 60 1\r\nx".to_string(),
        "reserve-with-timeout 0".into(),
        "stats".into(),
        format!("peek {id}"),
        "watch other".into(),
        "use other".into(),
    ] {
        let (word, took) = timed(&mut c, &request);
        needs_redis.push((request.lines().next().unwrap().to_string(), word, took));
    }
    let mut local = Vec::new();
    for request in ["list-tube-used", "list-tubes-watched"] {
        let (word, took) = timed(&mut c, request);
        local.push((request.to_string(), word, took));
    }
    let t = Instant::now();
    let mut fresh = Client::connect(srv.addr, "new connection");
    let (word, _) = timed(&mut fresh, "list-tube-used");
    local.push(("new connection: list-tube-used".into(), word, t.elapsed()));
    let (word, took) = timed(&mut fresh, "list-tubes-watched");
    local.push(("new connection: list-tubes-watched".into(), word, took));
    let t = Instant::now();
    fresh.send_line("quit");
    let closed = fresh.try_line(REPLY).is_err();
    local.push(("quit".into(), format!("closed: {closed}"), t.elapsed()));
    signal_pid(redis.pid().unwrap(), "CONT");

    for (request, word, took) in &needs_redis {
        println!("Redis hung: {request}: {word} in {} ms", took.as_millis());
    }
    for (request, word, took) in &local {
        println!("Redis hung: {request}: {word} in {} ms", took.as_millis());
    }
    for (request, word, took) in &needs_redis {
        assert!(
            *took < Duration::from_millis(1800),
            "{request} took {took:?} ({word})\n{}",
            log.tail()
        );
    }
    for (request, word, took) in &local {
        assert!(
            *took < Duration::from_millis(500),
            "{request} waited {took:?} ({word}) on the hung Redis\n{}",
            log.tail()
        );
    }
    // Service resumes.
    let mut after = Client::connect(srv.addr, "after");
    let deadline = Instant::now() + REPLY;
    while after.put_reply(1, 0, 60, b"after").word() != "INSERTED" {
        assert!(Instant::now() < deadline, "no put after SIGCONT");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// With `--redis-wait-replicas 1` and no replica: in shared mode a change waits the
/// WAIT out and answers INTERNAL_ERROR; in leader mode the lease itself counts only
/// once a replica confirms it (docs/RELIABILITY.md, *Defects found*, 2), so no
/// instance leads: a client is closed at once, nothing acknowledged, and the log says
/// why.
#[test]
fn a_change_no_replica_confirms_answers_internal_error() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "Redis connection tests") else {
        return;
    };
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let (srv, log) = redstalk_on_as(
            kind,
            &redis,
            &format!("wait-{}", kind.name()),
            &["--redis-wait-replicas", "1", "--redis-wait-timeout", "200"],
        );
        let mut c = Client::connect(srv.addr, "client");
        let t = Instant::now();
        let r = c.try_put(1, 0, 60, b"unreplicated", REPLY);
        let took = t.elapsed();
        let mode = kind.redis_mode().unwrap();
        if kind == ServerKind::Leader {
            println!(
                "no replica, --redis-wait-replicas 1 (leader mode): the put's connection \
                 ended ({}) in {} ms",
                r.as_ref()
                    .map_or_else(|e| e.to_string(), |r| r.line.clone()),
                took.as_millis()
            );
            assert!(
                r.is_err(),
                "a put answered without a lease: {:?}",
                r.map(|r| r.line)
            );
            // Its stderr is read on a thread of its own: give it time to catch up.
            let why = "fewer replicas connected than --redis-wait-replicas";
            log.wait_for(why, REPLY);
            continue;
        }
        let r = r.unwrap_or_else(|e| panic!("put: {e}\n{}", log.tail()));
        println!(
            "no replica, --redis-wait-replicas 1 --redis-wait-timeout 200 ({mode} mode): put \
             answered {} in {} ms",
            r.line,
            took.as_millis()
        );
        assert_eq!(r.word(), "INTERNAL_ERROR", "{}", log.tail());
        assert!(
            took >= Duration::from_millis(200),
            "the WAIT was not waited for"
        );
    }
}

#[test]
fn a_refused_wait_leaves_the_change_counted_as_maybe_applied() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "Redis connection tests") else {
        return;
    };
    let acl = [
        "ACL", "SETUSER", "nowait", "on", ">pw", "~*", "&*", "+@all", "-wait",
    ];
    cli(redis.port, &acl).expect("ACL SETUSER");
    let (plain, plain_log) = redstalk_on_as(ServerKind::Redis, &redis, "nowait", &[]);
    let mut producer = Client::connect(plain.addr, "producer");
    let id = producer.put(1, 0, 120, b"held by nobody?");

    let url = format!("redis://nowait:pw@127.0.0.1:{}/0", redis.port);
    let args = [
        "--redis-wait-replicas",
        "1",
        "--redis-wait-timeout",
        "200",
        "-z",
        "2000000",
    ]
    .map(String::from);
    let mut srv = ServerProc::start_on_redis_as(ServerKind::Redis, &url, "nowait", &args)
        .unwrap_or_else(|e| panic!("start redstalk as a user without WAIT: {e}"));
    let log = srv.capture_stderr();
    let mut worker = Client::connect(srv.addr, "worker");
    let r = worker
        .try_call(b"reserve-with-timeout 0\r\n", REPLY)
        .unwrap_or_else(|e| panic!("reserve: {e}\n{}", log.tail()));
    assert_eq!(r.word(), "INTERNAL_ERROR", "{}", log.tail());

    // The attempt is undone by the instance that made it; the TTR (120 s) is far away.
    let t = Instant::now();
    let line = format!("stats-job {id}");
    loop {
        let state = producer.dict_value(&line, "state");
        if state == "ready" {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "job {id} still {state} {:?} after the refused WAIT\n{}\n{}",
            t.elapsed(),
            log.tail(),
            plain_log.tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "a reserve whose WAIT Redis refused: job ready again after {} ms (TTR 120 s)",
        t.elapsed().as_millis()
    );

    // A large put (its body written first, then the script): the script ran, the WAIT
    // was refused. The job exists with its body; before, the body was removed as if
    // the script had not run, leaving a job without one.
    producer.cmd(&format!("delete {id}"));
    let body = vec![b'x'; (1 << 20) + 10];
    let r = worker.try_put(1, 0, 60, &body, REPLY).unwrap();
    assert_eq!(r.word(), "INTERNAL_ERROR", "{}", log.tail());
    let r = producer.try_call(b"peek-ready\r\n", REPLY).unwrap();
    assert_eq!(r.word(), "FOUND", "the large job exists: {}", r.line);
    assert_eq!(
        r.body.map(|b| b.len()),
        Some(body.len()),
        "the large job has its body"
    );
    println!("a large put whose WAIT Redis refused: the job is there with its body");
}
