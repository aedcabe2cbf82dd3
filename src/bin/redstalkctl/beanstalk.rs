//! A small blocking client of the beanstalk text protocol: what redstalkctl needs of
//! beanstalkd and redstalk alike (stats, tubes, peek, put, delete, kick, pause).
//!
//! Invariants: one request is answered before the next is sent, so replies never
//! interleave; a `put` sends the body's exact byte length and the body as given (any
//! bytes); every read and write has a deadline, so a silent server ends the command
//! with [`CtlError::Unavailable`] instead of hanging it; error words map to the tool's
//! errors in one place ([`reply_error`]).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::dict::Dict;
use crate::error::{CtlError, Result};

/// `stats` values that are strings even when they look like numbers.
const STATS_STRINGS: &[&str] = &["version", "id", "hostname", "os", "platform"];

pub struct Beanstalk {
    addr: String,
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// The tube `use`d last on this connection (`default` at first).
    used: String,
}

impl Beanstalk {
    /// Connect to `addr` (`HOST:PORT`), each try bounded by `timeout`, which also
    /// bounds each read and write after.
    pub fn connect(addr: &str, timeout: Duration) -> Result<Beanstalk> {
        let connect_err = |reason: String| CtlError::Connect {
            addr: addr.to_string(),
            reason,
        };
        let addrs = addr
            .to_socket_addrs()
            .map_err(|e| connect_err(e.to_string()))?;
        let mut last = "no address".to_string();
        for a in addrs {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(sock) => {
                    let io = |e: std::io::Error| connect_err(e.to_string());
                    sock.set_read_timeout(Some(timeout)).map_err(io)?;
                    sock.set_write_timeout(Some(timeout)).map_err(io)?;
                    let _ = sock.set_nodelay(true);
                    let writer = sock.try_clone().map_err(io)?;
                    return Ok(Beanstalk {
                        addr: addr.to_string(),
                        reader: BufReader::new(sock),
                        writer,
                        used: "default".to_string(),
                    });
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(connect_err(last))
    }

    fn broken(&self, e: std::io::Error) -> CtlError {
        CtlError::Unavailable(format!("connection to {} broke: {e}", self.addr))
    }

    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        self.writer.write_all(bytes).map_err(|e| self.broken(e))
    }

    /// One reply line, without its `\r\n`.
    fn line(&mut self) -> Result<String> {
        let mut buf = Vec::new();
        let n = self
            .reader
            .read_until(b'\n', &mut buf)
            .map_err(|e| self.broken(e))?;
        if n == 0 || !buf.ends_with(b"\r\n") {
            return Err(CtlError::Unavailable(format!(
                "{} closed the connection",
                self.addr
            )));
        }
        buf.truncate(buf.len() - 2);
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// The `n` data bytes that follow an `OK n` / `FOUND id n` line, and their `\r\n`.
    fn data(&mut self, n: usize) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; n + 2];
        self.reader
            .read_exact(&mut buf)
            .map_err(|e| self.broken(e))?;
        buf.truncate(n);
        Ok(buf)
    }

    /// Send one command line and read the reply line, split into words.
    fn call(&mut self, line: &str) -> Result<Vec<String>> {
        self.send(format!("{line}\r\n").as_bytes())?;
        let reply = self.line()?;
        Ok(reply.split(' ').map(str::to_string).collect())
    }

    /// A command whose success is `OK <n>` and YAML data.
    fn yaml(&mut self, line: &str, what: &str) -> Result<String> {
        let words = self.call(line)?;
        match words.as_slice() {
            [ok, n] if ok == "OK" => {
                let n = parse_num(n, line)?;
                let data = self.data(n as usize)?;
                Ok(String::from_utf8_lossy(&data).into_owned())
            }
            _ => Err(reply_error(&words, line, what)),
        }
    }

    pub fn stats(&mut self) -> Result<Dict> {
        Ok(Dict::from_yaml(
            &self.yaml("stats", "server")?,
            STATS_STRINGS,
        ))
    }

    pub fn list_tubes(&mut self) -> Result<Vec<String>> {
        let yaml = self.yaml("list-tubes", "tubes")?;
        Ok(yaml
            .lines()
            .filter_map(|l| l.strip_prefix("- "))
            .map(str::to_string)
            .collect())
    }

    pub fn stats_tube(&mut self, tube: &str) -> Result<Dict> {
        let yaml = self.yaml(&format!("stats-tube {tube}"), &format!("tube {tube}"))?;
        Ok(Dict::from_yaml(&yaml, &["name"]))
    }

    pub fn stats_job(&mut self, id: u64) -> Result<Dict> {
        let yaml = self.yaml(&format!("stats-job {id}"), &format!("job {id}"))?;
        Ok(Dict::from_yaml(&yaml, &["tube", "state"]))
    }

    /// The body of job `id` (`peek`).
    pub fn peek(&mut self, id: u64) -> Result<Vec<u8>> {
        let line = format!("peek {id}");
        let words = self.call(&line)?;
        match words.as_slice() {
            [found, _, n] if found == "FOUND" => {
                let n = parse_num(n, &line)?;
                self.data(n as usize)
            }
            _ => Err(reply_error(&words, &line, &format!("job {id}"))),
        }
    }

    fn use_tube(&mut self, tube: &str) -> Result<()> {
        if self.used == tube {
            return Ok(());
        }
        let line = format!("use {tube}");
        let words = self.call(&line)?;
        match words.first().map(String::as_str) {
            Some("USING") => {
                self.used = tube.to_string();
                Ok(())
            }
            _ => Err(reply_error(&words, &line, &format!("tube {tube}"))),
        }
    }

    /// Put `body` into `tube`; the new job's id.
    pub fn put(&mut self, tube: &str, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> Result<u64> {
        self.use_tube(tube)?;
        let line = format!("put {pri} {delay} {ttr} {}", body.len());
        let mut req = format!("{line}\r\n").into_bytes();
        req.extend_from_slice(body);
        req.extend_from_slice(b"\r\n");
        self.send(&req)?;
        let reply = self.line()?;
        let words: Vec<String> = reply.split(' ').map(str::to_string).collect();
        match words.as_slice() {
            [w, id] if w == "INSERTED" => parse_num(id, &line),
            [w, id] if w == "BURIED" => Err(CtlError::Unavailable(format!(
                "the server is out of memory: job {id} was put buried"
            ))),
            [w] if w == "JOB_TOO_BIG" => Err(CtlError::Usage(format!(
                "the body ({} bytes) is larger than the server's -z limit",
                body.len()
            ))),
            _ => Err(reply_error(&words, &line, &format!("tube {tube}"))),
        }
    }

    pub fn delete(&mut self, id: u64) -> Result<()> {
        self.expect(&format!("delete {id}"), "DELETED", &format!("job {id}"))
    }

    /// `kick` at most `bound` jobs of `tube` (buried ones, else delayed ones); how many.
    pub fn kick(&mut self, tube: &str, bound: u64) -> Result<u64> {
        self.use_tube(tube)?;
        let line = format!("kick {bound}");
        let words = self.call(&line)?;
        match words.as_slice() {
            [w, n] if w == "KICKED" => parse_num(n, &line),
            _ => Err(reply_error(&words, &line, &format!("tube {tube}"))),
        }
    }

    pub fn kick_job(&mut self, id: u64) -> Result<()> {
        self.expect(&format!("kick-job {id}"), "KICKED", &format!("job {id}"))
    }

    /// `flush-tube <tube> [<state>...]` (a redstalk extension): how many were deleted.
    pub fn flush_tube(&mut self, tube: &str, states: &[&str]) -> Result<u64> {
        let line = std::iter::once(format!("flush-tube {tube}"))
            .chain(states.iter().map(|s| s.to_string()))
            .collect::<Vec<_>>()
            .join(" ");
        let words = self.call(&line)?;
        match words.as_slice() {
            [w, n] if w == "FLUSHED" => parse_num(n, &line),
            _ => Err(reply_error(&words, &line, &format!("tube {tube}"))),
        }
    }

    pub fn pause_tube(&mut self, tube: &str, secs: u32) -> Result<()> {
        let line = format!("pause-tube {tube} {secs}");
        self.expect(&line, "PAUSED", &format!("tube {tube}"))
    }

    /// `find-key` in `tube` (a redstalk extension): the key's job id and state word
    /// (`DELETED` inside its dedupe window).
    pub fn find_key(&mut self, tube: &str, key: &str) -> Result<(u64, String)> {
        self.use_tube(tube)?;
        let line = format!("find-key {key}");
        let words = self.call(&line)?;
        match words.as_slice() {
            [w, id, state] if w == "FOUND_KEY" => Ok((parse_num(id, &line)?, state.clone())),
            _ => Err(reply_error(
                &words,
                &line,
                &format!("key {key} in tube {tube}"),
            )),
        }
    }

    fn expect(&mut self, line: &str, want: &str, what: &str) -> Result<()> {
        let words = self.call(line)?;
        if words.len() == 1 && words[0] == want {
            Ok(())
        } else {
            Err(reply_error(&words, line, what))
        }
    }
}

fn parse_num(s: &str, line: &str) -> Result<u64> {
    s.parse()
        .map_err(|_| CtlError::Unavailable(format!("unexpected reply to `{line}`: {s:?}")))
}

/// The tool's error for a beanstalk error reply to `line`, about `what`.
fn reply_error(words: &[String], line: &str, what: &str) -> CtlError {
    let word = words.first().map(String::as_str).unwrap_or("");
    match word {
        "NOT_FOUND" => CtlError::NotFound(format!("{what} does not exist")),
        "UNKNOWN_COMMAND" => {
            let cmd = line.split(' ').next().unwrap_or(line);
            CtlError::Unsupported(format!("the server does not know `{cmd}`"))
        }
        "BAD_FORMAT" => CtlError::Usage(format!("the server refused `{line}` as malformed")),
        "DRAINING" => CtlError::Unavailable("the server is draining".into()),
        "OUT_OF_MEMORY" | "INTERNAL_ERROR" => {
            CtlError::Unavailable(format!("the server answered {word} to `{line}`"))
        }
        _ => CtlError::Unavailable(format!(
            "unexpected reply to `{line}`: {:?}",
            words.join(" ")
        )),
    }
}
