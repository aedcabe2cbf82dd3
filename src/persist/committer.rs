//! The group-commit loop: one task per persisted store. It waits until the store has
//! changes, takes a cut, starts writing it through the sink, publishes how far the
//! writes got as they answer (in the order they were started), and repeats; everything
//! changed while the sink is busy goes into the next cut, so under load one write
//! carries many clients' changes. A sink that allows it ([`Sink::depth`]: leader mode's
//! Redis sink) has several writes in flight, so the committer never idles while the
//! medium works.
//!
//! Ownership: the task owns the sink and is the only caller of `MemoryStore::cut` and
//! `cut_failed`. Cuts in flight at once are consistent with the journal: each was
//! taken after the one before, and after a failure nothing new starts until every
//! write in flight has answered (each failed one is `cut_failed`, in start order). It
//! publishes through [`CommitLink::publish`], which wakes the replies its progress covers.
//!
//! The loop is a small state machine: each turn reads the [`CommitPhase`] from the
//! writes in flight and a pending retry (idle, writing with room, full, draining after
//! a failure, paused until the retry, retrying), then either starts a write or waits
//! for what moves that phase on.
//!
//! A sink that refuses new jobs for want of space is probed while idle (see
//! [`Sink::probe_every`]), so it notices by itself when space comes back.
//!
//! Timing: each batch's cut, hand-over to the sink, answer and publication are noted
//! in the link's stage histograms (`crate::store::durable::BatchStages`, on
//! `/metrics`): relaxed atomics and a few clock reads per batch.
//!
//! Failure: a failed write is retried with a growing pause (5 ms up to 500 ms) and
//! logged once per failure streak (then every 10 s), never in a tight loop. A fenced
//! write (another instance leads) or a stop request ends the task: `stopped` is
//! published, so every waiting reply answers at once.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Sink, SinkError};
use crate::store::durable::{CommitLink, Stage};
use crate::store::memory::{Cut, CutLimit, MemoryStore};
use crate::store::{Change, Store, StoreError};

const RETRY_FIRST: Duration = Duration::from_millis(5);
const RETRY_MAX: Duration = Duration::from_millis(500);
const LOG_EVERY: Duration = Duration::from_secs(10);

/// Why the committer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Asked to stop (shutdown, or the leader lost its lease).
    Stopped,
    /// The sink refused a write because another instance leads now.
    Fenced,
}

/// Where the committer stands, read from its writes in flight and its last failure
/// ([`Committer::phase`]); what it waits for in each is [`Committer::wait`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CommitPhase {
    /// Nothing in flight: a change (or the sink's due time) starts a write; a sink short
    /// of space is probed meanwhile.
    Idle,
    /// Writes in flight and room for another: a change starts one, an answer is taken in.
    Writing,
    /// As many writes in flight as the sink takes: only an answer moves it on.
    Full,
    /// A write failed while others were in flight. They were built on what it would have
    /// left, so nothing starts until each has answered.
    Draining,
    /// A write failed and every write has answered: nothing starts before `until`.
    Paused { until: Instant },
    /// The pause is over: the next write starts at once, changed or not, and rewrites
    /// what failed.
    Retrying,
}

/// One write in flight: its outcome, with the cut it writes and its times.
type InFlight = Pin<Box<dyn Future<Output = (Result<(), SinkError>, Cut, Times)> + Send>>;

/// When a write was handed to the sink's medium and when its answer was taken in
/// (for the stage histograms, `crate::store::durable::BatchStages`).
struct Times {
    sent: std::time::Instant,
    answered: std::time::Instant,
}

/// The failure streak and its pacing.
struct Failing {
    since: Option<Instant>,
    retry: Duration,
    /// Set by a failed write and cleared by the next write started: start nothing
    /// before this.
    retry_at: Option<Instant>,
    last_log: Instant,
}

/// The committer task's state (see the module header for who owns what).
struct Committer<S> {
    memory: Arc<MemoryStore>,
    link: CommitLink,
    sink: S,
    limit: CutLimit,
    stop: CancellationToken,
    in_flight: FuturesOrdered<InFlight>,
    /// The last change a cut took (written or in flight).
    taken: Change,
    failing: Failing,
}

/// Run the commit loop until `stop` is cancelled or the sink is fenced.
pub async fn run<S: Sink>(
    memory: Arc<MemoryStore>,
    link: CommitLink,
    sink: S,
    limit: CutLimit,
    stop: CancellationToken,
) -> Ended {
    let taken = link.progress.borrow().written;
    let mut committer = Committer {
        memory,
        link,
        sink,
        limit,
        stop,
        in_flight: FuturesOrdered::new(),
        taken,
        failing: Failing {
            since: None,
            retry: RETRY_FIRST,
            retry_at: None,
            last_log: Instant::now(),
        },
    };
    let ended = loop {
        if let ControlFlow::Break(ended) = committer.step().await {
            break ended;
        }
    };
    committer.link.publish(|p| p.stopped = true);
    ended
}

/// The phase that writes in flight (`in_flight` of the sink's `depth`) and a pending
/// retry make, at `now`. After a failure a retry is pending until the next write starts,
/// and no write starts while any is in flight, so a pending retry with writes in flight
/// is always a drain.
fn phase(in_flight: usize, depth: usize, retry_at: Option<Instant>, now: Instant) -> CommitPhase {
    match retry_at {
        Some(_) if in_flight > 0 => CommitPhase::Draining,
        Some(until) if now < until => CommitPhase::Paused { until },
        Some(_) => CommitPhase::Retrying,
        None if in_flight >= depth => CommitPhase::Full,
        None if in_flight == 0 => CommitPhase::Idle,
        None => CommitPhase::Writing,
    }
}

impl<S: Sink> Committer<S> {
    fn phase(&self) -> CommitPhase {
        phase(
            self.in_flight.len(),
            self.sink.depth(),
            self.failing.retry_at,
            Instant::now(),
        )
    }

    /// One move: start a write if the phase allows one and there is something to
    /// write, else wait for what moves the phase on.
    async fn step(&mut self) -> ControlFlow<Ended> {
        let phase = self.phase();
        let due = self.sink.due();
        let sink_due = due.is_some_and(|d| d <= std::time::Instant::now());
        match phase {
            CommitPhase::Retrying => self.start(sink_due).await,
            CommitPhase::Idle | CommitPhase::Writing
                if sink_due || self.memory.last_change() > self.taken =>
            {
                self.start(sink_due).await
            }
            CommitPhase::Idle | CommitPhase::Writing => {
                // Woken by a call that changed nothing: no batch's wait starts there.
                self.link.stages.nothing_changed();
                self.wait(phase, due).await
            }
            _ => self.wait(phase, due).await,
        }
    }

    /// Take a cut and start writing it (unless it holds nothing to write).
    async fn start(&mut self, sink_due: bool) -> ControlFlow<Ended> {
        // Let the connections that are ready to run (their requests already read) run
        // first: their changes join this batch rather than the next. Costs nothing when
        // nobody else is ready (one client), batches more under load.
        tokio::task::yield_now().await;
        self.failing.retry_at = None;
        let cut_at = std::time::Instant::now();
        let cut = self.memory.cut(self.limit);
        self.link.stages.cut(cut_at);
        if cut.is_empty() && cut.last_change.is_some_and(|c| c <= self.taken) && !sink_due {
            return ControlFlow::Continue(());
        }
        if self
            .link
            .finishing
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            self.sink.finishing();
        }
        if let Some(c) = cut.last_change {
            self.taken = self.taken.max(c);
        }
        let started = tokio::select! {
            r = self.sink.start(&cut) => r,
            // A write abandoned mid-flight may still land: the store is of unknown
            // standing, which no longer matters to a committer that stops.
            _ = self.stop.cancelled() => return ControlFlow::Break(Ended::Stopped),
        };
        let sent = std::time::Instant::now();
        self.link.stages.observe(Stage::Build, sent - cut_at);
        self.link.stages.batch(cut.jobs.len() + cut.gone.len());
        self.in_flight.push_back(match started {
            Ok(pending) => Box::pin(async move {
                let result = pending.await;
                // Taken when the committer polls the write after its answer came: the
                // committer's own wake-up counts as part of the write.
                let answered = std::time::Instant::now();
                (result, cut, Times { sent, answered })
            }),
            Err(e) => {
                let times = Times {
                    sent,
                    answered: sent,
                };
                Box::pin(std::future::ready((Err(e), cut, times)))
            }
        });
        ControlFlow::Continue(())
    }

    /// Wait for what moves `phase` on: a stop and the answers of writes in flight
    /// always; a change or the sink's `due` time when a write may start; the end of a
    /// pause; the probe of a sink short of space while idle.
    async fn wait(
        &mut self,
        phase: CommitPhase,
        due: Option<std::time::Instant>,
    ) -> ControlFlow<Ended> {
        let open = matches!(phase, CommitPhase::Idle | CommitPhase::Writing);
        let pause_end = match phase {
            CommitPhase::Paused { until } => Some(until),
            _ => None,
        };
        let probe = self
            .sink
            .probe_every()
            .filter(|_| phase == CommitPhase::Idle);
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => return ControlFlow::Break(Ended::Stopped),
            Some((result, cut, times)) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                return self.answered(result, &cut, &times);
            }
            _ = self.link.changed.notified(), if open => {}
            _ = tokio::time::sleep_until(pause_end.unwrap_or_else(Instant::now)),
                if pause_end.is_some() => {}
            _ = tokio::time::sleep_until(due.map_or_else(Instant::now, Instant::from_std)),
                if open && due.is_some() => {}
            _ = tokio::time::sleep(probe.unwrap_or(RETRY_MAX)), if probe.is_some() => {
                self.sink.probe();
            }
        }
        ControlFlow::Continue(())
    }

    /// Take in the outcome of one write (in start order): publish how far the writes
    /// got, or note the failure (the cut's changes are rewritten by a later cut, after
    /// a pause that grows with the streak). A fenced write ends the committer.
    fn answered(
        &mut self,
        result: Result<(), SinkError>,
        cut: &Cut,
        times: &Times,
    ) -> ControlFlow<Ended> {
        self.sink.finished(&result);
        match result {
            Ok(()) => {
                let write = times.answered - times.sent;
                self.link.stages.observe(Stage::Write, write);
                self.written(cut);
                let settle = times.answered.elapsed();
                self.link.stages.observe(Stage::Settle, settle);
            }
            Err(SinkError::Fenced) => {
                self.memory.cut_failed(cut);
                return ControlFlow::Break(Ended::Fenced);
            }
            Err(SinkError::Failed(err)) => {
                self.memory.cut_failed(cut);
                self.failed(err);
            }
        }
        ControlFlow::Continue(())
    }

    fn written(&mut self, cut: &Cut) {
        if let Some(since) = self.failing.since.take() {
            tracing::warn!(
                sink = self.sink.name(),
                after_ms = since.elapsed().as_millis() as u64,
                "persisting works again"
            );
        }
        self.failing.retry = RETRY_FIRST;
        if let Some(last) = cut.last_change {
            self.link.publish(|p| {
                p.written = p.written.max(last);
                p.failing = None;
            });
        }
    }

    fn failed(&mut self, err: StoreError) {
        let failing = &mut self.failing;
        let first = failing.since.is_none();
        failing.since.get_or_insert_with(Instant::now);
        if first || failing.last_log.elapsed() >= LOG_EVERY {
            failing.last_log = Instant::now();
            tracing::warn!(
                sink = self.sink.name(),
                error = %err.chain(),
                "persisting a batch failed; replies that wait for it answer \
                 INTERNAL_ERROR after 1 s, and the batch is retried"
            );
        }
        // Writes still in flight failing too (they followed this one) keep the pause
        // this failure set.
        if failing.retry_at.is_none() {
            failing.retry_at = Some(Instant::now() + failing.retry);
            failing.retry = (failing.retry * 2).min(RETRY_MAX);
        }
        let why = Arc::new(err);
        self.link.publish(|p| p.failing = Some(why));
    }
}

#[cfg(test)]
mod tests;
