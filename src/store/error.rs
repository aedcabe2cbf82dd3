//! Why a store call failed: [`StoreError`], which says what the failure means for the
//! caller (whether the change may exist), and keeps the error it came from as its
//! source. A failed Redis call comes in already classified ([`CallError`], by its kind
//! and error code) and keeps its meaning here.

use crate::redis::{CallError, Fate};

/// A boxed error kept as the `source` of a [`StoreError`] (the Redis client's error, an
/// I/O error of a log file), so its chain reaches the logs.
pub type BoxError = crate::redis::error::BoxError;

/// Why a store could not do what was asked. Every variant makes the command answer
/// `INTERNAL_ERROR`; they differ in whether the change may exist, which decides what a
/// caller (and the docs) may promise.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The request was sent but no answer came in time (or the connection dropped while
    /// it was in flight): the change may have been applied, or may still be. A client
    /// that retries may apply it twice (at-least-once).
    #[error("{op}: no answer from storage in time; the change may have been applied")]
    TimedOut {
        op: &'static str,
        #[source]
        source: Option<BoxError>,
    },
    /// The store could not be reached, or refused the request before running it (not
    /// connected, read-only, out of memory, authentication): nothing was applied. The
    /// client may retry once the store is back.
    #[error("{op}: storage unavailable; nothing was applied")]
    NotApplied {
        op: &'static str,
        #[source]
        source: Option<BoxError>,
    },
    /// The store answered something this version cannot read: a bug (or damaged data).
    /// `op` names the script or command. Whether anything was applied is unknown.
    #[error("{op}: unexpected reply from storage: {detail}")]
    BadReply { op: &'static str, detail: String },
    /// The namespace this command belonged to is gone (Redis restarted empty, or was
    /// flushed): nothing was applied. The store starts a fresh namespace and every
    /// connection of the old one is closed, as a restarted beanstalkd closes them; the
    /// client reconnects.
    #[error(
        "{op}: the Redis namespace of this connection is gone (Redis lost its data); \
         nothing was applied"
    )]
    NamespaceLost { op: &'static str },
    /// The local log's disk is full (`-b`): a new job would not fit, so none was made.
    /// The put answers OUT_OF_MEMORY, as beanstalkd's does when it cannot reserve log
    /// space; puts are accepted again once the disk has room.
    #[error("put: the log's disk is full; no job was made")]
    LogFull,
    /// The call takes bodies only below [`crate::store::LARGE_BODY`] (a schedule's
    /// tick, whose definition the caller validated): nothing was applied.
    #[error("{op}: a body of {len} bytes is too large for this call; nothing was applied")]
    BodyTooLarge { op: &'static str, len: usize },
}

impl StoreError {
    /// Whether the change the failed call asked for may exist anyway.
    pub fn may_have_applied(&self) -> bool {
        !matches!(
            self,
            StoreError::NotApplied { .. }
                | StoreError::NamespaceLost { .. }
                | StoreError::LogFull
                | StoreError::BodyTooLarge { .. }
        )
    }

    /// The error with its sources, as one line (what a log shows: the OS's or
    /// Redis' own words come last).
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    }

    /// `op`, a Redis call, failed with `e` (see [`crate::redis::error`] for what each
    /// failure means).
    pub fn redis(op: &'static str, e: redis::RedisError) -> StoreError {
        CallError::new(op, e).into()
    }

    pub fn bad_reply(op: &'static str, detail: impl Into<String>) -> StoreError {
        StoreError::BadReply {
            op,
            detail: detail.into(),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

impl From<CallError> for StoreError {
    fn from(e: CallError) -> StoreError {
        let CallError { op, fate, source } = e;
        match fate {
            Fate::NotApplied => StoreError::NotApplied {
                op,
                source: Some(source),
            },
            Fate::MayHaveApplied => StoreError::TimedOut {
                op,
                source: Some(source),
            },
            Fate::BadReply => StoreError::bad_reply(op, source.to_string()),
            Fate::NamespaceLost => StoreError::NamespaceLost { op },
        }
    }
}
