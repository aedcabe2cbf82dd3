//! A connection's side of one blocked reserve: [`Waiting`] holds the waiter's entry in
//! the registry (`waiters.rs`) and waits for whichever comes first: a job from a serve
//! pass, the wake time (the timeout or the safety margin; a job due by then comes
//! first, see [`crate::engine::Timer::catch_up`]), or the client's hang-up.
//!
//! Ownership: created by the reserve path, then owned by the connection task that
//! drives it. Invariants: it is answered exactly once (the claim protocol of
//! `waiters.rs` decides between a delivery and giving up), with its acknowledgement (a
//! RESERVED as its reservation says, any other answer once the store's changes up to
//! it are durable); dropping it unanswered withdraws the waiter (and a job a pass
//! reserves for it meanwhile goes back).
//!
//! A `reserve-batch` waits the same way for one job; [`Waiting::finish`] then takes
//! what else is ready (its caller awaits it outside any `select!`, so the jobs it
//! reserves are never dropped half-way).

use std::sync::Arc;

use tokio::sync::oneshot;
use tokio::sync::oneshot::error::TryRecvError;

use super::{Answer, Delivery, Engine, GiveUp};
use crate::protocol::{Reply, TubeName};
use crate::store::{ConnId, Nanos};

/// A reserve waiting for a job, a timeout, the safety margin, or a hang-up.
#[derive(Debug)]
pub struct Waiting {
    engine: Arc<Engine>,
    seq: u64,
    rx: oneshot::Receiver<Delivery>,
    wake: Option<(Nanos, GiveUp)>,
    /// The wake time passed and the waiter asked to give up.
    woke: bool,
    done: bool,
    /// A `reserve-batch`: its most jobs, and for whom (`None`: a reserve).
    batch: Option<(usize, ConnId, Arc<[TubeName]>)>,
}

impl Waiting {
    /// Register a waiter for `conn` on `watched`, from `now`, that gives up at `wake`.
    pub(super) fn register(
        engine: Arc<Engine>,
        conn: ConnId,
        watched: Arc<[TubeName]>,
        now: Nanos,
        wake: Option<(Nanos, GiveUp)>,
        batch: Option<usize>,
    ) -> Waiting {
        let until = wake.map(|(at, _)| at);
        let batch = batch.map(|max| (max, conn, watched.clone()));
        let (seq, rx) = engine.waiters.register(conn, watched, now, until);
        Waiting {
            engine,
            seq,
            rx,
            wake,
            woke: false,
            done: false,
            batch,
        }
    }

    /// The answer to give, from the one [`Waiting::wait`], [`Waiting::hang_up`] or
    /// [`Waiting::answer_now`] gave: a reserve's as it is; a `reserve-batch`'s made a
    /// batch of its job and what else is ready now, or `RESERVED_BATCH 0` at its
    /// timeout. Not cancel-safe (it may reserve): await it to the end.
    pub async fn finish(&self, answer: Answer) -> Answer {
        match &self.batch {
            None => answer,
            Some((max, conn, watched)) => {
                self.engine.fill_batch(*conn, watched, *max, answer).await
            }
        }
    }

    /// Right after the first serve pass for this waiter: the answer if it is known
    /// without waiting, as of `now`. A job already handed over; INTERNAL_ERROR if the
    /// store failed in that pass (as when a reserve asked the store itself); or the
    /// wake time already reached. In the last two cases the waiter is withdrawn here,
    /// unless a pass holds it, which then answers through the channel instead.
    pub(super) fn answer_now(&mut self, now: Nanos, store_failed: bool) -> Option<Answer> {
        match self.rx.try_recv() {
            Ok(delivery) => return Some(self.answered(Some(delivery))),
            Err(TryRecvError::Closed) => return Some(self.answered(None)),
            Err(TryRecvError::Empty) => {}
        }
        let (reply, why) = match self.wake {
            _ if store_failed => (Reply::InternalError, GiveUp::TimedOut),
            Some((at, why)) if at <= now => (why.reply(), why),
            _ => return None,
        };
        self.woke = true;
        if self.engine.waiters.give_up(self.seq, why) {
            self.done = true;
            return Some(self.engine.after_latest(reply));
        }
        None
    }

    /// Wait for the answer. Cancel-safe: may be polled again after being interrupted.
    pub async fn wait(&mut self) -> Answer {
        loop {
            let wake = if self.woke { None } else { self.wake };
            let clock = self.engine.clock;
            let sleep = async move {
                match wake {
                    Some((at, _)) => tokio::time::sleep_until(clock.instant_at(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                delivery = &mut self.rx => return self.answered(delivery.ok()),
                _ = sleep => {
                    let Some((at, why)) = wake else { continue };
                    // What is due by then is applied and served first, as in the
                    // reference's tick (see `timer.rs`).
                    self.engine.timer.catch_up(at, &self.engine.stop).await;
                    self.woke = true;
                    if self.engine.waiters.give_up(self.seq, why) {
                        self.done = true;
                        return self.engine.after_latest(why.reply());
                    }
                }
            }
        }
    }

    /// The client half-closed while waiting: the reference answers TIMED_OUT.
    pub async fn hang_up(&mut self) -> Answer {
        if !self.woke {
            self.woke = true;
            if self.engine.waiters.give_up(self.seq, GiveUp::TimedOut) {
                self.done = true;
                return self.engine.after_latest(GiveUp::TimedOut.reply());
            }
        }
        self.wait().await
    }

    /// The registry's answer, with its acknowledgement (a RESERVED as its reservation
    /// says). A closed channel (the entry vanished unanswered) cannot happen under the
    /// claim protocol; it is answered as a failure rather than left waiting forever.
    fn answered(&mut self, delivery: Option<Delivery>) -> Answer {
        self.done = true;
        match delivery {
            Some(Delivery::Job(job)) => Answer::reserved(job),
            Some(Delivery::GaveUp(why)) => self.engine.after_latest(why.reply()),
            None => self.engine.after_latest(Reply::InternalError),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.done {
            self.engine.waiters.forget(self.seq);
        }
    }
}
