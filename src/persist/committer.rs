//! The group-commit loop: one task per persisted store. It waits until the store has
//! changes, takes a cut, writes it through the sink, publishes how far it got, and
//! repeats; everything changed while a write is in flight goes into the next cut, so
//! under load one write carries many clients' changes.
//!
//! Ownership: the task owns the sink and is the only caller of `MemoryStore::cut` and
//! `cut_failed` (cuts are taken one at a time, as the journal requires). It publishes
//! on the [`CommitLink`]'s watch channel; replies wait on it.
//!
//! A sink that refuses new jobs for want of space is probed while idle (see
//! [`Sink::probe_every`]), so it notices by itself when space comes back.
//!
//! Failure: a failed write is retried with a growing pause (5 ms up to 500 ms) and
//! logged once per failure streak (then every 10 s), never in a tight loop. A fenced
//! write (another instance leads) or a stop request ends the task: `stopped` is
//! published, so every waiting reply answers at once.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::{Sink, SinkError};
use crate::store::Store;
use crate::store::durable::CommitLink;
use crate::store::memory::{CutLimit, MemoryStore};

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

/// Run the commit loop until `stop` is cancelled or the sink is fenced.
pub async fn run<S: Sink>(
    memory: Arc<MemoryStore>,
    link: CommitLink,
    mut sink: S,
    limit: CutLimit,
    stop: CancellationToken,
) -> Ended {
    let mut retry = RETRY_FIRST;
    let mut failing_since: Option<Instant> = None;
    let mut last_log = Instant::now();
    let ended = 'run: loop {
        // Wait for a change (or a retry's pause), unless one is already waiting. A sink
        // that refuses new jobs (a full disk) is let look for space meanwhile: nothing
        // else would tell it when no client changes anything.
        let written = link.progress.borrow().written;
        if failing_since.is_none() && memory.last_change() <= written {
            let probe = sink.probe_every();
            tokio::select! {
                _ = link.changed.notified() => {}
                _ = tokio::time::sleep(probe.unwrap_or(RETRY_MAX)), if probe.is_some() => {
                    sink.probe();
                    continue;
                }
                _ = stop.cancelled() => break 'run Ended::Stopped,
            }
        }
        // Let the connections that are ready to run (their requests already read) run
        // first: their changes join this batch rather than the next. Costs nothing
        // when nobody else is ready (one client), batches more under load.
        tokio::task::yield_now().await;
        let cut = memory.cut(limit);
        if cut.is_empty() && cut.last_change.is_some_and(|c| c <= written) {
            continue;
        }
        let result = tokio::select! {
            r = sink.write(&cut) => r,
            // A write abandoned mid-flight may still land: the store is of unknown
            // standing, which no longer matters to a committer that stops.
            _ = stop.cancelled() => break 'run Ended::Stopped,
        };
        match result {
            Ok(()) => {
                if let Some(since) = failing_since.take() {
                    tracing::warn!(
                        sink = sink.name(),
                        after_ms = since.elapsed().as_millis() as u64,
                        "persisting works again"
                    );
                }
                retry = RETRY_FIRST;
                if let Some(last) = cut.last_change {
                    link.progress.send_modify(|p| {
                        p.written = p.written.max(last);
                        p.failing = None;
                    });
                }
            }
            Err(SinkError::Fenced) => {
                memory.cut_failed(&cut);
                break 'run Ended::Fenced;
            }
            Err(SinkError::Failed(err)) => {
                memory.cut_failed(&cut);
                let first = failing_since.is_none();
                failing_since.get_or_insert_with(Instant::now);
                if first || last_log.elapsed() >= LOG_EVERY {
                    last_log = Instant::now();
                    tracing::warn!(
                        sink = sink.name(),
                        error = %err.chain(),
                        "persisting a batch failed; replies that wait for it answer \
                         INTERNAL_ERROR after 1 s, and the batch is retried"
                    );
                }
                let why: Arc<str> = Arc::from(err.chain());
                link.progress.send_modify(|p| p.failing = Some(why));
                tokio::select! {
                    _ = tokio::time::sleep(retry) => {}
                    _ = stop.cancelled() => break 'run Ended::Stopped,
                }
                retry = (retry * 2).min(RETRY_MAX);
            }
        }
    };
    link.progress.send_modify(|p| p.stopped = true);
    ended
}
