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

use bytes::Bytes;

use crate::protocol::TubeName;
use crate::store::JobState;
use crate::store::keys::{JobKey, Key, KeyRecord, KeySlot};
use crate::store::memory::{JobRecord, ScheduleRecord, StoreCounters, Stored, TubeRecord};
use crate::store::policy::{DeadCause, DeadReason};
use crate::store::retention::{History, HistoryError, Retained, RetainedFigures};
use crate::store::{Cursor, JobId, ScheduleName};
use crate::time::{is_whole_secs, secs_as_ms};

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

fn state_byte(s: JobState) -> u8 {
    match s {
        JobState::Ready => 0,
        JobState::Reserved => 1,
        JobState::Delayed => 2,
        JobState::Buried => 3,
    }
}

fn byte_state(b: u8) -> Option<JobState> {
    Some(match b {
        0 => JobState::Ready,
        1 => JobState::Reserved,
        2 => JobState::Delayed,
        3 => JobState::Buried,
        _ => return None,
    })
}

/// Append one framed record to `out`; `payload` writes the payload.
fn frame(out: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_LEN]);
    payload(out);
    let body = &out[start + FRAME_LEN..];
    let len = body.len() as u32;
    let crc = crc32fast::hash(body);
    out[start..start + 4].copy_from_slice(&len.to_le_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    out.len() - start
}

fn put_name(out: &mut Vec<u8>, name: &TubeName) {
    let b = name.as_str().as_bytes();
    out.extend_from_slice(&(b.len() as u16).to_le_bytes());
    out.extend_from_slice(b);
}

/// Append a job record (with its body when `with_body`); returns the bytes appended.
pub fn put_job(out: &mut Vec<u8>, j: &JobRecord, with_body: bool) -> usize {
    frame(out, |o| {
        let secs = whole_secs(j).filter(|_| j.key.is_none() && j.dead.is_none());
        o.push(match (&j.dead, &j.key, secs) {
            (Some(_), _, _) => KIND_JOB_DEAD,
            (None, Some(_), _) => KIND_JOB_KEYED,
            (None, None, Some(_)) => KIND_JOB,
            (None, None, None) => KIND_JOB_MS,
        });
        o.extend_from_slice(&j.id.to_le_bytes());
        o.push(state_byte(j.state));
        o.extend_from_slice(&j.pri.to_le_bytes());
        match secs {
            Some((delay, ttr)) => {
                o.extend_from_slice(&delay.to_le_bytes());
                o.extend_from_slice(&ttr.to_le_bytes());
            }
            None => {
                o.extend_from_slice(&j.delay_ms.to_le_bytes());
                o.extend_from_slice(&j.ttr_ms.to_le_bytes());
            }
        }
        o.extend_from_slice(&j.created.to_le_bytes());
        o.extend_from_slice(&j.at.to_le_bytes());
        for v in [j.reserves, j.timeouts, j.releases, j.buries, j.kicks] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        put_name(o, &j.tube);
        if j.dead.is_some() {
            o.push(u8::from(j.key.is_some()));
        }
        if let Some(k) = &j.key {
            put_key(o, &k.key);
            o.extend_from_slice(&k.window_ms.to_le_bytes());
        }
        if let Some(d) = &j.dead {
            o.push(d.cause.code());
            o.extend_from_slice(&d.count.to_le_bytes());
            o.extend_from_slice(&d.limit.to_le_bytes());
        }
        o.push(u8::from(with_body));
        if with_body {
            o.extend_from_slice(&(j.body.len() as u32).to_le_bytes());
            o.extend_from_slice(&j.body);
        }
    })
}

/// A job's delay and TTR as whole seconds (u32, [`KIND_JOB`]'s fields), when they are.
fn whole_secs(j: &JobRecord) -> Option<(u32, u32)> {
    let secs = |ms: u64| {
        is_whole_secs(ms)
            .then(|| u32::try_from(ms / 1000).ok())
            .flatten()
    };
    Some((secs(j.delay_ms)?, secs(j.ttr_ms)?))
}

/// The bytes [`put_job`] appends for `j` with its body (what a live job costs on disk).
pub fn job_len(j: &JobRecord) -> usize {
    let key_len = |k: &JobKey| 1 + k.key.as_str().len() + 8;
    let (times, key) = match (&j.dead, &j.key) {
        (Some(_), key) => (16, 1 + key.as_ref().map_or(0, key_len) + 9),
        (None, Some(k)) => (16, key_len(k)),
        (None, None) if whole_secs(j).is_some() => (8, 0),
        (None, None) => (16, 0),
    };
    FRAME_LEN
        + 1
        + 8
        + 1
        + 4
        + times
        + 16
        + 20
        + 2
        + j.tube.as_str().len()
        + key
        + 1
        + 4
        + j.body.len()
}

fn put_key(out: &mut Vec<u8>, key: &Key) {
    let b = key.as_str().as_bytes();
    // A key is at most 128 bytes (`MAX_KEY_LEN`).
    out.push(b.len() as u8);
    out.extend_from_slice(b);
}

/// The bytes [`put_window`] appends for `k` (what an open window costs on disk).
pub fn window_len(k: &KeyRecord) -> usize {
    FRAME_LEN + 1 + 2 + k.tube.as_str().len() + 1 + k.key.as_str().len() + 8 + 8
}

/// Append a window record: `k.slot` is a window, or `Free` (the window ended).
pub fn put_window(out: &mut Vec<u8>, k: &KeyRecord) -> usize {
    let (id, until) = match k.slot {
        KeySlot::Window { id, until } => (id, until),
        KeySlot::Live(_) | KeySlot::Free => (0, 0),
    };
    frame(out, |o| {
        o.push(KIND_WINDOW);
        put_name(o, &k.tube);
        put_key(o, &k.key);
        o.extend_from_slice(&id.to_le_bytes());
        o.extend_from_slice(&until.to_le_bytes());
    })
}

pub fn put_gone(out: &mut Vec<u8>, id: u64) -> usize {
    frame(out, |o| {
        o.push(KIND_GONE);
        o.extend_from_slice(&id.to_le_bytes());
    })
}

pub fn put_tube(out: &mut Vec<u8>, t: &TubeRecord) -> usize {
    frame(out, |o| {
        o.push(KIND_TUBE);
        o.push(u8::from(t.kept));
        for v in [
            t.total_jobs,
            t.cmd_delete,
            t.cmd_pause,
            t.pause,
            t.pause_until,
        ] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        put_name(o, &t.name);
    })
}

pub fn put_counters(out: &mut Vec<u8>, c: &StoreCounters) -> usize {
    frame(out, |o| {
        o.push(KIND_COUNTERS);
        for v in [c.last_id, c.bury_seq, c.total_jobs, c.job_timeouts] {
            o.extend_from_slice(&v.to_le_bytes());
        }
    })
}

/// Append a schedule's cursor record, or its removal's when `s.gone`.
pub fn put_schedule(out: &mut Vec<u8>, s: &ScheduleRecord) -> usize {
    frame(out, |o| {
        o.push(if s.gone {
            KIND_SCHEDULE_GONE
        } else {
            KIND_SCHEDULE
        });
        // A schedule name is at most 64 bytes (`schedule::MAX_NAME_LEN`).
        let name = s.name.as_str().as_bytes();
        o.push(name.len() as u8);
        o.extend_from_slice(name);
        if !s.gone {
            let c = &s.cursor;
            for v in [c.last_tick_ms, c.last_job, c.fired, c.deduped, c.skipped] {
                o.extend_from_slice(&v.to_le_bytes());
            }
        }
    })
}

/// Append a retained record.
pub fn put_retained(out: &mut Vec<u8>, r: &Retained) -> usize {
    frame(out, |o| {
        o.push(KIND_RETAINED);
        let f = &r.figures;
        o.extend_from_slice(&r.id.to_le_bytes());
        o.extend_from_slice(&r.deleted_ms.to_le_bytes());
        o.extend_from_slice(&f.pri.to_le_bytes());
        for v in [f.delay_ms, f.ttr_ms, f.created_ms] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        for v in [f.reserves, f.timeouts, f.releases, f.buries, f.kicks] {
            o.extend_from_slice(&v.to_le_bytes());
        }
        put_name(o, &r.tube);
        o.push(u8::from(r.key.is_some()));
        if let Some(k) = &r.key {
            put_key(o, k);
        }
        let history = r.history.encode();
        o.extend_from_slice(&(history.len() as u32).to_le_bytes());
        o.extend_from_slice(history.as_bytes());
        o.extend_from_slice(&(r.body_len as u64).to_le_bytes());
        o.push(u8::from(r.body.is_some()));
        if let Some(body) = &r.body {
            o.extend_from_slice(&(body.len() as u32).to_le_bytes());
            o.extend_from_slice(body);
        }
    })
}

/// The bytes [`put_retained`] appends for `r` (what a retained record costs on disk).
pub fn retained_len(r: &Retained) -> usize {
    FRAME_LEN
        + 1
        + 8
        + 8
        + 4
        + 24
        + 20
        + 2
        + r.tube.as_str().len()
        + 1
        + r.key.as_ref().map_or(0, |k| 1 + k.as_str().len())
        + 4
        + r.history.encode().len()
        + 8
        + 1
        + r.body.as_ref().map_or(0, |b| 4 + b.len())
}

pub fn put_retained_gone(out: &mut Vec<u8>, id: JobId) -> usize {
    frame(out, |o| {
        o.push(KIND_RETAINED_GONE);
        o.extend_from_slice(&id.to_le_bytes());
    })
}

/// A cursor over a payload; `base` is the payload's offset in `file`, whose bodies are
/// handed out as slices of it (no copy).
struct Reader<'a> {
    data: &'a [u8],
    file: &'a Bytes,
    base: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Damage> {
        if self.data.len() < n {
            return Err(Damage::Malformed("payload too short"));
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        self.base += n;
        Ok(head)
    }
    fn bytes(&mut self, n: usize) -> Result<Bytes, Damage> {
        let start = self.base;
        self.take(n)?;
        Ok(self.file.slice(start..start + n))
    }
    fn u8(&mut self) -> Result<u8, Damage> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, Damage> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, Damage> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, Damage> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn name(&mut self) -> Result<TubeName, Damage> {
        let n = usize::from(self.u16()?);
        TubeName::new(self.take(n)?).ok_or(Damage::Malformed("bad tube name"))
    }
    fn key(&mut self) -> Result<Key, Damage> {
        let n = usize::from(self.u8()?);
        Key::new(self.take(n)?).ok_or(Damage::Malformed("bad key"))
    }
    fn schedule_name(&mut self) -> Result<ScheduleName, Damage> {
        let n = usize::from(self.u8()?);
        std::str::from_utf8(self.take(n)?)
            .ok()
            .and_then(ScheduleName::new)
            .ok_or(Damage::Malformed("bad schedule name"))
    }
}

fn decode(file: &Bytes, start: usize, len: usize) -> Result<Record, Damage> {
    let mut r = Reader {
        data: &file[start..start + len],
        file,
        base: start,
    };
    let record = match r.u8()? {
        kind @ (KIND_JOB | KIND_JOB_MS | KIND_JOB_KEYED | KIND_JOB_DEAD) => {
            let id = r.u64()?;
            let state = byte_state(r.u8()?).ok_or(Damage::Malformed("bad job state"))?;
            let pri = r.u32()?;
            let (delay_ms, ttr_ms) = match kind {
                KIND_JOB => (secs_as_ms(r.u32()?), secs_as_ms(r.u32()?)),
                _ => (r.u64()?, r.u64()?),
            };
            let (created, at) = (r.u64()?, r.u64()?);
            let (reserves, timeouts, releases, buries, kicks) =
                (r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u32()?);
            let tube = r.name()?;
            let keyed = match kind {
                KIND_JOB_KEYED => true,
                KIND_JOB_DEAD => r.u8()? != 0,
                _ => false,
            };
            let key = match keyed {
                true => Some(JobKey {
                    key: r.key()?,
                    window_ms: r.u64()?,
                }),
                false => None,
            };
            let dead = match kind {
                KIND_JOB_DEAD => Some(DeadReason {
                    cause: DeadCause::from_code(r.u8()?)
                        .ok_or(Damage::Malformed("bad dead letter cause"))?,
                    count: r.u32()?,
                    limit: r.u32()?,
                }),
                _ => None,
            };
            let with_body = r.u8()? != 0;
            let body = if with_body {
                let n = r.u32()? as usize;
                r.bytes(n)?
            } else {
                Bytes::new()
            };
            Record::Job {
                job: JobRecord {
                    id,
                    tube,
                    pri,
                    delay_ms,
                    ttr_ms,
                    state,
                    created,
                    at,
                    owner: 0,
                    reserves,
                    timeouts,
                    releases,
                    buries,
                    kicks,
                    key,
                    dead,
                    body,
                    was: Stored::Never,
                },
                with_body,
            }
        }
        KIND_WINDOW => {
            let (tube, key, id, until) = (r.name()?, r.key()?, r.u64()?, r.u64()?);
            let slot = match until {
                0 => KeySlot::Free,
                until => KeySlot::Window { id, until },
            };
            Record::Window(KeyRecord { tube, key, slot })
        }
        KIND_GONE => Record::Gone(r.u64()?),
        KIND_SCHEDULE => Record::Schedule(ScheduleRecord {
            name: r.schedule_name()?,
            cursor: Cursor {
                last_tick_ms: r.u64()?,
                last_job: r.u64()?,
                fired: r.u64()?,
                deduped: r.u64()?,
                skipped: r.u64()?,
            },
            gone: false,
            jobs: Vec::new(),
        }),
        KIND_SCHEDULE_GONE => Record::Schedule(ScheduleRecord {
            name: r.schedule_name()?,
            cursor: Cursor::default(),
            gone: true,
            jobs: Vec::new(),
        }),
        KIND_RETAINED => Record::Retained(Box::new(retained(&mut r)?)),
        KIND_RETAINED_GONE => Record::RetainedGone(r.u64()?),
        KIND_TUBE => {
            let kept = r.u8()? != 0;
            let (total_jobs, cmd_delete, cmd_pause, pause, pause_until) =
                (r.u64()?, r.u64()?, r.u64()?, r.u64()?, r.u64()?);
            Record::Tube(TubeRecord {
                name: r.name()?,
                kept,
                total_jobs,
                cmd_delete,
                cmd_pause,
                pause,
                pause_until,
                next_due: None,
            })
        }
        KIND_COUNTERS => Record::Counters(StoreCounters {
            last_id: r.u64()?,
            bury_seq: r.u64()?,
            total_jobs: r.u64()?,
            job_timeouts: r.u64()?,
        }),
        _ => return Err(Damage::Malformed("unknown record kind")),
    };
    if !r.data.is_empty() {
        return Err(Damage::Malformed("trailing bytes in a record"));
    }
    Ok(record)
}

/// A [`KIND_RETAINED`] record's fields (after its kind).
fn retained(r: &mut Reader<'_>) -> Result<Retained, Damage> {
    let (id, deleted_ms, pri) = (r.u64()?, r.u64()?, r.u32()?);
    let (delay_ms, ttr_ms, created_ms) = (r.u64()?, r.u64()?, r.u64()?);
    let figures = RetainedFigures {
        pri,
        delay_ms,
        ttr_ms,
        created_ms,
        reserves: r.u32()?,
        timeouts: r.u32()?,
        releases: r.u32()?,
        buries: r.u32()?,
        kicks: r.u32()?,
    };
    let tube = r.name()?;
    let key = match r.u8()? {
        0 => None,
        _ => Some(r.key()?),
    };
    let n = r.u32()? as usize;
    if n > MAX_HISTORY_TEXT {
        return Err(Damage::Malformed("a retained record's history is too long"));
    }
    let history = History::decode(r.take(n)?).map_err(Damage::History)?;
    let body_len = usize::try_from(r.u64()?)
        .map_err(|_| Damage::Malformed("a retained record's body length is too large"))?;
    let body = match r.u8()? {
        0 => None,
        _ => {
            let n = r.u32()? as usize;
            Some(r.bytes(n)?)
        }
    };
    Ok(Retained {
        id,
        tube,
        key,
        deleted_ms,
        figures,
        history,
        body_len,
        body,
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
    Ok((decode(file, at + FRAME_LEN, len)?, FRAME_LEN + len))
}

#[cfg(test)]
mod tests;
