//! Keyed jobs in shared mode (docs/EXTENSIONS.md, *Keys*; docs/REDIS.md): not served
//! yet — the engine's grammar does not read keyed lines until every engine serves
//! them (`SERVED_FAMILIES`), so these answer an error should one arrive.

use super::RedisStore;
use crate::protocol::TubeName;
use crate::store::keys::{Key, KeyOp, KeyOutcome, KeyedPut, PutKey};
use crate::store::{ConnId, JobId, Nanos, NewJob, StoreError, StoreResult};

fn unserved<T>(op: &'static str) -> StoreResult<T> {
    Err(StoreError::bad_reply(
        op,
        "keys are not served in shared mode yet",
    ))
}

impl RedisStore {
    pub(super) async fn put_keyed_in(
        &self,
        _job: NewJob,
        _key: &PutKey,
        _now: Nanos,
    ) -> StoreResult<KeyedPut> {
        unserved("put_keyed")
    }

    pub(super) async fn by_key_in(
        &self,
        _conn: ConnId,
        _tube: &TubeName,
        _key: &Key,
        _op: KeyOp,
        _now: Nanos,
    ) -> StoreResult<KeyOutcome> {
        unserved("by_key")
    }

    pub(super) async fn purge_in(&self, _id: JobId, _now: Nanos) -> StoreResult<bool> {
        unserved("purge")
    }
}
