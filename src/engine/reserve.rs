//! `reserve`, `reserve-with-timeout` and `reserve-batch`: the DEADLINE_SOON check,
//! then a job (or a batch) at once, or a waiter that serve passes answer.
//!
//! A blocking reserve asks the store once. Two ways, chosen by whether anyone already
//! waits on one of its tubes:
//! - nobody does: the reserve asks the store itself, concurrently with everything else
//!   (no job is owed to anyone, so it takes what is there). If that finds nothing it
//!   registers its waiter, and needs a serve pass only when a job may have become ready
//!   in between: when any wake-up ([`Engine::serve`], a shared store's event, a job
//!   returned by a pass) was counted since just before it asked. A wake-up counted
//!   later finds the waiter registered and serves it.
//! - someone does: it registers first and awaits a serve pass for its tubes, whose
//!   reserve is its only one. The pass serves waiters in registration order, so the
//!   new reserve does not take a job an older waiter is owed (its pass may still be on
//!   the way: with the serve task, a put's reply waits for its pass, but other
//!   connections run meanwhile).
//!
//! Why not always register first: then every reserve, even one with a job ready, goes
//! through the serve task and waits for the pass in flight before its own; measured on
//! the put/reserve/delete cycle, that cost the Redis engine about 15 % of its jobs/s
//! and the memory engine about 3 µs of CPU per job.
//!
//! Invariants: a job handed over at once (by the store or by that first pass), a
//! timeout of 0, or a safety margin already due is answered as a plain reply
//! ([`Outcome::Reply`]), exactly as a reserve that never blocked, so a pipelined reserve
//! does not make the connection flush; only a reserve still unanswered becomes
//! [`Outcome::Wait`]. A store failure answers INTERNAL_ERROR, in that first pass too
//! (it stops there, so this waiter may not have been looked at). A RESERVED, however it
//! was handed over, is acknowledged as its reservation says (`Reserved::last_change`);
//! every other answer once the store's changes up to it are durable.
//!
//! `reserve-batch` (docs/EXTENSIONS.md, *Batches*) is the same reserve taking up to n
//! jobs where a reserve takes one (one store call: one change to persist), never
//! waiting to fill the batch: a waiter is handed one job by a serve pass as any other,
//! then takes what else is ready at that moment (`Waiting`'s batch).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Engine, GiveUp, Outcome, Session, Waiting};
use crate::protocol::Reply;
use crate::store::{NANOS_PER_SEC, Nanos, Store, StoreResult};

impl Engine {
    /// `reserve` (no timeout) / `reserve-with-timeout` (`timeout` seconds).
    pub(super) async fn reserve(
        self: &Arc<Self>,
        s: &mut Session,
        timeout: Option<u32>,
    ) -> StoreResult<Outcome> {
        let timeout = timeout.map(|t| u64::from(t) * NANOS_PER_SEC);
        self.reserve_up_to(s, timeout, None).await
    }

    /// A reserve waiting at most `timeout` (ns; `None`: no bound) that takes one job,
    /// or with `batch` up to that many (`reserve-batch`).
    pub(super) async fn reserve_up_to(
        self: &Arc<Self>,
        s: &mut Session,
        timeout: Option<Nanos>,
        batch: Option<usize>,
    ) -> StoreResult<Outcome> {
        self.mark_worker(s);
        let watched = s.watched();
        let now = self.clock.now();
        // The safety margin: one second before the soonest deadline among the jobs this
        // connection holds.
        let margin = self
            .store
            .soonest_deadline(s.id)
            .await?
            .map(|d| d.saturating_sub(NANOS_PER_SEC));
        let in_margin = margin.is_some_and(|m| now >= m);
        // The reference answers DEADLINE_SOON at once only when no watched tube has a
        // ready job (paused or not); otherwise it hands out a job (beanstalkd #646).
        if in_margin && !self.store.has_ready(&watched).await? {
            return Ok(Outcome::Reply(self.after_latest(Reply::DeadlineSoon)));
        }
        let timeout_at = timeout.map(|t| now.saturating_add(t));
        let wake = wake_at(margin, timeout_at);
        let owed_elsewhere = self.waiters.waiting_on_any(&watched);
        let wakeups = self.wakeups.load(Ordering::SeqCst);
        if !owed_elsewhere {
            match batch {
                None => {
                    if let Some(job) = self.store.reserve(s.id, &watched, now).await? {
                        return Ok(Outcome::Reply(self.hand_out(job)));
                    }
                }
                Some(max) => {
                    let jobs = self.store.reserve_many(s.id, &watched, max, now).await?;
                    if !jobs.is_empty() {
                        return Ok(Outcome::Reply(self.hand_out_batch(None, jobs)));
                    }
                }
            }
            if let Some((at, why)) = wake
                && at <= now
            {
                return Ok(Outcome::Reply(self.after_latest(why.reply_to(batch))));
            }
        }
        let mut waiting = Waiting::register(self.clone(), s.id, watched.clone(), now, wake, batch);
        let needs_pass = owed_elsewhere || self.wakeups.load(Ordering::SeqCst) != wakeups;
        let store_failed = needs_pass && self.serve_checked(watched.iter().cloned()).await.is_err();
        if store_failed {
            tracing::warn!(
                conn = s.id.0,
                "a reserve failed in the store (the error is logged above) and is answered \
                 INTERNAL_ERROR unless a job was handed over (clients may retry)"
            );
        }
        Ok(match waiting.answer_now(now, store_failed) {
            Some(answer) => Outcome::Reply(waiting.finish(answer).await),
            None => Outcome::Wait(waiting),
        })
    }
}

/// When a wait ends without a job, and why: the sooner of the safety margin and the
/// timeout. DEADLINE_SOON wins a tie, as in the reference's connection tick.
fn wake_at(margin: Option<Nanos>, timeout_at: Option<Nanos>) -> Option<(Nanos, GiveUp)> {
    match (margin, timeout_at) {
        (Some(m), Some(t)) if m <= t => Some((m, GiveUp::DeadlineSoon)),
        (_, Some(t)) => Some((t, GiveUp::TimedOut)),
        (Some(m), None) => Some((m, GiveUp::DeadlineSoon)),
        (None, None) => None,
    }
}
