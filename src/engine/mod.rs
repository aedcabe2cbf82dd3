//! beanstalkd's semantics on top of any [`Store`]: what each command does to a session
//! and the store, the blocking reserve and its waiters, DEADLINE_SOON, the deadline
//! timer, drain mode, and this instance's counters.
//!
//! Ownership: one [`Engine`] per process, shared (`Arc`) by all connection tasks and
//! the timer task. Sessions are owned by their connection tasks and lent to
//! [`Engine::execute`]. No lock is held across an `.await`.
//!
//! Invariant ("nobody waits while a job is there for them"): after any change that can
//! make a job reservable (put, release, kick, close, delay or TTR expiry, unpause) and
//! after a waiter registers, a serve pass runs for the affected tubes before the
//! command's reply is written.

pub mod clock;
pub mod counters;
pub mod host;
pub mod session;
pub mod timer;
pub mod waiters;

use foldhash::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::future::join_all;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::protocol::yaml::{self, JobStats, ServerStats, TubeStats};
use crate::protocol::{Command, Counter, Put, Rejection, Reply, Request, TubeName};
use crate::store::{
    AnyStore, ConnId, NANOS_PER_SEC, Nanos, NewJob, Store, StoreError, StoreResult,
};

pub use clock::Clock;
pub use counters::{Counters, WAIT_BUCKETS, WaitSnapshot};
pub use host::HostInfo;
pub use session::Session;
pub use timer::Timer;
pub use waiters::{Delivery, GiveUp, Waiters};

/// The protocol version redstalk reports in `stats` (the reference's shape, quoted).
pub const PROTOCOL_VERSION: &str = "1.13";

/// At most this many waiters are served by one batch of reserves (see [`Engine::serve`]).
const MAX_SERVE_BATCH: usize = 64;

/// The reference reports its default binlog size even without a binlog.
const BINLOG_MAX_SIZE: u64 = 10_485_760;

/// Settings the engine needs.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub max_job_size: u32,
}

/// Every figure the metrics endpoint exposes, read through the same functions that
/// build the `stats` and `stats-tube` documents, so the two never disagree.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub engine: &'static str,
    pub server: ServerStats,
    /// Every existing tube, in `list-tubes` order.
    pub tubes: Vec<TubeStats>,
    pub wait: WaitSnapshot,
}

/// What running one request leads to.
#[derive(Debug)]
pub enum Outcome {
    Reply(Reply),
    /// A reserve that must wait; the connection drives it (and watches for hang-up).
    Wait(Waiting),
    /// Close the connection without a reply.
    Quit,
}

pub struct Engine {
    pub(crate) store: AnyStore,
    pub(crate) clock: Clock,
    pub(crate) timer: Timer,
    pub(crate) stop: CancellationToken,
    waiters: Waiters,
    counters: Counters,
    host: HostInfo,
    started: Nanos,
    max_job_size: u32,
    draining: AtomicBool,
    next_conn: AtomicU64,
    serving: AtomicBool,
    pending: Mutex<HashSet<TubeName>>,
    /// Wake-ups since the serve pass last looked: how many jobs may have become ready.
    signals: AtomicUsize,
}

impl Engine {
    /// Build the engine and start its timer task (call inside a tokio runtime).
    pub fn start(store: AnyStore, config: EngineConfig) -> Arc<Engine> {
        let clock = store.clock();
        let wake_events = store.take_wake_events();
        let engine = Arc::new(Engine {
            store,
            clock,
            timer: Timer::default(),
            stop: CancellationToken::new(),
            waiters: Waiters::default(),
            counters: Counters::default(),
            host: HostInfo::detect(),
            started: clock.now(),
            max_job_size: config.max_job_size,
            draining: AtomicBool::new(false),
            next_conn: AtomicU64::new(1),
            serving: AtomicBool::new(false),
            pending: Mutex::new(HashSet::default()),
            signals: AtomicUsize::new(0),
        });
        tokio::spawn(timer::run(engine.clone()));
        if let Some(mut events) = wake_events {
            let e = engine.clone();
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        tube = events.recv() => match tube {
                            Some(tube) => e.serve([tube]).await,
                            None => return,
                        },
                        _ = e.stop.cancelled() => return,
                    }
                }
            });
        }
        engine
    }

    /// Stop the timer task.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }

    /// SIGUSR1: refuse puts from now on (one-way, as in the reference).
    pub fn enter_drain_mode(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Which storage engine serves this instance.
    pub fn store_name(&self) -> &'static str {
        self.store.name()
    }

    pub fn max_job_size(&self) -> u32 {
        self.max_job_size
    }

    /// A new connection: it uses and watches `default`. If the store cannot record
    /// that now, the connection is served anyway (its commands answer INTERNAL_ERROR
    /// while the store is away) and the store puts its references right later.
    pub async fn connect(&self) -> Session {
        let id = ConnId(self.next_conn.fetch_add(1, Ordering::Relaxed));
        let session = Session::new(id);
        let used = self.store.use_tube(&session.using).await;
        let watched = self.store.watch_tube(&session.using).await;
        if let Err(err) = used.and(watched) {
            tracing::warn!(%err, conn = id.0, "could not record a new connection's tubes");
        }
        Counters::inc(&self.counters.connections);
        Counters::inc(&self.counters.total_connections);
        session
    }

    /// A connection ended. With `release_jobs`, its reservations go back to ready at
    /// once (a close or quit); without, they stay until their TTR (a shutdown hands
    /// nothing back that a client still holds).
    pub async fn disconnect(&self, mut session: Session, release_jobs: bool) {
        // The reference clears the watch list by deleting its first element until empty
        // (which fixes the order in which tubes die), then drops the used tube.
        let mut watching = Vec::with_capacity(session.watching.len());
        while let Some(t) = session.watching.as_slice().first().cloned() {
            session.watching.remove(&t);
            watching.push(t);
        }
        // One step, so no other connection's command sees half of the close.
        match self
            .store
            .close(
                session.id,
                &watching,
                &session.using,
                release_jobs,
                self.clock.now(),
            )
            .await
        {
            Ok(tubes) => self.serve(tubes).await,
            Err(err) => tracing::warn!(
                %err,
                conn = session.id.0,
                "could not close a connection in the store; its jobs come back at their TTR"
            ),
        }
        // Counted last, so a connection that `stats` no longer shows has finished
        // closing (its jobs and tube references are back).
        Counters::dec(&self.counters.connections);
        if session.producer {
            Counters::dec(&self.counters.producers);
        }
        if session.worker {
            Counters::dec(&self.counters.workers);
        }
    }

    /// Run one request for `session`.
    pub async fn execute(self: &Arc<Self>, session: &mut Session, req: Request) -> Outcome {
        let result = match req {
            Request::Command(Command::Quit) => return Outcome::Quit,
            Request::Command(Command::Reserve) => {
                self.counters.count(Counter::Reserve);
                self.reserve(session, None).await
            }
            Request::Command(Command::ReserveWithTimeout(secs)) => {
                self.counters.count(Counter::ReserveWithTimeout);
                self.reserve(session, Some(secs)).await
            }
            Request::Command(cmd) => {
                if let Some(c) = cmd.counter() {
                    self.counters.count(c);
                }
                self.command(session, cmd).await.map(Outcome::Reply)
            }
            Request::Put(put) => {
                self.counters.count(Counter::Put);
                self.put(session, put).await.map(Outcome::Reply)
            }
            Request::Rejected(r) => self.rejected(session, r).await.map(Outcome::Reply),
        };
        result.unwrap_or_else(|err: StoreError| {
            tracing::warn!(
                %err,
                conn = session.id.0,
                "a command failed in the store and was answered INTERNAL_ERROR (clients may retry; check that the store is reachable)"
            );
            Outcome::Reply(Reply::InternalError)
        })
    }

    async fn rejected(&self, session: &mut Session, r: Rejection) -> StoreResult<Reply> {
        match r {
            Rejection::UnknownCommand => {}
            Rejection::BadFormat { counted } => {
                if let Some(c) = counted {
                    self.counters.count(c);
                }
            }
            Rejection::JobTooBig => self.counters.count(Counter::Put),
            Rejection::ExpectedCrlf => {
                // The reference made the job before reading its body: the id is used up.
                self.counters.count(Counter::Put);
                self.mark_producer(session);
                self.store.burn_id().await?;
            }
        }
        Ok(r.into())
    }

    async fn put(&self, session: &mut Session, put: Put) -> StoreResult<Reply> {
        self.mark_producer(session);
        if self.is_draining() {
            self.store.burn_id().await?;
            return Ok(Reply::Draining);
        }
        let now = self.clock.now();
        let tube = session.using.clone();
        let job = NewJob {
            tube: tube.clone(),
            pri: put.pri,
            delay_secs: put.delay,
            ttr_secs: put.ttr.max(1),
            body: put.body,
        };
        let id = self.store.put(job, now).await?;
        if put.delay > 0 {
            self.timer.hint(now + u64::from(put.delay) * NANOS_PER_SEC);
        } else {
            self.serve([tube]).await;
        }
        Ok(Reply::Inserted(id))
    }

    async fn command(&self, s: &mut Session, cmd: Command) -> StoreResult<Reply> {
        let now = self.clock.now();
        Ok(match cmd {
            // A reference change that fails is undone before INTERNAL_ERROR, so the
            // session and the store's count of references never disagree; releasing a
            // reference cannot fail visibly (the store reconciles it later).
            Command::Use(tube) => {
                if tube != s.using {
                    if let Err(err) = self.store.use_tube(&tube).await {
                        let _ = self.store.unuse_tube(&tube).await;
                        return Err(err);
                    }
                    let _ = self.store.unuse_tube(&s.using).await;
                    s.using = tube;
                }
                Reply::Using(s.using.clone())
            }
            Command::Watch(tube) => {
                if !s.watching.contains(&tube) {
                    if let Err(err) = self.store.watch_tube(&tube).await {
                        let _ = self.store.unwatch_tube(&tube).await;
                        return Err(err);
                    }
                    s.watching.insert(tube);
                    s.watch_list_changed();
                }
                Reply::Watching(s.watching.len())
            }
            Command::Ignore(tube) => {
                if s.watching.contains(&tube) {
                    if s.watching.len() < 2 {
                        return Ok(Reply::NotIgnored);
                    }
                    s.watching.remove(&tube);
                    s.watch_list_changed();
                    let _ = self.store.unwatch_tube(&tube).await;
                }
                Reply::Watching(s.watching.len())
            }
            Command::ReserveJob(id) => match self.store.reserve_job(s.id, id, now).await? {
                Some(job) => {
                    self.mark_worker(s);
                    self.timer.hint(job.deadline);
                    self.observe_wait(job.waited);
                    Reply::Reserved {
                        id: job.id,
                        body: job.body,
                    }
                }
                None => Reply::NotFound,
            },
            Command::Delete(id) => found(self.store.delete(s.id, id).await?, Reply::Deleted),
            Command::Release { id, pri, delay } => {
                match self.store.release(s.id, id, pri, delay, now).await? {
                    Some(tube) => {
                        if delay > 0 {
                            self.timer.hint(now + u64::from(delay) * NANOS_PER_SEC);
                        } else {
                            self.serve([tube]).await;
                        }
                        Reply::Released
                    }
                    None => Reply::NotFound,
                }
            }
            Command::Bury { id, pri } => {
                found(self.store.bury(s.id, id, pri).await?, Reply::Buried)
            }
            Command::Touch(id) => found(
                self.store.touch(s.id, id, now).await?.is_some(),
                Reply::Touched,
            ),
            Command::Peek(id) => found_job(self.store.peek(id).await?),
            Command::PeekReady => found_job(self.store.peek_ready(&s.using).await?),
            Command::PeekDelayed => found_job(self.store.peek_delayed(&s.using).await?),
            Command::PeekBuried => found_job(self.store.peek_buried(&s.using).await?),
            Command::Kick(bound) => {
                let n = self.store.kick(&s.using, bound, now).await?;
                if n > 0 {
                    self.serve([s.using.clone()]).await;
                }
                Reply::Kicked(n)
            }
            Command::KickJob(id) => match self.store.kick_job(id, now).await? {
                Some(tube) => {
                    self.serve([tube]).await;
                    Reply::KickedJob
                }
                None => Reply::NotFound,
            },
            Command::StatsJob(id) => match self.job_stats(id, now).await? {
                Some(stats) => Reply::Ok(yaml::job_stats(&stats)),
                None => Reply::NotFound,
            },
            Command::StatsTube(tube) => match self.tube_stats(&tube, now).await? {
                Some(stats) => Reply::Ok(yaml::tube_stats(&stats)),
                None => Reply::NotFound,
            },
            Command::Stats => Reply::Ok(yaml::server_stats(&self.server_stats(now).await?)),
            Command::ListTubes => Reply::Ok(yaml::tube_list(&self.store.list_tubes().await?)),
            Command::ListTubeUsed => Reply::Using(s.using.clone()),
            Command::ListTubesWatched => Reply::Ok(yaml::tube_list(s.watching.iter())),
            Command::PauseTube { tube, delay } => {
                if self.store.pause(&tube, delay, now).await? {
                    self.timer
                        .hint(now + (u64::from(delay) * NANOS_PER_SEC).max(1));
                    Reply::Paused
                } else {
                    Reply::NotFound
                }
            }
            // Handled by `execute`.
            Command::Quit | Command::Reserve | Command::ReserveWithTimeout(_) => {
                Reply::InternalError
            }
        })
    }

    /// `reserve` / `reserve-with-timeout`: DEADLINE_SOON check, an immediate job, or a
    /// registered waiter.
    async fn reserve(
        self: &Arc<Self>,
        s: &mut Session,
        timeout: Option<u32>,
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
            return Ok(Outcome::Reply(Reply::DeadlineSoon));
        }
        if let Some(job) = self.store.reserve(s.id, &watched, now).await? {
            self.timer.hint(job.deadline);
            self.observe_wait(job.waited);
            return Ok(Outcome::Reply(Reply::Reserved {
                id: job.id,
                body: job.body,
            }));
        }
        let timeout_at = timeout.map(|t| now + u64::from(t) * NANOS_PER_SEC);
        // The wait ends at the sooner of the timeout and the margin; DEADLINE_SOON wins
        // a tie, as in the reference's connection tick.
        let wake = match (margin, timeout_at) {
            (Some(m), Some(t)) if m <= t => Some((m, GiveUp::DeadlineSoon)),
            (_, Some(t)) => Some((t, GiveUp::TimedOut)),
            (Some(m), None) => Some((m, GiveUp::DeadlineSoon)),
            (None, None) => None,
        };
        if let Some((at, why)) = wake
            && at <= now
        {
            return Ok(Outcome::Reply(why.reply()));
        }
        let (seq, rx) = self.waiters.register(s.id, watched.clone());
        // A job may have become ready between the attempt above and registering.
        self.serve(watched.iter().cloned()).await;
        Ok(Outcome::Wait(Waiting {
            engine: self.clone(),
            seq,
            rx,
            wake,
            woke: false,
            done: false,
        }))
    }

    /// Hand ready jobs in `tubes` to waiting connections (see the module invariant).
    /// Single-flight: if a pass is already running, it picks these tubes up too.
    ///
    /// A pass asks the store for several waiters at once (a batch), so that with Redis
    /// their reserves share round trips instead of queueing one behind another. The
    /// batch is as large as the number of wake-ups that arrived (each may have made one
    /// job ready), and doubles while every reserve in it finds a job; a reserve that
    /// finds none ends the pass for its tubes. Results are handled in claim order, and
    /// the store runs the reserves in that order, so earlier waiters get better jobs.
    pub(crate) async fn serve(&self, tubes: impl IntoIterator<Item = TubeName>) {
        if self.waiters.is_empty() {
            return;
        }
        {
            let mut pending = self.pending();
            let mut signals = 0;
            for t in tubes {
                pending.insert(t);
                signals += 1;
            }
            if pending.is_empty() {
                return;
            }
            self.signals.fetch_add(signals, Ordering::SeqCst);
        }
        if self.serving.swap(true, Ordering::SeqCst) {
            return;
        }
        loop {
            let mut tubes = std::mem::take(&mut *self.pending());
            if tubes.is_empty() {
                self.serving.store(false, Ordering::SeqCst);
                // Work may have been queued after we looked and before we let go.
                if self.pending().is_empty() || self.serving.swap(true, Ordering::SeqCst) {
                    return;
                }
                continue;
            }
            let mut after = 0;
            let mut budget = self.signals.swap(0, Ordering::SeqCst).max(1);
            while !tubes.is_empty() {
                let mut claims = Vec::new();
                while claims.len() < budget.min(MAX_SERVE_BATCH) {
                    let Some(claim) = self.waiters.claim_next(&tubes, after) else {
                        break;
                    };
                    after = claim.seq;
                    claims.push(claim);
                }
                if claims.is_empty() {
                    break;
                }
                // Only the tubes this pass serves can have gained a job since each
                // waiter last found none (every change that makes a job ready comes
                // through here with its tube), so a waiter's reserve looks at those of
                // its tubes alone: a worker watching a hundred tubes costs one.
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
                                Err(_) => {
                                    // The waiter's connection is gone: return what it now
                                    // holds (a job it never got is not a wait that ended).
                                    let now = self.clock.now();
                                    if let Ok(back) = self.store.release_all(claim.conn, now).await
                                    {
                                        self.pending().extend(back);
                                    }
                                }
                            }
                        }
                        Ok(None) => {
                            all_found = false;
                            self.waiters.unclaim(claim.seq);
                            // None of this waiter's tubes (of this pass) has a reservable
                            // job.
                            for t in claim.watched.iter() {
                                tubes.remove(t);
                            }
                        }
                        Err(err) => {
                            failed = true;
                            self.waiters.unclaim(claim.seq);
                            tracing::warn!(%err, "serving waiters failed; they keep waiting");
                        }
                    }
                }
                if failed {
                    break;
                }
                let more = self.signals.swap(0, Ordering::SeqCst);
                budget = if all_found {
                    claims.len() * 2 + more
                } else {
                    more.max(1)
                };
            }
        }
    }

    /// Serve the tubes someone waits on that hold ready jobs. A shared store's wake-up
    /// from another instance can be lost (the Redis connection dropped and came back),
    /// and a waiter is otherwise only looked at again when its tube changes here; the
    /// timer's safety sweep calls this (one ready-count read per waited-on tube).
    pub(crate) async fn sweep_waiting(&self) {
        let tubes = self.waiters.tubes();
        if tubes.is_empty() {
            return;
        }
        let ready = join_all(
            tubes
                .iter()
                .map(|t| self.store.has_ready(std::slice::from_ref(t))),
        )
        .await;
        let found: Vec<TubeName> = tubes
            .into_iter()
            .zip(ready)
            .filter_map(|(t, r)| matches!(r, Ok(true)).then_some(t))
            .collect();
        self.serve(found).await;
    }

    fn pending(&self) -> MutexGuard<'_, HashSet<TubeName>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A reserve handed out a job: count how long it had waited as ready (a job whose
    /// ready time the store did not record is left out rather than guessed).
    fn observe_wait(&self, waited: Option<Nanos>) {
        if let Some(w) = waited {
            self.counters.wait.observe(w);
        }
    }

    fn mark_producer(&self, s: &mut Session) {
        if !s.producer {
            s.producer = true;
            Counters::inc(&self.counters.producers);
        }
    }

    fn mark_worker(&self, s: &mut Session) {
        if !s.worker {
            s.worker = true;
            Counters::inc(&self.counters.workers);
        }
    }

    async fn job_stats(&self, id: u64, now: Nanos) -> StoreResult<Option<JobStats>> {
        let Some(j) = self.store.job_info(id, now).await? else {
            return Ok(None);
        };
        let now = j.now;
        Ok(Some(JobStats {
            id: j.id,
            tube: j.tube.to_string(),
            state: j.state.name(),
            pri: j.pri,
            age: now.saturating_sub(j.created) / NANOS_PER_SEC,
            delay: u64::from(j.delay_secs),
            ttr: u64::from(j.ttr_secs),
            time_left: j
                .deadline
                .map_or(0, |d| d.saturating_sub(now) / NANOS_PER_SEC),
            file: 0,
            reserves: j.reserves,
            timeouts: j.timeouts,
            releases: j.releases,
            buries: j.buries,
            kicks: j.kicks,
        }))
    }

    /// The `stats-tube` document's figures; `None` when the tube does not exist.
    pub async fn tube_stats(&self, tube: &TubeName, now: Nanos) -> StoreResult<Option<TubeStats>> {
        let Some(t) = self.store.tube_info(tube, now).await? else {
            return Ok(None);
        };
        let now = t.now;
        let paused = t.pause > 0 && t.pause_until > now;
        Ok(Some(TubeStats {
            name: tube.to_string(),
            current_jobs_urgent: t.urgent,
            current_jobs_ready: t.ready,
            current_jobs_reserved: t.reserved,
            current_jobs_delayed: t.delayed,
            current_jobs_buried: t.buried,
            total_jobs: t.total_jobs,
            current_using: t.using,
            current_watching: t.watching,
            current_waiting: self.waiters.waiting_on(tube),
            cmd_delete: t.cmd_delete,
            cmd_pause_tube: t.cmd_pause,
            pause: if paused { t.pause / NANOS_PER_SEC } else { 0 },
            pause_time_left: if paused {
                (t.pause_until - now) / NANOS_PER_SEC
            } else {
                0
            },
        }))
    }

    /// The `stats` document's figures.
    pub async fn server_stats(&self, now: Nanos) -> StoreResult<ServerStats> {
        let totals = self.store.totals().await?;
        let (utime, stime) = host::rusage();
        let c = &self.counters;
        Ok(ServerStats {
            current_jobs_urgent: totals.urgent,
            current_jobs_ready: totals.ready,
            current_jobs_reserved: totals.reserved,
            current_jobs_delayed: totals.delayed,
            current_jobs_buried: totals.buried,
            cmd: c.cmd_snapshot(),
            job_timeouts: totals.job_timeouts,
            total_jobs: totals.total_jobs,
            max_job_size: u64::from(self.max_job_size),
            current_tubes: totals.tubes,
            current_connections: Counters::get(&c.connections),
            current_producers: Counters::get(&c.producers),
            current_workers: Counters::get(&c.workers),
            current_waiting: self.waiters.total(),
            total_connections: Counters::get(&c.total_connections),
            pid: self.host.pid,
            version: PROTOCOL_VERSION.to_string(),
            rusage_utime: utime,
            rusage_stime: stime,
            uptime: now.saturating_sub(self.started) / NANOS_PER_SEC,
            binlog_max_size: BINLOG_MAX_SIZE,
            draining: self.is_draining(),
            id: self.host.id.clone(),
            hostname: self.host.hostname.clone(),
            os: self.host.os.clone(),
            platform: self.host.platform.clone(),
        })
    }
}

impl Engine {
    /// Whether the store answers now (for readiness probes).
    pub async fn store_ready(&self) -> StoreResult<()> {
        self.store.ping().await
    }

    /// Everything the metrics endpoint shows, through [`Engine::server_stats`] and
    /// [`Engine::tube_stats`] (the functions behind `stats` and `stats-tube`). A tube
    /// that disappears between the list and its figures is left out.
    pub async fn snapshot(&self) -> StoreResult<Snapshot> {
        let now = self.clock.now();
        let server = self.server_stats(now).await?;
        let names = self.store.list_tubes().await?;
        let mut tubes = Vec::with_capacity(names.len());
        for name in &names {
            if let Some(t) = self.tube_stats(name, now).await? {
                tubes.push(t);
            }
        }
        Ok(Snapshot {
            engine: self.store_name(),
            server,
            tubes,
            wait: self.counters.wait.snapshot(),
        })
    }
}

fn found(ok: bool, reply: Reply) -> Reply {
    if ok { reply } else { Reply::NotFound }
}

fn found_job(job: Option<(u64, bytes::Bytes)>) -> Reply {
    match job {
        Some((id, body)) => Reply::Found { id, body },
        None => Reply::NotFound,
    }
}

/// A reserve waiting for a job, a timeout, the safety margin, or a hang-up.
/// Dropping it unanswered withdraws the waiter.
#[derive(Debug)]
pub struct Waiting {
    engine: Arc<Engine>,
    seq: u64,
    rx: oneshot::Receiver<Delivery>,
    wake: Option<(Nanos, GiveUp)>,
    /// The wake time passed and the waiter asked to give up.
    woke: bool,
    done: bool,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

impl Waiting {
    /// Wait for the answer. Cancel-safe: may be polled again after being interrupted.
    pub async fn wait(&mut self) -> Reply {
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
                delivery = &mut self.rx => {
                    self.done = true;
                    return match delivery {
                        Ok(Delivery::Job(job)) => Reply::Reserved { id: job.id, body: job.body },
                        Ok(Delivery::GaveUp(why)) => why.reply(),
                        Err(_) => Reply::InternalError,
                    };
                }
                _ = sleep => {
                    self.woke = true;
                    if let Some((_, why)) = wake
                        && self.engine.waiters.give_up(self.seq, why)
                    {
                        self.done = true;
                        return why.reply();
                    }
                }
            }
        }
    }

    /// The client half-closed while waiting: the reference answers TIMED_OUT.
    pub async fn hang_up(&mut self) -> Reply {
        if !self.woke {
            self.woke = true;
            if self.engine.waiters.give_up(self.seq, GiveUp::TimedOut) {
                self.done = true;
                return Reply::TimedOut;
            }
        }
        self.wait().await
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if !self.done {
            self.engine.waiters.forget(self.seq);
        }
    }
}
