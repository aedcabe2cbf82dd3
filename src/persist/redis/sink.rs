//! The Redis sink of leader mode: each cut becomes one call of the batch script, fenced
//! by the leader's lease and the batch sequence (`crate::redis::fenced_script`); up to
//! [`DEPTH`] batches are in flight at once on the sink's own connection. The keys and
//! values are the shared mode's schema (docs/REDIS.md), so a namespace reopens in
//! either mode.
//!
//! Ownership: the committer task owns the sink. The sink keeps what Redis holds, as far
//! as it knows ([`Written`]), so that a batch writes only what changed: the tube list
//! (`P:tubes`, in the reference's swap-remove order), the namespace counters and each
//! tube's figures last written. After a failed write all of it is unknown: the list is
//! read back and the rest rewritten.
//!
//! Batching: a tube's changes are grouped into one variadic command per key and
//! operation (`HSET jobs id meta id meta ...`), so Redis' cost per batch grows with the
//! jobs in it, not with a fixed cost per job; ZREMs come before ZADDs (a job of unknown
//! standing is removed from every state's set, then added to its own).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::super::{Sink, SinkError};
use super::batch::Builder;
use super::retained::RetainedIndex;
use super::written::Written;
use crate::protocol::TubeName;
use crate::redis::fenced_script::BatchFence;
use crate::redis::keys::{Keys, NsKey};
use crate::redis::{Connector, RedisConn};
use crate::store::StoreError;
use crate::store::memory::{Cut, StoreCounters};
use crate::util::SwapList;

/// Writes a leader's cuts to Redis, fenced by its lease token.
pub struct RedisSink {
    /// For reading the tube list back (any connection will do).
    shared: RedisConn,
    /// The sink's own connection, its batches fenced by the lease and their sequence.
    fence: BatchFence,
    keys: Keys,
    /// Owner string of reserved jobs: the shared mode compares it with its own tokens,
    /// which never match.
    owner: String,
    /// What Redis holds, as far as this sink knows.
    written: Written,
    builder: Builder,
}

impl RedisSink {
    /// A sink for the leader holding `token`, starting from the tube list and counters
    /// it loaded.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        connector: Connector,
        shared: RedisConn,
        keys: Keys,
        lease_key: String,
        token: String,
        instance: &str,
        tubes: SwapList<TubeName>,
        counters: StoreCounters,
    ) -> RedisSink {
        RedisSink {
            shared,
            fence: BatchFence::new(connector, lease_key, token),
            keys,
            owner: format!("{instance}:leader"),
            written: Written::loaded(tubes, counters),
            builder: Builder::default(),
        }
    }

    /// Acknowledge a batch only once `replicas` replicas have it (Redis `WAIT`).
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> RedisSink {
        self.fence = self.fence.wait_for_replicas(replicas, timeout);
        self
    }

    /// Start from the retained records' key index of the records loaded (see
    /// `retained.rs`).
    pub fn with_retained(mut self, index: RetainedIndex) -> RedisSink {
        self.written.retained = index;
        self
    }

    async fn read_tube_list(&mut self) -> Result<SwapList<TubeName>, StoreError> {
        let names: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(self.keys.ns(NsKey::Tubes))
            .arg(0)
            .arg(-1)
            .query_async(&mut self.shared)
            .await
            .map_err(|e| StoreError::redis("LRANGE tubes", e))?;
        let mut list = SwapList::new();
        for n in names {
            if let Some(t) = TubeName::new(&n) {
                list.insert(t);
            }
        }
        Ok(list)
    }
}

/// About how many commands and bytes the batch of `cut` takes (an overestimate for the
/// usual jobs; a call that needs more grows).
fn call_size(cut: &Cut) -> (usize, usize) {
    let bodies: usize = cut
        .jobs
        .iter()
        .filter(|r| r.needs_body())
        .map(|r| r.body.len())
        .sum();
    let retained_bodies: usize = cut
        .retained
        .iter()
        .filter_map(|r| r.body.as_ref())
        .map(|b| b.len())
        .sum();
    let commands = cut.tubes.len() * 12 + 18 + cut.retained.len() * 2 + cut.retained_gone.len();
    let bytes = bodies
        + retained_bodies
        + cut.jobs.len() * 200
        + cut.gone.len() * 120
        + cut.tubes.len() * 320
        + cut.schedules.len() * 160
        + cut.retained.len() * 1_200
        + cut.retained_gone.len() * 80;
    (commands, bytes)
}

/// How many batches may be in flight at once: enough that the committer never idles
/// while Redis works, few enough that a failure wastes little.
pub const DEPTH: usize = 4;

impl Sink for RedisSink {
    type Pending = Pin<Box<dyn Future<Output = Result<(), SinkError>> + Send>>;

    async fn start(&mut self, cut: &Cut) -> Result<Self::Pending, SinkError> {
        if self.written.tubes.is_none() {
            self.written.tubes = Some(self.read_tube_list().await?);
        }
        let conn = self.fence.connection().await?;
        let chained = self.fence.chained();
        let (commands, bytes) = call_size(cut);
        let call = self.fence.begin(commands, bytes);
        let batch = self
            .builder
            .build(call, &self.keys, &self.owner, cut, &mut self.written);
        if batch.is_empty() {
            self.fence.unbegin(chained);
            return Ok(Box::pin(std::future::ready(Ok(()))));
        }
        let send = self.fence.send(conn, batch.call);
        Ok(Box::pin(async move { send.await.map_err(SinkError::from) }))
    }

    fn finished(&mut self, result: &Result<(), SinkError>) {
        if let Err(e) = result {
            // The batch may or may not have landed: what Redis holds is unknown.
            self.written.forget();
            self.fence.failed(matches!(e, SinkError::Fenced));
        }
    }

    fn depth(&self) -> usize {
        DEPTH
    }

    fn due(&self) -> Option<std::time::Instant> {
        self.written.due()
    }

    fn finishing(&mut self) {
        self.written.finishing();
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}
