//! Reading a namespace back from Redis into a [`StoreSnapshot`], for the instance that has
//! just taken the lead (it holds the lease, so nobody else writes meanwhile).
//!
//! Work is chunked: a tube's jobs are the members of its four sets, read [`IDS`] at a
//! time; their hashes are read with one `HMGET` each, pipelined [`HASHES`] to a round
//! trip: no call blocks Redis for long, and no reply is large, whatever the
//! namespace's size.
//!
//! A job whose hash is missing, whose metadata cannot be read, or whose body is
//! missing (what eviction or a damaged namespace leaves), is reported and left out:
//! never served with an empty body. A body written ahead of a large put whose job the
//! previous leader never made (a hash with a body and no metadata, its id in the
//! namespace's `ahead` set) is reported for the caller to remove, fenced by its lease.
//!
//! Schedules' cursors are read with the jobs (`cursors.rs`), before the new leader's
//! scheduler starts: every tick Redis holds a job of is past its cursor. Retained
//! records are read last (`retained.rs`), oldest first.

use bytes::Bytes;

use super::figures::TUBE_FIELDS;
use super::record::record_of;
use crate::protocol::TubeName;
use crate::redis::keys::{JOB_BODY, JOB_META, JOB_TUBE, Keys, NsKey, TubeKey};
use crate::redis::{RedisConn, US, meta};
use crate::store::StoreError;
use crate::store::memory::{JobRecord, StoreCounters, StoreSnapshot, TubeRecord};
use crate::util::SwapList;

/// Set members asked for per `ZRANGE`.
const IDS: usize = 10_000;

/// Job hashes read per round trip (a body may be as large as `-z` allows; a reply
/// stays within about a thousand of them).
const HASHES: usize = 1_000;

/// The four sets a job may be in.
const SETS: [TubeKey; 4] = [
    TubeKey::Ready,
    TubeKey::Delayed,
    TubeKey::Reserved,
    TubeKey::Buried,
];

/// What a load found.
#[derive(Debug, Default)]
pub struct Loaded {
    pub snapshot: StoreSnapshot,
    /// The tube list as Redis holds it (the sink's starting point).
    pub tube_list: SwapList<TubeName>,
    /// Jobs left out as damaged.
    pub damaged: usize,
    /// The bodies written ahead of their jobs (the `ahead` set): for the caller to take
    /// out of the set under its lease ...
    pub ahead: Vec<u64>,
    /// ... and those of them whose job was never made: hashes with a body only, for
    /// the caller to delete.
    pub orphans: Vec<u64>,
}

fn err(op: &'static str) -> impl Fn(redis::RedisError) -> StoreError {
    move |e| StoreError::redis(op, e)
}

/// A hash's fields and values.
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Every entry of hash `key`, by HSCAN.
pub(super) async fn scan_hash(
    mut conn: RedisConn,
    key: &str,
    count: usize,
) -> Result<Entries, StoreError> {
    let mut out = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, items): (u64, Entries) = redis::cmd("HSCAN")
            .arg(key)
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .query_async(&mut conn)
            .await
            .map_err(err("HSCAN"))?;
        out.extend(items);
        if next == 0 {
            return Ok(out);
        }
        cursor = next;
    }
}

/// A job id, as a set member or a hash field holds it (decimal, zero-padded or not).
fn parse_id(field: &[u8]) -> Option<u64> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

fn parse_u64(v: &Option<Vec<u8>>) -> u64 {
    v.as_deref()
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(0, |f| f.max(0.0) as u64)
}

/// A job hash's fields as read: its tube, metadata and body.
type Hash = (Option<Vec<u8>>, Option<Vec<u8>>, Option<Vec<u8>>);

/// A tube's jobs, decoded from their hashes.
struct Decoded {
    jobs: Vec<JobRecord>,
    /// Jobs left out as damaged.
    damaged: usize,
}

/// Tube `name`'s jobs from their ids and hashes.
fn decode_tube(name: &TubeName, ids: Vec<u64>, hashes: Vec<Hash>) -> Decoded {
    let mut jobs = Vec::with_capacity(ids.len());
    let mut damaged = 0;
    for (id, (tube, meta, body)) in ids.into_iter().zip(hashes) {
        let Some(meta) = meta else {
            tracing::error!(
                id,
                tube = %name,
                "job {id} is in a set of its tube but has no job hash in Redis (evicted or damaged); it is left out"
            );
            damaged += 1;
            continue;
        };
        let Some(body) = body else {
            tracing::error!(
                id,
                tube = %name,
                "job {id} has no body in Redis (evicted or damaged); it is left out, not served empty"
            );
            damaged += 1;
            continue;
        };
        if tube.as_deref() != Some(name.as_str().as_bytes()) {
            // Never written so (a move rewrites the tube in the batch that moves the
            // job): the set that holds the job says where it is served.
            tracing::warn!(id, tube = %name, "job {id}'s hash names another tube than the set holding it; it is served from the set's");
        }
        match meta::decode(id, &meta) {
            Ok(m) => jobs.push(record_of(id, name, m, Bytes::from(body))),
            Err(why) => {
                tracing::error!(tube = %name, "{why}; the job is left out");
                damaged += 1;
            }
        }
    }
    Decoded { jobs, damaged }
}

/// Read the whole namespace under `keys`.
pub async fn load(conn: &RedisConn, keys: &Keys) -> Result<Loaded, StoreError> {
    let mut c = conn.clone();
    let mut loaded = Loaded {
        snapshot: StoreSnapshot {
            counters: read_counters(&mut c, keys).await?,
            ..StoreSnapshot::default()
        },
        ..Loaded::default()
    };
    for name in read_tube_list(&mut c, keys).await? {
        loaded.tube_list.insert(name.clone());
        loaded
            .snapshot
            .tubes
            .push(read_tube(&mut c, keys, &name).await?);
        let decoded = read_jobs(&mut c, keys, &name).await?;
        loaded.snapshot.jobs.extend(decoded.jobs);
        loaded.damaged += decoded.damaged;
    }
    (loaded.ahead, loaded.orphans) = read_ahead(&mut c, keys).await?;
    loaded.snapshot.windows = super::keyed::read_windows(&mut c, keys).await?;
    loaded.snapshot.cursors = super::cursors::read_cursors(conn, keys).await?;
    loaded.snapshot.retained = super::retained::read_retained(conn, keys).await?;
    Ok(loaded)
}

/// The namespace counters (a missing one reads as 0).
async fn read_counters(c: &mut RedisConn, keys: &Keys) -> Result<StoreCounters, StoreError> {
    let (ids, seq): (Option<Vec<u8>>, Option<Vec<u8>>) = redis::cmd("MGET")
        .arg(keys.ns(NsKey::Ids))
        .arg(keys.ns(NsKey::Seq))
        .query_async(c)
        .await
        .map_err(err("MGET ids seq"))?;
    let stats: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
        .arg(keys.ns(NsKey::Stats))
        .arg(&["total_jobs", "job_timeouts"])
        .query_async(c)
        .await
        .map_err(err("HMGET stats"))?;
    Ok(StoreCounters {
        last_id: parse_u64(&ids),
        bury_seq: parse_u64(&seq),
        total_jobs: parse_u64(stats.first().unwrap_or(&None)),
        job_timeouts: parse_u64(stats.get(1).unwrap_or(&None)),
    })
}

/// The tube list, in its order (names that are not tube names are skipped).
async fn read_tube_list(c: &mut RedisConn, keys: &Keys) -> Result<Vec<TubeName>, StoreError> {
    let names: Vec<Vec<u8>> = redis::cmd("LRANGE")
        .arg(keys.ns(NsKey::Tubes))
        .arg(0)
        .arg(-1)
        .query_async(c)
        .await
        .map_err(err("LRANGE tubes"))?;
    Ok(names.iter().filter_map(|n| TubeName::new(n)).collect())
}

/// Tube `name`'s figures and pause.
async fn read_tube(
    c: &mut RedisConn,
    keys: &Keys,
    name: &TubeName,
) -> Result<TubeRecord, StoreError> {
    let k = keys.tube(name.as_str());
    let m: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
        .arg(k.get(TubeKey::Meta))
        .arg(&TUBE_FIELDS)
        .query_async(c)
        .await
        .map_err(err("HMGET tube meta"))?;
    let f = |i: usize| parse_u64(m.get(i).unwrap_or(&None));
    Ok(TubeRecord {
        name: name.clone(),
        kept: true,
        total_jobs: f(0),
        cmd_delete: f(1),
        cmd_pause: f(2),
        pause: f(3) * US,
        pause_until: f(4) * US,
        next_due: None,
    })
}

/// Tube `name`'s jobs: the ids its sets hold, then their hashes, then decoded.
async fn read_jobs(c: &mut RedisConn, keys: &Keys, name: &TubeName) -> Result<Decoded, StoreError> {
    let k = keys.tube(name.as_str());
    let mut ids = Vec::new();
    for set in SETS {
        ids.extend(read_members(c, k.get(set)).await?);
    }
    // A job in two sets (a damaged namespace) is read once.
    let mut seen = foldhash::HashSet::default();
    ids.retain(|id| seen.insert(*id));
    let hashes = read_hashes(c, keys, &ids, &[JOB_TUBE, JOB_META, JOB_BODY]).await?;
    // Decoding is CPU work in proportion to the tube's jobs (a second or more for a
    // million): it runs on a blocking thread, so the runtime keeps running the lease
    // keeper meanwhile (a lease left unrenewed through a long load would end the
    // leadership the load is for).
    let tube = name.clone();
    let hashes = hashes
        .into_iter()
        .map(|mut f| {
            let (b, m, t) = (f.pop().flatten(), f.pop().flatten(), f.pop().flatten());
            (t, m, b)
        })
        .collect();
    tokio::task::spawn_blocking(move || decode_tube(&tube, ids, hashes))
        .await
        .map_err(|e| StoreError::BadReply {
            op: "load",
            detail: format!("decoding a tube's jobs stopped: {e}"),
        })
}

/// The ids in sorted set `key`, [`IDS`] a call (members that are not ids are skipped).
async fn read_members(c: &mut RedisConn, key: &str) -> Result<Vec<u64>, StoreError> {
    let mut ids = Vec::new();
    loop {
        let from = ids.len();
        let members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(from)
            .arg(from + IDS - 1)
            .query_async(c)
            .await
            .map_err(err("ZRANGE"))?;
        let got = members.len();
        ids.extend(members.iter().filter_map(|m| parse_id(m)));
        if got < IDS || ids.len() == from {
            return Ok(ids);
        }
    }
}

/// Fields `fields` of the hashes of jobs `ids`, in their order: one `HMGET` each,
/// [`HASHES`] a round trip.
async fn read_hashes(
    c: &mut RedisConn,
    keys: &Keys,
    ids: &[u64],
    fields: &[&str],
) -> Result<Vec<Vec<Option<Vec<u8>>>>, StoreError> {
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(HASHES) {
        let mut pipe = redis::pipe();
        for &id in chunk {
            pipe.cmd("HMGET").arg(keys.job(id)).arg(fields);
        }
        let got: Vec<Vec<Option<Vec<u8>>>> =
            pipe.query_async(c).await.map_err(err("HMGET jobs"))?;
        out.extend(got);
    }
    Ok(out)
}

/// The bodies written ahead of their jobs (the `ahead` set), and those of them whose
/// job was never made (a hash with a body and no metadata).
async fn read_ahead(c: &mut RedisConn, keys: &Keys) -> Result<(Vec<u64>, Vec<u64>), StoreError> {
    let ahead = read_members(c, keys.ns(NsKey::Ahead)).await?;
    let metas = read_hashes(c, keys, &ahead, &[JOB_META, JOB_BODY]).await?;
    let orphans = ahead
        .iter()
        .zip(metas)
        .filter(|(_, f)| {
            f.first().is_some_and(Option::is_none) && f.get(1).is_some_and(Option::is_some)
        })
        .map(|(id, _)| *id)
        .collect();
    Ok((ahead, orphans))
}
