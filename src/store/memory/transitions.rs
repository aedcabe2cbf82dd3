//! The memory store's transitions of a job by a connection (reserve, delete, release,
//! bury, touch), each one function shared by the single command and its batch, and
//! the flush step (docs/EXTENSIONS.md, *Batches*, *Flush*).
//!
//! Invariants: a batch runs under the one lock its caller took, so it is one atomic
//! step and, with a journal, its changes land in one cut (one `-b` write, one leader
//! batch); each id of a batch is handled exactly as its single command handles it; a
//! flush step counts no `cmd-delete` and deletes only jobs with an id at most its
//! `upto`.

use super::contents::Contents;
use crate::protocol::TubeName;
use crate::protocol::ext::{BatchOp, FlushStates};
use crate::store::batch::flushes;
use crate::store::retention::EventKind;
use crate::store::{BatchDone, ConnId, FlushStep, JobId, JobState, Nanos, Reserved};

impl Contents {
    /// Reserve the most urgent ready job, by (pri, id), among the `watched` tubes that
    /// are not paused.
    pub fn reserve_best(
        &mut self,
        conn: ConnId,
        watched: &[TubeName],
        now: Nanos,
    ) -> Option<Reserved> {
        let best = watched
            .iter()
            .filter_map(|name| self.tubes.get(name))
            .filter(|t| !t.paused_at(now))
            .filter_map(|t| t.ready.first().copied())
            .min();
        best.and_then(|(_, id)| self.reserve_id(conn, id, now))
    }

    /// Up to `max` reserves in a row (`reserve-batch`).
    pub fn reserve_many(
        &mut self,
        conn: ConnId,
        watched: &[TubeName],
        max: usize,
        now: Nanos,
    ) -> Vec<Reserved> {
        let mut jobs = Vec::new();
        while jobs.len() < max {
            match self.reserve_best(conn, watched, now) {
                Some(job) => jobs.push(job),
                None => break,
            }
        }
        jobs
    }

    /// `delete`: unless another connection holds it; the job's key window opens at
    /// `now`. `counted`: a `delete` command, which the tube's `cmd-delete` counts (a
    /// batch's is not, rule 3).
    pub fn delete_by(&mut self, conn: ConnId, id: JobId, now: Nanos, counted: bool) -> bool {
        let Some(job) = self.jobs.get(&id) else {
            return false;
        };
        if job.state == JobState::Reserved && !job.owned_by(conn) {
            return false;
        }
        self.delete_job(id, now, true, counted, (EventKind::Delete, conn))
    }

    /// `release` of a job `conn` holds; its tube when released.
    pub fn release_by(
        &mut self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_ms: u64,
        now: Nanos,
    ) -> Option<TubeName> {
        let job = self.held_by(id, conn)?;
        let tube = job.tube.clone();
        let backoff = self
            .policies
            .for_tube(tube.as_str())
            .and_then(|p| p.backoff);
        let delay_ms = match backoff {
            Some(b) if delay_ms == 0 => b.delay_ms(job.releases, b.spread()),
            _ => delay_ms,
        };
        let job = self.jobs.get_mut(&id)?;
        job.pri = pri;
        job.releases += 1;
        if self.dead_letter(id, now) {
            return Some(tube);
        }
        self.note(id, EventKind::Release, conn, now);
        self.detach(id);
        let job = self.jobs.get_mut(&id)?;
        job.delay_ms = delay_ms;
        self.attach_after(id, delay_ms, now);
        Some(tube)
    }

    /// A reservation of `id` ended without a delete, its counters counted (the job is
    /// still attached as reserved): when its tube's dead letter rule says so, bury it
    /// where it is, keeping its priority, with the reason (an event of its holder's
    /// connection, at `now`). Whether it did.
    pub fn dead_letter(&mut self, id: JobId, now: Nanos) -> bool {
        let Some(job) = self.jobs.get(&id) else {
            return false;
        };
        let Some(rule) = self
            .policies
            .for_tube(job.tube.as_str())
            .and_then(|p| p.dead_letter)
        else {
            return false;
        };
        let Some(why) = rule.verdict(job.reserves, job.timeouts, job.kicks) else {
            return false;
        };
        let (pri, holder) = (job.pri, ConnId(job.owner));
        self.bury_job(id, pri);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.dead = Some(why);
        }
        self.note(id, EventKind::DeadLetter, holder, now);
        true
    }

    /// `bury` of a job `conn` holds.
    pub fn bury_by(&mut self, conn: ConnId, id: JobId, pri: u32, now: Nanos) -> bool {
        if self.held_by(id, conn).is_none() {
            return false;
        }
        self.bury_job(id, pri);
        self.note(id, EventKind::Bury, conn, now);
        true
    }

    /// A kick of buried or delayed job `id` (by `kick`, `kick-job`, a kick by key).
    pub fn kick_one(&mut self, id: JobId, now: Nanos) {
        self.make_ready(id, now);
        if let Some(j) = self.jobs.get_mut(&id) {
            j.kicks += 1;
        }
        self.note(id, EventKind::Kick, ConnId(0), now);
    }

    /// Bury job `id` with priority `pri` (whoever may, already checked), its
    /// `buries` counted.
    pub fn bury_job(&mut self, id: JobId, pri: u32) {
        self.detach(id);
        if let Some(job) = self.jobs.get_mut(&id) {
            job.pri = pri;
            job.buries += 1;
        }
        self.attach(id, JobState::Buried, 0, None);
    }

    /// `touch` of a job `conn` holds: its new deadline.
    pub fn touch_by(&mut self, conn: ConnId, id: JobId, now: Nanos) -> Option<Nanos> {
        let job = self.held_by(id, conn)?;
        let deadline = now + crate::time::millis(job.ttr_ms);
        self.move_to(id, JobState::Reserved, deadline, Some(conn));
        Some(deadline)
    }

    /// A list command: each id in order, as its single command.
    pub fn batch(&mut self, conn: ConnId, op: BatchOp, ids: &[JobId], now: Nanos) -> BatchDone {
        let mut done = BatchDone::default();
        for &id in ids {
            let found = match op {
                BatchOp::Delete => self.delete_by(conn, id, now, false),
                BatchOp::Release { pri, delay } => {
                    let delay_ms = delay.as_millis();
                    match self.release_by(conn, id, pri, delay_ms, now) {
                        Some(tube) if delay_ms == 0 => {
                            if !done.woken.contains(&tube) {
                                done.woken.push(tube);
                            }
                            true
                        }
                        released => released.is_some(),
                    }
                }
                BatchOp::Touch => self.touch_by(conn, id, now).is_some(),
                BatchOp::Bury { pri } => self.bury_by(conn, id, pri, now),
            };
            if !found {
                done.missing.push(id);
            }
        }
        done
    }

    /// One step of a flush of `tube` (see `Store::flush_step`).
    pub fn flush_step(
        &mut self,
        tube: &TubeName,
        states: FlushStates,
        upto: Option<JobId>,
        max: usize,
        now: Nanos,
    ) -> FlushStep {
        let upto = upto.unwrap_or(self.next_id.saturating_sub(1));
        let Some(t) = self.tubes.get(tube) else {
            return FlushStep {
                upto,
                ..FlushStep::default()
            };
        };
        // Skipped jobs (put since the flush began) are looked at again by each step:
        // a step costs what it deletes plus those, never the whole tube.
        let sets: [(JobState, Box<dyn Iterator<Item = JobId> + '_>); 4] = [
            (JobState::Ready, Box::new(t.ready.iter().map(|&(_, id)| id))),
            (
                JobState::Delayed,
                Box::new(t.delayed.iter().map(|&(_, id)| id)),
            ),
            (
                JobState::Reserved,
                Box::new(t.reserved.iter().map(|&(_, id)| id)),
            ),
            (JobState::Buried, Box::new(t.buried.values().copied())),
        ];
        let ids: Vec<JobId> = sets
            .into_iter()
            .filter(|(state, _)| flushes(states, *state))
            .flat_map(|(_, ids)| ids)
            .filter(|&id| id <= upto)
            .take(max)
            .collect();
        for &id in &ids {
            // A flushed job did not run: its key is freed at once, with no window
            // (docs/EXTENSIONS.md, *Flush*).
            self.delete_job(id, now, false, false, (EventKind::Flush, ConnId(0)));
        }
        self.maybe_drop_tube(tube);
        FlushStep {
            deleted: ids.len() as u64,
            upto,
            more: ids.len() == max,
        }
    }
}
