//! The layout's version, and the upgrade from the layout before it, run at start by both
//! modes before anything else touches the namespace ([`prepare`]).
//!
//! Schema 2 (`crate::redis::keys`): every key starts with the hash tag `{P}`, so a
//! namespace lives in one slot of a Redis Cluster. Schema 1, before it, named the
//! namespace's keys `P:ids` … `P:generation`, a tube's keys `{P:t:T}:ready` … (one slot
//! per tube), `P:refs:<instance>`, `P:instances`, and leader mode's `P:leader`,
//! `P:epoch`, `P:leader-api`, `P:leader:commit`; only this file knows those names.
//!
//! The upgrade, in order: `{P}:schema` = 2 → nothing to do. No schema-1 key → a fresh
//! namespace: `{P}:schema` is set. Otherwise it refuses while an instance of the previous
//! version lives (a lease in `P:leader`, a heartbeat in `P:instances` not yet lapsed:
//! they would keep writing the old names), else writes a tombstone in `P:leader`
//! (`super::lockout`), with no expiry, in the same script (an old leader then sees a
//! holder and never leads, an old shared-mode instance refuses to start), and renames:
//! each tube's keys (tubes from the tube list, 1,000 a call), then stray tube keys and
//! the references (SCAN), the namespace's keys, the instances, the lease's epoch, API
//! address and batch sequence, and `{P}:schema` last. Every rename is "RENAME if it exists", so an upgrade cut short
//! (a crash, Redis away) resumes where it stopped at the next start: the tombstone says
//! one was under way. Invariant: `{P}:schema` is set only once no schema-1 key is left.
//!
//! Schema-1 keys exist only on a standalone Redis or behind Sentinel (schema 1 could not
//! run on a cluster), so these scripts may name keys of several slots.

use std::time::Instant;

use redis::RedisError;

use super::keys::{Keys, NsKey, TubeKey, scan_pattern};
use super::lockout::{COPYING, LockOut, MOVED, TOMBSTONE, lock_out};
use super::{CallError, RESPONSE_TIMEOUT, RedisConfig, RedisConn};

/// The layout this version writes.
pub const VERSION: u32 = 2;

/// Tubes renamed per script call.
const CHUNK: usize = 1000;

/// KEYS: pairs (old name, new name). Renames each old key that exists.
/// -> how many were renamed.
pub(crate) const RENAME: &str = r#"#!lua
local n = 0
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('RENAME', KEYS[i], KEYS[i + 1])
    n = n + 1
  end
end
return n
"#;

/// Why the namespace cannot be prepared.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    #[error(
        "a redstalk of the previous version leads this namespace (its lease {key} lapses \
         in {ms} ms): this version renames the namespace's keys, so stop every instance \
         of the previous version first (no rolling upgrade across this version: \
         docs/OPERATIONS.md), then start this one"
    )]
    OldLeaderLive { key: String, ms: i64 },
    #[error(
        "{live} redstalk instance(s) of the previous version serve this namespace in shared \
         mode (heartbeats in {key}): this version renames the namespace's keys, so stop \
         them first (no rolling upgrade across this version: docs/OPERATIONS.md), then \
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
    /// Already schema 2.
    Current,
    /// No key of either layout: marked schema 2.
    Fresh,
    /// Schema 1, renamed: how many tubes and keys.
    Upgraded { tubes: usize, keys: usize },
}

/// The schema-1 names of a namespace.
struct Legacy {
    prefix: String,
}

impl Legacy {
    fn ns(&self, key: NsKey) -> String {
        format!("{}:{}", self.prefix, key.name())
    }

    fn tube(&self, tube: &str, key: TubeKey) -> String {
        format!("{{{}:t:{tube}}}:{}", self.prefix, key.name())
    }

    fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }
}

/// Bring the namespace of `config` to schema 2 (see the module's comment); connects
/// on its own.
pub async fn prepare(config: &RedisConfig) -> Result<SchemaStatus, SchemaError> {
    let connector = config.connector().map_err(SchemaError::Connect)?;
    let mut conn = connector
        .managed("schema", RESPONSE_TIMEOUT)
        .await
        .map_err(|e| SchemaError::Connect(CallError::connect(e)))?;
    if connector.is_cluster() {
        return prepare_cluster(&mut conn, &config.prefix).await;
    }
    refuse_cluster_node(&mut conn).await?;
    prepare_on(&mut conn, &config.prefix).await
}

/// [`prepare`] on a Redis Cluster: schema 1 could not run there (its keys span slots,
/// and so would the look for them), so a namespace is current or fresh.
async fn prepare_cluster(conn: &mut RedisConn, prefix: &str) -> Result<SchemaStatus, SchemaError> {
    let keys = Keys::new(prefix);
    if is_current(conn, &keys).await? {
        return Ok(SchemaStatus::Current);
    }
    fresh(conn, &keys, prefix).await
}

/// Whether the namespace of `keys` is at [`VERSION`] already.
/// Refuses a namespace that `redstalk-namespace copy` moved away or is reading, and one
/// of a later layout: read as no layout at all, it would be marked fresh and misread
/// (a version before this check did exactly that).
async fn is_current(conn: &mut RedisConn, keys: &Keys) -> Result<bool, SchemaError> {
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
    Ok(judge(keys, version)? == Some(VERSION))
}

/// What a `{P}:schema` value read from Redis says: `None` absent (no layout yet, or
/// schema 1, which had no key), `Some(v)` a layout this version reads or upgrades
/// (never later than [`VERSION`]). A later layout, or a value no version writes, is
/// refused: either way not ours to touch.
fn judge(keys: &Keys, found: Option<String>) -> Result<Option<u32>, SchemaError> {
    let Some(found) = found else {
        return Ok(None);
    };
    match found.parse::<u32>() {
        Ok(v) if v <= VERSION => Ok(Some(v)),
        _ => Err(SchemaError::Newer {
            key: keys.schema(),
            found,
        }),
    }
}

/// Whether `{P}:schema` still names a layout this version reads: not a later one (absent
/// is a namespace Redis lost and an instance began afresh; an older one was upgraded by
/// [`prepare`] at start, and no version writes one back). Read again where an instance
/// starts serving a namespace long after it started (a standby taking the lead): a later
/// version may have upgraded the layout meanwhile.
pub async fn still_readable(conn: &mut RedisConn, keys: &Keys) -> Result<(), SchemaError> {
    let found: Option<String> = redis::cmd("GET")
        .arg(keys.schema())
        .query_async(conn)
        .await
        .map_err(redis_err("GET schema"))?;
    judge(keys, found).map(|_| ())
}

/// A namespace with no key of either layout: it starts at [`VERSION`].
async fn fresh(
    conn: &mut RedisConn,
    keys: &Keys,
    prefix: &str,
) -> Result<SchemaStatus, SchemaError> {
    set_version(conn, keys).await?;
    tracing::info!(prefix, schema = VERSION, "new namespace");
    Ok(SchemaStatus::Fresh)
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

/// [`prepare`] on a connection.
pub async fn prepare_on(conn: &mut RedisConn, prefix: &str) -> Result<SchemaStatus, SchemaError> {
    let keys = Keys::new(prefix);
    let old = Legacy {
        prefix: prefix.to_string(),
    };
    if is_current(conn, &keys).await? {
        return Ok(SchemaStatus::Current);
    }
    let (legacy, lease): (i64, Option<String>) = redis::pipe()
        .cmd("EXISTS")
        .arg(old.ns(NsKey::Generation))
        .arg(old.ns(NsKey::Ids))
        .arg(old.ns(NsKey::Tubes))
        .cmd("GET")
        .arg(old.key("leader"))
        .query_async(conn)
        .await
        .map_err(redis_err("look for keys of schema 1"))?;
    // The tombstone without schema-1 keys: an upgrade cut short after its last rename.
    if legacy == 0 && lease.as_deref() != Some(TOMBSTONE) {
        return fresh(conn, &keys, prefix).await;
    }
    guard(conn, &old).await?;
    let started = Instant::now();
    tracing::warn!(
        prefix,
        "this namespace has the key layout of a previous version (schema 1): renaming \
         its keys to schema {VERSION} (instances of the previous version can no longer \
         serve it)"
    );
    let (tubes, mut renamed) = rename_tubes(conn, &keys, &old).await?;
    renamed += rename_scanned(conn, &keys, &old).await?;
    let mut pairs: Vec<(String, String)> = NsKey::ALL
        .iter()
        .map(|&k| (old.ns(k), keys.ns(k).to_string()))
        .collect();
    pairs.extend([
        (old.key("instances"), keys.instances()),
        (old.key("epoch"), keys.epoch()),
        (old.key("leader-api"), keys.leader_api()),
        (old.key("leader:commit"), keys.commit()),
    ]);
    renamed += rename(conn, &pairs).await?;
    set_version(conn, &keys).await?;
    // A warning, like the start of the upgrade: a one-time event an operator must see.
    tracing::warn!(
        prefix,
        tubes,
        keys = renamed,
        ms = started.elapsed().as_millis() as u64,
        tombstone = %old.key("leader"),
        "upgraded the namespace's keys to schema {VERSION}"
    );
    Ok(SchemaStatus::Upgraded {
        tubes,
        keys: renamed,
    })
}

async fn set_version(conn: &mut RedisConn, keys: &Keys) -> Result<(), SchemaError> {
    redis::cmd("SET")
        .arg(keys.schema())
        .arg(VERSION)
        .query_async::<()>(conn)
        .await
        .map_err(redis_err("SET schema"))
}

/// Refuse while an instance of schema 1 lives; else lock them out with the tombstone.
async fn guard(conn: &mut RedisConn, old: &Legacy) -> Result<(), SchemaError> {
    let found = lock_out(conn, &old.key("leader"), &old.key("instances"), TOMBSTONE)
        .await
        .map_err(redis_err("check for instances of the previous version"))?;
    match found {
        LockOut::Leased { ms } => Err(SchemaError::OldLeaderLive {
            key: old.key("leader"),
            ms,
        }),
        LockOut::Live { instances } => Err(SchemaError::OldInstancesLive {
            key: old.key("instances"),
            live: instances,
        }),
        LockOut::Locked => Ok(()),
    }
}

/// Rename the keys of every tube of the tube list (schema 1's, or schema 2's when an
/// upgrade cut short had renamed it already), a chunk of tubes per call.
async fn rename_tubes(
    conn: &mut RedisConn,
    keys: &Keys,
    old: &Legacy,
) -> Result<(usize, usize), SchemaError> {
    let exists: i64 = redis::cmd("EXISTS")
        .arg(old.ns(NsKey::Tubes))
        .query_async(conn)
        .await
        .map_err(redis_err("EXISTS tubes"))?;
    let list = if exists == 1 {
        old.ns(NsKey::Tubes)
    } else {
        keys.ns(NsKey::Tubes).to_string()
    };
    let (mut tubes, mut renamed) = (0, 0);
    loop {
        let chunk: Vec<String> = redis::cmd("LRANGE")
            .arg(&list)
            .arg(tubes)
            .arg(tubes + CHUNK - 1)
            .query_async(conn)
            .await
            .map_err(redis_err("LRANGE tubes"))?;
        let pairs: Vec<(String, String)> = chunk
            .iter()
            .flat_map(|t| {
                TubeKey::ALL
                    .iter()
                    .map(move |&k| (old.tube(t, k), keys.tube_key(t, k)))
            })
            .collect();
        renamed += rename(conn, &pairs).await?;
        tubes += chunk.len();
        if chunk.len() < CHUNK {
            return Ok((tubes, renamed));
        }
    }
}

/// Rename what only a SCAN finds: tube keys of tubes missing from the list, and every
/// instance's references.
async fn rename_scanned(
    conn: &mut RedisConn,
    keys: &Keys,
    old: &Legacy,
) -> Result<usize, SchemaError> {
    let tube_start = format!("{{{}:t:", old.prefix);
    let refs_start = old.key("refs:");
    let mut renamed = 0;
    for start in [&tube_start, &refs_start] {
        let mut cursor: u64 = 0;
        loop {
            let (next, found): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(scan_pattern(start))
                .arg("COUNT")
                .arg(1000)
                .query_async(conn)
                .await
                .map_err(redis_err("SCAN for keys of schema 1"))?;
            let pairs: Vec<(String, String)> = found
                .iter()
                .filter_map(|name| {
                    // Neither a tube's name nor an instance's id holds ':': a name
                    // with one is another namespace's (prefix "p:t:x", say).
                    let rest = name.strip_prefix(start.as_str())?;
                    if start == &refs_start {
                        if rest.contains(':') {
                            return None;
                        }
                        return Some((name.clone(), keys.refs(rest)));
                    }
                    let (tube, key) = rest.rsplit_once("}:")?;
                    if tube.contains(':') {
                        return None;
                    }
                    let key = TubeKey::ALL.iter().find(|k| k.name() == key)?;
                    Some((name.clone(), keys.tube_key(tube, *key)))
                })
                .collect();
            renamed += rename(conn, &pairs).await?;
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(renamed)
}

async fn rename(conn: &mut RedisConn, pairs: &[(String, String)]) -> Result<usize, SchemaError> {
    if pairs.is_empty() {
        return Ok(0);
    }
    let script = redis::Script::new(RENAME);
    let mut call = script.prepare_invoke();
    for (from, to) in pairs {
        call.key(from).key(to);
    }
    let n: usize = call
        .invoke_async(conn)
        .await
        .map_err(redis_err("rename keys of schema 1"))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_1_names_are_those_of_the_previous_version() {
        let old = Legacy {
            prefix: "p".to_string(),
        };
        assert_eq!(old.ns(NsKey::Ids), "p:ids");
        assert_eq!(old.tube("jobs", TubeKey::Ready), "{p:t:jobs}:ready");
        assert_eq!(old.key("leader:commit"), "p:leader:commit");
    }

    #[test]
    fn a_layout_value_is_read_only_when_no_later_than_this_version() {
        let keys = Keys::new("p");
        let judged = |v: Option<&str>| judge(&keys, v.map(str::to_string));
        assert_eq!(judged(None).ok(), Some(None));
        assert_eq!(judged(Some("2")).ok(), Some(Some(VERSION)));
        for later in [
            (VERSION + 1).to_string(),
            "x".to_string(),
            "2>3".to_string(),
        ] {
            assert!(
                matches!(judged(Some(&later)), Err(SchemaError::Newer { found, .. }) if found == later),
                "{later}"
            );
        }
    }
}
