//! Retention in shared mode (store/retention.rs; docs/plans/retention.md, section 2):
//! the scripts' retention argument, and the reads of the retained set the scripts keep
//! in Redis (the layout: `RET` in lua/prelude.lua; the key names: `crate::redis::keys`).
//!
//! Invariants: while this instance's limits are off, every script gets the empty
//! argument and writes nothing of retention (no history, no record, no command more);
//! a record is answered only while it was deleted at or after `now - keep`, however
//! long Redis still holds it (eviction by age is bounded work per call, so it may lag);
//! every read is a bounded number of round trips per record answered.

use std::sync::atomic::Ordering;

use redis::Value;

use super::RedisStore;
use super::decode::Decode;
use crate::protocol::TubeName;
use crate::store::keys::Key;
use crate::store::retention::{
    History, Retained, RetainedQuery, RetentionFigures, RetentionLimits,
};
use crate::store::{ConnId, JobId, Nanos, StoreError, StoreResult};
use crate::util::lock;

/// Nanoseconds per millisecond (the records keep milliseconds).
const NS_PER_MS: u64 = 1_000_000;

/// How many candidates a listing reads a round trip.
const LIST_CHUNK: usize = 64;

/// The `retain` script's reply: the set's figures after its upkeep.
pub struct Upkeep {
    pub records: u64,
    pub bytes: u64,
    /// How many went by age in this call (as many as the script's bound: call again).
    pub expired: u64,
}

impl Decode for Upkeep {
    fn decode(v: Value) -> Result<Self, String> {
        let Ok([records, bytes, expired]) = <[u64; 3]>::try_from(Vec::<u64>::decode(v)?) else {
            return Err("expected {records, bytes, expired}".to_string());
        };
        Ok(Upkeep {
            records,
            bytes,
            expired,
        })
    }
}

/// The most records one `retain` call evicts by age (RET_EVICT in the prelude): a
/// reply of that many means more may be due.
const EVICT_PER_CALL: u64 = 100;

impl RedisStore {
    pub(super) fn set_retention_limits(&self, limits: RetentionLimits) {
        *lock(&self.retention) = limits;
        self.retention_on.store(limits.is_on(), Ordering::Relaxed);
    }

    fn retention_limits(&self) -> RetentionLimits {
        *lock(&self.retention)
    }

    /// The scripts' retention argument for a change by `conn` (0: none, or the API):
    /// empty while off (no allocation: the reserve path pays nothing), else
    /// "<conn> <keep_ms> <max_jobs> <max_bytes> <bodies>" (see `ret_of` in the prelude).
    pub(super) fn ret_arg(&self, conn: ConnId) -> String {
        if !self.retention_on.load(Ordering::Relaxed) {
            return String::new();
        }
        let l = self.retention_limits();
        if !l.is_on() {
            return String::new();
        }
        format!(
            "{} {} {} {} {}",
            conn.0,
            l.keep_ms,
            l.max_jobs,
            l.max_bytes,
            u8::from(l.bodies)
        )
    }

    /// The argument for a change no connection made (a put, a kick, a tick, the API).
    pub(super) fn ret_arg0(&self) -> String {
        self.ret_arg(ConnId(0))
    }

    /// A live job's history while retention is on here (empty when it was put while
    /// off), read after its entry (a change between the two reads shows in one only).
    pub(super) async fn live_history(&self, id: JobId) -> StoreResult<Option<History>> {
        if !self.retention_on.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let text: Option<Vec<u8>> = redis::cmd("GET")
            .arg(self.run.keys().job_history(id))
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("GET job history", e))?;
        let history = History::decode(text.as_deref().unwrap_or_default())
            .map_err(|e| StoreError::bad_reply("job history", format!("job {id}: {e}")))?;
        Ok(Some(history))
    }

    /// The earliest delete time (ms) a record answered at `now` may have, or `None`
    /// while retention is off here (nothing is answered).
    fn horizon_ms(&self, now: Nanos) -> Option<u64> {
        let l = self.retention_limits();
        l.is_on()
            .then(|| (now / NS_PER_MS).saturating_sub(l.keep_ms))
    }

    /// The retained set's upkeep (records past the age bound go, a bounded number per
    /// call) and its figures: one call of `retain`.
    pub(super) async fn retain_upkeep(&self) -> StoreResult<Upkeep> {
        self.run
            .call(|s| &s.retain, &[], &[] as &[&str])
            .arg(self.ret_arg0())
            .run()
            .await
    }

    /// The timer's share of the upkeep: while on, one call, and more while each
    /// evicted its most (at most ten, so a tick stays short; the next takes the rest).
    pub(super) async fn expire_retained(&self) -> StoreResult<()> {
        if !self.retention_on.load(Ordering::Relaxed) {
            return Ok(());
        }
        for _ in 0..10 {
            if self.retain_upkeep().await?.expired < EVICT_PER_CALL {
                break;
            }
        }
        Ok(())
    }

    pub(super) async fn retention_figures_in(&self) -> StoreResult<RetentionFigures> {
        if !self.retention_on.load(Ordering::Relaxed) {
            return Ok(RetentionFigures::default());
        }
        let up = self.retain_upkeep().await?;
        Ok(RetentionFigures {
            records: up.records,
            bytes: up.bytes,
        })
    }

    /// The record of `id` when it is answerable at `now`.
    pub(super) async fn retained_in(&self, id: JobId, now: Nanos) -> StoreResult<Option<Retained>> {
        let Some(horizon) = self.horizon_ms(now) else {
            return Ok(None);
        };
        let fields: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL")
            .arg(self.run.keys().retained_record(id))
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("HGETALL retained", e))?;
        if fields.is_empty() {
            return Ok(None);
        }
        let record = record_of(id, fields)?;
        Ok((record.deleted_ms >= horizon).then_some(record))
    }

    /// The newest record of a job of `tube` with `key`, when answerable at `now`.
    pub(super) async fn retained_by_key_in(
        &self,
        tube: &TubeName,
        key: &Key,
        now: Nanos,
    ) -> StoreResult<Option<Retained>> {
        if self.horizon_ms(now).is_none() {
            return Ok(None);
        }
        let field = crate::redis::retained::key_field(tube, key);
        let id: Option<JobId> = redis::cmd("HGET")
            .arg(self.run.keys().retained_keys())
            .arg(field)
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("HGET retained:key", e))?;
        let Some(id) = id else {
            return Ok(None);
        };
        // The entry may name a record evicted since: then the key has none.
        Ok(self
            .retained_in(id, now)
            .await?
            .filter(|r| &r.tube == tube && r.key.as_ref() == Some(key)))
    }

    /// A page of records answerable at `now`, newest first (by (deleted_ms, id)).
    pub(super) async fn list_retained_in(
        &self,
        q: &RetainedQuery,
        now: Nanos,
    ) -> StoreResult<Vec<Retained>> {
        let Some(horizon) = self.horizon_ms(now) else {
            return Ok(Vec::new());
        };
        let keys = self.run.keys();
        let max = q
            .before
            .map_or("+inf".to_string(), |(ms, _)| ms.to_string());
        let mut out = Vec::new();
        let mut offset = 0;
        // Bounded by the set's size (at most `max_jobs`), a chunk a round trip.
        while out.len() < q.limit {
            let found: Vec<(String, u64)> = redis::cmd("ZRANGE")
                .arg(keys.retained())
                .arg(&max)
                .arg(horizon)
                .arg("BYSCORE")
                .arg("REV")
                .arg("LIMIT")
                .arg(offset)
                .arg(LIST_CHUNK)
                .arg("WITHSCORES")
                .query_async(&mut self.run.conn())
                .await
                .map_err(|e| StoreError::redis("ZRANGE retained", e))?;
            offset += found.len();
            let ids: Vec<JobId> = found
                .iter()
                .filter_map(|(m, ms)| {
                    let id = crate::redis::retained::member_id(m.as_bytes())?;
                    let after_cursor = q
                        .before
                        .is_some_and(|(b_ms, b_id)| *ms == b_ms && id >= b_id);
                    (!after_cursor).then_some(id)
                })
                .collect();
            if !ids.is_empty() {
                let mut pipe = redis::pipe();
                for id in &ids {
                    pipe.cmd("HGETALL").arg(keys.retained_record(*id));
                }
                let records: Vec<Vec<(Vec<u8>, Vec<u8>)>> = pipe
                    .query_async(&mut self.run.conn())
                    .await
                    .map_err(|e| StoreError::redis("HGETALL retained", e))?;
                for (id, fields) in ids.into_iter().zip(records) {
                    // Evicted between the two reads.
                    if fields.is_empty() {
                        continue;
                    }
                    let r = record_of(id, fields)?;
                    if q.tube.as_ref().is_none_or(|t| &r.tube == t) && out.len() < q.limit {
                        out.push(r);
                    }
                }
            }
            if found.len() < LIST_CHUNK {
                break;
            }
        }
        Ok(out)
    }
}

/// A record's hash (see `retain` in the prelude; the one reader of both Redis modes'
/// form is `crate::redis::retained`).
fn record_of(id: JobId, fields: Vec<(Vec<u8>, Vec<u8>)>) -> StoreResult<Retained> {
    crate::redis::retained::record_of(id, fields)
        .map_err(|e| StoreError::bad_reply("retained record", e.to_string()))
}

#[cfg(test)]
mod tests {

    /// The scripts name the retained set's keys from the tag as `Keys` names them.
    #[test]
    fn the_scripts_spell_the_keys_as_keys_rs() {
        let keys = crate::redis::keys::Keys::new("p");
        assert_eq!(keys.retained_record(7), "{p}:ret:7");
        assert_eq!(keys.retained(), "{p}:retained");
        assert_eq!(keys.retained_keys(), "{p}:retained:key");
        assert_eq!(keys.retained_bytes(), "{p}:retained:bytes");
        assert_eq!(keys.job_history(7), "{p}:jh:7");
        let prelude = include_str!("lua/prelude.lua");
        for spelt in [
            "ret_key('ret:' .. id)",
            "ret_key('retained')",
            "ret_key('retained:key')",
            "ret_key('retained:bytes')",
            "ret_key('jh:' .. id)",
            "RET.tag .. ':' .. name",
        ] {
            assert!(prelude.contains(spelt), "{spelt}");
        }
        let retain = include_str!("lua/retain.lua");
        assert!(
            retain.contains("tag .. ':retained:bytes'") && retain.contains("tag .. ':retained'")
        );
    }
}
