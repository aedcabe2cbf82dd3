//! The operator API's operations (issue 21), run through the same engine and store as
//! beanstalk commands: listing, one job with its body, changes in place, put, delete,
//! kick, pause. A change that makes a job ready serves the waiting reserves of its tube
//! (as a kick does); a delayed one tells the timer; every change's answer waits until
//! the store's changes are durable (`-b`, leader mode), as a beanstalk reply does.
//! Search and bulk changes, which run in bounded steps, are in `admin_bulk.rs`.
//!
//! Invariant: every call here is bounded (a page of at most [`MAX_LIST`] jobs, one
//! job's change), so none holds the store long: the beanstalk port is never stalled.

use std::sync::Arc;

use bytes::Bytes;

use super::Engine;
use super::stats::JobStats;
use crate::protocol::TubeName;
use crate::store::admin::MAX_LIST;
use crate::store::{
    ConnId, Edit, Edited, JobEntry, JobId, JobInfo, JobState, ListPage, ListQuery, NANOS_PER_SEC,
    NewJob, Store, StoreError,
};

/// Why an operator request was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("{0}")]
    Unavailable(String),
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> AdminError {
        match e {
            StoreError::Unsupported { op } => {
                AdminError::Unsupported(format!("{op} is not supported in this mode"))
            }
            e => AdminError::Unavailable(e.chain()),
        }
    }
}

pub type AdminResult<T> = Result<T, AdminError>;

/// A job as the API shows it: its `stats-job` figures, body size, and for a reserved
/// job its holder.
#[derive(Clone, Debug)]
pub struct AdminJob {
    pub stats: JobStats,
    pub body_size: u64,
    pub holder: Option<HolderInfo>,
    pub entry: JobEntry,
}

/// Who holds a reserved job: the instance, the client's address, the connection.
#[derive(Clone, Debug)]
pub struct HolderInfo {
    pub instance: String,
    pub addr: Option<Arc<str>>,
    pub conn: u64,
}

/// A new job put through the API.
#[derive(Clone, Debug)]
pub struct AdminPut {
    pub tube: TubeName,
    pub body: Bytes,
    pub pri: u32,
    pub delay: u32,
    pub ttr: u32,
}

/// `stats-job`'s figures of `j`.
pub fn job_stats_of(j: &JobInfo) -> JobStats {
    let now = j.now;
    JobStats {
        id: j.id,
        tube: j.tube.to_string(),
        state: j.state.name(),
        pri: j.pri,
        age: now.saturating_sub(j.created) / NANOS_PER_SEC,
        delay: u64::from(j.delay_secs),
        ttr: u64::from(j.ttr_secs),
        time_left: j
            .deadline
            .map_or(0, |d| d.saturating_sub(now) / NANOS_PER_SEC),
        file: j.file,
        reserves: j.reserves,
        timeouts: j.timeouts,
        releases: j.releases,
        buries: j.buries,
        kicks: j.kicks,
    }
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

    fn admin_job(&self, entry: JobEntry) -> AdminJob {
        let holder = entry.holder.as_ref().map(|h| HolderInfo {
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
            stats: job_stats_of(&entry.info),
            body_size: entry.body_size,
            holder,
            entry,
        }
    }

    /// A page of a tube's jobs in one state (see [`ListQuery`]).
    pub async fn admin_list(&self, query: &ListQuery) -> AdminResult<(Vec<AdminJob>, ListPage)> {
        if query.limit == 0 || query.limit > MAX_LIST {
            return Err(AdminError::BadRequest(format!(
                "limit must be 1 to {MAX_LIST}"
            )));
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
            _ => Err(not_found(id)),
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
            Edited::NotFound => Err(not_found(id)),
            Edited::Conflict(state) => Err(AdminError::Conflict(format!(
                "job {id} is {}: it cannot take a {}",
                state.name(),
                edit.name()
            ))),
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
        self.store.durable(upto).await.map_err(|e| {
            AdminError::Unavailable(format!(
                "the change was made but is not yet known to be persisted: {}",
                e.chain()
            ))
        })
    }

    /// Put a job; its id.
    pub async fn admin_put(&self, put: AdminPut) -> AdminResult<JobId> {
        if self.is_draining() {
            return Err(AdminError::Unavailable(
                "draining: no new jobs are taken".into(),
            ));
        }
        if put.body.len() > self.max_job_size as usize {
            return Err(AdminError::BadRequest(format!(
                "the body is larger than the maximum job size ({} bytes)",
                self.max_job_size
            )));
        }
        let now = self.clock.now();
        let tube = put.tube.clone();
        let job = NewJob {
            tube: put.tube,
            pri: put.pri,
            delay_secs: put.delay,
            ttr_secs: put.ttr.max(1),
            body: put.body,
        };
        let id = self.store.put(job, now).await?;
        if put.delay > 0 {
            self.timer.hint(now + u64::from(put.delay) * NANOS_PER_SEC);
        } else {
            self.serve([tube]).await;
        }
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
            return Err(not_found(id));
        };
        if info.state == JobState::Reserved {
            return Err(AdminError::Conflict(format!(
                "job {id} is reserved: its holder decides"
            )));
        }
        // No connection holds anything as connection 0 (ids start at 1).
        if !self.store.delete(ConnId(0), id).await? {
            return Err(AdminError::Conflict(format!(
                "job {id} changed meanwhile; not deleted"
            )));
        }
        Ok(())
    }

    /// `kick-job` of `id` (buried or delayed); the job after.
    pub async fn admin_kick_job(&self, id: JobId) -> AdminResult<AdminJob> {
        self.kick_one(id).await?;
        self.admin_durable().await?;
        match self.store.job_entry(id, self.clock.now()).await? {
            Some(e) => Ok(self.admin_job(e)),
            None => Err(not_found(id)),
        }
    }

    pub(super) async fn kick_one(&self, id: JobId) -> AdminResult<()> {
        match self.store.kick_job(id, self.clock.now()).await? {
            Some(tube) => {
                self.serve([tube]).await;
                Ok(())
            }
            None => match self.store.job_info(id, self.clock.now()).await? {
                Some(info) => Err(AdminError::Conflict(format!(
                    "job {id} is {}: only a buried or delayed job is kicked",
                    info.state.name()
                ))),
                None => Err(not_found(id)),
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
        if !self.store.pause(tube, secs, now).await? {
            return Err(AdminError::NotFound(format!("no tube {tube}")));
        }
        self.timer.hint(now + crate::store::pause_length(secs));
        self.admin_durable().await
    }
}

pub(super) fn not_found(id: JobId) -> AdminError {
    AdminError::NotFound(format!("no job {id}"))
}
