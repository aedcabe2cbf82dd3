//! The operator API's work over many jobs: a body search across tubes and states, and
//! bulk changes by filter (with a dry run that only counts). Both run in bounded steps
//! (a store call looks at most [`STEP`] jobs) and yield to the runtime between steps,
//! so the beanstalk port is never held up by them.
//!
//! Invariants: a search request looks at no more than its `scan` jobs; a bulk change
//! first collects the matching ids (at most its limit), then changes each on its own
//! (each change atomic), so a job whose change moves it within the walked order is
//! never met twice; the dry run collects exactly as the real run does.

use bytes::Bytes;

use super::Engine;
use super::admin::{AdminError, AdminJob, AdminResult};
use crate::protocol::TubeName;
use crate::store::{Edit, JobId, JobState, ListKey, ListQuery, Store};

/// Jobs looked at per store call.
pub const STEP: usize = 1_000;
/// The most jobs one bulk request may change.
pub const MAX_BULK: usize = 100_000;
/// The most jobs one search request may look at.
pub const MAX_SCAN: usize = 10_000;

/// The states a search walks, in this order.
pub const SEARCH_STATES: [JobState; 4] = [
    JobState::Ready,
    JobState::Delayed,
    JobState::Reserved,
    JobState::Buried,
];

/// Where a search resumes: a tube, a state, and the key within.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchCursor {
    pub tube: TubeName,
    pub state: JobState,
    pub after: Option<ListKey>,
}

/// A search request.
#[derive(Clone, Debug)]
pub struct Search {
    pub contains: Bytes,
    /// Only this tube (else every tube, in name order).
    pub tube: Option<TubeName>,
    /// Only this state (else each of [`SEARCH_STATES`]).
    pub state: Option<JobState>,
    pub scan: usize,
    pub cursor: Option<SearchCursor>,
}

/// What a search request found.
#[derive(Debug, Default)]
pub struct Found {
    pub jobs: Vec<AdminJob>,
    pub scanned: u64,
    /// Where to continue; `None`: done.
    pub next: Option<SearchCursor>,
}

/// A bulk change's action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BulkAction {
    Edit(Edit),
    Kick,
    Delete,
}

/// A bulk request: which jobs, what to do, for real or not.
#[derive(Clone, Debug)]
pub struct Bulk {
    pub action: BulkAction,
    pub tube: TubeName,
    pub state: JobState,
    pub contains: Option<Bytes>,
    pub limit: usize,
    pub dry_run: bool,
}

/// What a bulk request did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BulkDone {
    pub matched: u64,
    pub changed: u64,
    pub scanned: u64,
}

impl Engine {
    /// One search request (see [`Search`]).
    pub async fn admin_search(&self, req: &Search) -> AdminResult<Found> {
        if req.scan == 0 || req.scan > MAX_SCAN {
            return Err(AdminError::OutOfRange {
                what: "scan",
                max: MAX_SCAN,
            });
        }
        let mut tubes = match &req.tube {
            Some(t) => vec![t.clone()],
            None => self.store.list_tubes().await?,
        };
        tubes.sort();
        let states: Vec<JobState> = match req.state {
            Some(s) => vec![s],
            None => SEARCH_STATES.to_vec(),
        };
        let mut found = Found::default();
        let mut at = req.cursor.clone();
        for tube in tubes {
            if at.as_ref().is_some_and(|c| tube < c.tube) {
                continue;
            }
            for &state in &states {
                let after = match &at {
                    Some(c) if c.tube == tube => {
                        if rank(state) < rank(c.state) {
                            continue;
                        }
                        if state == c.state { c.after } else { None }
                    }
                    _ => None,
                };
                at = None;
                let left = req.scan - found.scanned as usize;
                if left == 0 {
                    found.next = Some(SearchCursor { tube, state, after });
                    return Ok(found);
                }
                let query = ListQuery {
                    tube: tube.clone(),
                    state,
                    after,
                    limit: usize::MAX,
                    scan: left.min(STEP),
                    contains: Some(req.contains.clone()),
                };
                let (next, stop) = self.search_state(&query, left, &mut found).await?;
                if stop {
                    found.next = Some(SearchCursor {
                        tube,
                        state,
                        after: next,
                    });
                    return Ok(found);
                }
            }
        }
        Ok(found)
    }

    /// Walk one tube's state from `query.after`, at most `budget` jobs; whether the
    /// budget ran out first (and the key to resume after).
    async fn search_state(
        &self,
        query: &ListQuery,
        mut budget: usize,
        found: &mut Found,
    ) -> AdminResult<(Option<ListKey>, bool)> {
        let mut query = query.clone();
        loop {
            query.scan = budget.min(STEP);
            let (jobs, page) = self.admin_list_unbounded(&query).await?;
            found.jobs.extend(jobs);
            found.scanned += page.scanned;
            budget -= page.scanned as usize;
            match page.next {
                None => return Ok((None, false)),
                Some(k) if budget == 0 => return Ok((Some(k), true)),
                Some(k) => query.after = Some(k),
            }
            tokio::task::yield_now().await;
        }
    }

    /// A search page: its matches never exceed what it scans (at most [`STEP`]), so
    /// a page of the largest size holds them all.
    async fn admin_list_unbounded(
        &self,
        query: &ListQuery,
    ) -> AdminResult<(Vec<AdminJob>, crate::store::ListPage)> {
        let q = ListQuery {
            limit: crate::store::admin::MAX_LIST,
            ..query.clone()
        };
        self.admin_list(&q).await
    }

    /// One bulk request (see [`Bulk`]).
    pub async fn admin_bulk(&self, req: &Bulk) -> AdminResult<BulkDone> {
        if req.limit == 0 || req.limit > MAX_BULK {
            return Err(AdminError::OutOfRange {
                what: "limit",
                max: MAX_BULK,
            });
        }
        if req.state == JobState::Reserved {
            return Err(AdminError::ReservedInBulk);
        }
        let (ids, scanned) = self.collect(req).await?;
        let mut done = BulkDone {
            matched: ids.len() as u64,
            changed: 0,
            scanned,
        };
        if req.dry_run {
            return Ok(done);
        }
        for (i, &id) in ids.iter().enumerate() {
            let result = match &req.action {
                BulkAction::Edit(edit) => self.apply_edit(id, edit).await.map(|_| ()),
                BulkAction::Kick => self.kick_one(id).await,
                BulkAction::Delete => self.delete_one(id).await,
            };
            match result {
                Ok(()) => done.changed += 1,
                // Changed meanwhile by someone else: not this request's to change.
                Err(e) if e.changed_meanwhile() => {}
                Err(e) => return Err(e),
            }
            if i % STEP == STEP - 1 {
                tokio::task::yield_now().await;
            }
        }
        self.admin_durable().await?;
        Ok(done)
    }

    /// The ids a bulk request matches, in the state's order, and the jobs looked at.
    async fn collect(&self, req: &Bulk) -> AdminResult<(Vec<JobId>, u64)> {
        let mut ids = Vec::new();
        let mut scanned = 0;
        let mut query = ListQuery {
            tube: req.tube.clone(),
            state: req.state,
            after: None,
            limit: STEP,
            scan: STEP,
            contains: req.contains.clone(),
        };
        loop {
            query.limit = (req.limit - ids.len()).min(STEP);
            let page = self.store.list_jobs(&query, self.clock.now()).await?;
            scanned += page.scanned;
            ids.extend(page.jobs.iter().map(|e| e.info.id));
            match page.next {
                Some(k) if ids.len() < req.limit => query.after = Some(k),
                _ => return Ok((ids, scanned)),
            }
            tokio::task::yield_now().await;
        }
    }
}

fn rank(state: JobState) -> usize {
    SEARCH_STATES.iter().position(|&s| s == state).unwrap_or(0)
}
