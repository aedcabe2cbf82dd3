//! Redis leader mode: which instance serves a namespace, and what the others do.
//!
//! Every instance started with the same Redis URL and prefix runs [`Cluster::run`]. The
//! one that takes the lease (`lease.rs`) leads: it loads every job from Redis into a
//! memory store (jobs that were reserved are ready again: their connections died with
//! the previous leader), starts an engine on it exactly as the memory engine runs, and
//! a committer that writes every change to Redis in batches fenced by its lease
//! (`crate::persist`). The others are standbys: they relay their clients, byte for
//! byte, to the leader's advertised address, and take over when its lease lapses
//! (`standby.rs`: following the leader, checking it can be reached, readiness;
//! `lead.rs`: a term as leader, step by step; `takeover.rs`: loading the namespace when
//! this instance takes the lead).
//!
//! Ownership: the role (what a new connection gets) is published on a watch channel by
//! the one task running [`Cluster::run`]; connections read it through
//! [`crate::server::Router`]. A term (one leadership, or one standby period under one
//! leader) has a cancellation token; ending the term closes its connections. At a clean
//! shutdown the role task ends once [`Cluster::connections_finished`] was called and a
//! leadership has written its last batches and given the lease up.
//!
//! Fail-stop: a leader that cannot renew its lease stops acknowledging when the lease's
//! validity runs out on its own monotonic clock (before Redis can let it lapse for
//! anyone else), closes its clients' connections and discards its memory; writes are
//! fenced besides, so one that still reaches Redis late is refused.

mod history;
mod lead;
pub mod lease;
pub mod standby;
mod takeover;

use std::sync::Arc;
use std::time::Duration;

use rand::RngExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, EngineConfig};
use crate::redis::keys::Keys;
use crate::redis::policy::{self, PolicyError};
use crate::redis::{CallError, Connector, RESPONSE_TIMEOUT, RedisConfig, RedisConn};
use crate::server::relay::Upstream;
use crate::server::{Route, Router};
use crate::store::StoreError;
use crate::store::memory::CutLimit;
use crate::util::lock;
use lease::{Holder, Lease, LeaseError};
pub use standby::{NoLeaderApi, NotReady, Readiness};

/// How long a new connection waits for a role (a leader to relay to, or this instance's
/// own leadership) before it is closed.
const ROUTE_WAIT: Duration = Duration::from_secs(5);
/// How often a waiting connection looks whether the lease became unreadable.
const ROUTE_POLL: Duration = Duration::from_millis(100);
/// A batch carries at most this much (one script call; Redis runs it whole).
const BATCH_LIMIT: CutLimit = CutLimit {
    records: 5_000,
    body_bytes: 8 << 20,
};

/// Settings of leader mode.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub redis: RedisConfig,
    /// Where standbys reach this instance (HOST:PORT).
    pub advertise: String,
    /// Where standbys forward operator API requests while this instance leads
    /// (HOST:PORT of its HTTP listener; empty: it serves none).
    pub http_advertise: String,
    pub lease: Duration,
    pub engine: EngineConfig,
    /// Start (and keep running, with a warning) on a Redis whose eviction policy may
    /// drop keys (`--redis-allow-eviction`).
    pub allow_eviction: bool,
    /// Acknowledge a batch once this many replicas confirm it (0: do not wait).
    pub wait_replicas: u32,
    pub wait_timeout: Duration,
    /// The instance secret relay greetings prove (`--relay-secret-file`).
    pub relay_secret: Option<crate::access::Secret>,
}

/// This instance's part in leader mode, what a new connection gets (its *role* in
/// docs/LEADER.md; a `Duty` so as not to be read as an access role, `crate::access::Role`).
#[derive(Clone)]
enum Duty {
    /// Starting, loading, or between leaders: wait.
    Unknown,
    /// Shutting down: nothing (the connection is closed at once).
    Stopped,
    Leader {
        engine: Arc<Engine>,
        term: CancellationToken,
    },
    Standby {
        epoch: u64,
        upstream: Arc<Upstream>,
        /// The leader's operator API address, when it published one.
        api: Option<String>,
        term: CancellationToken,
    },
}

/// This instance's part in leader mode.
pub struct Cluster {
    config: ClusterConfig,
    /// This instance's id (random, new with each process), in its lease token and its
    /// relay greetings.
    instance: Arc<str>,
    connector: Connector,
    conn: RedisConn,
    keys: Keys,
    lease: Lease,
    role: watch::Sender<Duty>,
    /// SIGUSR1 was received: every engine this instance leads with refuses puts.
    draining: std::sync::atomic::AtomicBool,
    /// A takeover found a layout this version cannot read (`takeover.rs`): the instance
    /// never contends for the lease again, and follows whoever holds it.
    retired: std::sync::atomic::AtomicBool,
    /// Cancelled once the server has finished its connections at a clean shutdown:
    /// a leadership may then write its last batches (see `lead.rs`).
    connections_finished: CancellationToken,
    /// Why the role is `Unknown` (for readiness).
    aside: std::sync::Mutex<NotReady>,
    /// The last failure to read the lease (cleared by the next success).
    lease_error: std::sync::Mutex<Option<String>>,
    /// What the last check of this instance's own `--advertise` found wrong.
    advertise_problem: std::sync::Mutex<Option<NotReady>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

/// The connector of `redis`, and a connection (that follows a failover) with the
/// timeouts every command path uses (an outage answers within about a second), for the
/// lease and loads.
pub async fn redis_connection(redis: &RedisConfig) -> Result<(Connector, RedisConn), StoreError> {
    let connector = redis.connector()?;
    let conn = connector
        .managed("lease and loads", RESPONSE_TIMEOUT)
        .await
        .map_err(CallError::connect)?;
    Ok((connector, conn))
}

/// For an instance of the shared mode: refuse to start on a namespace a leader holds.
pub async fn refuse_if_leader_mode(redis: &RedisConfig) -> Result<(), ClusterError> {
    let (_, conn) = redis_connection(redis).await?;
    let lease = Lease::new(
        conn,
        &Keys::new(&redis.prefix),
        "",
        "",
        Duration::from_secs(1),
    );
    match lease.holder().await? {
        Some(holder) => Err(LeaseError::LeaderModeLive(holder.address).into()),
        None => Ok(()),
    }
}

/// Why leader mode cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Lease(#[from] LeaseError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Cluster {
    /// Connect, and refuse to start next to live shared-mode instances.
    pub async fn connect(config: ClusterConfig) -> Result<Arc<Cluster>, ClusterError> {
        let (connector, conn) = redis_connection(&config.redis).await?;
        let bytes: [u8; 8] = rand::rng().random();
        let instance: Arc<str> = bytes
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
            .into();
        let keys = Keys::new(&config.redis.prefix);
        let lease = Lease::new(
            conn.clone(),
            &keys,
            &instance,
            &config.advertise,
            config.lease,
        )
        .publishing_api(&config.http_advertise)
        .confirmed_by(config.wait_replicas, config.wait_timeout);
        let cluster = Arc::new(Cluster {
            keys,
            config,
            instance,
            connector,
            conn,
            lease,
            role: watch::Sender::new(Duty::Unknown),
            draining: std::sync::atomic::AtomicBool::new(false),
            retired: std::sync::atomic::AtomicBool::new(false),
            connections_finished: CancellationToken::new(),
            aside: std::sync::Mutex::new(NotReady::Starting),
            lease_error: std::sync::Mutex::new(None),
            advertise_problem: std::sync::Mutex::new(None),
        });
        // Refuse at once (rather than in the background) when the other mode runs; the
        // lease script checks it again, atomically, whenever it takes the lease.
        if cluster.lease.shared_mode_live().await? {
            return Err(LeaseError::SharedModeLive.into());
        }
        policy::check(&mut cluster.conn.clone(), cluster.config.allow_eviction).await?;
        policy::check_replicas(&mut cluster.conn.clone(), cluster.config.wait_replicas).await;
        Ok(cluster)
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Drain mode (SIGUSR1), for this leadership and any later one of this instance.
    /// A standby's clients are served by the leader, which this does not reach.
    pub fn enter_drain_mode(&self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(engine) = self.engine() {
            engine.enter_drain_mode();
        }
    }

    /// Publish `role`, ending the previous one's term; once stopped, the role stays
    /// `Stopped` (and `role`'s term is ended at once).
    fn set_role(&self, role: Duty) {
        let mut role = Some(role);
        let mut old = None;
        self.role.send_if_modified(|current| {
            if matches!(current, Duty::Stopped) {
                return false;
            }
            old = role.take().map(|r| std::mem::replace(current, r));
            true
        });
        if let Some(Duty::Leader { term, .. } | Duty::Standby { term, .. }) = old.or(role) {
            term.cancel();
        }
    }

    /// Lead and relay no more: new connections are closed at once.
    fn stop_roles(&self) {
        *lock(&self.aside) = NotReady::ShuttingDown;
        self.set_role(Duty::Stopped);
    }

    /// Neither lead nor relay (new connections wait for a role), because of `why`.
    fn stand_aside(&self, why: NotReady) {
        *lock(&self.aside) = why;
        if !matches!(&*self.role.borrow(), Duty::Unknown) {
            self.set_role(Duty::Unknown);
        }
    }

    /// The engine of this instance's leadership, when it leads.
    pub fn engine(&self) -> Option<Arc<Engine>> {
        match &*self.role.borrow() {
            Duty::Leader { engine, .. } => Some(engine.clone()),
            _ => None,
        }
    }

    /// Lead or follow until `stop` is cancelled.
    pub async fn run(self: Arc<Self>, stop: CancellationToken) {
        if self.config.advertise.is_empty() {
            tracing::warn!(
                "no --advertise (listening on a unix socket only): while this instance \
                 leads, other instances cannot relay their clients to it (they close them \
                 and say so in /readyz)"
            );
        }
        // Redis' eviction policy is checked again every so often, whatever the role:
        // an evicting Redis loses acknowledged jobs under any leader.
        let (mut conn, allow) = (self.conn.clone(), self.config.allow_eviction);
        let replicas = self.config.wait_replicas;
        let checks = stop.clone();
        let policy_checks = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(policy::CHECK_EVERY) => {}
                    _ = checks.cancelled() => return,
                }
                policy::recheck(&mut conn, allow).await;
                policy::check_replicas(&mut conn, replicas).await;
            }
        });
        let poll = self.config.lease / 4;
        let mut warned = false;
        while !stop.is_cancelled() {
            let acquired = if self.retired.load(std::sync::atomic::Ordering::Relaxed) {
                Ok(None)
            } else {
                self.lease.try_acquire().await
            };
            match acquired {
                Ok(Some(acquired)) => {
                    *lock(&self.lease_error) = None;
                    self.lead(acquired, &stop).await;
                    continue;
                }
                Ok(None) => {}
                Err(err) => {
                    if !warned {
                        tracing::warn!(%err, "cannot reach the lease; retrying");
                        warned = true;
                    }
                    *lock(&self.lease_error) = Some(err.to_string());
                    self.pause(poll, &stop).await;
                    continue;
                }
            }
            *lock(&self.lease_error) = None;
            warned = false;
            let wait = match self.lease_holder().await {
                Ok(Some((holder, ttl))) => {
                    self.follow(holder, &stop);
                    // Try again as soon as the lease may lapse.
                    ttl.map_or(poll, |t| t.min(poll))
                }
                Ok(None) => Duration::ZERO,
                Err(_) => poll,
            };
            self.pause(wait, &stop).await;
        }
        self.stop_roles();
        let _ = policy_checks.await;
    }

    async fn pause(&self, d: Duration, stop: &CancellationToken) {
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = stop.cancelled() => {}
        }
    }

    /// Who holds the lease and for how much longer.
    async fn lease_holder(&self) -> Result<Option<(Holder, Option<Duration>)>, StoreError> {
        let holder = self.lease.holder().await?;
        let Some(holder) = holder else {
            return Ok(None);
        };
        let ttl: i64 = redis::cmd("PTTL")
            .arg(self.lease.key())
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError::redis("PTTL lease", e))?;
        let ttl = u64::try_from(ttl).ok().map(Duration::from_millis);
        Ok(Some((holder, ttl)))
    }

    /// A clean shutdown: the server has finished its connections. A leadership then
    /// writes its last batches and gives the lease up, and the role task
    /// ([`Cluster::run`]) ends; await it.
    pub fn connections_finished(&self) {
        self.connections_finished.cancel();
    }
}

impl Router for Arc<Cluster> {
    /// The role for a new connection: waited for up to [`ROUTE_WAIT`] while there is
    /// none (a failover, a load), but not while this instance cannot read the lease
    /// (Redis out of reach): it can then neither lead nor tell which instance does, and
    /// the client is closed at once (it may try another instance) rather than held for
    /// nothing. A client already waiting when the lease becomes unreadable is closed
    /// within [`ROUTE_POLL`].
    async fn route(&self) -> Option<Route> {
        let mut role = self.role.subscribe();
        let deadline = tokio::time::Instant::now() + ROUTE_WAIT;
        let role = loop {
            let current = role.borrow_and_update().clone();
            if !matches!(current, Duty::Unknown) {
                break current;
            }
            if lock(&self.lease_error).is_some() {
                return None;
            }
            tokio::select! {
                changed = role.changed() => changed.ok()?,
                _ = tokio::time::sleep(ROUTE_POLL) => {}
                _ = tokio::time::sleep_until(deadline) => return None,
            }
        };
        match role {
            Duty::Leader { engine, term } => Some(Route::Serve {
                engine,
                term,
                greeting: Some(self.instance.clone()),
            }),
            Duty::Standby { upstream, term, .. } => Some(Route::Relay(upstream, term)),
            Duty::Unknown | Duty::Stopped => None,
        }
    }
}

/// `work`'s output, or `None` once `term` is cancelled first.
async fn until_cancelled<T>(term: &CancellationToken, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        out = work => Some(out),
        _ = term.cancelled() => None,
    }
}
