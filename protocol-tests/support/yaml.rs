//! The YAML normalisation the protocol runner and the differential test both apply to
//! an `OK <n>` reply before comparing it (see `protocol-tests/README.md`):
//!
//! - beanstalkd 1.12 prints the values of [`QUOTED_KEYS`] without the quotes 1.13 (and
//!   so redstalk) adds; they are added back for the oracle only, since redstalk must
//!   send them itself;
//! - the values of [`VOLATILE_STATS_KEYS`] in a `stats` reply change from run to run;
//!   the runner lets them match anything, the differential test masks them (together
//!   with its clock-derived keys) as `*`;
//! - the `OK <n>` byte count moves by as many bytes as the normalisation added or
//!   removed.

/// Keys whose values 1.12 prints without the quotes that 1.13 adds.
pub const QUOTED_KEYS: &[&str] = &["name", "tube", "version", "hostname", "os", "platform"];

/// `stats` keys whose values change from run to run; they match anything.
pub const VOLATILE_STATS_KEYS: &[&str] = &[
    "pid",
    "uptime",
    "rusage-utime",
    "rusage-stime",
    "version",
    "id",
    "hostname",
    "os",
    "platform",
];

/// `stats` keys that describe a server's `-b` log (its files and records): the cases'
/// expectations are beanstalkd's without a log (all 0), so against a server that keeps
/// one they match anything (binlog.rs checks their values).
pub const LOG_STATS_KEYS: &[&str] = &[
    "binlog-oldest-index",
    "binlog-current-index",
    "binlog-records-migrated",
    "binlog-records-written",
];

/// `key: value` → (key, value).
pub fn split_key(line: &[u8]) -> Option<(&str, &[u8])> {
    let at = line.windows(2).position(|w| w == b": ")?;
    let key = std::str::from_utf8(&line[..at]).ok()?;
    Some((key, &line[at + 2..]))
}

/// YAML data after [`normalise`].
pub struct Normalised {
    /// The lines, without their `\n` separators.
    pub lines: Vec<Vec<u8>>,
    /// The announced byte count, moved by what the normalisation changed.
    pub n: usize,
}

impl Normalised {
    /// The lines joined again with `\n`.
    pub fn data(&self) -> Vec<u8> {
        self.lines.join(&b'\n')
    }
}

/// Split YAML `data` into lines at `\n` and normalise each: the value of a key in
/// `masked` becomes `*`; with `add_quotes`, an unquoted value of a [`QUOTED_KEYS`] key
/// gets its quotes. `n` is the count announced by `OK <n>` for `data` (`data` may leave
/// out the final newline, but is never longer than `n`).
pub fn normalise(data: &[u8], n: usize, masked: &[&str], add_quotes: bool) -> Normalised {
    let lines: Vec<Vec<u8>> = data
        .split(|&b| b == b'\n')
        .map(|line| normalise_line(line, masked, add_quotes))
        .collect();
    let joined = lines.iter().map(Vec::len).sum::<usize>() + lines.len() - 1;
    Normalised {
        n: n + joined - data.len(),
        lines,
    }
}

fn normalise_line(line: &[u8], masked: &[&str], add_quotes: bool) -> Vec<u8> {
    let Some((key, value)) = split_key(line) else {
        return line.to_vec();
    };
    let mut out = format!("{key}: ").into_bytes();
    if masked.contains(&key) {
        out.push(b'*');
    } else if add_quotes && QUOTED_KEYS.contains(&key) && !is_quoted(value) {
        out.push(b'"');
        out.extend_from_slice(value);
        out.push(b'"');
    } else {
        return line.to_vec();
    }
    out
}

fn is_quoted(value: &[u8]) -> bool {
    value.len() >= 2 && value.starts_with(b"\"") && value.ends_with(b"\"")
}
