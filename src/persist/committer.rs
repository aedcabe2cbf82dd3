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
mod tests {
    //! The loop against a scripted sink on the paused clock: every start is logged with
    //! its time, so the pacing, the drain and the depth read as exact timetables.

    use std::collections::VecDeque;
    use std::sync::Mutex;

    use bytes::Bytes;

    use super::*;
    use crate::protocol::TubeName;
    use crate::store::{NANOS_PER_SEC, NewJob};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// What a scripted write comes to.
    #[derive(Clone, Copy)]
    enum Then {
        Fail,
        Fenced,
    }

    #[derive(Default)]
    struct Log {
        /// Each write started: when (ms after the test's start) and how many jobs.
        starts: Vec<(u64, usize)>,
        probes: usize,
    }

    struct Scripted {
        t0: Instant,
        depth: usize,
        write_time: Duration,
        /// What the writes come to, in start order; `Ok` once it runs out.
        script: VecDeque<Then>,
        probe_every: Option<Duration>,
        log: Arc<Mutex<Log>>,
    }

    impl Sink for Scripted {
        type Pending = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send>>;

        async fn start(&mut self, cut: &Cut) -> Result<Self::Pending, SinkError> {
            let at = (Instant::now() - self.t0).as_millis() as u64;
            self.log.lock().unwrap().starts.push((at, cut.jobs.len()));
            let answer = match self.script.pop_front() {
                None => Ok(()),
                Some(Then::Fenced) => Err(SinkError::Fenced),
                Some(Then::Fail) => Err(SinkError::Failed(StoreError::TimedOut {
                    op: "scripted",
                    source: None,
                })),
            };
            let done = Instant::now() + self.write_time;
            Ok(Box::pin(async move {
                tokio::time::sleep_until(done).await;
                answer
            }))
        }

        fn depth(&self) -> usize {
            self.depth
        }

        fn name(&self) -> &'static str {
            "scripted"
        }

        fn probe_every(&self) -> Option<Duration> {
            self.probe_every
        }

        fn probe(&mut self) {
            self.log.lock().unwrap().probes += 1;
        }
    }

    /// A journaled store whose first change (the default tube) counts as written, and
    /// its committer running over a scripted sink.
    struct Run {
        t0: Instant,
        memory: Arc<MemoryStore>,
        link: CommitLink,
        stop: CancellationToken,
        log: Arc<Mutex<Log>>,
        task: tokio::task::JoinHandle<Ended>,
    }

    fn start(depth: usize, write_ms: u64, script: &[Then], probe_every: Option<Duration>) -> Run {
        let t0 = Instant::now();
        let memory = Arc::new(MemoryStore::journaled());
        memory.cut(CutLimit::default());
        let link = CommitLink::new();
        link.publish(|p| p.written = memory.last_change());
        let log = Arc::new(Mutex::new(Log::default()));
        let sink = Scripted {
            t0,
            depth,
            write_time: ms(write_ms),
            script: script.iter().copied().collect(),
            probe_every,
            log: Arc::clone(&log),
        };
        let stop = CancellationToken::new();
        let task = tokio::spawn(run(
            Arc::clone(&memory),
            link.clone(),
            sink,
            CutLimit::default(),
            stop.clone(),
        ));
        Run {
            t0,
            memory,
            link,
            stop,
            log,
            task,
        }
    }

    impl Run {
        /// Put a job at `ms` after the start, as a durable store does: change, then
        /// tell the committer.
        async fn put_at(&self, at_ms: u64) -> Change {
            tokio::time::sleep_until(self.t0 + ms(at_ms)).await;
            let job = NewJob {
                tube: TubeName::default_tube(),
                pri: 1,
                delay_ms: 0,
                ttr_ms: 60_000,
                body: Bytes::from_static(b"x"),
            };
            self.memory.put(job, NANOS_PER_SEC).await.unwrap();
            self.link.changed.notify_one();
            self.memory.last_change()
        }

        async fn written(&self, change: Change) -> bool {
            tokio::time::timeout(Duration::from_secs(10), self.link.written(change))
                .await
                .unwrap()
        }

        fn starts(&self) -> Vec<(u64, usize)> {
            self.log.lock().unwrap().starts.clone()
        }
    }

    #[test]
    fn the_phase_follows_the_writes_in_flight_and_a_pending_retry() {
        let now = Instant::now();
        let later = now + ms(5);
        assert_eq!(phase(0, 4, None, now), CommitPhase::Idle);
        assert_eq!(phase(3, 4, None, now), CommitPhase::Writing);
        assert_eq!(phase(4, 4, None, now), CommitPhase::Full);
        assert_eq!(phase(1, 1, None, now), CommitPhase::Full);
        assert_eq!(phase(2, 4, Some(later), now), CommitPhase::Draining);
        assert_eq!(phase(2, 4, Some(now), later), CommitPhase::Draining);
        assert_eq!(
            phase(0, 4, Some(later), now),
            CommitPhase::Paused { until: later }
        );
        assert_eq!(phase(0, 4, Some(now), now), CommitPhase::Retrying);
        assert_eq!(phase(0, 4, Some(now), later), CommitPhase::Retrying);
    }

    /// Writes take 1 ms; three fail in a row: the retries start 5, 10 and 20 ms after
    /// each failure, and the change is acknowledged only by the write that lands.
    #[tokio::test(start_paused = true)]
    async fn a_failed_write_is_retried_after_a_pause_that_doubles() {
        let run = start(1, 1, &[Then::Fail, Then::Fail, Then::Fail], None);
        let change = run.put_at(0).await;
        tokio::time::sleep_until(run.t0 + ms(30)).await;
        assert!(run.link.progress.borrow().failing.is_some());
        assert!(run.written(change).await);
        let starts = run.starts();
        println!("starts (ms, jobs): {starts:?}");
        assert_eq!(starts, [(0, 1), (6, 1), (17, 1), (38, 1)]);
        assert!(run.link.progress.borrow().failing.is_none());
        run.stop.cancel();
        assert_eq!(run.task.await.unwrap(), Ended::Stopped);
    }

    /// Depth 4, writes of 10 ms: the first fails (at 10 ms, so the pause ends at 15 ms)
    /// while the second, started at 8 ms, is in flight. A change made meanwhile starts
    /// nothing, not even after the pause, until the second has answered (at 18 ms,
    /// failing too, as a batch after a failed one does); then one write carries all
    /// three jobs.
    #[tokio::test(start_paused = true)]
    async fn after_a_failure_nothing_starts_until_every_write_in_flight_answered() {
        let run = start(4, 10, &[Then::Fail, Then::Fail], None);
        run.put_at(0).await;
        run.put_at(8).await;
        let last = run.put_at(11).await;
        assert!(run.written(last).await);
        let starts = run.starts();
        println!("starts (ms, jobs): {starts:?}");
        assert_eq!(starts, [(0, 1), (8, 1), (18, 3)]);
    }

    /// Depth 4, writes of 10 ms, a put every millisecond: four writes in flight at
    /// once, and the fifth starts when the first answers.
    #[tokio::test(start_paused = true)]
    async fn several_writes_are_in_flight_up_to_the_sinks_depth() {
        let run = start(4, 10, &[], None);
        let mut last = Change::NONE;
        for ms in 0..5 {
            last = run.put_at(ms).await;
        }
        assert!(run.written(last).await);
        let starts = run.starts();
        println!("starts (ms, jobs): {starts:?}");
        assert_eq!(starts, [(0, 1), (1, 1), (2, 1), (3, 1), (10, 1)]);
    }

    /// A fenced write ends the committer: `stopped` is published (every waiting reply
    /// answers) and nothing more is written.
    #[tokio::test(start_paused = true)]
    async fn a_fenced_write_ends_the_committer() {
        let run = start(1, 1, &[Then::Fenced], None);
        let change = run.put_at(0).await;
        assert!(!run.written(change).await, "a fenced write is no write");
        assert!(run.link.progress.borrow().stopped);
        let Run { task, log, .. } = run;
        assert_eq!(task.await.unwrap(), Ended::Fenced);
        assert_eq!(log.lock().unwrap().starts.len(), 1);
    }

    /// A stop while a write is in flight ends the committer at once.
    #[tokio::test(start_paused = true)]
    async fn a_stop_ends_the_committer_with_a_write_in_flight() {
        let run = start(1, 60_000, &[], None);
        let change = run.put_at(0).await;
        tokio::time::sleep_until(run.t0 + ms(5)).await;
        run.stop.cancel();
        assert_eq!(run.task.await.unwrap(), Ended::Stopped);
        assert!(run.link.progress.borrow().stopped);
        assert!(run.link.progress.borrow().written < change);
        println!("stopped at {:?}", Instant::now() - run.t0);
        assert!(Instant::now() - run.t0 < Duration::from_secs(1));
    }

    /// A sink short of space is probed every 100 ms while nothing is in flight, and
    /// not while a write is: a write from 0 to 1000 ms, then three probes by 1350 ms.
    #[tokio::test(start_paused = true)]
    async fn a_sink_short_of_space_is_probed_only_while_idle() {
        let run = start(1, 1000, &[], Some(ms(100)));
        run.put_at(0).await;
        tokio::time::sleep_until(run.t0 + ms(999)).await;
        assert_eq!(run.log.lock().unwrap().probes, 0, "probed while writing");
        tokio::time::sleep_until(run.t0 + ms(1350)).await;
        let n = run.log.lock().unwrap().probes;
        println!("probes by 1350 ms: {n}");
        assert_eq!(n, 3);
    }
}
