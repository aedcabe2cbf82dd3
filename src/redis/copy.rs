//! Copying a namespace from one Redis to another, or to another prefix: what
//! `redstalk-namespace copy` runs (moving a standalone namespace onto a Redis Cluster,
//! docs/SCALING.md).
//!
//! The copy, in order: the source must be of this version's layout (schema 2); every
//! instance is locked out of the source ([`super::lockout`]: it refuses while a lease
//! is held or a heartbeat lives, else writes [`COPYING`] into the lease key, with no
//! expiry); the target must hold no key of the new namespace, or only
//! those of an interrupted copy (`resume`); every key of the source (SCAN `{P}:*`, each
//! name once) is copied by type in bounded chunks (HSCAN/ZSCAN/SSCAN/LRANGE, GET) into
//! the same name under the new tag, with its expiry; the sizes of every key are compared
//! on both sides, and each tube's jobs by state reported; `{Q}:schema` is written last
//! (so a namespace without it is an interrupted copy); the source then gets the
//! [`MOVED`] tombstone (instances never serve it again) unless it is kept, when the lock
//! is lifted.
//!
//! Not copied: what belongs to running processes — the lease and its API address, the
//! instances' heartbeats and their use/watch references. Values never name keys (scripts
//! get every key from Rust), so nothing inside a value changes with the prefix.
//!
//! Invariant: the source is never written except for its lease key (lock, tombstone,
//! unlock); nothing the copy writes at the target is taken for a namespace before
//! `{Q}:schema` exists.

use std::collections::BTreeSet;
use std::time::Instant;

use redis::RedisError;

use super::RedisConn;
use super::keys::{Keys, NsKey, TubeKey, scan_pattern};
use super::lockout::{COPYING, LockOut, MOVED, lift, lock_out};
use super::schema::VERSION;

/// Keys scanned per SCAN call, list entries per LRANGE, members per ZSCAN/SSCAN.
const CHUNK: usize = 1000;
/// Fields per HSCAN: a hash may hold whole job bodies (a job's, a retained record's: up
/// to the `-z` limit), so fewer at a time.
const HASH_CHUNK: usize = 100;

/// What to copy where.
#[derive(Clone, Debug)]
pub struct CopyPlan {
    pub from_prefix: String,
    pub to_prefix: String,
    /// Leave the source serviceable (lift the lock) instead of the tombstone.
    pub keep_source: bool,
    /// The target may hold keys of an interrupted copy (no `{Q}:schema`): overwrite them.
    pub resume: bool,
}

/// One tube's jobs by state, on the source and the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TubeJobs {
    pub tube: String,
    /// ready, delayed, reserved, buried.
    pub jobs: [u64; 4],
}

/// What a copy did.
#[derive(Clone, Debug)]
pub struct CopyReport {
    pub keys: usize,
    /// Entries written (hash fields, set members, list entries, strings).
    pub entries: u64,
    pub tubes: Vec<TubeJobs>,
    pub ms: u128,
}

/// Why a copy stopped; the source is unlocked again where the error says so.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("the source has no namespace \"{prefix}\" (no key {key})")]
    NoSource { prefix: String, key: String },
    #[error(
        "the source namespace has the key layout of a previous version: start one redstalk \
         of this version on it once (it upgrades the layout), stop it, then copy"
    )]
    OldLayout,
    #[error(
        "an instance serves the source namespace (its lease {key} lapses in {ms} ms): stop \
         every instance of it first"
    )]
    Serving { key: String, ms: i64 },
    #[error("{live} instance(s) of the source namespace are alive ({key}): stop them first")]
    Live { key: String, live: i64 },
    #[error("the source namespace was moved away already (its lease key {key} is a tombstone)")]
    AlreadyMoved { key: String },
    #[error(
        "the target already holds the namespace \"{prefix}\" ({key} exists): choose another \
         --to-prefix or another target"
    )]
    TargetTaken { prefix: String, key: String },
    #[error(
        "the target holds keys of \"{prefix}\" ({key}) but no {schema}: an interrupted copy; \
         run again with --resume to overwrite them"
    )]
    TargetPartial {
        prefix: String,
        key: String,
        schema: String,
    },
    #[error("key {key} is a {kind}, which no redstalk version writes: not copied")]
    UnexpectedType { key: String, kind: String },
    #[error("key {key} differs after the copy: {from} entries at the source, {to} at the target")]
    Verify { key: String, from: u64, to: u64 },
    #[error("{op} on the {side}: {source}")]
    Redis {
        op: &'static str,
        side: &'static str,
        #[source]
        source: RedisError,
    },
}

fn err(op: &'static str, side: &'static str) -> impl FnOnce(RedisError) -> CopyError {
    move |source| CopyError::Redis { op, side, source }
}

/// Run the write `cmd` (`op` in errors) on the target.
async fn write(to: &mut RedisConn, cmd: &redis::Cmd, op: &'static str) -> Result<(), CopyError> {
    cmd.query_async::<()>(to).await.map_err(err(op, "target"))
}

/// The Redis types a namespace holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeyType {
    String,
    Hash,
    Zset,
    List,
    Set,
}

impl KeyType {
    fn parse(key: &str, name: &str) -> Result<KeyType, CopyError> {
        Ok(match name {
            "string" => KeyType::String,
            "hash" => KeyType::Hash,
            "zset" => KeyType::Zset,
            "list" => KeyType::List,
            "set" => KeyType::Set,
            other => {
                return Err(CopyError::UnexpectedType {
                    key: key.to_string(),
                    kind: other.to_string(),
                });
            }
        })
    }

    /// The command that counts a key's entries (a string counts as one).
    fn size_cmd(self, key: &str) -> redis::Cmd {
        let name = match self {
            KeyType::String => "EXISTS",
            KeyType::Hash => "HLEN",
            KeyType::Zset => "ZCARD",
            KeyType::List => "LLEN",
            KeyType::Set => "SCARD",
        };
        let mut cmd = redis::cmd(name);
        cmd.arg(key);
        cmd
    }
}

/// Copies the namespace `plan.from_prefix` of `from` to `plan.to_prefix` of `to`.
pub async fn copy(
    from: &mut RedisConn,
    to: &mut RedisConn,
    plan: &CopyPlan,
) -> Result<CopyReport, CopyError> {
    let started = Instant::now();
    let (src, dst) = (Keys::new(&plan.from_prefix), Keys::new(&plan.to_prefix));
    check_source(from, &src, &plan.from_prefix).await?;
    check_target(to, &dst, plan).await?;
    lock(from, &src).await?;
    let result = copy_locked(from, to, &src, &dst, plan.resume).await;
    let report = match result {
        Ok(report) => report,
        Err(e) => {
            // Nothing was taken for a namespace at the target: the source serves again.
            let _ = unlock(from, &src).await;
            return Err(e);
        }
    };
    write(
        to,
        redis::cmd("SET").arg(dst.schema()).arg(VERSION),
        "SET schema",
    )
    .await?;
    if plan.keep_source {
        unlock(from, &src).await?;
    } else {
        redis::cmd("SET")
            .arg(src.leader())
            .arg(MOVED)
            .query_async::<()>(from)
            .await
            .map_err(err("SET the tombstone", "source"))?;
    }
    Ok(CopyReport {
        ms: started.elapsed().as_millis(),
        ..report
    })
}

async fn check_source(conn: &mut RedisConn, keys: &Keys, prefix: &str) -> Result<(), CopyError> {
    let legacy = format!("{prefix}:ids");
    let (version, old, lease): (Option<u32>, i64, Option<String>) = redis::pipe()
        .cmd("GET")
        .arg(keys.schema())
        .cmd("EXISTS")
        .arg(&legacy)
        .cmd("GET")
        .arg(keys.leader())
        .query_async(conn)
        .await
        .map_err(err("read the layout", "source"))?;
    if lease.as_deref() == Some(MOVED) {
        return Err(CopyError::AlreadyMoved { key: keys.leader() });
    }
    match version {
        Some(VERSION) => Ok(()),
        Some(v) if v < VERSION => Err(CopyError::OldLayout),
        _ if old == 1 => Err(CopyError::OldLayout),
        _ => Err(CopyError::NoSource {
            prefix: prefix.to_string(),
            key: keys.schema(),
        }),
    }
}

async fn check_target(conn: &mut RedisConn, keys: &Keys, plan: &CopyPlan) -> Result<(), CopyError> {
    let schema: i64 = redis::cmd("EXISTS")
        .arg(keys.schema())
        .query_async(conn)
        .await
        .map_err(err("EXISTS schema", "target"))?;
    if schema == 1 {
        return Err(CopyError::TargetTaken {
            prefix: plan.to_prefix.clone(),
            key: keys.schema(),
        });
    }
    let found = namespace_keys(conn, keys, "target", true).await?;
    match found.into_iter().next() {
        Some(key) if !plan.resume => Err(CopyError::TargetPartial {
            prefix: plan.to_prefix.clone(),
            key,
            schema: keys.schema(),
        }),
        _ => Ok(()),
    }
}

/// The keys named with the namespace's tag (SCAN: each name once, in order); only the
/// first one found with `first`.
async fn namespace_keys(
    conn: &mut RedisConn,
    keys: &Keys,
    side: &'static str,
    first: bool,
) -> Result<BTreeSet<String>, CopyError> {
    let pattern = scan_pattern(&format!("{}:", keys.tag()));
    let (mut cursor, mut all) = (0u64, BTreeSet::new());
    loop {
        let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(CHUNK)
            .query_async(conn)
            .await
            .map_err(err("SCAN", side))?;
        all.extend(found);
        if next == 0 || (first && !all.is_empty()) {
            return Ok(all);
        }
        cursor = next;
    }
}

async fn lock(conn: &mut RedisConn, keys: &Keys) -> Result<(), CopyError> {
    match lock_out(conn, &keys.leader(), &keys.instances(), COPYING, None)
        .await
        .map_err(err("lock the namespace", "source"))?
    {
        // Not asked for: no swap.
        LockOut::Locked | LockOut::Changed => Ok(()),
        LockOut::Leased { ms } => Err(CopyError::Serving {
            key: keys.leader(),
            ms,
        }),
        LockOut::Live { instances } => Err(CopyError::Live {
            key: keys.instances(),
            live: instances,
        }),
    }
}

/// Lifts the copy's lock (only its own value).
async fn unlock(conn: &mut RedisConn, keys: &Keys) -> Result<(), CopyError> {
    lift(conn, &keys.leader(), COPYING)
        .await
        .map_err(err("lift the lock", "source"))
}

/// Every key of the namespace, once each, but those of running processes.
async fn source_keys(conn: &mut RedisConn, keys: &Keys) -> Result<BTreeSet<String>, CopyError> {
    let skip = [
        keys.leader(),
        keys.leader_api(),
        keys.instances(),
        keys.schema(),
    ];
    let refs = keys.refs("");
    let mut all = namespace_keys(conn, keys, "source", false).await?;
    all.retain(|k| !skip.contains(k) && !k.starts_with(&refs));
    Ok(all)
}

async fn copy_locked(
    from: &mut RedisConn,
    to: &mut RedisConn,
    src: &Keys,
    dst: &Keys,
    resume: bool,
) -> Result<CopyReport, CopyError> {
    let names = source_keys(from, src).await?;
    let mut entries = 0u64;
    let mut copied = Vec::with_capacity(names.len());
    for key in &names {
        let (kind, pttl): (String, i64) = redis::pipe()
            .cmd("TYPE")
            .arg(key)
            .cmd("PTTL")
            .arg(key)
            .query_async(from)
            .await
            .map_err(err("TYPE", "source"))?;
        if kind == "none" {
            continue; // gone since the scan: an expired history minute
        }
        let kind = KeyType::parse(key, &kind)?;
        let target = format!("{}{}", dst.tag(), &key[src.tag().len()..]);
        if resume {
            write(to, redis::cmd("DEL").arg(&target), "DEL").await?;
        }
        entries += copy_key(from, to, key, &target, kind).await?;
        if pttl > 0 {
            write(to, redis::cmd("PEXPIRE").arg(&target).arg(pttl), "PEXPIRE").await?;
        }
        copied.push((key.clone(), target, kind));
    }
    verify(from, to, &copied).await?;
    let tubes = tube_jobs(from, to, src, dst).await?;
    Ok(CopyReport {
        keys: copied.len(),
        entries,
        tubes,
        ms: 0,
    })
}

/// Copies one key in chunks; returns the entries written.
async fn copy_key(
    from: &mut RedisConn,
    to: &mut RedisConn,
    key: &str,
    target: &str,
    kind: KeyType,
) -> Result<u64, CopyError> {
    match kind {
        KeyType::String => copy_string(from, to, key, target).await,
        KeyType::List => copy_list(from, to, key, target).await,
        KeyType::Hash | KeyType::Zset | KeyType::Set => {
            copy_scanned(from, to, key, target, kind).await
        }
    }
}

/// A string: one GET, one SET.
async fn copy_string(
    from: &mut RedisConn,
    to: &mut RedisConn,
    key: &str,
    target: &str,
) -> Result<u64, CopyError> {
    let value: Vec<u8> = redis::cmd("GET")
        .arg(key)
        .query_async(from)
        .await
        .map_err(err("GET", "source"))?;
    write(to, redis::cmd("SET").arg(target).arg(value), "SET").await?;
    Ok(1)
}

/// A list, [`CHUNK`] entries at a time, in order.
async fn copy_list(
    from: &mut RedisConn,
    to: &mut RedisConn,
    key: &str,
    target: &str,
) -> Result<u64, CopyError> {
    let mut start = 0usize;
    loop {
        let items: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(key)
            .arg(start)
            .arg(start + CHUNK - 1)
            .query_async(from)
            .await
            .map_err(err("LRANGE", "source"))?;
        if items.is_empty() {
            return Ok(start as u64);
        }
        start += items.len();
        write(to, redis::cmd("RPUSH").arg(target).arg(items), "RPUSH").await?;
    }
}

/// A hash, sorted set or set, a scan's chunk at a time (HSCAN, ZSCAN, SSCAN).
async fn copy_scanned(
    from: &mut RedisConn,
    to: &mut RedisConn,
    key: &str,
    target: &str,
    kind: KeyType,
) -> Result<u64, CopyError> {
    let (scan, count) = match kind {
        KeyType::Hash => ("HSCAN", HASH_CHUNK),
        KeyType::Zset => ("ZSCAN", CHUNK),
        _ => ("SSCAN", CHUNK),
    };
    let (mut cursor, mut written) = (0u64, 0u64);
    loop {
        let (next, items): (u64, Vec<Vec<u8>>) = redis::cmd(scan)
            .arg(key)
            .arg(cursor)
            .arg("COUNT")
            .arg(count)
            .query_async(from)
            .await
            .map_err(err("SCAN a key", "source"))?;
        if !items.is_empty() {
            let (cmd, entries) = write_chunk(target, kind, items);
            write(to, &cmd, "write a chunk").await?;
            written += entries;
        }
        if next == 0 {
            return Ok(written);
        }
        cursor = next;
    }
}

/// The command writing one scanned chunk `items` of a `kind` key into `target`, and
/// how many entries it holds.
fn write_chunk(target: &str, kind: KeyType, items: Vec<Vec<u8>>) -> (redis::Cmd, u64) {
    let write = match kind {
        KeyType::Hash => "HSET",
        KeyType::Zset => "ZADD",
        _ => "SADD",
    };
    let mut cmd = redis::cmd(write);
    cmd.arg(target);
    let entries = match kind {
        KeyType::Zset => {
            // ZSCAN gives member, score; ZADD takes score, member (the score as Redis
            // printed it, so it is kept exactly).
            for pair in items.chunks(2) {
                if let [member, score] = pair {
                    cmd.arg(score).arg(member);
                }
            }
            items.len() as u64 / 2
        }
        KeyType::Hash => {
            let n = items.len() as u64 / 2;
            cmd.arg(items);
            n
        }
        _ => {
            let n = items.len() as u64;
            cmd.arg(items);
            n
        }
    };
    (cmd, entries)
}

/// Sizes of `keys` (entries of each), in one pipeline per chunk.
async fn sizes(
    conn: &mut RedisConn,
    keys: &[(&str, KeyType)],
    side: &'static str,
) -> Result<Vec<u64>, CopyError> {
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(CHUNK) {
        let mut pipe = redis::pipe();
        for (key, kind) in chunk {
            pipe.add_command(kind.size_cmd(key));
        }
        let got: Vec<u64> = pipe
            .query_async(conn)
            .await
            .map_err(err("count entries", side))?;
        out.extend(got);
    }
    Ok(out)
}

async fn verify(
    from: &mut RedisConn,
    to: &mut RedisConn,
    copied: &[(String, String, KeyType)],
) -> Result<(), CopyError> {
    let source: Vec<(&str, KeyType)> = copied.iter().map(|(k, _, t)| (k.as_str(), *t)).collect();
    let target: Vec<(&str, KeyType)> = copied.iter().map(|(_, k, t)| (k.as_str(), *t)).collect();
    let (a, b) = (
        sizes(from, &source, "source").await?,
        sizes(to, &target, "target").await?,
    );
    for ((key, _), (x, y)) in source.iter().zip(a.iter().zip(b.iter())) {
        // An expiring key (a history minute) may lapse meanwhile on either side.
        if x != y && *x != 0 && *y != 0 {
            return Err(CopyError::Verify {
                key: key.to_string(),
                from: *x,
                to: *y,
            });
        }
    }
    Ok(())
}

/// Each tube's jobs by state, read on both sides (the tube list gives the tubes).
async fn tube_jobs(
    from: &mut RedisConn,
    to: &mut RedisConn,
    src: &Keys,
    dst: &Keys,
) -> Result<Vec<TubeJobs>, CopyError> {
    const STATES: [TubeKey; 4] = [
        TubeKey::Ready,
        TubeKey::Delayed,
        TubeKey::Reserved,
        TubeKey::Buried,
    ];
    let tubes: Vec<String> = redis::cmd("LRANGE")
        .arg(src.ns(NsKey::Tubes))
        .arg(0)
        .arg(-1)
        .query_async(from)
        .await
        .map_err(err("LRANGE tubes", "source"))?;
    let mut out = Vec::with_capacity(tubes.len());
    for tube in tubes {
        let mut jobs = [0u64; 4];
        for (i, state) in STATES.iter().enumerate() {
            let (a, b) = (src.tube_key(&tube, *state), dst.tube_key(&tube, *state));
            let (x, y) = (
                count(from, &a, "source").await?,
                count(to, &b, "target").await?,
            );
            if x != y {
                return Err(CopyError::Verify {
                    key: a,
                    from: x,
                    to: y,
                });
            }
            jobs[i] = x;
        }
        out.push(TubeJobs { tube, jobs });
    }
    Ok(out)
}

/// Entries of a key of any type (0 when it does not exist).
async fn count(conn: &mut RedisConn, key: &str, side: &'static str) -> Result<u64, CopyError> {
    let kind: String = redis::cmd("TYPE")
        .arg(key)
        .query_async(conn)
        .await
        .map_err(err("TYPE", side))?;
    if kind == "none" {
        return Ok(0);
    }
    KeyType::parse(key, &kind)?
        .size_cmd(key)
        .query_async(conn)
        .await
        .map_err(err("count entries", side))
}
