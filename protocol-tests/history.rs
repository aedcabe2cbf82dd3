//! The console's history (`GET /api/v1/history`, docs/API.md) against real processes,
//! with the sampler's period shortened to 300 ms (`REDSTALK_HISTORY_PERIOD_MS`: each
//! "minute" of the history is then one period), so no test waits a real minute.
//!
//! What the tests prove:
//! - `puts_reserves_and_deletes_become_per_minute_figures` — memory mode: 3 puts, 2
//!   reserves of jobs that had waited about 300 ms, 2 deletes in a new tube show as
//!   those sums over the tube's points, with a mean wait of at least 250 ms.
//! - `leader_mode_history_survives_a_change_of_leader` — leader mode on a private
//!   `redis-server`: the same figures recorded by the leader are still served after it
//!   is killed (-9) and a standby takes over (read back from `P:history:<minute>`).

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::client::Client;
use support::redis::private_redis;
use support::{Log, TEST_LEASE_MS, free_port, is_listening, is_listening_by, serial, wait_served};

const PERIOD_MS: &str = "300";
const WAIT: Duration = Duration::from_secs(30);

/// A redstalk sampling its history every [`PERIOD_MS`] (killed when dropped).
struct Redstalk {
    child: Child,
    log: Log,
    addr: SocketAddr,
    http: SocketAddr,
}

impl Drop for Redstalk {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Redstalk {
    fn start(extra: &[&str]) -> Redstalk {
        let port = free_port();
        let http: SocketAddr = ([127, 0, 0, 1], free_port()).into();
        let mut cmd = Command::new(support::redstalk_path());
        cmd.env("REDSTALK_HISTORY_PERIOD_MS", PERIOD_MS)
            .args(["-l", "127.0.0.1", "-p", &port.to_string()])
            .args(["--http", &http.to_string()])
            .args(extra);
        let (child, log) = support::spawn_logged(&mut cmd).expect("spawn redstalk");
        let deadline = Instant::now() + WAIT;
        while !(is_listening_by(child.id(), port) && is_listening(http.port())) {
            assert!(
                Instant::now() < deadline,
                "redstalk did not listen\n{}",
                log.tail()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let addr = ([127, 0, 0, 1], port).into();
        Redstalk {
            child,
            log,
            addr,
            http,
        }
    }
}

fn get(http: SocketAddr, path: &str) -> Value {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(5)))
        .http_status_as_error(false)
        .build()
        .into();
    match agent.get(format!("http://{http}{path}")).call() {
        Ok(mut r) if r.status() == 200 => {
            serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap()
        }
        _ => Value::Null,
    }
}

/// The sums of a tube's points: (puts, reserves, deletes, mean wait in ms of the
/// points with reserves, points).
fn sums(http: SocketAddr, tube: &str) -> (u64, u64, u64, u64, usize) {
    let v = get(http, &format!("/api/v1/history?minutes=1440&tube={tube}"));
    let points = v["tubes"][0]["points"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let f = |k: &str| points.iter().map(|p| p[k].as_u64().unwrap()).sum::<u64>();
    let waits: Vec<u64> = points
        .iter()
        .filter(|p| p["reserves"].as_u64() > Some(0))
        .map(|p| p["wait_ms"].as_u64().unwrap())
        .collect();
    let mean = waits.iter().sum::<u64>() / (waits.len().max(1) as u64);
    (f("puts"), f("reserves"), f("deletes"), mean, points.len())
}

/// Wait until the tube's sums are `want` (puts, reserves, deletes); how long it took.
fn until_sums(http: SocketAddr, tube: &str, want: (u64, u64, u64), log: &Log) -> Duration {
    let start = Instant::now();
    loop {
        let s = sums(http, tube);
        if (s.0, s.1, s.2) == want {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < WAIT,
            "history of {tube} is {s:?}, not {want:?}\n{}",
            log.tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 3 puts, 2 reserves of jobs ready for about 300 ms, 2 deletes, in `tube`.
fn activity(addr: SocketAddr, tube: &str) {
    let mut c = Client::connect(addr, "history");
    c.use_tube(tube);
    c.watch_only(tube);
    for _ in 0..3 {
        c.put(1024, 0, 60, b"x");
    }
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..2 {
        let (id, _) = c.reserve();
        c.expect(&format!("delete {id}"), "DELETED");
    }
}

#[test]
fn puts_reserves_and_deletes_become_per_minute_figures() {
    let _serial = serial();
    let srv = Redstalk::start(&[]);
    wait_served(srv.addr, WAIT, &srv.log);
    activity(srv.addr, "hist");
    let took = until_sums(srv.http, "hist", (3, 2, 2), &srv.log);
    let s = sums(srv.http, "hist");
    println!(
        "memory: history of hist (puts, reserves, deletes, mean wait ms, points) = {s:?} after {took:?}"
    );
    assert!(s.3 >= 250, "mean wait {} ms, the jobs waited 300 ms", s.3);
    let all = get(srv.http, "/api/v1/history");
    assert_eq!(all["tubes_omitted"], 0);
    assert_eq!(all["period_ms"], 300);
}

#[test]
fn leader_mode_history_survives_a_change_of_leader() {
    let _serial = serial();
    let Some(redis) = private_redis(&[], "the leader-mode history test") else {
        return;
    };
    let url = redis.url();
    let leader = [
        "--redis",
        &url,
        "--redis-prefix",
        "hist",
        "--redis-mode",
        "leader",
        "--redis-lease",
        TEST_LEASE_MS,
    ];
    let mut a = Redstalk::start(&leader);
    wait_served(a.addr, WAIT, &a.log);
    // A sampler looks for a new leadership's engine every second and takes its base
    // then: what the engine did before that is not counted (puts would be absorbed).
    std::thread::sleep(Duration::from_millis(1_500));
    let b = Redstalk::start(&leader);
    activity(a.addr, "hist");
    let took = until_sums(a.http, "hist", (3, 2, 2), &a.log);
    println!(
        "leader: history recorded after {took:?}: {:?}",
        sums(a.http, "hist")
    );
    // The sampler writes the minute to Redis just after recording it.
    std::thread::sleep(Duration::from_millis(500));
    a.child.kill().unwrap();
    let start = Instant::now();
    let served = wait_served(b.addr, WAIT, &b.log);
    let took = until_sums(b.http, "hist", (3, 2, 2), &b.log);
    let s = sums(b.http, "hist");
    println!(
        "new leader: served after {served:?}, history of hist {s:?} within {:?} of the kill",
        start.elapsed()
    );
    assert!(took < WAIT);
    assert!(s.3 >= 250, "mean wait {} ms survives too", s.3);
}
