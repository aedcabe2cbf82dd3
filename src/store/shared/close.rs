//! A connection's end in shared mode: the `close` script puts its held jobs back (or
//! buries them, per the tubes' dead letter rules) and drops its tube references; a
//! give-back puts back the one job whose reserve reply could not be written.
//!
//! Invariants: a close takes the connection's held jobs out of `held` and its references
//! out of `refs` before the first call, and marks `refs` dirty when a call failed (the
//! reference keeper writes the counts again); a call carries at most [`CLOSE_CHUNK`]
//! jobs and references, jobs first, so the jobs go in the first call; a give-back
//! applies no policy.

use super::RedisStore;
use super::batch::TubeGroups;
use super::held::Held;
use super::policy_args;
use super::refs::RefKind;
use crate::protocol::TubeName;
use crate::store::{ConnId, JobId, Policies, StoreResult};

/// The most jobs and tube references one call of the `close` script handles.
const CLOSE_CHUNK: usize = 500;

impl RedisStore {
    /// [`Store::close`](crate::store::Store::close): `conn`'s held jobs back (when
    /// `release_jobs`), its references to `watching` and `using` dropped; the tubes that
    /// gained ready jobs.
    pub(super) async fn close_conn(
        &self,
        conn: ConnId,
        watching: &[TubeName],
        using: Option<&TubeName>,
        release_jobs: bool,
    ) -> StoreResult<Vec<TubeName>> {
        let held = self.held.take(conn);
        let jobs: Vec<(JobId, Held)> = if release_jobs {
            held.into_iter().collect()
        } else {
            Vec::new()
        };
        let refs = watching
            .iter()
            .map(|t| (RefKind::Watching, t))
            .chain(using.map(|u| (RefKind::Using, u)));
        self.refs.forget(refs.clone());
        // Sent from the closing connection's own task, not through the reference
        // keeper: the first call (the jobs, and the first references) is queued on the
        // shared Redis connection before any command another connection sends after this
        // one hung up. A close of many references takes more calls; in between, other
        // commands see some of its tubes still referred to (they live a moment longer),
        // never a job still held.
        let result = self.close_script(&jobs, refs, &self.policies()).await;
        if result.is_err() {
            self.refs.mark_dirty();
        }
        result
    }

    /// [`Store::give_back`](crate::store::Store::give_back): job `id`, held by `conn`,
    /// back to ready; its tube when that gained a ready job.
    pub(super) async fn give_back_held(
        &self,
        conn: ConnId,
        id: JobId,
    ) -> StoreResult<Option<TubeName>> {
        // The close script, for this one job and no references; no policy: the reply
        // that could not be written ended no reservation anyone worked on.
        let Some(held) = self.held.get(conn, id) else {
            return Ok(None);
        };
        self.held.unhold(conn, id);
        let none = Policies::default();
        let woken = self
            .close_script(&[(id, held)], std::iter::empty(), &none)
            .await?;
        Ok(woken.into_iter().next())
    }

    /// The `close` script for one connection: `jobs` back to ready (or buried, when
    /// `policies` has a dead letter rule that says so: a close ends their
    /// reservations), `refs` dropped (in order); the tubes that gained ready jobs. A
    /// call takes at most [`CLOSE_CHUNK`] jobs and references (jobs first), so a
    /// connection that watched 100,000 tubes never blocks Redis, or this instance, for
    /// long; the calls follow each other.
    async fn close_script<'a>(
        &self,
        jobs: &[(JobId, Held)],
        refs: impl Iterator<Item = (RefKind, &'a TubeName)>,
        policies: &Policies,
    ) -> StoreResult<Vec<TubeName>> {
        let refs: Vec<(RefKind, &TubeName)> = refs.collect();
        let mut woken = Vec::new();
        let (mut jobs, mut refs) = (jobs, &refs[..]);
        loop {
            let take_jobs = jobs.len().min(CLOSE_CHUNK);
            let take_refs = refs.len().min(CLOSE_CHUNK - take_jobs);
            let (chunk_jobs, rest_jobs) = jobs.split_at(take_jobs);
            let (chunk_refs, rest_refs) = refs.split_at(take_refs);
            woken.extend(self.close_chunk(chunk_jobs, chunk_refs, policies).await?);
            (jobs, refs) = (rest_jobs, rest_refs);
            if jobs.is_empty() && refs.is_empty() {
                return Ok(woken);
            }
        }
    }

    /// One call of the `close` script. Each reference is sent as this instance's count
    /// after the close, read as the call is queued (see close.lua).
    async fn close_chunk(
        &self,
        jobs: &[(JobId, Held)],
        refs: &[(RefKind, &TubeName)],
        policies: &Policies,
    ) -> StoreResult<Vec<TubeName>> {
        let mut groups = TubeGroups::default();
        for t in jobs
            .iter()
            .map(|(_, h)| &h.tube)
            .chain(refs.iter().map(|(_, t)| *t))
        {
            groups.at(t);
        }
        let names = groups.names();
        let mut call = self.run.call(|s| &s.close, &[self.refs.key()], &names);
        // Only the jobs' tubes can have a rule applied.
        let rules = if jobs.is_empty() {
            String::new()
        } else {
            policy_args::rules(policies, &names)
        };
        call.arg(self.run.origin())
            .arg(names.join("\n"))
            .arg(rules)
            .arg(self.ret_arg0())
            .arg(jobs.len());
        for (id, h) in jobs {
            call.arg((*id, &h.owner, groups.at(&h.tube)));
        }
        for &(kind, tube) in refs {
            call.arg((kind.name(), groups.at(tube), self.refs.count(kind, tube)));
        }
        let woken = call.run().await?;
        Ok(woken
            .into_iter()
            .filter_map(|i| {
                groups
                    .tubes
                    .get((i as usize).wrapping_sub(1))
                    .map(|t| (*t).clone())
            })
            .collect())
    }
}
