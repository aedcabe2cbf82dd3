//! Reading a namespace back from Redis into a [`StoreSnapshot`], for the instance that has
//! just taken the lead (it holds the lease, so nobody else writes meanwhile).
//!
//! Work is chunked: each tube's job and body hashes are read with HSCAN, a bounded
//! number of entries per call ([`SCAN_METAS`], [`SCAN_BODIES`]): no call blocks Redis
//! for long, whatever the namespace's size. The two hashes of a tube are read side by
//! side.
//!
//! A job whose metadata cannot be read, or whose body is missing (what eviction or a
//! damaged namespace leaves), is reported and left out: never served with an empty
//! body. A body without its job (written ahead of a large put whose job the previous
//! leader never made) is reported for the caller to remove, fenced by its lease.
//!
//! Schedules' cursors are read with the jobs (`cursors.rs`), before the new leader's
//! scheduler starts: every tick Redis holds a job of is past its cursor. Retained
//! records are read last (`retained.rs`), oldest first.

use bytes::Bytes;
use foldhash::HashMap;

use super::figures::TUBE_FIELDS;
use super::record::record_of;
use crate::protocol::TubeName;
use crate::redis::keys::{Keys, NsKey, TubeKey};
use crate::redis::{RedisConn, US, meta};
use crate::store::StoreError;
use crate::store::memory::{JobRecord, StoreCounters, StoreSnapshot, TubeRecord};
use crate::util::SwapList;

/// Entries asked for per HSCAN call: many of the small metadata, fewer bodies (a body
/// may be as large as `-z` allows; a reply stays within about a thousand of them).
const SCAN_METAS: usize = 10_000;
const SCAN_BODIES: usize = 1_000;

/// What a load found.
#[derive(Debug, Default)]
pub struct Loaded {
    pub snapshot: StoreSnapshot,
    /// The tube list as Redis holds it (the sink's starting point).
    pub tube_list: SwapList<TubeName>,
    /// Jobs left out as damaged.
    pub damaged: usize,
    /// Bodies without a job, by tube: for the caller to remove under its lease.
    pub orphans: Vec<(TubeName, Vec<u64>)>,
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

/// A job id, as a hash field holds it (decimal).
fn parse_id(field: &[u8]) -> Option<u64> {
    std::str::from_utf8(field).ok()?.parse().ok()
}

fn parse_u64(v: &Option<Vec<u8>>) -> u64 {
    v.as_deref()
        .and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(0, |f| f.max(0.0) as u64)
}

/// A tube's jobs, decoded from its hashes' entries.
struct Decoded {
    jobs: Vec<JobRecord>,
    /// Jobs left out as damaged.
    damaged: usize,
    /// Bodies without a job: written ahead of a put that never made its job (the
    /// leader died in between).
    orphans: Vec<u64>,
}

/// A tube's jobs from its hashes' entries.
fn decode_tube(name: &TubeName, metas: Entries, bodies: Entries) -> Decoded {
    let mut bodies: HashMap<u64, Vec<u8>> = bodies
        .into_iter()
        .filter_map(|(field, body)| Some((parse_id(&field)?, body)))
        .collect();
    let mut jobs = Vec::with_capacity(metas.len());
    let mut damaged = 0;
    for (field, meta) in metas {
        let Some(id) = parse_id(&field) else {
            tracing::warn!(tube = %name, "a job with an unreadable id was left out");
            damaged += 1;
            continue;
        };
        let Some(body) = bodies.remove(&id) else {
            tracing::error!(
                id,
                tube = %name,
                "job {id} has no body in Redis (evicted or damaged); it is left out, not served empty"
            );
            damaged += 1;
            continue;
        };
        match meta::decode(id, &meta) {
            Ok(m) => jobs.push(record_of(id, name, m, Bytes::from(body))),
            Err(why) => {
                tracing::error!(tube = %name, "{why}; the job is left out");
                damaged += 1;
            }
        }
    }
    Decoded {
        jobs,
        damaged,
        orphans: bodies.into_keys().collect(),
    }
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
        let decoded = read_jobs(conn, keys, &name).await?;
        loaded.snapshot.jobs.extend(decoded.jobs);
        loaded.damaged += decoded.damaged;
        if !decoded.orphans.is_empty() {
            loaded.orphans.push((name, decoded.orphans));
        }
    }
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

/// Tube `name`'s jobs, its two hashes scanned side by side, then decoded.
async fn read_jobs(conn: &RedisConn, keys: &Keys, name: &TubeName) -> Result<Decoded, StoreError> {
    let k = keys.tube(name.as_str());
    let (metas, bodies) = tokio::try_join!(
        scan_hash(conn.clone(), k.get(TubeKey::Jobs), SCAN_METAS),
        scan_hash(conn.clone(), k.get(TubeKey::Bodies), SCAN_BODIES)
    )?;
    // Decoding is CPU work in proportion to the tube's jobs (a second or more for a
    // million): it runs on a blocking thread, so the runtime keeps running the lease
    // keeper meanwhile (a lease left unrenewed through a long load would end the
    // leadership the load is for).
    let tube = name.clone();
    tokio::task::spawn_blocking(move || decode_tube(&tube, metas, bodies))
        .await
        .map_err(|e| StoreError::BadReply {
            op: "load",
            detail: format!("decoding a tube's jobs stopped: {e}"),
        })
}
