//! A job's metadata as the Redis schema keeps it (docs/REDIS.md): one msgpack array per
//! job in its tube's `jobs` hash, exactly as the shared mode's Lua scripts write it
//! (`lua/prelude.lua`: PRI, DELAY, TTR, CREATED, STATE, DUE, OWNER, RESERVES, TIMEOUTS,
//! RELEASES, BURIES, KICKS, BSEQ, READY), so either mode reads what the other wrote.
//!
//! Times there are microseconds; the memory store keeps nanoseconds. Lua's msgpack
//! writes integral numbers as integers and others as floats, and older jobs lack
//! READY: the decoder takes any msgpack number and a short array.

use rmp::Marker;
use rmp::decode::RmpRead;

use crate::protocol::TubeName;
use crate::store::memory::{JobRecord, Stored};
use crate::store::{JobId, JobState, Nanos};

const US: u64 = 1_000;

/// The fields of the array, 0-based (the Lua prelude's indexes minus one).
const FIELDS: usize = 14;
const PRI: usize = 0;
const DELAY: usize = 1;
const TTR: usize = 2;
const CREATED: usize = 3;
const STATE: usize = 4;
const DUE: usize = 5;
const OWNER: usize = 6;
const RESERVES: usize = 7;
const TIMEOUTS: usize = 8;
const RELEASES: usize = 9;
const BURIES: usize = 10;
const KICKS: usize = 11;
const BSEQ: usize = 12;
const READY: usize = 13;

fn state_name(s: JobState) -> &'static str {
    s.name()
}

fn state_of(name: &[u8]) -> Option<JobState> {
    Some(match name {
        b"ready" => JobState::Ready,
        b"delayed" => JobState::Delayed,
        b"reserved" => JobState::Reserved,
        b"buried" => JobState::Buried,
        _ => return None,
    })
}

/// The msgpack meta of `r`. `owner` names the holder of a reserved job (the shared
/// mode compares it with the token of whoever releases it; a leader's holders never
/// do, so any distinct string serves).
pub fn encode(r: &JobRecord, owner: &str, out: &mut Vec<u8>) {
    let (due, bseq, ready) = match r.state {
        JobState::Delayed | JobState::Reserved => (r.at / US, 0, 0),
        JobState::Ready => (0, 0, r.at / US),
        JobState::Buried => (0, r.at, 0),
    };
    let owner = if r.state == JobState::Reserved {
        owner
    } else {
        ""
    };
    // Writing to a Vec cannot fail.
    let _ = rmp::encode::write_array_len(out, FIELDS as u32);
    for n in [
        u64::from(r.pri),
        u64::from(r.delay_secs),
        u64::from(r.ttr_secs),
        r.created / US,
    ] {
        let _ = rmp::encode::write_uint(out, n);
    }
    let _ = rmp::encode::write_str(out, state_name(r.state));
    let _ = rmp::encode::write_uint(out, due);
    let _ = rmp::encode::write_str(out, owner);
    for n in [r.reserves, r.timeouts, r.releases, r.buries, r.kicks] {
        let _ = rmp::encode::write_uint(out, u64::from(n));
    }
    let _ = rmp::encode::write_uint(out, bseq);
    let _ = rmp::encode::write_uint(out, ready);
}

/// One decoded msgpack value of the array.
#[derive(Clone, Debug, PartialEq)]
enum Val {
    Num(f64),
    Int(i64),
    Str(Vec<u8>),
    Nil,
}

impl Val {
    fn uint(&self) -> Option<u64> {
        match *self {
            Val::Int(i) => u64::try_from(i).ok(),
            Val::Num(f) if f >= 0.0 && f.is_finite() => Some(f as u64),
            _ => None,
        }
    }
}

/// Why a stored job could not be read (the job is reported as damaged, not served).
#[derive(Debug, thiserror::Error)]
#[error("job {id}: unreadable metadata ({what})")]
pub struct Damaged {
    pub id: JobId,
    pub what: &'static str,
}

fn read_val(rd: &mut &[u8]) -> Option<Val> {
    let m = rmp::decode::read_marker(rd).ok()?;
    Some(match m {
        Marker::FixPos(n) => Val::Int(i64::from(n)),
        Marker::FixNeg(n) => Val::Int(i64::from(n)),
        Marker::U8 => Val::Int(i64::from(rd.read_data_u8().ok()?)),
        Marker::U16 => Val::Int(i64::from(rd.read_data_u16().ok()?)),
        Marker::U32 => Val::Int(i64::from(rd.read_data_u32().ok()?)),
        Marker::U64 => Val::Int(i64::try_from(rd.read_data_u64().ok()?).ok()?),
        Marker::I8 => Val::Int(i64::from(rd.read_data_i8().ok()?)),
        Marker::I16 => Val::Int(i64::from(rd.read_data_i16().ok()?)),
        Marker::I32 => Val::Int(i64::from(rd.read_data_i32().ok()?)),
        Marker::I64 => Val::Int(rd.read_data_i64().ok()?),
        Marker::F32 => Val::Num(f64::from(rd.read_data_f32().ok()?)),
        Marker::F64 => Val::Num(rd.read_data_f64().ok()?),
        Marker::Null => Val::Nil,
        Marker::FixStr(n) => read_str(rd, usize::from(n))?,
        Marker::Str8 => {
            let n = rd.read_data_u8().ok()?;
            read_str(rd, usize::from(n))?
        }
        Marker::Str16 => {
            let n = rd.read_data_u16().ok()?;
            read_str(rd, usize::from(n))?
        }
        Marker::Str32 => {
            let n = rd.read_data_u32().ok()?;
            read_str(rd, n as usize)?
        }
        _ => return None,
    })
}

fn read_str(rd: &mut &[u8], n: usize) -> Option<Val> {
    if rd.len() < n {
        return None;
    }
    let (s, rest) = rd.split_at(n);
    *rd = rest;
    Some(Val::Str(s.to_vec()))
}

/// A job read back: its record, as the memory store will hold it.
pub fn decode(
    id: JobId,
    tube: &TubeName,
    meta: &[u8],
    body: bytes::Bytes,
) -> Result<JobRecord, Damaged> {
    let damaged = |what| Damaged { id, what };
    let mut rd = meta;
    let len = match rmp::decode::read_marker(&mut rd) {
        Ok(Marker::FixArray(n)) => usize::from(n),
        Ok(Marker::Array16) => usize::from(rd.read_data_u16().map_err(|_| damaged("array"))?),
        _ => return Err(damaged("not an array")),
    };
    let mut f = Vec::with_capacity(FIELDS);
    for _ in 0..len {
        f.push(read_val(&mut rd).ok_or_else(|| damaged("field"))?);
    }
    f.resize(FIELDS, Val::Nil);
    let num = |i: usize, what| f[i].uint().ok_or_else(|| damaged(what));
    let num32 =
        |i: usize, what| num(i, what).and_then(|n| u32::try_from(n).map_err(|_| damaged(what)));
    let state = match &f[STATE] {
        Val::Str(s) => state_of(s).ok_or_else(|| damaged("state"))?,
        _ => return Err(damaged("state")),
    };
    let created = num(CREATED, "created")? * US;
    let at: Nanos = match state {
        JobState::Delayed | JobState::Reserved => num(DUE, "due")? * US,
        // A job written before READY existed has waited since its creation, as far as
        // anyone can tell.
        JobState::Ready => f[READY].uint().map_or(created, |r| r * US),
        JobState::Buried => num(BSEQ, "bury sequence")?,
    };
    let owner = match &f[OWNER] {
        Val::Str(_) | Val::Nil => 0,
        _ => return Err(damaged("owner")),
    };
    Ok(JobRecord {
        id,
        tube: tube.clone(),
        pri: num32(PRI, "pri")?,
        delay_secs: num32(DELAY, "delay")?,
        ttr_secs: num32(TTR, "ttr")?,
        state,
        created,
        at,
        owner,
        reserves: num32(RESERVES, "reserves").unwrap_or(0),
        timeouts: num32(TIMEOUTS, "timeouts").unwrap_or(0),
        releases: num32(RELEASES, "releases").unwrap_or(0),
        buries: num32(BURIES, "buries").unwrap_or(0),
        kicks: num32(KICKS, "kicks").unwrap_or(0),
        body,
        was: Stored::As(state),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(state: JobState, at: u64) -> JobRecord {
        JobRecord {
            id: 7,
            tube: TubeName::new(b"t").unwrap(),
            pri: 4_294_967_295,
            delay_secs: 3,
            ttr_secs: 60,
            state,
            created: 1_700_000_000_123_456_000,
            at,
            owner: 0,
            reserves: 1,
            timeouts: 2,
            releases: 3,
            buries: 4,
            kicks: 5,
            body: bytes::Bytes::from_static(b"hello"),
            was: Stored::Never,
        }
    }

    #[test]
    fn every_state_round_trips() {
        for (state, at) in [
            (JobState::Ready, 1_700_000_001_000_000_000),
            (JobState::Delayed, 1_700_000_009_000_000_000),
            (JobState::Reserved, 1_700_000_060_000_000_000),
            (JobState::Buried, 42),
        ] {
            let r = record(state, at);
            let mut meta = Vec::new();
            encode(&r, "leader:1", &mut meta);
            let back = decode(7, &r.tube, &meta, r.body.clone()).unwrap();
            assert_eq!(
                back,
                JobRecord {
                    was: Stored::As(state),
                    ..r
                }
            );
        }
    }

    #[test]
    fn reads_what_lua_writes() {
        // cmsgpack.pack{ 5, 0, 120, 1700000000123456, 'ready', 0, '', 0, 0, 0, 0, 0, 0,
        // 1700000000223456 } as Redis' Lua writes it (integral numbers as integers),
        // and a 13-field array written before READY existed.
        let mut lua = vec![0x9e, 0x05, 0x00, 0x78, 0xcf];
        lua.extend_from_slice(&1_700_000_000_123_456u64.to_be_bytes());
        lua.extend_from_slice(&[0xa5, b'r', b'e', b'a', b'd', b'y', 0x00, 0xa0]);
        lua.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0xcf]);
        lua.extend_from_slice(&1_700_000_000_223_456u64.to_be_bytes());
        let t = TubeName::new(b"t").unwrap();
        let r = decode(1, &t, &lua, bytes::Bytes::new()).unwrap();
        assert_eq!((r.pri, r.ttr_secs, r.state), (5, 120, JobState::Ready));
        assert_eq!(r.at, 1_700_000_000_223_456_000);
        let mut old = lua[..lua.len() - 9].to_vec();
        old[0] = 0x9d;
        let r = decode(1, &t, &old, bytes::Bytes::new()).unwrap();
        assert_eq!(r.at, r.created);
    }

    #[test]
    fn garbage_is_damage_not_zero() {
        let t = TubeName::new(b"t").unwrap();
        assert!(decode(1, &t, b"\x93\x01\x02", bytes::Bytes::new()).is_err());
        assert!(decode(1, &t, b"nonsense", bytes::Bytes::new()).is_err());
    }
}
