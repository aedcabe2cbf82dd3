//! What the operator API does to schedules through the engine (docs/API.md,
//! *Schedules*): read their cursors, run one outside its ticks, forget a removed one's
//! cursor. The definitions themselves are the schedule book's; the ticks are the
//! runner's (`schedules.rs`).
//!
//! Invariant: a run never touches the schedule's cursor — it is a put like the API's
//! own, with the schedule's job and key (dedupe, no window), so a run while the key's
//! job still waits makes nothing and names that job; the answer is sent once the put
//! is durable, as every API change.

use super::Engine;
use super::admin::{AdminError, AdminResult};
use crate::schedule::Schedule;
use crate::store::{Cursor, JobId, KeyedPut, NANOS_PER_SEC, ScheduleName, Store};

/// What a run of a schedule did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ran {
    /// The job made, or the key's job that still waits.
    pub id: JobId,
    /// No job was made: the key's job still waits.
    pub deduped: bool,
}

impl Engine {
    /// Every schedule's cursor the store holds.
    pub async fn admin_schedule_cursors(&self) -> AdminResult<Vec<(ScheduleName, Cursor)>> {
        Ok(self.store.schedule_cursors().await?)
    }

    /// Put `schedule`'s job now, outside its ticks.
    pub async fn admin_run_schedule(&self, schedule: &Schedule) -> AdminResult<Ran> {
        if schedule.body.len() > self.max_job_size as usize {
            return Err(AdminError::TooBig {
                max: self.max_job_size,
            });
        }
        if self.is_draining() {
            return Err(AdminError::Draining);
        }
        let now = self.clock.now();
        let job = schedule.job();
        let made = |id| Ran { id, deduped: false };
        let ran = match schedule.put_key() {
            Some(key) => match self.store.put_keyed(job, &key, now).await? {
                KeyedPut::Inserted(id) | KeyedPut::Replaced(id, _) => made(id),
                // Dedupe never replaces nor conflicts; both would name the key's job.
                KeyedPut::Existing(id, _) | KeyedPut::Conflict(id, _) => {
                    return self.ran_durable(Ran { id, deduped: true }).await;
                }
            },
            None => made(self.store.put(job, now).await?),
        };
        self.placed(schedule.tube.clone(), schedule.delay_ms, now)
            .await;
        self.ran_durable(ran).await
    }

    async fn ran_durable(&self, ran: Ran) -> AdminResult<Ran> {
        self.admin_durable().await?;
        Ok(ran)
    }

    /// Forget a removed schedule's cursor (a schedule defined again under its name
    /// starts afresh).
    pub async fn admin_drop_cursor(&self, name: &ScheduleName) -> AdminResult<()> {
        self.store.drop_cursor(name).await?;
        self.admin_durable().await
    }
}

impl Engine {
    /// The engine's clock in ms since the Unix epoch: what a schedule's ticks and
    /// `changed_ms` are counted in, so the API's "now" is the runner's.
    pub fn admin_now_ms(&self) -> u64 {
        self.clock.now() / (NANOS_PER_SEC / 1000)
    }
}
