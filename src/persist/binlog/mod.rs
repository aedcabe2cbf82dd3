//! `-b DIR`: the memory engine's changes in a local write-ahead log, written by the
//! same committer (group commit) that writes leader mode's batches to Redis.
//!
//! - `format`: the file header and the framed, checksummed records;
//! - `replay`: reading the files back at start (damage cut at the last good record);
//! - `sink`: the [`BinlogSink`] the committer writes through (one `write` per cut, the
//!   fsync policy, rolling to a new file at `-s` bytes; its compaction in
//!   `sink/compact.rs`);
//! - `room`: the space the log holds in reserve, so a full disk refuses puts only;
//! - `sync`: `-f N`'s background fsync thread.
//!
//! Ownership: one sink per process, owned by the committer task; the directory is
//! locked (`DIR/lock`) so a second process cannot write the same log.

mod format;
mod replay;
mod room;
mod sink;
mod sync;

use std::path::PathBuf;
use std::time::Duration;

pub use sink::BinlogSink;

use tokio_util::sync::CancellationToken;

use super::engine::Parts;
use crate::store::durable::CommitLink;
use crate::store::memory::{CutLimit, StoreSnapshot};
use crate::store::{Clock, MemoryStore};

/// beanstalkd's default `-s`: a new file every 10 MB.
pub const DEFAULT_FILE_SIZE: u64 = 10_485_760;
/// beanstalkd's default `-f`.
pub const DEFAULT_FSYNC_MS: u64 = 50;

/// When written data is forced to the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    /// `-f 0`: every batch, before its changes are acknowledged.
    Always,
    /// `-f MS`: at most every MS milliseconds, by a background thread.
    Every(Duration),
    /// `-F`: never (the OS writes back when it likes).
    Never,
}

#[derive(Clone, Debug)]
pub struct BinlogConfig {
    pub dir: PathBuf,
    pub fsync: Fsync,
    /// Roll to a new file once this many bytes are in the current one.
    pub file_size: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum BinlogError {
    /// An I/O call on the log's directory or one of its files failed (the OS's words
    /// are the source, printed after this).
    #[error("binlog: cannot {action} {path}")]
    Io {
        action: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "binlog directory {0} is in use by another process (its lock file is held); \
         two servers cannot share one log"
    )]
    Locked(String),
    #[error(
        "{0} is not a redstalk binlog file (beanstalkd's binlog format is not read by \
         redstalk); move it out of the directory, or give -b another directory"
    )]
    Foreign(String),
    #[error(
        "{file} was written by a newer version of redstalk (binlog format version {found}; \
         this version reads version {ours}): start that version on this directory, or \
         give -b another directory",
        ours = format::VERSION
    )]
    NewerVersion { file: String, found: u32 },
    #[error(
        "{0} has the highest number a log file can have, so no file can follow it: move \
         the log's files to another directory, renumbered from binlog.1 in the same \
         order, and give -b that directory"
    )]
    Exhausted(String),
}

impl BinlogError {
    /// An I/O error while doing `action` to `path`.
    pub(super) fn io(
        action: &'static str,
        path: &std::path::Path,
    ) -> impl Fn(std::io::Error) -> BinlogError {
        let path = path.display().to_string();
        move |source| BinlogError::Io {
            action,
            path: path.clone(),
            source,
        }
    }
}

/// What opening the log found, and the sink that continues it.
pub struct Opened {
    pub snapshot: StoreSnapshot,
    pub sink: BinlogSink,
    /// The `binlog-*` figures the sink keeps current, for the store's `stats`.
    pub figures: std::sync::Arc<crate::store::LogFigures>,
    pub records: u64,
    pub files: usize,
    pub bytes: u64,
}

impl Opened {
    /// What a persisted engine on this log is made of, as `-b` runs it
    /// ([`super::engine::Persisted`]): the replayed jobs in a memory store restored at
    /// `clock`'s time, this sink, and its figures.
    pub fn into_parts(self, clock: Clock) -> Parts<BinlogSink> {
        Parts {
            memory: MemoryStore::restored(self.snapshot, clock.now()),
            clock,
            sink: self.sink,
            limit: CutLimit::default(),
            name: "binlog",
            link: CommitLink::new(),
            stop: CancellationToken::new(),
            log_figures: Some(self.figures),
            stager: None,
        }
    }
}

/// Lock `config.dir` (creating it when missing), replay its log, and start a new file
/// for what follows.
pub fn open(config: BinlogConfig) -> Result<Opened, BinlogError> {
    let dir = config.dir.clone();
    std::fs::create_dir_all(&dir).map_err(BinlogError::io("create the directory", &dir))?;
    let lock_path = dir.join("lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(BinlogError::io("open", &lock_path))?;
    if lock.try_lock().is_err() {
        return Err(BinlogError::Locked(dir.display().to_string()));
    }
    let replayed = replay::replay(&dir)?;
    let snapshot = StoreSnapshot {
        jobs: replayed.jobs.values().map(|l| l.record.clone()).collect(),
        tubes: replayed.tubes.clone(),
        counters: replayed.counters,
        windows: replayed.windows.values().cloned().collect(),
        cursors: replayed
            .cursors
            .iter()
            .map(|(name, c)| (name.clone(), *c))
            .collect(),
        retained: replayed.retained.values().cloned().collect(),
    };
    let records = replayed.records;
    let files = replayed.files.len();
    let bytes = replayed.files.values().sum();
    let figures = std::sync::Arc::default();
    let sink = BinlogSink::new(config, lock, replayed, std::sync::Arc::clone(&figures))?;
    Ok(Opened {
        snapshot,
        sink,
        figures,
        records,
        files,
        bytes,
    })
}

#[cfg(test)]
mod retained_tests;
#[cfg(test)]
mod tests;
