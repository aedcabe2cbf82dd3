//! Which beanstalkd release redstalk answers as (`--compat`): 1.13, the reference, or
//! 1.12, which Debian 12 and many images still ship. Clients written against 1.12 may
//! depend on what changed in 1.13, which is exactly two things (beanstalkd `v1.12..v1.13`,
//! `prot.c`):
//!
//! - YAML: 1.13 quotes the string values `name` (stats-tube), `tube` (stats-job),
//!   `hostname`, `os` and `platform` (stats); 1.12 prints them bare. `version` is quoted
//!   by both (and says which release is answering);
//! - `reserve-with-timeout`: 1.13 reads its number as every other (an unsigned 32-bit
//!   decimal, at most INT_MAX, else BAD_FORMAT); 1.12 read it with `strtol` into an
//!   `int` (see [`crate::protocol::Timeout`]).
//!
//! Everything else, quirks included, is the same in both.

use std::fmt;
use std::str::FromStr;

/// A beanstalkd release whose replies redstalk gives.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    V1_12,
    #[default]
    V1_13,
}

impl Dialect {
    /// `version` in `stats`.
    pub fn version(self) -> &'static str {
        match self {
            Dialect::V1_12 => "1.12",
            Dialect::V1_13 => "1.13",
        }
    }

    /// Whether the YAML string values 1.13 quotes are quoted.
    pub fn quotes_strings(self) -> bool {
        self == Dialect::V1_13
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.version())
    }
}

/// A release redstalk does not answer as.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a beanstalkd release redstalk answers as: give 1.12 or 1.13")]
pub struct UnknownDialect(String);

impl FromStr for Dialect {
    type Err = UnknownDialect;

    fn from_str(s: &str) -> Result<Dialect, UnknownDialect> {
        match s {
            "1.12" => Ok(Dialect::V1_12),
            "1.13" => Ok(Dialect::V1_13),
            other => Err(UnknownDialect(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in [Dialect::V1_12, Dialect::V1_13] {
            assert_eq!(d.to_string().parse::<Dialect>().unwrap(), d);
        }
        assert!("1.14".parse::<Dialect>().is_err());
        assert_eq!(Dialect::default(), Dialect::V1_13);
    }
}
