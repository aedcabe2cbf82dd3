//! Batches and flush (docs/EXTENSIONS.md, *Batches*, *Flush*; issue 31 steps 4 and 5):
//! `reserve-batch`'s answers (its reserve is `reserve.rs`'), the list commands
//! (`delete-batch`, `release-batch`, `touch-batch`, `bury-batch`), and the flush of a
//! tube, shared by `flush-tube`, `flush-buried` and the operator API.
//!
//! Invariants: a list command is one store call (one change, acknowledged once);
//! each job a `reserve-batch` hands out is reserved as by `reserve` (TTR, `reserves`,
//! the wait histogram, the timer hinted), and the batch is acknowledged once, after
//! the latest change any of its reservations saw; a flush deletes in steps of at most
//! [`FLUSH_STEP`] jobs, each one store change, and lets every other connection run
//! between steps, so no client waits on it for more than a step.

use super::admin::AdminResult;
use super::admin_bulk::STEP;
use super::{Ack, Answer, Engine};
use crate::protocol::ext::{BatchOp, FlushStates};
use crate::protocol::{Reply, TubeName};
use crate::store::{ConnId, JobId, JobState, Reserved, Store, StoreResult};
use crate::time::millis;

/// The most jobs one step of a flush deletes: the `/bulk` API's step.
pub const FLUSH_STEP: usize = STEP;

impl Engine {
    /// RESERVED_BATCH of `jobs` (reserved together, plus `first`, already handed out
    /// by a serve pass, with its acknowledgement): each as `hand_out` makes a RESERVED,
    /// the whole acknowledged after the latest change any of them saw.
    pub(super) fn hand_out_batch(&self, first: Option<Answer>, jobs: Vec<Reserved>) -> Answer {
        let mut out = Vec::with_capacity(jobs.len() + 1);
        let mut ack = None;
        if let Some(Answer {
            reply: Reply::Reserved { id, body },
            ack: first_ack,
        }) = first
        {
            out.push((id, body));
            ack = Some(first_ack);
        }
        for job in jobs {
            let answer = self.hand_out(job);
            if let Reply::Reserved { id, body } = answer.reply {
                out.push((id, body));
            }
            ack = Some(ack.map_or(answer.ack, |a| later(a, answer.ack)));
        }
        Answer {
            reply: Reply::ReservedBatch(out),
            ack: ack.unwrap_or(Ack::Now),
        }
    }

    /// A `reserve-batch`'s answer once its wait ended with `answer` (see
    /// [`super::Waiting::finish`]): a job, and up to `max - 1` more that are ready now;
    /// a timeout is `RESERVED_BATCH 0`; DEADLINE_SOON and failures as they are.
    pub(super) async fn fill_batch(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        max: usize,
        answer: Answer,
    ) -> Answer {
        match answer.reply {
            Reply::Reserved { .. } => {
                let more = match max - 1 {
                    0 => Ok(Vec::new()),
                    n => {
                        let now = self.clock.now();
                        self.store.reserve_many(conn, watched, n, now).await
                    }
                };
                // The job in hand is the client's whatever the store says now.
                let more = more.unwrap_or_else(|err| {
                    tracing::warn!(%err, conn = conn.0, "a reserve-batch took one job only: the store failed");
                    Vec::new()
                });
                self.hand_out_batch(Some(answer), more)
            }
            Reply::TimedOut => Answer {
                reply: Reply::ReservedBatch(Vec::new()),
                ack: answer.ack,
            },
            _ => answer,
        }
    }

    /// A list command: `op` on each of `ids`, in one store call.
    pub(super) async fn batch(
        &self,
        conn: ConnId,
        op: BatchOp,
        ids: &[JobId],
    ) -> StoreResult<Reply> {
        let now = self.due_applied().await;
        let done = self.store.batch(conn, op, ids, now).await?;
        if let BatchOp::Release { delay, .. } = op
            && !delay.is_zero()
            && done.missing.len() < ids.len()
        {
            self.timer.hint(now + millis(delay.as_millis()));
        }
        if !done.woken.is_empty() {
            self.serve(done.woken).await;
        }
        Ok(Reply::Batch {
            kind: op.kind(),
            done: (ids.len() - done.missing.len()) as u32,
            missing: done.missing,
        })
    }

    /// Flush `tube`: delete its jobs in `states` that exist now, in steps of at most
    /// [`FLUSH_STEP`], yielding to every other task between steps; how many were
    /// deleted. A step that fails ends the flush with its error (the steps before it
    /// stand). The engine operation behind `flush-tube`, `flush-buried` and the API's
    /// flush route.
    ///
    /// With a persisted store (`-b`, leader mode) the next step waits until the last
    /// one is durable: a flush deletes as fast as it is written, one step a batch.
    /// Without that wait a million-job flush ran ahead of the committer, and every
    /// other client's reply (which waits for the latest change) waited for the whole
    /// backlog: INTERNAL_ERROR after the commit timeout.
    pub async fn flush(&self, tube: &TubeName, states: FlushStates) -> StoreResult<u64> {
        let (mut deleted, mut upto) = (0, None);
        loop {
            let step = self
                .store
                .flush_step(tube, states, upto, FLUSH_STEP, self.clock.now())
                .await?;
            deleted += step.deleted;
            upto = Some(step.upto);
            if !step.more {
                return Ok(deleted);
            }
            self.store.durable(self.store.last_change()).await?;
            tokio::task::yield_now().await;
        }
    }

    /// The operator API's flush of `tube` (`states`: none named means all four), once
    /// durable: [`Engine::flush`].
    pub async fn admin_flush(&self, tube: &TubeName, states: &[JobState]) -> AdminResult<u64> {
        let states = match states {
            [] => FlushStates::ALL,
            named => FlushStates {
                ready: named.contains(&JobState::Ready),
                delayed: named.contains(&JobState::Delayed),
                buried: named.contains(&JobState::Buried),
                reserved: named.contains(&JobState::Reserved),
            },
        };
        let flushed = self.flush(tube, states).await?;
        self.admin_durable().await?;
        Ok(flushed)
    }
}

/// The later of two acknowledgements: a reply that waits for both.
fn later(a: Ack, b: Ack) -> Ack {
    match (a, b) {
        (Ack::After(x), Ack::After(y)) => Ack::After(x.max(y)),
        (Ack::After(x), Ack::Now) | (Ack::Now, Ack::After(x)) => Ack::After(x),
        (Ack::Now, Ack::Now) => Ack::Now,
    }
}
