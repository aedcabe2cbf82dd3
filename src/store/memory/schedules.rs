//! The memory store's schedule cursors (docs/SCHEDULES.md): a tick fired,
//! skipped or forgotten as one transition under the store's lock.
//!
//! Invariants:
//! - a tick is fired only if it is past its schedule's cursor, and the check, the put
//!   (the store's own `put` or keyed `put`, so keys and everything a put does apply)
//!   and the cursor's advance happen under one lock, so no two fires of one tick both
//!   pass the check;
//! - every change of a cursor is noted in the journal with the job it made
//!   (`Journal::schedule_changed`), so a cut writes the cursor and its job together.

use super::contents::Contents;
use super::make::{put_keyed_new, put_new};
use crate::store::keys::{KeyMode, KeyedPut, PutKey};
use crate::store::{Cursor, Fired, JobId, Nanos, ScheduleName, TickPut};

impl Contents {
    /// [`crate::store::Store::fire_tick`].
    pub fn fire_tick(&mut self, tick: &TickPut, now: Nanos) -> Fired {
        let last_tick_ms = self.cursor_of(&tick.schedule).last_tick_ms;
        if tick.tick_ms <= last_tick_ms {
            return Fired::Stale { last_tick_ms };
        }
        let job = tick.job.clone();
        let fired = match &tick.key {
            None => Fired::Made(put_new(self, job, now)),
            Some(key) => {
                // A tick never replaces the job its key names: a schedule's key dedupes
                // whatever mode it was handed with.
                let key = PutKey {
                    mode: KeyMode::Dedupe,
                    ..key.clone()
                };
                match put_keyed_new(self, job, &key, now) {
                    KeyedPut::Inserted(id) => Fired::Made(id),
                    KeyedPut::Existing(id, state)
                    | KeyedPut::Replaced(id, state)
                    | KeyedPut::Conflict(id, state) => Fired::Deduped(id, state),
                }
            }
        };
        let (last_job, made) = match fired {
            Fired::Made(id) => (id, Some(id)),
            Fired::Deduped(id, _) => (id, None),
            Fired::Stale { .. } | Fired::Early => (0, None),
        };
        let c = self.cursors.entry(tick.schedule.clone()).or_default();
        c.last_tick_ms = tick.tick_ms;
        c.last_job = last_job;
        c.skipped += tick.skipped;
        match made {
            Some(_) => c.fired += 1,
            None => c.deduped += 1,
        }
        self.note_schedule(&tick.schedule, made);
        fired
    }

    /// [`crate::store::Store::skip_to`].
    pub fn skip_to(&mut self, name: &ScheduleName, tick_ms: u64, skipped: u64) -> bool {
        if tick_ms <= self.cursor_of(name).last_tick_ms {
            return false;
        }
        let c = self.cursors.entry(name.clone()).or_default();
        c.last_tick_ms = tick_ms;
        c.skipped += skipped;
        self.note_schedule(name, None);
        true
    }

    /// [`crate::store::Store::schedule_cursors`]: every cursor, in name order.
    pub fn schedule_cursors(&self) -> Vec<(ScheduleName, Cursor)> {
        let mut all: Vec<_> = self.cursors.iter().map(|(n, c)| (n.clone(), *c)).collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// [`crate::store::Store::drop_cursor`].
    pub fn drop_cursor(&mut self, name: &ScheduleName) {
        if self.cursors.remove(name).is_some() {
            self.note_schedule(name, None);
        }
    }

    /// The cursor of `name` (a schedule that never fired is at 0).
    fn cursor_of(&self, name: &ScheduleName) -> Cursor {
        self.cursors.get(name).copied().unwrap_or_default()
    }

    fn note_schedule(&mut self, name: &ScheduleName, made: Option<JobId>) {
        if let Some(journal) = self.journal.as_deref_mut() {
            journal.schedule_changed(name, made);
        }
    }
}
