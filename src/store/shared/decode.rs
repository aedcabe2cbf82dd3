//! What Redis answers the shared mode's scripts, read into typed values (what a failed
//! call means is `crate::redis::error`'s).
//!
//! Each script's reply has one shape, read by one decoder ([`Decode`]; the script's
//! type in [`super::scripts::Scripts`] says which). [`super::scripts::Call::run`] names
//! the script in every error, so a log says which call failed.
//!
//! Invariant: a reply without its script's shape (a missing field, a negative count, a
//! string where a number belongs) is [`crate::store::StoreError::BadReply`], never read as 0 or as
//! an empty value.

use bytes::Bytes;
use redis::Value;

use crate::protocol::TubeName;
use crate::redis::US;
use crate::store::{JobId, JobInfo, JobState, Totals, TubeInfo};

/// A script's reply, read from what Redis answered; `Err` says what was wrong with it
/// (the caller adds which script answered).
pub trait Decode: Sized {
    fn decode(v: Value) -> Result<Self, String>;
}

/// An integer: Lua numbers arrive as integers, ids (kept as strings) as bulk strings.
fn int(v: &Value) -> Result<i64, String> {
    let parsed = match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    };
    parsed.ok_or_else(|| format!("expected an integer, got {v:?}"))
}

/// A count, an id or a time: a non-negative integer.
pub(super) fn count(v: &Value) -> Result<u64, String> {
    let i = int(v)?;
    u64::try_from(i).map_err(|_| format!("expected a non-negative integer, got {i}"))
}

pub fn text(v: &Value) -> Result<&[u8], String> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.as_bytes()),
        _ => Err(format!("expected a string, got {v:?}")),
    }
}

/// A string reply that must be text (`what` says which, in the error).
pub(super) fn string(v: &Value, what: &str) -> Result<String, String> {
    String::from_utf8(text(v)?.to_vec()).map_err(|_| format!("{what} that is not text"))
}

/// The `N` fields of an array reply.
pub(super) fn fields<const N: usize>(v: Value) -> Result<[Value; N], String> {
    match v {
        Value::Array(items) | Value::Set(items) => {
            let len = items.len();
            items
                .try_into()
                .map_err(|_| format!("expected {N} fields, got {len}"))
        }
        other => Err(format!("expected an array of {N} fields, got {other:?}")),
    }
}

/// A job's body as a script answers it: the body, or, for a large one, only that it
/// is large (the caller reads it with a plain command: see large.rs).
#[derive(Debug, PartialEq, Eq)]
pub enum BodyReply {
    Here(Bytes),
    Apart,
}

fn body(v: Value) -> Result<BodyReply, String> {
    match v {
        Value::BulkString(b) => Ok(BodyReply::Here(Bytes::from(b))),
        Value::Int(_) => Ok(BodyReply::Apart),
        other => Err(format!("expected a job body, got {other:?}")),
    }
}

pub(super) fn u32_of(v: &Value) -> Result<u32, String> {
    let n = count(v)?;
    u32::try_from(n).map_err(|_| format!("expected a 32-bit value, got {n}"))
}

/// `nil` (no such job or tube, nothing to reserve) or the value.
impl<T: Decode> Decode for Option<T> {
    fn decode(v: Value) -> Result<Self, String> {
        match v {
            Value::Nil => Ok(None),
            v => T::decode(v).map(Some),
        }
    }
}

/// 1 done, 0 not (the transition did not apply: no such job, not the holder).
impl Decode for bool {
    fn decode(v: Value) -> Result<Self, String> {
        match count(&v)? {
            0 => Ok(false),
            1 => Ok(true),
            n => Err(format!("expected 0 or 1, got {n}")),
        }
    }
}

/// A count, an id, or a time.
impl Decode for u64 {
    fn decode(v: Value) -> Result<Self, String> {
        count(&v)
    }
}

/// A signed amount (how far a reference count moved).
impl Decode for i64 {
    fn decode(v: Value) -> Result<Self, String> {
        int(&v)
    }
}

/// A list of indexes (the tubes of a call that gained ready jobs).
impl Decode for Vec<u64> {
    fn decode(v: Value) -> Result<Self, String> {
        match v {
            Value::Array(items) | Value::Set(items) => items.iter().map(count).collect(),
            other => Err(format!("expected an array, got {other:?}")),
        }
    }
}

/// What `init` answers: the namespace's generation.
#[derive(Debug)]
pub struct Joined {
    pub generation: String,
}

impl Decode for Joined {
    fn decode(v: Value) -> Result<Self, String> {
        let [generation] = fields(v)?;
        Ok(Joined {
            generation: string(&generation, "a generation")?,
        })
    }
}

/// A job reserved by `reserve` or `reserve_job`.
#[derive(Debug)]
pub struct Reservation {
    pub id: JobId,
    pub body: BodyReply,
    /// The TTR deadline, and the time the script read (Redis clock, us).
    pub deadline_us: u64,
    pub now_us: u64,
    /// Which of the watched tubes (1-based; 0 from `reserve_job`).
    pub tube_index: usize,
    /// How long it had been ready (us); `None` for a job written before that was kept.
    pub waited_us: Option<u64>,
}

impl Decode for Reservation {
    fn decode(v: Value) -> Result<Self, String> {
        let [id, b, deadline, index, now, waited] = fields(v)?;
        Ok(Reservation {
            id: count(&id)?,
            body: body(b)?,
            deadline_us: count(&deadline)?,
            now_us: count(&now)?,
            tube_index: count(&index)? as usize,
            // Negative: the job was written before its ready time was recorded.
            waited_us: u64::try_from(int(&waited)?).ok(),
        })
    }
}

/// A touched reservation's new deadline, and the time the script read (us).
#[derive(Debug)]
pub struct Touched {
    pub deadline_us: u64,
    pub now_us: u64,
}

impl Decode for Touched {
    fn decode(v: Value) -> Result<Self, String> {
        let [deadline, now] = fields(v)?;
        Ok(Touched {
            deadline_us: count(&deadline)?,
            now_us: count(&now)?,
        })
    }
}

/// A tube's name (a script's reply naming the tube it acted in).
impl Decode for TubeName {
    fn decode(v: Value) -> Result<Self, String> {
        let name = text(&v)?;
        TubeName::new(name)
            .ok_or_else(|| format!("a bad tube name {:?}", String::from_utf8_lossy(name)))
    }
}

/// The reply of a script that found a job by its id alone (`find_job` in the prelude):
/// the tube its hash names, then the script's own reply.
#[derive(Debug)]
pub struct OnJob<R> {
    pub tube: TubeName,
    pub reply: R,
}

impl<R: Decode> Decode for OnJob<R> {
    fn decode(v: Value) -> Result<Self, String> {
        let [tube, reply] = fields(v)?;
        Ok(OnJob {
            tube: TubeName::decode(tube)?,
            reply: R::decode(reply)?,
        })
    }
}

/// A job shown by a peek.
#[derive(Debug)]
pub struct Peeked {
    pub id: JobId,
    pub body: BodyReply,
}

impl Decode for Peeked {
    fn decode(v: Value) -> Result<Self, String> {
        let [id, b] = fields(v)?;
        Ok(Peeked {
            id: count(&id)?,
            body: body(b)?,
        })
    }
}

/// A job's figures from `job_info` (the id and tube are the caller's).
#[derive(Debug)]
pub struct JobFigures {
    state: JobState,
    pri: u32,
    delay_ms: u64,
    ttr_ms: u64,
    created_us: u64,
    due_us: u64,
    counters: [u64; 5],
    now_us: u64,
}

impl Decode for JobFigures {
    fn decode(v: Value) -> Result<Self, String> {
        let [
            pri,
            delay,
            ttr,
            created,
            state,
            due,
            c0,
            c1,
            c2,
            c3,
            c4,
            now,
        ] = fields(v)?;
        let state = match text(&state)? {
            b"ready" => JobState::Ready,
            b"reserved" => JobState::Reserved,
            b"delayed" => JobState::Delayed,
            b"buried" => JobState::Buried,
            other => {
                return Err(format!(
                    "unknown job state {:?}",
                    String::from_utf8_lossy(other)
                ));
            }
        };
        Ok(JobFigures {
            state,
            pri: u32_of(&pri)?,
            delay_ms: count(&delay)?,
            ttr_ms: count(&ttr)?,
            created_us: count(&created)?,
            due_us: count(&due)?,
            counters: [
                count(&c0)?,
                count(&c1)?,
                count(&c2)?,
                count(&c3)?,
                count(&c4)?,
            ],
            now_us: count(&now)?,
        })
    }
}

impl JobFigures {
    pub fn into_info(self, id: JobId, tube: TubeName) -> JobInfo {
        let [reserves, timeouts, releases, buries, kicks] = self.counters;
        JobInfo {
            id,
            tube,
            state: self.state,
            pri: self.pri,
            created: self.created_us * US,
            delay_ms: self.delay_ms,
            ttr_ms: self.ttr_ms,
            deadline: matches!(self.state, JobState::Delayed | JobState::Reserved)
                .then_some(self.due_us * US),
            reserves,
            timeouts,
            releases,
            buries,
            kicks,
            file: 0,
            now: self.now_us * US,
        }
    }
}

/// A tube's figures from `tube_info`, times turned into nanoseconds.
impl Decode for TubeInfo {
    fn decode(v: Value) -> Result<Self, String> {
        let f: [Value; 13] = fields(v)?;
        let mut n = [0u64; 13];
        for (out, v) in n.iter_mut().zip(&f) {
            *out = count(v)?;
        }
        let [
            urgent,
            ready,
            reserved,
            delayed,
            buried,
            total_jobs,
            using,
            watching,
            cmd_delete,
            cmd_pause,
            pause,
            pause_until,
            now,
        ] = n;
        Ok(TubeInfo {
            urgent,
            ready,
            reserved,
            delayed,
            buried,
            total_jobs,
            using,
            watching,
            cmd_delete,
            cmd_pause,
            pause: pause * US,
            pause_until: pause_until * US,
            now: now * US,
            ..TubeInfo::default()
        })
    }
}

/// One bounded `tick` call of a tube.
#[derive(Debug)]
pub struct Ticked {
    /// A job may now be reserved.
    pub woke: bool,
    /// The call reached its bound: more may be due.
    pub more: bool,
    /// Jobs found damaged (their meta missing) and dropped from their set.
    pub damaged: u64,
}

impl Decode for Ticked {
    fn decode(v: Value) -> Result<Self, String> {
        let [woke, more, damaged] = fields(v)?;
        Ok(Ticked {
            woke: bool::decode(woke)?,
            more: bool::decode(more)?,
            damaged: count(&damaged)?,
        })
    }
}

/// The set a kick takes jobs from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KickSet {
    Buried,
    Delayed,
}

impl KickSet {
    pub fn name(self) -> &'static str {
        match self {
            KickSet::Buried => "buried",
            KickSet::Delayed => "delayed",
        }
    }
}

/// One bounded `kick` call.
#[derive(Debug)]
pub struct KickReply {
    pub count: u32,
    pub from: KickSet,
}

impl Decode for KickReply {
    fn decode(v: Value) -> Result<Self, String> {
        let [n, set] = fields(v)?;
        let from = match text(&set)? {
            b"buried" => KickSet::Buried,
            b"delayed" => KickSet::Delayed,
            other => {
                return Err(format!(
                    "unknown kick set {:?}",
                    String::from_utf8_lossy(other)
                ));
            }
        };
        Ok(KickReply {
            count: u32_of(&n)?,
            from,
        })
    }
}

/// One bounded `reclaim` call.
#[derive(Debug)]
pub struct Reclaimed {
    pub returned: u64,
    /// Where the walk of the reserved set goes on ("0": it is done).
    pub cursor: String,
}

impl Decode for Reclaimed {
    fn decode(v: Value) -> Result<Self, String> {
        let [n, cursor] = fields(v)?;
        Ok(Reclaimed {
            returned: count(&n)?,
            cursor: string(&cursor, "a cursor")?,
        })
    }
}

/// What `reap` did with a dead instance's references.
#[derive(Debug, PartialEq, Eq)]
pub enum Reaped {
    Dropped,
    /// The instance is alive after all.
    Alive,
    /// Its hash names a tube the call did not give: read it again and retry.
    Retry,
}

impl Decode for Reaped {
    fn decode(v: Value) -> Result<Self, String> {
        match int(&v)? {
            1 => Ok(Reaped::Dropped),
            0 => Ok(Reaped::Alive),
            -1 => Ok(Reaped::Retry),
            n => Err(format!("expected 1, 0 or -1, got {n}")),
        }
    }
}

/// The reply of `stats`' transaction: HMGET of the totals (a field never written is
/// nil: 0), then for each of `tubes` tubes its urgent count and the sizes of its ready,
/// delayed, reserved and buried sets. `tubes` is the caller's count of tube names.
pub fn totals(replies: Vec<Value>, tubes: usize) -> Result<Totals, String> {
    let mut replies = replies.into_iter();
    let [total_jobs, job_timeouts] = match replies.next() {
        Some(v) => fields::<2>(v)?,
        None => return Err("an empty reply".to_string()),
    };
    let stored = |v: Value| match v {
        Value::Nil => Ok(0),
        v => count(&v),
    };
    let mut sums = [0u64; 5];
    let mut n = 0;
    for (i, v) in replies.enumerate() {
        sums[i % 5] += count(&v)?;
        n += 1;
    }
    if n != tubes * 5 {
        return Err(format!(
            "expected 5 figures for each of {tubes} tubes, got {n}"
        ));
    }
    let [urgent, ready, delayed, reserved, buried] = sums;
    Ok(Totals {
        urgent,
        ready,
        reserved,
        delayed,
        buried,
        total_jobs: stored(total_jobs)?,
        job_timeouts: stored(job_timeouts)?,
        tubes: tubes as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn garbage_is_a_bad_reply_not_zero() {
        assert!(u64::decode(bulk("x")).is_err());
        assert!(u64::decode(Value::Int(-1)).is_err());
        assert!(u64::decode(Value::Nil).is_err());
        assert!(bool::decode(Value::Int(2)).is_err());
        assert_eq!(u64::decode(bulk("42")), Ok(42));
        assert_eq!(Option::<u64>::decode(Value::Nil), Ok(None));
    }

    #[test]
    fn a_reservation_needs_every_field() {
        let full = vec![
            bulk("7"),
            bulk("body"),
            Value::Int(2_000_000),
            Value::Int(1),
            Value::Int(1_000_000),
            Value::Int(-1),
        ];
        let r = Reservation::decode(Value::Array(full.clone())).unwrap();
        assert_eq!((r.id, r.tube_index, r.waited_us), (7, 1, None));
        assert_eq!(r.body, BodyReply::Here(Bytes::from_static(b"body")));
        let mut large = full.clone();
        large[1] = Value::Int(2 << 20);
        let r = Reservation::decode(Value::Array(large)).unwrap();
        assert_eq!(r.body, BodyReply::Apart, "a large body is read apart");
        let short = Value::Array(full[..5].to_vec());
        assert!(Reservation::decode(short).is_err());
        let mut no_body = full;
        no_body[1] = Value::Nil;
        assert!(Reservation::decode(Value::Array(no_body)).is_err());
    }

    #[test]
    fn an_unknown_job_state_is_a_bad_reply() {
        let mut f: Vec<Value> = (0..12).map(Value::Int).collect();
        f[4] = bulk("lost");
        assert!(JobFigures::decode(Value::Array(f.clone())).is_err());
        f[4] = bulk("buried");
        let info = JobFigures::decode(Value::Array(f))
            .unwrap()
            .into_info(1, TubeName::default_tube());
        assert_eq!(info.state, JobState::Buried);
        assert_eq!(info.deadline, None);
    }
}
