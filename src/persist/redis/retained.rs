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
use crate::redis::retained::{bytes_key, key_field, member_id, record_fields, record_of};
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
    b.cmd("SET", &bytes_key(keys), &fields, 1);
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
