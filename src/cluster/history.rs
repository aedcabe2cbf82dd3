//! Leader mode's copy of the console's history (`engine::history`) in Redis, so that a
//! new leader shows what the previous one recorded: one hash per minute,
//! `{P}:history:<minute>`, tube → `puts reserves deletes wait_ms`.
//!
//! Invariants: bounded (one hash per minute of at most `history::MAX_TUBES` fields,
//! each expiring after the history's 24 hours and an hour more); written by the
//! sampler task on the cluster's shared connection, off every client's path; written
//! only while this instance leads (checked just before: at worst a leader that lost the
//! lease a moment earlier writes one minute its successor also writes, figures of the
//! same minute; the history is not fenced as jobs are).

use redis::Value;

use super::Cluster;
use crate::engine::history::{KEEP, Point};
use crate::store::StoreError;

impl Cluster {
    /// Write one minute's points, to expire after `ttl_ms`.
    pub async fn save_history(
        &self,
        minute: u64,
        points: &[(String, Point)],
        ttl_ms: u64,
    ) -> Result<(), StoreError> {
        if points.is_empty() || self.engine().is_none() {
            return Ok(());
        }
        let key = self.keys.history(minute);
        let mut pipe = redis::pipe();
        let hset = pipe.cmd("HSET").arg(&key);
        for (tube, p) in points {
            hset.arg(tube).arg(format!(
                "{} {} {} {}",
                p.puts, p.reserves, p.deletes, p.wait_ms
            ));
        }
        pipe.ignore().cmd("PEXPIRE").arg(&key).arg(ttl_ms).ignore();
        pipe.query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError::redis("HSET history", e))
    }

    /// The points of the [`KEEP`] minutes up to `now`, oldest first.
    pub async fn load_history(&self, now: u64) -> Result<Vec<(String, Point)>, StoreError> {
        let first = now.saturating_sub(KEEP as u64 - 1);
        let mut pipe = redis::pipe();
        for minute in first..=now {
            pipe.cmd("HGETALL").arg(self.keys.history(minute));
        }
        let hashes: Vec<Value> = pipe
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError::redis("HGETALL history", e))?;
        let mut points = Vec::new();
        for (minute, hash) in (first..=now).zip(hashes) {
            let Ok(fields) = redis::from_redis_value::<Vec<(String, String)>>(hash) else {
                continue;
            };
            for (tube, v) in fields {
                if let Some(p) = parse(minute, &v) {
                    points.push((tube, p));
                }
            }
        }
        Ok(points)
    }
}

/// `puts reserves deletes wait_ms`; anything else is skipped.
fn parse(minute: u64, v: &str) -> Option<Point> {
    let mut n = v.split(' ').map(|x| x.parse::<u32>().ok());
    Some(Point {
        minute,
        puts: n.next()??,
        reserves: n.next()??,
        deletes: n.next()??,
        wait_ms: n.next()??,
    })
}
