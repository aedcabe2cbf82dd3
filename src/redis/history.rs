//! Whether a server named primary (by the sentinels, or by a Redis Cluster's view of
//! the namespace's slot) may be used: it must answer ROLE as a primary and continue the
//! replication history of the primary used before it. A promoted replica does (its
//! `master_replid2`); a primary restarted empty, or a stranger, does not, and is
//! refused for [`HISTORY_PATIENCE`] (the sentinels or the cluster catch up meanwhile).
//!
//! Invariant: one [`History`] per target, shared by all its connections; forgotten only
//! when the namespace's slot moved to another shard of a cluster (its own history).

use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

use super::target::no_primary;
use crate::util::lock;

/// The replication id of the last primary used, and since when candidates that do
/// not continue it have been refused.
#[derive(Default)]
pub(super) struct History {
    replid: Option<String>,
    refused_since: Option<Instant>,
}

/// How long candidates without the previous primary's history are refused before one
/// is taken anyway (every data node lost its data: waiting longer saves nothing).
pub const HISTORY_PATIENCE: Duration = Duration::from_secs(60);

/// Check that the server on `c` is a primary (ROLE) continuing the replication history
/// of the last primary used (`history`); `named` says who named it, in messages.
pub(super) async fn verify_primary(
    c: &mut redis::aio::MultiplexedConnection,
    history: &std::sync::Mutex<History>,
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
    continues_history(history, replid, replid2, named)
}

/// Whether a primary with replication ids `replid` (its own) and `replid2` (the one it
/// was promoted from, if any) continues the history of the last primary used: a
/// promoted replica does; a server restarted empty, or a stranger, does not.
fn continues_history(
    history: &std::sync::Mutex<History>,
    replid: Option<String>,
    replid2: Option<String>,
    named: &str,
) -> RedisResult<()> {
    let mut h = lock(history);
    let continues = continues(h.replid.as_deref(), replid.as_deref(), replid2.as_deref());
    if !continues {
        let since = *h.refused_since.get_or_insert_with(Instant::now);
        if since.elapsed() < HISTORY_PATIENCE {
            return Err(no_primary(format!(
                "the primary {named} does not continue the replication history of the \
                 one before it (restarted empty, or a view that lags behind a failover); \
                 asking again"
            )));
        }
        tracing::error!(
            "for {HISTORY_PATIENCE:?} the primary {named} has not continued the previous \
             one's replication history: using it; jobs acknowledged before may be lost"
        );
    }
    h.replid = replid;
    h.refused_since = None;
    Ok(())
}

/// Forget the replication history (the slot moved to a shard with its own).
pub(super) fn forget_history(history: &std::sync::Mutex<History>) {
    *lock(history) = History::default();
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
