//! The memory store's keys (docs/EXTENSIONS.md, *Keys*): a per-tube index from key to
//! the job it names, or to a deleted job until its dedupe window ends, plus the queue
//! of window ends the engine's timer sweeps (`tick`).
//!
//! The index lives beside the tubes, not in them: a tube may be destroyed while one of
//! its keys is inside its window, and a put that re-creates the tube must find it.
//!
//! Invariants:
//! - a live job with a key is `Slot::Live(id)` under its tube and key, and its `key`
//!   field names that key; a key in `Slot::Window` has exactly one entry in `windows`
//!   (its end), and no live job;
//! - at most `limits.windows_max` windows are open: opening one more ends the one
//!   nearest its end (counted in `evicted`);
//! - every change of a slot is noted in the journal (`key_changed`), so a cut writes
//!   the key as it is then (`persist.rs`).

use std::collections::BTreeSet;

use foldhash::HashMap;

use super::contents::Contents;
use crate::protocol::TubeName;
use crate::store::keys::{
    JobKey, Key, KeyLimits, KeyOp, KeyOutcome, KeySlot, KeyState, KeyedPut, PutDecision, PutKey,
    key_state, put_decision,
};
use crate::store::retention::EventKind;
use crate::store::{ConnId, JobId, JobState, Nanos, NewJob};
use crate::time::millis;

/// The keys of every tube, and the windows' ends.
#[derive(Debug, Default)]
pub(super) struct KeyIndex {
    tubes: HashMap<TubeName, HashMap<Key, KeySlot>>,
    /// (end, tube, key) of each open window, soonest first.
    windows: BTreeSet<(Nanos, TubeName, Key)>,
    pub limits: KeyLimits,
    pub evicted: u64,
}

impl KeyIndex {
    pub fn get(&self, tube: &TubeName, key: &Key) -> KeySlot {
        self.tubes
            .get(tube)
            .and_then(|keys| keys.get(key).copied())
            .unwrap_or(KeySlot::Free)
    }

    /// Set what `key` names in `tube` (`Free` removes it).
    pub fn set(&mut self, tube: &TubeName, key: &Key, slot: KeySlot) {
        if let KeySlot::Window { until, .. } = self.get(tube, key) {
            self.windows.remove(&(until, tube.clone(), key.clone()));
        }
        if let KeySlot::Window { until, .. } = slot {
            self.windows.insert((until, tube.clone(), key.clone()));
        }
        match slot {
            KeySlot::Free => {
                if let Some(keys) = self.tubes.get_mut(tube) {
                    keys.remove(key);
                    if keys.is_empty() {
                        self.tubes.remove(tube);
                    }
                }
            }
            slot => {
                self.tubes
                    .entry(tube.clone())
                    .or_default()
                    .insert(key.clone(), slot);
            }
        }
    }

    /// When the soonest window ends.
    pub fn next_end(&self) -> Option<Nanos> {
        self.windows.first().map(|(until, _, _)| *until)
    }

    /// The window that ends soonest, if it has ended by `now` or the windows are over
    /// their bound (then it is counted as evicted).
    fn pop_ended(&mut self, now: Nanos) -> Option<(TubeName, Key)> {
        let over = self.windows.len() as u64 > self.limits.windows_max;
        let (until, tube, key) = self.windows.first().cloned()?;
        if until > now && !over {
            return None;
        }
        if until > now {
            self.evicted += 1;
        }
        self.set(&tube, &key, KeySlot::Free);
        Some((tube, key))
    }
}

impl Contents {
    /// What `key` names in `tube` at `now`: a job and its state, or a deleted job
    /// inside its window.
    pub fn key_lookup(&self, tube: &TubeName, key: &Key, now: Nanos) -> Option<(JobId, KeyState)> {
        match self.keys.get(tube, key) {
            KeySlot::Live(id) => self.jobs.get(&id).map(|j| (id, key_state(j.state))),
            KeySlot::Window { id, until } if until > now => Some((id, KeyState::Deleted)),
            _ => None,
        }
    }

    /// Set a key's slot and note it for persistence.
    fn set_key(&mut self, tube: &TubeName, key: &Key, slot: KeySlot) {
        self.keys.set(tube, key, slot);
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.key_changed(tube, key);
        }
    }

    /// A keyed put (see [`put_decision`]); `insert` makes a new job.
    pub fn put_keyed(
        &mut self,
        job: NewJob,
        pk: &PutKey,
        now: Nanos,
        insert: impl FnOnce(&mut Contents, JobId, NewJob),
    ) -> KeyedPut {
        let tube = job.tube.clone();
        let found = self.key_lookup(&tube, &pk.key, now);
        let window_ms = pk.window.as_millis();
        match put_decision(pk.mode, found) {
            PutDecision::Answer(answer) => answer,
            PutDecision::Insert => {
                let id = self.alloc_id();
                insert(self, id, job);
                if let Some(j) = self.jobs.get_mut(&id) {
                    j.key = Some(Box::new(JobKey {
                        key: pk.key.clone(),
                        window_ms,
                    }));
                }
                self.set_key(&tube, &pk.key, KeySlot::Live(id));
                KeyedPut::Inserted(id)
            }
            PutDecision::Replace(id) => {
                self.replace(id, job, window_ms, now);
                let state = self.jobs.get(&id).map_or(JobState::Ready, |j| j.state);
                KeyedPut::Replaced(id, key_state(state))
            }
        }
    }

    /// Replace waiting job `id`'s body, priority, delay, TTR and window; it takes its
    /// new place by (pri, id), as a released job does. Persistence rewrites it whole.
    fn replace(&mut self, id: JobId, job: NewJob, window_ms: u64, now: Nanos) {
        self.detach(id);
        let Some(j) = self.jobs.get_mut(&id) else {
            return;
        };
        j.pri = job.pri;
        j.delay_ms = job.delay_ms;
        j.ttr_ms = job.ttr_ms;
        j.body = job.body;
        if let Some(k) = j.key.as_deref_mut() {
            k.window_ms = window_ms;
        }
        // The body changed: what persistence holds of the job is no longer it.
        j.stored = super::Stored::Unknown;
        self.attach_after(id, job.delay_ms, now);
    }

    /// Job `id` is being deleted: free its key, or with `window` open the window its
    /// put asked for (ending the soonest window when too many are open).
    pub fn end_key(&mut self, id: JobId, now: Nanos, window: bool) {
        let Some(job) = self.jobs.get(&id) else {
            return;
        };
        let Some(k) = job.key.as_deref() else {
            return;
        };
        let (tube, key, window_ms) = (job.tube.clone(), k.key.clone(), k.window_ms);
        if self.keys.get(&tube, &key) != KeySlot::Live(id) {
            return;
        }
        let slot = if window && window_ms > 0 {
            KeySlot::Window {
                id,
                until: now + millis(window_ms),
            }
        } else {
            KeySlot::Free
        };
        self.set_key(&tube, &key, slot);
        // Over the bound: the soonest window ends now (and any already past).
        self.sweep_windows(now);
    }

    /// End every window due by `now` (the timer's tick).
    pub fn sweep_windows(&mut self, now: Nanos) {
        while let Some((tube, key)) = self.keys.pop_ended(now) {
            if let Some(journal) = self.journal.as_deref_mut() {
                journal.key_changed(&tube, &key);
            }
        }
    }

    /// Job `id` moved from tube `from` to another (the operator API): it leaves its key
    /// behind, freed (as shared mode's `edit.lua` does).
    pub fn move_key(&mut self, id: JobId, from: &TubeName) {
        let Some(job) = self.jobs.get_mut(&id) else {
            return;
        };
        let Some(k) = job.key.take() else {
            return;
        };
        if self.keys.get(from, &k.key) == KeySlot::Live(id) {
            self.set_key(from, &k.key, KeySlot::Free);
        }
    }

    /// Run a command by key (see [`KeyOp`]).
    pub fn key_op(
        &mut self,
        conn: ConnId,
        tube: &TubeName,
        key: &Key,
        op: KeyOp,
        now: Nanos,
    ) -> KeyOutcome {
        let Some((id, state)) = self.key_lookup(tube, key, now) else {
            return KeyOutcome::NotFound;
        };
        let mine = self.jobs.get(&id).is_some_and(|j| j.owned_by(conn));
        match (op, state) {
            (KeyOp::Find, _) => KeyOutcome::Found(id, state),
            (_, KeyState::Deleted) => KeyOutcome::NotFound,
            (KeyOp::Delete, KeyState::Reserved) if !mine => KeyOutcome::NotFound,
            (KeyOp::Delete, _) => {
                self.delete_job(id, now, true, false, (EventKind::Delete, conn));
                KeyOutcome::Done(id)
            }
            (KeyOp::Kick, KeyState::Buried | KeyState::Delayed) => {
                self.kick_one(id, now);
                KeyOutcome::Done(id)
            }
            (KeyOp::Kick, _) => KeyOutcome::NotFound,
            (KeyOp::Bury { .. }, KeyState::Buried) => KeyOutcome::Conflict(id, state),
            (KeyOp::Bury { .. }, KeyState::Reserved) if !mine => KeyOutcome::Conflict(id, state),
            (KeyOp::Bury { pri }, _) => {
                self.bury_job(id, pri);
                self.note(id, EventKind::Bury, conn, now);
                KeyOutcome::Done(id)
            }
            (KeyOp::Retime { delay_ms }, KeyState::Ready | KeyState::Delayed) => {
                self.detach(id);
                if let Some(j) = self.jobs.get_mut(&id) {
                    j.delay_ms = delay_ms;
                }
                self.attach_after(id, delay_ms, now);
                KeyOutcome::Done(id)
            }
            (KeyOp::Retime { .. }, _) => KeyOutcome::Conflict(id, state),
        }
    }

    /// Delete job `id` (its holder already checked): its key freed, or its window
    /// opened with `window`; `counted` in its tube's `cmd-delete`; `by` the event
    /// retention records. Its tube may go.
    pub fn delete_job(
        &mut self,
        id: JobId,
        now: Nanos,
        window: bool,
        counted: bool,
        by: (EventKind, ConnId),
    ) -> bool {
        self.end_key(id, now, window);
        self.detach(id);
        let Some(job) = self.remove_job(id) else {
            return false;
        };
        if counted && let Some(t) = self.tubes.get_mut(&job.tube) {
            t.cmd_delete += 1;
        }
        self.maybe_drop_tube(&job.tube);
        self.retain(id, job, by.0, by.1.0, now);
        true
    }
}
