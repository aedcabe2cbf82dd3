//! Unit tests of the group-commit loop, against a scripted sink on the paused clock:
//! every start is logged with its time, so the pacing, the drain and the depth read as
//! exact timetables.

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
