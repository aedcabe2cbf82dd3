//! Reserve attempts: the owner token of each, and undoing the ones whose answer was
//! lost.
//!
//! A timeout does not cancel a script Redis already received: a reserve that answered
//! an error may still run and reserve a job nobody was told of. Each attempt therefore
//! reserves under a token of its own (instance, connection, attempt number); the token
//! of a failed attempt that may have reached Redis is remembered (one refused before it
//! was sent reserved nothing), and a later tick returns any job reserved under it to
//! ready, uncounted, so the undo can never touch another attempt's reservation.
//!
//! Bounds: the tokens are kept per tube, so one walk of a tube's reserved set undoes
//! every lost attempt there (an outage with workers retrying leaves thousands); a tick
//! spends at most [`RECLAIM_CALLS`] script calls on it, after the tick's due work, so
//! undoing never delays a timer; at most [`MOST_LOST`] tokens are kept. A token not
//! kept is harmless: a reservation nobody was told of also ends at its TTR.
//!
//! Ownership: [`Attempts`] belongs to the store; its lock is never held across an
//! `.await`. A token stays remembered until a reclaim of every tube it may have
//! reserved in has succeeded.

use foldhash::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{RedisStore, SCRIPT_CHUNK};
use crate::protocol::TubeName;
use crate::store::{ConnId, StoreError, StoreResult};
use crate::util::lock;

/// The most script calls one tick spends undoing lost attempts.
const RECLAIM_CALLS: usize = 32;

/// The most tokens (summed over tubes) kept for undoing.
const MOST_LOST: usize = 100_000;

/// The most tokens one walk of a tube's reserved set looks for.
const OWNERS_PER_WALK: usize = 1000;

#[derive(Default)]
struct Lost {
    /// Per tube, the tokens of lost attempts that may have reserved in it.
    by_tube: HashMap<TubeName, Vec<String>>,
    /// How many tokens `by_tube` holds.
    count: usize,
    /// Tokens not kept since the last warning.
    dropped: u64,
}

pub struct Attempts {
    instance: String,
    next: AtomicU64,
    lost: Mutex<Lost>,
}

impl Attempts {
    pub fn new(instance: &str) -> Attempts {
        Attempts {
            instance: instance.to_string(),
            next: AtomicU64::new(0),
            lost: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lost> {
        lock(&self.lost)
    }

    /// Every lost attempt forgotten: they were made in a namespace that is gone.
    pub fn clear(&self) {
        *self.lock() = Lost::default();
    }

    /// A fresh owner token for one reserve attempt by `conn`.
    pub fn owner(&self, conn: ConnId) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        // Written piece by piece: `format!` cost a reserve ~1,400 instructions, about
        // 2 % of redstalk's own per job in shared mode.
        let (mut c, mut a) = (itoa::Buffer::new(), itoa::Buffer::new());
        let (c, a) = (c.format(conn.0), a.format(n));
        let mut owner = String::with_capacity(self.instance.len() + c.len() + a.len() + 2);
        for part in [&self.instance, ":", c, ":", a] {
            owner.push_str(part);
        }
        owner
    }

    /// An attempt by `owner` on `tubes` failed with `err`: remember it if Redis may
    /// have run it.
    pub fn failed(&self, tubes: &[TubeName], owner: &str, err: &StoreError) {
        if err.may_have_applied() {
            self.keep(tubes.iter().map(|t| (t.clone(), vec![owner.to_string()])));
        }
    }

    /// A reservation by `owner` in `tube` was made but cannot be answered (its large
    /// body could not be read): undo it like a lost one.
    pub fn unanswered(&self, tube: &TubeName, owner: &str) {
        self.keep([(tube.clone(), vec![owner.to_string()])]);
    }

    /// Remember tokens per tube (up to [`MOST_LOST`] in all).
    fn keep(&self, lost: impl IntoIterator<Item = (TubeName, Vec<String>)>) {
        let mut l = self.lock();
        for (tube, owners) in lost {
            let room = MOST_LOST.saturating_sub(l.count).min(owners.len());
            l.dropped += (owners.len() - room) as u64;
            l.count += room;
            l.by_tube
                .entry(tube)
                .or_default()
                .extend(owners.into_iter().take(room));
        }
    }

    /// A tube's tokens, to undo (at most [`OWNERS_PER_WALK`]).
    fn take_one(&self) -> Option<(TubeName, Vec<String>)> {
        let mut l = self.lock();
        let tube = l.by_tube.keys().next()?.clone();
        let owners = l.by_tube.get_mut(&tube)?;
        let rest = owners.split_off(owners.len().min(OWNERS_PER_WALK));
        let taken = std::mem::replace(owners, rest);
        if owners.is_empty() {
            l.by_tube.remove(&tube);
        }
        l.count -= taken.len();
        Some((tube, taken))
    }

    /// How many tokens were not kept since the last call.
    fn take_dropped(&self) -> u64 {
        std::mem::take(&mut self.lock().dropped)
    }
}

impl RedisStore {
    /// Undo reservations made by reserve attempts whose answer was lost, spending at
    /// most [`RECLAIM_CALLS`] script calls; the tubes that got jobs back are added to
    /// `woken`. What is left, or failed (Redis failed again), waits for the next tick.
    pub(super) async fn reclaim_lost(&self, woken: &mut Vec<TubeName>) -> StoreResult<()> {
        let dropped = self.attempts.take_dropped();
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "too many reserve attempts lost their answer to undo them all; \
                 the jobs they may hold come back at their TTR"
            );
        }
        let mut calls = 0;
        while calls < RECLAIM_CALLS {
            let Some((tube, owners)) = self.attempts.take_one() else {
                return Ok(());
            };
            match self.reclaim(&tube, &owners, &mut calls).await {
                Ok(true) => woken.push(tube),
                Ok(false) => {}
                Err(err) => {
                    self.attempts.keep([(tube, owners)]);
                    return Err(err);
                }
            }
        }
        Ok(())
    }

    /// Return the jobs of `tube` reserved under any of `owners` to ready, walking its
    /// reserved set a chunk per call (counted in `calls`); whether any came back.
    async fn reclaim(
        &self,
        tube: &TubeName,
        owners: &[String],
        calls: &mut usize,
    ) -> StoreResult<bool> {
        let owners = owners.join("\n");
        let (mut cursor, mut any) = (String::from("0"), false);
        loop {
            *calls += 1;
            let step = self
                .run
                .on_tube(|s| &s.reclaim, &[], tube.as_str())
                .arg((&owners, &cursor, SCRIPT_CHUNK))
                .arg(self.ret_arg0())
                .run()
                .await?;
            any |= step.returned > 0;
            if step.cursor == "0" {
                return Ok(any);
            }
            cursor = step.cursor;
        }
    }
}
