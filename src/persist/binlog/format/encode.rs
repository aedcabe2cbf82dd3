//! Writing the log's records: each `put_*` appends one framed record (length, CRC-32,
//! payload) to a buffer and returns the bytes it appended; the `*_len` functions say
//! that size ahead (docs/BINLOG.md has the field layout).

use crate::protocol::TubeName;
use crate::store::JobId;
use crate::store::keys::{JobKey, Key, KeyRecord, KeySlot};
use crate::store::memory::{JobRecord, ScheduleRecord, StoreCounters, TubeRecord};
use crate::store::retention::Retained;
use crate::time::is_whole_secs;

use super::{
    FRAME_LEN, KIND_COUNTERS, KIND_GONE, KIND_JOB, KIND_JOB_DEAD, KIND_JOB_KEYED, KIND_JOB_MS,
    KIND_RETAINED, KIND_RETAINED_GONE, KIND_SCHEDULE, KIND_SCHEDULE_GONE, KIND_TUBE, KIND_WINDOW,
    state_byte,
};

/// Append one framed record to `out`; `payload` writes the payload.
pub(super) fn frame(out: &mut Vec<u8>, payload: impl FnOnce(&mut Vec<u8>)) -> usize {
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

pub(super) fn put_name(out: &mut Vec<u8>, name: &TubeName) {
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
