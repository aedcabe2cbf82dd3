//! The process's identity and memory limits, against the real binaries.
//!
//! What the tests prove:
//! - `-u nobody`, started by root that holds supplementary groups (0, 4, 42): afterwards
//!   the process's uid, gid and supplementary groups are nobody's own, as the group
//!   database gives them (`id -G nobody`), none of root's; and it serves. (Needs root;
//!   skipped otherwise.)
//! - under an address-space limit too small for a 1 GiB body (`prlimit --as`), with
//!   `-z 1073741824`, three connections that each send a 1 GiB put are each answered
//!   OUT_OF_MEMORY once their body has been sent, as beanstalkd answers them; the server
//!   keeps running, a job put before is still there, each of those connections stays in
//!   step (its next command is answered), and no job id was used up. The same scenario
//!   runs against beanstalkd, proving the replies.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use support::{
    Log, beanstalkd_path, free_port, is_listening_by, oracle_required, redstalk_path, spawn_logged,
    warn_oracle_missing,
};

/// The bound on a start and on an ordinary reply.
const WAIT: Duration = Duration::from_secs(10);

/// A server process; dropping it kills the process.
struct Proc {
    name: String,
    child: Child,
    log: Log,
    port: u16,
}

impl Proc {
    /// Run `argv` (a command that ends up exec'ing the server, so the pid is the
    /// server's) followed by `-l 127.0.0.1 -p PORT` and `args`, once it listens.
    fn start(name: &str, argv: &[&str], args: &[&str]) -> Proc {
        let port = free_port();
        let (child, log) = spawn_logged(
            Command::new(argv[0])
                .args(&argv[1..])
                .args(["-l", "127.0.0.1", "-p", &port.to_string()])
                .args(args),
        )
        .unwrap_or_else(|e| panic!("{name}: spawn {argv:?}: {e}"));
        let mut p = Proc {
            name: name.to_string(),
            child,
            log,
            port,
        };
        let started = Instant::now();
        while !is_listening_by(p.child.id(), port) {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("{name} exited with {status}: {}", p.log.tail());
            }
            assert!(
                started.elapsed() < WAIT,
                "{name} not listening: {}",
                p.log.tail()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        p
    }

    fn connect(&self) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(WAIT)).unwrap();
        Conn {
            reader: BufReader::new(s.try_clone().unwrap()),
            sock: s,
        }
    }

    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} died: {status}; log:\n{}", self.name, self.log.tail());
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Conn {
    sock: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Conn {
    fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.sock.write_all(bytes)
    }

    /// The next reply line, without its CRLF.
    fn line(&mut self) -> std::io::Result<String> {
        let mut l = String::new();
        match self.reader.read_line(&mut l)? {
            0 => Err(std::io::ErrorKind::UnexpectedEof.into()),
            _ => Ok(l.trim_end_matches("\r\n").to_string()),
        }
    }

    fn call(&mut self, request: &str) -> String {
        self.send(request.as_bytes()).unwrap();
        self.line().unwrap()
    }
}

/// The output of `id FLAG nobody`, split into numbers.
fn id_of_nobody(flag: &str) -> Vec<u32> {
    let out = Command::new("id").args([flag, "nobody"]).output().unwrap();
    assert!(out.status.success(), "id {flag} nobody: {out:?}");
    let mut ids: Vec<u32> = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

/// The numbers of a `/proc/<pid>/status` line (`Uid:`, `Gid:`, `Groups:`).
fn status_ids(pid: u32, field: &str) -> Vec<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"));
    let mut ids: Vec<u32> = line
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    if field == "Groups" {
        ids.sort_unstable();
    }
    ids
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

#[test]
fn dropping_to_a_user_keeps_none_of_roots_groups() {
    if !is_root() {
        eprintln!("!!! not running as root: the -u test is SKIPPED.");
        return;
    }
    let redstalk = redstalk_path();
    // setpriv (util-linux) gives the process root's groups plus two others, as a login
    // shell or a service manager might; then execs redstalk in the same process.
    let argv = [
        "setpriv",
        "--groups",
        "0,4,42",
        "--",
        redstalk.to_str().unwrap(),
        "-u",
        "nobody",
    ];
    let srv = Proc::start("redstalk -u nobody", &argv, &[]);
    let pid = srv.child.id();
    let (uid, gid) = (id_of_nobody("-u")[0], id_of_nobody("-g")[0]);
    assert_eq!(
        status_ids(pid, "Uid"),
        [uid; 4],
        "real, effective, saved, fs uid"
    );
    assert_eq!(
        status_ids(pid, "Gid"),
        [gid; 4],
        "real, effective, saved, fs gid"
    );
    let groups = status_ids(pid, "Groups");
    assert_eq!(groups, id_of_nobody("-G"), "supplementary groups");
    assert!(!groups.contains(&0), "still in root's group: {groups:?}");
    let mut c = srv.connect();
    assert_eq!(c.call("put 0 0 60 2\r\nhi\r\n"), "INSERTED 1");
}

/// A put body larger than the address-space limit below leaves room for.
const HUGE: usize = 1_073_741_000;
/// The address-space limit: the servers need a few tens of MiB; no 1 GiB body fits.
const ADDRESS_SPACE: u64 = 768 << 20;

/// Send a put of `HUGE` bytes over a new connection; its reply, then the reply to a
/// `peek 1` on the same connection (proving it is still in step).
fn huge_put(srv: &Proc) -> Result<(String, String), String> {
    let mut c = srv.connect();
    c.sock
        .set_write_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let fail = |what: &str, e: std::io::Error| format!("{what}: {e}");
    c.send(format!("put 0 0 10 {HUGE}\r\n").as_bytes())
        .map_err(|e| fail("header", e))?;
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0;
    while sent < HUGE {
        let n = chunk.len().min(HUGE - sent);
        c.send(&chunk[..n])
            .map_err(|e| fail(&format!("body after {sent} bytes"), e))?;
        sent += n;
    }
    c.send(b"\r\n").map_err(|e| fail("CRLF", e))?;
    // The whole body must be read (discarded) before the reply: allow for a slow machine.
    c.sock
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let reply = c.line().map_err(|e| fail("reply", e))?;
    c.send(b"peek 1\r\n").map_err(|e| fail("peek", e))?;
    let peek = c.line().map_err(|e| fail("peek reply", e))?;
    Ok((reply, peek))
}

/// The scenario of the module header on the server that `argv` starts.
fn out_of_memory_keeps_the_server_serving(name: &str, server: &Path) {
    let limit = format!("--as={ADDRESS_SPACE}");
    let argv = ["prlimit", &limit, "--", server.to_str().unwrap()];
    let mut srv = Proc::start(name, &argv, &["-z", "1073741824"]);
    let mut first = srv.connect();
    assert_eq!(first.call("put 0 0 60 5\r\nhello\r\n"), "INSERTED 1");
    let started = Instant::now();
    let results: Vec<Result<(String, String), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3).map(|_| s.spawn(|| huge_put(&srv))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!(
        "{name}: three 1 GiB puts answered in {:?}",
        started.elapsed()
    );
    srv.assert_running();
    for (i, r) in results.iter().enumerate() {
        let (reply, peek) = r
            .as_ref()
            .unwrap_or_else(|e| panic!("{name}: big put {i}: {e}; log:\n{}", srv.log.tail()));
        assert_eq!(reply, "OUT_OF_MEMORY", "{name}: big put {i}");
        assert_eq!(peek, "FOUND 1 5", "{name}: big put {i}'s connection");
    }
    assert_eq!(first.call("peek 1\r\n"), "FOUND 1 5", "{name}");
    assert_eq!(first.line().unwrap(), "hello", "{name}");
    // The refused puts used up no id, as in the reference.
    assert_eq!(first.call("put 0 0 60 1\r\nx\r\n"), "INSERTED 2", "{name}");
    srv.assert_running();
}

#[test]
fn a_put_too_big_for_memory_answers_out_of_memory_and_the_server_keeps_serving() {
    let _serial = support::serial();
    out_of_memory_keeps_the_server_serving("redstalk", &redstalk_path());
}

#[test]
fn beanstalkd_answers_out_of_memory_the_same_way() {
    let _serial = support::serial();
    match beanstalkd_path() {
        Some(path) => out_of_memory_keeps_the_server_serving("beanstalkd", &path),
        None if oracle_required() => panic!("beanstalkd is required but not installed"),
        None => warn_oracle_missing(),
    }
}
