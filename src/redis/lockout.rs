//! What a namespace's lease key may hold, and locking every instance out of it.
//!
//! The lease key (`{P}:lease`; schema 2's `{P}:leader`, schema 1's `P:leader`) holds
//! either a leader's lease, `<epoch>|<instance>|<address>` with the lease's expiry
//! (`cluster/lease.rs`), or one of the lock-out values below, with no expiry: each parses as a lease of epoch 0, so a
//! leader of any version sees a holder and never leads, and every instance of this
//! version refuses to start on it (`schema/` says why):
//! - [`TOMBSTONE`], in a schema-1 lease key once the upgrade began (`schema/v1.rs`);
//! - [`COPYING`], while `redstalk-namespace copy` reads the namespace (`copy.rs`);
//! - [`MOVED`], once the copy moved the namespace away, and in a schema-2 lease key
//!   for good once the upgrade to schema 3 began (`schema/v2.rs`): every version of
//!   schema 2 refuses to start on it.
//!
//! Invariant: a lock-out value is written only by [`lock_out`]'s script, which refuses
//! while a lease is held or an instance's heartbeat lives; only [`lift`] removes one,
//! and only the value its caller wrote.

use redis::RedisError;

use super::RedisConn;

/// What the tombstone of an upgraded namespace's schema-1 lease key holds: an old
/// leader parses it as a lease of epoch 0 held by "schema2".
pub const TOMBSTONE: &str = "0|schema2|upgrade-redstalk";

/// The lease key's value while a copy reads the source.
pub const COPYING: &str = "0|copy|redstalk-namespace";

/// The lease key's value once the namespace was moved away (no instance serves it).
pub const MOVED: &str = "0|moved|redstalk-namespace";

/// Checks that no instance lives, and writes the lock-out value ([`lock_out`]).
/// `KEYS[1]` lease, `KEYS[2]` instances; `ARGV[1]` the value. With a [`Swap`]:
/// `KEYS[3]` its key, `ARGV[2]` the value it must hold ('' absent), `ARGV[3]` the value
/// it gets with the lock-out.
/// -> {0, ms} a lease held (expiring in ms, -1 never), {1, n} n live heartbeats,
///    {2, 0} the value is in place, {3, 0} the swap's key held another value (nothing
///    written).
pub(crate) const LOCK_OUT: &str = r#"#!lua
if KEYS[3] and (redis.call('GET', KEYS[3]) or '') ~= ARGV[2] then
  return { 3, 0 }
end
local lease = redis.call('GET', KEYS[1])
if lease and lease ~= ARGV[1] then
  return { 0, redis.call('PTTL', KEYS[1]) }
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local live = redis.call('ZCOUNT', KEYS[2], now_us, '+inf')
if live > 0 then return { 1, live } end
-- The swap first: a write Redis refuses stops the script before the lock-out value,
-- so neither is written (Redis does not undo a script's earlier writes).
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[3]) end
redis.call('SET', KEYS[1], ARGV[1])
return { 2, 0 }
"#;

/// `KEYS[1]` lease; `ARGV[1]` the value -> 0. Deletes the key only while it holds the
/// value.
pub(crate) const LIFT: &str = r#"#!lua
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"#;

/// What [`lock_out`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockOut {
    /// The lease key holds another value, expiring in `ms` (-1: never).
    Leased { ms: i64 },
    /// This many instances' heartbeats have not lapsed.
    Live { instances: i64 },
    /// The lease key now holds the value (it may have held it already), with no expiry
    /// (and the swap's key its new value).
    Locked,
    /// The swap's key did not hold the value expected: nothing was written.
    Changed,
}

/// A string key changed in the lock-out's own step, so that a crash can never leave
/// one without the other: `key` from `from` (`None`: absent) to `to`.
#[derive(Clone, Copy, Debug)]
pub struct Swap<'a> {
    pub key: &'a str,
    pub from: Option<&'a str>,
    pub to: &'a str,
}

/// Locks every instance out of a namespace: unless a lease is held or a heartbeat lives,
/// writes `value` into the lease key `lease` with no expiry (a leader sees a holder and
/// never leads; a shared-mode instance refuses to start), and makes `swap` when given,
/// in one script.
pub async fn lock_out(
    conn: &mut RedisConn,
    lease: &str,
    instances: &str,
    value: &str,
    swap: Option<Swap<'_>>,
) -> Result<LockOut, RedisError> {
    let script = redis::Script::new(LOCK_OUT);
    let mut call = script.key(lease);
    call.key(instances).arg(value);
    if let Some(swap) = swap {
        call.key(swap.key).arg(swap.from.unwrap_or("")).arg(swap.to);
    }
    let (what, n): (i64, i64) = call.invoke_async(conn).await?;
    Ok(match what {
        0 => LockOut::Leased { ms: n },
        1 => LockOut::Live { instances: n },
        3 => LockOut::Changed,
        _ => LockOut::Locked,
    })
}

/// Lifts the lock-out `value` from the lease key `lease` (only that value: a lease or
/// another lock-out written since stays).
pub async fn lift(conn: &mut RedisConn, lease: &str, value: &str) -> Result<(), RedisError> {
    redis::Script::new(LIFT)
        .key(lease)
        .arg(value)
        .invoke_async::<i64>(conn)
        .await
        .map(|_| ())
}
