//! A tiny blocking beanstalk client for tests that drive real server processes
//! (`multi_instance.rs`, `durability.rs`, …): one TCP connection, plain `std` sockets,
//! every read bounded by a timeout so a misbehaving server fails a test instead of
//! hanging it.
//!
//! The helpers panic (naming the connection) on anything unexpected: a missing reply,
//! a closed connection, a malformed frame. Methods that may legitimately see several
//! replies return a [`Reply`] (the line plus the body, for `RESERVED`/`FOUND`/`OK`)
//! and leave judging it to the test.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// How long an ordinary reply may take before the client gives up.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// One reply: its line (without CRLF) and, for `RESERVED`, `FOUND` and `OK`, its body
/// (without the trailing CRLF).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub line: String,
    pub body: Option<Vec<u8>>,
}

impl Reply {
    /// The first word of the line (`RESERVED`, `NOT_FOUND`, …).
    pub fn word(&self) -> &str {
        self.line.split(' ').next().unwrap_or("")
    }

    /// The job id of a `RESERVED <id> <n>` / `FOUND <id> <n>` / `INSERTED <id>` /
    /// `BURIED <id>` reply.
    pub fn id(&self) -> Option<u64> {
        let mut words = self.line.split(' ');
        match words.next()? {
            "RESERVED" | "FOUND" | "INSERTED" | "BURIED" => words.next()?.parse().ok(),
            _ => None,
        }
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(self.body.as_deref().unwrap_or_default()).into_owned()
    }
}

pub struct Client {
    pub name: String,
    sock: super::tls::Sock,
    buf: Vec<u8>,
    /// The bound on each reply read by the convenience methods.
    pub timeout: Duration,
}

impl Client {
    /// Connect (panics on failure). `name` appears in every panic message.
    pub fn connect(addr: SocketAddr, name: impl Into<String>) -> Client {
        let name = name.into();
        Self::try_connect(addr, name.clone())
            .unwrap_or_else(|e| panic!("{name}: connect to {addr}: {e}"))
    }

    pub fn try_connect(addr: SocketAddr, name: impl Into<String>) -> io::Result<Client> {
        Self::from_stream(
            TcpStream::connect_timeout(&addr, Duration::from_secs(5))?,
            name,
        )
    }

    /// A client on a connection opened elsewhere (e.g. one of many raw sockets).
    pub fn from_stream(sock: TcpStream, name: impl Into<String>) -> io::Result<Client> {
        Self::from_sock(super::tls::Sock::Plain(sock), name)
    }

    /// A client on a plain or TLS connection.
    pub fn from_sock(sock: super::tls::Sock, name: impl Into<String>) -> io::Result<Client> {
        sock.tcp().set_nodelay(true)?;
        sock.tcp()
            .set_write_timeout(Some(Duration::from_secs(30)))?;
        Ok(Client {
            name: name.into(),
            sock,
            buf: Vec::new(),
            timeout: REPLY_TIMEOUT,
        })
    }

    /// The underlying socket (e.g. to shut it down).
    pub fn socket(&self) -> &TcpStream {
        self.sock.tcp()
    }

    /// Stop sending (a TLS close_notify first, on TLS).
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        self.sock.shutdown_write()
    }

    /// Write raw bytes.
    pub fn send(&mut self, bytes: &[u8]) {
        if let Err(e) = self.sock.write_all(bytes) {
            panic!(
                "{}: send {:?}: {e}",
                self.name,
                String::from_utf8_lossy(bytes)
            );
        }
    }

    /// Write one command line (CRLF appended).
    pub fn send_line(&mut self, line: &str) {
        let mut b = Vec::with_capacity(line.len() + 2);
        b.extend_from_slice(line.as_bytes());
        b.extend_from_slice(b"\r\n");
        self.send(&b);
    }

    /// Read more bytes, waiting until `deadline` at most.
    fn fill(&mut self, deadline: Instant) -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(ErrorKind::TimedOut, "timed out"));
        }
        self.sock.set_read_timeout(Some(left))?;
        let mut chunk = [0u8; 16 * 1024];
        match self.sock.read(&mut chunk) {
            Ok(0) => Err(io::Error::new(
                ErrorKind::UnexpectedEof,
                "connection closed",
            )),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(io::Error::new(ErrorKind::TimedOut, "timed out"))
            }
            Err(e) => Err(e),
        }
    }

    /// The next line within `timeout`; `Err` (kind `TimedOut`, `UnexpectedEof`, …)
    /// otherwise. Nothing is consumed on error.
    pub fn try_line(&mut self, timeout: Duration) -> io::Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line: Vec<u8> = self.buf.drain(..i + 2).collect();
                return Ok(String::from_utf8_lossy(&line[..i]).into_owned());
            }
            self.fill(deadline)?;
        }
    }

    /// Exactly `n` bytes within `timeout`.
    pub fn try_take(&mut self, n: usize, timeout: Duration) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        while self.buf.len() < n {
            self.fill(deadline)?;
        }
        Ok(self.buf.drain(..n).collect())
    }

    /// The next reply (line, and body when it has one) within `timeout`.
    pub fn try_reply(&mut self, timeout: Duration) -> io::Result<Reply> {
        let deadline = Instant::now() + timeout;
        let line = self.try_line(timeout)?;
        let mut words = line.split(' ');
        let len = match (words.next(), words.next(), words.next()) {
            (Some("RESERVED" | "FOUND"), Some(_), Some(n)) => n.parse::<usize>().ok(),
            (Some("OK"), Some(n), None) => n.parse::<usize>().ok(),
            _ => None,
        };
        let body = match len {
            Some(n) => {
                let left = deadline.saturating_duration_since(Instant::now());
                let mut b = self.try_take(n + 2, left.max(Duration::from_millis(1)))?;
                if &b[n..] != b"\r\n" {
                    return Err(io::Error::new(
                        ErrorKind::InvalidData,
                        format!("{line:?}: body not ended by CRLF"),
                    ));
                }
                b.truncate(n);
                Some(b)
            }
            None => None,
        };
        Ok(Reply { line, body })
    }

    /// Send raw bytes and read the reply within `timeout`; any I/O failure (a closed or
    /// reset connection, a timeout) is returned rather than panicking, for tests that
    /// expect the server or its Redis to go away.
    pub fn try_call(&mut self, request: &[u8], timeout: Duration) -> io::Result<Reply> {
        self.sock.write_all(request)?;
        self.try_reply(timeout)
    }

    /// [`Client::try_call`] of a `put`.
    pub fn try_put(
        &mut self,
        pri: u32,
        delay: u32,
        ttr: u32,
        body: &[u8],
        timeout: Duration,
    ) -> io::Result<Reply> {
        self.try_call(&put_request(pri, delay, ttr, body), timeout)
    }

    /// The next reply within [`Client::timeout`] (panics otherwise).
    pub fn reply(&mut self) -> Reply {
        let t = self.timeout;
        self.try_reply(t)
            .unwrap_or_else(|e| panic!("{}: no reply within {t:?}: {e}", self.name))
    }

    /// Send a command line and return its reply.
    pub fn cmd(&mut self, line: &str) -> Reply {
        self.send_line(line);
        let t = self.timeout;
        self.try_reply(t)
            .unwrap_or_else(|e| panic!("{}: {line:?}: no reply within {t:?}: {e}", self.name))
    }

    /// Send a command line and return its reply line only.
    pub fn line(&mut self, line: &str) -> String {
        self.cmd(line).line
    }

    /// Send a command line; its reply line must be `want`.
    pub fn expect(&mut self, line: &str, want: &str) {
        let got = self.cmd(line);
        assert_eq!(got.line, want, "{}: {line:?}", self.name);
    }

    /// Send a `put` (the request only; read the reply with [`Client::reply`]).
    pub fn send_put(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) {
        self.send(&put_request(pri, delay, ttr, body));
    }

    /// `put`, returning the reply (INSERTED, BURIED, …).
    pub fn put_reply(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> Reply {
        self.send_put(pri, delay, ttr, body);
        self.reply()
    }

    /// `put` that must answer `INSERTED <id>`; returns the id.
    pub fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> u64 {
        let r = self.put_reply(pri, delay, ttr, body);
        match (r.word(), r.id()) {
            ("INSERTED", Some(id)) => id,
            _ => panic!("{}: put answered {:?}", self.name, r.line),
        }
    }

    /// `use <tube>` (must answer `USING <tube>`).
    pub fn use_tube(&mut self, tube: &str) {
        self.expect(&format!("use {tube}"), &format!("USING {tube}"));
    }

    /// `watch <tube>`; returns the watch count.
    pub fn watch(&mut self, tube: &str) -> usize {
        let r = self.line(&format!("watch {tube}"));
        r.strip_prefix("WATCHING ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{}: watch {tube} answered {r:?}", self.name))
    }

    /// `ignore <tube>`: the reply line.
    pub fn ignore(&mut self, tube: &str) -> String {
        self.line(&format!("ignore {tube}"))
    }

    /// Watch only `tube` (watch it, ignore `default` unless it is `tube`).
    pub fn watch_only(&mut self, tube: &str) {
        self.watch(tube);
        if tube != "default" {
            let r = self.ignore("default");
            assert_eq!(r, "WATCHING 1", "{}: ignore default", self.name);
        }
    }

    /// `reserve` that must answer `RESERVED`; returns (id, body). Waits up to
    /// [`Client::timeout`].
    pub fn reserve(&mut self) -> (u64, Vec<u8>) {
        let r = self.cmd("reserve");
        Self::job(&self.name, "reserve", r)
    }

    /// `reserve-with-timeout <secs>`: `Some((id, body))` on RESERVED, `None` on
    /// TIMED_OUT; panics on anything else (DEADLINE_SOON included).
    pub fn reserve_timeout(&mut self, secs: u32) -> Option<(u64, Vec<u8>)> {
        let r = self.cmd(&format!("reserve-with-timeout {secs}"));
        if r.line == "TIMED_OUT" {
            return None;
        }
        Some(Self::job(&self.name, "reserve-with-timeout", r))
    }

    fn job(name: &str, what: &str, r: Reply) -> (u64, Vec<u8>) {
        match (r.word() == "RESERVED", r.id()) {
            (true, Some(id)) if r.body.is_some() => (id, r.body.unwrap_or_default()),
            _ => panic!("{name}: {what} answered {:?}", r.line),
        }
    }

    /// An `OK <n>` YAML reply to `line`, as text.
    pub fn yaml(&mut self, line: &str) -> String {
        let r = self.cmd(line);
        assert_eq!(
            r.word(),
            "OK",
            "{}: {line:?} answered {:?}",
            self.name,
            r.line
        );
        r.text()
    }

    /// A YAML dictionary reply (`stats`, `stats-job`, `stats-tube`) as (key, value)
    /// pairs in order, values with surrounding quotes removed.
    pub fn dict(&mut self, line: &str) -> Vec<(String, String)> {
        parse_dict(&self.yaml(line))
    }

    /// One value of a YAML dictionary reply (panics if the key is absent).
    pub fn dict_value(&mut self, line: &str, key: &str) -> String {
        let d = self.dict(line);
        d.iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{}: {line:?} has no {key}: {d:?}", self.name))
    }

    /// How long after `since` job `id` was seen ready (`stats-job` polled every 20 ms);
    /// panics once `limit` has passed.
    pub fn ready_after(&mut self, id: u64, since: Instant, limit: Duration) -> Duration {
        while self.dict_value(&format!("stats-job {id}"), "state") != "ready" {
            assert!(
                since.elapsed() < limit,
                "{}: job {id} never became ready",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        since.elapsed()
    }

    /// One `stats` value.
    pub fn stat(&mut self, key: &str) -> String {
        self.dict_value("stats", key)
    }

    /// One `stats` value as a number.
    pub fn stat_u64(&mut self, key: &str) -> u64 {
        let v = self.stat(key);
        v.parse()
            .unwrap_or_else(|_| panic!("{}: stats {key} = {v:?}", self.name))
    }

    /// A YAML list reply (`list-tubes`, `list-tubes-watched`) as its items.
    pub fn list(&mut self, line: &str) -> Vec<String> {
        parse_list(&self.yaml(line))
    }

    /// Nothing arrives for `quiet` (the connection stays open and silent).
    pub fn expect_silence(&mut self, quiet: Duration) {
        match self.try_line(quiet) {
            Err(e) if e.kind() == ErrorKind::TimedOut && self.buf.is_empty() => {}
            Err(e) if e.kind() == ErrorKind::TimedOut => panic!(
                "{}: expected silence, received {:?}",
                self.name,
                String::from_utf8_lossy(&self.buf)
            ),
            Err(e) => panic!("{}: expected silence, got {e}", self.name),
            Ok(l) => panic!("{}: expected silence, received {l:?}", self.name),
        }
    }
}

/// The bytes of a `put` request.
pub fn put_request(pri: u32, delay: u32, ttr: u32, body: &[u8]) -> Vec<u8> {
    let mut req = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
    req.extend_from_slice(body);
    req.extend_from_slice(b"\r\n");
    req
}

/// `key: value` lines of a YAML dictionary (the `---` header skipped).
pub fn parse_dict(yaml: &str) -> Vec<(String, String)> {
    yaml.lines()
        .filter(|l| *l != "---")
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect()
}

/// `- item` lines of a YAML list.
pub fn parse_list(yaml: &str) -> Vec<String> {
    yaml.lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(|v| v.trim_matches('"').to_string())
        .collect()
}

/// The jobs a persistence test puts in milliseconds (docs/EXTENSIONS.md): one delayed
/// `delay_ms`, one ready with a TTR of 1500ms.
pub struct MsJobs {
    pub delayed: u64,
    pub short: u64,
    pub delay_ms: u64,
    pub put_at: Instant,
}

impl MsJobs {
    /// Put them, into the used tube.
    pub fn put(c: &mut Client, delay_ms: u64) -> MsJobs {
        c.send(format!("put 0 {delay_ms}ms 60 1\r\nd\r\n").as_bytes());
        let delayed = c.reply().id().expect("INSERTED");
        let put_at = Instant::now();
        c.send(b"put 0 0 1500ms 1\r\nt\r\n");
        let short = c.reply().id().expect("INSERTED");
        MsJobs {
            delayed,
            short,
            delay_ms,
            put_at,
        }
    }

    /// Check them through `c` (watching their tube) on a server that read them back
    /// (`what` says how): `stats-job` in whole seconds, the TTR lapsing 1.5 s after a
    /// reserve (not 1 s), the delayed job due at its original millisecond.
    pub fn check(&self, c: &mut Client, what: &str) {
        let secs = (self.delay_ms / 1000).to_string();
        assert_eq!(
            c.dict_value(&format!("stats-job {}", self.delayed), "delay"),
            secs
        );
        assert_eq!(
            c.dict_value(&format!("stats-job {}", self.short), "ttr"),
            "1"
        );
        assert_eq!(c.reserve().0, self.short);
        let held = c.ready_after(self.short, Instant::now(), Duration::from_secs(10));
        let limit = Duration::from_millis(self.delay_ms) + Duration::from_secs(20);
        let due = c.ready_after(self.delayed, self.put_at, limit);
        println!(
            "{what}: a 1500ms TTR lapsed {} ms after the reserve, a {}ms delay came due {} ms \
             after the put",
            held.as_millis(),
            self.delay_ms,
            due.as_millis()
        );
        assert!(
            held >= Duration::from_millis(1450),
            "{what}: the TTR lost its ms"
        );
        let early = Duration::from_millis(self.delay_ms - 50);
        assert!(due >= early, "{what}: the delay lost its milliseconds");
    }
}
