//! Test support shared by the protocol runner, the differential test and the
//! robustness tests: starting a beanstalk server (the real beanstalkd or redstalk) on a
//! free loopback port and stopping it again, and (in [`yaml`]) the YAML normalisation
//! applied before replies are compared. [`client`] is a tiny blocking beanstalk client
//! for tests that drive real processes, [`redis`] a private `redis-server` ([`cluster`]:
//! six of them as a Redis Cluster), [`load`] a
//! producer/worker load that keeps a ledger of every job through crashes.
//!
//! Invariants: every server is a child process owned by a [`ServerProc`]; dropping it
//! kills the process, so a failing test never leaves a server behind.

#![allow(dead_code)]

pub mod certs;
pub mod cgroup;
pub mod client;
pub mod cluster;
pub mod history;
pub mod keyed;
pub mod layouts;
pub mod lease;
pub mod load;
pub mod namespace;
pub mod netfault;
pub mod netprocs;
pub mod policies;
pub mod redis;
pub mod rng;
pub mod sentinel;
pub mod tls;
pub mod tmpfs;
pub mod workload;
pub mod yaml;

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Tests of one binary that take this lock run one at a time, so their timing figures
/// (and their processes' load) do not disturb each other.
pub fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Send signal `sig` (a name: `KILL`, `STOP`, `CONT`, …) to process `pid`; panics if
/// `kill` fails.
pub fn signal_pid(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "kill -{sig} {pid}");
}

/// One field (in kB) of `/proc/<pid>/status` (`VmRSS`, `VmHWM`, …; Linux).
pub fn proc_status_kb(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// The values at the given quantiles (0.0..=1.0, nearest rank) of `samples`; `samples`
/// must not be empty.
pub fn quantiles(samples: &[Duration], ps: &[f64]) -> Vec<Duration> {
    let mut s = samples.to_vec();
    s.sort();
    ps.iter()
        .map(|p| s[((s.len() - 1) as f64 * p).round() as usize])
        .collect()
}

/// A server's stderr, drained by a thread (so a chatty server never blocks on a full
/// pipe) and kept, its last 256 KiB, for failure messages.
#[derive(Clone, Default)]
pub struct Log(Arc<LogState>);

#[derive(Default)]
pub struct LogState {
    text: Mutex<Vec<u8>>,
    /// The pipe reached its end: every byte the process wrote is in `text`.
    closed: std::sync::atomic::AtomicBool,
}

impl Log {
    /// Keep draining `pipe` (a child's stderr) into a new log, on a thread of its own.
    pub fn drain(mut pipe: impl Read + Send + 'static) -> Log {
        let log = Log::default();
        let kept = log.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                let mut buf = kept.0.text.lock().unwrap_or_else(|e| e.into_inner());
                buf.extend_from_slice(&chunk[..n]);
                let excess = buf.len().saturating_sub(256 * 1024);
                buf.drain(..excess);
            }
            kept.0
                .closed
                .store(true, std::sync::atomic::Ordering::SeqCst);
        });
        log
    }

    /// The last few kilobytes, as text.
    pub fn tail(&self) -> String {
        let buf = self.0.text.lock().unwrap_or_else(|e| e.into_inner());
        let from = buf.len().saturating_sub(3000);
        String::from_utf8_lossy(&buf[from..]).into_owned()
    }

    /// Everything kept (the last 256 KiB), as text.
    pub fn text(&self) -> String {
        let buf = self.0.text.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Wait until the log says `what`, up to `within`; fails the test with the log's
    /// tail otherwise. The log is read on a thread of its own, so a line the process
    /// wrote before an event the test saw may still be on its way.
    pub fn wait_for(&self, what: &str, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.text().contains(what) {
            assert!(
                Instant::now() < deadline,
                "the log did not say {what:?} within {within:?}:\n{}",
                self.tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// [`Log::tail`] once the pipe has ended (the process exited and its last words
    /// were read), or after `timeout` at the latest: a process that just exited may
    /// have written its error a moment before the drain thread read it.
    pub fn final_tail(&self, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        while !self.0.closed.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.tail()
    }
}

/// Spawn `cmd` with no stdin or stdout and its stderr drained into a [`Log`].
pub fn spawn_logged(cmd: &mut Command) -> std::io::Result<(Child, Log)> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let log = child.stderr.take().map(Log::drain).unwrap_or_default();
    Ok((child, log))
}

/// Which server a trial talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    /// Debian's beanstalkd, the reference oracle.
    Beanstalkd,
    /// redstalk on its in-memory engine.
    Memory,
    /// redstalk on the Redis engine in shared mode (a Lua script per command), with a
    /// private redis-server.
    Redis,
    /// redstalk in Redis leader mode (memory engine, batches persisted to Redis), with
    /// a private redis-server.
    Leader,
    /// redstalk with `-b DIR` (memory engine, batches written to a local log), in a
    /// fresh directory removed with the server.
    Binlog,
}

impl ServerKind {
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Beanstalkd => "beanstalkd",
            ServerKind::Memory => "memory",
            ServerKind::Redis => "redis",
            ServerKind::Leader => "leader",
            ServerKind::Binlog => "binlog",
        }
    }

    /// The `--redis-mode` of a kind that keeps its jobs in Redis.
    pub fn redis_mode(self) -> Option<&'static str> {
        match self {
            ServerKind::Redis => Some("shared"),
            ServerKind::Leader => Some("leader"),
            _ => None,
        }
    }

    /// All kinds the suites run against.
    pub fn all() -> Vec<ServerKind> {
        vec![
            ServerKind::Beanstalkd,
            ServerKind::Memory,
            ServerKind::Redis,
            ServerKind::Leader,
            ServerKind::Binlog,
        ]
    }
}

/// A program: the path in environment variable `env`, or the first `name` on PATH.
pub fn find_program(env: &str, name: &str) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// Path of the beanstalkd binary: `$BEANSTALKD` or the first `beanstalkd` on PATH.
pub fn beanstalkd_path() -> Option<PathBuf> {
    find_program("BEANSTALKD", "beanstalkd")
}

/// True when the README's test command runs us: a missing oracle is then a failure,
/// not a skip.
pub fn oracle_required() -> bool {
    std::env::var("REDSTALK_REQUIRE_ORACLE").is_ok_and(|v| v == "1")
}

/// Say loudly, once per process, that the oracle is missing.
pub fn warn_oracle_missing() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        eprintln!();
        eprintln!("!!! beanstalkd is not installed: the oracle trials are SKIPPED.");
        eprintln!("!!! The README's test command installs it and skips nothing.");
        eprintln!();
    });
}

pub fn redstalk_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_redstalk"))
}

/// A free TCP port on 127.0.0.1, taken below the kernel's ephemeral range.
///
/// A port the kernel hands out for `bind(0)` comes from the range it also gives every
/// outgoing connection, so a server's own connection to Redis could take the port a
/// server started beside it was about to listen on (seen in CI: four instances started
/// at once, one exited with "Address already in use"). Below the range only another
/// listener can take it. Each process walks the ports from its own offset, so two calls
/// here never return the same port while any other is free; a port found bound is
/// skipped. [`ServerProc::start`] still retries around the window before the server
/// binds it.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 10_000;
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let end = ephemeral_low().max(FIRST + 1_000);
    let span = end - FIRST;
    let offset = std::process::id().wrapping_mul(7_919);
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + offset.wrapping_add(n) % span;
        let port = u16::try_from(port).expect("below the ephemeral range");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

/// A port on 127.0.0.1 that refuses connections for as long as this value lives: a
/// socket bound to it that never listens. A port from [`free_port`] that is merely
/// unused can be taken by another process's listener before the test connects (seen in
/// CI: an "unreachable" leader address answered with some HTTP server's 400).
pub struct ClosedPort {
    _socket: socket2::Socket,
    pub addr: SocketAddr,
}

impl ClosedPort {
    pub fn new() -> Self {
        use socket2::{Domain, Socket, Type};
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a TCP socket");
        // No SO_REUSEADDR: nobody else can bind the port while it is held.
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        socket.bind(&any.into()).expect("bind an ephemeral port");
        let addr = socket
            .local_addr()
            .expect("local addr")
            .as_socket()
            .expect("an IP address");
        Self {
            _socket: socket,
            addr,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}

impl Default for ClosedPort {
    fn default() -> Self {
        Self::new()
    }
}

/// True when some socket listens on 127.0.0.1:`port` (or the wildcard address).
pub fn is_listening(port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        // Not Linux: fall back to a probe connection.
        return TcpStream::connect(("127.0.0.1", port)).is_ok();
    };
    let want = [
        format!("0100007F:{port:04X}"),
        format!("00000000:{port:04X}"),
    ];
    table.lines().skip(1).any(|line| {
        let mut cols = line.split_whitespace();
        let local = cols.nth(1).unwrap_or("");
        let state = cols.nth(1).unwrap_or("");
        state == "0A" && want.iter().any(|w| w == local)
    })
}

/// True when process `pid` itself listens on 127.0.0.1:`port` (or the wildcard
/// address). [`is_listening`] alone is not proof that a just-spawned server is ready:
/// between [`free_port`] and the server's bind another test's process can take the same
/// port, and a server that first connects to Redis binds late, so the socket table
/// would show the other process's listener (seen in CI as a refused first connection
/// once that process exited). Not Linux: [`is_listening`].
pub fn is_listening_by(pid: u32, port: u16) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else {
        return is_listening(port);
    };
    let want = [
        format!("0100007F:{port:04X}"),
        format!("00000000:{port:04X}"),
    ];
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let listening = cols.get(3) == Some(&"0A");
            let ours = cols.get(1).is_some_and(|l| want.iter().any(|w| w == l));
            let inode = cols.get(9)?;
            (listening && ours).then(|| format!("socket:[{inode}]"))
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}

/// Wait until `child` itself listens on 127.0.0.1:`port`; fails the test, showing
/// `log`, when it exits first or `within` passes.
pub fn wait_child_listening(child: &mut Child, port: u16, within: Duration, log: &Log) {
    let start = Instant::now();
    while !is_listening_by(child.id(), port) {
        assert!(
            start.elapsed() < within && matches!(child.try_wait(), Ok(None)),
            "the server did not listen on port {port}: {}",
            log.tail()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Wait up to `timeout` for `child` to exit by itself. `None` while it still runs (it
/// is then left running).
pub fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// redstalk on an existing Redis under `prefix`, its stderr captured (panics if it
/// does not start).
pub fn redstalk_on(redis: &redis::RedisServer, prefix: &str) -> (ServerProc, Log) {
    redstalk_on_as(ServerKind::Redis, redis, prefix, &[])
}

/// The lease leader-mode tests give their instances, so a failover takes about a
/// second (the default is 3 s).
pub const TEST_LEASE_MS: &str = "1000";

/// The arguments that put redstalk in Redis `mode` (`shared` or `leader`) on `url`
/// under `prefix`; leader mode gets the tests' short lease.
pub fn redis_args(url: &str, prefix: &str, mode: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        "--redis",
        url,
        "--redis-prefix",
        prefix,
        "--redis-mode",
        mode,
    ]
    .map(String::from)
    .to_vec();
    if mode == "leader" {
        args.extend(["--redis-lease".into(), TEST_LEASE_MS.into()]);
    }
    args
}

/// redstalk in `kind`'s Redis mode (shared or leader) on an existing Redis under
/// `prefix`, with `extra` arguments; leader mode gets the tests' short lease.
pub fn redstalk_on_as(
    kind: ServerKind,
    redis: &redis::RedisServer,
    prefix: &str,
    extra: &[&str],
) -> (ServerProc, Log) {
    let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    if kind == ServerKind::Leader && !extra.contains(&"--redis-lease") {
        args.extend(["--redis-lease".to_string(), TEST_LEASE_MS.to_string()]);
    }
    let mut srv = ServerProc::start_on_redis_as(kind, &redis.url(), prefix, &args)
        .unwrap_or_else(|e| panic!("start redstalk ({}) on Redis: {e}", kind.name()));
    let log = srv.capture_stderr();
    (srv, log)
}

/// Wait until `addr` (connected to anew as needed) answers `stats` from a leader,
/// directly or relayed; the time it took. Fails the test after `within`, showing `log`.
pub fn wait_served(addr: SocketAddr, within: Duration, log: &Log) -> Duration {
    let start = Instant::now();
    loop {
        if let Ok(mut c) = client::Client::try_connect(addr, "probe")
            && let Ok(r) = c.try_call(b"stats\r\n", Duration::from_millis(500))
            && r.word() == "OK"
        {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "not served within {within:?}\n{}",
            log.tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running server process.
pub struct ServerProc {
    pub kind: ServerKind,
    pub addr: SocketAddr,
    child: Child,
    /// The private Redis of a `Redis` server; dropped (killed) after the server.
    pub redis: Option<redis::RedisServer>,
    /// The log directory of a `Binlog` server; removed after the server.
    pub binlog_dir: Option<PathBuf>,
}

impl ServerProc {
    /// Start a server of `kind` with extra beanstalkd-style arguments.
    /// Returns `Ok(None)` when the oracle is missing and not required.
    pub fn start(kind: ServerKind, extra_args: &[String]) -> Result<Option<ServerProc>, String> {
        let program = match kind {
            ServerKind::Beanstalkd => match beanstalkd_path() {
                Some(p) => p,
                None if oracle_required() => {
                    return Err(
                        "beanstalkd is required (REDSTALK_REQUIRE_ORACLE=1) but not installed"
                            .into(),
                    );
                }
                None => {
                    warn_oracle_missing();
                    return Ok(None);
                }
            },
            ServerKind::Memory | ServerKind::Redis | ServerKind::Leader | ServerKind::Binlog => {
                redstalk_path()
            }
        };
        let mut redis_server = None;
        let mut extra_args = extra_args.to_vec();
        let binlog_dir = (kind == ServerKind::Binlog).then(fresh_dir);
        if let Some(dir) = &binlog_dir {
            extra_args.extend(["-b".to_string(), dir.display().to_string()]);
        }
        if let Some(mode) = kind.redis_mode() {
            if redis::redis_server_path().is_none() {
                if oracle_required() {
                    return Err(
                        "redis-server is required (REDSTALK_REQUIRE_ORACLE=1) but not installed"
                            .into(),
                    );
                }
                eprintln!(
                    "!!! redis-server is not installed: the Redis-engine trials are SKIPPED."
                );
                return Ok(None);
            }
            let r = redis::RedisServer::start()?;
            extra_args.extend([
                "--redis".to_string(),
                r.url(),
                "--redis-prefix".into(),
                "t".into(),
                "--redis-mode".into(),
                mode.into(),
            ]);
            redis_server = Some(r);
        }
        let mut server = Self::spawn_listening(kind, &program, &extra_args, redis_server)?;
        server.binlog_dir = binlog_dir;
        Ok(Some(server))
    }

    /// Start redstalk on an existing Redis (for several instances sharing one queue,
    /// or a redstalk restarted on the same data).
    pub fn start_on_redis(
        redis_url: &str,
        prefix: &str,
        extra_args: &[String],
    ) -> Result<ServerProc, String> {
        Self::start_on_redis_as(ServerKind::Redis, redis_url, prefix, extra_args)
    }

    /// [`ServerProc::start_on_redis`] in the mode of `kind` (Redis or Leader).
    pub fn start_on_redis_as(
        kind: ServerKind,
        redis_url: &str,
        prefix: &str,
        extra_args: &[String],
    ) -> Result<ServerProc, String> {
        let mut args = vec![
            "--redis".to_string(),
            redis_url.to_string(),
            "--redis-prefix".into(),
            prefix.into(),
            "--redis-mode".into(),
            kind.redis_mode().unwrap_or("shared").into(),
        ];
        args.extend_from_slice(extra_args);
        Self::spawn_listening(kind, &redstalk_path(), &args, None)
    }

    /// Spawn `program` on a free port and wait until it listens.
    fn spawn_listening(
        kind: ServerKind,
        program: &std::path::Path,
        extra_args: &[String],
        mut redis_server: Option<redis::RedisServer>,
    ) -> Result<ServerProc, String> {
        let mut last_err = String::new();
        for _attempt in 0..5 {
            let port = free_port();
            let mut cmd = Command::new(program);
            cmd.arg("-l")
                .arg("127.0.0.1")
                .arg("-p")
                .arg(port.to_string());
            cmd.args(extra_args);
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("spawn {}: {e}", program.display()))?;
            let addr: SocketAddr = ([127, 0, 0, 1], port).into();
            let started = Instant::now();
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    let mut stderr = String::new();
                    if let Some(mut e) = child.stderr.take() {
                        let _ = e.read_to_string(&mut stderr);
                    }
                    last_err = format!("{} exited with {status}: {stderr}", kind.name());
                    break;
                }
                // Readiness is read from the kernel's socket table rather than probed
                // with a connection, so `total-connections` starts at 0 in every case;
                // the listener must be the child's own (see `is_listening_by`).
                if is_listening_by(child.id(), port) {
                    return Ok(ServerProc {
                        kind,
                        addr,
                        child,
                        redis: redis_server.take(),
                        binlog_dir: None,
                    });
                }
                if started.elapsed() > Duration::from_secs(10) {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_err = format!("{} did not listen on {addr} within 10 s", kind.name());
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Err(last_err)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait up to `timeout` for the process to exit by itself. `None` while it still
    /// runs (it is then left running; dropping the `ServerProc` kills it).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_exit(&mut self.child, timeout)
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Take the server's stderr pipe (piped by [`ServerProc::start`]). Whoever takes it
    /// should keep draining it, or a chatty server could block on a full pipe.
    pub fn take_stderr(&mut self) -> Option<std::process::ChildStderr> {
        self.child.stderr.take()
    }

    /// Drain the server's stderr into a [`Log`] from now on (empty if already taken).
    pub fn capture_stderr(&mut self) -> Log {
        match self.take_stderr() {
            Some(err) => Log::drain(err),
            None => Log::default(),
        }
    }

    /// Send a signal by name (`USR1`, `TERM`, …) to the server process.
    pub fn signal(&self, name: &str) -> Result<(), String> {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .map_err(|e| format!("run kill: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill -{name} failed: {status}"))
        }
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(dir) = &self.binlog_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// A new, empty directory under the system's temporary directory, unique to this
/// process and call (the caller removes it).
pub fn fresh_dir() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("redstalk-test-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create a temporary directory");
    dir
}
