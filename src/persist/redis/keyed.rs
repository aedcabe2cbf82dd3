//! A cut's key changes as commands of its batch, and the windows read back at a load
//! (docs/REDIS.md, *Keys*), as shared mode's scripts keep them: a tube's `keys` hash
//! maps each key to the id it names (a live job's, or a deleted job's inside its
//! window); the namespace's `keywin` sorted set holds each open window's end (µs of
//! the Redis clock), member `<tube>\n<key>`. A live job's key is also in its metadata,
//! which is what a load takes it from. A tube's `keys` outlive the tube (a window
//! keeps its key, not the tube), and the window set names the tubes of every window.

use foldhash::HashMap;

use super::call::{Args, Batch};
use crate::protocol::TubeName;
use crate::redis::keys::{Keys, NsKey, TubeKey};
use crate::redis::{RedisConn, US};
use crate::store::StoreError;
use crate::store::keys::{Key, KeyRecord, KeySlot};

/// One tube's changes of its `keys` hash.
#[derive(Debug, Default)]
struct TubeKeyOps {
    hset: Args,
    hdel: Args,
}

/// A window's member in the namespace's window set.
fn member(tube: &TubeName, key: &Key) -> Vec<u8> {
    format!("{tube}\n{key}").into_bytes()
}

/// The commands writing `records`, appended to `b`.
pub(super) fn key_commands(b: &mut Batch, keys: &Keys, records: &[KeyRecord]) {
    let mut by_tube: HashMap<&TubeName, TubeKeyOps> = HashMap::default();
    let (mut zadd, mut zrem) = (Args::default(), Args::default());
    for r in records {
        let ops = by_tube.entry(&r.tube).or_default();
        let key = r.key.as_str().as_bytes();
        match r.slot {
            KeySlot::Live(id) => {
                ops.hset.push(key);
                ops.hset.num(id);
                zrem.push(&member(&r.tube, &r.key));
            }
            KeySlot::Window { id, until } => {
                ops.hset.push(key);
                ops.hset.num(id);
                zadd.num(until / US);
                zadd.push(&member(&r.tube, &r.key));
            }
            KeySlot::Free => {
                ops.hdel.push(key);
                zrem.push(&member(&r.tube, &r.key));
            }
        }
    }
    for (tube, ops) in &by_tube {
        let k = keys.tube(tube.as_str());
        b.cmd("HDEL", k.get(TubeKey::Keys), &ops.hdel, 1);
        b.cmd("HSET", k.get(TubeKey::Keys), &ops.hset, 2);
    }
    b.cmd("ZREM", keys.ns(NsKey::Keywin), &zrem, 1);
    b.cmd("ZADD", keys.ns(NsKey::Keywin), &zadd, 2);
}

/// Windows whose ids one pipeline reads.
const READ_CHUNK: usize = 1000;

fn err(op: &'static str) -> impl Fn(redis::RedisError) -> StoreError {
    move |e| StoreError::redis(op, e)
}

/// Every window of the namespace: its end from `keywin`, its id from its tube's `keys`.
/// Past ones too: the restore drops them (and its first batch frees them in Redis).
pub async fn read_windows(c: &mut RedisConn, keys: &Keys) -> Result<Vec<KeyRecord>, StoreError> {
    let ends: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
        .arg(keys.ns(NsKey::Keywin))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(c)
        .await
        .map_err(err("ZRANGE keywin"))?;
    let windows: Vec<(TubeName, Key, f64)> = ends
        .into_iter()
        .filter_map(|(m, end)| split_member(&m).map(|(t, k)| (t, k, end)))
        .collect();
    let mut out = Vec::with_capacity(windows.len());
    // Their ids a pipeline of HGETs at a time: one round trip per thousand windows.
    for chunk in windows.chunks(READ_CHUNK) {
        let mut pipe = redis::pipe();
        for (tube, key, _) in chunk {
            pipe.hget(keys.tube(tube.as_str()).get(TubeKey::Keys), key.as_str());
        }
        let ids: Vec<Option<u64>> = pipe.query_async(c).await.map_err(err("HGET keys"))?;
        for ((tube, key, end), id) in chunk.iter().zip(ids) {
            if let Some(id) = id {
                out.push(KeyRecord {
                    tube: tube.clone(),
                    key: key.clone(),
                    slot: KeySlot::Window {
                        id,
                        until: (*end as u64) * US,
                    },
                });
            }
        }
    }
    Ok(out)
}

/// A window set member's tube and key.
fn split_member(m: &[u8]) -> Option<(TubeName, Key)> {
    let at = m.iter().position(|&b| b == b'\n')?;
    Some((TubeName::new(&m[..at])?, Key::new(&m[at + 1..])?))
}
