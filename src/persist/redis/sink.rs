//! The Redis sink of leader mode: each cut becomes one MULTI/EXEC transaction of plain
//! commands (no Lua), fenced by the leader's lease. The keys and values are the shared
//! mode's schema (docs/REDIS.md), so a namespace reopens in either mode.
//!
//! Fencing: the sink's own connection WATCHes the lease key and reads it; a transaction
//! is sent only while the lease read back is this leader's token, and EXEC runs only if
//! nobody touched the key since. Another instance can take the lease only by setting
//! the key, which aborts the EXEC: a batch is never applied under someone else's lease.
//! A renewal (made on another connection) aborts an EXEC too: the batch was not
//! applied, the lease is read again and the batch re-sent. Each transaction is followed,
//! in the same round trip, by the WATCH and GET for the next one. A new connection
//! (after an error) has no WATCH: it WATCHes and reads first.
//!
//! Ownership: the committer task owns the sink. The sink keeps two facts about what
//! Redis holds, so that a batch writes only what changed: the tube list (`P:tubes`, in
//! the reference's swap-remove order) and the namespace counters last written. After a
//! failed write both are unknown: the list is read back and the counters rewritten.
//!
//! Batching: a tube's changes are grouped into one variadic command per key and
//! operation (`HSET jobs id meta id meta ...`), so Redis' cost per batch grows with the
//! jobs in it, not with a fixed cost per job; ZREMs come before ZADDs (a job of unknown
//! standing is removed from every state's set, then added to its own).

use std::time::Duration;

use redis::Value;
use redis::aio::MultiplexedConnection;

use super::super::{Sink, SinkError};
use super::batch::{Batch, Builder, Written};
use crate::protocol::TubeName;
use crate::redis_conn::{Connector, RESPONSE_TIMEOUT, RedisConn};
use crate::store::StoreError;
use crate::store::memory::{Counters, Cut};
use crate::store::redis_store::keys::{Keys, NsKey};
use crate::store::redis_store::reply::{connect_error, redis_error};
use crate::util::SwapList;

/// How often a batch whose EXEC a lease renewal aborted is re-sent before the write
/// counts as failed (and is retried by the committer).
const EXEC_ATTEMPTS: usize = 4;

/// Writes a leader's cuts to Redis, fenced by its lease token.
pub struct RedisSink {
    /// For reading the tube list back (any connection will do).
    shared: RedisConn,
    /// Makes the sink's own connection, to the current primary.
    connector: Connector,
    /// The sink's own connection, with its WATCH; `None` after an error.
    conn: Option<MultiplexedConnection>,
    /// The connection WATCHes the lease, which it read as ours.
    watching: bool,
    keys: Keys,
    lease_key: String,
    token: String,
    /// Owner string of reserved jobs: the shared mode compares it with its own tokens,
    /// which never match.
    owner: String,
    /// What Redis holds, as far as this sink knows.
    written: Written,
    builder: Builder,
    /// Wait for this many replicas to confirm each batch (issue: acknowledged means
    /// replicated), within `wait_timeout`.
    wait_replicas: u32,
    wait_timeout: Duration,
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
        counters: Counters,
    ) -> RedisSink {
        RedisSink {
            shared,
            connector,
            conn: None,
            watching: false,
            keys,
            lease_key,
            token,
            owner: format!("{instance}:leader"),
            written: Written::loaded(tubes, counters),
            builder: Builder::default(),
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
        }
    }

    /// Acknowledge a batch only once `replicas` replicas have it (Redis `WAIT`).
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> RedisSink {
        self.wait_replicas = replicas;
        self.wait_timeout = timeout;
        self
    }

    async fn read_tube_list(&mut self) -> Result<SwapList<TubeName>, StoreError> {
        let names: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(self.keys.ns(NsKey::Tubes))
            .arg(0)
            .arg(-1)
            .query_async(&mut self.shared)
            .await
            .map_err(|e| redis_error("LRANGE tubes", e))?;
        let mut list = SwapList::new();
        for n in names {
            if let Some(t) = TubeName::new(&n) {
                list.insert(t);
            }
        }
        Ok(list)
    }

    /// The sink's connection, made anew (without a WATCH) after an error.
    async fn connection(&mut self) -> Result<MultiplexedConnection, SinkError> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        // A WAIT answers after its timeout at the latest: the reply may take that long.
        let c = self
            .connector
            .single(RESPONSE_TIMEOUT + self.wait_timeout)
            .await
            .map_err(|e| SinkError::Failed(connect_error(e)))?;
        self.conn = Some(c.clone());
        self.watching = false;
        Ok(c)
    }

    /// Forget the connection (its WATCH with it).
    fn drop_connection(&mut self) {
        self.conn = None;
        self.watching = false;
    }

    /// WATCH the lease and check it is ours.
    async fn watch(&mut self, conn: &mut MultiplexedConnection) -> Result<(), SinkError> {
        let (_, holder): (Value, Option<String>) = redis::pipe()
            .cmd("WATCH")
            .arg(&self.lease_key)
            .cmd("GET")
            .arg(&self.lease_key)
            .query_async(conn)
            .await
            .map_err(|e| SinkError::Failed(redis_error("WATCH lease", e)))?;
        if holder.as_deref() != Some(self.token.as_str()) {
            return Err(SinkError::Fenced);
        }
        self.watching = true;
        Ok(())
    }

    /// Send the batch's transaction, followed by the WATCH and read of the lease for
    /// the next one; re-sent when a renewal of the lease aborted it.
    async fn send(&mut self, mut b: Batch) -> Result<(), SinkError> {
        b.pipe.cmd("EXEC");
        if self.wait_replicas > 0 {
            b.pipe
                .cmd("WAIT")
                .arg(self.wait_replicas)
                .arg(self.wait_timeout.as_millis() as u64);
        }
        b.pipe.cmd("WATCH").arg(&self.lease_key);
        b.pipe.cmd("GET").arg(&self.lease_key);
        for _ in 0..EXEC_ATTEMPTS {
            let mut conn = self.connection().await?;
            if !self.watching {
                self.watch(&mut conn).await.inspect_err(|e| {
                    if matches!(e, SinkError::Failed(_)) {
                        self.drop_connection();
                    }
                })?;
            }
            // EXEC ran or not at all; a failure here leaves it unknown.
            let replies: Vec<Value> = match b.pipe.query_async(&mut conn).await {
                Ok(r) => r,
                Err(e) => {
                    self.drop_connection();
                    return Err(SinkError::Failed(redis_error("commit batch", e)));
                }
            };
            let mut tail = replies.into_iter().skip(b.commands + 1);
            let exec = tail.next();
            let confirmed = if self.wait_replicas > 0 {
                tail.next()
            } else {
                None
            };
            let holder = tail.nth(1);
            self.watching = matches!(
                &holder,
                Some(Value::BulkString(t)) if t.as_slice() == self.token.as_bytes()
            );
            match exec {
                // Aborted: the lease key changed since the WATCH. Nothing was applied.
                Some(Value::Nil) => {
                    if !self.watching {
                        return Err(SinkError::Fenced);
                    }
                    continue;
                }
                Some(Value::Array(_)) => {}
                other => {
                    self.drop_connection();
                    return Err(SinkError::Failed(StoreError::bad_reply(
                        "commit batch",
                        format!("EXEC answered {other:?}"),
                    )));
                }
            }
            if let Some(v) = confirmed {
                let n = match v {
                    Value::Int(n) => n,
                    _ => 0,
                };
                if n < i64::from(self.wait_replicas) {
                    return Err(SinkError::Failed(StoreError::TimedOut {
                        op: "WAIT",
                        source: Some(
                            format!(
                                "{n} of {} replicas confirmed the batch in time",
                                self.wait_replicas
                            )
                            .into(),
                        ),
                    }));
                }
            }
            return Ok(());
        }
        Err(SinkError::Failed(StoreError::NotApplied {
            op: "commit batch",
            source: Some("the lease kept changing under the transaction".into()),
        }))
    }
}

impl Sink for RedisSink {
    async fn write(&mut self, cut: &Cut) -> Result<(), SinkError> {
        if self.written.tubes.is_none() {
            self.written.tubes = Some(self.read_tube_list().await?);
        }
        let batch = self
            .builder
            .build(&self.keys, &self.owner, cut, &mut self.written);
        if batch.is_empty() {
            return Ok(());
        }
        self.send(batch).await.inspect_err(|_| {
            // The batch may or may not have landed: what Redis holds is unknown.
            self.written.forget();
        })
    }

    fn name(&self) -> &'static str {
        "redis"
    }
}
