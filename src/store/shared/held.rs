//! The reservations this instance's connections hold: for each, its tube, its deadline
//! and the owner token of the reserve that got it.
//!
//! Ownership: the one thing of the Redis store this process owns (Redis owns the jobs).
//! It is exact because only the holding connection can release, bury, touch or delete
//! a reserved job (the scripts check the token) and the deadline is known; a
//! reservation whose deadline has passed has lapsed (some instance's timer returns it
//! to ready), so it is left out of [`HeldJobs::soonest_deadline`]. The lock is never
//! held across an `.await`.

use foldhash::HashMap;
use std::sync::{Mutex, MutexGuard};

use crate::protocol::TubeName;
use crate::store::{ConnId, JobId, Nanos};
use crate::util::lock;

#[derive(Clone, Debug)]
pub struct Held {
    pub tube: TubeName,
    /// On this process's clock (see `RedisStore::local_time`).
    pub deadline: Nanos,
    /// The owner token of the reserve attempt that got it (see `Attempts::owner`).
    pub owner: String,
}

#[derive(Default)]
pub struct HeldJobs(Mutex<HashMap<ConnId, HashMap<JobId, Held>>>);

impl HeldJobs {
    fn lock(&self) -> MutexGuard<'_, HashMap<ConnId, HashMap<JobId, Held>>> {
        lock(&self.0)
    }

    /// The reservation `conn` holds on `id`, if any.
    pub fn get(&self, conn: ConnId, id: JobId) -> Option<Held> {
        self.lock().get(&conn).and_then(|m| m.get(&id)).cloned()
    }

    pub fn hold(&self, conn: ConnId, id: JobId, held: Held) {
        self.lock().entry(conn).or_default().insert(id, held);
    }

    pub fn unhold(&self, conn: ConnId, id: JobId) {
        let mut held = self.lock();
        if let Some(m) = held.get_mut(&conn) {
            m.remove(&id);
            if m.is_empty() {
                held.remove(&conn);
            }
        }
    }

    /// Jobs deleted under whoever holds them (a flush): forgotten by their holders.
    pub fn forget_jobs(&self, ids: &[JobId]) {
        if ids.is_empty() {
            return;
        }
        let mut held = self.lock();
        for jobs in held.values_mut() {
            for id in ids {
                jobs.remove(id);
            }
        }
        held.retain(|_, jobs| !jobs.is_empty());
    }

    /// Every reservation forgotten: they belonged to a namespace that is gone.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// Everything `conn` holds, forgotten (it closed).
    pub fn take(&self, conn: ConnId) -> HashMap<JobId, Held> {
        self.lock().remove(&conn).unwrap_or_default()
    }

    /// The soonest deadline among `conn`'s reservations that have not lapsed at `now`
    /// (the lapsed ones are forgotten).
    pub fn soonest_deadline(&self, conn: ConnId, now: Nanos) -> Option<Nanos> {
        let mut held = self.lock();
        let jobs = held.get_mut(&conn)?;
        jobs.retain(|_, h| h.deadline >= now);
        let soonest = jobs.values().map(|h| h.deadline).min();
        if jobs.is_empty() {
            held.remove(&conn);
        }
        soonest
    }
}
