//! The operator's listing of live connections (`GET /api/v1/clients`): a page of the
//! clients registry joined with the jobs each holds (the store's holder of each
//! reserved job, so no second copy of reservations is kept) and its blocked reserve
//! (the waiters registry).
//!
//! Invariants: a page holds at most [`MAX_CLIENTS`] connections, each with at most
//! [`SHOWN_TUBES`] watched tubes and [`SHOWN_HELD`] held jobs (with their full counts);
//! finding held jobs lists at most [`HELD_SCAN_TUBES`] tubes' reserved jobs (the page's
//! own used and watched tubes first) and at most [`HELD_SCAN_JOBS`] jobs, in bounded
//! store calls, and says when it stopped short ([`ClientsPage::held_complete`]).
//!
//! Also [`Engine::still_held`]: which of some jobs one connection holds, from the same
//! holders, for a role's check of what it may `delete` (access/grant.rs); it looks up
//! at most [`HELD_CHECK_GROUP`] jobs at once.

use std::sync::Arc;

use foldhash::{HashMap, HashMapExt, HashSet, HashSetExt};
use futures_util::future::join_all;

use super::admin::{AdminError, AdminResult};
use super::clients::SHOWN_TUBES;
use super::{Blocked, Engine};
use crate::protocol::TubeName;
use crate::store::admin::MAX_LIST;
use crate::store::{ConnId, JobId, JobState, ListQuery, Nanos, Store};

/// The largest page of connections.
pub const MAX_CLIENTS: usize = 1_000;
/// Held jobs shown per connection (the count is always given).
pub const SHOWN_HELD: usize = 10;
/// Tubes whose reserved jobs one listing looks through.
pub const HELD_SCAN_TUBES: usize = 1_000;
/// Reserved jobs one listing looks at.
pub const HELD_SCAN_JOBS: u64 = 100_000;
/// Job lookups [`Engine::still_held`] has in flight at once: in shared mode each is a
/// Redis round trip and a connection may hold about a thousand jobs, so one after
/// another would hold up its reply for as many round trips, and all at once would
/// crowd the store's connections.
pub const HELD_CHECK_GROUP: usize = 64;

/// A job a connection holds reserved.
#[derive(Clone, Debug)]
pub struct HeldJob {
    pub id: JobId,
    pub tube: TubeName,
    /// Its TTR deadline (ns since the epoch).
    pub deadline: Option<Nanos>,
}

/// One connection as listed.
#[derive(Clone, Debug)]
pub struct ClientInfo {
    pub id: u64,
    pub peer: Option<Arc<str>>,
    pub relayed_from: Option<Arc<str>>,
    pub since: Nanos,
    pub using: TubeName,
    /// The first [`SHOWN_TUBES`] watched tubes.
    pub watching: Vec<TubeName>,
    pub watching_count: usize,
    pub producer: bool,
    pub worker: bool,
    /// The first [`SHOWN_HELD`] held jobs, soonest deadline first.
    pub held: Vec<HeldJob>,
    pub held_count: usize,
    pub blocked: Option<Blocked>,
    pub last_command: Option<(&'static str, Nanos)>,
}

/// A page of connections, in id order.
#[derive(Clone, Debug)]
pub struct ClientsPage {
    pub clients: Vec<ClientInfo>,
    /// The id to pass as `after` for the next page; `None` at the end.
    pub next: Option<u64>,
    /// Live connections in all.
    pub total: usize,
    /// Whether every tube's reserved jobs were looked through (else `held` may miss
    /// some).
    pub held_complete: bool,
    pub now: Nanos,
}

impl Engine {
    /// Up to `limit` live connections with an id above `after`.
    pub async fn admin_clients(&self, after: u64, limit: usize) -> AdminResult<ClientsPage> {
        if limit == 0 || limit > MAX_CLIENTS {
            return Err(AdminError::OutOfRange {
                what: "limit",
                max: MAX_CLIENTS,
            });
        }
        let (page, more) = self.clients.page(after, limit);
        let next = if more {
            page.last().map(|c| c.id.0)
        } else {
            None
        };
        let ids: HashSet<u64> = page.iter().map(|c| c.id.0).collect();
        let mut blocked = self.waiters.blocked_of(&ids);
        let states: Vec<_> = page.iter().map(|c| c.state()).collect();
        let mut tubes: Vec<TubeName> = Vec::new();
        let mut seen = HashSet::new();
        for s in &states {
            for t in std::iter::once(&s.using).chain(s.watching.iter()) {
                if seen.insert(t.clone()) {
                    tubes.push(t.clone());
                }
            }
        }
        let (mut held, held_complete) = if ids.is_empty() {
            (HashMap::new(), true)
        } else {
            for t in self.store.list_tubes().await? {
                if seen.insert(t.clone()) {
                    tubes.push(t);
                }
            }
            self.held_by(&ids, &tubes).await?
        };
        let clients = page
            .iter()
            .zip(states)
            .map(|(c, s)| {
                let mut jobs = held.remove(&c.id.0).unwrap_or_default();
                jobs.sort_by_key(|j| (j.deadline, j.id));
                let held_count = jobs.len();
                jobs.truncate(SHOWN_HELD);
                ClientInfo {
                    id: c.id.0,
                    peer: s.peer,
                    relayed_from: s.relayed_from,
                    since: c.since,
                    using: s.using,
                    watching: s.watching.iter().take(SHOWN_TUBES).cloned().collect(),
                    watching_count: s.watching_count,
                    producer: s.producer,
                    worker: s.worker,
                    held: jobs,
                    held_count,
                    blocked: blocked.remove(&c.id.0),
                    last_command: c.last_command(),
                }
            })
            .collect();
        Ok(ClientsPage {
            clients,
            next,
            total: self.clients.len(),
            held_complete,
            now: self.clock.now(),
        })
    }

    /// The reserved jobs this instance's connections in `conns` hold, from the store's
    /// holder of each, looking through at most [`HELD_SCAN_TUBES`] of `tubes`; and
    /// whether that was all of them.
    async fn held_by(
        &self,
        conns: &HashSet<u64>,
        tubes: &[TubeName],
    ) -> AdminResult<(HashMap<u64, Vec<HeldJob>>, bool)> {
        let mut held: HashMap<u64, Vec<HeldJob>> = HashMap::new();
        let now = self.clock.now();
        let mut scanned = 0u64;
        for tube in tubes.iter().take(HELD_SCAN_TUBES) {
            let mut query = ListQuery {
                tube: tube.clone(),
                state: JobState::Reserved,
                after: None,
                limit: MAX_LIST,
                scan: MAX_LIST,
                contains: None,
            };
            loop {
                let page = self.store.list_jobs(&query, now).await?;
                scanned += page.scanned;
                for e in page.jobs {
                    let Some(h) = e.holder.filter(|h| h.instance.is_none()) else {
                        continue;
                    };
                    if conns.contains(&h.conn) {
                        held.entry(h.conn).or_default().push(HeldJob {
                            id: e.info.id,
                            tube: e.info.tube.clone(),
                            deadline: e.info.deadline,
                        });
                    }
                }
                match page.next {
                    Some(_) if scanned >= HELD_SCAN_JOBS => return Ok((held, false)),
                    Some(key) => query.after = Some(key),
                    None => break,
                }
            }
        }
        Ok((held, tubes.len() <= HELD_SCAN_TUBES))
    }

    /// Which of `ids` connection `conn` holds now (the store's holder of each, one
    /// lookup per id, [`HELD_CHECK_GROUP`] at a time); `None` when the store could not
    /// tell.
    pub async fn still_held(
        &self,
        conn: ConnId,
        ids: &[JobId],
    ) -> Option<std::collections::HashSet<u64>> {
        let now = self.clock.now();
        let mut held = std::collections::HashSet::new();
        for group in ids.chunks(HELD_CHECK_GROUP) {
            let entries = join_all(group.iter().map(|&id| self.store.job_entry(id, now))).await;
            for (&id, entry) in group.iter().zip(entries) {
                let holder = entry.ok()?.and_then(|e| e.holder);
                if holder.is_some_and(|h| h.instance.is_none() && h.conn == conn.0) {
                    held.insert(id);
                }
            }
        }
        Some(held)
    }
}
