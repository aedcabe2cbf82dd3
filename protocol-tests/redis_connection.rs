//! redstalk's connections to Redis, against real processes (a private redis-server,
//! never the one on 6379): large replies, and a Redis that stops answering.
//!
//! What the tests prove:
//! - `a_job_beyond_the_pubsub_buffer_limit_goes_in_and_out` — in shared mode, a job
//!   larger than Redis' pub/sub output-buffer hard limit (32 MiB) is put, peeked,
//!   reserved and deleted. Before, the wake-up SUBSCRIBE shared the command connection,
//!   Redis applied the pub/sub limit to it, and dropped it on the first large reply
//!   (every command of every client answered INTERNAL_ERROR). The same job through
//!   leader mode. Prints the time each command took.
//! - `a_hung_redis_answers_within_a_second_and_session_commands_never_wait` — with
//!   Redis stopped (SIGSTOP: it accepts connections and never replies), every command
//!   that needs Redis answers INTERNAL_ERROR within about a second, and the commands
//!   that need none (`list-tube-used`, `list-tubes-watched`, `quit`), on an old or a
//!   new connection, answer at once. Prints every time.
//! - `a_change_no_replica_confirms_answers_internal_error` — with
//!   `--redis-wait-replicas 1` and no replica, a put answers INTERNAL_ERROR once the
//!   WAIT timeout has passed, in both Redis modes.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::client::Client;
use support::redis::private_redis;
use support::{ServerKind, redstalk_on_as, serial, signal_pid};

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
    println!(
        "large job: {} MiB put {put_ms} ms, peek {peek_ms} ms, reserve {reserve_ms} ms \
         ({} mode)",
        size >> 20,
        kind.redis_mode().unwrap()
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
        let r = c
            .try_put(1, 0, 60, b"unreplicated", REPLY)
            .unwrap_or_else(|e| panic!("put: {e}\n{}", log.tail()));
        let took = t.elapsed();
        println!(
            "no replica, --redis-wait-replicas 1 --redis-wait-timeout 200 ({} mode): put \
             answered {} in {} ms",
            kind.redis_mode().unwrap(),
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
