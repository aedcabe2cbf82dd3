//! What the operator API asks the engine about retention (docs/RETENTION.md): the
//! limits it runs with, a deleted job's record by id or by (tube, key), a page of
//! records newest first, and the totals. The records themselves are the store's
//! (`store/retention.rs`); this file only asks for them and names the connections
//! their events cite.
//!
//! Invariants: with retention off nothing is asked of the store (a user who never
//! turns it on costs no call); every call is bounded (one record, or a page of at most
//! [`MAX_LIST`] records).

use std::sync::Arc;

use super::Engine;
use bytes::Bytes;

use super::admin::{AdminError, AdminJob, AdminResult};
use crate::protocol::TubeName;
use crate::protocol::ext::Key;
use crate::store::admin::MAX_LIST;
use crate::store::retention::{
    History, Retained, RetainedQuery, RetentionFigures, RetentionLimits,
};
use crate::store::{ConnId, JobId, Store};

impl Engine {
    /// The retention limits this engine gave its store (`--retain*`).
    pub fn retention(&self) -> RetentionLimits {
        self.retention
    }

    /// The record of deleted job `id`, if the store retains it.
    pub async fn admin_retained(&self, id: JobId) -> AdminResult<Option<Retained>> {
        if !self.retention.is_on() {
            return Ok(None);
        }
        Ok(self.store.retained(id, self.clock.now()).await?)
    }

    /// Job `id`, its body and, while retention is on, its history (kept apart from
    /// [`AdminJob`], which lists and key answers pass around by value without one).
    pub async fn admin_job_with_history(
        &self,
        id: JobId,
    ) -> AdminResult<(AdminJob, Bytes, Option<History>)> {
        let entry = self.store.job_entry(id, self.clock.now()).await?;
        let body = self.store.peek(id).await?;
        match (entry, body) {
            (Some(mut e), Some((_, body))) => {
                // Off, a store keeps none; the check keeps the API's answer unchanged
                // for a user who never turns retention on, whatever a store sends.
                let history = e.history.take().filter(|_| self.retention.is_on());
                Ok((self.admin_job(e), body, history))
            }
            _ => Err(AdminError::NoJob(id)),
        }
    }

    /// The newest retained record of a job of `tube` that had `key`.
    pub async fn admin_retained_by_key(
        &self,
        tube: &TubeName,
        key: &Key,
    ) -> AdminResult<Option<Retained>> {
        if !self.retention.is_on() {
            return Ok(None);
        }
        Ok(self
            .store
            .retained_by_key(tube, key, self.clock.now())
            .await?)
    }

    /// A page of retained records, newest first (empty when retention is off).
    pub async fn admin_list_retained(&self, query: &RetainedQuery) -> AdminResult<Vec<Retained>> {
        if query.limit == 0 || query.limit > MAX_LIST {
            return Err(AdminError::OutOfRange {
                what: "limit",
                max: MAX_LIST,
            });
        }
        if !self.retention.is_on() {
            return Ok(Vec::new());
        }
        Ok(self.store.list_retained(query, self.clock.now()).await?)
    }

    /// How many records the store retains and their accounted size (zero when off).
    pub async fn admin_retention_figures(&self) -> AdminResult<RetentionFigures> {
        if !self.retention.is_on() {
            return Ok(RetentionFigures::default());
        }
        Ok(self.store.retention_figures().await?)
    }

    /// The address of connection `conn` while this instance knows it (a history's
    /// events name connections by id; 0 is the API or the server itself).
    pub fn conn_addr(&self, conn: u64) -> Option<Arc<str>> {
        if conn == 0 {
            return None;
        }
        self.clients.get(ConnId(conn)).and_then(|c| c.state().peer)
    }
}
