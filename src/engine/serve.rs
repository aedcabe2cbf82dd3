//! Serve passes: hand the ready jobs of some tubes to the connections waiting on them.
//!
//! One task, the serve task ([`run`], started by [`Engine::start`]), runs every pass,
//! so passes never overlap. Whatever may have made a job ready (a put, release, kick,
//! close, tick, unpause) calls [`Engine::serve`] with the tubes: that sends them to the
//! task over a channel and waits until a pass covering them has finished, so the
//! caller's reply comes after the hand-over -- unless a pass is in flight (waiting on
//! the store), when it does not wait (see [`Engine::serve`]). A reserve that registers
//! a waiter always waits for its pass ([`Engine::serve_checked`]). Wake-ups from other
//! instances (a shared store's events) arrive on a second channel the task reads itself.
//!
//! Why a task rather than a pass run by whichever caller finds none running (as
//! before): the single-flight is the task itself (the one flag, `pass_in_flight`, only
//! tells callers whether waiting is worth it); a pass is never cancelled half-way (its
//! claims would stay held); and no caller's reply waits for passes run for others. The
//! price is a task switch per call that waits.
//!
//! Rounds: the task takes everything queued, runs one pass over all those tubes, then
//! tells each caller of the round it is done. What arrives while a pass runs waits for
//! the next round rather than joining the running pass, which has already claimed
//! waiters up to a cursor and dropped tubes that had nothing, so it could skip a waiter
//! the new work is for.
//!
//! A pass asks the store for several waiters at once (a batch), so that with Redis their
//! reserves share round trips instead of queueing one behind another. The first batch
//! is as large as the number of wake-ups in the round (each may have made one job
//! ready); it doubles while every reserve in it finds a job, and grows by the wake-ups
//! that arrived meanwhile; a reserve that finds none ends the pass for its tubes.
//! Results are handled in claim order, and the store runs the reserves in that order,
//! so earlier waiters get better jobs.
//!
//! Invariants: the serve task never awaits [`Engine::serve`] (it would wait for itself);
//! a job reserved for a waiter whose connection has gone goes back to ready, that job
//! alone (the connection's other reservations stay as they are), and its tube into the
//! next round.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use foldhash::HashSet;
use futures_util::future::join_all;
use tokio::sync::{mpsc, oneshot};

use super::Engine;
use super::waiters::Claim;
use crate::protocol::TubeName;
use crate::store::Store;

/// At most this many waiters are served by one batch of reserves.
const MAX_SERVE_BATCH: usize = 64;

/// How many waited-on tubes the safety sweep asks the store about in one call.
const SWEEP_BATCH: usize = 1000;

/// The most waited-on tubes one safety sweep looks at.
const SWEEP_MOST: usize = 10_000;

/// A serve pass stopped at a store failure (logged where it happened).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Failed;

/// Tubes that may have gained a ready job, and the caller to tell when a pass covering
/// them is done.
#[derive(Debug)]
pub(super) struct PassRequest {
    tubes: Vec<TubeName>,
    /// `None` when the caller does not wait.
    done: Option<oneshot::Sender<Result<(), Failed>>>,
}

/// The work of one pass.
#[derive(Debug, Default)]
struct Round {
    tubes: HashSet<TubeName>,
    /// How many wake-ups arrived (each may have made one job ready).
    wakeups: usize,
    done: Vec<oneshot::Sender<Result<(), Failed>>>,
}

impl Round {
    fn is_empty(&self) -> bool {
        self.tubes.is_empty() && self.done.is_empty()
    }

    /// Add `tubes`, each a wake-up (it may have made one job ready); returns how many
    /// it added.
    fn add(&mut self, tubes: impl IntoIterator<Item = TubeName>) -> usize {
        let before = self.wakeups;
        for t in tubes {
            self.tubes.insert(t);
            self.wakeups += 1;
        }
        self.wakeups - before
    }
}

/// What the serve task receives, and the round it is gathering for the next pass.
struct Inbox {
    engine: Arc<Engine>,
    /// Bounded as the engine's sending side says (one request per command run).
    requests: mpsc::UnboundedReceiver<PassRequest>,
    /// A shared store's wake-ups: one per message Redis pushed, all taken at each
    /// round (see `Store::take_wake_events`).
    wake_events: Option<mpsc::UnboundedReceiver<TubeName>>,
    next: Round,
}

impl Inbox {
    /// Wait until there is something to serve; false when the engine stops.
    async fn wait(&mut self) -> bool {
        let stop = self.engine.stop.clone();
        if stop.is_cancelled() {
            return false;
        }
        while self.next.is_empty() {
            let events = async {
                match self.wake_events.as_mut() {
                    Some(events) => events.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                request = self.requests.recv() => match request {
                    Some(r) => {
                        self.next.add(r.tubes);
                        self.next.done.extend(r.done);
                    }
                    None => return false,
                },
                event = events => match event {
                    Some(tube) => {
                        self.add_unrequested([tube]);
                    }
                    // The store stopped sending: nothing more will come that way.
                    None => self.wake_events = None,
                },
                _ = stop.cancelled() => return false,
            }
        }
        true
    }

    /// Tubes that gained ready jobs without a request (another instance's event, a job
    /// returned by a pass): counted as a wake-up for `reserve.rs`, then served next.
    fn add_unrequested(&mut self, tubes: impl IntoIterator<Item = TubeName>) {
        self.engine.count_wakeup();
        self.next.add(tubes);
    }

    /// Move everything already queued into the next round; returns how many wake-ups
    /// (tubes) it added, by which a running pass grows its batch.
    fn collect(&mut self) -> usize {
        let mut wakeups = 0;
        while let Ok(r) = self.requests.try_recv() {
            wakeups += self.next.add(r.tubes);
            self.next.done.extend(r.done);
        }
        if let Some(events) = self.wake_events.as_mut() {
            while let Ok(tube) = events.try_recv() {
                wakeups += 1;
                self.engine.count_wakeup();
                self.next.add([tube]);
            }
        }
        wakeups
    }
}

/// The serve task. Ends when the engine's stop token is cancelled; callers waiting then
/// are released (their reply no longer waits for a pass).
pub(super) async fn run(
    engine: Arc<Engine>,
    requests: mpsc::UnboundedReceiver<PassRequest>,
    wake_events: Option<mpsc::UnboundedReceiver<TubeName>>,
) {
    let mut inbox = Inbox {
        engine: engine.clone(),
        requests,
        wake_events,
        next: Round::default(),
    };
    while inbox.wait().await {
        inbox.collect();
        let round = std::mem::take(&mut inbox.next);
        engine.pass_in_flight.store(true, Ordering::SeqCst);
        let outcome = engine.pass(round.tubes, round.wakeups, &mut inbox).await;
        engine.pass_in_flight.store(false, Ordering::SeqCst);
        for done in round.done {
            let _ = done.send(outcome);
        }
    }
}

impl Engine {
    /// A job may have become ready (see `reserve.rs`).
    fn count_wakeup(&self) {
        self.wakeups.fetch_add(1, Ordering::SeqCst);
    }

    /// Hand ready jobs in `tubes` to waiting connections, and return once a pass
    /// covering them has finished, so the caller's reply follows the hand-over (see the
    /// module header). Except while a pass is in flight (waiting on the store): then
    /// the tubes go to the next round without waiting for it, which could hold the
    /// reply for two passes (waiting there cost the Redis engine about 30 % of its
    /// jobs/s with 2 producers feeding 10 waiting workers). A pass is in flight only
    /// with a store that makes it wait (Redis), where a job may then reach its waiter
    /// just after the reply, as before; with the memory store a pass runs through at
    /// once, so the hand-over always comes first, as in the reference. A store failure
    /// in the pass is logged there; the waiters it did not serve keep waiting.
    pub(crate) async fn serve(&self, tubes: impl IntoIterator<Item = TubeName>) {
        // Counted even when nobody waits: a reserve between its store attempt and its
        // registration must learn of it (see `reserve.rs`).
        self.count_wakeup();
        let wait = !self.pass_in_flight.load(Ordering::SeqCst);
        let _ = self.request_pass(tubes, wait).await;
    }

    /// [`Engine::serve`] that always waits for the pass, even while another is in
    /// flight: for the timer, whose waiters catching up must find the jobs it made
    /// ready handed over (see `timer.rs`).
    pub(super) async fn serve_and_wait(&self, tubes: impl IntoIterator<Item = TubeName>) {
        self.count_wakeup();
        let _ = self.request_pass(tubes, true).await;
    }

    /// A job reserved for a waiter whose connection went away before it got it goes
    /// back to ready, and its tube into the next round. Only that job: the
    /// connection's other reservations are its own business (released when it closes;
    /// kept until their TTR when the process shuts down). A job it never got is not a
    /// wait that ended.
    async fn take_back(
        &self,
        conn: crate::store::ConnId,
        id: crate::store::JobId,
        inbox: &mut Inbox,
    ) {
        match self.store.give_back(conn, id, self.clock.now()).await {
            Ok(Some(tube)) => {
                inbox.add_unrequested([tube]);
            }
            Ok(None) => {}
            Err(err) => tracing::warn!(
                %err,
                conn = conn.0,
                id,
                "could not return a job reserved for a waiter that went away; it comes back at its TTR"
            ),
        }
    }

    /// [`Engine::serve`] for a reserve that needs the answer: always waits for the
    /// pass, and tells whether the store failed during it (some waiters may not have
    /// been looked at).
    pub(super) async fn serve_checked(
        &self,
        tubes: impl IntoIterator<Item = TubeName>,
    ) -> Result<(), Failed> {
        self.request_pass(tubes, true).await
    }

    async fn request_pass(
        &self,
        tubes: impl IntoIterator<Item = TubeName>,
        wait: bool,
    ) -> Result<(), Failed> {
        if self.waiters.is_empty() {
            return Ok(());
        }
        let tubes: Vec<TubeName> = tubes.into_iter().collect();
        if tubes.is_empty() {
            return Ok(());
        }
        let (done, finished) = if wait {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        if self
            .serve_requests
            .send(PassRequest { tubes, done })
            .is_err()
        {
            // The serve task stopped (shutdown): no pass will come.
            return Ok(());
        }
        match finished {
            Some(finished) => finished.await.unwrap_or(Ok(())),
            None => Ok(()),
        }
    }

    /// Serve the tubes someone waits on that hold ready jobs. A shared store's wake-up
    /// from another instance can be lost (the Redis connection dropped and came back),
    /// and a waiter is otherwise only looked at again when its tube changes here; the
    /// timer's safety sweep calls this: one ready-count read per waited-on tube, a
    /// [`SWEEP_BATCH`] of tubes per store call (a call per tube made an idle worker
    /// watching 50,000 tubes cost most of a core); a batch that has a ready job is
    /// served whole (the pass reserves over those of each waiter's tubes at once).
    /// A sweep reads at most [`SWEEP_MOST`] tubes, the next sweep going on where it
    /// stopped, so its cost is bounded however many tubes are waited on (a wake-up lost
    /// on one of 100,000 is found within ten sweeps).
    pub(crate) async fn sweep_waiting(&self) {
        let mut tubes = self.waiters.tubes();
        if tubes.len() > SWEEP_MOST {
            let from = self.sweep_from.fetch_add(SWEEP_MOST, Ordering::Relaxed) % tubes.len();
            tubes.rotate_left(from);
            tubes.truncate(SWEEP_MOST);
        }
        let mut found: Vec<TubeName> = Vec::new();
        for batch in tubes.chunks(SWEEP_BATCH) {
            if matches!(self.store.has_ready(batch).await, Ok(true)) {
                found.extend_from_slice(batch);
            }
        }
        if !found.is_empty() {
            self.serve(found).await;
        }
    }

    /// One pass over `tubes`: claim waiters in registration order, in batches, and
    /// reserve for them until a tube has nothing left for the next one.
    /// `Err(Failed)` when the store failed (the pass stopped there).
    async fn pass(
        &self,
        mut tubes: HashSet<TubeName>,
        wakeups: usize,
        inbox: &mut Inbox,
    ) -> Result<(), Failed> {
        let mut after = 0;
        let mut budget = wakeups.max(1);
        while !tubes.is_empty() {
            let claims = self.claim_batch(&tubes, &mut after, budget.min(MAX_SERVE_BATCH));
            if claims.is_empty() {
                break;
            }
            let all_found = self.serve_batch(&claims, &mut tubes, inbox).await?;
            let more = inbox.collect();
            budget = if all_found {
                claims.len() * 2 + more
            } else {
                more.max(1)
            };
        }
        Ok(())
    }

    /// Claim up to `most` waiters on `tubes` registered after `after` (which moves on
    /// to the last one claimed), in registration order.
    fn claim_batch(&self, tubes: &HashSet<TubeName>, after: &mut u64, most: usize) -> Vec<Claim> {
        let mut claims = Vec::new();
        while claims.len() < most {
            let Some(claim) = self.waiters.claim_next(tubes, *after) else {
                break;
            };
            *after = claim.seq;
            claims.push(claim);
        }
        claims
    }

    /// Reserve for every claimed waiter at once (on Redis their calls share round
    /// trips), then hand the jobs over in claim order. A waiter that found nothing
    /// takes its tubes out of the pass; one whose connection went away meanwhile gives
    /// its job back. Whether every reserve found a job; `Err(Failed)` when the store
    /// failed for any of them (the others are still handed over or unclaimed).
    async fn serve_batch(
        &self,
        claims: &[Claim],
        tubes: &mut HashSet<TubeName>,
        inbox: &mut Inbox,
    ) -> Result<bool, Failed> {
        // Only the tubes this pass serves can have gained a job since each waiter last
        // found none (every change that makes a job ready comes through here with its
        // tube, and a new waiter sends all of its own), so a waiter's reserve looks at
        // those of its tubes alone: a worker watching a hundred tubes costs one.
        let now = self.clock.now();
        let searched: Vec<Vec<TubeName>> = claims
            .iter()
            .map(|c| {
                c.watched
                    .iter()
                    .filter(|t| tubes.contains(*t))
                    .cloned()
                    .collect()
            })
            .collect();
        let results = join_all(
            claims
                .iter()
                .zip(&searched)
                .map(|(c, watched)| self.store.reserve(c.conn, watched, now)),
        )
        .await;
        let (mut all_found, mut failed) = (true, false);
        for (claim, result) in claims.iter().zip(results) {
            match result {
                Ok(Some(job)) => {
                    self.timer.hint(job.deadline);
                    let waited = job.waited;
                    match self.waiters.deliver(claim.seq, job) {
                        Ok(()) => self.observe_wait(waited),
                        Err(job) => self.take_back(claim.conn, job.id, inbox).await,
                    }
                }
                Ok(None) => {
                    all_found = false;
                    self.waiters.unclaim(claim.seq);
                    // None of this waiter's tubes (of this pass) has a reservable job.
                    for t in claim.watched.iter() {
                        tubes.remove(t);
                    }
                }
                Err(err) => {
                    failed = true;
                    self.waiters.unclaim(claim.seq);
                    tracing::warn!(
                        %err,
                        "serving waiters failed; those already waiting keep waiting"
                    );
                }
            }
        }
        if failed { Err(Failed) } else { Ok(all_found) }
    }
}
