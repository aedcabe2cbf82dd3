//! Seeded randomized differential test: one random command stream is sent to
//! beanstalkd (the reference) and to a subject server, and every reply must match
//! byte for byte.
//!
//! The subject is redstalk on its in-memory engine by default;
//! `REDSTALK_DIFF_SUBJECT=beanstalkd` makes it a second beanstalkd, which validates the
//! harness itself: two beanstalkd processes must agree on every reply, so any mismatch
//! there is a nondeterminism in the generator, not a server bug.
//!
//! `differential_over_a_redis_cluster` runs the fixed seeds with the subject in both Redis
//! modes on a Redis Cluster (a fresh prefix per seed).
//!
//! Each seed gets a fresh pair of servers (both started with `-z 1024`), [`CONNS`]
//! client connections to each, and one hidden control connection. The connections are
//! driven in lockstep, one step at a time: a step picks a connection, generates one
//! write (a command, a put with its body, a short pipeline of commands, a quit, or a
//! client-side close), sends the same bytes to both servers and reads the same number
//! of replies from both before the next step. Some writes are split into pieces sent
//! 1 ms apart, so lines and bodies also arrive in fragments. The generator knows how
//! many replies beanstalkd sends for what it generates (for example a malformed put
//! gets BAD_FORMAT and its body line is then parsed as a command); after each step any
//! further byte that has already arrived is reported. With `REDSTALK_DIFF_SETTLE_MS=N`
//! the harness waits N ms before that check, which is how the generator's reply counts
//! are validated against beanstalkd.
//!
//! The generator covers valid and invalid forms of every command: put (text, binary
//! bodies with CR/LF/NUL, bodies up to and at the size limit, wrong body length giving
//! EXPECTED_CRLF, JOB_TOO_BIG with its body skip, malformed numbers giving BAD_FORMAT
//! without a body skip), use/watch/ignore (valid, 200-byte and bad names),
//! reserve-with-timeout 0, reserve-job, delete, release, bury, touch, kick (with its
//! lenient number parsing), kick-job, the peeks, the stats commands, the lists,
//! pause-tube (with its lenient parsing), quit and close with reconnection, unknown
//! commands and prefix-dispatch quirks, NUL bytes in lines, lines at the 224-byte limit
//! and over-long lines. Ids are drawn mostly from the live range and from the
//! connection's own reservations, tube names from a small pool, so commands hit real
//! jobs and real tubes. The generator reads the reference's replies (job ids, which
//! jobs a connection holds) to aim its next commands; the reference is deterministic,
//! so a seed still replays exactly.
//!
//! What the generator avoids, and why (each would make the two servers' replies depend
//! on timing rather than on the command stream):
//! - blocking `reserve` and `reserve-with-timeout N` with N > 0: a blocked command makes
//!   lockstep ambiguous (which later event satisfies it depends on timing);
//! - delays, pause durations and TTRs that could run out during the run: only 0 and
//!   values of at least 86 400 s are used (distinct long values differ by far more than
//!   a run lasts, so delayed-job order is fixed by the command stream). A TTR this long
//!   also means no DEADLINE_SOON and no TTR expiry;
//! - `reserve-with-timeout` with a negative, junk or out-of-range number: beanstalkd
//!   1.12 (the installed oracle) parses it with `strtol`, 1.13 (redstalk's target)
//!   rejects it, so the two legitimately differ;
//! - the two documented deviations: a stray CR inside a line (beanstalkd stalls until
//!   224 bytes pile up) and a line whose CR falls on a 224-byte boundary, i.e. a
//!   225-byte line (beanstalkd loses the line end and desyncs);
//! - racing a client-side close: after a quit or close the harness polls `stats` on
//!   its control connection of both servers, the same number of times on each, until
//!   both count the connection as gone (its reservations released), and again after
//!   reconnecting until both have accepted the new connection. One seed in four puts
//!   both servers in drain mode (SIGUSR1) late in the run, and waits the same way until
//!   both report `draining: true`.
//!
//! Normalisation, and nothing else: in `stats` the values of pid, uptime,
//! rusage-utime, rusage-stime, version, id, hostname, os and platform are masked; in
//! `stats-job` `age` and `time-left`, and in `stats-tube` `pause-time-left`, are masked
//! too, because they are floor(seconds) of a clock difference and can flip across a
//! second boundary between two servers that did the same thing microseconds apart;
//! beanstalkd 1.12's unquoted `name`/`tube`/`version`/`hostname`/`os`/`platform`
//! values are quoted as 1.13 does (only for beanstalkd; a subject must quote itself).
//! The `OK <n>` byte count is adjusted by the length the normalisation changed, so a
//! wrong count from the subject is still caught.
//!
//! Environment: `REDSTALK_DIFF_SEED` (one seed or a comma-separated list, decimal or
//! 0x-hex; default: three fixed seeds plus one from the clock, printed),
//! `REDSTALK_DIFF_COMMANDS` (steps per seed, default 5000), `REDSTALK_DIFF_SUBJECT`
//! (`memory`, the default, or `beanstalkd`), `REDSTALK_DIFF_SETTLE_MS` (default 0).
//! A missing beanstalkd skips the test loudly unless `REDSTALK_REQUIRE_ORACLE=1`.
//! On a mismatch the test fails with the seed, step, connection, the exact bytes sent,
//! both replies and the last steps, escaped as in `protocol-tests/cases`.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::rng::Rng;
use support::yaml::{self, VOLATILE_STATS_KEYS};
use support::{ServerKind, ServerProc};

/// Client connections per server.
const CONNS: usize = 4;
/// `-z` given to both servers: small enough that JOB_TOO_BIG is cheap to provoke.
const MAX_JOB_SIZE: u64 = 1024;
/// Seeds every default run replays (plus one from the clock).
const FIXED_SEEDS: [u64; 3] = [0x5eed_0001, 0x5eed_0002, 0x5eed_0003];
/// Steps per seed by default: 4 seeds x 5000 = 20000 steps.
const DEFAULT_COMMANDS: usize = 5000;
/// How long a reply may take before it counts as missing.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// Steps shown before a mismatch.
const HISTORY: usize = 20;
/// Non-zero delays (put, release, pause-tube). None can run out during a run, and any
/// two differ by far more than a run lasts.
const LONG_DELAYS: [u64; 4] = [100_000, 200_000, 300_000, 4_294_967_295];
/// TTRs: long enough that nothing expires and nothing is ever DEADLINE_SOON.
const TTRS: [u64; 4] = [86_400, 100_000, 1_000_000, 4_294_967_295];
/// Valid tube names (besides a 200-byte one), most weight on the first few.
const TUBES: [&str; 8] = ["default", "a", "b", "c", "tube-1", "x_y.z", "(p)$;+/", "T0"];

// ---------------------------------------------------------------------------------------
// ---------------------------------------------------------------------------------------
// The generator.

/// What a reply tells the generator (read from the reference's reply only).
#[derive(Clone, Copy, Debug)]
enum Hint {
    Nothing,
    /// `INSERTED <id>`: the live id range grew.
    Put,
    /// `FOUND <id> …`: a job id seen.
    Found,
    /// `RESERVED <id> …`: this connection now holds the job.
    Reserve,
    /// `DELETED` / `RELEASED` / `BURIED`: this connection no longer holds the job.
    Drop(u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Send the bytes, read one reply per hint.
    Send,
    /// Send a quit line; the only reply is the server closing the connection.
    Quit,
    /// The client closes the connection (nothing is sent).
    Close,
    /// Both servers get SIGUSR1 (drain mode); only the session issues it.
    Drain,
}

struct Step {
    action: Action,
    bytes: Vec<u8>,
    /// One entry per reply the reference sends.
    hints: Vec<Hint>,
    /// Offsets at which the bytes are split into separate writes, 1 ms apart, so that
    /// lines and bodies arrive in pieces (empty: one write).
    splits: Vec<usize>,
}

/// Generated bytes plus the hint for each reply they draw.
type Piece = (Vec<u8>, Vec<Hint>);

fn line(text: impl AsRef<[u8]>) -> Vec<u8> {
    let mut v = text.as_ref().to_vec();
    v.extend_from_slice(b"\r\n");
    v
}

fn one(text: impl AsRef<[u8]>) -> Piece {
    (line(text), vec![Hint::Nothing])
}

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// A valid 200-byte tube name (the longest allowed).
fn long_tube_name() -> String {
    let pattern = "long-(name)_0123456789$;+/.abcdefghij";
    pattern.chars().cycle().take(200).collect()
}

struct Gen {
    rng: Rng,
    /// Highest job id the reference has shown.
    max_id: u64,
    /// Jobs each connection holds, as far as the reference's replies tell.
    reserved: [Vec<u64>; CONNS],
    long_tube: String,
}

impl Gen {
    fn new(seed: u64) -> Gen {
        Gen {
            rng: Rng::new(seed),
            max_id: 0,
            reserved: Default::default(),
            long_tube: long_tube_name(),
        }
    }

    /// The next step, on connection `conn`.
    fn step(&mut self, conn: usize) -> Step {
        let mut step = self.unsplit_step(conn);
        if step.bytes.len() >= 2 && self.rng.chance(8) {
            let pieces = self.rng.range(1, 3);
            let mut splits: Vec<usize> = (0..pieces)
                .map(|_| self.rng.range(1, step.bytes.len() as u64 - 1) as usize)
                .collect();
            splits.sort_unstable();
            splits.dedup();
            step.splits = splits;
        }
        step
    }

    fn unsplit_step(&mut self, conn: usize) -> Step {
        match self.rng.below(100) {
            0 => {
                let quit = *self
                    .rng
                    .pick(&["quit", "quit", "quitxyz", "quit now", "quit "]);
                Step {
                    action: Action::Quit,
                    bytes: line(quit),
                    hints: vec![Hint::Nothing],
                    splits: Vec::new(),
                }
            }
            1 => Step {
                action: Action::Close,
                bytes: Vec::new(),
                hints: Vec::new(),
                splits: Vec::new(),
            },
            2 => {
                let (bytes, hints) = self.line_length();
                Step {
                    action: Action::Send,
                    bytes,
                    hints,
                    splits: Vec::new(),
                }
            }
            3..=6 => {
                // A pipeline: several commands in one write, replies in order.
                let n = self.rng.range(2, 4);
                let mut bytes = Vec::new();
                let mut hints = Vec::new();
                for _ in 0..n {
                    let (b, h) = self.command(conn);
                    bytes.extend(b);
                    hints.extend(h);
                }
                Step {
                    action: Action::Send,
                    bytes,
                    hints,
                    splits: Vec::new(),
                }
            }
            _ => {
                let (bytes, hints) = self.command(conn);
                Step {
                    action: Action::Send,
                    bytes,
                    hints,
                    splits: Vec::new(),
                }
            }
        }
    }

    /// One command (with its body, for put). Never quits, never blocks, and leaves the
    /// server's input buffer empty, so commands can be pipelined freely. Its command line
    /// fits the 224-byte line buffer: over-long lines come only from [`Gen::line_length`],
    /// alone at the start of a step, where the 224-byte chunks beanstalkd discards them in
    /// start at the line's first byte.
    fn command(&mut self, conn: usize) -> Piece {
        loop {
            let piece = self.any_command(conn);
            if first_line(&piece.0).len() + 2 <= 224 {
                return piece;
            }
        }
    }

    fn any_command(&mut self, conn: usize) -> Piece {
        match self.rng.below(100) {
            0..=15 => self.put_valid(),
            16..=22 => self.put_invalid(),
            23..=27 => {
                let t = self.tube_arg();
                one(cat(&[b"use ", &t]))
            }
            28..=31 => {
                let t = self.tube_arg();
                one(cat(&[b"watch ", &t]))
            }
            32..=35 => {
                let t = self.tube_arg();
                one(cat(&[b"ignore ", &t]))
            }
            36..=45 => {
                // Only a zero timeout, spelled in ways 1.12 and 1.13 both accept.
                let arg = *self.rng.pick(&["0", "0", "0", "0", "0", "00", " 0", "0 "]);
                (
                    line(format!("reserve-with-timeout {arg}")),
                    vec![Hint::Reserve],
                )
            }
            46..=49 => {
                let (id, _) = self.id_arg(conn);
                (line(format!("reserve-job {id}")), vec![Hint::Reserve])
            }
            50..=55 => {
                let (id, n) = self.id_arg(conn);
                (line(format!("delete {id}")), vec![drop_hint(n)])
            }
            56..=60 => {
                let (id, n) = self.id_arg(conn);
                let pri = self.pri_arg();
                let delay = match self.rng.below(100) {
                    0..=69 => "0".to_string(),
                    70..=94 => {
                        let d = *self.rng.pick(&LONG_DELAYS);
                        self.num(d)
                    }
                    _ => self.rng.pick(&["-1", "4294967296", "x", "1x"]).to_string(),
                };
                (
                    line(format!("release {id} {pri} {delay}")),
                    vec![drop_hint(n)],
                )
            }
            61..=64 => {
                let (id, n) = self.id_arg(conn);
                let pri = self.pri_arg();
                (line(format!("bury {id} {pri}")), vec![drop_hint(n)])
            }
            65..=66 => {
                let (id, _) = self.id_arg(conn);
                one(format!("touch {id}"))
            }
            67..=69 => {
                let arg = if self.rng.chance(65) {
                    self.rng.range(0, 5).to_string()
                } else {
                    // kick parses with strtoul: whitespace, signs and trailing junk pass,
                    // big values wrap to 32 bits.
                    self.rng
                        .pick(&[
                            "100",
                            "-1",
                            "5abc",
                            "4294967297",
                            " 2",
                            "\t2",
                            "2 extra",
                            "abc",
                            "",
                            "99999999999999999999999",
                            "+2",
                            "18446744073709551615",
                            "0x3",
                        ])
                        .to_string()
                };
                one(format!("kick {arg}"))
            }
            70..=72 => {
                let (id, _) = self.id_arg(conn);
                one(format!("kick-job {id}"))
            }
            73..=75 => {
                let (id, _) = self.id_arg(conn);
                (line(format!("peek {id}")), vec![Hint::Found])
            }
            76..=79 => {
                let which = *self
                    .rng
                    .pick(&["peek-ready", "peek-delayed", "peek-buried"]);
                (line(which), vec![Hint::Found])
            }
            80..=83 => {
                let (id, _) = self.id_arg(conn);
                one(format!("stats-job {id}"))
            }
            84..=86 => {
                let t = self.tube_arg();
                one(cat(&[b"stats-tube ", &t]))
            }
            87 => one("stats"),
            88..=89 => one("list-tubes"),
            90 => one("list-tube-used"),
            91..=92 => one("list-tubes-watched"),
            93..=94 => self.pause_tube(),
            95..=98 => self.quirk(),
            _ => self.nul_line(),
        }
    }

    fn put_valid(&mut self) -> Piece {
        let pri = self.pri();
        let delay = if self.rng.chance(20) {
            *self.rng.pick(&LONG_DELAYS)
        } else {
            0
        };
        let ttr = *self.rng.pick(&TTRS);
        let body = self.body();
        let mut bytes = self.put_header(&[pri, delay, ttr, body.len() as u64]);
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(b"\r\n");
        (bytes, vec![Hint::Put])
    }

    /// `put …` with its numbers, sometimes with extra spaces or leading zeros (both
    /// still valid).
    fn put_header(&mut self, nums: &[u64]) -> Vec<u8> {
        let mut s = String::from("put");
        for &n in nums {
            s.push(' ');
            if self.rng.chance(4) {
                s.push(' ');
            }
            s.push_str(&self.num(n));
        }
        line(s)
    }

    fn put_invalid(&mut self) -> Piece {
        let pri = self.pri();
        let ttr = *self.rng.pick(&TTRS);
        match self.rng.below(100) {
            0..=14 => {
                // Exactly n+2 body bytes whose last two are not CRLF: EXPECTED_CRLF.
                let n = self.rng.range(0, 40);
                let mut bytes = self.put_header(&[pri, 0, ttr, n]);
                bytes.extend(self.binary(n as usize));
                let end = *self
                    .rng
                    .pick(&["xy", "\n\r", "\r\r", "\n\n", "\0\0", "\rx", "x\n"]);
                bytes.extend_from_slice(end.as_bytes());
                (bytes, vec![Hint::Nothing])
            }
            15..=27 => {
                // Body longer than declared: EXPECTED_CRLF, then the rest of the body line
                // (upper case, so it is no command) gives UNKNOWN_COMMAND.
                let n = self.rng.range(0, 20);
                let mut bytes = self.put_header(&[pri, 0, ttr, n]);
                if self.rng.chance(25) {
                    // One byte too many: the body takes the CR, the LF is left over and
                    // starts the next line, so the command after it is UNKNOWN_COMMAND.
                    bytes.extend(self.upper(n as usize + 1));
                    bytes.extend_from_slice(b"\r\nlist-tube-used\r\n");
                } else {
                    let len = n + 2 + self.rng.range(0, 10);
                    bytes.extend(self.upper(len as usize));
                    bytes.extend_from_slice(b"\r\n");
                }
                (bytes, vec![Hint::Nothing, Hint::Nothing])
            }
            28..=39 => {
                // Body shorter than declared, padded so exactly n+2 bytes follow: the CRLF
                // lands inside the body, the last two bytes are not CRLF.
                let n = self.rng.range(3, 40);
                let m = self.rng.range(0, n - 1);
                let mut bytes = self.put_header(&[pri, 0, ttr, n]);
                bytes.extend(self.upper(m as usize));
                bytes.extend_from_slice(b"\r\n");
                bytes.extend(self.upper((n - m) as usize));
                (bytes, vec![Hint::Nothing])
            }
            40..=64 => {
                // Over the size limit: the server skips exactly n+2 bytes, whatever they
                // are, even when the line also has trailing junk.
                let n = self.rng.range(MAX_JOB_SIZE + 1, MAX_JOB_SIZE + 1500);
                let junk = *self.rng.pick(&["", "", "", " zz", "x", " "]);
                let mut bytes = line(format!("put {pri} 0 {ttr} {n}{junk}"));
                bytes.extend(self.binary(n as usize + 2));
                (bytes, vec![Hint::Nothing])
            }
            _ => {
                // BAD_FORMAT (or UNKNOWN_COMMAND): the body is NOT skipped, so the body
                // line, if sent, is parsed as a command of its own.
                let header = *self.rng.pick(&[
                    "put -1 0 86400 3",
                    "put 0 -1 86400 3",
                    "put 0 0 -1 3",
                    "put 0 0 86400 -3",
                    "put 4294967296 0 86400 3",
                    "put 0 4294967296 86400 3",
                    "put 0 0 4294967296 3",
                    "put 0 0 86400 4294967296",
                    "put 0 0 86400 99999999999999999999",
                    "put 1x 0 86400 3",
                    "put 0 0 86400 3x",
                    "put x 0 86400 5000",
                    "put 0 0 86400",
                    "put 0 0",
                    "put 0",
                    "put ",
                    "put",
                    "put 0 0 86400 3 ",
                    "put 0 0 86400 3 4",
                    "put +1 0 86400 3",
                    "put 0\t0 86400 3",
                    "put a b c d",
                    "put 0 0 86400 3\0",
                    "PUT 0 0 86400 3",
                    "put 0 0 86400 0x3",
                    "put 0.5 0 86400 3",
                ]);
                let mut bytes = line(header);
                let mut hints = vec![Hint::Nothing];
                if self.rng.chance(50) {
                    let body = *self.rng.pick(&["XYZ", "", "list-tube-used", "peek-ready"]);
                    bytes.extend(line(body));
                    hints.push(Hint::Found);
                }
                (bytes, hints)
            }
        }
    }

    /// A job body of at most MAX_JOB_SIZE bytes.
    fn body(&mut self) -> Vec<u8> {
        match self.rng.below(100) {
            0..=29 => {
                let n = self.rng.range(0, 30) as usize;
                (0..n)
                    .map(|_| *self.rng.pick(b"abcdefghijklmnopqrstuvwxyz0123456789 "))
                    .collect()
            }
            30..=54 => {
                let n = self.rng.range(0, 64) as usize;
                self.binary(n)
            }
            55..=64 => {
                // Line-ending trouble inside the body: harmless there.
                let n = self.rng.range(0, 10);
                let mut v = Vec::new();
                for _ in 0..n {
                    let pieces: [&[u8]; 5] = [b"\r\n", b"\r", b"\n", b"\0", b"x"];
                    let piece = *self.rng.pick(&pieces);
                    v.extend_from_slice(piece);
                }
                v
            }
            65..=74 => Vec::new(),
            75..=89 => {
                let n = self.rng.range(200, MAX_JOB_SIZE) as usize;
                self.binary(n)
            }
            90..=94 => self.binary(MAX_JOB_SIZE as usize),
            _ => self
                .rng
                .pick(&[
                    &b"delete 1\r\nquit\r\n"[..],
                    b"put 0 0 1 1\r\nx",
                    b"reserve\r\n",
                    b"\r\n\r\n",
                ])
                .to_vec(),
        }
    }

    fn binary(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.rng.next_u64() as u8).collect()
    }

    /// Upper-case letters and digits: never the start of a command.
    fn upper(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| *self.rng.pick(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"))
            .collect()
    }

    /// Sometimes written with leading zeros, which are decimal, not octal.
    fn num(&mut self, n: u64) -> String {
        if self.rng.chance(8) {
            format!("0{n}")
        } else {
            n.to_string()
        }
    }

    fn pri(&mut self) -> u64 {
        match self.rng.below(10) {
            0 => 0,
            1 => *self.rng.pick(&[1, 1023, 1024, 1025, 65535]),
            2 => 4_294_967_295,
            3 => self.rng.range(0, 4_294_967_295),
            _ => self.rng.range(0, 2048),
        }
    }

    fn pri_arg(&mut self) -> String {
        if self.rng.chance(8) {
            self.rng
                .pick(&["4294967296", "-1", "x", "1.5", ""])
                .to_string()
        } else {
            let p = self.pri();
            self.num(p)
        }
    }

    /// A job id argument, and its value when it is a well-formed id.
    fn id_arg(&mut self, conn: usize) -> (String, Option<u64>) {
        let r = self.rng.below(100);
        if r < 35 && !self.reserved[conn].is_empty() {
            let id = *self.rng.pick(&self.reserved[conn]);
            return (id.to_string(), Some(id));
        }
        if r < 85 {
            let id = self.rng.range(1, self.max_id + 2);
            return (id.to_string(), Some(id));
        }
        if r < 90 {
            // Leading zeros and extra leading spaces are both accepted.
            let id = self.rng.range(1, self.max_id + 1);
            let text = if self.rng.chance(50) {
                format!("00{id}")
            } else {
                format!(" {id}")
            };
            return (text, Some(id));
        }
        let weird = *self.rng.pick(&[
            "0",
            "18446744073709551615",
            "18446744073709551616",
            "99999999999999999999999",
            "1x",
            "x1",
            "-1",
            "+1",
            "",
            "1 ",
            "1 2",
            "0x10",
            "1\t",
        ]);
        (weird.to_string(), None)
    }

    fn tube(&mut self) -> String {
        match self.rng.below(100) {
            0..=24 => "default".into(),
            25..=44 => "a".into(),
            45..=59 => "b".into(),
            60..=62 => self.long_tube.clone(),
            _ => self.rng.pick(&TUBES).to_string(),
        }
    }

    /// A tube-name argument: mostly valid, sometimes not.
    fn tube_arg(&mut self) -> Vec<u8> {
        if self.rng.chance(85) {
            return self.tube().into_bytes();
        }
        if self.rng.chance(10) {
            return format!("{}x", self.long_tube).into_bytes(); // 201 bytes
        }
        self.rng
            .pick(&[
                &b"-foo"[..],
                b"a:b",
                b"foo bar",
                b"",
                b"a\tb",
                b"fo\0o",
                b"\xc3\xa9",
                b"foo ",
                b" foo",
                b"a,b",
                b"a*",
                b"a#",
            ])
            .to_vec()
    }

    fn pause_tube(&mut self) -> Piece {
        let tube = self.tube();
        let delay = if self.rng.chance(60) {
            0
        } else {
            *self.rng.pick(&LONG_DELAYS)
        };
        let text = match self.rng.below(12) {
            // pause-tube skips any spaces, and its prefix has no trailing space.
            0 => format!("pause-tube  {tube}  {delay}"),
            1 => format!("pause-tube{tube} {delay}"),
            2 => format!("pause-tube {tube} {delay} "),
            3 => format!("pause-tube {tube}"),
            4 => format!(
                "pause-tube {tube} {}",
                self.rng.pick(&["-1", "4294967296", "x", "1x"])
            ),
            5 => {
                let bad = self.tube_arg();
                return one(cat(&[b"pause-tube ", &bad, format!(" {delay}").as_bytes()]));
            }
            6 => format!("pause-tubes {delay}"),
            _ => format!("pause-tube {tube} {delay}"),
        };
        one(text)
    }

    /// Unknown commands and prefix-dispatch quirks: one reply each.
    fn quirk(&mut self) -> Piece {
        one(*self.rng.pick(&[
            "reserved",
            "reserve ",
            "reserve-jobs 1",
            "reserve-job",
            "reserve-with-timeout",
            "stats ",
            "statsx",
            "stats-jobs 1",
            "stats-job",
            "stats-tube",
            "statistics",
            "peek-readyx",
            "peek-delayed ",
            "peek-buried1",
            "peek-foo",
            "peek",
            "list-tubesx",
            "list-tubes ",
            "list-tube-used ",
            "list-tubes-watched ",
            "list-tube",
            "listtubes",
            "PUT 0 0 100000 1",
            "STATS",
            "",
            " stats",
            "\tstats",
            "delete",
            "use",
            "watch",
            "ignore",
            "touch",
            "bury",
            "release",
            "kick",
            "kick-job",
            "kick-jobs 1",
            "flush-tube default",
            "delete 1 ",
            "release 1 2 3 ",
            "release 1",
            "bury 1 2 ",
            "bury 1",
            "peek 1 2",
            "stats-job 1 2",
            "touch 1 2",
            "use\tdefault",
            "use  default",
            "watch default ",
            "ignore  default",
            "put 0 0 1 1 1",
        ]))
    }

    /// A NUL byte inside a command line: BAD_FORMAT, even for quit.
    fn nul_line(&mut self) -> Piece {
        one(*self.rng.pick(&[
            &b"stats\0"[..],
            b"list-tubes\0x",
            b"use a\0",
            b"peek 1\0",
            b"quit\0",
            b"\0",
            b"delete \x001",
            b"watch \0",
            b"kick 1\0",
        ]))
    }

    /// Lines at and over the 224-byte limit (never 225 = 224k+1 bytes: see the header).
    fn line_length(&mut self) -> Piece {
        if self.rng.chance(30) {
            return match self.rng.below(4) {
                // 224 bytes with CRLF: the longest accepted line.
                0 => one(format!("pause-tube {} 4294967295", self.long_tube)),
                1 => one(format!("use {}", self.long_tube)),
                2 => one("x".repeat(self.rng.range(219, 222) as usize)),
                _ => one(format!("stats-tube {}", self.long_tube)),
            };
        }
        let len = loop {
            let len = self.rng.range(226, 1100);
            if len % 224 != 1 {
                break len as usize;
            }
        };
        let prefix = *self.rng.pick(&[
            "",
            "use ",
            "put 0 0 100000 1 ",
            "pause-tube ",
            "quit",
            "reserve",
        ]);
        let mut bytes = prefix.as_bytes().to_vec();
        while bytes.len() < len - 2 {
            bytes.push(
                *self
                    .rng
                    .pick(b"abcdefghijklmnopqrstuvwxyz0123456789     \n\0"),
            );
        }
        bytes.extend_from_slice(b"\r\n");
        (bytes, vec![Hint::Nothing])
    }

    /// Learn from the reference's reply to a command that carried `hint`.
    fn learn(&mut self, conn: usize, hint: Hint, reply: &[u8]) {
        let text = String::from_utf8_lossy(first_line(reply));
        let mut words = text.split(' ');
        let word = words.next().unwrap_or("");
        let id: Option<u64> = words.next().and_then(|w| w.parse().ok());
        match (hint, word) {
            (Hint::Put, "INSERTED") | (Hint::Found, "FOUND") => {
                self.max_id = self.max_id.max(id.unwrap_or(0));
            }
            (Hint::Reserve, "RESERVED") => {
                if let Some(id) = id {
                    self.max_id = self.max_id.max(id);
                    if !self.reserved[conn].contains(&id) {
                        self.reserved[conn].push(id);
                    }
                }
            }
            (Hint::Drop(id), "DELETED" | "RELEASED" | "BURIED") => {
                self.reserved[conn].retain(|&j| j != id);
            }
            _ => {}
        }
    }
}

fn drop_hint(id: Option<u64>) -> Hint {
    id.map_or(Hint::Nothing, Hint::Drop)
}

fn first_line(reply: &[u8]) -> &[u8] {
    match find(reply, b"\r\n") {
        Some(p) => &reply[..p],
        None => reply,
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

// ---------------------------------------------------------------------------------------
// Talking to one server.

#[derive(Clone, Debug, PartialEq)]
enum End {
    /// A whole reply (line, plus its data block for RESERVED/FOUND/OK).
    Complete,
    /// The server closed the connection.
    Eof,
    /// Nothing (more) arrived in time.
    Timeout,
    Error(String),
}

#[derive(Clone, Debug, PartialEq)]
struct Reply {
    bytes: Vec<u8>,
    end: End,
}

impl Reply {
    fn show(&self, max: usize) -> String {
        let mut s = truncate(escape(&self.bytes), max);
        match &self.end {
            End::Complete => {}
            End::Eof => s.push_str("<EOF>"),
            End::Timeout => write!(s, "<nothing within {} s>", REPLY_TIMEOUT.as_secs()).unwrap(),
            End::Error(e) => write!(s, "<error: {e}>").unwrap(),
        }
        if s.is_empty() { "<nothing>".into() } else { s }
    }
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    fn open(addr: SocketAddr) -> Result<Conn, String> {
        let stream = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            buf: Vec::new(),
        })
    }

    fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream.write_all(bytes).map_err(|e| e.to_string())
    }

    /// Read one whole reply.
    fn read_reply(&mut self) -> Reply {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            if let Some(len) = complete_reply_len(&self.buf) {
                return Reply {
                    bytes: self.buf.drain(..len).collect(),
                    end: End::Complete,
                };
            }
            let now = Instant::now();
            if now >= deadline {
                return Reply {
                    bytes: std::mem::take(&mut self.buf),
                    end: End::Timeout,
                };
            }
            let _ = self.stream.set_read_timeout(Some(deadline - now));
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    return Reply {
                        bytes: std::mem::take(&mut self.buf),
                        end: End::Eof,
                    };
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(e) => {
                    return Reply {
                        bytes: std::mem::take(&mut self.buf),
                        end: End::Error(e.to_string()),
                    };
                }
            }
        }
    }

    /// Whatever has already arrived beyond the expected replies.
    fn extra(&mut self) -> Option<Reply> {
        if !self.buf.is_empty() {
            return Some(Reply {
                bytes: std::mem::take(&mut self.buf),
                end: End::Complete,
            });
        }
        let _ = self.stream.set_nonblocking(true);
        let mut chunk = [0u8; 4096];
        let r = self.stream.read(&mut chunk);
        let _ = self.stream.set_nonblocking(false);
        match r {
            Ok(0) => Some(Reply {
                bytes: Vec::new(),
                end: End::Eof,
            }),
            Ok(n) => Some(Reply {
                bytes: chunk[..n].to_vec(),
                end: End::Complete,
            }),
            Err(e) if e.kind() == ErrorKind::WouldBlock => None,
            Err(e) => Some(Reply {
                bytes: Vec::new(),
                end: End::Error(e.to_string()),
            }),
        }
    }
}

/// Length of the first complete reply in `buf`, if it is all there.
fn complete_reply_len(buf: &[u8]) -> Option<usize> {
    let pos = find(buf, b"\r\n")?;
    let total = pos + 2 + data_len(&buf[..pos]).map_or(0, |n| n + 2);
    (buf.len() >= total).then_some(total)
}

/// The data-block length announced by a RESERVED, FOUND or OK line.
fn data_len(line: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(line).ok()?;
    let mut words = text.split(' ');
    let n = match words.next()? {
        "RESERVED" | "FOUND" => words.nth(1)?,
        "OK" => words.next()?,
        _ => return None,
    };
    n.parse::<usize>().ok().filter(|&n| n <= 1 << 30)
}

/// One server: its process, the client connections and the control connection.
struct Peer {
    server: ServerProc,
    conns: Vec<Conn>,
    ctl: Conn,
    /// beanstalkd before 1.13 leaves some YAML strings unquoted; add the quotes.
    add_quotes: bool,
}

impl Peer {
    fn new(server: ServerProc) -> Result<Peer, String> {
        let addr = server.addr;
        let ctl = Conn::open(addr)?;
        let conns = (0..CONNS)
            .map(|_| Conn::open(addr))
            .collect::<Result<Vec<_>, _>>()?;
        let add_quotes = server.kind == ServerKind::Beanstalkd;
        Ok(Peer {
            server,
            conns,
            ctl,
            add_quotes,
        })
    }

    fn name(&self) -> &'static str {
        self.server.kind.name()
    }

    /// The value of `key` in a `stats` on the control connection.
    fn stat(&mut self, key: &str) -> Result<String, String> {
        self.ctl.send(b"stats\r\n")?;
        let reply = self.ctl.read_reply();
        let text = String::from_utf8_lossy(&reply.bytes);
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(": "))
            .map(|v| v.trim().to_string())
            .ok_or_else(|| {
                format!(
                    "{}: no {key} in the stats reply {}",
                    self.name(),
                    reply.show(200)
                )
            })
    }
}

// ---------------------------------------------------------------------------------------
// Normalisation.

/// Mask what must differ between two servers, and nothing else (see the header).
fn normalise(reply: &Reply, add_quotes: bool) -> Reply {
    if reply.end != End::Complete {
        return reply.clone();
    }
    match normalise_yaml(&reply.bytes, add_quotes) {
        Some(bytes) => Reply {
            bytes,
            end: End::Complete,
        },
        None => reply.clone(),
    }
}

/// An `OK <n>` reply whose data is exactly `n` bytes plus CRLF, normalised; `None` for
/// anything else, which is then compared as sent.
fn normalise_yaml(bytes: &[u8], add_quotes: bool) -> Option<Vec<u8>> {
    let pos = find(bytes, b"\r\n")?;
    let n: usize = std::str::from_utf8(bytes[..pos].strip_prefix(b"OK ")?)
        .ok()?
        .parse()
        .ok()?;
    let data = &bytes[pos + 2..];
    if data.len() != n + 2 || !data.ends_with(b"\r\n") {
        return None;
    }
    let text = std::str::from_utf8(&data[..n]).ok()?;
    let first = text.strip_prefix("---\n")?.split('\n').next().unwrap_or("");
    let masked: &[&str] = if first.starts_with("current-jobs-urgent: ") {
        VOLATILE_STATS_KEYS
    } else if first.starts_with("id: ") {
        // age and time-left are floor(seconds) of a clock difference.
        &["age", "time-left"]
    } else if first.starts_with("name: ") {
        // pause-time-left likewise.
        &["pause-time-left"]
    } else {
        return None;
    };
    let normalised = yaml::normalise(text.as_bytes(), n, masked, add_quotes);
    let mut v = format!("OK {}\r\n", normalised.n).into_bytes();
    v.extend_from_slice(&normalised.data());
    v.extend_from_slice(b"\r\n");
    Some(v)
}

// ---------------------------------------------------------------------------------------
// Reporting.

/// Bytes in the escape syntax of `protocol-tests/cases` (`\r \n \t \0 \\ \xNN`, and
/// `\{N:C}` for runs of a printable character).
fn escape(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let run = bytes[i..].iter().take_while(|&&c| c == b).count();
        if run >= 8 && (0x21..=0x7e).contains(&b) && !b"\\{}".contains(&b) {
            write!(out, "\\{{{run}:{}}}", b as char).unwrap();
            i += run;
            continue;
        }
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            0 => out.push_str("\\0"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            _ => write!(out, "\\x{b:02x}").unwrap(),
        }
        i += 1;
    }
    out
}

fn truncate(s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let cut = (0..=max)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…[{} more chars]", &s[..cut], s.len() - cut)
}

fn conn_name(conn: usize) -> char {
    (b'a' + conn as u8) as char
}

struct Entry {
    step: usize,
    conn: usize,
    action: Action,
    sent: Vec<u8>,
    replies: Vec<Reply>,
}

// ---------------------------------------------------------------------------------------
// One seed.

struct Session {
    seed: u64,
    commands: usize,
    settle: Duration,
    reference: Peer,
    subject: Peer,
    generator: Gen,
    history: VecDeque<Entry>,
    replies: u64,
    /// Steps fully compared.
    steps: usize,
    /// How often the reference answered with each reply word (coverage at a glance).
    words: BTreeMap<String, u64>,
}

/// Why a seed stopped early.
struct Failure(String);

impl Session {
    fn run(&mut self) -> Result<(), Failure> {
        self.sync_connections(0, CONNS + 1)?;
        // One seed in four ends in drain mode (from its own stream, so the command
        // stream does not depend on it): puts then answer DRAINING.
        let mut side = Rng::new(self.seed ^ 0xd4a1_d4a1_d4a1_d4a1);
        let n = self.commands as u64;
        let drain_at = side.chance(25).then(|| side.range(n * 3 / 4, n) as usize);
        for step_no in 1..=self.commands {
            if drain_at == Some(step_no) {
                self.drain(step_no)?;
            }
            let conn = self.generator.rng.below(CONNS as u64) as usize;
            let step = self.generator.step(conn);
            self.play(step_no, conn, &step)?;
            self.steps += 1;
        }
        // A last look at the server-wide counters.
        let step = Step {
            action: Action::Send,
            bytes: b"stats\r\n".to_vec(),
            hints: vec![Hint::Nothing],
            splits: Vec::new(),
        };
        self.play(self.commands + 1, 0, &step)
    }

    fn play(&mut self, step_no: usize, conn: usize, step: &Step) -> Result<(), Failure> {
        let mut ref_replies = Vec::new();
        if step.action != Action::Close {
            let mut ref_sent = Ok(());
            let mut sub_sent = Ok(());
            let mut from = 0;
            for &to in step.splits.iter().chain(std::iter::once(&step.bytes.len())) {
                if from > 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                ref_sent =
                    ref_sent.and_then(|()| self.reference.conns[conn].send(&step.bytes[from..to]));
                sub_sent =
                    sub_sent.and_then(|()| self.subject.conns[conn].send(&step.bytes[from..to]));
                from = to;
            }
            if let Err(e) = ref_sent {
                return Err(self.fail(
                    "harness error: writing to the reference failed",
                    step_no,
                    conn,
                    step,
                    &e,
                    "",
                ));
            }
            for (k, &hint) in step.hints.iter().enumerate() {
                let r = normalise(
                    &self.reference.conns[conn].read_reply(),
                    self.reference.add_quotes,
                );
                let s = normalise(
                    &self.subject.conns[conn].read_reply(),
                    self.subject.add_quotes,
                );
                let which = format!(" (reply {} of {})", k + 1, step.hints.len());
                let r_ok =
                    r.end == End::Complete || (step.action == Action::Quit && r.end == End::Eof);
                let head = if !r_ok {
                    Some(format!(
                        "harness error: the reference did not send the reply the generator expects{which}"
                    ))
                } else if r != s {
                    let mut head = format!("MISMATCH{which}");
                    if let Err(e) = &sub_sent {
                        write!(head, "; writing to the subject failed: {e}").unwrap();
                    }
                    Some(head)
                } else {
                    None
                };
                if let Some(head) = head {
                    return Err(self.fail(
                        &head,
                        step_no,
                        conn,
                        step,
                        &r.show(4000),
                        &s.show(4000),
                    ));
                }
                self.replies += 1;
                let word = match r.end {
                    End::Eof => "<EOF>".to_string(),
                    _ => String::from_utf8_lossy(first_line(&r.bytes))
                        .split(' ')
                        .next()
                        .unwrap_or("")
                        .to_string(),
                };
                *self.words.entry(word).or_default() += 1;
                self.generator.learn(conn, hint, &r.bytes);
                ref_replies.push(r);
            }
            if step.action == Action::Send {
                if !self.settle.is_zero() {
                    std::thread::sleep(self.settle);
                }
                if let Some(extra) = self.reference.conns[conn].extra() {
                    let head = "harness error: the reference sent more than the generator expects";
                    return Err(self.fail(
                        head,
                        step_no,
                        conn,
                        step,
                        &extra.show(4000),
                        "(not read)",
                    ));
                }
                if let Some(extra) = self.subject.conns[conn].extra() {
                    let head = "MISMATCH: the subject sent more replies than the reference";
                    return Err(self.fail(
                        head,
                        step_no,
                        conn,
                        step,
                        "<nothing more>",
                        &extra.show(4000),
                    ));
                }
            }
        }
        self.remember(Entry {
            step: step_no,
            conn,
            action: step.action,
            sent: step.bytes.clone(),
            replies: ref_replies,
        });
        if matches!(step.action, Action::Quit | Action::Close) {
            self.reconnect(step_no, conn)?;
        }
        Ok(())
    }

    /// Replace connection `conn` on both servers, once both have let go of the old one.
    fn reconnect(&mut self, step_no: usize, conn: usize) -> Result<(), Failure> {
        self.generator.reserved[conn].clear();
        let _ = self.reference.conns[conn]
            .stream
            .shutdown(std::net::Shutdown::Both);
        let _ = self.subject.conns[conn]
            .stream
            .shutdown(std::net::Shutdown::Both);
        self.sync_connections(step_no, CONNS)?;
        let open = |p: &Peer| Conn::open(p.server.addr);
        match (open(&self.reference), open(&self.subject)) {
            (Ok(r), Ok(s)) => {
                self.reference.conns[conn] = r;
                self.subject.conns[conn] = s;
            }
            (r, s) => {
                let msg = format!("reconnect: reference {:?}, subject {:?}", r.err(), s.err());
                return Err(Failure(self.header(&msg, step_no, conn)));
            }
        }
        self.sync_connections(step_no, CONNS + 1)
    }

    /// Poll `stats` on both control connections, the same number of times on each,
    /// until both count `want` connections (the control connection included).
    fn sync_connections(&mut self, step_no: usize, want: usize) -> Result<(), Failure> {
        self.sync_stat(
            step_no,
            "current-connections",
            &want.to_string(),
            "a quit, close or reconnect",
        )
    }

    /// Poll `stats` on both control connections, the same number of times on each (so
    /// `cmd-stats` stays equal), until `key` is `want` on both.
    fn sync_stat(
        &mut self,
        step_no: usize,
        key: &str,
        want: &str,
        after: &str,
    ) -> Result<(), Failure> {
        let deadline = Instant::now() + REPLY_TIMEOUT;
        loop {
            let r = self
                .reference
                .stat(key)
                .map_err(|e| Failure(self.header(&e, step_no, 0)))?;
            let s = self
                .subject
                .stat(key)
                .map_err(|e| Failure(self.header(&e, step_no, 0)))?;
            if r == want && s == want {
                return Ok(());
            }
            if Instant::now() > deadline {
                let msg = format!(
                    "MISMATCH: {key} did not settle at {want} after {after}: reference {r}, subject {s}"
                );
                return Err(Failure(self.header(&msg, step_no, 0)));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Put both servers in drain mode, and wait until both say so.
    fn drain(&mut self, step_no: usize) -> Result<(), Failure> {
        for peer in [&self.reference, &self.subject] {
            if let Err(e) = peer.server.signal("USR1") {
                return Err(Failure(self.header(
                    &format!("{}: {e}", peer.name()),
                    step_no,
                    0,
                )));
            }
        }
        self.sync_stat(step_no, "draining", "true", "SIGUSR1")?;
        self.remember(Entry {
            step: step_no,
            conn: 0,
            action: Action::Drain,
            sent: Vec::new(),
            replies: Vec::new(),
        });
        Ok(())
    }

    fn remember(&mut self, entry: Entry) {
        self.history.push_back(entry);
        if self.history.len() > HISTORY {
            self.history.pop_front();
        }
    }

    fn header(&self, headline: &str, step_no: usize, conn: usize) -> String {
        let mut out = String::new();
        writeln!(out, "differential: {headline}").unwrap();
        writeln!(
            out,
            "  reference {} vs subject {}, seed {:#x}, step {step_no} of {}, connection {}",
            self.reference.name(),
            self.subject.name(),
            self.seed,
            self.commands,
            conn_name(conn)
        )
        .unwrap();
        writeln!(
            out,
            "  replay: REDSTALK_DIFF_SEED={:#x} REDSTALK_DIFF_COMMANDS={} REDSTALK_DIFF_SUBJECT={} \
             cargo test --test differential -- --nocapture",
            self.seed,
            step_no.min(self.commands),
            self.subject.name()
        )
        .unwrap();
        writeln!(
            out,
            "  last {} steps before it (reference replies):",
            self.history.len()
        )
        .unwrap();
        for e in &self.history {
            let c = conn_name(e.conn);
            match e.action {
                Action::Close => {
                    writeln!(out, "    #{:<5} {c} close (client side), reconnect", e.step).unwrap()
                }
                Action::Drain => writeln!(
                    out,
                    "    #{:<5} both servers get SIGUSR1 (drain mode)",
                    e.step
                )
                .unwrap(),
                _ => {
                    writeln!(
                        out,
                        "    #{:<5} {c}>> {}",
                        e.step,
                        truncate(escape(&e.sent), 160)
                    )
                    .unwrap();
                    for r in &e.replies {
                        writeln!(out, "           {c}<< {}", r.show(160)).unwrap();
                    }
                }
            }
        }
        out
    }

    fn fail(
        &self,
        headline: &str,
        step_no: usize,
        conn: usize,
        step: &Step,
        reference: &str,
        subject: &str,
    ) -> Failure {
        let mut out = self.header(headline, step_no, conn);
        let c = conn_name(conn);
        writeln!(out, "  step {step_no}:").unwrap();
        match step.action {
            Action::Close => writeln!(out, "    {c} close (client side)").unwrap(),
            Action::Drain => writeln!(out, "    both servers get SIGUSR1 (drain mode)").unwrap(),
            _ => writeln!(out, "    sent      {c}>> {}", escape(&step.bytes)).unwrap(),
        }
        if !step.splits.is_empty() {
            writeln!(
                out,
                "    (sent as separate writes, 1 ms apart, split at byte offsets {:?})",
                step.splits
            )
            .unwrap();
        }
        writeln!(out, "    reference {c}<< {reference}").unwrap();
        writeln!(out, "    subject   {c}<< {subject}").unwrap();
        Failure(out)
    }
}

// ---------------------------------------------------------------------------------------
// Configuration and the test itself.

fn parse_seed(s: &str) -> u64 {
    let s = s.trim();
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    parsed.unwrap_or_else(|e| panic!("REDSTALK_DIFF_SEED: bad seed {s:?}: {e}"))
}

fn clock_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    Rng::new(nanos).next_u64() & 0xffff_ffff_ffff
}

fn env_number(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}: bad number {v:?}: {e}")),
        Err(_) => default,
    }
}

#[test]
fn differential() {
    let seeds: Vec<u64> = match std::env::var("REDSTALK_DIFF_SEED") {
        Ok(v) => v
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(parse_seed)
            .collect(),
        Err(_) => {
            let mut s = FIXED_SEEDS.to_vec();
            let clock = clock_seed();
            println!(
                "differential: seed {clock:#x} comes from the clock (replay: REDSTALK_DIFF_SEED={clock:#x})"
            );
            s.push(clock);
            s
        }
    };
    let commands = env_number("REDSTALK_DIFF_COMMANDS", DEFAULT_COMMANDS);
    let settle = Duration::from_millis(env_number("REDSTALK_DIFF_SETTLE_MS", 0) as u64);
    // Every redstalk engine by default; one subject when named.
    let subjects = match std::env::var("REDSTALK_DIFF_SUBJECT").as_deref() {
        Err(_) | Ok("") => vec![ServerKind::Memory, ServerKind::Redis, ServerKind::Leader],
        Ok("memory") => vec![ServerKind::Memory],
        Ok("redis") => vec![ServerKind::Redis],
        Ok("leader") => vec![ServerKind::Leader],
        Ok("beanstalkd") => vec![ServerKind::Beanstalkd],
        Ok(other) => {
            panic!("REDSTALK_DIFF_SUBJECT: {other:?} is none of memory, redis, leader, beanstalkd")
        }
    };
    let mut failures = Vec::new();
    for subject_kind in subjects {
        failures.extend(compare(subject_kind, &seeds, commands, settle));
    }
    if !failures.is_empty() {
        panic!("{}", failures.join("\n"));
    }
}

/// The fixed seeds with the subject on a Redis Cluster (3 primaries, 3 replicas), in
/// shared and in leader mode, each seed on a fresh prefix (so on a slot of its own, on
/// whichever primary holds it): the cluster changes no reply.
#[test]
fn differential_over_a_redis_cluster() {
    if support::redis::redis_server_path().is_none() {
        assert!(
            !support::oracle_required(),
            "redis-server is required (REDSTALK_REQUIRE_ORACLE=1) but not installed"
        );
        println!("differential over a cluster: SKIPPED, redis-server is not installed");
        return;
    }
    let cluster = support::cluster::Cluster::start().expect("start a 6-node cluster");
    let url = cluster.url();
    let commands = env_number("REDSTALK_DIFF_COMMANDS", DEFAULT_COMMANDS);
    let mut failures = Vec::new();
    for kind in [ServerKind::Redis, ServerKind::Leader] {
        let label = format!("{} on a Redis Cluster", kind.name());
        let start = |args: &[String], seed: u64| {
            let prefix = format!("diff-{}-{seed:x}", kind.name());
            ServerProc::start_on_redis_as(kind, &url, &prefix, args).map(Some)
        };
        failures.extend(compare_with(
            kind,
            &label,
            &FIXED_SEEDS,
            commands,
            Duration::ZERO,
            &start,
        ));
    }
    if !failures.is_empty() {
        panic!("{}", failures.join("\n"));
    }
}

/// Run every seed against `subject_kind`; the failure reports.
fn compare(
    subject_kind: ServerKind,
    seeds: &[u64],
    commands: usize,
    settle: Duration,
) -> Vec<String> {
    compare_with(
        subject_kind,
        subject_kind.name(),
        seeds,
        commands,
        settle,
        &|args, _| ServerProc::start(subject_kind, args),
    )
}

/// The subject's arguments: the reference's, and for redstalk `--extensions off`. The
/// comparison is of beanstalkd's grammar, and the generator sends lines beanstalkd does
/// not know on purpose, some of which are extension lines (`flush-tube default`) that
/// redstalk answers otherwise with extensions on; rather than keep every present and
/// future generated line clear of the extension grammar, redstalk speaks beanstalkd's
/// alone here. That the extended grammar changes no line beanstalkd accepts is held
/// elsewhere: by the parser's property test (`no_accepted_line_changes_meaning`) and by
/// the protocol corpus, whose every case runs against redstalk with extensions on.
fn subject_args(subject_kind: ServerKind, args: &[String]) -> Vec<String> {
    let mut args = args.to_vec();
    if subject_kind != ServerKind::Beanstalkd {
        args.extend(["--extensions".to_string(), "off".to_string()]);
    }
    args
}

/// Starts a subject with these arguments for this seed (`Ok(None)`: not installed).
type StartSubject<'a> = &'a dyn Fn(&[String], u64) -> Result<Option<ServerProc>, String>;

/// [`compare`] with the subject started by `start` and named `label` in the output.
fn compare_with(
    subject_kind: ServerKind,
    label: &str,
    seeds: &[u64],
    commands: usize,
    settle: Duration,
    start: StartSubject<'_>,
) -> Vec<String> {
    let args: Vec<String> = vec!["-z".into(), MAX_JOB_SIZE.to_string()];

    let started = Instant::now();
    let mut steps = 0usize;
    let mut replies = 0u64;
    let mut failures = Vec::new();
    let mut words: BTreeMap<String, u64> = BTreeMap::new();
    for &seed in seeds {
        let reference = match ServerProc::start(ServerKind::Beanstalkd, &args) {
            Ok(Some(p)) => p,
            Ok(None) => {
                // ServerProc::start has already said so loudly.
                println!("differential: SKIPPED, beanstalkd (the reference) is not installed");
                return Vec::new();
            }
            Err(e) => panic!("differential: cannot start the reference: {e}"),
        };
        let subject = match start(&subject_args(subject_kind, &args), seed) {
            Ok(Some(p)) => p,
            Ok(None) => panic!(
                "differential: the subject {} is not installed",
                subject_kind.name()
            ),
            Err(e) => panic!(
                "differential: cannot start the subject {}: {e}",
                subject_kind.name()
            ),
        };
        let seed_started = Instant::now();
        let mut session = Session {
            seed,
            commands,
            settle,
            reference: Peer::new(reference).expect("connect to the reference"),
            subject: Peer::new(subject).expect("connect to the subject"),
            generator: Gen::new(seed),
            history: VecDeque::new(),
            replies: 0,
            steps: 0,
            words: BTreeMap::new(),
        };
        let result = session.run();
        replies += session.replies;
        steps += session.steps;
        for (w, n) in &session.words {
            *words.entry(w.clone()).or_default() += n;
        }
        match result {
            Ok(()) => {
                println!(
                    "differential: seed {seed:#x}: {commands} commands, {} replies agree ({:.1} s)",
                    session.replies,
                    seed_started.elapsed().as_secs_f64()
                );
            }
            Err(Failure(report)) => {
                println!("differential: seed {seed:#x}: FAILED");
                failures.push(report);
            }
        }
    }
    let words: Vec<String> = words.iter().map(|(w, n)| format!("{w} {n}")).collect();
    println!(
        "differential: reference replies by kind: {}",
        words.join(", ")
    );
    println!(
        "differential: {steps} commands compared over {} seeds ({replies} replies, subject {label}, {:.1} s), {} mismatches",
        seeds.len(),
        started.elapsed().as_secs_f64(),
        failures.len()
    );
    failures
}

// ---------------------------------------------------------------------------------------
// The harness's own pieces.

#[test]
fn normalise_masks_clock_values_and_quotes_old_beanstalkd() {
    let yaml = "---\nname: t\ncurrent-jobs-ready: 1\npause: 100000\npause-time-left: 99999\n";
    let raw = format!("OK {}\r\n{yaml}\r\n", yaml.len()).into_bytes();
    let reply = Reply {
        bytes: raw,
        end: End::Complete,
    };
    let want = "---\nname: \"t\"\ncurrent-jobs-ready: 1\npause: 100000\npause-time-left: *\n";
    let want = format!("OK {}\r\n{want}\r\n", want.len()).into_bytes();
    assert_eq!(escape(&normalise(&reply, true).bytes), escape(&want));
    // A subject must quote by itself.
    assert!(escape(&normalise(&reply, false).bytes).contains("name: t\\n"));
}

#[test]
fn normalise_keeps_a_wrong_byte_count_wrong() {
    // Announced 1 byte short: the data is then not n+2 bytes ending in CRLF, so the
    // reply is left exactly as sent.
    let yaml = "---\nid: 1\ntube: \"default\"\nage: 3\n";
    let raw = format!("OK {}\r\n{yaml}\r\n", yaml.len() - 1).into_bytes();
    let reply = Reply {
        bytes: raw.clone(),
        end: End::Complete,
    };
    assert_eq!(normalise(&reply, true).bytes, raw);
}

#[test]
fn escape_uses_the_case_file_syntax() {
    assert_eq!(
        escape(b"put 0 0 1 3\r\na\0\xff\r\n"),
        "put 0 0 1 3\\r\\na\\0\\xff\\r\\n"
    );
    assert_eq!(escape(b"use aaaaaaaaaa\r\n"), "use \\{10:a}\\r\\n");
}

#[test]
fn reply_framing_reads_data_blocks() {
    assert_eq!(complete_reply_len(b"RESERVED 7 3\r\na\r\n\r\nX"), Some(19));
    assert_eq!(complete_reply_len(b"RESERVED 7 3\r\na\r"), None);
    assert_eq!(
        complete_reply_len(b"OK 4\r\n---\n\r\nINSERTED 1\r\n"),
        Some(12)
    );
    assert_eq!(
        complete_reply_len(b"INSERTED 1\r\nINSERTED 2\r\n"),
        Some(12)
    );
}

#[test]
fn generated_command_lines_fit_the_line_buffer() {
    let mut g = Gen::new(42);
    for _ in 0..20_000 {
        let (bytes, hints) = g.command(0);
        assert!(first_line(&bytes).len() + 2 <= 224, "{}", escape(&bytes));
        assert!(!hints.is_empty());
    }
    for _ in 0..2_000 {
        let (bytes, _) = g.line_length();
        assert_ne!(
            bytes.len() % 224,
            1,
            "a 224k+1-byte line desyncs beanstalkd"
        );
        assert!(
            !bytes[..bytes.len() - 2].contains(&b'\r'),
            "a stray CR stalls beanstalkd"
        );
    }
}
