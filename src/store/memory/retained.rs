//! The memory store's retention (store/retention.rs; docs/RETENTION.md): each job's
//! history of events while retention is on, and the record a delete moves into the
//! store's [`RetainedSet`].
//!
//! Invariants:
//! - with retention off, a transition pays one test of [`Contents::recording`] and
//!   nothing else: no history is made, no record kept;
//! - a job made (or restored) before retention was on starts its history at its next
//!   event;
//! - a record deleted before `now - keep` is never answered, whether or not the tick
//!   has evicted it yet (eviction is bounded per tick: [`EXPIRE_PER_TICK`]).

use super::contents::{Contents, Job};
use crate::protocol::TubeName;
use crate::store::keys::Key;
use crate::store::retention::{
    Event, EventKind, Retained, RetainedFigures, RetainedQuery, RetentionFigures, RetentionLimits,
};
use crate::store::{ConnId, JobId, Nanos};

/// The most records a tick evicts for age (the rest wait for the next tick).
const EXPIRE_PER_TICK: usize = 1_000;

fn ms(now: Nanos) -> u64 {
    now / 1_000_000
}

impl Contents {
    /// Note `kind` by `conn` on job `id` at `now`, while retention is on.
    pub fn note(&mut self, id: JobId, kind: EventKind, conn: ConnId, now: Nanos) {
        if !self.recording {
            return;
        }
        if let Some(job) = self.jobs.get_mut(&id) {
            push(job, kind, conn.0, now);
        }
    }

    /// The retention limits: the set is cut to them at once.
    pub fn set_retention(&mut self, limits: RetentionLimits) {
        self.recording = limits.is_on();
        let gone = self.retained.set_limits(limits);
        self.retained_gone(&gone);
    }

    /// Job `id`, just removed by a delete (`kind` by `conn`) or a flush, becomes a
    /// record while retention is on.
    pub fn retain(&mut self, id: JobId, mut job: Box<Job>, kind: EventKind, conn: u64, now: Nanos) {
        if !self.recording {
            return;
        }
        push(&mut job, kind, conn, now);
        let Job {
            tube,
            pri,
            delay_ms,
            ttr_ms,
            created,
            reserves,
            timeouts,
            releases,
            buries,
            kicks,
            key,
            history,
            body,
            ..
        } = *job;
        let record = Retained {
            id,
            tube,
            key: key.map(|k| k.key),
            deleted_ms: ms(now),
            figures: RetainedFigures {
                pri,
                delay_ms,
                ttr_ms,
                created_ms: ms(created),
                reserves,
                timeouts,
                releases,
                buries,
                kicks,
            },
            history: history.map(|h| *h).unwrap_or_default(),
            body_len: body.len(),
            body: Some(body),
        };
        let gone = self.retained.keep(record);
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.retained_kept(id);
        }
        self.retained_gone(&gone);
    }

    /// Evict the records older than the retention period (bounded per call).
    pub fn expire_retained(&mut self, now: Nanos) {
        if self.retained.is_empty() {
            return;
        }
        let gone = self.retained.expire(ms(now), EXPIRE_PER_TICK);
        self.retained_gone(&gone);
    }

    /// When the oldest record's period ends (the timer's tick then evicts it).
    pub fn retained_expiry(&self) -> Option<Nanos> {
        let (deleted_ms, _) = self.retained.oldest()?;
        let end_ms = deleted_ms.saturating_add(self.retained.limits().keep_ms);
        Some(end_ms.saturating_add(1).saturating_mul(1_000_000))
    }

    fn retained_gone(&mut self, gone: &[JobId]) {
        if let Some(journal) = self.journal.as_deref_mut() {
            for &id in gone {
                journal.retained_gone(id);
            }
        }
    }

    /// Whether a record deleted at `deleted_ms` is still answered at `now`.
    fn fresh(&self, deleted_ms: u64, now: Nanos) -> bool {
        deleted_ms.saturating_add(self.retained.limits().keep_ms) >= ms(now)
    }

    pub fn retained_record(&self, id: JobId, now: Nanos) -> Option<Retained> {
        self.retained
            .get(id)
            .filter(|r| self.fresh(r.deleted_ms, now))
            .cloned()
    }

    pub fn retained_by_key(&self, tube: &TubeName, key: &Key, now: Nanos) -> Option<Retained> {
        self.retained
            .by_key(tube, key)
            .filter(|r| self.fresh(r.deleted_ms, now))
            .cloned()
    }

    pub fn list_retained(&self, query: &RetainedQuery, now: Nanos) -> Vec<Retained> {
        self.retained
            .page(query.before, query.limit, query.tube.as_ref())
            .into_iter()
            .take_while(|r| self.fresh(r.deleted_ms, now))
            .cloned()
            .collect()
    }

    pub fn retention_figures(&self) -> RetentionFigures {
        RetentionFigures {
            records: self.retained.len() as u64,
            bytes: self.retained.bytes() as u64,
        }
    }
}

fn push(job: &mut Job, kind: EventKind, conn: u64, now: Nanos) {
    job.history.get_or_insert_default().push(Event {
        at_ms: ms(now),
        kind,
        conn,
    });
}
