//! The server's `stats` figures in shared mode: jobs per state summed over every tube's
//! sets (the scripts keep no totals of them), and the namespace's counters.
//!
//! Invariants: each tube's figures are read in one transaction; a pipeline holds at
//! most [`STATS_CHUNK`] tubes, so no one read blocks Redis for long.

use redis::Value;

use super::{RedisStore, decode};
use crate::redis::keys::{NsKey, TubeKey};
use crate::store::{Store, StoreError, StoreResult, Totals, URGENT_PRI};

/// How many tubes' figures one pipeline of `stats` reads.
const STATS_CHUNK: usize = 1000;

impl RedisStore {
    pub(super) async fn read_totals(&self) -> StoreResult<Totals> {
        // The sets are the only count of jobs per state (the scripts keep no totals of
        // them), so the figures are summed over the tubes, a pipeline of
        // [`STATS_CHUNK`] tubes at a time, each a transaction (one over 100,000 tubes
        // blocked Redis, and this instance, for a second). Each tube's figures are read
        // together; the sum is not one instant's, which no client can tell.
        let names = self.list_tubes().await?;
        let keys = self.run.keys();
        let below_urgent = format!("({URGENT_PRI}");
        let mut sum = Totals {
            tubes: names.len() as u64,
            ..Totals::default()
        };
        // An empty chunk still reads the namespace's counters.
        let chunks = names
            .chunks(STATS_CHUNK)
            .chain(names.is_empty().then_some(&[][..]));
        for chunk in chunks {
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("HMGET")
                .arg(keys.ns(NsKey::Stats))
                .arg(&["total_jobs", "job_timeouts"]);
            for t in chunk {
                let ready = keys.tube_key(t.as_str(), TubeKey::Ready);
                pipe.cmd("ZCOUNT")
                    .arg(&ready)
                    .arg("-inf")
                    .arg(&below_urgent);
                pipe.cmd("ZCARD").arg(ready);
                for set in [TubeKey::Delayed, TubeKey::Reserved, TubeKey::Buried] {
                    pipe.cmd("ZCARD").arg(keys.tube_key(t.as_str(), set));
                }
            }
            let replies: Vec<Value> = pipe
                .query_async(&mut self.run.conn())
                .await
                .map_err(|e| StoreError::redis("stats", e))?;
            let part = decode::totals(replies, chunk.len())
                .map_err(|detail| StoreError::bad_reply("stats", detail))?;
            sum.urgent += part.urgent;
            sum.ready += part.ready;
            sum.reserved += part.reserved;
            sum.delayed += part.delayed;
            sum.buried += part.buried;
            sum.total_jobs = part.total_jobs;
            sum.job_timeouts = part.job_timeouts;
        }
        Ok(sum)
    }
}
