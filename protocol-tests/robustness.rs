//! Robustness of redstalk's framing and resource use, proven against the real
//! `redstalk` binary. Every test starts its own server process (in-memory engine) and
//! talks to it over plain blocking sockets; every wait is bounded, so a misbehaving
//! server fails a test instead of hanging it.
//!
//! What the tests prove:
//! - `--max-connections N`: connection N+1 is closed at once, the N open ones keep
//!   working, and closing one frees its slot;
//! - one client that stops half-way through a body or a line, trickles a command byte
//!   by byte, or pipelines without ever reading its replies does not stall any other
//!   client (each of their round trips stays under a second);
//! - while a `reserve` waits, a client that keeps pipelining is held back by TCP flow
//!   control rather than buffered: of 50 MB offered, far less than 16 MB is accepted in
//!   2 s, the server's peak RSS stays small, and once a job arrives every pipelined
//!   command is answered in order;
//! - an over-long line (10 MB without CRLF) is discarded while it streams: one
//!   BAD_FORMAT after its CRLF, small peak RSS, and the connection stays in sync; so is
//!   a list line (`delete-batch`) past its 21 KB window, on 100 connections at once,
//!   while the longest list line that fits is served whole;
//! - a put whose size exceeds `-z` has its body (50 MB, full of command-like lines)
//!   discarded while streaming, never buffered nor executed: JOB_TOO_BIG, small peak
//!   RSS, in sync afterwards;
//! - seeded random input (raw bytes, protocol-ish noise, valid commands mixed with
//!   junk or with malformed requests: over-long lines, numbers too big for their field,
//!   bodies not ended by CRLF, too-big puts full of commands, invalid tube names, cut-off
//!   lines) never crashes the server, every reply it draws is a well-formed protocol
//!   reply (known word, right arity, bodies framed by their length), the server still
//!   answers afterwards, and its RSS does not grow over the runs (each run's connection
//!   leaves nothing behind);
//! - SIGTERM shuts down gracefully even with a reserved job and a blocked reserve: exit
//!   status 0 within `--shutdown-grace`, and a unix socket's file is removed;
//! - `-l unix:/path` serves the protocol end to end and replaces a stale socket file,
//!   but (as beanstalkd) refuses to delete a path that is not a socket;
//! - the CLI: `-v` prints the version, `-h` exits 0, unknown flags and stray arguments
//!   exit 5, `-b` with `--redis` exits 5 naming both, bad `-f`/`-s` values exit 5.
//!
//! "Peak RSS" is `VmHWM` from `/proc/<pid>/status` (Linux), the process's high-water
//! mark, so a transient spike between two samples cannot hide.
//!
//! `REDSTALK_ROBUST_SEED` (decimal or 0x-hex) replays the random-input test with
//! another seed; the seed in use is printed on failure.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use support::rng::Rng;
use support::{ServerKind, ServerProc, proc_status_kb, redstalk_path};

/// How long an ordinary reply may take.
const REPLY: Duration = Duration::from_secs(5);
/// The bound on any single round trip of a client that must not be stalled.
const PROMPT: Duration = Duration::from_secs(1);
/// Peak resident memory the server may reach in the memory tests.
const RSS_LIMIT_KB: u64 = 64 * 1024;
/// Blocking writes give up after this long (the server stopped reading).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
const MIB: usize = 1024 * 1024;

// ---------------------------------------------------------------------------------------
// Sockets and a small client.

/// What the tests need from a TCP or unix stream.
trait Sock: Read + Write + Send + Sized + 'static {
    fn read_timeout(&self, d: Option<Duration>) -> io::Result<()>;
    fn write_timeout(&self, d: Option<Duration>) -> io::Result<()>;
    fn nonblocking(&self, on: bool) -> io::Result<()>;
    fn shutdown_write(&self) -> io::Result<()>;
}

/// The same methods exist on both stream types, but in no common trait.
macro_rules! impl_sock {
    ($($stream:ty),*) => {$(
        impl Sock for $stream {
            fn read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
                self.set_read_timeout(d)
            }
            fn write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
                self.set_write_timeout(d)
            }
            fn nonblocking(&self, on: bool) -> io::Result<()> {
                self.set_nonblocking(on)
            }
            fn shutdown_write(&self) -> io::Result<()> {
                self.shutdown(Shutdown::Write)
            }
        }
    )*};
}

impl_sock!(TcpStream, UnixStream);

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe
    )
}

/// Bytes shown escaped, cut to a readable length.
fn show(bytes: &[u8]) -> String {
    const MAX: usize = 300;
    let cut = &bytes[..bytes.len().min(MAX)];
    let mut s = cut.escape_ascii().to_string();
    if bytes.len() > MAX {
        s.push_str(&format!("… ({} bytes)", bytes.len()));
    }
    s
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

/// Why a read ended without what was asked for (the errors are shown via `Debug`).
#[derive(Debug)]
#[allow(dead_code)]
enum ReadEnd {
    Closed,
    Reset(io::Error),
    TimedOut,
    Other(io::Error),
}

struct Client<S: Sock> {
    name: String,
    sock: S,
    /// Received, not yet consumed.
    buf: Vec<u8>,
    chunk: Vec<u8>,
}

impl<S: Sock> Client<S> {
    fn new(sock: S, name: impl Into<String>) -> Client<S> {
        sock.write_timeout(Some(WRITE_TIMEOUT))
            .expect("set write timeout");
        Client {
            name: name.into(),
            sock,
            buf: Vec::new(),
            chunk: vec![0; 64 * 1024],
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        if let Err(e) = self.sock.write_all(bytes) {
            panic!("{}: sending {}: {e}", self.name, show(bytes));
        }
    }

    /// One read, waiting at most until `deadline`; `Ok(0)` at end of stream.
    fn fill(&mut self, deadline: Instant) -> Result<usize, ReadEnd> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ReadEnd::TimedOut);
        }
        self.sock.read_timeout(Some(left)).map_err(ReadEnd::Other)?;
        match self.sock.read(&mut self.chunk) {
            Ok(0) => Err(ReadEnd::Closed),
            Ok(n) => {
                self.buf.extend_from_slice(&self.chunk[..n]);
                Ok(n)
            }
            Err(e) if is_timeout(&e) => Err(ReadEnd::TimedOut),
            Err(e) if is_reset(&e) => Err(ReadEnd::Reset(e)),
            Err(e) => Err(ReadEnd::Other(e)),
        }
    }

    fn try_line(&mut self, timeout: Duration) -> Result<String, ReadEnd> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = find_crlf(&self.buf) {
                let line: Vec<u8> = self.buf.drain(..i + 2).collect();
                return Ok(String::from_utf8_lossy(&line[..i]).into_owned());
            }
            self.fill(deadline)?;
        }
    }

    /// The next reply line (without its CRLF).
    fn line(&mut self, timeout: Duration) -> String {
        self.try_line(timeout).unwrap_or_else(|end| {
            panic!(
                "{}: no reply line within {timeout:?}: {end:?} (received so far: {})",
                self.name,
                show(&self.buf)
            )
        })
    }

    /// Exactly `n` bytes.
    fn take(&mut self, n: usize, timeout: Duration) -> Vec<u8> {
        let deadline = Instant::now() + timeout;
        while self.buf.len() < n {
            if let Err(end) = self.fill(deadline) {
                panic!(
                    "{}: wanted {n} bytes within {timeout:?}, got {}: {end:?}",
                    self.name,
                    self.buf.len()
                );
            }
        }
        self.buf.drain(..n).collect()
    }

    /// The next bytes are exactly `want` (a mismatch fails as soon as it shows).
    fn expect(&mut self, want: &[u8], timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let k = self.buf.len().min(want.len());
            if self.buf[..k] != want[..k] {
                panic!(
                    "{}: expected {}, received {}",
                    self.name,
                    show(want),
                    show(&self.buf)
                );
            }
            if k == want.len() {
                self.buf.drain(..k);
                return;
            }
            if let Err(end) = self.fill(deadline) {
                panic!(
                    "{}: expected {} within {timeout:?}: {end:?}; received only {}",
                    self.name,
                    show(want),
                    show(&self.buf)
                );
            }
        }
    }

    /// Send one request, return its reply line.
    fn request(&mut self, bytes: &[u8]) -> String {
        self.send(bytes);
        self.line(REPLY)
    }

    /// A request whose reply must arrive within [`PROMPT`].
    fn prompt_request(&mut self, bytes: &[u8]) -> String {
        let t = Instant::now();
        self.send(bytes);
        let line = self.line(PROMPT);
        let took = t.elapsed();
        assert!(
            took < PROMPT,
            "{}: {} took {took:?}",
            self.name,
            show(bytes)
        );
        line
    }

    /// An `OK <n>` reply and its body.
    fn yaml(&mut self, bytes: &[u8]) -> String {
        let line = self.request(bytes);
        let n: usize = line
            .strip_prefix("OK ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{}: {} answered {line:?}", self.name, show(bytes)));
        let body = self.take(n + 2, REPLY);
        assert_eq!(
            &body[n..],
            b"\r\n",
            "{}: YAML body not ended by CRLF",
            self.name
        );
        String::from_utf8_lossy(&body[..n]).into_owned()
    }

    /// Read until reading ends (closed, reset, an error, or `deadline`), failing on any
    /// byte received (`expected` names what was expected instead). Returns the end.
    fn nothing_until_end(&mut self, deadline: Instant, expected: &str) -> ReadEnd {
        loop {
            assert!(
                self.buf.is_empty(),
                "{}: expected {expected}, received {}",
                self.name,
                show(&self.buf)
            );
            if let Err(end) = self.fill(deadline) {
                return end;
            }
        }
    }

    /// The server closes the connection within `timeout` without sending anything.
    fn expect_closed(&mut self, timeout: Duration) {
        match self.nothing_until_end(Instant::now() + timeout, "the server to close") {
            ReadEnd::Closed | ReadEnd::Reset(_) => {}
            end => panic!(
                "{}: the server did not close the connection within {timeout:?}: {end:?}",
                self.name
            ),
        }
    }

    /// Nothing arrives (and the connection stays open) for `quiet`.
    fn expect_silence(&mut self, quiet: Duration) {
        match self.nothing_until_end(Instant::now() + quiet, "silence") {
            ReadEnd::TimedOut => {}
            end => panic!("{}: expected silence, got {end:?}", self.name),
        }
    }

    /// Everything until the server closes; `true` when it ended in a clean EOF (not a
    /// reset, which may have dropped data in flight).
    fn read_to_end(&mut self, timeout: Duration) -> Result<(Vec<u8>, bool), String> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.fill(deadline) {
                Ok(_) => {}
                Err(ReadEnd::Closed) => return Ok((std::mem::take(&mut self.buf), true)),
                Err(ReadEnd::Reset(_)) => return Ok((std::mem::take(&mut self.buf), false)),
                Err(end) => {
                    return Err(format!(
                        "connection not closed within {timeout:?}: {end:?}; received {}",
                        show(&self.buf)
                    ));
                }
            }
        }
    }
}

/// A value from a `stats` reply.
fn stat<S: Sock>(c: &mut Client<S>, key: &str) -> String {
    let yaml = c.yaml(b"stats\r\n");
    let prefix = format!("{key}: ");
    yaml.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("stats has no {key}: {yaml}"))
        .trim_matches('"')
        .to_string()
}

/// Poll `stats` until `key` has `value` (bounded).
fn wait_for_stat<S: Sock>(c: &mut Client<S>, key: &str, value: &str) {
    let deadline = Instant::now() + REPLY;
    loop {
        let got = stat(c, key);
        if got == value {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "stats {key} stayed {got}, expected {value}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// A put / reserve / delete cycle; every reply must be prompt.
fn prompt_cycle<S: Sock>(c: &mut Client<S>, body: &str) {
    let put = format!("put 0 0 60 {}\r\n{body}\r\n", body.len());
    let inserted = c.prompt_request(put.as_bytes());
    let id = inserted
        .strip_prefix("INSERTED ")
        .unwrap_or_else(|| panic!("{}: put answered {inserted:?}", c.name))
        .to_string();
    let reserved = c.prompt_request(b"reserve\r\n");
    assert_eq!(
        reserved,
        format!("RESERVED {id} {}", body.len()),
        "{}",
        c.name
    );
    assert_eq!(
        c.take(body.len() + 2, PROMPT),
        format!("{body}\r\n").as_bytes()
    );
    assert_eq!(
        c.prompt_request(format!("delete {id}\r\n").as_bytes()),
        "DELETED"
    );
}

// ---------------------------------------------------------------------------------------
// Servers.

fn start(args: &[&str]) -> ServerProc {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    ServerProc::start(ServerKind::Memory, &args)
        .unwrap_or_else(|e| panic!("start redstalk {args:?}: {e}"))
        .expect("redstalk always starts")
}

fn tcp(srv: &ServerProc, name: impl Into<String>) -> Client<TcpStream> {
    let s = TcpStream::connect_timeout(&srv.addr, REPLY).expect("connect to redstalk");
    s.set_nodelay(true).expect("nodelay");
    Client::new(s, name)
}

/// The server's peak RSS so far is below [`RSS_LIMIT_KB`].
fn assert_peak_rss_small(pid: u32, when: &str) {
    let peak = proc_status_kb(pid, "VmHWM");
    let now = proc_status_kb(pid, "VmRSS");
    eprintln!("{when}: server RSS {now} kB, peak {peak} kB");
    assert!(
        peak < RSS_LIMIT_KB,
        "{when}: server peak RSS {peak} kB (now {now} kB) exceeds {RSS_LIMIT_KB} kB"
    );
}

/// A unique socket path in /tmp for this test process.
fn sock_path(tag: &str) -> PathBuf {
    let p = PathBuf::from(format!(
        "/tmp/redstalk-robustness-{}-{tag}.sock",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// redstalk listening on a unix socket (the support module's `ServerProc` is TCP-only).
/// Dropping it kills the process and removes the path.
struct UnixServer {
    child: Child,
    path: PathBuf,
    stderr: Arc<Mutex<Vec<u8>>>,
}

impl UnixServer {
    fn spawn(path: &Path, extra: &[&str]) -> UnixServer {
        let mut child = Command::new(redstalk_path())
            .arg("-l")
            .arg(format!("unix:{}", path.display()))
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn redstalk");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut pipe = child.stderr.take().expect("stderr piped");
        let sink = stderr.clone();
        thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        });
        UnixServer {
            child,
            path: path.to_path_buf(),
            stderr,
        }
    }

    /// Start and wait until the socket accepts connections.
    fn start(path: &Path, extra: &[&str]) -> UnixServer {
        let mut srv = UnixServer::spawn(path, extra);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = srv.child.try_wait() {
                panic!(
                    "redstalk on {} exited with {status}: {}",
                    path.display(),
                    srv.stderr_text()
                );
            }
            if UnixStream::connect(path).is_ok() {
                return srv;
            }
            assert!(
                Instant::now() < deadline,
                "redstalk did not listen on {} within 10 s",
                path.display()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    fn connect(&self, name: impl Into<String>) -> Client<UnixStream> {
        Client::new(UnixStream::connect(&self.path).expect("connect unix"), name)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        support::wait_exit(&mut self.child, timeout)
    }

    fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }
}

impl Drop for UnixServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.path);
    }
}

fn sigterm(pid: u32) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid}: {status}");
}

/// Run the binary with `args` to completion (bounded): status, stdout, stderr.
fn run_cli(args: &[&str]) -> (ExitStatus, String, String) {
    let mut child = Command::new(redstalk_path())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn redstalk");
    let drain = |mut r: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            String::from_utf8_lossy(&v).into_owned()
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redstalk {args:?} did not exit within 10 s");
        }
        thread::sleep(Duration::from_millis(5));
    };
    (status, out.join().unwrap(), err.join().unwrap())
}

/// Write `pattern` repeatedly through a non-blocking socket for at most `budget`, or
/// until `limit` bytes are written, or until no byte was accepted for `quiet` (the
/// peer stopped reading). Returns the bytes accepted and whether the writes stalled.
fn flood<S: Sock>(
    sock: &mut S,
    pattern: &[u8],
    limit: usize,
    budget: Duration,
    quiet: Option<Duration>,
) -> (usize, bool) {
    let chunk = pattern.repeat((64 * 1024 / pattern.len()).max(1));
    sock.nonblocking(true).expect("nonblocking");
    let start = Instant::now();
    let mut last_progress = start;
    let mut sent = 0usize;
    let mut stalled = false;
    while sent < limit && start.elapsed() < budget {
        let off = sent % chunk.len();
        let end = chunk.len().min(off + (limit - sent));
        match sock.write(&chunk[off..end]) {
            Ok(n) => {
                sent += n;
                last_progress = Instant::now();
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if quiet.is_some_and(|q| last_progress.elapsed() >= q) {
                    stalled = true;
                    break;
                }
                thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("flood write failed after {sent} bytes: {e}"),
        }
    }
    sock.nonblocking(false).expect("blocking");
    (sent, stalled)
}

// ---------------------------------------------------------------------------------------
// 1. Connection limit.

/// A connection that is answered, retrying while the server still closes new ones
/// (a slot is freed when the server has noticed the close, a moment after it).
fn connect_when_a_slot_frees(srv: &ServerProc) -> Client<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut attempts = 0;
    loop {
        attempts += 1;
        let mut c = tcp(srv, "fresh");
        c.send(b"list-tube-used\r\n");
        match c.try_line(Duration::from_secs(1)) {
            Ok(line) => {
                assert_eq!(line, "USING default");
                return c;
            }
            Err(ReadEnd::Closed | ReadEnd::Reset(_)) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(20));
            }
            Err(end) => panic!(
                "no slot freed within 3 s of closing a connection ({attempts} attempts): {end:?}"
            ),
        }
    }
}

#[test]
fn connection_limit_closes_the_excess_connection_and_frees_slots() {
    let srv = start(&["--max-connections", "3"]);
    let mut open: Vec<Client<TcpStream>> = (0..3)
        .map(|i| {
            let mut c = tcp(&srv, format!("conn{i}"));
            assert_eq!(c.request(b"list-tube-used\r\n"), "USING default");
            c
        })
        .collect();

    // The kernel completes the handshake; the server must close it promptly, unanswered.
    let mut fourth = tcp(&srv, "fourth");
    let _ = fourth.sock.write_all(b"list-tube-used\r\n");
    fourth.expect_closed(Duration::from_secs(2));

    for c in &mut open {
        assert_eq!(c.prompt_request(b"list-tube-used\r\n"), "USING default");
    }

    // Closing one frees a slot.
    drop(open.remove(0));
    let mut fresh = connect_when_a_slot_frees(&srv);
    assert_eq!(stat(&mut fresh, "current-connections"), "3");

    // Full again: the limit still holds, and the open ones still work.
    let mut fifth = tcp(&srv, "fifth");
    fifth.expect_closed(Duration::from_secs(2));
    for c in &mut open {
        prompt_cycle(c, "still here");
    }
    prompt_cycle(&mut fresh, "fresh");
}

// ---------------------------------------------------------------------------------------
// 2. Slow clients do not stall others.

#[test]
fn half_sent_trickling_and_non_reading_clients_do_not_stall_others() {
    let srv = start(&[]);

    // Half a body, and half a command line, left hanging.
    let mut half_body = tcp(&srv, "half-body");
    half_body.send(b"put 0 0 10 5\r\nhel");
    let mut half_line = tcp(&srv, "half-line");
    half_line.send(b"stat");

    // A client that pipelines `stats` and never reads: the server's writes to it must
    // block (TCP flow control) and, in turn, it must stop reading from it.
    let mut deaf = tcp(&srv, "deaf");
    let (deaf_sent, deaf_stalled) = flood(
        &mut deaf.sock,
        b"stats\r\n",
        usize::MAX,
        Duration::from_secs(10),
        Some(Duration::from_millis(300)),
    );
    eprintln!("a client that never reads got {deaf_sent} bytes in before it was held back");
    assert!(
        deaf_stalled,
        "a client that never reads its replies was never held back ({deaf_sent} bytes accepted in 10 s): \
         the server must be buffering its replies"
    );

    // A client that sends one byte every 2 ms, on its own thread.
    let trickle = tcp(&srv, "trickle");
    let mut trickle_writer = trickle.sock.try_clone().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_flag = stop.clone();
    let trickler = thread::spawn(move || {
        let cmd = b"list-tube-used\r\n";
        let mut commands = 0usize;
        while commands < 3 || !stop_flag.load(Ordering::Relaxed) {
            for &b in cmd {
                trickle_writer.write_all(&[b]).expect("trickle write");
                thread::sleep(Duration::from_millis(2));
            }
            commands += 1;
        }
        commands
    });

    // Meanwhile another client's round trips are all prompt.
    let mut worker = tcp(&srv, "worker");
    for i in 0..20 {
        prompt_cycle(&mut worker, &format!("job-{i}"));
    }
    let t = Instant::now();
    let yaml = worker.yaml(b"stats-tube default\r\n");
    assert!(
        t.elapsed() < PROMPT,
        "worker: stats-tube took {:?}",
        t.elapsed()
    );
    assert!(
        yaml.contains("\ntotal-jobs: 20\n"),
        "worker: stats-tube answered {yaml:?}"
    );

    stop.store(true, Ordering::Relaxed);
    let commands = trickler.join().expect("trickler");
    let mut trickle = trickle;
    for _ in 0..commands {
        trickle.expect(b"USING default\r\n", REPLY);
    }

    // The stalled clients finish normally.
    half_body.send(b"lo\r\n");
    let inserted = half_body.line(REPLY);
    assert!(inserted.starts_with("INSERTED "), "half-body: {inserted:?}");
    half_line.send(b"s\r\n");
    let ok = half_line.line(REPLY);
    let n: usize = ok
        .strip_prefix("OK ")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("half-line: `stat` + `s` answered {ok:?}"));
    assert!(half_line.take(n + 2, REPLY).starts_with(b"---\n"));
    assert_eq!(
        worker.prompt_request(b"reserve-with-timeout 0\r\n"),
        format!("RESERVED {} 5", &inserted["INSERTED ".len()..])
    );
    worker.expect(b"hello\r\n", REPLY);
    assert_peak_rss_small(srv.pid(), "with a client that never reads");
}

// ---------------------------------------------------------------------------------------
// 3. Bounded memory while a reserve waits.

#[test]
fn pipelining_behind_a_blocked_reserve_is_held_back_by_flow_control() {
    const OFFERED: usize = 50 * MIB;
    const CMD: &[u8] = b"list-tube-used\r\n";
    let srv = start(&[]);
    let mut waiter = tcp(&srv, "waiter");
    waiter.send(b"reserve\r\n");
    let mut watcher = tcp(&srv, "watcher");
    wait_for_stat(&mut watcher, "current-waiting", "1");

    let started = Instant::now();
    let (sent, _) = flood(&mut waiter.sock, CMD, OFFERED, Duration::from_secs(2), None);
    let took = started.elapsed();
    eprintln!("behind a blocked reserve the server took {sent} of {OFFERED} bytes in {took:?}");
    assert!(
        sent < 16 * MIB,
        "while its reserve waited, the server took {sent} bytes of pipelined commands in {took:?} \
         (expected TCP flow control to stop the client far below 16 MiB)"
    );
    assert_peak_rss_small(srv.pid(), "while a reserve waits under pipelining");
    waiter.expect_silence(Duration::from_millis(100));

    // A job arrives: the reserve gets it, then every complete pipelined command runs, in
    // order, and nothing more is answered (the last command may be incomplete).
    let mut producer = tcp(&srv, "producer");
    assert_eq!(producer.request(b"put 0 0 10 5\r\nhello\r\n"), "INSERTED 1");
    waiter.expect(b"RESERVED 1 5\r\nhello\r\n", REPLY);
    let complete = sent / CMD.len();
    let reply = b"USING default\r\n";
    let budget = Duration::from_secs(30);
    let t = Instant::now();
    let all = waiter.take(complete * reply.len(), budget);
    eprintln!(
        "{complete} pipelined commands answered in {:?}",
        t.elapsed()
    );
    if let Some(bad) = all.chunks(reply.len()).position(|r| r != reply) {
        panic!(
            "pipelined reply {bad} of {complete} is {}",
            show(&all[bad * reply.len()..])
        );
    }
    waiter.expect_silence(Duration::from_millis(200));
    // Still in sync: completing the cut-off last command answers it, then the job can
    // be deleted.
    let tail = sent % CMD.len();
    if tail != 0 {
        waiter.send(&CMD[tail..]);
        waiter.expect(reply, REPLY);
    }
    assert_eq!(waiter.request(b"delete 1\r\n"), "DELETED");
    assert_peak_rss_small(srv.pid(), "after the pipelined commands ran");
}

// ---------------------------------------------------------------------------------------
// 4. Over-long line.

#[test]
fn ten_megabytes_without_crlf_give_one_bad_format_and_stay_in_sync() {
    let srv = start(&[]);
    let mut c = tcp(&srv, "long-line");
    let junk = vec![b'x'; MIB];
    for _ in 0..10 {
        c.send(&junk);
    }
    // Nothing is answered before the line ends.
    c.expect_silence(Duration::from_millis(200));
    assert_peak_rss_small(srv.pid(), "after 10 MB without CRLF");
    c.send(b"\r\nlist-tube-used\r\n");
    c.expect(b"BAD_FORMAT\r\nUSING default\r\n", REPLY);
    c.expect_silence(Duration::from_millis(200));
    assert_eq!(c.request(b"use other\r\n"), "USING other");
    assert_eq!(c.request(b"watch other\r\n"), "WATCHING 2");
    prompt_cycle(&mut c, "in sync");
    assert_peak_rss_small(srv.pid(), "after the over-long line");
}

/// The list lines of the batch extension (docs/EXTENSIONS.md) get a longer window, 21,042
/// bytes, and no more: many connections each streaming a `delete-batch` line far past it
/// hold none of it (one BAD_FORMAT each once it ends, small peak RSS), and the longest
/// list line that fits is served whole.
#[test]
fn list_lines_are_bounded_at_21_kb_per_connection() {
    const CONNS: usize = 100;
    let srv = start(&[]);
    let mut clients: Vec<_> = (0..CONNS).map(|i| tcp(&srv, format!("list-{i}"))).collect();
    let filler = " 1".repeat(MIB / 2);
    for c in &mut clients {
        c.send(b"delete-batch");
        c.send(filler.as_bytes());
    }
    // 100 MB offered in all, none of it a whole line.
    assert_peak_rss_small(srv.pid(), "after 100 list lines of 1 MB without CRLF");
    for c in &mut clients {
        c.send(b"\r\n");
        c.expect(b"BAD_FORMAT\r\n", REPLY);
    }
    // The longest canonical list line: 1,000 ids of 20 digits after its parameters.
    let ids: String = (0..1000u64).map(|i| format!(" {}", u64::MAX - i)).collect();
    let line = format!("release-batch {} 4294967295000ms{ids}\r\n", u32::MAX);
    assert_eq!(line.len(), 21_042, "the list-line window");
    let c = &mut clients[0];
    c.send(line.as_bytes());
    let reply = c.line(REPLY);
    assert!(
        reply.starts_with("RELEASED_BATCH 0 1000 18446744073709551615 "),
        "{}",
        &reply[..reply.len().min(80)]
    );
    assert_eq!(reply.split(' ').count(), 1003);
    prompt_cycle(c, "in sync after the list lines");
    assert_peak_rss_small(srv.pid(), "after the list lines");
}

// ---------------------------------------------------------------------------------------
// 5. Put bigger than -z.

#[test]
fn fifty_megabyte_body_of_a_too_big_put_is_discarded_while_streaming() {
    let srv = start(&["-z", "1000"]);
    let mut c = tcp(&srv, "too-big");
    c.send(b"put 0 0 10 50000000\r\n");
    // The body is made of command lines: executing any of them would show.
    let pattern = b"delete 1\r\n".repeat(MIB / 10);
    let mut left = 50_000_000usize;
    while left > 0 {
        let n = left.min(pattern.len());
        c.send(&pattern[..n]);
        left -= n;
    }
    // The body's own CRLF is still to come: no reply yet.
    c.expect_silence(Duration::from_millis(200));
    assert_peak_rss_small(srv.pid(), "while a 50 MB too-big body streams");
    c.send(b"\r\nlist-tube-used\r\n");
    c.expect(b"JOB_TOO_BIG\r\nUSING default\r\n", REPLY);
    c.expect_silence(Duration::from_millis(200));
    assert_eq!(stat(&mut c, "cmd-delete"), "0");
    assert_eq!(stat(&mut c, "total-jobs"), "0");
    prompt_cycle(&mut c, "in sync");
    assert_peak_rss_small(srv.pid(), "after the too-big put");
}

// ---------------------------------------------------------------------------------------
// 6. Random input.

/// Words and fragments that make random input look like the protocol.
const NOISE: &[&str] = &[
    "put",
    "reserve",
    "reserve-with-timeout",
    "reserve-job",
    "delete",
    "release",
    "bury",
    "touch",
    "watch",
    "ignore",
    "use",
    "peek",
    "peek-ready",
    "peek-delayed",
    "peek-buried",
    "kick",
    "kick-job",
    "stats",
    "stats-job",
    "stats-tube",
    "list-tubes",
    "list-tube-used",
    "list-tubes-watched",
    "pause-tube",
    "quit",
    " ",
    " ",
    " ",
    "\r\n",
    "\r\n",
    "\r",
    "\n",
    "\t",
    "\0",
    "0",
    "1",
    "2",
    "5",
    "-1",
    "+3",
    "4294967295",
    "4294967296",
    "18446744073709551616",
    "99999999999999999999999",
    "default",
    "tube",
    "-x",
    "a(b)$",
    "OK",
    "INSERTED",
];

/// Valid commands, each answered with exactly one reply (no quit, no blocking reserve).
fn valid_command(rng: &mut Rng) -> Vec<u8> {
    let id = rng.index(30);
    let tube = *rng.pick(&["default", "fuzz", "x-y", "t1"]);
    let cmd = match rng.index(20) {
        0..=3 => {
            let n = rng.index(100);
            let body = rng.bytes(n);
            let mut put = format!(
                "put {} {} {} {}\r\n",
                rng.index(5000),
                rng.pick(&[0, 0, 1, 100000]),
                rng.pick(&[1, 2, 60]),
                body.len()
            )
            .into_bytes();
            put.extend_from_slice(&body);
            put.extend_from_slice(b"\r\n");
            return put;
        }
        4 => format!("use {tube}"),
        5 => format!("watch {tube}"),
        6 => format!("ignore {tube}"),
        7 => "reserve-with-timeout 0".into(),
        8 => format!("reserve-job {id}"),
        9 => format!("delete {id}"),
        10 => format!("release {id} 0 0"),
        11 => format!("bury {id} 1"),
        12 => format!("touch {id}"),
        13 => format!("peek {id}"),
        14 => rng
            .pick(&["peek-ready", "peek-delayed", "peek-buried"])
            .to_string(),
        15 => format!("kick {}", rng.index(10)),
        16 => format!("kick-job {id}"),
        17 => format!("stats-job {id}"),
        18 => format!("stats-tube {tube}"),
        _ => rng
            .pick(&[
                "stats",
                "list-tubes",
                "list-tube-used",
                "list-tubes-watched",
            ])
            .to_string(),
    };
    format!("{cmd}\r\n").into_bytes()
}

/// The size limit (`-z`) of the random-input server, so too-big puts stay small.
const FUZZ_MAX_JOB: usize = 1000;

/// A malformed request the reference has a rule for: an over-long line, a number too
/// big for its field, a body not ended by CRLF, a too-big put (its body full of
/// commands), an invalid tube name, or a line cut off without its CRLF.
fn malformed_request(rng: &mut Rng) -> Vec<u8> {
    let tube = *rng.pick(&["-x", "a:b", "", " two", "a b", "\u{e9}", "t\0"]);
    match rng.index(7) {
        0 => {
            let n = rng.range(223, 2000) as usize;
            let mut l = rng.bytes(n);
            l.retain(|&b| b != b'\r');
            l.extend_from_slice(b"\r\n");
            l
        }
        1 => rng
            .pick(&[
                "put 99999999999999999999 0 60 1\r\n",
                "put 0 4294967296 60 1\r\n",
                "delete 18446744073709551616\r\n",
                "release 1 4294967296 0\r\n",
                "kick 99999999999999999999\r\n",
                "reserve-with-timeout 2147483648\r\n",
                "pause-tube default 4294967296\r\n",
            ])
            .as_bytes()
            .to_vec(),
        2 => {
            let n = rng.index(FUZZ_MAX_JOB);
            let body = rng.bytes(n);
            let mut put = format!("put 0 0 60 {}\r\n", body.len()).into_bytes();
            put.extend_from_slice(&body);
            put.extend_from_slice(b"xy");
            put
        }
        3 => {
            let n = FUZZ_MAX_JOB + 1 + rng.index(3000);
            let mut put = format!("put 0 0 60 {n}\r\n").into_bytes();
            put.extend(b"delete 1\r\nquit\r\n".iter().cycle().take(n + 2));
            put
        }
        4 => format!(
            "{} {tube}\r\n",
            rng.pick(&["use", "watch", "ignore", "stats-tube"])
        )
        .into_bytes(),
        5 => format!("use {}\r\n", "a".repeat(201)).into_bytes(),
        _ => {
            let mut cmd = valid_command(rng);
            cmd.truncate(rng.index(cmd.len()));
            cmd
        }
    }
}

/// One run's input: raw bytes, protocol-ish noise, valid commands mixed with junk, or
/// valid commands mixed with malformed requests.
fn random_input(rng: &mut Rng) -> Vec<u8> {
    let len = rng.index(4097);
    let mut out = Vec::with_capacity(len + 128);
    match rng.index(4) {
        3 => {
            while out.len() < len {
                if rng.chance(40) {
                    out.extend_from_slice(&malformed_request(rng));
                } else {
                    out.extend_from_slice(&valid_command(rng));
                }
            }
        }
        0 => out = rng.bytes(len),
        1 => {
            while out.len() < len {
                if rng.chance(10) {
                    out.push(rng.next_u64() as u8);
                } else {
                    out.extend_from_slice(rng.pick(NOISE).as_bytes());
                }
            }
        }
        _ => {
            while out.len() < len {
                if rng.chance(30) {
                    let n = rng.index(64);
                    let junk = rng.bytes(n);
                    out.extend_from_slice(&junk);
                } else {
                    out.extend_from_slice(&valid_command(rng));
                }
            }
        }
    }
    out
}

fn is_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

fn is_tube_name(s: &str) -> bool {
    (1..=200).contains(&s.len())
        && !s.starts_with('-')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-+/;.$_()".contains(&b))
}

/// Check a connection's whole output is a sequence of well-formed replies. `complete`:
/// the stream ended cleanly, so a cut-off reply at the end is an error too.
fn check_replies(out: &[u8], complete: bool) -> Result<usize, String> {
    const BARE: &[&str] = &[
        "BURIED",
        "EXPECTED_CRLF",
        "JOB_TOO_BIG",
        "DRAINING",
        "DEADLINE_SOON",
        "TIMED_OUT",
        "DELETED",
        "RELEASED",
        "TOUCHED",
        "NOT_IGNORED",
        "KICKED",
        "PAUSED",
        "NOT_FOUND",
        "OUT_OF_MEMORY",
        "INTERNAL_ERROR",
        "BAD_FORMAT",
        "UNKNOWN_COMMAND",
    ];
    let mut rest = out;
    let mut count = 0;
    while !rest.is_empty() {
        let Some(end) = find_crlf(rest) else {
            return if complete {
                Err(format!(
                    "reply {count} is not ended by CRLF: {}",
                    show(rest)
                ))
            } else {
                Ok(count)
            };
        };
        let line = std::str::from_utf8(&rest[..end])
            .map_err(|_| format!("reply {count} is not text: {}", show(&rest[..end])))?;
        rest = &rest[end + 2..];
        let words: Vec<&str> = line.split(' ').collect();
        let body: Option<&str> = match words[..] {
            [w] if BARE.contains(&w) => None,
            ["INSERTED" | "BURIED" | "WATCHING" | "KICKED", n] if is_number(n) => None,
            ["USING", tube] if is_tube_name(tube) => None,
            ["OK", n] if is_number(n) => Some(n),
            ["RESERVED" | "FOUND", id, n] if is_number(id) && is_number(n) => Some(n),
            _ => return Err(format!("reply {count} is not a protocol reply: {line:?}")),
        };
        if let Some(n) = body {
            let n: usize = n
                .parse()
                .map_err(|_| format!("reply {count}: size {n:?}"))?;
            if rest.len() < n + 2 {
                return if complete {
                    Err(format!(
                        "reply {count} ({line}) has a cut-off body: {}",
                        show(rest)
                    ))
                } else {
                    Ok(count)
                };
            }
            if &rest[n..n + 2] != b"\r\n" {
                return Err(format!("reply {count} ({line}): body not ended by CRLF"));
            }
            if line.starts_with("OK") && !rest.starts_with(b"---") {
                return Err(format!(
                    "reply {count} ({line}): not YAML: {}",
                    show(&rest[..n])
                ));
            }
            rest = &rest[n + 2..];
        }
        count += 1;
    }
    Ok(count)
}

/// The reply checker itself: it must accept real replies and reject anything else.
#[test]
fn reply_checker_accepts_protocol_replies_and_rejects_others() {
    let good: &[u8] = b"INSERTED 1\r\nRESERVED 1 3\r\na\r\n\r\nOK 5\r\n---\nx\r\nUSING a(b)\r\n\
        KICKED\r\nKICKED 2\r\nBURIED 4\r\nFOUND 2 0\r\n\r\nUNKNOWN_COMMAND\r\n";
    assert_eq!(check_replies(good, true), Ok(9));
    assert_eq!(check_replies(b"OK 5\r\n---", false), Ok(0));
    for bad in [
        &b"HELLO\r\n"[..],
        b"INSERTED\r\n",
        b"INSERTED x\r\n",
        b"DELETED 3\r\n",
        b"USING -a\r\n",
        b"OK 3\r\nabcd\r\n",
        b"OK 3\r\nabc\r\n",
        b"RESERVED 1\r\n",
        b"TIMED_OUT",
        b"OK 5\r\n---",
        b"bad_format\r\n",
    ] {
        assert!(check_replies(bad, true).is_err(), "accepted {}", show(bad));
    }
}

fn assert_stats_answered<S: Sock>(c: &mut Client<S>, when: &str) {
    let yaml = c.yaml(b"stats\r\n");
    assert!(
        yaml.starts_with("---\n") && yaml.contains("\ncurrent-jobs-urgent: "),
        "{when}: stats answered {yaml:?}"
    );
}

#[test]
fn random_bytes_never_crash_the_server_nor_draw_unknown_replies() {
    let seed = std::env::var("REDSTALK_ROBUST_SEED")
        .ok()
        .and_then(|s| match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        })
        .unwrap_or(0x0b5e_55ed_f00d_2024);
    const RUNS: usize = 200;
    let mut srv = start(&["-z", &FUZZ_MAX_JOB.to_string()]);
    let mut rng = Rng::new(seed);
    let mut control = tcp(&srv, "control");
    let mut replies = 0;
    let mut sent = 0;
    let mut rss_warm = 0;
    for run in 0..RUNS {
        let input = random_input(&mut rng);
        sent += input.len();
        let context = |msg: String| {
            format!(
                "seed {seed:#x}, run {run}: {msg}\ninput ({} bytes): {}",
                input.len(),
                show(&input)
            )
        };
        let mut c = tcp(&srv, format!("fuzz{run}"));
        // Sent in a few random pieces, so lines and bodies straddle reads.
        let mut rest = &input[..];
        while !rest.is_empty() {
            let n = 1 + rng.index(rest.len());
            if c.sock.write_all(&rest[..n]).is_err() {
                break; // the input quit; the server closed
            }
            rest = &rest[n..];
        }
        let _ = c.sock.shutdown_write();
        let (out, clean) = c
            .read_to_end(Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{}", context(e)));
        replies += check_replies(&out, clean)
            .unwrap_or_else(|e| panic!("{}\noutput: {}", context(e), show(&out)));
        if run % 20 == 19 {
            assert!(srv.is_running(), "{}", context("the server died".into()));
            assert_stats_answered(&mut control, &context("control".into()));
        }
        // Memory after the first runs (allocator warmed up) is the baseline.
        if run == RUNS / 4 {
            rss_warm = proc_status_kb(srv.pid(), "VmRSS");
        }
    }
    let rss_end = proc_status_kb(srv.pid(), "VmRSS");
    eprintln!(
        "seed {seed:#x}: {RUNS} runs, {sent} bytes sent, {replies} well-formed replies; \
         server RSS {rss_warm} kB after {} runs, {rss_end} kB after all",
        RUNS / 4
    );
    // Each run's connection is gone: what it cost must have been given back for reuse.
    assert!(
        rss_end <= rss_warm + 4 * 1024,
        "seed {seed:#x}: server RSS grew from {rss_warm} kB to {rss_end} kB over the runs"
    );
    assert_peak_rss_small(srv.pid(), "after the random input");
    assert!(
        replies > RUNS,
        "the random input drew only {replies} replies"
    );
    assert!(srv.is_running(), "seed {seed:#x}: the server died");
    assert_stats_answered(&mut control, "after the random input");
    let mut fresh = tcp(&srv, "fresh");
    assert_stats_answered(&mut fresh, "new connection after the random input");
}

// ---------------------------------------------------------------------------------------
// 7. Graceful shutdown.

const GRACE_SECS: u64 = 2;

/// `holder` holds a reserved job, `waiter` is blocked in reserve (checked via `control`).
fn hold_a_job_and_block_a_reserve<S: Sock>(
    holder: &mut Client<S>,
    waiter: &mut Client<S>,
    control: &mut Client<S>,
) {
    assert_eq!(holder.request(b"put 0 0 60 3\r\nabc\r\n"), "INSERTED 1");
    assert_eq!(holder.request(b"reserve\r\n"), "RESERVED 1 3");
    holder.expect(b"abc\r\n", REPLY);
    waiter.send(b"reserve\r\n");
    wait_for_stat(control, "current-waiting", "1");
    assert_eq!(stat(control, "current-jobs-reserved"), "1");
}

fn assert_clean_exit(status: Option<ExitStatus>, took: Duration, what: &str, stderr: &str) {
    let grace = Duration::from_secs(GRACE_SECS);
    let status = status.unwrap_or_else(|| {
        panic!("{what}: still running {took:?} after SIGTERM (grace {grace:?}); stderr: {stderr}")
    });
    assert_eq!(
        status.code(),
        Some(0),
        "{what}: SIGTERM ended the process with {status}; stderr: {stderr}"
    );
    assert!(
        took <= grace + Duration::from_millis(500),
        "{what}: exit took {took:?}, beyond the {grace:?} grace period"
    );
}

#[test]
fn sigterm_exits_zero_within_the_grace_period_over_tcp() {
    let mut srv = start(&["--shutdown-grace", &GRACE_SECS.to_string()]);
    let mut holder = tcp(&srv, "holder");
    let mut waiter = tcp(&srv, "waiter");
    let mut control = tcp(&srv, "control");
    hold_a_job_and_block_a_reserve(&mut holder, &mut waiter, &mut control);

    let t = Instant::now();
    srv.signal("TERM").expect("send SIGTERM");
    let status = srv.wait_exit(Duration::from_secs(GRACE_SECS + 3));
    let took = t.elapsed();
    let mut stderr = String::new();
    if status.is_none() {
        stderr = "(not read: still running)".into();
    } else if let Some(mut e) = srv.take_stderr() {
        let _ = e.read_to_string(&mut stderr);
    }
    assert_clean_exit(status, took, "tcp server", &stderr);
    // Every client sees a plain close, no stray reply.
    holder.expect_closed(Duration::from_secs(1));
    waiter.expect_closed(Duration::from_secs(1));
    control.expect_closed(Duration::from_secs(1));
}

#[test]
fn sigterm_exits_zero_and_removes_the_unix_socket_file() {
    let path = sock_path("sigterm");
    let mut srv = UnixServer::start(&path, &["--shutdown-grace", &GRACE_SECS.to_string()]);
    let mut holder = srv.connect("holder");
    let mut waiter = srv.connect("waiter");
    let mut control = srv.connect("control");
    hold_a_job_and_block_a_reserve(&mut holder, &mut waiter, &mut control);

    let t = Instant::now();
    sigterm(srv.pid());
    let status = srv.wait_exit(Duration::from_secs(GRACE_SECS + 3));
    let took = t.elapsed();
    thread::sleep(Duration::from_millis(50)); // let the stderr drain catch up
    assert_clean_exit(status, took, "unix server", &srv.stderr_text());
    holder.expect_closed(Duration::from_secs(1));
    waiter.expect_closed(Duration::from_secs(1));
    assert!(
        std::fs::symlink_metadata(&path).is_err(),
        "{} still exists after a graceful shutdown",
        path.display()
    );
}

// ---------------------------------------------------------------------------------------
// 8. Unix sockets.

#[test]
fn unix_socket_serves_the_protocol_and_replaces_a_stale_socket_file() {
    let path = sock_path("stale");
    // A stale socket: bound, then abandoned (the file stays, nobody listens).
    drop(UnixListener::bind(&path).expect("bind a socket to make stale"));
    let meta = std::fs::symlink_metadata(&path).expect("stale socket file exists");
    assert!(meta.file_type().is_socket());
    assert!(
        UnixStream::connect(&path).is_err(),
        "the stale socket must refuse"
    );

    let srv = UnixServer::start(&path, &[]);
    let mut producer = srv.connect("producer");
    let mut worker = srv.connect("worker");
    assert_eq!(producer.request(b"use jobs\r\n"), "USING jobs");
    assert_eq!(
        producer.request(b"put 5 0 60 11\r\nhello\r\nunix\r\n"),
        "INSERTED 1"
    );
    assert_eq!(worker.request(b"watch jobs\r\n"), "WATCHING 2");
    assert_eq!(worker.request(b"reserve\r\n"), "RESERVED 1 11");
    worker.expect(b"hello\r\nunix\r\n", REPLY);
    assert_eq!(worker.request(b"delete 1\r\n"), "DELETED");

    // A blocked reserve over the unix socket is woken by a put on another connection.
    worker.send(b"reserve\r\n");
    worker.expect_silence(Duration::from_millis(100));
    assert_eq!(producer.request(b"put 0 0 60 2\r\nhi\r\n"), "INSERTED 2");
    worker.expect(b"RESERVED 2 2\r\nhi\r\n", REPLY);
    prompt_cycle(&mut worker, "over unix");
}

#[test]
fn unix_socket_path_holding_a_regular_file_is_left_alone() {
    // beanstalkd only replaces a socket: for any other file it refuses to start
    // ("another file already exists in the given path", exit 111) and leaves it.
    let path = sock_path("regular");
    std::fs::write(&path, b"precious data\n").expect("write a regular file");
    let mut srv = UnixServer::spawn(&path, &[]);
    let status = srv.wait_exit(Duration::from_secs(5));
    let content = std::fs::read(&path);
    let started = status.is_none();
    let stderr = srv.stderr_text();
    drop(srv); // kills it if it did start, and cleans up the path
    assert!(
        matches!(&content, Ok(c) if c == b"precious data\n"),
        "redstalk -l unix:{} deleted or replaced the regular file there (read back: {:?}); \
         server {}",
        path.display(),
        content.as_ref().map(|c| show(c)),
        if started {
            "started listening"
        } else {
            "exited"
        }
    );
    let status = status.expect("the server must refuse to start, not serve");
    assert!(
        !status.success(),
        "refusal must exit non-zero: {status}; stderr: {stderr}"
    );
}

// ---------------------------------------------------------------------------------------
// 9. The command line.

#[test]
fn cli_version_help_usage_errors_and_binlog_flags() {
    let (status, out, err) = run_cli(&["-v"]);
    assert_eq!(status.code(), Some(0), "-v: {status}; stderr: {err}");
    assert!(
        out.contains("redstalk") && out.contains(env!("CARGO_PKG_VERSION")),
        "-v printed {out:?}"
    );

    let (status, out, err) = run_cli(&["-h"]);
    assert_eq!(status.code(), Some(0), "-h: {status}; stderr: {err}");
    assert!(
        out.contains("-l") && out.contains("-p"),
        "-h printed {out:?} / {err:?}"
    );

    for args in [
        &["--no-such-flag"][..],
        &["-Q"],
        &["stray-argument"],
        &["-p"],
    ] {
        let (status, out, err) = run_cli(args);
        assert_eq!(
            status.code(),
            Some(5),
            "{args:?}: {status}; stdout: {out}; stderr: {err}"
        );
        assert!(!err.is_empty(), "{args:?}: usage error without a message");
    }

    // The binlog flags work (protocol-tests/binlog.rs); -b with --redis is refused, and
    // their values are checked as beanstalkd's are.
    let (status, _out, err) = run_cli(&["-b", "/tmp/x", "--redis", "redis://127.0.0.1:1/0"]);
    assert_eq!(
        status.code(),
        Some(5),
        "-b with --redis: {status}; stderr: {err}"
    );
    assert!(
        err.contains("--redis") && err.contains("-b"),
        "-b with --redis: message {err:?} names neither"
    );
    for args in [
        &["-b", "/tmp/x", "-f", "soon"][..],
        &["-b", "/tmp/x", "-s", "big"],
    ] {
        let (status, _out, err) = run_cli(args);
        assert_eq!(status.code(), Some(5), "{args:?}: {status}; stderr: {err}");
    }
}
