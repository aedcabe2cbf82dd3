//! Redis' eviction policy: redstalk's data must never be evicted (an evicted job is
//! lost silently, or half of it: a job without its body). At start, and every
//! [`CHECK_EVERY`] after, a `maxmemory-policy` other than `noeviction` is refused, or,
//! with `--redis-allow-eviction`, warned about on every check.
//!
//! [`check`] and [`recheck`] take any connection: the shared mode checks on its
//! command connection (at start, then riding on its heartbeat: `store/shared/eviction.rs`),
//! leader mode on its lease connection (at start, then on a timer of its own). A Redis
//! that does not let us read its configuration (an error reply to CONFIG GET: CONFIG
//! renamed or forbidden by a managed service) is warned about, not refused.
//!
//! With `--redis-wait-replicas N`, the same checks warn when the primary has fewer than
//! N replicas connected ([`check_replicas`], naming the node: on a Redis Cluster, the
//! slot's primary), since every change would then fail until one is back.

use std::time::Duration;

use redis::aio::ConnectionLike;

use super::error::{CallError, Code};

/// How often a running instance reads the policy again.
pub const CHECK_EVERY: Duration = Duration::from_secs(30);

/// The one policy under which Redis never drops a key.
const SAFE: &str = "noeviction";

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error(
        "Redis may evict redstalk's keys (maxmemory-policy is {0}): acknowledged jobs \
         would vanish. Set `maxmemory-policy noeviction` in Redis (CONFIG SET \
         maxmemory-policy noeviction, and in redis.conf), or start with \
         --redis-allow-eviction to run anyway"
    )]
    Evicting(String),
    #[error(transparent)]
    Redis(#[from] CallError),
}

/// Redis' `maxmemory-policy`; `None` when Redis does not let us read it.
async fn read_policy<C: ConnectionLike>(conn: &mut C) -> Result<Option<String>, CallError> {
    // A map in RESP3, a flat [name, value] array in RESP2: read as a map either way.
    let reply: redis::RedisResult<std::collections::HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await;
    match reply {
        Ok(mut map) => Ok(map.remove("maxmemory-policy")),
        // An error reply: CONFIG is renamed, forbidden or unknown here.
        Err(e) if Code::of(&e).is_some() => Ok(None),
        Err(e) => Err(CallError::new("CONFIG GET maxmemory-policy", e)),
    }
}

/// Check the policy once: `Err` when Redis may evict and `allow` is false; with
/// `allow`, a warning instead.
pub async fn check<C: ConnectionLike>(conn: &mut C, allow: bool) -> Result<(), PolicyError> {
    match read_policy(conn).await? {
        None => {
            tracing::warn!(
                "cannot read Redis' maxmemory-policy (CONFIG GET refused); make sure it is \
                 noeviction, or acknowledged jobs may vanish"
            );
            Ok(())
        }
        Some(p) if p == SAFE => Ok(()),
        Some(p) if allow => {
            tracing::warn!(policy = %p, "{}", PolicyError::Evicting(p.clone()));
            Ok(())
        }
        Some(p) => Err(PolicyError::Evicting(p)),
    }
}

/// One periodic check (both modes): a policy that evicts is reported, as an error (it
/// was refused at start) or, with `allow`, a warning; a failed read waits for the next.
pub async fn recheck<C: ConnectionLike>(conn: &mut C, allow: bool) {
    match check(conn, allow).await {
        Ok(()) => {}
        Err(PolicyError::Evicting(p)) => {
            tracing::error!(policy = %p, "{}", PolicyError::Evicting(p.clone()));
        }
        Err(PolicyError::Redis(err)) => {
            tracing::debug!(%err, "could not read Redis' maxmemory-policy; next check later");
        }
    }
}

/// Warn when the primary on `conn` has fewer than `wanted` replicas connected (a change
/// waiting for them cannot be acknowledged); nothing when `wanted` is 0. A failed read
/// waits for the next check.
pub async fn check_replicas<C: ConnectionLike>(conn: &mut C, wanted: u32) {
    if wanted == 0 {
        return;
    }
    let info: redis::RedisResult<redis::InfoDict> = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await;
    let connected = match info {
        Ok(info) => info.get::<u32>("connected_slaves").unwrap_or(0),
        Err(err) => {
            tracing::debug!(%err, "could not read the primary's replicas; next check later");
            return;
        }
    };
    if connected >= wanted {
        return;
    }
    // The node as this connection reaches it (its local address, from CLIENT INFO).
    let client: redis::RedisResult<String> =
        redis::cmd("CLIENT").arg("INFO").query_async(conn).await;
    let node = client
        .ok()
        .and_then(|c| {
            c.split_whitespace()
                .find_map(|f| f.strip_prefix("laddr=").map(str::to_string))
        })
        .unwrap_or_else(|| "?".to_string());
    tracing::warn!(
        %node, connected, wanted,
        "the Redis primary has fewer replicas connected than --redis-wait-replicas: \
         in shared mode every change fails (INTERNAL_ERROR), in leader mode no instance can \
         lead (the lease needs them too), until enough replicas are back"
    );
}
