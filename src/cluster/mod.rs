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
//! `takeover.rs`: loading the namespace when this instance takes the lead).
//!
//! Ownership: the role (what a new connection gets) is published on a watch channel by
//! the one task running [`Cluster::run`]; connections read it through
//! [`crate::server::Router`]. A term (one leadership, or one standby period under one
//! leader) has a cancellation token; ending the term closes its connections.
//!
//! Fail-stop: a leader that cannot renew its lease stops acknowledging when the lease's
//! validity runs out on its own monotonic clock (before Redis can let it lapse for
//! anyone else), closes its clients' connections and discards its memory; writes are
//! fenced besides, so one that still reaches Redis late is refused.

pub mod lease;
pub mod standby;
mod takeover;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::RngExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::engine::{Engine, EngineConfig};
use crate::persist::committer::{self, Ended};
use crate::persist::redis::{RedisSink, stager};
use crate::redis_conn::{Connector, RESPONSE_TIMEOUT, RedisConn};
use crate::server::relay::Upstream;
use crate::server::{Route, Router};
use crate::store::durable::{CommitLink, DurableStore, Stager};
use crate::store::memory::CutLimit;
use crate::store::redis_store::fenced::Fenced;
use crate::store::redis_store::keys::Keys;
use crate::store::redis_store::policy::{self, PolicyError};
use crate::store::redis_store::reply::{connect_error, redis_error};
use crate::store::{AnyStore, RedisConfig, StoreError};
use crate::util::lock;
use lease::{Acquired, Holder, Lease, LeaseError};
pub use standby::{NotReady, Readiness};
use takeover::{Prepared, Unprepared};

/// How long a new connection waits for a role (a leader to relay to, or this instance's
/// own leadership) before it is closed.
const ROUTE_WAIT: Duration = Duration::from_secs(5);
/// How long after a clean shutdown begins the final batches may take.
const FINAL_FLUSH: Duration = Duration::from_secs(2);
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
    pub lease: Duration,
    pub engine: EngineConfig,
    /// Start (and keep running, with a warning) on a Redis whose eviction policy may
    /// drop keys (`--redis-allow-eviction`).
    pub allow_eviction: bool,
    /// Acknowledge a batch once this many replicas confirm it (0: do not wait).
    pub wait_replicas: u32,
    pub wait_timeout: Duration,
}

/// What a new connection gets.
#[derive(Clone)]
enum Role {
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
    role: watch::Sender<Role>,
    /// SIGUSR1 was received: every engine this instance leads with refuses puts.
    draining: std::sync::atomic::AtomicBool,
    /// The current leadership's committer, for a clean shutdown's final flush.
    leading: std::sync::Mutex<Option<Leading>>,
    /// Why the role is `Unknown` (for readiness).
    aside: std::sync::Mutex<NotReady>,
    /// The last failure to read the lease (cleared by the next success).
    lease_error: std::sync::Mutex<Option<String>>,
    /// What the last check of this instance's own `--advertise` found wrong.
    advertise_problem: std::sync::Mutex<Option<NotReady>>,
}

/// What a leadership needs at its end.
struct Leading {
    engine: Arc<Engine>,
    token: String,
    committer_stop: CancellationToken,
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
        .map_err(connect_error)?;
    Ok((connector, conn))
}

/// For an instance of the shared mode: refuse to start on a namespace a leader holds.
pub async fn refuse_if_leader_mode(redis: &RedisConfig) -> Result<(), ClusterError> {
    let (_, conn) = redis_connection(redis).await?;
    let lease = Lease::new(conn, &redis.prefix, "", "", Duration::from_secs(1));
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
        let lease = Lease::new(
            conn.clone(),
            &config.redis.prefix,
            &instance,
            &config.advertise,
            config.lease,
        );
        let cluster = Arc::new(Cluster {
            keys: Keys::new(&config.redis.prefix),
            config,
            instance,
            connector,
            conn,
            lease,
            role: watch::Sender::new(Role::Unknown),
            draining: std::sync::atomic::AtomicBool::new(false),
            leading: std::sync::Mutex::new(None),
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
    fn set_role(&self, role: Role) {
        let mut role = Some(role);
        let mut old = None;
        self.role.send_if_modified(|current| {
            if matches!(current, Role::Stopped) {
                return false;
            }
            old = role.take().map(|r| std::mem::replace(current, r));
            true
        });
        if let Some(Role::Leader { term, .. } | Role::Standby { term, .. }) = old.or(role) {
            term.cancel();
        }
    }

    /// Lead and relay no more: new connections are closed at once.
    fn stop_roles(&self) {
        *lock(&self.aside) = NotReady::ShuttingDown;
        self.set_role(Role::Stopped);
    }

    /// Neither lead nor relay (new connections wait for a role), because of `why`.
    fn stand_aside(&self, why: NotReady) {
        *lock(&self.aside) = why;
        if !matches!(&*self.role.borrow(), Role::Unknown) {
            self.set_role(Role::Unknown);
        }
    }

    /// The engine of this instance's leadership, when it leads.
    pub fn engine(&self) -> Option<Arc<Engine>> {
        match &*self.role.borrow() {
            Role::Leader { engine, .. } => Some(engine.clone()),
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
        let checks = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(policy::CHECK_EVERY) => {}
                    _ = checks.cancelled() => return,
                }
                policy::recheck(&mut conn, allow).await;
            }
        });
        let poll = self.config.lease / 4;
        let mut warned = false;
        while !stop.is_cancelled() {
            match self.lease.try_acquire().await {
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
            .map_err(|e| redis_error("PTTL lease", e))?;
        let ttl = u64::try_from(ttl).ok().map(Duration::from_millis);
        Ok(Some((holder, ttl)))
    }

    /// Lead until the lease is lost or `stop` is cancelled.
    async fn lead(&self, acquired: Acquired, stop: &CancellationToken) {
        let Acquired {
            holder,
            valid_until,
        } = acquired;
        self.stand_aside(NotReady::Loading);
        tracing::info!(
            epoch = holder.epoch,
            "took the lead: loading the namespace from Redis"
        );
        let link = CommitLink::new();
        link.valid.set(valid_until);
        let term = stop.child_token();
        let committer_stop = CancellationToken::new();
        // The lease keeper renews and ends the term (and the committer) when the lease
        // is lost; it runs from now, through the load.
        let keeper = tokio::spawn(lease::keep(
            self.lease_keeper(),
            holder.token.clone(),
            valid_until,
            link.clone(),
            term.clone(),
            committer_stop.clone(),
        ));
        let started = Instant::now();
        let Prepared {
            memory,
            tube_list,
            clock,
            jobs,
            counters,
        } = match self.prepare(&holder.token, &term).await {
            Ok(p) => p,
            Err(why) => {
                match &why {
                    Unprepared::Stopped => tracing::info!("{why}; giving the lead up"),
                    _ => tracing::warn!("took the lead but {why}; giving it up"),
                }
                self.give_up(&term, &committer_stop, keeper, &holder.token)
                    .await;
                return;
            }
        };
        let sink = RedisSink::new(
            self.connector.clone(),
            self.conn.clone(),
            self.keys.clone(),
            self.lease.key().to_string(),
            holder.token.clone(),
            &self.instance,
            tube_list,
            counters,
        )
        .wait_for_replicas(self.config.wait_replicas, self.config.wait_timeout);
        let committer = tokio::spawn(committer::run(
            memory.clone(),
            link.clone(),
            sink,
            BATCH_LIMIT,
            committer_stop.clone(),
        ));
        let (stager, bodies) = Stager::channel();
        let body_writer = Fenced::new(
            "write body",
            self.connector.clone(),
            self.lease.key().to_string(),
            holder.token.clone(),
        );
        tokio::spawn(stager::run(
            body_writer,
            self.keys.clone(),
            bodies,
            committer_stop.clone(),
        ));
        let store =
            DurableStore::new(memory, link.clone(), clock, "redis-leader").with_stager(stager);
        let engine = Engine::start(AnyStore::Durable(store), self.config.engine.clone());
        if self.draining.load(std::sync::atomic::Ordering::SeqCst) {
            engine.enter_drain_mode();
        }
        tracing::info!(
            epoch = holder.epoch,
            jobs,
            load_ms = started.elapsed().as_millis() as u64,
            "leading: serving from memory, persisting to Redis"
        );
        *lock(&self.leading) = Some(Leading {
            engine: engine.clone(),
            token: holder.token.clone(),
            committer_stop: committer_stop.clone(),
        });
        self.set_role(Role::Leader {
            engine: engine.clone(),
            term: term.clone(),
        });
        let mut committer = Some(committer);
        let ended = tokio::select! {
            _ = term.cancelled() => None,
            ended = async { match committer.as_mut() {
                Some(c) => c.await.ok(),
                None => None,
            } } => {
                committer = None;
                ended
            }
        };
        if ended == Some(Ended::Fenced) {
            tracing::error!("another instance took this namespace over; stepping down");
        }
        if stop.is_cancelled() {
            // A clean shutdown: the server drains connections, then `shutdown` writes
            // the last batches and gives the lease up.
            return;
        }
        tracing::warn!("leadership ended: closing clients' connections; standing by");
        link.valid.end();
        committer_stop.cancel();
        term.cancel();
        self.stand_aside(NotReady::NoLeader);
        engine.shutdown();
        if let Some(c) = committer {
            let _ = c.await;
        }
        let _ = keeper.await;
        *lock(&self.leading) = None;
    }

    fn lease_keeper(&self) -> Lease {
        Lease::new(
            self.conn.clone(),
            &self.config.redis.prefix,
            &self.instance,
            &self.config.advertise,
            self.config.lease,
        )
    }

    /// End a leadership that never served: stop its lease keeper, then give the lease
    /// up so another instance need not wait for it to lapse.
    async fn give_up(
        &self,
        term: &CancellationToken,
        committer_stop: &CancellationToken,
        keeper: tokio::task::JoinHandle<()>,
        token: &str,
    ) {
        term.cancel();
        committer_stop.cancel();
        let _ = keeper.await;
        self.stand_aside(NotReady::NoLeader);
        match self.lease.release(token).await {
            Ok(true) => tracing::info!("gave up the lead"),
            Ok(false) => {}
            Err(err) => tracing::warn!(%err, "could not give up the lead; it lapses by itself"),
        }
    }

    /// A clean shutdown, after the server has finished its connections: write what is
    /// left, then give the lease up so a standby takes over at once.
    pub async fn shutdown(&self) {
        let leading = lock(&self.leading).take();
        if let Some(l) = leading {
            let last = l.engine.last_change();
            if let Err(err) = tokio::time::timeout(FINAL_FLUSH, l.engine.durable(last))
                .await
                .unwrap_or(Err(StoreError::TimedOut {
                    op: "final commit",
                    source: None,
                }))
            {
                tracing::warn!(%err, "the last changes may not have reached Redis");
            }
            l.committer_stop.cancel();
            l.engine.shutdown();
            match self.lease.release(&l.token).await {
                Ok(_) => tracing::info!("gave up the lead"),
                Err(err) => tracing::warn!(%err, "could not give up the lead; it lapses by itself"),
            }
        }
        self.stop_roles();
    }
}

impl Router for Arc<Cluster> {
    async fn route(&self) -> Option<Route> {
        let mut role = self.role.subscribe();
        let known = role.wait_for(|r| !matches!(r, Role::Unknown));
        let role = tokio::time::timeout(ROUTE_WAIT, known)
            .await
            .ok()?
            .ok()?
            .clone();
        match role {
            Role::Leader { engine, term } => Some(Route::Serve {
                engine,
                term,
                greeting: Some(self.instance.clone()),
            }),
            Role::Standby { upstream, term, .. } => Some(Route::Relay(upstream, term)),
            Role::Unknown | Role::Stopped => None,
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
