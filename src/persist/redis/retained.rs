//! Retained records (store/retention.rs) in leader mode's batches and loads, in the
//! Redis form both modes share (`crate::redis::retained`; docs/REDIS.md, *Retention*):
//! a batch writes each record its cut kept (the hash whole, its place in the delete
//! order, its key's entry) and removes each one evicted, in the same fenced call as the
//! jobs, so Redis holds a deleted job's record once it no longer holds the job.
//!
//! The key index (`"<tube>\n<key>"` → the newest record's id) must lose an evicted
//! record's entry only while the entry names it, and a cut carries only an evicted
//! record's id: [`RetainedIndex`] remembers each keyed record's tube and key and which
//! record each entry names, as the memory store's set does (seeded at takeover from the
//! records loaded).
//!
//! Invariants: a cut's retained changes are in the call that writes its jobs (one
//! script, atomic); a record is written whole (its hash deleted first, so no field of
//! an earlier write of it is left); the summed size is set from the store's own total
//! in every batch that changes the set; the load reads a bounded number of records per
//! round trip (the set itself is bounded by `--retain-jobs`).

use foldhash::HashMap;

use super::call::{Args, Batch};
use crate::protocol::TubeName;
use crate::redis::RedisConn;
use crate::redis::keys::Keys;
use crate::redis::retained::{key_field, member_id, record_fields, record_of};
use crate::store::keys::Key;
use crate::store::memory::Cut;
use crate::store::retention::Retained;
use crate::store::{JobId, StoreError};

/// Records read per round trip at a load (their ids, then their hashes pipelined).
const LOAD_CHUNK: isize = 1_000;

/// Which record each key's index entry names, as Redis holds it (see the module header).
#[derive(Debug, Default)]
pub struct RetainedIndex {
    /// Each keyed record Redis holds (or may): its tube and key.
    keyed: HashMap<JobId, (TubeName, Key)>,
    /// Each key's entry: the record it names.
    names: HashMap<(TubeName, Key), JobId>,
}

impl RetainedIndex {
    /// The index of records loaded at a takeover, oldest first (the newest of each key
    /// names it, as the writer left it).
    pub fn loaded(records: impl IntoIterator<Item = (JobId, TubeName, Key)>) -> RetainedIndex {
        let mut index = RetainedIndex::default();
        for (id, tube, key) in records {
            index.kept(id, tube, key);
        }
        index
    }

    fn kept(&mut self, id: JobId, tube: TubeName, key: Key) {
        self.names.insert((tube.clone(), key.clone()), id);
        self.keyed.insert(id, (tube, key));
    }

    /// Record `id` goes: the key entry to remove, when it names it.
    fn gone(&mut self, id: JobId) -> Option<(TubeName, Key)> {
        let at = self.keyed.remove(&id)?;
        if self.names.get(&at) != Some(&id) {
            return None;
        }
        self.names.remove(&at);
        Some(at)
    }
}

/// The commands writing the cut's retained changes, appended to `b`: removals first
/// (a key's entry removed and set again in one batch ends set), then the records kept,
/// then the summed size.
pub(super) fn retained_commands(b: &mut Batch, keys: &Keys, cut: &Cut, index: &mut RetainedIndex) {
    if cut.retained.is_empty() && cut.retained_gone.is_empty() {
        return;
    }
    let (mut order, mut entries, mut fields) = (Args::default(), Args::default(), Args::default());
    for &id in &cut.retained_gone {
        order.member(id);
        b.bare("DEL", &keys.retained_record(id));
        if let Some((tube, key)) = index.gone(id) {
            entries.push(&key_field(&tube, &key));
        }
    }
    b.cmd("ZREM", &keys.retained(), &order, 1);
    b.cmd("HDEL", &keys.retained_keys(), &entries, 1);
    order.clear();
    entries.clear();
    for r in &cut.retained {
        let rec = keys.retained_record(r.id);
        b.bare("DEL", &rec);
        fields.clear();
        for (name, value) in record_fields(r) {
            fields.push(name);
            fields.push(&value);
        }
        b.cmd("HSET", &rec, &fields, 2);
        order.num(r.deleted_ms);
        order.member(r.id);
        if let Some(key) = &r.key {
            entries.push(&key_field(&r.tube, key));
            entries.num(r.id);
            index.kept(r.id, r.tube.clone(), key.clone());
        }
    }
    b.cmd("ZADD", &keys.retained(), &order, 2);
    b.cmd("HSET", &keys.retained_keys(), &entries, 2);
    fields.clear();
    fields.num(cut.retained_bytes);
    b.cmd("SET", &keys.retained_bytes(), &fields, 1);
}

fn err(op: &'static str) -> impl Fn(redis::RedisError) -> StoreError {
    move |e| StoreError::redis(op, e)
}

/// Every retained record of the namespace, oldest first. A record that does not read
/// (or an id in the order without its hash) is reported and left out: the rest load.
pub(super) async fn read_retained(
    conn: &RedisConn,
    keys: &Keys,
) -> Result<Vec<Retained>, StoreError> {
    let mut c = conn.clone();
    let mut out = Vec::new();
    let mut start: isize = 0;
    loop {
        // The leader holds the lease: nothing changes the order while it is read.
        let members: Vec<Vec<u8>> = redis::cmd("ZRANGE")
            .arg(keys.retained())
            .arg(start)
            .arg(start + LOAD_CHUNK - 1)
            .query_async(&mut c)
            .await
            .map_err(err("ZRANGE retained"))?;
        let ids: Vec<JobId> = members
            .iter()
            .filter_map(|m| {
                let id = member_id(m);
                if id.is_none() {
                    tracing::warn!(
                        member = %String::from_utf8_lossy(m),
                        "a retained record's entry that is not an id was left out"
                    );
                }
                id
            })
            .collect();
        if !ids.is_empty() {
            let mut pipe = redis::pipe();
            for &id in &ids {
                pipe.cmd("HGETALL").arg(keys.retained_record(id));
            }
            let hashes: Vec<Vec<(Vec<u8>, Vec<u8>)>> = pipe
                .query_async(&mut c)
                .await
                .map_err(err("HGETALL retained"))?;
            for (id, fields) in ids.into_iter().zip(hashes) {
                if fields.is_empty() {
                    tracing::warn!(
                        id,
                        "retained record {id} is listed but has no hash; left out"
                    );
                    continue;
                }
                match record_of(id, fields) {
                    Ok(r) => out.push(r),
                    Err(e) => tracing::warn!(
                        error = &e as &dyn std::error::Error,
                        "a retained record that does not read was left out"
                    ),
                }
            }
        }
        if (members.len() as isize) < LOAD_CHUNK {
            return Ok(out);
        }
        start += LOAD_CHUNK;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::persist::Sink;
    use crate::persist::redis::{RedisSink, load};
    use crate::protocol::ext::{KeyMode, Millis, PutKey};
    use crate::redis::testing::PrivateRedis;
    use crate::redis::{Connector, TlsFiles};
    use crate::store::memory::{CutLimit, MemoryStore, StoreCounters};
    use crate::store::retention::RetentionLimits;
    use crate::store::{ConnId, KeyedPut, NANOS_PER_SEC, NewJob, Store};
    use crate::util::SwapList;

    const NOW: u64 = 1_700_000_000 * NANOS_PER_SEC;
    const TOKEN: &str = "1|test|127.0.0.1:1";

    fn limits(max_jobs: usize) -> RetentionLimits {
        RetentionLimits {
            keep_ms: 3_600_000,
            max_jobs,
            max_bytes: 64 << 20,
            bodies: true,
        }
    }

    fn job(body: &str) -> NewJob {
        NewJob {
            tube: TubeName::new(b"mail").unwrap(),
            pri: 5,
            delay_ms: 0,
            ttr_ms: 60_000,
            body: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    async fn write(store: &MemoryStore, sink: &mut RedisSink) {
        let cut = store.cut(CutLimit::default());
        let done = sink.start(&cut).await.unwrap().await;
        sink.finished(&done);
        done.unwrap();
    }

    /// A job put (keyed when `key`), reserved and deleted by conn 7: its id.
    async fn deleted(store: &MemoryStore, body: &str, key: Option<&str>) -> JobId {
        let id = match key {
            Some(k) => {
                let pk = PutKey {
                    key: Key::new(k.as_bytes()).unwrap(),
                    mode: KeyMode::Dedupe,
                    window: Millis::ZERO,
                };
                let Ok(KeyedPut::Inserted(id)) = store.put_keyed(job(body), &pk, NOW).await else {
                    panic!("no keyed job made");
                };
                id
            }
            None => store.put(job(body), NOW).await.unwrap(),
        };
        store
            .reserve_job(ConnId(7), id, NOW)
            .await
            .unwrap()
            .unwrap();
        assert!(store.delete(ConnId(7), id, NOW).await.unwrap());
        id
    }

    /// Records a leader wrote in its fenced batches to a private redis-server come back
    /// at the next leader's load, whole; the evicted ones are gone from Redis; the key
    /// entry names the newest record of its key and goes with it, not with an older
    /// one; a new leader's tighter limits evict in Redis too.
    #[tokio::test]
    async fn a_new_leader_finds_the_records_the_last_one_kept() {
        let Some(redis) = PrivateRedis::start_tcp("the leader-mode retention test") else {
            return;
        };
        let url = redis.url().unwrap();
        let connector = Connector::new(&url, &TlsFiles::default(), None, "ret").unwrap();
        let conn = connector
            .managed("test", Duration::from_secs(5))
            .await
            .unwrap();
        let keys = Keys::new("ret");
        let _: () = redis::cmd("SET")
            .arg(keys.leader())
            .arg(TOKEN)
            .query_async(&mut conn.clone())
            .await
            .unwrap();
        let sink = |token: &str, index: RetainedIndex| {
            RedisSink::new(
                connector.clone(),
                conn.clone(),
                keys.clone(),
                keys.leader(),
                token.into(),
                "test",
                SwapList::new(),
                StoreCounters::default(),
            )
            .with_retained(index)
        };
        let mut first = sink(TOKEN, RetainedIndex::default());
        let store = MemoryStore::journaled();
        store.set_retention(limits(3));
        let j1 = deleted(&store, "one", Some("k")).await;
        write(&store, &mut first).await;
        let j2 = deleted(&store, "two", None).await;
        let j3 = deleted(&store, "three", Some("k")).await;
        let j4 = deleted(&store, "four", None).await;
        write(&store, &mut first).await;

        let mut c = conn.clone();
        let count: u64 = redis::cmd("ZCARD")
            .arg(keys.retained())
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(count, 3);
        let gone: u64 = redis::cmd("EXISTS")
            .arg(keys.retained_record(j1))
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(gone, 0, "the evicted record's hash is still there");
        let entry = key_field(&TubeName::new(b"mail").unwrap(), &Key::new(b"k").unwrap());
        let named: Option<u64> = redis::cmd("HGET")
            .arg(keys.retained_keys())
            .arg(&entry)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(named, Some(j3), "the key's entry went with an older record");
        let bytes: u64 = redis::cmd("GET")
            .arg(keys.retained_bytes())
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(bytes, store.retention_figures().await.unwrap().bytes);

        // The next leader: the same records, read back whole.
        let loaded = load(&conn, &keys).await.unwrap();
        let index = RetainedIndex::loaded(
            loaded
                .snapshot
                .retained
                .iter()
                .filter_map(|r| Some((r.id, r.tube.clone(), r.key.clone()?))),
        );
        let back = MemoryStore::restored(loaded.snapshot, NOW);
        for id in [j2, j3, j4] {
            let want = store.retained(id, NOW).await.unwrap().unwrap();
            assert_eq!(back.retained(id, NOW).await.unwrap(), Some(want));
        }
        assert_eq!(back.retained(j1, NOW).await.unwrap(), None);

        // Its limits keep one: the two oldest go from Redis, the key's entry with j3.
        // (The lease as the next leader's acquisition leaves it.)
        let next = "2|test|127.0.0.1:2";
        let _: () = redis::cmd("SET")
            .arg(keys.leader())
            .arg(next)
            .query_async(&mut c)
            .await
            .unwrap();
        let mut second = sink(next, index);
        back.set_retention(limits(1));
        write(&back, &mut second).await;
        let left: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys.retained())
            .arg(0)
            .arg(-1)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(left, [format!("{j4:020}")]);
        let named: Option<u64> = redis::cmd("HGET")
            .arg(keys.retained_keys())
            .arg(&entry)
            .query_async(&mut c)
            .await
            .unwrap();
        assert_eq!(named, None);
        let usage: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(keys.retained_record(j4))
            .query_async(&mut c)
            .await
            .unwrap();
        println!("one retained record's hash (4-byte body): {usage:?} bytes in Redis");
        drop(redis);
    }
}
