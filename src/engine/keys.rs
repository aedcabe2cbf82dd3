//! Keyed jobs in the engine (docs/EXTENSIONS.md, *Keys*): a keyed put and the commands
//! by key, each one store call ([`Store::put_keyed`], [`Store::by_key`]) in the used
//! tube, answered with the replies the document lists.
//!
//! Invariants: a put's window is cut to `--key-window-max` before the store sees it;
//! as for every command that can make a job ready (a new or replaced ready job, a
//! kick, a retime to now), a serve pass for the tube runs before the reply, and one
//! that makes a job due later hints the timer.

use super::admin::{AdminError, AdminJob, AdminResult};
use super::dispatch::{Inserted, TimedPut, new_job};
use super::{Answer, Engine, Session};
use crate::protocol::ext::{Key, Millis, PutKey};
use crate::protocol::{Reply, TubeName};
use crate::store::keys::KeyState;
use crate::store::{
    ConnId, JobId, JobState, KeyOp, KeyOutcome, KeyedPut, Store, StoreError, StoreResult,
};

/// What a key names, as the operator API shows it.
#[derive(Clone, Debug)]
pub enum KeyFound {
    /// A live job.
    Job(AdminJob),
    /// A job deleted inside its dedupe window.
    Window(JobId),
}

impl Engine {
    /// A keyed put into the used tube: `put` ([`Engine::put`]) when the key names
    /// nothing, else the key's job's id and state (dedupe, replace) or `CONFLICT`.
    pub(super) async fn put_keyed(
        &self,
        s: &mut Session,
        put: TimedPut,
        mut key: PutKey,
    ) -> StoreResult<Answer> {
        let cap = Millis::new(self.key_limits.window_max_ms).unwrap_or(Millis::MAX);
        key.window = key.window.min(cap);
        self.mark_producer(s);
        let tube = s.using.clone();
        if self.is_draining() {
            self.store.burn_id().await?;
            return Ok(self.refused_answer(Inserted::Draining));
        }
        let now = self.clock.now();
        let job = new_job(tube.clone(), put);
        let delay_ms = job.delay_ms;
        let outcome = match self.store.put_keyed(job, &key, now).await {
            Err(StoreError::LogFull) => return Ok(self.refused_answer(Inserted::LogFull)),
            outcome => outcome?,
        };
        let reply = match outcome {
            KeyedPut::Inserted(id) => {
                self.placed(tube, delay_ms, now).await;
                Reply::Inserted(id)
            }
            KeyedPut::Replaced(id, state) => {
                self.placed(tube, delay_ms, now).await;
                Reply::InsertedExisting { id, state }
            }
            KeyedPut::Existing(id, state) => Reply::InsertedExisting { id, state },
            KeyedPut::Conflict(id, state) => Reply::Conflict { id, state },
        };
        Ok(self.after_latest(reply))
    }

    /// A command by key in the used tube.
    pub(super) async fn by_key(&self, s: &Session, key: &Key, op: KeyOp) -> StoreResult<Reply> {
        let now = self.clock.now();
        let outcome = self.store.by_key(s.id, &s.using, key, op, now).await?;
        Ok(match (op, outcome) {
            (_, KeyOutcome::NotFound) => Reply::NotFound,
            (_, KeyOutcome::Conflict(id, state)) => Reply::Conflict { id, state },
            (_, KeyOutcome::Found(id, state)) => Reply::FoundKey { id, state },
            (KeyOp::Find, KeyOutcome::Done(_)) => Reply::NotFound,
            (KeyOp::Delete, KeyOutcome::Done(_)) => Reply::Deleted,
            (KeyOp::Kick, KeyOutcome::Done(_)) => {
                self.serve([s.using.clone()]).await;
                Reply::KickedJob
            }
            (KeyOp::Bury { .. }, KeyOutcome::Done(_)) => Reply::Buried,
            (KeyOp::Retime { delay_ms }, KeyOutcome::Done(_)) => {
                self.placed(s.using.clone(), delay_ms, now).await;
                Reply::Retimed
            }
        })
    }

    /// `peek-key`: `peek` of the key's job (a key inside its window has none).
    pub(super) async fn peek_key(&self, s: &Session, key: &Key) -> StoreResult<Reply> {
        let now = self.clock.now();
        let found = self.store.by_key(s.id, &s.using, key, KeyOp::Find, now);
        Ok(match found.await? {
            KeyOutcome::Found(id, state) if state != KeyState::Deleted => {
                match self.store.peek(id).await? {
                    Some((id, body)) => Reply::Found { id, body },
                    None => Reply::NotFound,
                }
            }
            _ => Reply::NotFound,
        })
    }

    /// The operator API's find by key: the key's job, or its window; one store call
    /// by key (no scan), then the job's entry.
    pub async fn admin_find_key(&self, tube: &TubeName, key: &Key) -> AdminResult<KeyFound> {
        let now = self.clock.now();
        // Connection 0 holds nothing (ids start at 1): a find touches no reservation.
        let found = self.store.by_key(ConnId(0), tube, key, KeyOp::Find, now);
        match found.await? {
            KeyOutcome::Found(id, KeyState::Deleted) => Ok(KeyFound::Window(id)),
            KeyOutcome::Found(id, _) => match self.store.job_entry(id, now).await? {
                Some(e) => Ok(KeyFound::Job(self.admin_job(e))),
                // Deleted between the two calls; its window (if any) is the next find's.
                None => Err(no_key(tube, key)),
            },
            _ => Err(no_key(tube, key)),
        }
    }

    /// The operator API's `delete-key`: the key's job, unless reserved (as
    /// [`Engine::admin_delete`]), opening its dedupe window; its id.
    pub async fn admin_delete_key(&self, tube: &TubeName, key: &Key) -> AdminResult<JobId> {
        let id = match self.admin_find_key(tube, key).await? {
            KeyFound::Window(_) => return Err(no_key(tube, key)),
            KeyFound::Job(j) if j.stats.state == JobState::Reserved => {
                return Err(AdminError::Held(j.stats.id));
            }
            KeyFound::Job(j) => j.stats.id,
        };
        let now = self.clock.now();
        match self
            .store
            .by_key(ConnId(0), tube, key, KeyOp::Delete, now)
            .await?
        {
            KeyOutcome::Done(done) if done == id => {}
            // Reserved, deleted or replaced by another job meanwhile.
            _ => return Err(AdminError::ChangedMeanwhile(id)),
        }
        self.admin_durable().await?;
        Ok(id)
    }
}

/// A change the operator API makes to a key's job ([`Engine::admin_key_change`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyChange {
    /// A buried or delayed job made ready.
    Kick,
    /// A ready or delayed job due this long from now (0: ready at once).
    Retime { delay_ms: u64 },
    /// A ready or delayed job buried with the priority it has, as `POST /jobs/{id}/bury`
    /// keeps it (the API has no priority to give).
    Bury,
}

impl Engine {
    /// The operator API's `kick-key`, `retime-key` and `bury-key`: the key's job after
    /// the change. Another state than the change allows is refused with the job's
    /// state, as the changes by id are.
    pub async fn admin_key_change(
        &self,
        tube: &TubeName,
        key: &Key,
        change: KeyChange,
    ) -> AdminResult<AdminJob> {
        let (id, state, pri) = match self.admin_find_key(tube, key).await? {
            KeyFound::Window(_) => return Err(no_key(tube, key)),
            KeyFound::Job(j) => (j.stats.id, j.stats.state, j.stats.pri),
        };
        let waiting = matches!(state, JobState::Ready | JobState::Delayed);
        let (op, name, allowed) = match change {
            KeyChange::Kick => (
                KeyOp::Kick,
                "kick",
                matches!(state, JobState::Buried | JobState::Delayed),
            ),
            KeyChange::Retime { delay_ms } => (KeyOp::Retime { delay_ms }, "delay", waiting),
            KeyChange::Bury => (KeyOp::Bury { pri }, "bury", waiting),
        };
        if !allowed {
            return Err(AdminError::Unchangeable {
                id,
                state,
                change: name,
            });
        }
        let now = self.clock.now();
        match self.store.by_key(ConnId(0), tube, key, op, now).await? {
            KeyOutcome::Done(done) if done == id => {}
            _ => return Err(AdminError::ChangedMeanwhile(id)),
        }
        // As the protocol's commands by key: a ready job serves the tube's waiting
        // reserves, a delayed one tells the timer.
        match change {
            KeyChange::Retime { delay_ms } => self.placed(tube.clone(), delay_ms, now).await,
            KeyChange::Kick => self.serve([tube.clone()]).await,
            KeyChange::Bury => {}
        }
        self.admin_durable().await?;
        match self.store.job_entry(id, self.clock.now()).await? {
            Some(e) => Ok(self.admin_job(e)),
            None => Err(AdminError::NoJob(id)),
        }
    }
}

fn no_key(tube: &TubeName, key: &Key) -> AdminError {
    AdminError::NoKey {
        tube: tube.clone(),
        key: key.clone(),
    }
}
