//! The room the log keeps ahead of its written end, so that a full disk stops new jobs
//! and nothing else (docs/BINLOG.md, "A full disk").
//!
//! The current file is preallocated (`fallocate` with `FALLOC_FL_KEEP_SIZE`: its size,
//! which replay reads up to, stays what was written) at least [`RESERVE`] bytes beyond
//! what each write needs, topped up [`GROW`] bytes at a time. When the disk cannot give
//! that, the log is *full*: [`LogFigures::full`] is set, so puts are refused before a
//! job is made (beanstalkd reserves a put's log space first), and the other changes'
//! batches are written into the reserve, which needs no new space. The log stops being
//! full once the reserve can be topped up again: at the next write, or at a probe while
//! idle. Only when the reserve is used up too does a write fail for space (nothing is
//! written then; the committer retries it).
//!
//! Invariants: while full, no write goes past `allocated` (so none fails for space or
//! leaves a torn record that would cut the reserve off with it); `allocated` is at
//! least the file's written length. Where preallocation is not supported (or not
//! Linux), a write that fails for space makes the log full and one that succeeds ends
//! it.

use std::fs::File;
use std::io::{Error, ErrorKind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::store::LogFigures;

/// Bytes kept allocated beyond each write: what changes other than puts may still
/// write once the disk is full (about 6,000 one-job changes such as reserves and
/// releases, one batch each: `binlog_full` prints the figure).
pub const RESERVE: u64 = 1 << 20;
/// The reserve is topped up by this much at a time, so that a write rarely needs a call.
const GROW: u64 = 256 << 10;

#[derive(Debug)]
pub struct Room {
    /// The current file is allocated up to this offset.
    allocated: u64,
    /// `fallocate` works on this filesystem.
    supported: bool,
    /// Since when the disk has been full.
    full_since: Option<Instant>,
    /// The reserve was used up during this full spell (said once).
    exhausted: bool,
    figures: Arc<LogFigures>,
}

/// The disk has no room (or the user's quota is used up).
pub fn is_space(err: &Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

fn is_unsupported(err: &Error) -> bool {
    err.kind() == ErrorKind::Unsupported
        || matches!(err.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOSYS))
}

/// Allocate `[from, to)` of `file` without changing its size.
#[cfg(target_os = "linux")]
fn preallocate(file: &File, from: u64, to: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (
        libc::off_t::try_from(from),
        libc::off_t::try_from(to.saturating_sub(from)),
    ) else {
        return Err(Error::from(ErrorKind::InvalidInput));
    };
    if len == 0 {
        return Ok(());
    }
    loop {
        // SAFETY: fallocate reads and writes no memory of ours; the descriptor stays
        // open while `file` is borrowed.
        #[allow(unsafe_code)]
        let r =
            unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, offset, len) };
        if r == 0 {
            return Ok(());
        }
        let err = Error::last_os_error();
        if err.kind() != ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn preallocate(_file: &File, _from: u64, _to: u64) -> std::io::Result<()> {
    Err(Error::from(ErrorKind::Unsupported))
}

/// Allocate `file` from `from` up to `want` plus [`GROW`], or up to `want` when only
/// that fits; the end allocated. (With `want <= from`, whether [`GROW`] more fits.)
fn grow(file: &File, from: u64, want: u64) -> std::io::Result<u64> {
    match preallocate(file, from, want + GROW) {
        Ok(()) => Ok(want + GROW),
        Err(err) if is_space(&err) && want > from => preallocate(file, from, want).map(|()| want),
        Err(err) => Err(err),
    }
}

impl Room {
    /// The room of a new log whose current file holds `len` bytes and nothing beyond.
    pub fn new(figures: Arc<LogFigures>, len: u64) -> Room {
        Room {
            allocated: len,
            supported: true,
            full_since: None,
            exhausted: false,
            figures,
        }
    }

    pub fn is_full(&self) -> bool {
        self.full_since.is_some()
    }

    /// Whether a probe while idle can tell that space came back.
    pub fn can_probe(&self) -> bool {
        self.supported && self.is_full()
    }

    /// Make sure `need` bytes may be written after `len`: `Err` (nothing may be
    /// written) only when the disk is full and the reserve is used up.
    pub fn make(&mut self, file: &File, len: u64, need: u64) -> std::io::Result<()> {
        let want = len + need + RESERVE;
        if !self.supported || (self.allocated >= want && !self.is_full()) {
            return Ok(());
        }
        // Top the reserve up; while full, this also tells whether the disk has room
        // again (a roll may have found it full with this file's reserve whole).
        match grow(file, self.allocated, want.max(self.allocated)) {
            Ok(end) => {
                self.allocated = end;
                self.set_full(None);
                return Ok(());
            }
            Err(err) if is_space(&err) => self.set_full(Some(&err)),
            Err(err) => {
                if is_unsupported(&err) {
                    tracing::warn!(
                        %err,
                        "binlog: the filesystem cannot preallocate: a full disk will make \
                         every command that changes jobs wait and answer INTERNAL_ERROR \
                         after 1 s (puts answer OUT_OF_MEMORY) until it has room again"
                    );
                    self.supported = false;
                }
                // Anything else: the write itself will tell.
                return Ok(());
            }
        }
        if self.allocated >= len + need {
            return Ok(());
        }
        // The reserve is used up: only what the disk still gives.
        match preallocate(file, self.allocated, len + need) {
            Ok(()) => {
                self.allocated = len + need;
                Ok(())
            }
            Err(err) => {
                if !std::mem::replace(&mut self.exhausted, true) {
                    tracing::warn!(
                        %err,
                        "binlog: the disk is still full and the log's reserve is used up: \
                         commands that change jobs wait and answer INTERNAL_ERROR after 1 s \
                         until the disk has room again"
                    );
                }
                Err(err)
            }
        }
    }

    /// While full and idle: top the reserve up if the disk has room again.
    pub fn probe(&mut self, file: &File, len: u64) {
        if self.can_probe() {
            // The outcome is recorded by `make`; an error only means still full.
            let _ = self.make(file, len, 0);
        }
    }

    /// `file`, new, holds `len` bytes: allocate its reserve. The end allocated (this
    /// room is unchanged until [`Room::switch`]).
    pub fn reserve_in(&self, file: &File, len: u64) -> std::io::Result<u64> {
        if !self.supported {
            return Ok(len);
        }
        match grow(file, len, len + RESERVE) {
            Err(err) if is_unsupported(&err) => Ok(len),
            r => r,
        }
    }

    /// The log writes to a new file from now on, allocated up to `allocated`.
    pub fn switch(&mut self, allocated: u64) {
        self.allocated = allocated;
    }

    /// A write succeeded; the file now holds `len` bytes.
    pub fn wrote(&mut self, len: u64) {
        self.allocated = self.allocated.max(len);
        if !self.supported {
            self.set_full(None);
        }
    }

    /// A write failed, and the file was cut back to `len` (which drops what was
    /// allocated beyond it too).
    pub fn failed(&mut self, err: &Error, len: u64) {
        self.allocated = len;
        if is_space(err) {
            self.set_full(Some(err));
        }
    }

    /// The disk is full (`Some(why)`) or has room (`None`): said once per change.
    fn set_full(&mut self, why: Option<&Error>) {
        match (why, self.full_since) {
            (Some(err), None) => {
                self.full_since = Some(Instant::now());
                self.exhausted = false;
                if self.supported {
                    tracing::warn!(
                        %err,
                        reserve_bytes = RESERVE,
                        "binlog: the disk is full: puts answer OUT_OF_MEMORY until it has \
                         room again; other commands go on, their records written into the \
                         log's reserve"
                    );
                } else {
                    tracing::warn!(
                        %err,
                        "binlog: the disk is full: puts answer OUT_OF_MEMORY, and commands \
                         that change jobs wait and answer INTERNAL_ERROR after 1 s, until it \
                         has room again (no reserve: the filesystem cannot preallocate)"
                    );
                }
            }
            (None, Some(since)) => {
                self.full_since = None;
                tracing::warn!(
                    full_ms = since.elapsed().as_millis() as u64,
                    "binlog: the disk has room again: puts are accepted again"
                );
            }
            _ => return,
        }
        self.figures
            .full
            .store(self.full_since.is_some(), Ordering::Relaxed);
    }
}
