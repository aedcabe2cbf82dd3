//! A standby's part in leader mode: following the lease's holder (new connections are
//! relayed to it), checking that it can be reached and that this instance's own
//! `--advertise` reaches this instance, and saying whether this instance is ready.
//!
//! Checks: when a standby starts following a leader, it greets the leader's address once
//! (is it the leader?) and its own advertised address once (is it this instance? two
//! instances given one `--advertise` are found here). After that, every relayed client
//! is a check ([`Upstream::connect`]); readiness greets the leader again only when the
//! last check is older than [`FRESH`]. Each greeting that reaches the leader is a
//! connection there (it counts in the leader's `total-connections`).
//!
//! Readiness ([`Cluster::readiness`]) is a value with its reason: ready while this
//! instance leads, or relays to a leader that answered; not ready while it starts,
//! loads, waits for a leader or for Redis, or cannot relay (each reason says what to
//! fix).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::lease::Holder;
use super::{Cluster, Duty, lock};
use crate::server::hello::{HelloReply, Relayed};
use crate::server::relay::{self, RelayError, Upstream};

/// How old the last check of the leader may be for readiness to rely on it.
pub const FRESH: Duration = Duration::from_secs(10);

/// Whether this instance can serve clients now.
#[derive(Clone, Debug)]
pub enum Readiness {
    /// It leads: clients are served here.
    Leading,
    /// It relays its clients to the leader, which answered when last asked.
    Relaying {
        leader: String,
        address: String,
    },
    NotReady(NotReady),
}

impl Readiness {
    pub fn is_ready(&self) -> bool {
        !matches!(self, Readiness::NotReady(_))
    }
}

impl std::fmt::Display for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Readiness::Leading => write!(f, "ready (leading)"),
            Readiness::Relaying { leader, address } => write!(
                f,
                "ready (standby: relaying clients to the leader, instance {leader} at {address})"
            ),
            Readiness::NotReady(why) => write!(f, "not ready: {why}"),
        }
    }
}

/// Why this instance can neither serve nor relay now.
#[derive(Clone, Debug, thiserror::Error)]
pub enum NotReady {
    #[error("starting: the lease in Redis was not read yet")]
    Starting,
    #[error("cannot read the lease in Redis, so cannot tell which instance leads: {0}")]
    Redis(String),
    #[error("taking over: loading the namespace from Redis")]
    Loading,
    #[error(
        "this instance's previous leadership still holds the lease in Redis; it lapses by \
         itself, and a leader is chosen then"
    )]
    OwnLease,
    #[error("no leader: the last one's lease is lapsing; a leader is chosen then")]
    NoLeader,
    #[error("shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Relay(RelayError),
    #[error(
        "this instance's --advertise {address} reaches instance {reached}, not this one \
         (two instances given one --advertise, or an address of another instance): if \
         this instance led, standbys could not relay their clients to it; give each \
         instance an --advertise that reaches it"
    )]
    AdvertiseElsewhere { address: String, reached: String },
}

/// Why a standby has no leader's API to forward to.
#[derive(Clone, Debug, thiserror::Error)]
pub enum NoLeaderApi {
    #[error(
        "the leader (instance {leader} at {address}) publishes no API address: it runs \
         without --http, or is a version that does not publish it"
    )]
    NotPublished { leader: String, address: String },
    #[error("this instance leads: it serves the API itself")]
    Leading,
    #[error("shutting down")]
    Stopping,
    #[error("no leader to forward to: {0}")]
    NoLeader(NotReady),
}

impl Cluster {
    /// Relay new connections to `holder`, unless that is this instance's own earlier
    /// leadership (ended, but its lease not yet lapsed): then wait for it to lapse.
    pub(super) fn follow(self: &Arc<Self>, holder: Holder, stop: &CancellationToken) {
        if *holder.instance == *self.instance {
            self.stand_aside(NotReady::OwnLease);
            return;
        }
        let same =
            matches!(&*self.role.borrow(), Duty::Standby { epoch, .. } if *epoch == holder.epoch);
        if same {
            return;
        }
        tracing::info!(
            leader = %holder.address,
            instance = %holder.instance,
            epoch = holder.epoch,
            "standing by: relaying clients to the leader"
        );
        let upstream = Arc::new(Upstream::new(
            holder.address,
            holder.instance,
            self.instance.clone(),
            self.config.relay_secret.clone(),
        ));
        let term = stop.child_token();
        self.set_role(Duty::Standby {
            epoch: holder.epoch,
            upstream: upstream.clone(),
            api: holder.api,
            term: term.clone(),
        });
        let cluster = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cluster.check(&upstream) => {}
                _ = term.cancelled() => {}
            }
        });
    }

    /// Greet the leader (the outcome is noted for readiness, and logged when it
    /// fails), then this instance's own advertised address.
    async fn check(&self, upstream: &Upstream) {
        let _ = upstream.check().await;
        let address = self.config.advertise.as_str();
        if address.is_empty() {
            return;
        }
        let secret = self.config.relay_secret.as_ref();
        let greeted = relay::greet(address, &self.instance, true, secret, &Relayed::Open).await;
        let problem = match greeted {
            Ok((_, HelloReply::Leader(id) | HelloReply::Standby(id) | HelloReply::Nonce(id)))
                if *id == *self.instance =>
            {
                None
            }
            Ok((
                _,
                HelloReply::Leader(reached)
                | HelloReply::Standby(reached)
                | HelloReply::Nonce(reached),
            )) => {
                let problem = NotReady::AdvertiseElsewhere {
                    address: address.to_string(),
                    reached,
                };
                tracing::error!("{problem}");
                Some(problem)
            }
            Err(err) => {
                tracing::warn!(
                    advertise = address,
                    %err,
                    "could not check from here that --advertise reaches this instance"
                );
                None
            }
        };
        *lock(&self.advertise_problem) = problem;
    }

    /// Where a standby forwards operator API requests: the leader's published API
    /// address, or why there is none.
    pub fn leader_api(&self) -> Result<String, NoLeaderApi> {
        match &*self.role.borrow() {
            Duty::Standby { api: Some(api), .. } => Ok(api.clone()),
            Duty::Standby { upstream, .. } => Err(NoLeaderApi::NotPublished {
                leader: upstream.leader().to_string(),
                address: upstream.address().to_string(),
            }),
            Duty::Leader { .. } => Err(NoLeaderApi::Leading),
            Duty::Stopped => Err(NoLeaderApi::Stopping),
            Duty::Unknown => Err(NoLeaderApi::NoLeader(
                match lock(&self.lease_error).clone() {
                    Some(err) => NotReady::Redis(err),
                    None => lock(&self.aside).clone(),
                },
            )),
        }
    }

    /// Whether this instance can serve clients now, and why not. A standby whose last
    /// check of the leader is older than [`FRESH`] greets it first (bounded by the
    /// relay's connect and greeting timeouts).
    pub async fn readiness(&self) -> Readiness {
        let role = self.role.borrow().clone();
        match role {
            Duty::Leader { .. } => Readiness::Leading,
            Duty::Stopped => Readiness::NotReady(NotReady::ShuttingDown),
            Duty::Unknown => {
                let why = match lock(&self.lease_error).clone() {
                    Some(err) => NotReady::Redis(err),
                    None => lock(&self.aside).clone(),
                };
                Readiness::NotReady(why)
            }
            Duty::Standby { upstream, .. } => {
                if let Some(problem) = lock(&self.advertise_problem).clone() {
                    return Readiness::NotReady(problem);
                }
                let outcome = match upstream.last(FRESH) {
                    Some(outcome) => outcome,
                    None => upstream.check().await,
                };
                match outcome {
                    Ok(()) => Readiness::Relaying {
                        leader: upstream.leader().to_string(),
                        address: upstream.address().to_string(),
                    },
                    Err(err) => Readiness::NotReady(NotReady::Relay(err)),
                }
            }
        }
    }
}
