//! Socket activation against the real binaries: listening sockets handed over by
//! systemd (`LISTEN_PID`, `LISTEN_FDS`), through `systemd-socket-activate`, which
//! listens, waits for the first client, then execs the server in its own process with
//! the sockets as descriptors 3, 4, …
//!
//! What the tests prove, on redstalk and on beanstalkd (the reference: Debian's build
//! links libsystemd), every wait bounded:
//! - a TCP socket passed by systemd serves a put/reserve/delete round trip, the client
//!   that triggered the start included;
//! - so does a unix socket; redstalk then leaves the socket file in place when it stops
//!   (it belongs to the socket unit, which keeps listening for the next start);
//! - `-l`/`-p` are ignored when sockets are passed: `-p` naming a port another process
//!   holds does not stop the start, and the server does not listen there;
//! - `LISTEN_PID` naming another process means the sockets are not ours: `-l`/`-p` are
//!   bound as usual;
//! - a passed descriptor that is not a listening socket stops the start (non-zero exit,
//!   a message naming the descriptor), and nothing is bound instead;
//! - redstalk serves every passed socket, where beanstalkd serves only the first
//!   (docs/COMPAT.md).
//!
//! `systemd-socket-activate` comes with systemd (`.ci/test` installs it). Without it
//! the tests are skipped with a warning, or fail when `REDSTALK_REQUIRE_ORACLE=1`; so do
//! the beanstalkd trials without beanstalkd.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use support::{
    Log, beanstalkd_path, find_program, free_port, is_listening_by, oracle_required, redstalk_path,
    spawn_logged, wait_exit, warn_oracle_missing,
};

/// The bound on every wait: a start, a reply, an exit.
const WAIT: Duration = Duration::from_secs(10);

/// How many ports the activator is given to bind before the test gives up.
const BIND_TRIES: usize = 3;

/// `systemd-socket-activate`, or `None` (skip) when it is missing and not required.
fn activator() -> Option<PathBuf> {
    let found = find_program("SYSTEMD_SOCKET_ACTIVATE", "systemd-socket-activate");
    if found.is_none() {
        assert!(
            !oracle_required(),
            "systemd-socket-activate is required (REDSTALK_REQUIRE_ORACLE=1) but not installed"
        );
        eprintln!("!!! systemd-socket-activate is not installed: this test is SKIPPED.");
    }
    found
}

/// The servers to try: beanstalkd (when installed, or required) and redstalk.
fn servers() -> Vec<(&'static str, PathBuf)> {
    let mut all = Vec::new();
    match beanstalkd_path() {
        Some(p) => all.push(("beanstalkd", p)),
        None if oracle_required() => panic!("beanstalkd is required but not installed"),
        None => warn_oracle_missing(),
    }
    all.push(("redstalk", redstalk_path()));
    all
}

/// A server process, its stderr kept; dropping it kills the process.
struct Activated {
    name: String,
    child: Child,
    log: Log,
}

impl Activated {
    /// Spawn `cmd` (which runs the server, or execs it in the same process).
    fn spawn(name: &str, cmd: &mut Command) -> Activated {
        let (child, log) =
            spawn_logged(cmd).unwrap_or_else(|e| panic!("{name}: spawn {cmd:?}: {e}"));
        Activated {
            name: name.to_string(),
            child,
            log,
        }
    }

    /// `activator -l LISTEN… server ARGS…`, returned once the activator itself listens
    /// on every socket (the server starts at the first client, in the activator's
    /// process). `listen` makes the sockets to ask for, afresh on each try: a TCP port
    /// from [`free_port`] can be taken by another process before the activator binds it
    /// (the activator then exits: "Address already in use"), and is tried again on
    /// another port, up to [`BIND_TRIES`] times.
    fn start(
        activator: &Path,
        name: &str,
        server: &Path,
        listen: impl Fn() -> Vec<Listen>,
        args: &[&str],
    ) -> (Self, Vec<Listen>) {
        for _ in 1..BIND_TRIES {
            if let Some(started) = Self::try_start(activator, name, server, listen(), args) {
                return started;
            }
        }
        Self::try_start(activator, name, server, listen(), args)
            .unwrap_or_else(|| panic!("{name}: the activator could not bind {BIND_TRIES} times"))
    }

    /// One try of [`Activated::start`]; `None` when a port was taken before the
    /// activator could bind it.
    fn try_start(
        activator: &Path,
        name: &str,
        server: &Path,
        listen: Vec<Listen>,
        args: &[&str],
    ) -> Option<(Self, Vec<Listen>)> {
        let mut cmd = Command::new(activator);
        for l in &listen {
            cmd.arg("-l").arg(l.spec());
        }
        let mut srv = Activated::spawn(name, cmd.arg(server).args(args));
        let started = Instant::now();
        // Its own sockets: another process listening on the same port (taken between
        // `free_port` and the activator's bind) is not proof that the activator is.
        while !listen.iter().all(|l| l.ready_in(srv.pid())) {
            if let Ok(Some(status)) = srv.child.try_wait() {
                let log = srv.log.final_tail(WAIT);
                if log.contains("Address already in use") {
                    eprintln!(
                        "{name}: a port was taken before the activator bound it; trying another"
                    );
                    return None;
                }
                panic!("{name}: the activator exited with {status}: {log}");
            }
            assert!(
                started.elapsed() < WAIT,
                "{name}: not listening: {}",
                srv.log.tail()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        Some((srv, listen))
    }

    /// A client connection to the TCP `port` this server listens on; on failure, the
    /// panic says whether the server still runs, and what it logged.
    fn tcp(&mut self, port: u16) -> TcpStream {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => {
                s.set_read_timeout(Some(WAIT)).unwrap();
                s
            }
            Err(e) => {
                let state = match self.child.try_wait() {
                    Ok(Some(status)) => format!("the server exited with {status}"),
                    Ok(None) => format!(
                        "the server runs; listening there itself: {}",
                        is_listening_by(self.pid(), port)
                    ),
                    Err(e) => format!("its state is unknown: {e}"),
                };
                panic!(
                    "{}: connect to port {port}: {e}; {state}; log:\n{}",
                    self.name,
                    self.log.tail()
                )
            }
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Activated {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A socket for the activator to listen on.
enum Listen {
    Tcp(u16),
    Unix(PathBuf),
}

impl Listen {
    fn spec(&self) -> String {
        match self {
            Listen::Tcp(port) => format!("127.0.0.1:{port}"),
            Listen::Unix(path) => path.display().to_string(),
        }
    }

    /// Whether process `pid` listens here (a unix socket's path is this test's own).
    fn ready_in(&self, pid: u32) -> bool {
        match self {
            Listen::Tcp(port) => is_listening_by(pid, *port),
            Listen::Unix(path) => is_unix_listening(path),
        }
    }

    fn port(&self) -> u16 {
        match self {
            Listen::Tcp(port) => *port,
            Listen::Unix(path) => panic!("{} is not a TCP socket", path.display()),
        }
    }
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket())
}

/// Whether a socket listens at `path` (`/proc/net/unix`: flags `00010000`, accepting).
/// The file alone is not enough: the activator binds (which makes it) before it
/// listens, and a connect in between is refused (seen in CI).
fn is_unix_listening(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else {
        return is_socket(path);
    };
    let want = path.display().to_string();
    table.lines().skip(1).any(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        cols.get(3) == Some(&"00010000") && cols.get(7) == Some(&want.as_str())
    })
}

/// A fresh unix socket path for this test process.
fn sock_path(tag: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("redstalk-act-{}-{tag}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn unix(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).expect("connect");
    s.set_read_timeout(Some(WAIT)).unwrap();
    s
}

/// put, reserve, delete over one connection (`w` writes it, `r` reads it); panics with
/// the server's log on any unexpected reply.
fn round_trip(server: &Activated, mut w: impl Write, r: impl Read, how: &str) {
    let mut r = BufReader::new(r);
    let mut line = || {
        let mut l = String::new();
        match r.read_line(&mut l) {
            Ok(n) if n > 0 => l.trim_end_matches("\r\n").to_string(),
            end => panic!(
                "{} over {how}: no reply ({end:?}); log:\n{}",
                server.name,
                server.log.tail()
            ),
        }
    };
    w.write_all(b"put 0 0 60 5\r\nhello\r\n").unwrap();
    let inserted = line();
    let id = inserted
        .strip_prefix("INSERTED ")
        .unwrap_or_else(|| panic!("{} over {how}: put answered {inserted:?}", server.name));
    w.write_all(b"reserve\r\n").unwrap();
    assert_eq!(
        line(),
        format!("RESERVED {id} 5"),
        "{} over {how}",
        server.name
    );
    assert_eq!(line(), "hello", "{} over {how}", server.name);
    w.write_all(format!("delete {id}\r\n").as_bytes()).unwrap();
    assert_eq!(line(), "DELETED", "{} over {how}", server.name);
}

fn tcp_round_trip(server: &mut Activated, port: u16) {
    let s = server.tcp(port);
    round_trip(server, &s, &s, &format!("tcp port {port}"));
}

fn unix_round_trip(server: &Activated, path: &Path) {
    let s = unix(path);
    round_trip(server, &s, &s, &format!("unix socket {}", path.display()));
}

#[test]
fn a_tcp_socket_passed_by_systemd_is_served() {
    let Some(activator) = activator() else { return };
    for (name, server) in servers() {
        let (mut srv, listen) = Activated::start(
            &activator,
            name,
            &server,
            || vec![Listen::Tcp(free_port())],
            &[],
        );
        let port = listen[0].port();
        tcp_round_trip(&mut srv, port);
        // A second client on the same socket, after the start.
        tcp_round_trip(&mut srv, port);
    }
}

#[test]
fn a_unix_socket_passed_by_systemd_is_served() {
    let Some(activator) = activator() else { return };
    for (name, server) in servers() {
        let path = sock_path(&format!("unix-{name}"));
        let listen = || vec![Listen::Unix(path.clone())];
        let (srv, _) = Activated::start(&activator, name, &server, listen, &[]);
        unix_round_trip(&srv, &path);
        unix_round_trip(&srv, &path);
        drop(srv);
        let _ = std::fs::remove_file(&path);
    }
}

#[test]
fn redstalk_leaves_a_passed_unix_socket_file_in_place_when_it_stops() {
    let Some(activator) = activator() else { return };
    let path = sock_path("kept");
    let listen = || vec![Listen::Unix(path.clone())];
    let (mut srv, _) = Activated::start(&activator, "redstalk", &redstalk_path(), listen, &[]);
    unix_round_trip(&srv, &path);
    support::signal_pid(srv.pid(), "TERM");
    let status = wait_exit(&mut srv.child, WAIT);
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM: {status:?}; log:\n{}",
        srv.log.tail()
    );
    assert!(
        is_socket(&path),
        "redstalk removed the socket file the socket unit owns"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn listen_flags_are_ignored_when_sockets_are_passed() {
    let Some(activator) = activator() else { return };
    for (name, server) in servers() {
        // Binding -p would fail: another socket already listens there.
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken_port = taken.local_addr().unwrap().port().to_string();
        let args = ["-l", "127.0.0.1", "-p", &taken_port];
        let (mut srv, listen) = Activated::start(
            &activator,
            name,
            &server,
            || vec![Listen::Tcp(free_port())],
            &args,
        );
        tcp_round_trip(&mut srv, listen[0].port());
        drop(taken);
        // The server's own sockets only: once dropped, the port is free for any other
        // test running beside this one to take.
        assert!(
            !is_listening_by(srv.child.id(), taken_port.parse().unwrap()),
            "{name} bound -p as well"
        );
        assert!(
            matches!(srv.child.try_wait(), Ok(None)),
            "{name} exited; log:\n{}",
            srv.log.tail()
        );
    }
}

#[test]
fn sockets_passed_to_another_process_are_not_used() {
    for (name, server) in servers() {
        let port = free_port();
        // PID 1 is never us: the variables were meant for another process.
        let mut srv = Activated::spawn(
            name,
            Command::new(&server)
                .args(["-l", "127.0.0.1", "-p", &port.to_string()])
                .env("LISTEN_PID", "1")
                .env("LISTEN_FDS", "1"),
        );
        let started = Instant::now();
        while !is_listening_by(srv.child.id(), port) {
            assert!(
                started.elapsed() < WAIT,
                "{name} did not bind -l/-p; log:\n{}",
                srv.log.tail()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        tcp_round_trip(&mut srv, port);
    }
}

#[test]
fn a_passed_descriptor_that_is_not_a_listening_socket_stops_the_start() {
    for (name, server) in servers() {
        let port = free_port();
        // Descriptor 3 is /dev/null, and LISTEN_PID is the shell's pid, which `exec`
        // hands to the server.
        let mut srv = Activated::spawn(
            name,
            Command::new("sh")
                .arg("-c")
                .arg(r#"exec 3</dev/null; export LISTEN_PID=$$ LISTEN_FDS=1; exec "$0" "$@""#)
                .arg(&server)
                .args(["-l", "127.0.0.1", "-p", &port.to_string()]),
        );
        let status = wait_exit(&mut srv.child, WAIT);
        assert!(
            status.is_some_and(|s| !s.success()),
            "{name}: {status:?}; log:\n{}",
            srv.log.tail()
        );
        if name == "redstalk" {
            let log = srv.log.final_tail(WAIT);
            assert!(log.contains("descriptor 3"), "{log}");
        }
    }
}

#[test]
fn redstalk_serves_every_passed_socket() {
    let Some(activator) = activator() else { return };
    let path = sock_path("both");
    let listen = || vec![Listen::Tcp(free_port()), Listen::Unix(path.clone())];
    let (mut srv, listen) = Activated::start(&activator, "redstalk", &redstalk_path(), listen, &[]);
    let port = listen[0].port();
    tcp_round_trip(&mut srv, port);
    unix_round_trip(&srv, &path);
    // Both on one server: a job put over one socket is seen over the other.
    let t = srv.tcp(port);
    let mut u = unix(&path);
    (&t).write_all(b"put 0 0 60 3\r\nabc\r\n").unwrap();
    let mut got = String::new();
    BufReader::new(&t).read_line(&mut got).unwrap();
    let id = got
        .trim_end()
        .strip_prefix("INSERTED ")
        .unwrap()
        .to_string();
    u.write_all(format!("peek {id}\r\n").as_bytes()).unwrap();
    let mut found = String::new();
    BufReader::new(&u).read_line(&mut found).unwrap();
    assert_eq!(found.trim_end(), format!("FOUND {id} 3"));
    drop(srv);
    let _ = std::fs::remove_file(&path);
}

/// A passed socket named by `--listen fd:NAME` gets that listener's policy (here a
/// role that may do nothing); the others stay open.
#[test]
fn a_passed_socket_named_by_listen_gets_its_policy() {
    let Some(activator) = activator() else { return };
    let dir =
        std::env::temp_dir().join(format!("redstalk-activation-roles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let roles = dir.join("roles.toml");
    std::fs::write(&roles, "[roles.nothing]\n").unwrap();
    let roles = roles.display().to_string();
    let (open, locked) = (free_port(), free_port());
    let mut cmd = Command::new(&activator);
    cmd.args([
        "-l",
        &format!("127.0.0.1:{open}"),
        "-l",
        &format!("127.0.0.1:{locked}"),
    ])
    .arg("--fdname=open:locked")
    .arg(redstalk_path())
    .args(["--listen", "fd:locked,role=nothing", "--roles", &roles]);
    let mut srv = Activated::spawn("redstalk", &mut cmd);
    let started = Instant::now();
    while !(is_listening_by(srv.pid(), open) && is_listening_by(srv.pid(), locked)) {
        assert!(
            started.elapsed() < WAIT,
            "not listening: {}",
            srv.log.tail()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let ask = |s: TcpStream| {
        (&s).write_all(b"list-tubes\r\n").unwrap();
        let mut line = String::new();
        BufReader::new(&s).read_line(&mut line).unwrap();
        line.trim_end().to_string()
    };
    assert_eq!(ask(srv.tcp(locked)), "FORBIDDEN");
    assert!(ask(srv.tcp(open)).starts_with("OK "));
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}
