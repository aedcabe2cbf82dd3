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
//! A sink that refuses new jobs for want of space is probed while idle (see
//! [`Sink::probe_every`]), so it notices by itself when space comes back.
//!
//! Failure: a failed write is retried with a growing pause (5 ms up to 500 ms) and
//! logged once per failure streak (then every 10 s), never in a tight loop. A fenced
//! write (another instance leads) or a stop request ends the task: `stopped` is
//! published, so every waiting reply answers at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use tokio_util::sync::CancellationToken;

use super::{Sink, SinkError};
use crate::store::Store;
use crate::store::durable::CommitLink;
use crate::store::memory::{Cut, CutLimit, MemoryStore};

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

/// One write in flight: its outcome, with the cut it writes.
type InFlight = Pin<Box<dyn Future<Output = (Result<(), SinkError>, Cut)> + Send>>;

/// The failure streak and its pacing.
struct Failing {
    since: Option<Instant>,
    retry: Duration,
    /// Start nothing before this (a failure's pause).
    retry_at: Option<Instant>,
    last_log: Instant,
}

/// Run the commit loop until `stop` is cancelled or the sink is fenced.
pub async fn run<S: Sink>(
    memory: Arc<MemoryStore>,
    link: CommitLink,
    mut sink: S,
    limit: CutLimit,
    stop: CancellationToken,
) -> Ended {
    let mut failing = Failing {
        since: None,
        retry: RETRY_FIRST,
        retry_at: None,
        last_log: Instant::now(),
    };
    let mut in_flight: FuturesOrdered<InFlight> = FuturesOrdered::new();
    // The last change a cut took (written or in flight).
    let mut taken = link.progress.borrow().written;
    // After a failure nothing new starts until every write in flight has answered:
    // they were built for what the failed one would have left.
    let mut draining = false;
    let ended = 'run: loop {
        let room = in_flight.len() < sink.depth() && !draining;
        let paused = failing.retry_at.is_some_and(|at| Instant::now() < at);
        let due = sink.due();
        let sink_due = due.is_some_and(|d| d <= Instant::now());
        if room
            && !paused
            && (memory.last_change() > taken || failing.retry_at.is_some() || sink_due)
        {
            // Let the connections that are ready to run (their requests already read)
            // run first: their changes join this batch rather than the next. Costs
            // nothing when nobody else is ready (one client), batches more under load.
            tokio::task::yield_now().await;
            failing.retry_at = None;
            let cut = memory.cut(limit);
            if cut.is_empty() && cut.last_change.is_some_and(|c| c <= taken) && !sink_due {
                continue;
            }
            if link.finishing.load(std::sync::atomic::Ordering::SeqCst) {
                sink.finishing();
            }
            if let Some(c) = cut.last_change {
                taken = taken.max(c);
            }
            let started = tokio::select! {
                r = sink.start(&cut) => r,
                // A write abandoned mid-flight may still land: the store is of unknown
                // standing, which no longer matters to a committer that stops.
                _ = stop.cancelled() => break 'run Ended::Stopped,
            };
            in_flight.push_back(match started {
                Ok(pending) => Box::pin(async move { (pending.await, cut) }),
                Err(e) => Box::pin(std::future::ready((Err(e), cut))),
            });
            continue;
        }
        let probe = sink
            .probe_every()
            .filter(|_| in_flight.is_empty() && !paused);
        let retry_at = failing.retry_at.map(tokio::time::Instant::from_std);
        tokio::select! {
            biased;
            _ = stop.cancelled() => break 'run Ended::Stopped,
            Some((result, cut)) = in_flight.next(), if !in_flight.is_empty() => {
                sink.finished(&result);
                if let Err(fenced) = settle(&memory, &link, &sink, &mut failing, result, &cut) {
                    break 'run fenced;
                }
                if failing.since.is_some() {
                    draining = true;
                }
                if in_flight.is_empty() {
                    draining = false;
                }
            }
            _ = link.changed.notified(), if room && !paused => {}
            _ = tokio::time::sleep_until(retry_at.unwrap_or_else(tokio::time::Instant::now)),
                if room && paused => {}
            _ = tokio::time::sleep_until(
                    due.map_or_else(tokio::time::Instant::now, tokio::time::Instant::from_std)
                ), if room && !paused && due.is_some() => {}
            _ = tokio::time::sleep(probe.unwrap_or(RETRY_MAX)), if probe.is_some() => {
                sink.probe();
            }
        }
    };
    link.publish(|p| p.stopped = true);
    ended
}

/// Take in the outcome of one write (in start order): publish how far the writes got,
/// or note the failure (the cut's changes are rewritten by a later cut, after a pause
/// that grows with the streak). `Err`: the committer ends (fenced).
fn settle<S: Sink>(
    memory: &MemoryStore,
    link: &CommitLink,
    sink: &S,
    failing: &mut Failing,
    result: Result<(), SinkError>,
    cut: &Cut,
) -> Result<(), Ended> {
    match result {
        Ok(()) => {
            if let Some(since) = failing.since.take() {
                tracing::warn!(
                    sink = sink.name(),
                    after_ms = since.elapsed().as_millis() as u64,
                    "persisting works again"
                );
            }
            failing.retry = RETRY_FIRST;
            if let Some(last) = cut.last_change {
                link.publish(|p| {
                    p.written = p.written.max(last);
                    p.failing = None;
                });
            }
            Ok(())
        }
        Err(SinkError::Fenced) => {
            memory.cut_failed(cut);
            Err(Ended::Fenced)
        }
        Err(SinkError::Failed(err)) => {
            memory.cut_failed(cut);
            let first = failing.since.is_none();
            failing.since.get_or_insert_with(Instant::now);
            if first || failing.last_log.elapsed() >= LOG_EVERY {
                failing.last_log = Instant::now();
                tracing::warn!(
                    sink = sink.name(),
                    error = %err.chain(),
                    "persisting a batch failed; replies that wait for it answer \
                     INTERNAL_ERROR after 1 s, and the batch is retried"
                );
            }
            let why: Arc<str> = Arc::from(err.chain());
            link.publish(|p| p.failing = Some(why));
            if failing.retry_at.is_none() {
                failing.retry_at = Some(Instant::now() + failing.retry);
                failing.retry = (failing.retry * 2).min(RETRY_MAX);
            }
            Ok(())
        }
    }
}
