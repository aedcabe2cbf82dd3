//! The values a client's bytes decode to: commands, put requests, and requests that were
//! rejected before they reached the engine.
//!
//! Invariant: a [`TubeName`] is always valid by the reference's rules (1–200 bytes of
//! `A-Za-z0-9-+/;.$_()`, not starting with `-`), so nothing past the parser re-checks it.

use std::borrow::Borrow;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

/// Longest tube name the reference accepts (`MAX_TUBE_NAME_LEN` is 201 with the NUL).
pub const MAX_TUBE_NAME_LEN: usize = 200;

/// A validated tube name. Cloning is cheap (shared string).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TubeName(Arc<str>);

impl TubeName {
    /// The tube every connection uses and watches when it connects.
    pub fn default_tube() -> TubeName {
        TubeName(Arc::from("default"))
    }

    /// Validate `name` by the reference's rules; `None` when invalid.
    pub fn new(name: &[u8]) -> Option<TubeName> {
        if !is_valid_tube_name(name) {
            return None;
        }
        // Valid names are ASCII, so this never fails.
        std::str::from_utf8(name)
            .ok()
            .map(|s| TubeName(Arc::from(s)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for TubeName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TubeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TubeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

/// A byte allowed in a tube name.
pub fn is_tube_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-+/;.$_()".contains(&b)
}

/// The reference's `is_valid_tube`: non-empty, at most 200 bytes, only name bytes, and
/// not starting with `-`.
pub fn is_valid_tube_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name.len() <= MAX_TUBE_NAME_LEN
        && name[0] != b'-'
        && name.iter().all(|&b| is_tube_name_byte(b))
}

/// `reserve-with-timeout`'s number as each release reads it. 1.13 reads an unsigned
/// decimal of at most INT_MAX; 1.12 read it with `strtol` into an `int`: leading white
/// space and a sign pass, no digits at all is 0, junk after the digits is ignored, a
/// value is truncated to 32 bits, and a negative timeout waits without one. Only a
/// number beyond 64 bits (ERANGE) is BAD_FORMAT in both, and is rejected by the parser.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// Both releases read these seconds.
    Secs(u32),
    /// 1.13 answers BAD_FORMAT; 1.12 reads these seconds, `None` being no timeout.
    Only1_12(Option<u32>),
}

impl Timeout {
    /// As `dialect` reads it: `Some(None)` waits without a timeout, `None` is
    /// BAD_FORMAT (not counted, in both releases).
    pub fn read_as(self, dialect: super::Dialect) -> Option<Option<u32>> {
        match (self, dialect) {
            (Timeout::Secs(n), _) => Some(Some(n)),
            (Timeout::Only1_12(t), super::Dialect::V1_12) => Some(t),
            (Timeout::Only1_12(_), super::Dialect::V1_13) => None,
        }
    }
}

/// A complete, well-formed command other than `put` (whose body arrives separately).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    Use(TubeName),
    Reserve,
    ReserveWithTimeout(Timeout),
    ReserveJob(u64),
    Delete(u64),
    Release { id: u64, pri: u32, delay: u32 },
    Bury { id: u64, pri: u32 },
    Touch(u64),
    Watch(TubeName),
    Ignore(TubeName),
    Peek(u64),
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Kick(u32),
    KickJob(u64),
    StatsJob(u64),
    StatsTube(TubeName),
    Stats,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube { tube: TubeName, delay: u32 },
    Quit,
}

/// The header of a `put` line, as the codec needs it to frame the body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PutHeader {
    pub pri: u32,
    pub delay: u32,
    pub ttr: u32,
    pub bytes: u32,
    /// Something followed the byte count. The reference checks this only after the size
    /// check, so an oversize put with junk still gets JOB_TOO_BIG.
    pub trailing_garbage: bool,
}

/// A whole `put`: header and body (without the body's trailing CRLF).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Put {
    pub pri: u32,
    pub delay: u32,
    pub ttr: u32,
    pub body: Bytes,
}

/// Which `cmd-*` counter a request bumps. Only counters the reference prints are here,
/// plus the ones that exist but are hidden (`reserve-job`, `kick-job`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counter {
    Put,
    Peek,
    PeekReady,
    PeekDelayed,
    PeekBuried,
    Reserve,
    ReserveWithTimeout,
    Delete,
    Release,
    Use,
    Watch,
    Ignore,
    Bury,
    Kick,
    Touch,
    Stats,
    StatsJob,
    StatsTube,
    ListTubes,
    ListTubeUsed,
    ListTubesWatched,
    PauseTube,
}

impl Counter {
    /// Every printed counter, in the order `stats` prints them.
    pub const ALL: [Counter; 22] = [
        Counter::Put,
        Counter::Peek,
        Counter::PeekReady,
        Counter::PeekDelayed,
        Counter::PeekBuried,
        Counter::Reserve,
        Counter::ReserveWithTimeout,
        Counter::Delete,
        Counter::Release,
        Counter::Use,
        Counter::Watch,
        Counter::Ignore,
        Counter::Bury,
        Counter::Kick,
        Counter::Touch,
        Counter::Stats,
        Counter::StatsJob,
        Counter::StatsTube,
        Counter::ListTubes,
        Counter::ListTubeUsed,
        Counter::ListTubesWatched,
        Counter::PauseTube,
    ];

    /// The `stats` key.
    pub fn key(self) -> &'static str {
        match self {
            Counter::Put => "cmd-put",
            Counter::Peek => "cmd-peek",
            Counter::PeekReady => "cmd-peek-ready",
            Counter::PeekDelayed => "cmd-peek-delayed",
            Counter::PeekBuried => "cmd-peek-buried",
            Counter::Reserve => "cmd-reserve",
            Counter::ReserveWithTimeout => "cmd-reserve-with-timeout",
            Counter::Delete => "cmd-delete",
            Counter::Release => "cmd-release",
            Counter::Use => "cmd-use",
            Counter::Watch => "cmd-watch",
            Counter::Ignore => "cmd-ignore",
            Counter::Bury => "cmd-bury",
            Counter::Kick => "cmd-kick",
            Counter::Touch => "cmd-touch",
            Counter::Stats => "cmd-stats",
            Counter::StatsJob => "cmd-stats-job",
            Counter::StatsTube => "cmd-stats-tube",
            Counter::ListTubes => "cmd-list-tubes",
            Counter::ListTubeUsed => "cmd-list-tube-used",
            Counter::ListTubesWatched => "cmd-list-tubes-watched",
            Counter::PauseTube => "cmd-pause-tube",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

impl Command {
    /// The counter a successfully parsed command bumps, if any.
    pub fn counter(&self) -> Option<Counter> {
        Some(match self {
            Command::Use(_) => Counter::Use,
            Command::Reserve => Counter::Reserve,
            Command::ReserveWithTimeout(_) => Counter::ReserveWithTimeout,
            Command::Delete(_) => Counter::Delete,
            Command::Release { .. } => Counter::Release,
            Command::Bury { .. } => Counter::Bury,
            Command::Touch(_) => Counter::Touch,
            Command::Watch(_) => Counter::Watch,
            Command::Ignore(_) => Counter::Ignore,
            Command::Peek(_) => Counter::Peek,
            Command::PeekReady => Counter::PeekReady,
            Command::PeekDelayed => Counter::PeekDelayed,
            Command::PeekBuried => Counter::PeekBuried,
            Command::Kick(_) => Counter::Kick,
            Command::StatsJob(_) => Counter::StatsJob,
            Command::StatsTube(_) => Counter::StatsTube,
            Command::Stats => Counter::Stats,
            Command::ListTubes => Counter::ListTubes,
            Command::ListTubeUsed => Counter::ListTubeUsed,
            Command::ListTubesWatched => Counter::ListTubesWatched,
            Command::PauseTube { .. } => Counter::PauseTube,
            Command::ReserveJob(_) | Command::KickJob(_) | Command::Quit => return None,
        })
    }
}

/// A request rejected by the protocol layer; the reply is decided, but the engine still
/// has to account for it (counters, an id consumed, the producer flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejection {
    /// No prefix matched.
    UnknownCommand,
    /// The line did not parse. `counted` names the counter the reference bumps anyway
    /// (`pause-tube` counts before validating; `put` counts before its trailing-junk check).
    BadFormat { counted: Option<Counter> },
    /// `put` declared more than the size limit; `bytes + 2` were discarded. Counts as a put.
    JobTooBig,
    /// The put body did not end in CRLF. The reference has already made the job, so an
    /// id is consumed and the connection counts as a producer.
    ExpectedCrlf,
    /// The put body could not be allocated; `bytes + 2` were discarded. Counts as a put
    /// and makes the connection a producer (the reference marks it before allocating),
    /// but consumes no id (the reference numbers a job only once it is allocated).
    OutOfMemory,
}

/// What the codec yields: one unit of work for the engine, in arrival order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Command(Command),
    Put(Put),
    Rejected(Rejection),
}
