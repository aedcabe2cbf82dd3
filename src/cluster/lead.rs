//! A term as leader, from the lease taken to the lease given up or lost, in its steps:
//!
//! 1. [`Term::begin`]: the commit link (valid while the lease is), the term's tokens,
//!    and the lease keeper (`lease::keep`), which renews from now on, through the load,
//!    and ends the term (and the committer) when the lease is lost;
//! 2. the load (`takeover.rs`); a shutdown or the lease lost meanwhile gives the lease
//!    up at once ([`Cluster::give_up`]);
//! 3. [`Cluster::start_persisted`]: the persisted engine (`persist::engine`), with a
//!    committer writing fenced batches to Redis and the writer of large bodies;
//! 4. the role published, clients served until the term ends ([`Cluster::serve_term`]);
//! 5. the end: a clean shutdown waits until the server has finished its connections,
//!    writes the last batches and gives the lease up ([`Cluster::finish_term`]); a
//!    leadership lost stops the engine at once, acknowledging nothing more, and stands
//!    by ([`Cluster::lose_term`]).
//!
//! Ownership: the role task (`Cluster::run`) runs a term whole and owns everything it
//! starts; every task is awaited before the term returns.

use std::time::Instant;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::lease::{self, Acquired, Lease};
use super::takeover::{Restored, Unprepared};
use super::{BATCH_LIMIT, Cluster, Duty, NotReady};
use crate::persist::committer::Ended;
use crate::persist::engine::{Parts, Persisted};
use crate::persist::redis::{RedisSink, stager};
use crate::redis::fenced::Fenced;
use crate::store::durable::{CommitLink, Stager};

/// What one leadership holds from its first step to its last.
struct Term {
    /// This leadership's lease token.
    token: String,
    epoch: u64,
    link: CommitLink,
    /// Ends the term: its connections close (the lease lost, or a shutdown).
    ends: CancellationToken,
    /// Stops the committer and the writer of large bodies (and so the lease keeper).
    committer_stop: CancellationToken,
    keeper: JoinHandle<()>,
}

impl Term {
    /// The link and tokens of a new leadership, and its lease keeper, started now.
    fn begin(cluster: &Cluster, acquired: Acquired, stop: &CancellationToken) -> Term {
        let Acquired {
            holder,
            valid_until,
        } = acquired;
        let link = CommitLink::new();
        link.valid.set(valid_until);
        let ends = stop.child_token();
        let committer_stop = CancellationToken::new();
        let keeper = tokio::spawn(lease::keep(
            cluster.lease_keeper(),
            holder.token.clone(),
            valid_until,
            link.clone(),
            ends.clone(),
            committer_stop.clone(),
        ));
        Term {
            token: holder.token,
            epoch: holder.epoch,
            link,
            ends,
            committer_stop,
            keeper,
        }
    }
}

impl Cluster {
    /// Lead until the lease is lost or `stop` is cancelled (then, once the server has
    /// finished its connections, write the last batches and give the lease up).
    pub(super) async fn lead(&self, acquired: Acquired, stop: &CancellationToken) {
        self.stand_aside(NotReady::Loading);
        let term = Term::begin(self, acquired, stop);
        tracing::info!(
            epoch = term.epoch,
            "took the lead: loading the namespace from Redis"
        );
        let started = Instant::now();
        let restored = match self.prepare(&term.token, &term.ends).await {
            Ok(p) => p,
            Err(why) => {
                match &why {
                    Unprepared::Stopped => tracing::info!("{why}; giving the lead up"),
                    _ if why.is_final() => {
                        tracing::error!(
                            "took the lead but {why}; giving it up for good: this \
                             instance no longer contends for the lead (it goes on \
                             relaying its clients to the leader). Replace it with the \
                             version that wrote the layout"
                        );
                        self.retired
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }
                    _ => tracing::warn!("took the lead but {why}; giving it up"),
                }
                self.give_up(term).await;
                return;
            }
        };
        let jobs = restored.jobs;
        let mut persisted = self.start_persisted(restored, &term);
        tracing::info!(
            epoch = term.epoch,
            jobs,
            load_ms = started.elapsed().as_millis() as u64,
            "leading: serving from memory, persisting to Redis"
        );
        self.serve_term(&term, &mut persisted).await;
        if stop.is_cancelled() {
            self.finish_term(term, persisted).await;
        } else {
            self.lose_term(term, persisted).await;
        }
    }

    /// The persisted engine of a leadership: its committer writes to Redis, fenced by
    /// the lease, and large bodies go ahead of their jobs on a connection of their own.
    fn start_persisted(&self, restored: Restored, term: &Term) -> Persisted {
        let Restored {
            memory,
            tube_list,
            clock,
            counters,
            retained,
            ..
        } = restored;
        let sink = RedisSink::new(
            self.connector.clone(),
            self.conn.clone(),
            self.keys.clone(),
            self.lease.key().to_string(),
            term.token.clone(),
            &self.instance,
            tube_list,
            counters,
        )
        .wait_for_replicas(self.config.wait_replicas, self.config.wait_timeout)
        .with_retained(retained);
        let (stager, bodies) = Stager::channel();
        let body_writer = Fenced::new(
            "write body",
            self.connector.clone(),
            self.lease.key().to_string(),
            term.token.clone(),
        );
        let stager_task = tokio::spawn(stager::run(
            body_writer,
            self.keys.clone(),
            bodies,
            term.committer_stop.clone(),
        ));
        let parts = Parts {
            memory,
            clock,
            sink,
            limit: BATCH_LIMIT,
            name: "redis-leader",
            link: term.link.clone(),
            stop: term.committer_stop.clone(),
            log_figures: None,
            stager: Some((stager, stager_task)),
        };
        let persisted = Persisted::start(parts, self.config.engine.clone());
        if self.draining.load(std::sync::atomic::Ordering::SeqCst) {
            persisted.engine().enter_drain_mode();
        }
        persisted
    }

    /// Publish the role and serve until the term ends (a shutdown, the lease lost) or
    /// the committer does (another instance fenced it).
    async fn serve_term(&self, term: &Term, persisted: &mut Persisted) {
        self.set_role(Duty::Leader {
            engine: persisted.engine().clone(),
            term: term.ends.clone(),
        });
        let ended = tokio::select! {
            _ = term.ends.cancelled() => None,
            ended = persisted.committer_ended() => Some(ended),
        };
        if ended == Some(Ended::Fenced) {
            tracing::error!("another instance took this namespace over; stepping down");
        }
    }

    /// A clean shutdown: once the server has finished its connections, write what is
    /// left, then give the lease up so a standby takes over at once. The lease keeper
    /// renews until the committer stops.
    async fn finish_term(&self, term: Term, persisted: Persisted) {
        self.connections_finished.cancelled().await;
        persisted.finish().await;
        let _ = term.keeper.await;
        match self.lease.release(&term.token).await {
            Ok(_) => tracing::info!("gave up the lead"),
            Err(err) => tracing::warn!(%err, "could not give up the lead; it lapses by itself"),
        }
    }

    /// The leadership was lost: acknowledge nothing more, close the clients'
    /// connections, stop the engine and its committer, and stand by.
    async fn lose_term(&self, term: Term, persisted: Persisted) {
        tracing::warn!("leadership ended: closing clients' connections; standing by");
        term.link.valid.end();
        term.committer_stop.cancel();
        term.ends.cancel();
        self.stand_aside(NotReady::NoLeader);
        persisted.abandon().await;
        let _ = term.keeper.await;
    }

    /// End a leadership that never served: stop its lease keeper, then give the lease
    /// up so another instance need not wait for it to lapse.
    async fn give_up(&self, term: Term) {
        term.ends.cancel();
        term.committer_stop.cancel();
        let _ = term.keeper.await;
        self.stand_aside(NotReady::NoLeader);
        match self.lease.release(&term.token).await {
            Ok(true) => tracing::info!("gave up the lead"),
            Ok(false) => {}
            Err(err) => tracing::warn!(%err, "could not give up the lead; it lapses by itself"),
        }
    }

    fn lease_keeper(&self) -> Lease {
        Lease::new(
            self.conn.clone(),
            &self.keys,
            &self.instance,
            &self.config.advertise,
            self.config.lease,
        )
        .confirmed_by(self.config.wait_replicas, self.config.wait_timeout)
    }
}
