//! Taking the lead: loading the namespace from Redis into a memory store.
//!
//! The whole namespace is read (`crate::persist::redis::load`), with the Redis clock,
//! and bodies left without their job by a large put cut short are removed, fenced by
//! the lease, as is shared mode's mark that no large body was ever written (a leader
//! may write one in a batch). Building the store (sorting every job) runs on a
//! blocking thread, so the lease keeper renews through a long load. A shutdown, or the
//! lease lost, ends the load at once (the caller then gives the lease up).

use tokio_util::sync::CancellationToken;

use super::{Cluster, until_cancelled};
use crate::persist::redis::load;
use crate::persist::redis::retained::RetainedIndex;
use crate::protocol::TubeName;
use crate::redis::fenced::Fenced;
use crate::redis::keys::NsKey;
use crate::store::memory::StoreCounters;
use crate::store::{Clock, MemoryStore, StoreError};

/// What a new leadership serves from: the namespace restored into a memory store.
pub(super) struct Restored {
    pub(super) memory: MemoryStore,
    pub(super) tube_list: crate::util::SwapList<TubeName>,
    pub(super) clock: Clock,
    pub(super) jobs: usize,
    pub(super) counters: StoreCounters,
    /// The loaded retained records' key index, for the sink's removals.
    pub(super) retained: RetainedIndex,
}

/// Why a leadership gave up before it served.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unprepared {
    #[error("could not load the namespace: {0}")]
    Load(#[source] StoreError),
    #[error("building the store from the load stopped: {0}")]
    Build(#[source] tokio::task::JoinError),
    #[error("stopped during the load (a shutdown, or the lease lost)")]
    Stopped,
    /// The layout is not this version's (a later version upgraded it), or could not be
    /// read.
    #[error("{0}")]
    Layout(#[source] crate::redis::schema::SchemaError),
}

impl Unprepared {
    /// Whether this instance must never lead the namespace: a later version changed its
    /// layout, which this one would misread.
    pub(super) fn is_final(&self) -> bool {
        matches!(self, Unprepared::Layout(e) if e.is_refusal())
    }
}

impl Cluster {
    /// Load the namespace and build the store a leadership serves from. A shutdown, or
    /// the lease lost, ends it (the lease is then given up at once: a standby need not
    /// wait for it to lapse).
    pub(super) async fn prepare(
        &self,
        token: &str,
        term: &CancellationToken,
    ) -> Result<Restored, Unprepared> {
        // Checked at each takeover, not only at start: a standby may have waited while a
        // later version led and upgraded the layout.
        let mut conn = self.conn.clone();
        let layout = crate::redis::schema::still_readable(&mut conn, &self.keys);
        until_cancelled(term, layout)
            .await
            .ok_or(Unprepared::Stopped)?
            .map_err(Unprepared::Layout)?;
        let (snapshot, tube_list, clock) = until_cancelled(term, self.load_namespace(token))
            .await
            .ok_or(Unprepared::Stopped)?
            .map_err(Unprepared::Load)?;
        let jobs = snapshot.jobs.len();
        let counters = snapshot.counters;
        // Loaded oldest first: the newest record of each key names it.
        let retained = RetainedIndex::loaded(
            snapshot
                .retained
                .iter()
                .filter_map(|r| Some((r.id, r.tube.clone(), r.key.clone()?))),
        );
        // Building the store sorts every job: CPU work kept off the runtime, which
        // runs the lease keeper meanwhile.
        let now = clock.now();
        let build = tokio::task::spawn_blocking(move || MemoryStore::restored(snapshot, now));
        let memory = until_cancelled(term, build)
            .await
            .ok_or(Unprepared::Stopped)?
            .map_err(Unprepared::Build)?;
        Ok(Restored {
            memory,
            tube_list,
            clock,
            jobs,
            counters,
            retained,
        })
    }

    /// Read the namespace and the Redis clock.
    async fn load_namespace(
        &self,
        token: &str,
    ) -> Result<
        (
            crate::store::memory::StoreSnapshot,
            crate::util::SwapList<TubeName>,
            Clock,
        ),
        StoreError,
    > {
        let clock = crate::redis::clock::read_clock(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError::redis("TIME", e))?;
        let loaded = load(&self.conn, &self.keys).await?;
        if loaded.damaged > 0 {
            tracing::error!(
                damaged = loaded.damaged,
                "some jobs in Redis could not be read and were left out (see above)"
            );
        }
        // The load's clean-up, on one link fenced by the lease: a leader that lost it
        // meanwhile must not change what its successor writes.
        let mut fenced = Fenced::new(
            "tidy the namespace after its load",
            self.connector.clone(),
            self.lease.key().to_string(),
            token.to_string(),
        );
        self.drop_small_mark(&mut fenced).await;
        self.remove_orphans(&mut fenced, &loaded.ahead, &loaded.orphans)
            .await;
        Ok((loaded.snapshot, loaded.tube_list, clock))
    }

    /// Delete the namespace's mark that no large body was ever written (`NsKey::Small`,
    /// which shared mode makes with a fresh namespace): a leader may write a large body
    /// in a batch (its stager's write did not start in time), which shared mode, when it
    /// reopens the namespace, must then read as large. A failure leaves the mark: shared
    /// mode would then read a large body through Lua (served right, with Redis busy
    /// meanwhile), so it is said.
    async fn drop_small_mark(&self, fenced: &mut Fenced) {
        let mut del = redis::cmd("DEL");
        del.arg(self.keys.ns(NsKey::Small));
        if let Err(err) = fenced.send_one(del).await {
            tracing::warn!(%err, "could not delete the namespace's small-bodies mark; shared mode, if it reopens this namespace, reads large bodies through Lua");
        }
    }

    /// Remove the bodies left without their job (`orphans`: large puts cut short by the
    /// previous leader's end), then take every body written ahead (`ahead`) out of the
    /// namespace's `ahead` set: the jobs of the others were made. A failure only leaves
    /// them for the next load.
    async fn remove_orphans(&self, fenced: &mut Fenced, ahead: &[u64], orphans: &[u64]) {
        if ahead.is_empty() {
            return;
        }
        if !orphans.is_empty() {
            tracing::warn!(
                bodies = orphans.len(),
                "removing job bodies that have no job (large puts cut short before their job was made)"
            );
        }
        for chunk in orphans.chunks(1_000) {
            let mut del = redis::cmd("DEL");
            for &id in chunk {
                del.arg(self.keys.job(id));
            }
            if let Err(err) = fenced.send_one(del).await {
                tracing::warn!(%err, "could not remove them; the next load tries again");
                return;
            }
        }
        for chunk in ahead.chunks(1_000) {
            let mut zrem = redis::cmd("ZREM");
            zrem.arg(self.keys.ns(NsKey::Ahead)).arg(chunk);
            if let Err(err) = fenced.send_one(zrem).await {
                tracing::warn!(%err, "could not clear the bodies written ahead; the next load tries again");
                return;
            }
        }
    }
}
