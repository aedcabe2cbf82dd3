//! The upgrade from schema 1 to schema 2 (the first step of [`super::prepare`] on a
//! namespace of schema 1).
//!
//! Schema 2 gave every key the hash tag `{P}`, so a namespace lives in one slot of a
//! Redis Cluster. Schema 1 named the namespace's keys `P:ids` … `P:generation`, a tube's
//! keys `{P:t:T}:ready` … (one slot per tube), `P:refs:<instance>`, `P:instances`, and
//! leader mode's `P:leader`, `P:epoch`, `P:leader-api`, `P:leader:commit`; only this
//! file knows those names. Schema 2's names it renames to are [`Schema2`]'s (the
//! upgrade to schema 3 then goes on from them, `v2.rs`).
//!
//! In order: refuse while an instance of the previous version lives (a lease in
//! `P:leader`, a heartbeat in `P:instances` not yet lapsed: they would keep writing the
//! old names), else write a tombstone in `P:leader` (`super::super::lockout`), with no
//! expiry, in the same script (an old leader then sees a holder and never leads, an old
//! shared-mode instance refuses to start), and rename: each tube's keys (tubes from the
//! tube list, 1,000 a call), then stray tube keys and the references (SCAN), the
//! namespace's keys, the instances, the lease's epoch, API address and batch sequence.
//! Every rename is "RENAME if it exists", so an upgrade cut short (a crash, Redis away)
//! resumes where it stopped at the next start: the tombstone says one was under way.
//!
//! Schema-1 keys exist only on a standalone Redis or behind Sentinel (schema 1 could not
//! run on a cluster), so these scripts may name keys of several slots.

use super::v2::Schema2;
use super::{CHUNK, SchemaError, redis_err, scan_page};
use crate::redis::RedisConn;
use crate::redis::keys::Keys;
use crate::redis::lockout::{LockOut, TOMBSTONE, lock_out};

/// A tube's keys in schemas 1 and 2 (the names after the tube's).
const TUBE_KEYS: [&str; 8] = [
    "ready", "delayed", "reserved", "buried", "jobs", "bodies", "meta", "keys",
];

/// The namespace's keys in schemas 1 and 2 (the names after the prefix).
const NS_KEYS: [&str; 9] = [
    "ids",
    "seq",
    "stats",
    "index",
    "due",
    "tubes",
    "tubepos",
    "generation",
    "keywin",
];

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

/// The schema-1 names of a namespace.
pub(super) struct Legacy {
    pub(super) prefix: String,
}

impl Legacy {
    fn ns(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }

    fn tube(&self, tube: &str, name: &str) -> String {
        format!("{{{}:t:{tube}}}:{name}", self.prefix)
    }

    pub(super) fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }
}

/// Whether the namespace `prefix` has keys of schema 1 (or a tombstone saying their
/// renaming was under way).
pub(super) async fn found(conn: &mut RedisConn, old: &Legacy) -> Result<bool, SchemaError> {
    let (legacy, lease): (i64, Option<String>) = redis::pipe()
        .cmd("EXISTS")
        .arg(old.ns("generation"))
        .arg(old.ns("ids"))
        .arg(old.ns("tubes"))
        .cmd("GET")
        .arg(old.key("leader"))
        .query_async(conn)
        .await
        .map_err(redis_err("look for keys of schema 1"))?;
    // The tombstone without schema-1 keys: an upgrade cut short after its last rename.
    Ok(legacy > 0 || lease.as_deref() == Some(TOMBSTONE))
}

/// Rename the namespace's schema-1 keys to schema 2's. -> how many tubes and keys.
pub(super) async fn upgrade(
    conn: &mut RedisConn,
    keys: &Keys,
    old: &Legacy,
) -> Result<(usize, usize), SchemaError> {
    guard(conn, old).await?;
    let v2 = Schema2::of(keys);
    let (tubes, mut renamed) = rename_tubes(conn, &v2, old).await?;
    renamed += rename_scanned(conn, keys, &v2, old).await?;
    let mut pairs: Vec<(String, String)> = NS_KEYS.iter().map(|&k| (old.ns(k), v2.ns(k))).collect();
    pairs.extend([
        (old.key("instances"), keys.instances()),
        (old.key("epoch"), keys.epoch()),
        (old.key("leader-api"), keys.leader_api()),
        (old.key("leader:commit"), v2.commit()),
    ]);
    renamed += rename(conn, &pairs).await?;
    Ok((tubes, renamed))
}

/// Refuse while an instance of schema 1 lives; else lock them out with the tombstone.
async fn guard(conn: &mut RedisConn, old: &Legacy) -> Result<(), SchemaError> {
    let found = lock_out(
        conn,
        &old.key("leader"),
        &old.key("instances"),
        TOMBSTONE,
        None,
    )
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
        // Not asked for: no swap.
        LockOut::Locked | LockOut::Changed => Ok(()),
    }
}

/// Rename the keys of every tube of the tube list (schema 1's, or schema 2's when an
/// upgrade cut short had renamed it already), a chunk of tubes per call.
async fn rename_tubes(
    conn: &mut RedisConn,
    v2: &Schema2,
    old: &Legacy,
) -> Result<(usize, usize), SchemaError> {
    let exists: i64 = redis::cmd("EXISTS")
        .arg(old.ns("tubes"))
        .query_async(conn)
        .await
        .map_err(redis_err("EXISTS tubes"))?;
    let list = if exists == 1 {
        old.ns("tubes")
    } else {
        v2.ns("tubes")
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
                TUBE_KEYS
                    .iter()
                    .map(move |&k| (old.tube(t, k), v2.tube(t, k)))
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
    v2: &Schema2,
    old: &Legacy,
) -> Result<usize, SchemaError> {
    let tube_start = format!("{{{}:t:", old.prefix);
    let refs_start = old.key("refs:");
    let mut renamed = 0;
    for start in [&tube_start, &refs_start] {
        let mut cursor: u64 = 0;
        loop {
            let (next, found) = scan_page(conn, cursor, start, "SCAN for keys of schema 1").await?;
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
                    let key = TUBE_KEYS.iter().find(|k| **k == key)?;
                    Some((name.clone(), v2.tube(tube, key)))
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
        assert_eq!(old.ns("ids"), "p:ids");
        assert_eq!(old.tube("jobs", "ready"), "{p:t:jobs}:ready");
        assert_eq!(old.key("leader:commit"), "p:leader:commit");
    }
}
