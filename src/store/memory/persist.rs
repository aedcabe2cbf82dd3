//! What persistence asks of the store's contents: a cut of the changes the journal
//! noted (`cut`), the undoing of a cut whose write failed (`cut_failed`), and the
//! contents a restart starts from (`restore`). The journal (`journal.rs`) only notes
//! and holds records; this file reads the contents to fill them, so the journal knows
//! nothing of [`Contents`].
//!
//! Invariants: those of `journal.rs` (what `stored` means, what a cut holds); a cut
//! holds every changed cursor, each with the jobs its ticks made (past the cut's
//! limit if need be), so no cursor is written after its job nor a job without it.

use super::contents::{Contents, Job};
use super::journal::{
    Cut, CutLimit, Gone, JobRecord, Journal, ScheduleRecord, StoreCounters, StoreSnapshot, Stored,
    TubeRecord, merge,
};
use crate::protocol::TubeName;
use crate::store::keys::{Key, KeyRecord, KeySlot};
use crate::store::{Change, JobId, JobState, Nanos};

impl Contents {
    /// The last change noted ([`Change::NONE`] without a journal).
    pub fn last_change(&self) -> Change {
        self.journal
            .as_ref()
            .map_or(Change::NONE, |j| j.last_change())
    }

    /// Take the changes since the last written cut (at most `limit`'s worth), as they
    /// are now. Each job in the cut is marked as stored in its current state; a failed
    /// write undoes that with [`Contents::cut_failed`].
    pub fn cut(&mut self, limit: CutLimit) -> Cut {
        let counters = self.counters();
        // Set aside while the jobs are read (and marked), and put back below.
        let Some(mut journal) = self.journal.take() else {
            return Cut::default();
        };
        let mut cut = Cut {
            counters,
            ..Cut::default()
        };
        self.cut_schedules(&mut journal, &mut cut);
        self.cut_jobs(&mut journal, &mut cut, limit);
        cut_gone(&mut journal, &mut cut, limit);
        // Tubes go with the jobs of theirs in this cut; only once no job is left over
        // may a tube record (which says whether the tube still has jobs) be final.
        if journal.jobs.is_empty() && journal.gone.is_empty() {
            cut.last_change = Some(journal.last);
            cut.tubes = journal
                .tubes
                .drain()
                .map(|name| self.tube_record(name))
                .collect();
            cut.keys = journal
                .keys
                .drain()
                .map(|(tube, key)| KeyRecord {
                    slot: self.keys.get(&tube, &key),
                    tube,
                    key,
                })
                .collect();
        }
        self.journal = Some(journal);
        cut
    }

    /// Move every changed cursor into `cut` as it is now, each with the jobs its ticks
    /// made that are still unwritten, whatever the cut's limit (a schedule has at most a
    /// tick or two unwritten: the scheduler waits for each to be durable).
    fn cut_schedules(&mut self, journal: &mut Journal, cut: &mut Cut) {
        let changed: Vec<_> = journal.schedules.drain().collect();
        for (name, made) in changed {
            let mut jobs = Vec::with_capacity(made.len());
            for id in made {
                if journal.jobs.remove(&id) {
                    self.cut_job(journal, cut, id);
                    jobs.push(id);
                }
            }
            let cursor = self.cursors.get(&name).copied();
            cut.schedules.push(ScheduleRecord {
                name,
                cursor: cursor.unwrap_or_default(),
                gone: cursor.is_none(),
                jobs,
            });
        }
    }

    /// Move the changed jobs into `cut` as they are now (within `limit`), with the
    /// tubes the moved ones left, marking each as stored in its current state.
    fn cut_jobs(&mut self, journal: &mut Journal, cut: &mut Cut, limit: CutLimit) {
        let mut body_bytes = 0;
        let ids: Vec<JobId> = journal.jobs.iter().copied().collect();
        for id in ids {
            if cut.jobs.len() + cut.gone.len() >= limit.records || body_bytes >= limit.body_bytes {
                break;
            }
            journal.jobs.remove(&id);
            body_bytes += self.cut_job(journal, cut, id);
        }
    }

    /// Move job `id` (taken out of the journal's changed jobs) into `cut` as it is now,
    /// with the tubes it left; the bytes of body the cut writes for it.
    fn cut_job(&mut self, journal: &mut Journal, cut: &mut Cut, id: JobId) -> usize {
        let Some(job) = self.jobs.get_mut(&id) else {
            return 0;
        };
        for g in journal.moved.remove(&id).unwrap_or_default() {
            if g.tube == job.tube {
                // Moved back where persistence holds it.
                job.stored = merge(job.stored, g.was);
            } else {
                cut.moved.push(g);
            }
        }
        let record = record_of(id, job);
        let body_bytes = if record.needs_body() {
            record.body.len()
        } else {
            0
        };
        job.stored = Stored::As(job.state);
        cut.jobs.push(record);
        body_bytes
    }

    /// Tube `name` as persistence keeps it: its figures while it exists here, else a
    /// record that drops it.
    fn tube_record(&self, name: TubeName) -> TubeRecord {
        match self.tubes.get(&name) {
            // Kept as long as the tube exists here (it holds jobs, or a connection
            // refers to it): a tube going empty between two jobs costs persistence
            // nothing. Tubes that only connections kept are dropped at the next restart
            // (`Contents::restore`).
            Some(t) => TubeRecord {
                kept: true,
                total_jobs: t.total_jobs,
                cmd_delete: t.cmd_delete,
                cmd_pause: t.cmd_pause,
                pause: t.pause,
                pause_until: t.pause_until,
                next_due: [
                    t.delayed.first().map(|&(d, _)| d),
                    t.reserved.first().map(|&(d, _)| d + 1),
                    (t.pause > 0).then_some(t.pause_until),
                ]
                .into_iter()
                .flatten()
                .min(),
                name,
            },
            None => TubeRecord {
                kept: false,
                total_jobs: 0,
                cmd_delete: 0,
                cmd_pause: 0,
                pause: 0,
                pause_until: 0,
                next_due: None,
                name,
            },
        }
    }

    /// Writing `cut` failed, and may or may not have landed: every job in it is now of
    /// unknown standing in persistence and is written again, whole, by the next cut.
    pub fn cut_failed(&mut self, cut: &Cut) {
        let Some(journal) = self.journal.as_deref_mut() else {
            return;
        };
        for r in &cut.jobs {
            if let Some(job) = self.jobs.get_mut(&r.id) {
                job.stored = Stored::Unknown;
                journal.jobs.insert(r.id);
            } else if let Some(g) = journal.gone.get_mut(&(r.id, r.tube.clone())) {
                // Deleted after the cut was taken: its removal must clear every set.
                g.was = Stored::Unknown;
            }
        }
        for g in cut.gone.iter().chain(&cut.moved) {
            let unknown = Gone {
                was: Stored::Unknown,
                ..g.clone()
            };
            match self.jobs.get(&g.id) {
                // A move not known to have landed: the job may still be in that tube.
                Some(_) => journal.moved.entry(g.id).or_default().push(unknown),
                None => journal.gone_from(unknown),
            }
        }
        for t in &cut.tubes {
            journal.tubes.insert(t.name.clone());
        }
        for k in &cut.keys {
            journal.keys.insert((k.tube.clone(), k.key.clone()));
        }
        // Each cursor with its jobs again, so the next cut writes them together.
        for r in &cut.schedules {
            let jobs = journal.schedules.entry(r.name.clone()).or_default();
            jobs.extend(r.jobs.iter().filter(|id| self.jobs.contains_key(id)));
        }
        journal.note();
    }

    fn counters(&self) -> StoreCounters {
        StoreCounters {
            last_id: self.next_id.saturating_sub(1),
            bury_seq: self.bury_seq,
            total_jobs: self.totals.total_jobs,
            job_timeouts: self.totals.job_timeouts,
        }
    }

    /// Journaled contents holding `snap`, as a restart finds them: jobs that were
    /// reserved go back to ready at `now` (their connections died with the process
    /// that served them), which the first cut writes.
    pub fn restore(snap: StoreSnapshot, now: Nanos) -> Contents {
        let mut s = Contents::new(true);
        // Building the contents is not a change: the journal is set aside meanwhile (a
        // namespace of a million jobs would otherwise note each of them), and told
        // afterwards only what this start changed.
        let mut journal = s.journal.take();
        let dropped = s.restore_tubes(&snap);
        s.next_id = snap.counters.last_id + 1;
        s.bury_seq = snap.counters.bury_seq;
        s.totals.total_jobs = snap.counters.total_jobs;
        s.totals.job_timeouts = snap.counters.job_timeouts;
        let returned = s.restore_jobs(snap.jobs, now);
        let ended = s.restore_windows(snap.windows, now);
        s.cursors = snap.cursors.into_iter().collect();
        // The first cut writes only what this start changed (reservations returned to
        // ready), plus every tube, to repair its due entry.
        if let Some(j) = journal.as_deref_mut() {
            j.note();
            j.jobs.extend(returned);
            for name in s.order.as_slice().iter().chain(&dropped) {
                j.tubes.insert(name.clone());
            }
            j.keys.extend(ended);
        }
        s.journal = journal;
        s
    }

    /// Make the tubes of `snap` that come back, with their figures and pauses; the
    /// names of those dropped. Only tubes that hold jobs come back (and `default`):
    /// the connections that kept others alive are gone. The first cut drops the rest
    /// from persistence.
    fn restore_tubes(&mut self, snap: &StoreSnapshot) -> Vec<TubeName> {
        let with_jobs: std::collections::HashSet<&TubeName> =
            snap.jobs.iter().map(|r| &r.tube).collect();
        let mut dropped = Vec::new();
        for t in &snap.tubes {
            if t.name.as_str() != "default" && !with_jobs.contains(&t.name) {
                dropped.push(t.name.clone());
                continue;
            }
            let tube = self.tube_entry(&t.name);
            tube.total_jobs = t.total_jobs;
            tube.cmd_delete = t.cmd_delete;
            tube.cmd_pause = t.cmd_pause;
            if t.pause > 0 {
                tube.pause = t.pause;
                tube.pause_until = t.pause_until;
                self.pauses.insert((t.pause_until, t.name.clone()));
            }
        }
        dropped
    }

    /// Place every job read back; the ids of those that were reserved and are ready
    /// again at `now`.
    fn restore_jobs(&mut self, mut jobs: Vec<JobRecord>, now: Nanos) -> Vec<JobId> {
        // Inserted in the order of the ready sets they mostly go to, a million jobs
        // append to their B-trees rather than land at random places in them.
        jobs.sort_unstable_by_key(|r| (r.pri, r.id));
        self.jobs.reserve(jobs.len());
        let mut returned = Vec::new();
        for r in jobs {
            if r.state == JobState::Reserved {
                returned.push(r.id);
            }
            self.restore_job(r, now);
        }
        returned
    }

    /// Open the windows read back that end after `now` (a live job's key wins: the
    /// window ended when the key was taken again); the keys of those that ended, for
    /// the first cut to free in persistence.
    fn restore_windows(&mut self, windows: Vec<KeyRecord>, now: Nanos) -> Vec<(TubeName, Key)> {
        let mut ended = Vec::new();
        for w in windows {
            match w.slot {
                KeySlot::Window { until, .. }
                    if until > now && self.keys.get(&w.tube, &w.key) == KeySlot::Free =>
                {
                    self.keys.set(&w.tube, &w.key, w.slot);
                }
                KeySlot::Window { .. } if self.keys.get(&w.tube, &w.key) == KeySlot::Free => {
                    ended.push((w.tube, w.key));
                }
                _ => {}
            }
        }
        ended
    }

    /// Place one job read back: as it was stored, but a reserved one ready at `now`.
    fn restore_job(&mut self, r: JobRecord, now: Nanos) {
        let id = r.id;
        self.next_id = self.next_id.max(id + 1);
        self.tube_entry(&r.tube);
        let tube_name = r.tube.clone();
        let (state, at) = match r.state {
            JobState::Reserved => (JobState::Ready, now),
            state => (state, r.at),
        };
        self.jobs.insert(
            id,
            Box::new(Job {
                tube: r.tube,
                pri: r.pri,
                delay_ms: r.delay_ms,
                ttr_ms: r.ttr_ms,
                state,
                stored: Stored::As(r.state),
                created: r.created,
                at,
                owner: 0,
                reserves: r.reserves,
                timeouts: r.timeouts,
                releases: r.releases,
                buries: r.buries,
                kicks: r.kicks,
                key: r.key.clone().map(Box::new),
                dead: r.dead,
                history: None,
                body: r.body,
            }),
        );
        if let Some(k) = r.key {
            self.keys.set(&tube_name, &k.key, KeySlot::Live(id));
        }
        if state == JobState::Buried {
            // `attach` would number it anew: place it at its own position, so buried
            // jobs keep their FIFO order whatever order they are read in.
            self.bury_seq = self.bury_seq.max(at);
            if let Some(tube) = self.tubes.get_mut(&tube_name) {
                tube.buried.insert(at, id);
            }
            self.totals.buried += 1;
        } else {
            self.attach(id, state, at, None);
        }
    }
}

/// Move the deleted jobs into `cut` (within `limit`, counted with the jobs).
fn cut_gone(journal: &mut Journal, cut: &mut Cut, limit: CutLimit) {
    let gone: Vec<(JobId, TubeName)> = journal.gone.keys().cloned().collect();
    for key in gone {
        if cut.jobs.len() + cut.gone.len() >= limit.records {
            break;
        }
        if let Some(g) = journal.gone.remove(&key) {
            cut.gone.push(g);
        }
    }
}

/// Job `id` as persistence keeps it: every field, and what persistence held of it.
fn record_of(id: JobId, j: &Job) -> JobRecord {
    JobRecord {
        id,
        tube: j.tube.clone(),
        pri: j.pri,
        delay_ms: j.delay_ms,
        ttr_ms: j.ttr_ms,
        state: j.state,
        created: j.created,
        at: j.at,
        owner: j.owner,
        reserves: j.reserves,
        timeouts: j.timeouts,
        releases: j.releases,
        buries: j.buries,
        kicks: j.kicks,
        key: j.key.as_deref().cloned(),
        dead: j.dead,
        body: j.body.clone(),
        was: j.stored,
    }
}
