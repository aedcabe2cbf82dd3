//! redstalkctl's errors and the exit code each one maps to (docs/CLI.md lists them).
//!
//! Invariant: every failure a command can meet is one [`CtlError`] variant, and
//! [`CtlError::exit_code`] is the only place that turns one into a process exit code, so
//! the codes a script sees are the documented ones and nothing else (2, usage, is also
//! clap's own code for a bad command line).

use thiserror::Error;

/// Exit code: the command did everything it was asked.
pub const EXIT_OK: u8 = 0;
/// Exit code: a bulk change changed fewer jobs than it matched.
pub const EXIT_PARTIAL: u8 = 1;

#[derive(Debug, Error)]
pub enum CtlError {
    /// The command line or its values are wrong (also the API's `bad_request`).
    #[error("{0}")]
    Usage(String),
    /// The command needs the admin API (no `--api`, or the server has none, or does not
    /// take the request), or the server does not know a protocol command.
    #[error("{0}")]
    Unsupported(String),
    /// The API refused the change or read: missing or wrong token, read-only, cross-origin.
    #[error("refused: {0}")]
    Refused(String),
    /// No such job or tube.
    #[error("not found: {0}")]
    NotFound(String),
    /// The job is not in a state that allows the change (for example reserved).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The server answered but cannot serve now (store down, draining, out of memory,
    /// an unexpected reply).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// The server could not be reached, or the connection broke.
    #[error("cannot connect to {addr}: {reason}")]
    Connect { addr: String, reason: String },
}

impl CtlError {
    /// The process exit code of this error (docs/CLI.md, "Exit codes").
    pub fn exit_code(&self) -> u8 {
        match self {
            CtlError::Usage(_) => 2,
            CtlError::Unsupported(_) => 3,
            CtlError::Refused(_) => 4,
            CtlError::NotFound(_) => 5,
            CtlError::Conflict(_) => 6,
            CtlError::Unavailable(_) => 7,
            CtlError::Connect { .. } => 8,
        }
    }

    /// The error an admin-API-only command gives when no `--api` was given.
    pub fn needs_api(what: &str) -> CtlError {
        CtlError::Unsupported(format!(
            "`{what}` needs the admin HTTP API: give --api http://HOST:PORT (or set \
             REDSTALKCTL_API); the beanstalk protocol cannot do it"
        ))
    }
}

pub type Result<T> = std::result::Result<T, CtlError>;
