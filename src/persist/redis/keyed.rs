//! A cut's key changes as commands of its batch, and the windows read back at a load
//! (docs/REDIS.md, *Keys*): a tube's `keys` hash maps each key to the id it names (a
//! live job's, or a deleted job's inside its window), its `keywin` sorted set holds
//! each open window's end (µs of the Redis clock), as shared mode's scripts keep them;
//! a live job's key is also in its metadata (what the load takes it from).
//!
//! A tube may be destroyed while one of its keys is inside its window: the namespace's
//! `keytubes` set names every tube whose keys were written, so a load finds windows of
//! tubes no longer in the tube list.

use foldhash::HashMap;

use super::call::{Args, Batch};
use crate::protocol::TubeName;
use crate::redis::keys::{Keys, TubeKey};
use crate::redis::{RedisConn, US};
use crate::store::StoreError;
use crate::store::keys::{Key, KeyRecord, KeySlot};

/// One tube's key changes, by command.
#[derive(Debug, Default)]
struct TubeKeyOps {
    hset: Args,
    hdel: Args,
    zadd: Args,
    zrem: Args,
}

/// The commands writing `records`, appended to `b`.
pub(super) fn key_commands(b: &mut Batch, keys: &Keys, records: &[KeyRecord]) {
    if records.is_empty() {
        return;
    }
    let mut by_tube: HashMap<&TubeName, TubeKeyOps> = HashMap::default();
    for r in records {
        let ops = by_tube.entry(&r.tube).or_default();
        let key = r.key.as_str().as_bytes();
        match r.slot {
            KeySlot::Live(id) => {
                ops.hset.push(key);
                ops.hset.num(id);
                ops.zrem.push(key);
            }
            KeySlot::Window { id, until } => {
                ops.hset.push(key);
                ops.hset.num(id);
                ops.zadd.num(until / US);
                ops.zadd.push(key);
            }
            KeySlot::Free => {
                ops.hdel.push(key);
                ops.zrem.push(key);
            }
        }
    }
    let mut listed = Args::default();
    for (tube, ops) in &by_tube {
        let k = keys.tube(tube.as_str());
        b.cmd("HDEL", k.get(TubeKey::Keys), &ops.hdel, 1);
        b.cmd("ZREM", k.get(TubeKey::Keywin), &ops.zrem, 1);
        b.cmd("HSET", k.get(TubeKey::Keys), &ops.hset, 2);
        b.cmd("ZADD", k.get(TubeKey::Keywin), &ops.zadd, 2);
        listed.push(tube.as_str().as_bytes());
    }
    b.cmd("SADD", &keys.keytubes(), &listed, 1);
}

fn err(op: &'static str) -> impl Fn(redis::RedisError) -> StoreError {
    move |e| StoreError::redis(op, e)
}

/// The open windows of every tube that has had keys (`keytubes`): each window's end
/// from `keywin`, its id from `keys`. Past windows too: the restore drops them (and
/// frees them in Redis with its first batch).
pub async fn read_windows(c: &mut RedisConn, keys: &Keys) -> Result<Vec<KeyRecord>, StoreError> {
    let tubes: Vec<Vec<u8>> = redis::cmd("SMEMBERS")
        .arg(keys.keytubes())
        .query_async(c)
        .await
        .map_err(err("SMEMBERS keytubes"))?;
    let mut out = Vec::new();
    for tube in tubes.iter().filter_map(|t| TubeName::new(t)) {
        let k = keys.tube(tube.as_str());
        let ends: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
            .arg(k.get(TubeKey::Keywin))
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query_async(c)
            .await
            .map_err(err("ZRANGE keywin"))?;
        if ends.is_empty() {
            continue;
        }
        let names: Vec<&[u8]> = ends.iter().map(|(key, _)| &key[..]).collect();
        let ids: Vec<Option<u64>> = redis::cmd("HMGET")
            .arg(k.get(TubeKey::Keys))
            .arg(&names)
            .query_async(c)
            .await
            .map_err(err("HMGET keys"))?;
        for ((key, end), id) in ends.iter().zip(ids) {
            let (Some(key), Some(id)) = (Key::new(key), id) else {
                continue;
            };
            out.push(KeyRecord {
                tube: tube.clone(),
                key,
                slot: KeySlot::Window {
                    id,
                    until: (*end as u64) * US,
                },
            });
        }
    }
    Ok(out)
}
