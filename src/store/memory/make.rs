//! How the memory store makes a job: a plain put, a keyed put and a put whose body
//! persistence wrote ahead all end in [`insert`], so a new job is counted, placed and
//! (with retention on) given its first event in one place.

use super::contents::{Contents, Job};
use super::journal::Stored;
use crate::store::keys::PutKey;
use crate::store::retention::EventKind;
use crate::store::{ConnId, JobId, JobState, KeyedPut, Nanos, NewJob};

/// `put`: a new job, made at `now` (also a schedule's tick, `schedules.rs`).
pub(super) fn put_new(s: &mut Contents, job: NewJob, now: Nanos) -> JobId {
    let id = s.alloc_id();
    insert(s, id, job, now, Stored::Never);
    id
}

/// `put` with a key (also a keyed schedule's tick, `schedules.rs`).
pub(super) fn put_keyed_new(s: &mut Contents, job: NewJob, key: &PutKey, now: Nanos) -> KeyedPut {
    s.put_keyed(job, key, now, |s, id, job| {
        insert(s, id, job, now, Stored::Never)
    })
}

/// Make job `id` of `job`, put at `now`; `stored` is what persistence holds of it.
pub(super) fn insert(s: &mut Contents, id: JobId, job: NewJob, now: Nanos, stored: Stored) {
    let tube = s.tube_entry(&job.tube);
    tube.total_jobs += 1;
    s.totals.total_jobs += 1;
    s.jobs.insert(
        id,
        Box::new(Job {
            tube: job.tube,
            pri: job.pri,
            delay_ms: job.delay_ms,
            ttr_ms: job.ttr_ms,
            state: JobState::Ready,
            stored,
            created: now,
            at: now,
            owner: 0,
            reserves: 0,
            timeouts: 0,
            releases: 0,
            buries: 0,
            kicks: 0,
            key: None,
            dead: None,
            history: None,
            body: job.body,
        }),
    );
    s.attach_after(id, job.delay_ms, now);
    s.note(id, EventKind::Put, ConnId(0), now);
}
