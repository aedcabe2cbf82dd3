//! Starting a fresh namespace: joining (or making) the namespace's generation at
//! connect, and, when a call found the namespace gone (`namespace.rs`), starting afresh
//! at the timer's next tick as a restarted beanstalkd would: every connection open until
//! then is marked old and closed, their reservations and lost reserve attempts are
//! forgotten, and this instance adopts the new generation (making it, if it is the first
//! to notice); tube references are kept and restored into the new namespace.
//!
//! Invariant: from marking the connections old to telling the server to close them
//! there is no `.await`, so no command of an old connection can see the held jobs gone
//! yet not be refused.

use std::sync::atomic::Ordering;

use rand::RngExt;

use super::RedisStore;
use super::scripts::Runner;
use crate::protocol::TubeName;
use crate::redis::error::Code;
use crate::store::{ConnId, StoreError, StoreResult};
use crate::time::Clock;

impl RedisStore {
    /// Make sure the namespace has a generation (making one if none) and its `default`
    /// tube, and serve that generation.
    pub(super) async fn init_namespace(run: &Runner) -> StoreResult<()> {
        let bytes: [u8; 16] = rand::rng().random();
        let candidate: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let joined = run
            .on_tube(|s| &s.init, &[], TubeName::default_tube().as_str())
            .arg(&candidate)
            .arg(crate::redis::schema::VERSION)
            .run()
            .await?;
        run.namespace().adopt(&joined.generation);
        Ok(())
    }

    /// Redis' clock as this process's [`Clock`] (see [`crate::redis::clock`]).
    pub(super) async fn read_clock(run: &Runner) -> StoreResult<Clock> {
        crate::redis::clock::read_clock(&mut run.conn())
            .await
            .map_err(|e| StoreError::redis("TIME", e))
    }

    /// If a call found the namespace gone, start afresh (see the module's header).
    /// Fails, to be tried again at the next tick, when Redis cannot be reached.
    pub(super) async fn start_fresh_if_lost(&self) -> StoreResult<()> {
        let ns = self.run.namespace();
        let Some(lost) = ns.take_lost() else {
            return Ok(());
        };
        // No await from here to the send: no command runs in between, so none of an
        // old connection's can see the held jobs gone yet not be refused.
        ns.mark_old_below(ConnId::issued());
        self.held.clear();
        self.attempts.clear();
        ns.announce_fresh();
        tracing::warn!(
            "the Redis namespace this instance served is gone (Redis restarted without \
             its data, was flushed, or a new primary never had it): its jobs are lost; \
             closing every client connection and serving a fresh namespace, as a \
             restarted beanstalkd does"
        );
        if let Err(err) = Self::init_namespace(&self.run).await {
            if Code::found_in(&err) == Some(Code::Layout)
                && !self.layout_refused.swap(true, Ordering::Relaxed)
            {
                tracing::error!(
                    error = %err.chain(),
                    "a later redstalk upgraded this namespace's key layout: this \
                     instance would misread it, so it serves it no more (every command \
                     fails). Replace it with the version that upgraded the layout"
                );
            }
            // Tried again at the next tick; the connections already closed stay closed.
            ns.still_lost(lost);
            // Retried at the timer's next tick (after its backoff), not at once.
            return Err(err);
        }
        self.refs.restore();
        tracing::info!("serving a fresh Redis namespace");
        Ok(())
    }

    /// Refuse what a connection of a namespace that is gone asks (`op` names it).
    pub(super) fn check_conn(&self, conn: ConnId, op: &'static str) -> StoreResult<()> {
        if self.run.namespace().is_old(conn) {
            return Err(StoreError::NamespaceLost { op });
        }
        Ok(())
    }
}
