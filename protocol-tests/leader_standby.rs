//! Standbys of Redis leader mode against real processes: what a standby does, and what
//! its `/readyz` says, when it cannot relay its clients to the leader; leader mode on a
//! unix socket; a SIGTERM during a takeover's load; connections beyond the file
//! descriptor limit. Each test starts its own `redstalk` processes on a private
//! `redis-server` (1 s lease), runs one at a time, and prints its figures
//! (`--nocapture`).
//!
//! What the tests prove:
//! - `a_standby_reached_under_another_spelling_never_relays_to_itself` — the leader
//!   advertises `localhost:P`, the standby listens on `127.0.0.1:P`: a client of the
//!   standby is closed (not relayed round and round), the standby's descriptors stay
//!   flat, and its `/readyz` answers 503 saying the address reaches itself.
//! - `a_leader_address_that_accepts_but_never_answers_closes_relayed_clients` — the
//!   leader advertises a socket that accepts and never answers: the standby's clients
//!   are closed within the relay's patience (5 s), later ones at once, and `/readyz`
//!   says why.
//! - `readyz_is_503_with_the_reason_while_the_leader_cannot_be_reached` — the leader
//!   advertises a port nobody listens on.
//! - `a_duplicate_advertise_is_found_and_reported` — a standby given the leader's own
//!   `--advertise` still relays its clients, logs an error and answers 503 in `/readyz`.
//! - `a_standbys_checks_are_not_counted_as_the_leaders_connections` — a standby's
//!   checks of the leader leave the leader's `total-connections` as it was.
//! - `leader_mode_starts_on_a_unix_socket` — `-l unix:PATH --redis URL` serves without
//!   `--advertise`; a TCP standby of it closes its clients at once and says why.
//! - `a_sigterm_during_the_load_gives_the_lease_up` — an instance that took the lead is
//!   stopped while it loads: it leaves no lease behind, so a standby takes over at once.
//! - `connections_beyond_the_descriptor_limit_are_refused_not_left_waiting` — with 256
//!   open files, a memory-engine server and a standby refuse (close) the clients their
//!   descriptors cannot hold; none is left without an answer.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use support::client::Client;
use support::redis::{RedisServer, private_redis};
use support::{Log, TEST_LEASE_MS, free_port, is_listening, is_listening_by, serial, wait_served};

const REPLY: Duration = Duration::from_secs(5);

/// Where an instance listens.
enum Listen {
    /// 127.0.0.1, on this port or a free one.
    Tcp(Option<u16>),
    Unix(PathBuf),
}

/// One redstalk process of these tests (killed when dropped), with `-V` logs and,
/// listening on TCP, `--metrics` on a free port.
struct Instance {
    child: Child,
    log: Log,
    /// 127.0.0.1:port (listening on a unix socket: unused).
    addr: SocketAddr,
    metrics: Option<SocketAddr>,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Instance {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// `GET /readyz`: status and body (status 0: no answer, and why).
    fn readyz(&self) -> (u16, String) {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            .build()
            .into();
        let url = format!("http://{}/readyz", self.metrics.expect("--metrics"));
        match agent.get(&url).call() {
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                (status, resp.body_mut().read_to_string().unwrap_or_default())
            }
            Err(err) => (0, err.to_string()),
        }
    }

    /// Wait until `/readyz` answers `status`; its body.
    fn readyz_until(&self, status: u16, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let (s, body) = self.readyz();
            if s == status {
                return body;
            }
            assert!(
                Instant::now() < deadline,
                "/readyz still {s} {body:?} after {within:?}\n{}",
                self.log.tail()
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until the log says `text`.
    fn wait_log(&self, text: &str, within: Duration) {
        self.log.wait_for(text, within);
    }
}

/// Start redstalk in leader mode on `redis` under `prefix`, with `extra` arguments and,
/// with `nofile`, that many open files at most (soft and hard).
fn start(
    redis: &RedisServer,
    prefix: &str,
    listen: Listen,
    extra: &[&str],
    nofile: Option<u32>,
) -> Instance {
    let mut args: Vec<String> = vec![
        "-V".into(),
        "--redis".into(),
        redis.url(),
        "--redis-prefix".into(),
        prefix.into(),
        "--redis-lease".into(),
        TEST_LEASE_MS.into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    start_with(args, listen, nofile)
}

fn start_with(mut args: Vec<String>, listen: Listen, nofile: Option<u32>) -> Instance {
    let (port, metrics) = match &listen {
        Listen::Tcp(port) => {
            let port = port.unwrap_or_else(free_port);
            let metrics: SocketAddr = ([127, 0, 0, 1], free_port()).into();
            args.extend([
                "-l".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
                "--metrics".into(),
                metrics.to_string(),
            ]);
            (port, Some(metrics))
        }
        Listen::Unix(path) => {
            args.extend(["-l".into(), format!("unix:{}", path.display())]);
            (0, None)
        }
    };
    let mut cmd = match nofile {
        // `sh` sets the limit and execs redstalk in its place (same pid).
        Some(n) => {
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                .arg(support::redstalk_path());
            c
        }
        None => Command::new(support::redstalk_path()),
    };
    cmd.args(&args);
    let (child, log) = support::spawn_logged(&mut cmd).expect("spawn redstalk");
    let mut inst = Instance {
        child,
        log,
        addr: ([127, 0, 0, 1], port).into(),
        metrics,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let up = match &listen {
            Listen::Tcp(_) => {
                is_listening_by(inst.pid(), port) && metrics.is_some_and(|m| is_listening(m.port()))
            }
            Listen::Unix(path) => std::os::unix::net::UnixStream::connect(path).is_ok(),
        };
        if up {
            return inst;
        }
        assert!(
            inst.is_running(),
            "redstalk exited at start ({:?}): {}",
            inst.child.try_wait(),
            inst.log.final_tail(Duration::from_secs(2))
        );
        assert!(
            Instant::now() < deadline,
            "redstalk did not listen within 10 s: {}",
            inst.log.tail()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// What became of one request.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// The first line of the answer.
    Answered(String),
    /// The connection was closed (or reset) without an answer.
    Closed,
    /// Nothing came back in time.
    Silent,
}

/// Read the first line of an answer, or its absence, by `deadline`.
fn outcome(sock: &mut TcpStream, deadline: Instant) -> Outcome {
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        sock.set_read_timeout(Some(left.max(Duration::from_millis(10))))
            .unwrap();
        match sock.read(&mut buf) {
            Ok(0) => return Outcome::Closed,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if let Some(i) = got.windows(2).position(|w| w == b"\r\n") {
                    return Outcome::Answered(String::from_utf8_lossy(&got[..i]).into_owned());
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if Instant::now() >= deadline {
                    return Outcome::Silent;
                }
            }
            Err(_) => return Outcome::Closed,
        }
    }
}

/// Send `request` on a new connection to `addr`; what came back within `within`, and
/// when.
fn ask(addr: SocketAddr, request: &[u8], within: Duration) -> (Outcome, Duration) {
    let start = Instant::now();
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.write_all(request).expect("send");
    let got = outcome(&mut sock, start + within);
    (got, start.elapsed())
}

/// Open descriptors of process `pid`.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn redis() -> Option<RedisServer> {
    private_redis(&[], "leader-mode standby tests")
}

// ---------------------------------------------------------------------------------------

#[test]
fn a_standby_reached_under_another_spelling_never_relays_to_itself() {
    let _serial = serial();
    let Some(redis) = redis() else {
        return;
    };
    let standby_port = free_port();
    let advertise = format!("localhost:{standby_port}");
    let a = start(
        &redis,
        "s-self",
        Listen::Tcp(None),
        &["--advertise", &advertise],
        None,
    );
    wait_served(a.addr, REPLY, &a.log);
    let b = start(&redis, "s-self", Listen::Tcp(Some(standby_port)), &[], None);
    b.wait_log("standing by", REPLY);
    thread::sleep(Duration::from_millis(300));
    let before = fds(b.pid());
    // Sample the standby's descriptors while one client waits for an answer.
    let pid = b.pid();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        thread::spawn(move || {
            let mut peak = 0;
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                peak = peak.max(fds(pid));
                thread::sleep(Duration::from_millis(10));
            }
            peak
        })
    };
    let (first, first_took) = ask(b.addr, b"stats\r\n", Duration::from_secs(10));
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let peak = sampler.join().unwrap();
    thread::sleep(Duration::from_millis(500));
    let after = fds(b.pid());
    let (second, second_took) = ask(b.addr, b"stats\r\n", Duration::from_secs(10));
    let (status, body) = b.readyz();
    eprintln!(
        "leader advertises {advertise}, the standby listens on 127.0.0.1:{standby_port}: \
         standby descriptors {before} before, {peak} at most while a client waited, {after} \
         after it left; the client: {first:?} after {} ms, the next one: {second:?} after {} \
         ms; /readyz {status} {body:?}",
        first_took.as_millis(),
        second_took.as_millis()
    );
    assert!(
        peak <= before + 16,
        "the standby opened {peak} descriptors (from {before}): it relays to itself\n{}",
        b.log.tail()
    );
    assert!(
        after <= before + 2,
        "{after} descriptors after (from {before})"
    );
    assert_eq!(first, Outcome::Closed, "{}", b.log.tail());
    assert_eq!(second, Outcome::Closed);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("reaches this instance itself"), "{body}");
}

// ---------------------------------------------------------------------------------------

#[test]
fn a_leader_address_that_accepts_but_never_answers_closes_relayed_clients() {
    let _serial = serial();
    let Some(redis) = redis() else {
        return;
    };
    // Connections to it complete (in its queue) and are never answered.
    let hole = TcpListener::bind("127.0.0.1:0").unwrap();
    let advertise = hole.local_addr().unwrap().to_string();
    let a = start(
        &redis,
        "s-hole",
        Listen::Tcp(None),
        &["--advertise", &advertise],
        None,
    );
    wait_served(a.addr, REPLY, &a.log);
    let b = start(&redis, "s-hole", Listen::Tcp(None), &[], None);
    b.wait_log("standing by", REPLY);
    let (first, first_took) = ask(b.addr, b"stats\r\n", Duration::from_secs(15));
    let (second, second_took) = ask(b.addr, b"stats\r\n", Duration::from_secs(15));
    let body = b.readyz_until(503, REPLY);
    eprintln!(
        "leader advertises {advertise}, which accepts and never answers: a client of the \
         standby got {first:?} after {} ms, the next one {second:?} after {} ms; /readyz \
         503 {body:?}",
        first_took.as_millis(),
        second_took.as_millis()
    );
    assert_eq!(first, Outcome::Closed, "{}", b.log.tail());
    assert_eq!(second, Outcome::Closed, "{}", b.log.tail());
    assert!(body.contains("did not answer"), "{body}");
    drop(hole);
}

// ---------------------------------------------------------------------------------------

#[test]
fn readyz_is_503_with_the_reason_while_the_leader_cannot_be_reached() {
    let _serial = serial();
    let Some(redis) = redis() else {
        return;
    };
    // Nobody listens there, and nobody can while the test holds the port.
    let nobody = support::ClosedPort::new();
    let advertise = nobody.addr.to_string();
    let a = start(
        &redis,
        "s-away",
        Listen::Tcp(None),
        &["--advertise", &advertise],
        None,
    );
    wait_served(a.addr, REPLY, &a.log);
    let b = start(&redis, "s-away", Listen::Tcp(None), &[], None);
    let body = b.readyz_until(503, REPLY);
    let (got, took) = ask(b.addr, b"stats\r\n", Duration::from_secs(15));
    eprintln!(
        "leader advertises {advertise} (nobody listens): standby /readyz 503 {body:?}; a \
         client of the standby got {got:?} after {} ms",
        took.as_millis()
    );
    assert!(
        body.contains(&format!("cannot connect to the leader at {advertise}")),
        "{body}"
    );
    assert_eq!(got, Outcome::Closed);
    // The leader itself is ready.
    assert_eq!(a.readyz().0, 200);
}

// ---------------------------------------------------------------------------------------

#[test]
fn a_duplicate_advertise_is_found_and_reported() {
    let _serial = serial();
    let Some(redis) = redis() else {
        return;
    };
    let a = start(&redis, "s-dup", Listen::Tcp(None), &[], None);
    wait_served(a.addr, REPLY, &a.log);
    // The standby is given the leader's address as its own.
    let advertise = a.addr.to_string();
    let b = start(
        &redis,
        "s-dup",
        Listen::Tcp(None),
        &["--advertise", &advertise],
        None,
    );
    let body = b.readyz_until(503, REPLY);
    let (got, took) = ask(b.addr, b"list-tube-used\r\n", REPLY);
    eprintln!(
        "two instances given --advertise {advertise}: the standby's client got {got:?} \
         after {} ms; standby /readyz 503 {body:?}",
        took.as_millis()
    );
    assert_eq!(got, Outcome::Answered("USING default".into()));
    assert!(
        body.contains(&format!("--advertise {advertise} reaches instance")),
        "{body}"
    );
    b.log.wait_for("reaches instance", Duration::from_secs(10));
    let log = b.log.tail();
    assert!(
        log.contains("ERROR") && log.contains("reaches instance"),
        "no error logged:\n{log}"
    );
}

/// `stats` of the instance at `addr`, asked on a new connection: `key`'s value.
fn stat(addr: SocketAddr, key: &str) -> u64 {
    let mut sock = TcpStream::connect(addr).expect("connect");
    sock.set_read_timeout(Some(REPLY)).unwrap();
    sock.write_all(b"stats\r\n").expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let prefix = format!("\n{key}: ");
    loop {
        let n = sock.read(&mut buf).expect("stats answer");
        assert!(n > 0, "closed before the stats document");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some(at) = text.find(&prefix)
            && let Some(end) = text[at + prefix.len()..].find('\n')
        {
            return text[at + prefix.len()..at + prefix.len() + end]
                .trim()
                .parse()
                .expect("a number");
        }
    }
}

/// A standby checks whom the leader's address and its own reach (a greeting, then a
/// close): those connections are no client's, and the leader's `stats` shows none of
/// them, as beanstalkd's would (clients such as fivebeans' suite count them).
#[test]
fn a_standbys_checks_are_not_counted_as_the_leaders_connections() {
    let _serial = serial();
    let Some(redis) = redis() else {
        return;
    };
    let a = start(&redis, "s-count", Listen::Tcp(None), &[], None);
    wait_served(a.addr, REPLY, &a.log);
    let before = stat(a.addr, "total-connections");
    let b = start(&redis, "s-count", Listen::Tcp(None), &[], None);
    // Ready once its check of the leader succeeded; its own --advertise is checked
    // right after: ask /readyz a few times (each may check again) and wait a moment.
    b.readyz_until(200, REPLY);
    for _ in 0..3 {
        let (status, _) = b.readyz();
        assert_eq!(status, 200);
    }
    thread::sleep(Duration::from_millis(500));
    let after = stat(a.addr, "total-connections");
    let current = stat(a.addr, "current-connections");
    eprintln!(
        "leader total-connections {before} before the standby's checks, {after} after \
         (each stats asked on a connection of its own); current-connections {current}"
    );
    // Exactly the test's own `stats` connection more.
    assert_eq!(after, before + 1, "{}", a.log.tail());
    assert_eq!(current, 1);
}

// ---------------------------------------------------------------------------------------

#[test]
fn leader_mode_starts_on_a_unix_socket() {
    let _serial = serial();
    let Some(redis) = redis() else {
        return;
    };
    let dir = support::fresh_dir();
    let path = dir.join("redstalk.sock");
    let started = Instant::now();
    let mut u = start(&redis, "s-unix", Listen::Unix(path.clone()), &[], None);
    let served = unix_put_reserve(&path, started + Duration::from_secs(10));
    assert!(u.is_running());
    // A standby on TCP cannot relay to it: its clients are closed at once.
    let b = start(&redis, "s-unix", Listen::Tcp(None), &[], None);
    b.wait_log("standing by", REPLY);
    let (got, took) = ask(b.addr, b"stats\r\n", Duration::from_secs(15));
    let body = b.readyz_until(503, REPLY);
    eprintln!(
        "leader mode on {}: served a put and a reserve {} ms after the start; a TCP \
         standby's client got {got:?} after {} ms; its /readyz 503 {body:?}",
        path.display(),
        served.as_millis(),
        took.as_millis()
    );
    assert_eq!(got, Outcome::Closed);
    assert!(body.contains("advertises no address"), "{body}");
    b.log
        .wait_for("advertises no address", Duration::from_secs(10));
    drop(u);
    let _ = std::fs::remove_dir_all(dir);
}

/// Put and reserve a job over the unix socket at `path`; how long until it worked.
fn unix_put_reserve(path: &Path, deadline: Instant) -> Duration {
    let start = Instant::now();
    loop {
        let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(REPLY)).unwrap();
        s.write_all(b"put 0 0 60 2\r\nhi\r\nreserve-with-timeout 0\r\n")
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 256];
        while !got.ends_with(b"hi\r\n") {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
        let text = String::from_utf8_lossy(&got).into_owned();
        if text.starts_with("INSERTED ") && text.contains("RESERVED ") {
            return start.elapsed();
        }
        assert!(Instant::now() < deadline, "not served: {text:?}");
        thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------

#[test]
fn a_sigterm_during_the_load_gives_the_lease_up() {
    let _serial = serial();
    let Some(redis) = redis() else {
        return;
    };
    const TUBES: usize = 5_000;
    let mut a = start(&redis, "s-term", Listen::Tcp(None), &[], None);
    wait_served(a.addr, REPLY, &a.log);
    // Many tubes: a load of one round trip and more per tube takes a while.
    let mut c = Client::connect(a.addr, "filler");
    for chunk in (0..TUBES).collect::<Vec<_>>().chunks(500) {
        let mut req = Vec::new();
        for t in chunk {
            req.extend_from_slice(format!("use t{t}\r\nput 0 0 600 1\r\nx\r\n").as_bytes());
        }
        c.send(&req);
        for _ in chunk {
            assert!(c.reply().line.starts_with("USING"));
            assert!(c.reply().line.starts_with("INSERTED"));
        }
    }
    drop(c);
    a.child.kill().unwrap();
    let _ = a.child.wait();
    // B takes the lead once A's lease lapses (its token appears in Redis), and is
    // stopped while it loads.
    let mut b = start(&redis, "s-term", Listen::Tcp(None), &[], None);
    let mut redis_conn = support::namespace::redis_conn(&redis);
    support::lease::wait_for_holder(
        &mut redis_conn,
        "s-term",
        &b.addr.to_string(),
        Duration::from_secs(10),
    );
    support::signal_pid(b.pid(), "TERM");
    let termed = Instant::now();
    let c = start(&redis, "s-term", Listen::Tcp(None), &[], None);
    assert!(
        support::wait_exit(&mut b.child, Duration::from_secs(15)).is_some(),
        "B did not stop"
    );
    let exited = termed.elapsed();
    let token = support::lease::lease_token(&mut redis_conn, "s-term");
    support::lease::wait_for_holder(
        &mut redis_conn,
        "s-term",
        &c.addr.to_string(),
        Duration::from_secs(30),
    );
    let took = termed.elapsed();
    wait_served(c.addr, Duration::from_secs(30), &c.log);
    let served = termed.elapsed();
    let b_log = b.log.final_tail(Duration::from_secs(2));
    eprintln!(
        "SIGTERM to an instance loading {TUBES} tubes: it exited {} ms later, leaving the \
         lease {token:?}; a standby started then took the lead {} ms after the SIGTERM and \
         served {} ms after it, its own load included (lease 1 s)",
        exited.as_millis(),
        took.as_millis(),
        served.as_millis()
    );
    assert!(
        token.as_deref().and_then(support::lease::holder_address) != Some(&b.addr.to_string()),
        "B left its lease behind: {token:?}\n{b_log}"
    );
    assert!(
        b_log.contains("stopped during the load"),
        "the SIGTERM did not land during the load (raise TUBES):\n{b_log}"
    );
}

// ---------------------------------------------------------------------------------------

/// Open `n` connections to `addr`, each sending `request`; then count those answered,
/// closed and silent within a few seconds (all at once, so silent ones cost no more).
fn flood(addr: SocketAddr, n: usize, request: &[u8]) -> (usize, usize, usize, Vec<TcpStream>) {
    let mut socks = Vec::new();
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).expect("connect");
        // A refused connection may already be closed: its request may fail.
        let _ = s.write_all(request);
        socks.push(s);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut answered, mut closed, mut silent) = (0, 0, 0);
    for s in &mut socks {
        match outcome(s, deadline) {
            Outcome::Answered(_) => answered += 1,
            Outcome::Closed => closed += 1,
            Outcome::Silent => silent += 1,
        }
    }
    (answered, closed, silent, socks)
}

#[test]
fn connections_beyond_the_descriptor_limit_are_refused_not_left_waiting() {
    let _serial = serial();
    let Some(redis) = redis() else {
        return;
    };
    // The memory engine, 256 open files.
    let m = start_with(Vec::new(), Listen::Tcp(None), Some(256));
    let (answered, closed, silent, open) = flood(m.addr, 300, b"list-tube-used\r\n");
    eprintln!(
        "memory engine, 256 open files, 300 clients: {answered} answered, {closed} closed \
         at once, {silent} left without an answer"
    );
    let memory = (answered, silent, m.log.tail());
    drop(open);
    // A standby (each relayed client takes two descriptors), 256 open files.
    let a = start(&redis, "s-fds", Listen::Tcp(None), &[], None);
    wait_served(a.addr, REPLY, &a.log);
    let b = start(&redis, "s-fds", Listen::Tcp(None), &[], Some(256));
    b.wait_log("standing by", REPLY);
    let (answered, closed, silent, open) = flood(b.addr, 200, b"list-tube-used\r\n");
    eprintln!(
        "standby, 256 open files, 200 clients: {answered} relayed and answered, {closed} \
         closed at once, {silent} left without an answer"
    );
    assert_eq!(memory.1, 0, "memory engine: {}", memory.2);
    assert!(memory.0 >= 100, "memory engine: {} answered", memory.0);
    assert_eq!(silent, 0, "{}", b.log.tail());
    assert!(answered >= 50, "{answered} answered");
    drop(open);
    // It serves again once they are gone.
    wait_served(b.addr, REPLY, &b.log);
}
