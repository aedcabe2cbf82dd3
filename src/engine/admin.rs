//! The operator API's operations, run through the same engine and store as beanstalk
//! commands: listing, one job with its body, changes in place, put, delete, kick,
//! pause. A change that makes a job ready serves the waiting reserves of its tube (as a
//! kick does); a delayed one tells the timer; every change's answer waits until the
//! store's changes are durable (`-b`, leader mode), as a beanstalk reply does. A put
//! is the beanstalk put's own path (`Engine::insert`). Search and bulk changes, which
//! run in bounded steps, are in `admin_bulk.rs`.
//!
//! Invariants: every call here is bounded (a page of at most [`MAX_LIST`] jobs, one
//! job's change), so none holds the store long: the beanstalk port is never stalled;
//! an [`AdminError`] says what went wrong in the engine's terms (the HTTP edge decides
//! the status).

use std::sync::Arc;

use bytes::Bytes;

use super::Engine;
use super::dispatch::Inserted;
use super::stats::JobStats;
use crate::protocol::ext::Key;
use crate::protocol::{Put, TubeName};
use crate::store::admin::MAX_LIST;
use crate::store::{
    ConnId, Edit, Edited, JobEntry, JobId, JobState, ListPage, ListQuery, Store, StoreError,
};

/// Why an operator request was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("no job {0}")]
    NoJob(JobId),
    #[error("no tube {0}")]
    NoTube(TubeName),
    /// No job has the key in the tube, and no window is open for it.
    #[error("no job has key {key} in tube {tube}")]
    NoKey { tube: TubeName, key: Key },
    /// The job's state does not take the change (the job is as it was).
    #[error("job {id} is {}: it cannot take a {change}", state.name())]
    Unchangeable {
        id: JobId,
        state: JobState,
        change: &'static str,
    },
    /// A reserved job is deleted only by its holder.
    #[error("job {0} is reserved: its holder decides")]
    Held(JobId),
    /// The job changed between the check and the change; nothing was done.
    #[error("job {0} changed meanwhile; not deleted")]
    ChangedMeanwhile(JobId),
    /// A count outside what the request may ask for.
    #[error("{what} must be 1 to {max}")]
    OutOfRange { what: &'static str, max: usize },
    #[error("reserved jobs are their holders': choose ready, delayed or buried")]
    ReservedInBulk,
    #[error("the body is larger than the maximum job size ({max} bytes)")]
    TooBig { max: u32 },
    #[error("draining: no new jobs are taken")]
    Draining,
    /// The store failed; whether the change may exist is the store error's to say.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The change was made, but its persistence was not confirmed in time.
    #[error("the change was made but is not yet known to be persisted")]
    NotPersisted(#[source] StoreError),
}

impl AdminError {
    /// Whether the job was changed or taken by someone else meanwhile (a bulk change
    /// skips it: it is no longer this request's to change).
    pub fn changed_meanwhile(&self) -> bool {
        matches!(
            self,
            AdminError::NoJob(_)
                | AdminError::Unchangeable { .. }
                | AdminError::Held(_)
                | AdminError::ChangedMeanwhile(_)
        )
    }
}

pub type AdminResult<T> = Result<T, AdminError>;

/// A job as the API shows it: its `stats-job` figures, body size, for a reserved job
/// its holder, and for a keyed job its key.
#[derive(Clone, Debug)]
pub struct AdminJob {
    pub stats: JobStats,
    pub body_size: u64,
    pub holder: Option<JobHolder>,
    pub key: Option<Key>,
    /// Why a dead letter rule buried it.
    pub dead: Option<crate::store::policy::DeadReason>,
}

/// Who holds a reserved job: the instance, the client's address (known only on the
/// holding instance), the connection.
#[derive(Clone, Debug)]
pub struct JobHolder {
    pub instance: String,
    pub addr: Option<Arc<str>>,
    pub conn: u64,
}

impl Engine {
    /// A client connection's address, for the holder of the jobs it reserves and the
    /// clients listing.
    pub fn note_peer(&self, conn: ConnId, addr: &str) {
        if let Some(c) = self.clients.get(conn) {
            let addr = Arc::from(addr);
            c.update(|s| s.peer = Some(addr));
        }
    }

    /// Leader mode: connection `conn` is a client relayed by standby `from`.
    pub fn note_relayed(&self, conn: ConnId, from: &str) {
        if let Some(c) = self.clients.get(conn) {
            let from = Arc::from(from);
            c.update(|s| s.relayed_from = Some(from));
        }
    }

    /// This instance's id (`stats`' `id`), which names it as a job's holder.
    pub fn instance_id(&self) -> &str {
        &self.host.id
    }

    pub(super) fn admin_job(&self, entry: JobEntry) -> AdminJob {
        let holder = entry.holder.as_ref().map(|h| JobHolder {
            instance: h.instance.clone().unwrap_or_else(|| self.host.id.clone()),
            addr: match h.instance {
                None => self
                    .clients
                    .get(ConnId(h.conn))
                    .and_then(|c| c.state().peer),
                Some(_) => None,
            },
            conn: h.conn,
        });
        AdminJob {
            stats: JobStats::of(&entry.info),
            body_size: entry.body_size,
            holder,
            key: entry.job_key,
            dead: entry.dead,
        }
    }

    /// A page of a tube's jobs in one state (see [`ListQuery`]).
    pub async fn admin_list(&self, query: &ListQuery) -> AdminResult<(Vec<AdminJob>, ListPage)> {
        if query.limit == 0 || query.limit > MAX_LIST {
            return Err(AdminError::OutOfRange {
                what: "limit",
                max: MAX_LIST,
            });
        }
        let mut page = self.store.list_jobs(query, self.clock.now()).await?;
        let jobs = std::mem::take(&mut page.jobs)
            .into_iter()
            .map(|e| self.admin_job(e))
            .collect();
        Ok((jobs, page))
    }

    /// Every tube, in name order.
    pub async fn admin_tubes(&self) -> AdminResult<Vec<TubeName>> {
        let mut names = self.store.list_tubes().await?;
        names.sort();
        Ok(names)
    }

    /// Job `id` and its body.
    pub async fn admin_job_with_body(&self, id: JobId) -> AdminResult<(AdminJob, Bytes)> {
        let entry = self.store.job_entry(id, self.clock.now()).await?;
        let body = self.store.peek(id).await?;
        match (entry, body) {
            (Some(e), Some((_, body))) => Ok((self.admin_job(e), body)),
            _ => Err(AdminError::NoJob(id)),
        }
    }

    /// Change job `id` in place (see [`Edit`]); the job as it is after.
    pub async fn admin_edit(&self, id: JobId, edit: &Edit) -> AdminResult<AdminJob> {
        let entry = self.apply_edit(id, edit).await?;
        self.admin_durable().await?;
        Ok(self.admin_job(entry))
    }

    /// One edit, its consequences for waiters and the timer, without waiting for it
    /// to be durable (a bulk change waits once, at its end).
    pub(super) async fn apply_edit(&self, id: JobId, edit: &Edit) -> AdminResult<JobEntry> {
        match self.store.edit(id, edit, self.clock.now()).await? {
            Edited::NotFound => Err(AdminError::NoJob(id)),
            Edited::Conflict(state) => Err(AdminError::Unchangeable {
                id,
                state,
                change: edit.name(),
            }),
            Edited::Done { entry, ready_in } => {
                if let Some(tube) = ready_in {
                    self.serve([tube]).await;
                } else if let (JobState::Delayed, Some(due)) =
                    (entry.info.state, entry.info.deadline)
                {
                    self.timer.hint(due);
                }
                Ok(entry)
            }
        }
    }

    /// Every change so far is durable (or the request answers `unavailable`).
    pub(super) async fn admin_durable(&self) -> AdminResult<()> {
        let upto = self.store.last_change();
        self.store
            .durable(upto)
            .await
            .map_err(AdminError::NotPersisted)
    }

    /// Put a job into `tube` (as a beanstalk `put` does, uncounted); its id.
    pub async fn admin_put(&self, tube: TubeName, put: Put) -> AdminResult<JobId> {
        if put.body.len() > self.max_job_size as usize {
            return Err(AdminError::TooBig {
                max: self.max_job_size,
            });
        }
        let id = match self.insert(tube, put.into()).await? {
            Inserted::Job(id) => id,
            Inserted::Draining => return Err(AdminError::Draining),
            Inserted::LogFull => return Err(AdminError::Store(StoreError::LogFull)),
        };
        self.admin_durable().await?;
        Ok(id)
    }

    /// Delete job `id` unless it is reserved.
    pub async fn admin_delete(&self, id: JobId) -> AdminResult<()> {
        self.delete_one(id).await?;
        self.admin_durable().await
    }

    pub(super) async fn delete_one(&self, id: JobId) -> AdminResult<()> {
        let Some(info) = self.store.job_info(id, self.clock.now()).await? else {
            return Err(AdminError::NoJob(id));
        };
        if info.state == JobState::Reserved {
            return Err(AdminError::Held(id));
        }
        // No connection holds anything as connection 0 (ids start at 1).
        if !self.store.delete(ConnId(0), id, self.clock.now()).await? {
            return Err(AdminError::ChangedMeanwhile(id));
        }
        Ok(())
    }

    /// `kick-job` of `id` (buried or delayed); the job after.
    pub async fn admin_kick_job(&self, id: JobId) -> AdminResult<AdminJob> {
        self.kick_one(id).await?;
        self.admin_durable().await?;
        match self.store.job_entry(id, self.clock.now()).await? {
            Some(e) => Ok(self.admin_job(e)),
            None => Err(AdminError::NoJob(id)),
        }
    }

    pub(super) async fn kick_one(&self, id: JobId) -> AdminResult<()> {
        match self.store.kick_job(id, self.clock.now()).await? {
            Some(tube) => {
                self.serve([tube]).await;
                Ok(())
            }
            None => match self.store.job_info(id, self.clock.now()).await? {
                Some(info) => Err(AdminError::Unchangeable {
                    id,
                    state: info.state,
                    change: "kick",
                }),
                None => Err(AdminError::NoJob(id)),
            },
        }
    }

    /// `kick` of up to `bound` jobs of `tube`; how many.
    pub async fn admin_kick(&self, tube: &TubeName, bound: u32) -> AdminResult<u32> {
        let n = self.store.kick(tube, bound, self.clock.now()).await?;
        if n > 0 {
            self.serve([tube.clone()]).await;
        }
        self.admin_durable().await?;
        Ok(n)
    }

    /// `pause-tube`.
    pub async fn admin_pause(&self, tube: &TubeName, secs: u32) -> AdminResult<()> {
        let now = self.clock.now();
        let delay_ms = crate::time::secs_as_ms(secs);
        if !self.store.pause(tube, delay_ms, now).await? {
            return Err(AdminError::NoTube(tube.clone()));
        }
        self.timer.hint(now + crate::store::pause_length(delay_ms));
        self.admin_durable().await
    }
}
