//! The upgrade from schema 2 to schema 3 (the step of [`super::prepare`] on a namespace
//! of schema 2, or one whose upgrade was cut short: `{P}:schema` = [`UPGRADING`]).
//!
//! Schema 2 kept a job in three places: its metadata in its tube's hash
//! `{P}:t:<tube>:jobs`, its body in `{P}:t:<tube>:bodies` (id -> body), its tube in the
//! namespace's `{P}:index` (id -> tube); leader mode's lease was `{P}:leader`. Schema 3
//! keeps a job in one hash, `{P}:j:<id>` (`t`, `m`, `b`: `crate::redis::keys`), and
//! leads on `{P}:lease`. Only this file knows schema 2's names ([`Schema2`]).
//!
//! In order:
//! 1. Lock the previous version out, for good: refuse while one of its instances lives
//!    (a lease in `{P}:leader`, a heartbeat in `{P}:instances` not lapsed; leader mode
//!    waits for the lease instead, `super::Lapse`), else write [`MOVED`] into
//!    `{P}:leader` and [`UPGRADING`] into `{P}:schema` (a value no version before this
//!    one reads), in the same script, and only if `{P}:schema` still holds what the
//!    start read (another instance of this version may have finished meanwhile). Every
//!    version of schema 2 refuses to start on a namespace whose `{P}:leader` holds it,
//!    an old leader's batch in flight is fenced by `{P}:leader` (its token is gone) and
//!    never lands on converted keys, and an old standby sees a holder forever and never
//!    leads.
//! 2. A new `{P}:generation`: a shared-mode instance of the previous version that was
//!    frozen meanwhile finds its generation gone at its next call and changes nothing.
//! 3. Convert, per tube (the tube list, then a SCAN for strays), [`CHUNK`] jobs a call
//!    ([`CONVERT`]): each job's metadata and body become its hash in one script, so a
//!    job is in exactly one of the two forms at any time. A body left without its job
//!    (a large put cut short) becomes a hash with only a body, noted in `{P}:ahead` as
//!    written long ago, which the next leader's load or shared mode's tick removes.
//!    A tube's two hashes go once empty.
//! 4. `{P}:index` and schema 2's batch sequence go; `{P}:schema` = 3, last.
//!
//! Every step is idempotent, so an upgrade cut short (a crash, Redis away) resumes where
//! it stopped at the next start, and two instances upgrading at once do not conflict.

use std::time::Instant;

use super::{CHUNK, SchemaError, redis_err, scan_page};
use crate::redis::RedisConn;
use crate::redis::keys::{Keys, NsKey};
use crate::redis::lockout::{COPYING, LockOut, MOVED, Swap, lock_out};

/// `{P}:schema` while the upgrade to schema 3 is under way.
pub const UPGRADING: &str = "2>3";

/// Bytes of bodies one [`CONVERT`] call moves before it stops (it moves one job at
/// least): a call stays short whatever the bodies' size.
const CALL_BYTES: usize = 8 << 20;

/// Schema 2's names of what schema 3 renamed or dropped.
pub(super) struct Schema2 {
    tag: String,
}

impl Schema2 {
    pub(super) fn of(keys: &Keys) -> Schema2 {
        Schema2 {
            tag: keys.tag().to_string(),
        }
    }

    /// A namespace key (`ids`, `index`, ...).
    pub(super) fn ns(&self, name: &str) -> String {
        format!("{}:{name}", self.tag)
    }

    /// A tube's key (`ready`, `jobs`, `bodies`, ...).
    pub(super) fn tube(&self, tube: &str, name: &str) -> String {
        format!("{}:t:{tube}:{name}", self.tag)
    }

    /// Leader mode's lease.
    pub(super) fn lease(&self) -> String {
        self.ns("leader")
    }

    /// Leader mode's batch sequence.
    pub(super) fn commit(&self) -> String {
        self.ns("leader:commit")
    }
}

/// Converts one chunk of a tube's jobs. KEYS: the tube's `jobs` hash, its `bodies`
/// hash, the namespace's `ahead` set (each job's own key, `<tag>:j:<id>`, has the tag of
/// these, so it is in their slot). ARGV: the tag, the tube, the HSCAN cursor, the
/// chunk, the bytes bound. -> {next cursor, jobs moved, bodies moved without a job}.
/// Once `jobs` is empty, the bodies left (written ahead of jobs never made) move too,
/// and both hashes are deleted.
pub(crate) const CONVERT: &str = r#"#!lua
local jobs, bodies, ahead = KEYS[1], KEYS[2], KEYS[3]
local tag, tube, cursor = ARGV[1], ARGV[2], ARGV[3]
local chunk, bound = tonumber(ARGV[4]), tonumber(ARGV[5])
local moved, orphans, bytes = 0, 0, 0
if redis.call('HLEN', jobs) > 0 then
  local r = redis.call('HSCAN', jobs, cursor, 'COUNT', chunk)
  local items = r[2]
  for i = 1, #items, 2 do
    if bytes >= bound then return { '0', moved, orphans } end
    local id, meta = items[i], items[i + 1]
    local key = tag .. ':j:' .. id
    local body = redis.call('HGET', bodies, id)
    if body then
      redis.call('HSET', key, 't', tube, 'm', meta, 'b', body)
      bytes = bytes + #body
    else
      redis.call('HSET', key, 't', tube, 'm', meta)
    end
    redis.call('HDEL', jobs, id)
    redis.call('HDEL', bodies, id)
    moved = moved + 1
  end
  if r[1] ~= '0' or redis.call('HLEN', jobs) > 0 then return { r[1], moved, orphans } end
end
local r = redis.call('HSCAN', bodies, 0, 'COUNT', chunk)
local items = r[2]
for i = 1, #items, 2 do
  if bytes >= bound then return { '0', moved, orphans } end
  local id = items[i]
  redis.call('HSET', tag .. ':j:' .. id, 'b', items[i + 1])
  redis.call('ZADD', ahead, 0, id)
  redis.call('HDEL', bodies, id)
  bytes = bytes + #items[i + 1]
  orphans = orphans + 1
end
if redis.call('HLEN', bodies) > 0 then return { '0', moved, orphans } end
redis.call('DEL', jobs, bodies)
return { 'done', moved, orphans }
"#;

/// What the upgrade did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Converted {
    pub tubes: usize,
    pub jobs: usize,
    /// Bodies without a job, kept as hashes with a body only for the next load or tick
    /// to remove.
    pub orphans: usize,
}

/// Lock the previous version out: refuse a namespace that `redstalk-namespace copy`
/// moved away or is reading (its lease key holds the copy's value: no upgrade's
/// tombstone unless one began, `from` being [`UPGRADING`]); then, unless one of the
/// previous version's instances lives, [`MOVED`] into its lease key and `{P}:schema`
/// from `from` to `to`, in one script (so that no crash leaves one without the other).
/// -> `false`: `{P}:schema` no longer held `from` (another instance of this version went
/// ahead meanwhile): nothing written, to be read again.
pub(super) async fn lock_out_schema_2(
    conn: &mut RedisConn,
    keys: &Keys,
    from: Option<&str>,
    to: &str,
) -> Result<bool, SchemaError> {
    let v2 = Schema2::of(keys);
    let schema = keys.schema();
    // Read together: a lock-out value found beside the layout this start read is a
    // copy's; beside another layout, another start of this version marked it meanwhile.
    let (lease, now): (Option<String>, Option<String>) = redis::pipe()
        .atomic()
        .get(v2.lease())
        .get(&schema)
        .query_async(conn)
        .await
        .map_err(redis_err("GET the lease of schema 2"))?;
    if now.as_deref() != from {
        return Ok(false);
    }
    if from != Some(UPGRADING) {
        match lease.as_deref() {
            Some(MOVED) => return Err(SchemaError::Moved { key: v2.lease() }),
            Some(COPYING) => return Err(SchemaError::Copying { key: v2.lease() }),
            _ => {}
        }
    }
    let swap = Swap {
        key: &schema,
        from,
        to,
    };
    let found = lock_out(conn, &v2.lease(), &keys.instances(), MOVED, Some(swap))
        .await
        .map_err(redis_err("check for instances of the previous version"))?;
    match found {
        LockOut::Leased { ms } => Err(SchemaError::OldLeaderLive {
            key: v2.lease(),
            ms,
        }),
        LockOut::Live { instances } => Err(SchemaError::OldInstancesLive {
            key: keys.instances(),
            live: instances,
        }),
        LockOut::Locked => Ok(true),
        LockOut::Changed => Ok(false),
    }
}

/// Steps 2 to 4 of the module's comment, once the previous version is locked out and
/// `{P}:schema` holds [`UPGRADING`] ([`lock_out_schema_2`]).
pub(super) async fn upgrade(conn: &mut RedisConn, keys: &Keys) -> Result<Converted, SchemaError> {
    let v2 = Schema2::of(keys);
    let generation = format!("{:032x}", rand::random::<u128>());
    redis::cmd("SET")
        .arg(keys.ns(NsKey::Generation))
        .arg(generation)
        .arg("XX")
        .query_async::<()>(conn)
        .await
        .map_err(redis_err("change the namespace's generation"))?;
    let started = Instant::now();
    let mut done = Converted::default();
    // The tube list, [`CHUNK`] names a read (the conversion does not change it).
    let mut listed = 0;
    loop {
        let chunk = tube_list(conn, &v2, listed).await?;
        for tube in &chunk {
            convert_tube(conn, keys, &v2, tube, &mut done).await?;
        }
        listed += chunk.len();
        if chunk.len() < CHUNK {
            break;
        }
    }
    for tube in stray_tubes(conn, &v2).await? {
        convert_tube(conn, keys, &v2, &tube, &mut done).await?;
    }
    redis::cmd("DEL")
        .arg(v2.ns("index"))
        .arg(v2.commit())
        .query_async::<()>(conn)
        .await
        .map_err(redis_err("DEL the index of schema 2"))?;
    tracing::info!(
        tubes = done.tubes,
        jobs = done.jobs,
        ms = started.elapsed().as_millis() as u64,
        "moved every job into a hash of its own"
    );
    Ok(done)
}

/// [`CHUNK`] tubes of the tube list from position `from`.
async fn tube_list(
    conn: &mut RedisConn,
    v2: &Schema2,
    from: usize,
) -> Result<Vec<String>, SchemaError> {
    redis::cmd("LRANGE")
        .arg(v2.ns("tubes"))
        .arg(from)
        .arg(from + CHUNK - 1)
        .query_async(conn)
        .await
        .map_err(redis_err("LRANGE tubes"))
}

/// Tubes with a `jobs` or `bodies` hash that the tube list does not name (what a
/// damaged namespace, or a tube dropped while a body was on its way, may leave).
async fn stray_tubes(conn: &mut RedisConn, v2: &Schema2) -> Result<Vec<String>, SchemaError> {
    let start = v2.ns("t:");
    let mut tubes = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, found) = scan_page(conn, cursor, &start, "SCAN for tubes of schema 2").await?;
        for name in found {
            let Some(rest) = name.strip_prefix(start.as_str()) else {
                continue;
            };
            // A tube's name holds no ':'; a name with one is another namespace's.
            let tube = rest
                .strip_suffix(":jobs")
                .or_else(|| rest.strip_suffix(":bodies"));
            if let Some(tube) = tube.filter(|t| !t.contains(':'))
                && !tubes.iter().any(|t| t == tube)
            {
                tubes.push(tube.to_string());
            }
        }
        if next == 0 {
            return Ok(tubes);
        }
        cursor = next;
    }
}

/// Move tube `tube`'s jobs into their hashes, [`CHUNK`] a call, until its two hashes
/// are gone.
async fn convert_tube(
    conn: &mut RedisConn,
    keys: &Keys,
    v2: &Schema2,
    tube: &str,
    done: &mut Converted,
) -> Result<(), SchemaError> {
    let script = redis::Script::new(CONVERT);
    let mut cursor = "0".to_string();
    loop {
        let (next, jobs, orphans): (String, usize, usize) = script
            .key(v2.tube(tube, "jobs"))
            .key(v2.tube(tube, "bodies"))
            .key(keys.ns(NsKey::Ahead))
            .arg(keys.tag())
            .arg(tube)
            .arg(&cursor)
            .arg(CHUNK)
            .arg(CALL_BYTES)
            .invoke_async(conn)
            .await
            .map_err(redis_err("convert a tube's jobs to schema 3"))?;
        done.jobs += jobs;
        done.orphans += orphans;
        if next == "done" {
            done.tubes += 1;
            return Ok(());
        }
        cursor = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_2_names_are_those_of_the_previous_version() {
        let v2 = Schema2::of(&Keys::new("p"));
        assert_eq!(v2.ns("index"), "{p}:index");
        assert_eq!(v2.tube("emails", "bodies"), "{p}:t:emails:bodies");
        assert_eq!(v2.lease(), "{p}:leader");
        assert_eq!(v2.commit(), "{p}:leader:commit");
    }
}
