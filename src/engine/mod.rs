//! beanstalkd's semantics on top of any [`Store`]: what each command does to a session
//! and the store, the blocking reserve and its waiters, DEADLINE_SOON, the deadline
//! timer, drain mode, and this instance's counters.
//!
//! Module map (each file has one job):
//! - `mod.rs`: the [`Engine`] itself: its state, start and shutdown, connect and
//!   disconnect, drain mode, the producer/worker flags and the wait histogram.
//! - `dispatch.rs`: [`Engine::execute`] and every command except reserve; each reply
//!   comes back with its acknowledgement ([`Answer`]: now, or once change N is
//!   durable).
//! - `extension.rs`: [`Engine::execute_extension`], the protocol extensions
//!   (docs/EXTENSIONS.md), and which of their families this build serves; `keys.rs`:
//!   keyed puts and the commands by key.
//! - `reserve.rs`: `reserve` and `reserve-with-timeout`: DEADLINE_SOON, the waiter.
//! - `serve.rs`: serve passes, run by one task, that hand ready jobs to waiters.
//! - `waiters.rs`: the registry of waiting connections and the claim protocol.
//! - `waiting.rs`: [`Waiting`], a connection's side of one blocked reserve.
//! - `timer.rs`: the deadline timer task (delays, TTRs, pauses, the safety sweep).
//! - `schedules.rs`: the schedules' runner task (docs/SCHEDULES.md): fires each tick
//!   through the store, as a put that serves the tube's waiters.
//! - `stats.rs`: the `stats`, `stats-tube` and `stats-job` figures and documents.
//! - `counters.rs`, `host.rs`, `session.rs`: this instance's tallies, the process's
//!   identity, a connection's protocol state.
//! - `clients.rs`, `clients_list.rs`: the registry of live connections and the
//!   operator's listing of them (with the jobs each holds and its blocked reserve).
//!
//! Ownership: one [`Engine`] per process, shared (`Arc`) by all connection tasks, the
//! timer task and the serve task; the engine keeps both tasks' handles and
//! [`Engine::shutdown`] awaits them. Sessions are owned by their connection tasks and
//! lent to [`Engine::execute`]. No lock is held across an `.await`.
//!
//! Acknowledgements: with a store that persists its changes in batches (`-b`, leader
//! mode), a reply that depends on the store's state may be written only once the
//! changes it saw are durable. The engine decides which change each reply waits for
//! ([`Ack`]) where it makes the reply; the connection only holds the reply back until
//! [`Engine::durable`] says so.
//!
//! Invariant ("nobody waits while a job is there for them"): after any change that can
//! make a job reservable (put, release, kick, close, delay or TTR expiry, unpause) and
//! after a waiter registers, a serve pass runs for the affected tubes before the
//! command's reply is written.

pub mod admin;
pub mod admin_bulk;
pub mod admin_retained;
pub mod admin_schedules;
mod batch;
pub mod clients;
pub mod clients_list;
mod dispatch;
mod extension;
mod keys;
mod reserve;
pub mod schedules;
mod serve;
mod waiting;

pub mod counters;
pub mod history;
pub mod host;
pub mod session;
pub mod stats;
pub mod timer;
pub mod waiters;

#[cfg(test)]
mod tests;

use crate::util::memory::MemoryBudget;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::protocol::{Dialect, Reply};
use crate::store::{
    AnyStore, Change, ConnId, JobId, KeyLimits, Nanos, Reserved, Store, StoreResult,
};
use crate::util::lock;

pub use crate::time::Clock;
pub use batch::FLUSH_STEP;
pub use counters::Counters;
pub use extension::SERVED_FAMILIES;
pub use host::HostInfo;
pub use keys::{KeyChange, KeyFound};
pub use session::Session;
pub use stats::{BinlogStats, JobStats, PROTOCOL_VERSION, ServerStats, Snapshot, TubeStats};
pub use timer::Timer;
pub use waiters::{Blocked, Delivery, GiveUp, Waiters};
pub use waiting::Waiting;

/// Settings the engine needs.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub max_job_size: u32,
    /// Puts answer OUT_OF_MEMORY past this budget (`--memory-limit`, or the cgroup's).
    pub memory: Option<Arc<MemoryBudget>>,
    /// The beanstalkd release whose replies to give (`--compat`).
    pub dialect: Dialect,
    /// Whether connections speak the protocol extensions (`--extensions`).
    pub extensions: bool,
    /// The bounds on keys' dedupe windows (`--key-window-max`, `--key-windows-max`).
    pub keys: KeyLimits,
    /// The tube policies, followed for as long as the engine runs (`None`: no rules).
    pub policies: Option<tokio::sync::watch::Receiver<Arc<crate::store::Policies>>>,
    /// The schedules this engine fires, followed for as long as it runs (`None`: this
    /// engine fires none, e.g. tests).
    pub schedules: Option<tokio::sync::watch::Receiver<Arc<crate::schedule::Schedules>>>,
    /// What to keep of deleted jobs (`--retain*`; off by default).
    pub retention: crate::store::retention::RetentionLimits,
}

/// When a reply may be written: its acknowledgement, decided by the engine with the
/// reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ack {
    /// At once: the reply depends on nothing a store has yet to persist (a session's
    /// own command, a rejected request, or any reply of a store whose changes are
    /// durable when made).
    Now,
    /// Once every change up to this one is durable, and only while this instance may
    /// still acknowledge (a leader's lease): the store's state the reply saw. A
    /// RESERVED of a persisting store is checked so even when nothing new changed
    /// ([`Change::NONE`]), since the lease may have run out.
    After(Change),
}

/// A reply and its acknowledgement.
#[derive(Debug)]
pub struct Answer {
    pub reply: Reply,
    pub ack: Ack,
}

impl Answer {
    /// A reply that may be written at once.
    pub fn now(reply: Reply) -> Answer {
        Answer {
            reply,
            ack: Ack::Now,
        }
    }

    /// RESERVED for `job`: acknowledged once the store's changes up to before the
    /// reservation are durable (the reservation itself need not be, see
    /// [`Reserved::last_change`]).
    fn reserved(job: Reserved) -> Answer {
        Answer {
            reply: Reply::Reserved {
                id: job.id,
                body: job.body,
            },
            ack: job.last_change.map_or(Ack::Now, Ack::After),
        }
    }
}

/// What running one request leads to.
#[derive(Debug)]
pub enum Outcome {
    Reply(Answer),
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
    memory: Option<Arc<MemoryBudget>>,
    dialect: Dialect,
    extensions: bool,
    key_limits: KeyLimits,
    draining: AtomicBool,
    /// Requests for serve passes, to the serve task (see `serve.rs`). Unbounded, and
    /// bounded in practice by the connections: each sends at most one request per
    /// command it runs, and the serve task takes every queued one at each round.
    serve_requests: mpsc::UnboundedSender<serve::PassRequest>,
    /// How many times a job may have become ready (see `reserve.rs`).
    wakeups: AtomicU64,
    /// The serve task is in a pass that waits on the store (see `serve.rs`).
    pass_in_flight: AtomicBool,
    /// Where the next safety sweep of waited-on tubes starts (see `serve.rs`).
    sweep_from: AtomicUsize,
    /// The timer and serve tasks, awaited by [`Engine::shutdown`].
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Each open client connection (its address names the holder of a reserved job in
    /// the operator API); bounded by the open connections.
    clients: clients::Clients,
    /// What the schedules' runner fired (see `schedules.rs`).
    schedule_fires: schedules::Fires,
    /// What the store keeps of deleted jobs (`--retain*`), for the API's answers.
    retention: crate::store::retention::RetentionLimits,
}

/// Hand the store each new set of tube policies (after the one `Engine::start` gave
/// it), until the engine stops.
async fn follow_policies(
    engine: Arc<Engine>,
    mut policies: tokio::sync::watch::Receiver<Arc<crate::store::Policies>>,
) {
    loop {
        tokio::select! {
            _ = engine.stop.cancelled() => return,
            changed = policies.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        let set = policies.borrow_and_update().clone();
        engine.store.set_policies(set);
    }
}

impl Engine {
    /// Build the engine and start its timer and serve tasks (call inside a tokio
    /// runtime). Both end at [`Engine::shutdown`].
    pub fn start(store: AnyStore, config: EngineConfig) -> Arc<Engine> {
        let clock = store.clock();
        store.set_key_limits(config.keys);
        store.set_retention(config.retention);
        if let Some(policies) = &config.policies {
            store.set_policies(policies.borrow().clone());
        }
        let wake_events = store.take_wake_events();
        let (serve_requests, requests) = mpsc::unbounded_channel();
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
            memory: config.memory,
            dialect: config.dialect,
            extensions: config.extensions,
            key_limits: config.keys,
            draining: AtomicBool::new(false),
            serve_requests,
            wakeups: AtomicU64::new(0),
            pass_in_flight: AtomicBool::new(false),
            sweep_from: AtomicUsize::new(0),
            tasks: Mutex::new(Vec::new()),
            clients: clients::Clients::default(),
            schedule_fires: schedules::Fires::default(),
            retention: config.retention,
        });
        let timer = tokio::spawn(timer::run(engine.clone()));
        let serve = tokio::spawn(serve::run(engine.clone(), requests, wake_events));
        lock(&engine.tasks).extend([timer, serve]);
        if let Some(policies) = config.policies {
            let follow = tokio::spawn(follow_policies(engine.clone(), policies));
            lock(&engine.tasks).push(follow);
        }
        if let Some(set) = config.schedules {
            let runner = tokio::spawn(schedules::run(engine.clone(), set));
            lock(&engine.tasks).push(runner);
        }
        engine
    }

    /// Stop the timer and serve tasks, and wait until they have ended (a pass or a tick
    /// under way finishes first: its store calls are bounded).
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let tasks = std::mem::take(&mut *lock(&self.tasks));
        for task in tasks {
            let _ = task.await;
        }
    }

    /// After the last connection: tell the store the process is going.
    pub async fn close_store(&self) {
        self.store.shutdown().await;
    }

    /// SIGUSR1: refuse puts from now on (one-way, as in the reference).
    pub fn enter_drain_mode(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// For a shared store: changes each time the store started a fresh namespace (the
    /// one it served was lost); the connections open before must then be closed.
    pub fn namespace_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        self.store.namespace_changes()
    }

    /// Which storage engine serves this instance.
    pub fn store_name(&self) -> &'static str {
        self.store.name()
    }

    pub fn max_job_size(&self) -> u32 {
        self.max_job_size
    }

    /// The memory budget puts are admitted against, if any.
    pub fn memory_budget(&self) -> Option<Arc<MemoryBudget>> {
        self.memory.clone()
    }

    /// The store's last change (see [`Store::durable`]).
    pub fn last_change(&self) -> Change {
        self.store.last_change()
    }

    /// Jobs reserved for `session` whose RESERVED was replaced by INTERNAL_ERROR go
    /// back to ready (see [`Store::give_back`]), and to whoever waits for them.
    pub async fn give_back(&self, session: &Session, ids: &[JobId]) {
        for &id in ids {
            match self.store.give_back(session.id, id, self.clock.now()).await {
                Ok(Some(tube)) => self.serve([tube]).await,
                Ok(None) => {}
                Err(err) => tracing::warn!(
                    %err,
                    conn = session.id.0,
                    id,
                    "could not give back a job whose reservation was not acknowledged; it comes back at its TTR"
                ),
            }
        }
    }

    /// Wait until the store's changes up to `upto` are durable (an [`Ack::After`]).
    pub async fn durable(&self, upto: Change) -> StoreResult<()> {
        self.store.durable(upto).await
    }

    /// Whether the store answers now (for readiness probes).
    pub async fn store_ready(&self) -> StoreResult<()> {
        self.store.ping().await
    }

    /// A new connection: it uses and watches `default`. If the store cannot record
    /// that now, the connection is served anyway (its commands answer INTERNAL_ERROR
    /// while the store is away) and the store puts its references right later.
    pub async fn connect(&self) -> Session {
        let id = ConnId::next();
        let client = Arc::new(clients::Client::new(id, self.clock.now()));
        self.clients.add(client.clone());
        let session = Session::new(id, client);
        let used = self.store.use_tube(&session.using).await;
        let watched = self.store.watch_tube(&session.using).await;
        if let Err(err) = used.and(watched) {
            tracing::warn!(%err, conn = id.0, "could not record a new connection's tubes");
        }
        Counters::inc(&self.counters.connections);
        Counters::inc(&self.counters.total_connections);
        session
    }

    /// A connection that turned out to be no client's (another instance checking
    /// whom an address reaches, see `server::hello`) ended: as [`Engine::disconnect`],
    /// and it leaves no trace in `total-connections` either.
    pub async fn disconnect_uncounted(&self, session: Session) {
        self.disconnect(session, true).await;
        Counters::dec(&self.counters.total_connections);
    }

    /// A connection ended. With `release_jobs`, its reservations go back to ready at
    /// once (a close or quit); without, they stay until their TTR (a shutdown hands
    /// nothing back that a client still holds).
    pub async fn disconnect(&self, mut session: Session, release_jobs: bool) {
        self.clients.remove(session.id);
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
                Some(&session.using),
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

    /// A job reserved for the connection asking: the timer learns its deadline, the
    /// histogram its wait, and the client gets it.
    fn hand_out(&self, job: Reserved) -> Answer {
        self.timer.hint(job.deadline);
        self.observe_wait(job.waited);
        Answer::reserved(job)
    }

    /// `reply`, which depends on the store's state as it is now: acknowledged once the
    /// store's last change is durable (at once when it has none to persist).
    fn after_latest(&self, reply: Reply) -> Answer {
        let ack = match self.store.last_change() {
            Change::NONE => Ack::Now,
            change => Ack::After(change),
        };
        Answer { reply, ack }
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
            s.client.update(|c| c.producer = true);
            Counters::inc(&self.counters.producers);
        }
    }

    fn mark_worker(&self, s: &mut Session) {
        if !s.worker {
            s.worker = true;
            s.client.update(|c| c.worker = true);
            Counters::inc(&self.counters.workers);
        }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}
