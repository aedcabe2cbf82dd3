//! A job's metadata as the Redis schema keeps it (docs/REDIS.md): one msgpack array per
//! job in its tube's `jobs` hash, exactly as the shared mode's Lua scripts write it
//! (`store/shared/lua/prelude.lua`: PRI, DELAY, TTR, CREATED, STATE, DUE, OWNER,
//! RESERVES, TIMEOUTS, RELEASES, BURIES, KICKS, BSEQ, READY), so either mode reads what
//! the other wrote.
//!
//! Milliseconds: DELAY and TTR are whole seconds (rounded down), as ever; a job whose
//! delay or TTR is not whole seconds (a client wrote milliseconds) also has DELAY_MS and
//! TTR_MS, both in ms, after READY. A job in whole seconds keeps the 14-field array, so
//! instances of a version before milliseconds read it as they always did (and read a
//! job in milliseconds as its whole seconds). The milliseconds count only while they
//! agree with the seconds: such an instance may have changed DELAY or TTR and kept the
//! millisecond fields it did not know.
//!
//! [`Meta`] is the array in the format's own terms (times in microseconds of the Redis
//! clock, the state by name); leader mode maps its memory records to and from it
//! (`persist/redis/record.rs`). Lua's msgpack writes integral numbers as integers and
//! others as floats, and older jobs lack READY: the decoder takes any msgpack number and
//! a short array.

use rmp::Marker;
use rmp::decode::RmpRead;

use crate::store::policy::DeadReason;
use crate::time::{is_whole_secs, secs_as_ms};

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
/// Only in a job whose delay or TTR is not whole seconds.
const DELAY_MS: usize = 14;
const TTR_MS: usize = 15;
const FIELDS_MS: usize = 16;
/// Only in a keyed job (which then always has DELAY_MS and TTR_MS): its key and the
/// dedupe window its put asked for (ms).
const KEY: usize = 16;
const WINDOW_MS: usize = 17;
const FIELDS_KEYED: usize = 18;
/// Only in a job a dead letter rule buried (store/policy.rs), after KEY and WINDOW_MS
/// (an empty KEY: the job has none): the reason, as `DeadReason::encode` writes it.
/// Instances of a version before tube policies read such a job as it was and ignore it.
const DEAD: usize = 18;
const FIELDS_DEAD: usize = 19;

/// A job's state, by the name the format keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaState {
    Ready,
    Reserved,
    Delayed,
    Buried,
}

impl MetaState {
    const ALL: [MetaState; 4] = [
        MetaState::Ready,
        MetaState::Reserved,
        MetaState::Delayed,
        MetaState::Buried,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MetaState::Ready => "ready",
            MetaState::Reserved => "reserved",
            MetaState::Delayed => "delayed",
            MetaState::Buried => "buried",
        }
    }

    fn parse(name: &[u8]) -> Option<MetaState> {
        MetaState::ALL
            .into_iter()
            .find(|s| s.name().as_bytes() == name)
    }
}

/// One job's metadata, in the format's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    pub pri: u32,
    /// Milliseconds.
    pub delay_ms: u64,
    /// Milliseconds.
    pub ttr_ms: u64,
    pub created_us: u64,
    pub state: MetaState,
    /// A delayed job's due time, a reserved one's TTR deadline; 0 in other states.
    pub due_us: u64,
    pub reserves: u32,
    pub timeouts: u32,
    pub releases: u32,
    pub buries: u32,
    pub kicks: u32,
    /// A buried job's place in its tube's buried FIFO; 0 in other states.
    pub bury_seq: u64,
    /// Since when a ready job has been ready; `None` in other states, and in a job
    /// written before that was recorded.
    pub ready_us: Option<u64>,
    /// A keyed job's key and window (ms).
    pub key: Option<(String, u64)>,
    /// Why a dead letter rule buried it.
    pub dead: Option<DeadReason>,
}

/// The msgpack array of `m`. `owner` names the holder of a reserved job (the shared
/// mode compares it with the token of whoever releases it; a leader's holders never
/// do, so any distinct string serves).
pub fn encode(m: &Meta, owner: &str, out: &mut Vec<u8>) {
    let owner = if m.state == MetaState::Reserved {
        owner
    } else {
        ""
    };
    let in_ms = !(is_whole_secs(m.delay_ms) && is_whole_secs(m.ttr_ms))
        || m.key.is_some()
        || m.dead.is_some();
    let fields = match (&m.dead, &m.key, in_ms) {
        (Some(_), _, _) => FIELDS_DEAD,
        (None, Some(_), _) => FIELDS_KEYED,
        (None, None, true) => FIELDS_MS,
        (None, None, false) => FIELDS,
    };
    // Writing to a Vec cannot fail.
    let _ = rmp::encode::write_array_len(out, fields as u32);
    for n in [
        u64::from(m.pri),
        m.delay_ms / 1000,
        m.ttr_ms / 1000,
        m.created_us,
    ] {
        let _ = rmp::encode::write_uint(out, n);
    }
    let _ = rmp::encode::write_str(out, m.state.name());
    let _ = rmp::encode::write_uint(out, m.due_us);
    let _ = rmp::encode::write_str(out, owner);
    for n in [m.reserves, m.timeouts, m.releases, m.buries, m.kicks] {
        let _ = rmp::encode::write_uint(out, u64::from(n));
    }
    let _ = rmp::encode::write_uint(out, m.bury_seq);
    let _ = rmp::encode::write_uint(out, m.ready_us.unwrap_or(0));
    if in_ms {
        let _ = rmp::encode::write_uint(out, m.delay_ms);
        let _ = rmp::encode::write_uint(out, m.ttr_ms);
    }
    match (&m.key, &m.dead) {
        (Some((key, window_ms)), _) => {
            let _ = rmp::encode::write_str(out, key);
            let _ = rmp::encode::write_uint(out, *window_ms);
        }
        (None, Some(_)) => {
            let _ = rmp::encode::write_str(out, "");
            let _ = rmp::encode::write_uint(out, 0);
        }
        (None, None) => {}
    }
    if let Some(dead) = &m.dead {
        let _ = rmp::encode::write_str(out, &dead.encode());
    }
}

/// A duration in ms: the millisecond field when present and in agreement with the
/// whole seconds (see the module's comment), else the seconds.
fn finer(ms: &Val, secs: u32) -> u64 {
    match ms.uint() {
        Some(ms) if ms / 1000 == u64::from(secs) => ms,
        _ => secs_as_ms(secs),
    }
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
    pub id: u64,
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

/// The metadata of job `id` (named in the error), read back. A field the job's state
/// does not use is not read (0); the counters of an older job may be missing (0).
pub fn decode(id: u64, meta: &[u8]) -> Result<Meta, Damaged> {
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
    f.resize(f.len().max(FIELDS_DEAD), Val::Nil);
    let num = |i: usize, what| f[i].uint().ok_or_else(|| damaged(what));
    let num32 =
        |i: usize, what| num(i, what).and_then(|n| u32::try_from(n).map_err(|_| damaged(what)));
    let state = match &f[STATE] {
        Val::Str(s) => MetaState::parse(s).ok_or_else(|| damaged("state"))?,
        _ => return Err(damaged("state")),
    };
    if !matches!(f[OWNER], Val::Str(_) | Val::Nil) {
        return Err(damaged("owner"));
    }
    Ok(Meta {
        pri: num32(PRI, "pri")?,
        delay_ms: finer(&f[DELAY_MS], num32(DELAY, "delay")?),
        ttr_ms: finer(&f[TTR_MS], num32(TTR, "ttr")?),
        created_us: num(CREATED, "created")?,
        state,
        due_us: match state {
            MetaState::Delayed | MetaState::Reserved => num(DUE, "due")?,
            MetaState::Ready | MetaState::Buried => 0,
        },
        reserves: num32(RESERVES, "reserves").unwrap_or(0),
        timeouts: num32(TIMEOUTS, "timeouts").unwrap_or(0),
        releases: num32(RELEASES, "releases").unwrap_or(0),
        buries: num32(BURIES, "buries").unwrap_or(0),
        kicks: num32(KICKS, "kicks").unwrap_or(0),
        bury_seq: match state {
            MetaState::Buried => num(BSEQ, "bury sequence")?,
            _ => 0,
        },
        ready_us: match state {
            MetaState::Ready => f[READY].uint(),
            _ => None,
        },
        key: match &f[KEY] {
            Val::Str(k) if !k.is_empty() => {
                let k = String::from_utf8(k.clone()).map_err(|_| damaged("key"))?;
                Some((k, f[WINDOW_MS].uint().unwrap_or(0)))
            }
            _ => None,
        },
        dead: match (&f[DEAD], state) {
            (Val::Str(d), MetaState::Buried) => Some(
                std::str::from_utf8(d)
                    .ok()
                    .and_then(DeadReason::decode)
                    .ok_or_else(|| damaged("dead letter reason"))?,
            ),
            _ => None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(state: MetaState) -> Meta {
        Meta {
            pri: 4_294_967_295,
            delay_ms: 3000,
            ttr_ms: 60_000,
            created_us: 1_700_000_000_123_456,
            state,
            due_us: 0,
            reserves: 1,
            timeouts: 2,
            releases: 3,
            buries: 4,
            kicks: 5,
            bury_seq: 0,
            ready_us: None,
            key: None,
            dead: None,
        }
    }

    #[test]
    fn every_state_round_trips() {
        for m in [
            Meta {
                ready_us: Some(1_700_000_001_000_000),
                ..meta(MetaState::Ready)
            },
            Meta {
                due_us: 1_700_000_009_000_000,
                ..meta(MetaState::Delayed)
            },
            Meta {
                due_us: 1_700_000_060_000_000,
                ..meta(MetaState::Reserved)
            },
            Meta {
                bury_seq: 42,
                ..meta(MetaState::Buried)
            },
        ] {
            let mut out = Vec::new();
            encode(&m, "leader:1", &mut out);
            assert_eq!(decode(7, &out).unwrap(), m);
        }
    }

    #[test]
    fn only_a_job_in_milliseconds_has_the_millisecond_fields() {
        // msgpack: a fixarray of 14 is one byte; 16 fields take an array16 header.
        let head = |fields: usize| match fields {
            FIELDS => vec![0x90 | FIELDS as u8],
            _ => vec![0xdc, 0, fields as u8],
        };
        let mut whole = Vec::new();
        encode(&meta(MetaState::Buried), "", &mut whole);
        assert_eq!(
            whole[..1],
            head(FIELDS),
            "14 fields, as before milliseconds"
        );
        for (delay_ms, ttr_ms) in [(1500, 60_000), (3000, 1500), (0, 4_294_967_295_000)] {
            let m = Meta {
                delay_ms,
                ttr_ms,
                ..meta(MetaState::Buried)
            };
            let mut out = Vec::new();
            encode(&m, "", &mut out);
            let fields = if ttr_ms % 1000 == 0 && delay_ms % 1000 == 0 {
                FIELDS
            } else {
                FIELDS_MS
            };
            assert_eq!(
                out[..head(fields).len()],
                head(fields),
                "{delay_ms} {ttr_ms}"
            );
            assert_eq!(decode(1, &out).unwrap(), m);
        }
    }

    #[test]
    fn a_keyed_job_keeps_its_key_after_the_milliseconds() {
        let m = Meta {
            key: Some(("order-1".to_string(), 60_000)),
            ready_us: Some(1_700_000_001_000_000),
            ..meta(MetaState::Ready)
        };
        let mut out = Vec::new();
        encode(&m, "", &mut out);
        assert_eq!(out[..3], [0xdc, 0, FIELDS_KEYED as u8], "an array16 of 18");
        assert_eq!(decode(1, &out).unwrap(), m);
        let mut plain = Vec::new();
        encode(&meta(MetaState::Ready), "", &mut plain);
        assert_eq!(decode(1, &plain).unwrap().key, None);
    }

    #[test]
    fn stale_milliseconds_give_way_to_changed_seconds() {
        // A job in ms whose DELAY a version before milliseconds changed to 7 s.
        let mut out = Vec::new();
        let m = Meta {
            pri: 5,
            delay_ms: 1500,
            ..meta(MetaState::Buried)
        };
        encode(&m, "", &mut out);
        // The array16 header (3 bytes), PRI (1), then DELAY.
        assert_eq!(out[4], 1, "DELAY is the whole seconds");
        out[4] = 7;
        let got = decode(1, &out).unwrap();
        assert_eq!((got.delay_ms, got.ttr_ms), (7000, 60_000));
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
        let m = decode(1, &lua).unwrap();
        assert_eq!((m.pri, m.ttr_ms, m.state), (5, 120_000, MetaState::Ready));
        assert_eq!(m.ready_us, Some(1_700_000_000_223_456));
        let mut old = lua[..lua.len() - 9].to_vec();
        old[0] = 0x9d;
        assert_eq!(decode(1, &old).unwrap().ready_us, None);
    }

    #[test]
    fn a_dead_letter_keeps_its_reason_with_or_without_a_key() {
        let reason = DeadReason {
            cause: crate::store::policy::DeadCause::Reserves,
            count: 5,
            limit: 5,
        };
        for key in [None, Some(("order-1".to_string(), 0))] {
            let m = Meta {
                key,
                dead: Some(reason),
                ..meta(MetaState::Buried)
            };
            let mut out = Vec::new();
            encode(&m, "", &mut out);
            assert_eq!(out[..3], [0xdc, 0, FIELDS_DEAD as u8], "an array16 of 19");
            assert_eq!(decode(1, &out).unwrap(), m);
        }
        // Kicked: the reason goes with the state (a script may leave the field).
        let kicked = Meta {
            dead: Some(reason),
            ..meta(MetaState::Ready)
        };
        let mut out = Vec::new();
        encode(&kicked, "", &mut out);
        assert_eq!(decode(1, &out).unwrap().dead, None);
    }

    #[test]
    fn garbage_is_damage_not_zero() {
        assert!(decode(1, b"\x93\x01\x02").is_err());
        assert!(decode(1, b"nonsense").is_err());
    }
}
