//! Reading the log's records: a payload whose frame [`super::next`] checked, into a
//! [`Record`]; anything that does not decode is [`Damage`]. A body is a slice of the
//! file's buffer, not a copy.

use bytes::Bytes;

use crate::protocol::TubeName;
use crate::store::keys::{JobKey, Key, KeyRecord, KeySlot};
use crate::store::memory::{JobRecord, ScheduleRecord, StoreCounters, Stored, TubeRecord};
use crate::store::policy::{DeadCause, DeadReason};
use crate::store::retention::{History, Retained, RetainedFigures};
use crate::store::{Cursor, ScheduleName};
use crate::time::secs_as_ms;

use super::{
    Damage, KIND_COUNTERS, KIND_GONE, KIND_JOB, KIND_JOB_DEAD, KIND_JOB_KEYED, KIND_JOB_MS,
    KIND_RETAINED, KIND_RETAINED_GONE, KIND_SCHEDULE, KIND_SCHEDULE_GONE, KIND_TUBE, KIND_WINDOW,
    MAX_HISTORY_TEXT, Record, byte_state,
};

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

pub(super) fn decode(file: &Bytes, start: usize, len: usize) -> Result<Record, Damage> {
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
