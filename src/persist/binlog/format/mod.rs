//! The on-disk format of `-b DIR`'s log: a file header, then framed records. Pure
//! bytes <-> values; no I/O.
//!
//! File: `HEADER_MAGIC` (8 bytes), the format version (u32 LE), 4 reserved zero bytes.
//! Record frame: payload length (u32 LE), CRC-32 (IEEE) of the payload (u32 LE), the
//! payload. A payload starts with its kind (one byte); every integer is little-endian.
//! The record kinds are the journal's: a job's full state after a change (its body
//! only in the job's first record in a file's lineage), a job gone, a tube, the
//! namespace's counters, a schedule's cursor or its removal, a retained record (a
//! deleted job's record kept by retention) or its removal. See docs/BINLOG.md for the
//! field layout.
//!
//! Invariant: `decode(encode(r)) == r` for every record; a frame whose length runs past
//! the data, whose checksum differs, or whose payload does not decode is [`Damage`].
//!
//! Writing a record is `encode.rs` (`put_*`, appending framed records to a buffer);
//! reading one is `decode.rs` (a payload into a [`Record`]), which [`next`] calls after
//! checking the frame.

mod decode;
mod encode;

use bytes::Bytes;

use crate::store::JobId;
use crate::store::JobState;
use crate::store::keys::KeyRecord;
use crate::store::memory::{JobRecord, ScheduleRecord, StoreCounters, TubeRecord};
use crate::store::retention::{HistoryError, Retained};

pub use encode::{
    job_len, put_counters, put_gone, put_job, put_retained, put_retained_gone, put_schedule,
    put_tube, put_window, retained_len, window_len,
};

pub const HEADER_MAGIC: &[u8; 8] = b"RSTKBLOG";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 16;
/// Length and checksum before each payload.
pub const FRAME_LEN: usize = 8;

const KIND_JOB: u8 = 1;
const KIND_GONE: u8 = 2;
const KIND_TUBE: u8 = 3;
const KIND_COUNTERS: u8 = 4;
/// A job record whose delay or TTR is not whole seconds (a client wrote milliseconds):
/// both as u64 milliseconds. A job in whole seconds keeps [`KIND_JOB`], so a log of
/// such jobs stays readable by versions before milliseconds.
const KIND_JOB_MS: u8 = 5;
/// A keyed job's record: [`KIND_JOB_MS`]'s fields, and after the tube its key (u8
/// length, bytes) and dedupe window (u64 ms). A job without a key keeps its kind.
const KIND_JOB_KEYED: u8 = 6;
/// A key's dedupe window: tube, key, the deleted job's id and when the window ends
/// (ns; 0: the key has no window any more).
const KIND_WINDOW: u8 = 7;
/// A job a dead letter rule buried: [`KIND_JOB_MS`]'s fields, and after the tube a key
/// flag (u8; 1: the key and window follow as in [`KIND_JOB_KEYED`]) and the reason
/// (cause u8, count u32, limit u32). Every other job keeps its kind.
const KIND_JOB_DEAD: u8 = 8;
/// A schedule's cursor: name (u8 length, bytes), last_tick_ms, last_job, fired,
/// deduped, skipped (u64 each). An older version refuses it as an unknown kind, as it
/// should: it would fire the schedule's ticks again.
const KIND_SCHEDULE: u8 = 9;
/// A schedule's cursor dropped: its name (u8 length, bytes).
const KIND_SCHEDULE_GONE: u8 = 10;
/// A retained record (store/retention.rs): id, deleted_ms, pri (u32), delay_ms,
/// ttr_ms, created_ms (u64 each), reserves, timeouts, releases, buries, kicks (u32
/// each), tube (u16 length, bytes), a key flag (u8; 1: the key follows, u8 length,
/// bytes), the history in `History::encode`'s text (u32 length, bytes), the body's
/// length (u64), a body flag (u8; 1: the body follows, u32 length, bytes). An older
/// version refuses it as an unknown kind.
const KIND_RETAINED: u8 = 11;
/// A retained record evicted: its id.
const KIND_RETAINED_GONE: u8 = 12;
/// The longest history text a record may carry: [`History::encode`] of its bounded
/// events is well under this; a longer one is damage, not a history.
const MAX_HISTORY_TEXT: usize = 16 << 10;

/// One decoded record.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    /// A job's state; `with_body` false: the body is in an earlier record of the job
    /// (and `job.body` is empty).
    Job {
        job: JobRecord,
        with_body: bool,
    },
    Gone(u64),
    Tube(TubeRecord),
    Counters(StoreCounters),
    /// A key's window opened (`KeySlot::Window`) or ended (`KeySlot::Free`).
    Window(KeyRecord),
    /// A schedule's cursor, or (`gone`) its removal; `jobs` is always empty.
    Schedule(ScheduleRecord),
    /// A retained record (boxed: it is the largest kind, and the rarest).
    Retained(Box<Retained>),
    /// A retained record evicted.
    RetainedGone(JobId),
}

/// Why reading stopped before the end of the data.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Damage {
    #[error("a record is cut short (torn write)")]
    Torn,
    #[error("a record's checksum does not match")]
    Checksum,
    #[error("a record does not decode: {0}")]
    Malformed(&'static str),
    #[error("a retained record's history does not decode")]
    History(#[source] HistoryError),
}

/// What a file's first bytes say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// A header of this format version: records follow.
    Ours,
    /// Shorter than a header: created, its header not written whole.
    Short,
    /// redstalk's, in a later format version than [`VERSION`].
    Newer(u32),
    /// Not a redstalk log file of a version this one knows.
    Foreign,
}

pub fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(HEADER_MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// Read a file's first bytes.
pub fn read_header(data: &[u8]) -> Header {
    if data.len() < HEADER_LEN {
        return Header::Short;
    }
    if &data[..8] != HEADER_MAGIC {
        return Header::Foreign;
    }
    match u32::from_le_bytes([data[8], data[9], data[10], data[11]]) {
        VERSION => Header::Ours,
        v if v > VERSION => Header::Newer(v),
        _ => Header::Foreign,
    }
}

pub(super) fn state_byte(s: JobState) -> u8 {
    match s {
        JobState::Ready => 0,
        JobState::Reserved => 1,
        JobState::Delayed => 2,
        JobState::Buried => 3,
    }
}

pub(super) fn byte_state(b: u8) -> Option<JobState> {
    Some(match b {
        0 => JobState::Ready,
        1 => JobState::Reserved,
        2 => JobState::Delayed,
        3 => JobState::Buried,
        _ => return None,
    })
}

/// Read the record that starts at `file[at]`: the record and its framed length. A body
/// is a slice of `file` (it keeps the file's buffer alive while the job lives; the
/// buffers of one start are at most the log's size, which compaction bounds).
pub fn next(file: &Bytes, at: usize) -> Result<(Record, usize), Damage> {
    let data = &file[at..];
    if data.len() < FRAME_LEN {
        return Err(Damage::Torn);
    }
    let len = u32::from_le_bytes([data[0], data[1], data[2], data[3]]) as usize;
    let crc = u32::from_le_bytes([data[4], data[5], data[6], data[7]]);
    let Some(payload) = data.get(FRAME_LEN..FRAME_LEN + len) else {
        return Err(Damage::Torn);
    };
    if crc32fast::hash(payload) != crc {
        return Err(Damage::Checksum);
    }
    Ok((decode::decode(file, at + FRAME_LEN, len)?, FRAME_LEN + len))
}

#[cfg(test)]
mod tests;
