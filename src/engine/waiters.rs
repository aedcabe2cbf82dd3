//! Connections blocked in `reserve`, and the hand-over of jobs to them.
//!
//! Ownership: the registry is the engine's, behind a std `Mutex` that is never held
//! across an `.await`. Each entry belongs to one waiting connection, which holds the
//! receiving end of the entry's oneshot.
//!
//! Protocol between a serve pass and a waiter (so that neither a job nor a wake-up is
//! lost, and a waiter is answered exactly once):
//! - a pass *claims* an entry before asking the store to reserve for it; while claimed,
//!   only the pass may remove it;
//! - with a job, the pass removes the entry and sends the job;
//! - without one, the pass unclaims it; if the waiter gave up meanwhile (timeout,
//!   DEADLINE_SOON, hang-up), the pass removes it and sends that answer instead;
//! - a waiter that gives up removes its entry itself when unclaimed, otherwise leaves
//!   its reason for the pass and keeps waiting for the pass's answer.
//!
//! Entries are served in registration order (sequence numbers), which keeps the choice
//! deterministic; the reference's order among several waiters is not strictly FIFO
//! either, and no client can rely on it.

use std::collections::{BTreeMap, BTreeSet};

use foldhash::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::protocol::{Reply, TubeName};
use crate::store::{ConnId, Nanos, Reserved};
use crate::util::lock;

/// Why a waiter stops waiting without a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GiveUp {
    TimedOut,
    DeadlineSoon,
}

impl GiveUp {
    pub fn reply(self) -> Reply {
        match self {
            GiveUp::TimedOut => Reply::TimedOut,
            GiveUp::DeadlineSoon => Reply::DeadlineSoon,
        }
    }

    /// The reply of a reserve that gave up, or of a `reserve-batch` (`batch`: its
    /// most), whose timeout is `RESERVED_BATCH 0`.
    pub fn reply_to(self, batch: Option<usize>) -> Reply {
        match (self, batch) {
            (GiveUp::TimedOut, Some(_)) => Reply::ReservedBatch(Vec::new()),
            _ => self.reply(),
        }
    }
}

/// The answer a waiter receives.
#[derive(Debug)]
pub enum Delivery {
    Job(Reserved),
    GaveUp(GiveUp),
}

/// One reserve waiting for a job.
#[derive(Debug)]
struct Waiter {
    conn: ConnId,
    watched: Arc<[TubeName]>,
    /// When it began to wait, and when it gives up (for the clients listing).
    since: Nanos,
    until: Option<Nanos>,
    tx: oneshot::Sender<Delivery>,
    claimed: bool,
    gave_up: Option<GiveUp>,
}

#[derive(Debug, Default)]
struct Registry {
    next_seq: u64,
    entries: BTreeMap<u64, Waiter>,
    by_tube: HashMap<TubeName, BTreeSet<u64>>,
}

impl Registry {
    fn remove(&mut self, seq: u64) -> Option<Waiter> {
        let entry = self.entries.remove(&seq)?;
        for t in entry.watched.iter() {
            if let Some(set) = self.by_tube.get_mut(t) {
                set.remove(&seq);
                if set.is_empty() {
                    self.by_tube.remove(t);
                }
            }
        }
        Some(entry)
    }
}

/// A connection's blocked reserve, as the clients listing shows it.
#[derive(Clone, Debug)]
pub struct Blocked {
    pub since: Nanos,
    /// When it gives up (its timeout, or the DEADLINE_SOON margin); `None`: never.
    pub until: Option<Nanos>,
    pub watched: Arc<[TubeName]>,
}

/// A claimed waiter, for a serve pass to reserve a job for.
#[derive(Debug)]
pub struct Claim {
    pub seq: u64,
    pub conn: ConnId,
    pub watched: Arc<[TubeName]>,
}

#[derive(Debug, Default)]
pub struct Waiters {
    registry: Mutex<Registry>,
    count: AtomicUsize,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        lock(&self.registry)
    }

    /// True when nobody waits (a cheap check before a serve pass).
    pub fn is_empty(&self) -> bool {
        self.count.load(Ordering::SeqCst) == 0
    }

    pub fn total(&self) -> u64 {
        self.count.load(Ordering::SeqCst) as u64
    }

    /// The tubes someone waits on.
    pub fn tubes(&self) -> Vec<TubeName> {
        self.lock().by_tube.keys().cloned().collect()
    }

    /// How many connections wait on `tube` (`current-waiting` of `stats-tube`).
    pub fn waiting_on(&self, tube: &TubeName) -> u64 {
        self.lock().by_tube.get(tube).map_or(0, |s| s.len() as u64)
    }

    /// The blocked reserves of the connections in `conns` (their waiting entries, at
    /// most one each): one pass over the waiters.
    pub fn blocked_of(&self, conns: &HashSet<u64>) -> HashMap<u64, Blocked> {
        if self.is_empty() {
            return HashMap::default();
        }
        let r = self.lock();
        r.entries
            .values()
            .filter(|e| conns.contains(&e.conn.0))
            .map(|e| {
                let b = Blocked {
                    since: e.since,
                    until: e.until,
                    watched: e.watched.clone(),
                };
                (e.conn.0, b)
            })
            .collect()
    }

    /// Whether anyone waits on one of `tubes`.
    pub fn waiting_on_any(&self, tubes: &[TubeName]) -> bool {
        if self.is_empty() {
            return false;
        }
        let r = self.lock();
        tubes.iter().any(|t| r.by_tube.contains_key(t))
    }

    /// Add a waiter; it is answered through the returned receiver.
    pub fn register(
        &self,
        conn: ConnId,
        watched: Arc<[TubeName]>,
        since: Nanos,
        until: Option<Nanos>,
    ) -> (u64, oneshot::Receiver<Delivery>) {
        let (tx, rx) = oneshot::channel();
        let mut r = self.lock();
        r.next_seq += 1;
        let seq = r.next_seq;
        for t in watched.iter() {
            r.by_tube.entry(t.clone()).or_default().insert(seq);
        }
        r.entries.insert(
            seq,
            Waiter {
                conn,
                watched,
                since,
                until,
                tx,
                claimed: false,
                gave_up: None,
            },
        );
        self.count.fetch_add(1, Ordering::SeqCst);
        (seq, rx)
    }

    /// The waiter gives up. True when it was removed here (the caller answers
    /// `reason`); false when a pass holds it (the pass will answer through the channel)
    /// or it was already answered.
    pub fn give_up(&self, seq: u64, reason: GiveUp) -> bool {
        let mut r = self.lock();
        match r.entries.get_mut(&seq) {
            Some(e) if e.claimed => {
                e.gave_up.get_or_insert(reason);
                false
            }
            Some(_) => {
                r.remove(seq);
                self.count.fetch_sub(1, Ordering::SeqCst);
                true
            }
            None => false,
        }
    }

    /// Forget a waiter whose connection is going away. If a pass holds it, the pass's
    /// delivery will fail and the pass returns the job.
    pub fn forget(&self, seq: u64) {
        let mut r = self.lock();
        match r.entries.get_mut(&seq) {
            // The pass will remove it when it unclaims (its answer goes nowhere).
            Some(e) if e.claimed => {
                e.gave_up.get_or_insert(GiveUp::TimedOut);
            }
            Some(_) => {
                r.remove(seq);
                self.count.fetch_sub(1, Ordering::SeqCst);
            }
            None => {}
        }
    }

    /// Claim the first unclaimed waiter after `after` that watches one of `tubes`.
    pub fn claim_next(&self, tubes: &HashSet<TubeName>, after: u64) -> Option<Claim> {
        let mut r = self.lock();
        let seq = tubes
            .iter()
            .filter_map(|t| r.by_tube.get(t))
            .filter_map(|set| {
                set.range(after + 1..)
                    .find(|s| r.entries.get(s).is_some_and(|e| !e.claimed))
                    .copied()
            })
            .min()?;
        let e = r.entries.get_mut(&seq)?;
        e.claimed = true;
        Some(Claim {
            seq,
            conn: e.conn,
            watched: e.watched.clone(),
        })
    }

    /// Hand `job` to the claimed waiter `seq`. Gives the job back when the waiter's
    /// connection is gone, so the caller can return it to the store.
    pub fn deliver(&self, seq: u64, job: Reserved) -> Result<(), Reserved> {
        let entry = {
            let mut r = self.lock();
            let entry = r.remove(seq);
            if entry.is_some() {
                self.count.fetch_sub(1, Ordering::SeqCst);
            }
            entry
        };
        let Some(e) = entry else { return Err(job) };
        match e.tx.send(Delivery::Job(job)) {
            Err(Delivery::Job(job)) => Err(job),
            _ => Ok(()),
        }
    }

    /// Release a claim that found no job; answer the waiter now if it gave up meanwhile.
    pub fn unclaim(&self, seq: u64) {
        let mut r = self.lock();
        let Some(e) = r.entries.get_mut(&seq) else {
            return;
        };
        e.claimed = false;
        if let Some(reason) = e.gave_up
            && let Some(e) = r.remove(seq)
        {
            self.count.fetch_sub(1, Ordering::SeqCst);
            let _ = e.tx.send(Delivery::GaveUp(reason));
        }
    }
}
