//! The layout's version, and the upgrades from the layouts before it, run at start by
//! both modes before anything else touches the namespace ([`prepare`]).
//!
//! Schema 3 (`crate::redis::keys`, docs/REDIS.md): every key starts with the hash tag
//! `{P}` (so a namespace lives in one slot of a Redis Cluster), and a job is one hash,
//! `{P}:j:<id>`. Schema 2 kept a job's metadata, body and tube in three hashes, and
//! led on `{P}:leader` (`v2.rs` converts it); schema 1 named keys without the tag
//! (`v1.rs` renames them to schema 2's, and the upgrade goes on from there).
//!
//! `{P}:schema` = 3 → nothing to do; none, and no key of schema 1 → a fresh namespace:
//! it is marked 3, and the previous version is locked out of it as an upgrade does (so
//! that no version before this one, some of which read a layout they do not know as
//! none, serves it); 2 or [`v2::UPGRADING`] → the upgrade to 3; anything else → refused
//! as a later layout. Invariant: `{P}:schema` is 3 only once no key of an earlier layout
//! holds a job.

use std::time::Instant;

use redis::RedisError;

use super::keys::{Keys, scan_pattern};
use super::lockout::{COPYING, MOVED};
use super::{CallError, RESPONSE_TIMEOUT, RedisConfig, RedisConn};

mod v1;
mod v2;

// Loaded into a redis-server by store/shared/scripts' tests, as every script is.
#[cfg(test)]
pub(crate) use v1::RENAME;
#[cfg(test)]
pub(crate) use v2::CONVERT;

/// The layout this version writes.
pub const VERSION: u32 = 3;

/// Tubes renamed, or jobs converted, per script call.
const CHUNK: usize = 1000;

/// Why the namespace cannot be prepared.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "a redstalk of the previous version leads this namespace (its lease {key} lapses \
         in {ms} ms): this version changes the namespace's key layout, so in shared mode \
         stop every instance of the previous version first (docs/OPERATIONS.md), then \
         start this one; in leader mode this one waits for that lease to lapse"
    )]
    OldLeaderLive { key: String, ms: i64 },
    #[error(
        "{live} redstalk instance(s) of the previous version serve this namespace in shared \
         mode (heartbeats in {key}): this version changes the namespace's key layout, so \
         stop them first (no rolling upgrade in shared mode: docs/OPERATIONS.md), then \
         start this one"
    )]
    OldInstancesLive { key: String, live: i64 },
    #[error(
        "this namespace was moved away by redstalk-namespace copy (its lease key {key} \
         holds the tombstone): point the instances at the Redis and prefix it was copied to"
    )]
    Moved { key: String },
    #[error(
        "redstalk-namespace copy is reading this namespace (its lease key {key} holds the \
         copy's lock): wait for the copy to end, then start the instances where it copied to"
    )]
    Copying { key: String },
    #[error(
        "this Redis is a node of a Redis Cluster (cluster_enabled:1): use \
         redis+cluster://HOST:PORT[,HOST:PORT...] (or rediss+cluster://), which finds the \
         primary of the namespace's slot"
    )]
    ClusterNode,
    #[error(
        "this namespace has key layout {found} ({key}), newer than this version's \
         ({VERSION}): a later redstalk wrote it, and this one would misread it. Run the \
         version that wrote it (a layout is never downgraded)"
    )]
    Newer { key: String, found: String },
    #[error("cannot connect to Redis to check the namespace's key layout")]
    Connect(#[source] CallError),
    #[error("{op}")]
    Redis {
        op: &'static str,
        #[source]
        source: RedisError,
    },
}

impl SchemaError {
    /// Whether Redis was reached and refuses this start for a reason the message
    /// explains (an instance of the previous version lives, the namespace was moved or
    /// is being copied, the URL's form does not fit the topology), as opposed to Redis
    /// being unreachable.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            SchemaError::OldLeaderLive { .. }
                | SchemaError::OldInstancesLive { .. }
                | SchemaError::Moved { .. }
                | SchemaError::Copying { .. }
                | SchemaError::ClusterNode
                | SchemaError::Newer { .. }
        )
    }
}

fn redis_err(op: &'static str) -> impl FnOnce(RedisError) -> SchemaError {
    move |source| SchemaError::Redis { op, source }
}

/// What [`prepare`] found the namespace's layout to be, and did to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaStatus {
    /// Already schema 3.
    Current,
    /// No key of any layout: marked schema 3.
    Fresh,
    /// Upgraded: from schema 1 (its keys renamed first: how many), or 2; how many tubes
    /// and jobs were converted.
    Upgraded {
        renamed: Option<usize>,
        converted: v2::Converted,
    },
}

/// What [`prepare`] does while a leader of the previous version holds its lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lapse {
    /// Refuse to start ([`SchemaError::OldLeaderLive`]): shared mode.
    Refuse,
    /// Wait for the lease to lapse, then upgrade: a leader-mode instance stands by as
    /// it would behind a leader of its own version (a rolling upgrade: start the new
    /// version's instances, then stop the old leader).
    Wait,
}

/// What a `{P}:schema` value says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    /// No value: a fresh namespace, or one of schema 1 (which had no such key).
    None,
    /// A layout this version reads or upgrades (never later than [`VERSION`]).
    Version(u32),
    /// The upgrade to schema 3 was cut short.
    Upgrading,
}

/// Bring the namespace of `config` to schema 3 (see the module's comment); connects
/// on its own.
pub async fn prepare(config: &RedisConfig, lapse: Lapse) -> Result<SchemaStatus, SchemaError> {
    let connector = config.connector().map_err(SchemaError::Connect)?;
    let mut conn = connector
        .managed("schema", RESPONSE_TIMEOUT)
        .await
        .map_err(|e| SchemaError::Connect(CallError::connect(e)))?;
    let cluster = connector.is_cluster();
    if !cluster {
        refuse_cluster_node(&mut conn).await?;
    }
    let mut waited = false;
    loop {
        match prepare_on(&mut conn, &config.prefix, cluster).await {
            Err(SchemaError::OldLeaderLive { key, ms }) if lapse == Lapse::Wait => {
                if !waited {
                    waited = true;
                    tracing::warn!(
                    %key,
                    ms,
                    "a leader of the previous version holds this namespace's lease: waiting \
                     for it to lapse (stop that leader), then this version upgrades the \
                     namespace's key layout and leads"
                    );
                }
                let ms = u64::try_from(ms).unwrap_or(0).clamp(100, 1_000);
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
            other => return other,
        }
    }
}

/// What `{P}:schema` says of the namespace of `keys`.
/// Refuses a namespace that `redstalk-namespace copy` moved away or is reading, and one
/// of a later layout: read as no layout at all, it would be marked fresh and misread
/// (a version before this check did exactly that).
/// -> what it says, and the value read (for the mark to swap from).
async fn layout_of(
    conn: &mut RedisConn,
    keys: &Keys,
) -> Result<(Found, Option<String>), SchemaError> {
    let (version, lease): (Option<String>, Option<String>) = redis::pipe()
        .cmd("GET")
        .arg(keys.schema())
        .cmd("GET")
        .arg(keys.leader())
        .query_async(conn)
        .await
        .map_err(redis_err("GET schema"))?;
    match lease.as_deref() {
        Some(MOVED) => return Err(SchemaError::Moved { key: keys.leader() }),
        Some(COPYING) => return Err(SchemaError::Copying { key: keys.leader() }),
        _ => {}
    }
    Ok((judge(keys, version.clone())?, version))
}

/// What a `{P}:schema` value read from Redis says. A later layout, or a value no
/// version writes, is refused: either way not ours to touch.
fn judge(keys: &Keys, found: Option<String>) -> Result<Found, SchemaError> {
    let Some(found) = found else {
        return Ok(Found::None);
    };
    if found == v2::UPGRADING {
        return Ok(Found::Upgrading);
    }
    match found.parse::<u32>() {
        Ok(v) if v <= VERSION => Ok(Found::Version(v)),
        _ => Err(SchemaError::Newer {
            key: keys.schema(),
            found,
        }),
    }
}

/// Whether `{P}:schema` still names a layout this version reads: not a later one (absent
/// is a namespace Redis lost and an instance began afresh; an older one was upgraded by
/// [`prepare`] at start, and no version writes one back; one under upgrade is being
/// upgraded by an instance of this version). Read again where an instance starts
/// serving a namespace long after it started (a standby taking the lead): a later
/// version may have upgraded the layout meanwhile.
pub async fn still_readable(conn: &mut RedisConn, keys: &Keys) -> Result<(), SchemaError> {
    let found: Option<String> = redis::cmd("GET")
        .arg(keys.schema())
        .query_async(conn)
        .await
        .map_err(redis_err("GET schema"))?;
    judge(keys, found).map(|_| ())
}

/// A namespace with no key of any layout: it starts at [`VERSION`], with the previous
/// version locked out of it. `None`: another instance marked it meanwhile.
async fn fresh(
    conn: &mut RedisConn,
    keys: &Keys,
    prefix: &str,
) -> Result<Option<SchemaStatus>, SchemaError> {
    if !v2::lock_out_schema_2(conn, keys, None, &VERSION.to_string()).await? {
        return Ok(None);
    }
    tracing::info!(prefix, schema = VERSION, "new namespace");
    Ok(Some(SchemaStatus::Fresh))
}

/// A `redis://` or Sentinel URL that reached a Redis Cluster node is refused: the
/// namespace's slot may live on another node, and wake-ups would not reach it.
async fn refuse_cluster_node(conn: &mut RedisConn) -> Result<(), SchemaError> {
    let info: redis::InfoDict = redis::cmd("INFO")
        .arg("cluster")
        .query_async(conn)
        .await
        .map_err(redis_err("INFO cluster"))?;
    match info.get::<i64>("cluster_enabled") {
        Some(1) => Err(SchemaError::ClusterNode),
        _ => Ok(()),
    }
}

/// [`prepare`] on a connection; on a Redis Cluster (`cluster`) no key of schema 1 is
/// looked for: schema 1 could not run there (its keys span slots, and so would the
/// look for them).
async fn prepare_on(
    conn: &mut RedisConn,
    prefix: &str,
    cluster: bool,
) -> Result<SchemaStatus, SchemaError> {
    loop {
        if let Some(status) = prepare_once(conn, prefix, cluster).await? {
            return Ok(status);
        }
        // Another instance of this version marked the namespace between the read and
        // the mark: read it again.
    }
}

/// [`prepare_on`] from one reading of the layout; `None`: it changed before the mark.
async fn prepare_once(
    conn: &mut RedisConn,
    prefix: &str,
    cluster: bool,
) -> Result<Option<SchemaStatus>, SchemaError> {
    let keys = Keys::new(prefix);
    let (found, read) = layout_of(conn, &keys).await?;
    let renamed = match found {
        Found::Version(VERSION) => return Ok(Some(SchemaStatus::Current)),
        Found::None => {
            let old = v1::Legacy {
                prefix: prefix.to_string(),
            };
            if cluster || !v1::found(conn, &old).await? {
                return fresh(conn, &keys, prefix).await;
            }
            tracing::warn!(
                prefix,
                "this namespace has the key layout of schema 1: renaming its keys, then \
                 upgrading it to schema {VERSION} (instances of earlier versions can no \
                 longer serve it)"
            );
            let (tubes, renamed) = v1::upgrade(conn, &keys, &old).await?;
            tracing::warn!(prefix, tubes, keys = renamed, tombstone = %old.key("leader"), "renamed the namespace's keys of schema 1");
            Some(renamed)
        }
        Found::Version(_) | Found::Upgrading => None,
    };
    if !v2::lock_out_schema_2(conn, &keys, read.as_deref(), v2::UPGRADING).await? {
        return Ok(None);
    }
    let started = Instant::now();
    tracing::warn!(
        prefix,
        "upgrading the namespace's key layout to schema {VERSION} (one hash per job; \
         instances of earlier versions can no longer serve it)"
    );
    let converted = v2::upgrade(conn, &keys).await?;
    set_version(conn, &keys).await?;
    // A warning, like the start of the upgrade: a one-time event an operator must see.
    tracing::warn!(
        prefix,
        tubes = converted.tubes,
        jobs = converted.jobs,
        bodies_without_job = converted.orphans,
        ms = started.elapsed().as_millis() as u64,
        "upgraded the namespace's key layout to schema {VERSION}"
    );
    Ok(Some(SchemaStatus::Upgraded { renamed, converted }))
}

/// One page of a SCAN for the keys starting with `start`: the next cursor (0 after the
/// last page) and the keys found.
async fn scan_page(
    conn: &mut RedisConn,
    cursor: u64,
    start: &str,
    op: &'static str,
) -> Result<(u64, Vec<String>), SchemaError> {
    redis::cmd("SCAN")
        .arg(cursor)
        .arg("MATCH")
        .arg(scan_pattern(start))
        .arg("COUNT")
        .arg(1000)
        .query_async(conn)
        .await
        .map_err(redis_err(op))
}

async fn set_version(conn: &mut RedisConn, keys: &Keys) -> Result<(), SchemaError> {
    redis::cmd("SET")
        .arg(keys.schema())
        .arg(VERSION)
        .query_async::<()>(conn)
        .await
        .map_err(redis_err("SET schema"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_value_is_read_only_when_no_later_than_this_version() {
        let keys = Keys::new("p");
        let judged = |v: Option<&str>| judge(&keys, v.map(str::to_string));
        assert_eq!(judged(None).ok(), Some(Found::None));
        assert_eq!(judged(Some("2")).ok(), Some(Found::Version(2)));
        assert_eq!(judged(Some("3")).ok(), Some(Found::Version(VERSION)));
        assert_eq!(judged(Some("2>3")).ok(), Some(Found::Upgrading));
        for later in [
            (VERSION + 1).to_string(),
            "x".to_string(),
            "3>4".to_string(),
        ] {
            assert!(
                matches!(judged(Some(&later)), Err(SchemaError::Newer { found, .. }) if found == later),
                "{later}"
            );
        }
    }
}
