//! The memory store's side of the operator API: listing a tube's jobs in one state
//! from a cursor, one job's entry, and changes in place (move, priority, delay, bury).
//!
//! Invariants: a listing walks only the part of one ordered set after its cursor (a
//! B-tree range), so page 1,000 costs what page 1 does; an edit is one transition made
//! of `detach` and `attach` (or a field change the job's place does not depend on), so
//! the state's invariants and the journal hold after it as after any command.

use std::ops::Bound;

use super::contents::{Contents, Job};
use crate::protocol::TubeName;
use crate::store::admin::due;
use crate::store::retention::EventKind;
use crate::store::{
    ConnId, Edit, Edited, JobEntry, JobId, JobInfo, JobState, ListKey, ListPage, ListQuery, Nanos,
    ReservedBy,
};

/// Whether `hay` contains `needle` (an empty needle is in everything).
pub(crate) fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || hay.windows(needle.len()).any(|w| w == needle)
}

impl Contents {
    /// The entry of job `id` as it is now.
    pub(super) fn entry(&self, id: JobId, now: Nanos) -> Option<JobEntry> {
        self.jobs.get(&id).map(|j| entry_of(id, j, now))
    }

    /// A page of `q.tube`'s jobs in `q.state` after `q.after` (see `ListQuery`).
    pub(super) fn list(&self, q: &ListQuery, now: Nanos) -> ListPage {
        let Some(t) = self.tubes.get(&q.tube) else {
            return ListPage::default();
        };
        let after = q.after.map(|k| (k.primary, k.id));
        let keys: Box<dyn Iterator<Item = (u64, JobId)> + '_> = match q.state {
            JobState::Ready => {
                let from = match after {
                    None => Bound::Unbounded,
                    Some((p, id)) => match u32::try_from(p) {
                        Ok(p) => Bound::Excluded((p, id)),
                        Err(_) => return ListPage::default(),
                    },
                };
                Box::new(
                    t.ready
                        .range((from, Bound::Unbounded))
                        .map(|&(p, id)| (u64::from(p), id)),
                )
            }
            JobState::Delayed => Box::new(t.delayed.range(range_after(after)).copied()),
            JobState::Reserved => Box::new(t.reserved.range(range_after(after)).copied()),
            JobState::Buried => {
                let from = after.map_or(Bound::Unbounded, |(seq, _)| Bound::Excluded(seq));
                Box::new(
                    t.buried
                        .range((from, Bound::Unbounded))
                        .map(|(&seq, &id)| (seq, id)),
                )
            }
        };
        let mut page = ListPage::default();
        let mut last = None;
        for (primary, id) in keys {
            if page.jobs.len() >= q.limit || page.scanned >= q.scan as u64 {
                page.next = last;
                return page;
            }
            page.scanned += 1;
            last = Some(ListKey { primary, id });
            let Some(job) = self.jobs.get(&id) else {
                continue;
            };
            if q.contains.as_ref().is_some_and(|n| !contains(&job.body, n)) {
                continue;
            }
            page.jobs.push(entry_of(id, job, now));
        }
        page
    }

    /// Make `edit` to job `id` at `now` (see [`Edit`]).
    pub(super) fn edit(&mut self, id: JobId, edit: &Edit, now: Nanos) -> Edited {
        let Some(job) = self.jobs.get(&id) else {
            return Edited::NotFound;
        };
        let (state, at) = (job.state, job.at);
        if !edit.allowed_in(state) {
            return Edited::Conflict(state);
        }
        match edit {
            Edit::Pri(pri) => self.set_pri(id, *pri, state, at),
            Edit::Delay(0) => {
                self.set_field(id, |j| j.delay_ms = 0);
                if state == JobState::Delayed {
                    self.make_ready(id, now);
                }
            }
            Edit::Delay(secs) => {
                let delay_ms = crate::time::secs_as_ms(*secs);
                self.detach(id);
                self.set_field(id, |j| j.delay_ms = delay_ms);
                self.attach(id, JobState::Delayed, due(now, delay_ms), None);
            }
            Edit::Bury => {
                self.detach(id);
                self.set_field(id, |j| j.buries += 1);
                self.attach(id, JobState::Buried, 0, None);
            }
            Edit::Move(to) => self.move_job(id, to, state, at),
        }
        self.note(id, EventKind::Edit, ConnId(0), now);
        match self.jobs.get(&id) {
            Some(j) => Edited::Done {
                ready_in: (j.state == JobState::Ready).then(|| j.tube.clone()),
                entry: entry_of(id, j, now),
            },
            None => Edited::NotFound,
        }
    }

    fn set_field(&mut self, id: JobId, f: impl FnOnce(&mut Job)) {
        if let Some(j) = self.jobs.get_mut(&id) {
            f(j);
        }
    }

    /// A new priority: a ready job takes its new place in its tube's order (its ready
    /// time kept); a delayed or buried job's place does not depend on it.
    fn set_pri(&mut self, id: JobId, pri: u32, state: JobState, at: u64) {
        if state == JobState::Ready {
            self.detach(id);
            self.set_field(id, |j| j.pri = pri);
            self.attach(id, JobState::Ready, at, None);
            return;
        }
        self.set_field(id, |j| j.pri = pri);
        self.note_job(id);
    }

    /// To tube `to` in the same state: a ready job keeps its ready time, a delayed one
    /// its due time; a buried one goes to the end of `to`'s buried FIFO.
    fn move_job(&mut self, id: JobId, to: &TubeName, state: JobState, at: u64) {
        let Some(from) = self.jobs.get(&id).map(|j| j.tube.clone()) else {
            return;
        };
        if from == *to {
            return;
        }
        self.detach(id);
        self.tube_entry(to);
        let stored = self.jobs.get(&id).map(|j| j.stored).unwrap_or_default();
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.job_moved(id, &from, stored);
        }
        self.set_field(id, |j| {
            j.tube = to.clone();
            // Persistence holds nothing of it in `to` yet.
            j.stored = Default::default();
        });
        self.attach(id, state, at, None);
        self.move_key(id, &from);
        self.maybe_drop_tube(&from);
    }
}

/// A range of (key, id) pairs after one.
type After = (Bound<(u64, JobId)>, Bound<(u64, JobId)>);

fn range_after(after: Option<(u64, JobId)>) -> After {
    (
        after.map_or(Bound::Unbounded, Bound::Excluded),
        Bound::Unbounded,
    )
}

/// A job's entry: its `stats-job` figures (as `job_info` gives them), body size, holder
/// and sort key.
pub(super) fn entry_of(id: JobId, j: &Job, now: Nanos) -> JobEntry {
    let timed = matches!(j.state, JobState::Delayed | JobState::Reserved);
    JobEntry {
        info: JobInfo {
            id,
            tube: j.tube.clone(),
            state: j.state,
            pri: j.pri,
            created: j.created,
            delay_ms: j.delay_ms,
            ttr_ms: j.ttr_ms,
            deadline: timed.then_some(j.at),
            reserves: j.reserves.into(),
            timeouts: j.timeouts.into(),
            releases: j.releases.into(),
            buries: j.buries.into(),
            kicks: j.kicks.into(),
            file: 0,
            now,
        },
        body_size: j.body.len() as u64,
        holder: (j.state == JobState::Reserved).then_some(ReservedBy {
            instance: None,
            conn: j.owner,
        }),
        key: ListKey {
            primary: match j.state {
                JobState::Ready => u64::from(j.pri),
                _ => j.at,
            },
            id,
        },
        job_key: j.key.as_ref().map(|k| k.key.clone()),
        dead: j.dead,
        history: j.history.as_deref().cloned(),
    }
}
