//! Whether a server named primary (by the sentinels, or by a Redis Cluster's view of
//! the namespace's slot) may be used: it must answer ROLE as a primary and continue the
//! replication history (its lineage) of the primary used before it. A promoted replica
//! does (its `master_replid2`); a primary restarted empty, or a stranger, does not, and
//! is refused for [`LINEAGE_PATIENCE`] (the sentinels or the cluster catch up meanwhile).
//!
//! Invariant: one [`Lineage`] per target, shared by all its connections; forgotten only
//! when the namespace's slot moved to another shard of a cluster (its own history). Its
//! lock is never held across an `.await`.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

use super::no_primary;
use crate::util::lock;

/// How long candidates without the previous primary's history are refused before one
/// is taken anyway (every data node lost its data: waiting longer saves nothing).
pub const LINEAGE_PATIENCE: Duration = Duration::from_secs(60);

/// The replication lineage a target's next primary must continue.
#[derive(Default)]
pub(super) struct Lineage {
    last: Mutex<LastPrimary>,
}

/// The replication id of the last primary used, and since when candidates that do not
/// continue it have been refused.
#[derive(Default)]
struct LastPrimary {
    replid: Option<String>,
    refused_since: Option<Instant>,
}

impl Lineage {
    /// Check that the server on `c` is a primary (ROLE) continuing the replication
    /// history of the last primary used; `named` says who named it, in messages.
    pub(super) async fn verify(
        &self,
        c: &mut redis::aio::MultiplexedConnection,
        named: &str,
    ) -> RedisResult<()> {
        let role: Vec<Value> = redis::cmd("ROLE").query_async(c).await?;
        if !matches!(role.first(), Some(Value::BulkString(r)) if r == b"master") {
            return Err(no_primary(format!(
                "the server {named} is not a primary (yet)"
            )));
        }
        let info: redis::InfoDict = redis::cmd("INFO").arg("replication").query_async(c).await?;
        let replid: Option<String> = info.get("master_replid");
        let replid2: Option<String> = info.get("master_replid2");
        self.continued_by(replid, replid2, named)
    }

    /// Whether a primary with replication ids `replid` (its own) and `replid2` (the one
    /// it was promoted from, if any) continues the history of the last primary used: a
    /// promoted replica does; a server restarted empty, or a stranger, does not.
    fn continued_by(
        &self,
        replid: Option<String>,
        replid2: Option<String>,
        named: &str,
    ) -> RedisResult<()> {
        let mut last = lock(&self.last);
        let continues = continues(
            last.replid.as_deref(),
            replid.as_deref(),
            replid2.as_deref(),
        );
        if !continues {
            let since = *last.refused_since.get_or_insert_with(Instant::now);
            if since.elapsed() < LINEAGE_PATIENCE {
                return Err(no_primary(format!(
                    "the primary {named} does not continue the replication history of the \
                     one before it (restarted empty, or a view that lags behind a failover); \
                     asking again"
                )));
            }
            tracing::error!(
                "for {LINEAGE_PATIENCE:?} the primary {named} has not continued the previous \
                 one's replication history: using it; jobs acknowledged before may be lost"
            );
        }
        last.replid = replid;
        last.refused_since = None;
        Ok(())
    }

    /// Forget the lineage (the slot moved to a shard with its own).
    pub(super) fn forget(&self) {
        *lock(&self.last) = LastPrimary::default();
    }
}

/// Whether a primary whose replication ids are `replid` and `replid2` continues the
/// history `known` (the replication id of the primary used before, if any).
fn continues(known: Option<&str>, replid: Option<&str>, replid2: Option<&str>) -> bool {
    match known {
        None => true,
        Some(k) => replid == Some(k) || replid2 == Some(k),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_primary_must_continue_the_replication_history() {
        // Nothing used yet: any primary.
        assert!(continues(None, Some("b"), None));
        // The same primary again, or a replica promoted from it (its replid2).
        assert!(continues(Some("a"), Some("a"), Some("0")));
        assert!(continues(Some("a"), Some("b"), Some("a")));
        // The old primary restarted empty: a fresh id, no history.
        assert!(!continues(Some("a"), Some("x"), Some("0000")));
        assert!(!continues(Some("a"), None, None));
    }
}
