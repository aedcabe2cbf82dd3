//! The leader's lease in Redis: who serves a namespace in leader mode.
//!
//! `P:leader` holds the token of the instance that leads, `<epoch>|<instance>|<address>`
//! (the address is where standbys relay their clients), with an expiry of the lease's
//! length. Taking it is set-if-absent with a fresh epoch from `P:epoch`; renewing and
//! releasing check the token first, so an instance can never extend or drop a lease
//! another one took. Every batch the leader writes is fenced by the same token
//! (`persist/redis/apply.lua`).
//!
//! Timing (see [`Lease::valid_until`]): a renewal sent at local time `t` that succeeds
//! makes Redis keep the lease until at least `t + lease` (Redis starts the expiry when
//! it runs the command, after `t`). The leader treats its lease as valid only until
//! `t + lease - margin` on its own monotonic clock, so it stops acknowledging before any
//! other instance can take over, whatever the clocks of the machines read.

use std::time::{Duration, Instant};

use crate::redis_conn::RedisConn;

use crate::store::StoreError;
use crate::store::redis_store::reply::redis_error;

/// The holder of a namespace's lease, as its token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub token: String,
    pub epoch: u64,
    pub instance: String,
    /// Where the leader serves clients (HOST:PORT).
    pub address: String,
}

impl Holder {
    fn parse(token: &str) -> Option<Holder> {
        let mut parts = token.splitn(3, '|');
        let epoch = parts.next()?.parse().ok()?;
        let instance = parts.next()?.to_string();
        let address = parts.next()?.to_string();
        Some(Holder {
            token: token.to_string(),
            epoch,
            instance,
            address,
        })
    }
}

/// Why taking the lease was refused for good (the process must not run).
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(
        "redstalk instances in shared mode (--redis-mode shared) serve this namespace; \
         the two modes never run on one namespace at once: stop them, or start this one \
         with --redis-mode shared (or another --redis-prefix)"
    )]
    SharedModeLive,
    #[error(
        "a redstalk instance in leader mode (--redis-mode leader) serves this namespace \
         ({0}); the two modes never run on one namespace at once: stop it, or start this \
         one with --redis-mode leader (or another --redis-prefix)"
    )]
    LeaderModeLive(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

const ACQUIRE: &str = r#"
-- KEYS[1] lease, KEYS[2] epoch counter, KEYS[3] the shared mode's instance registry.
-- ARGV[1] "<instance>|<address>", ARGV[2] lease (ms).
-- -> the new token, nil when another instance holds the lease, or an error SHARED when
--    shared-mode instances are alive.
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
if #redis.call('ZRANGEBYSCORE', KEYS[3], now_us, '+inf', 'LIMIT', 0, 1) > 0 then
  return redis.error_reply('SHARED shared-mode instances are alive')
end
if redis.call('EXISTS', KEYS[1]) == 1 then return nil end
local token = redis.call('INCR', KEYS[2]) .. '|' .. ARGV[1]
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
return token
"#;

const RENEW: &str = r#"
-- KEYS[1] lease; ARGV[1] token, ARGV[2] lease (ms) -> 1 renewed, 0 not ours
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

const RELEASE: &str = r#"
-- KEYS[1] lease; ARGV[1] token -> 1 released, 0 not ours
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#;

/// One instance's view of the lease: it may take, renew and release it.
pub struct Lease {
    conn: RedisConn,
    key: String,
    epoch_key: String,
    registry_key: String,
    me: String,
    length: Duration,
    acquire: redis::Script,
    renew: redis::Script,
    release: redis::Script,
}

impl Lease {
    /// `instance|address` identifies this instance in its token.
    pub fn new(
        conn: RedisConn,
        prefix: &str,
        instance: &str,
        address: &str,
        length: Duration,
    ) -> Lease {
        Lease {
            conn,
            key: format!("{prefix}:leader"),
            epoch_key: format!("{prefix}:epoch"),
            registry_key: format!("{prefix}:instances"),
            me: format!("{instance}|{address}"),
            length,
            acquire: redis::Script::new(ACQUIRE),
            renew: redis::Script::new(RENEW),
            release: redis::Script::new(RELEASE),
        }
    }

    /// The key batches are fenced by.
    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn length(&self) -> Duration {
        self.length
    }

    /// How long before the lease's end in Redis the holder stops acknowledging: room
    /// for the clocks of two machines to run at slightly different rates, and for the
    /// local timer to fire late.
    pub fn margin(&self) -> Duration {
        (self.length / 5).max(Duration::from_millis(100))
    }

    /// When a renewal (or acquisition) sent at `sent` stops covering its holder.
    pub fn valid_until(&self, sent: Instant) -> Instant {
        sent + self.length.saturating_sub(self.margin())
    }

    /// Whether instances of the shared mode heartbeat in this namespace now.
    pub async fn shared_mode_live(&self) -> Result<bool, StoreError> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_error("TIME", e))?;
        let live: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&self.registry_key)
            .arg(secs * 1_000_000 + micros)
            .arg("+inf")
            .arg("LIMIT")
            .arg(0)
            .arg(1)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_error("ZRANGEBYSCORE instances", e))?;
        Ok(!live.is_empty())
    }

    /// Who holds the lease now, if anyone.
    pub async fn holder(&self) -> Result<Option<Holder>, StoreError> {
        let token: Option<String> = redis::cmd("GET")
            .arg(&self.key)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_error("GET lease", e))?;
        Ok(token.as_deref().and_then(Holder::parse))
    }

    /// Take the lease if nobody holds it; `None` when someone does.
    pub async fn try_acquire(&self) -> Result<Option<Holder>, LeaseError> {
        let token: redis::RedisResult<Option<String>> = self
            .acquire
            .key(&self.key)
            .key(&self.epoch_key)
            .key(&self.registry_key)
            .arg(&self.me)
            .arg(self.length.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await;
        match token {
            Ok(t) => Ok(t.as_deref().and_then(Holder::parse)),
            Err(e) if e.code() == Some("SHARED") => Err(LeaseError::SharedModeLive),
            Err(e) => Err(LeaseError::Store(redis_error("take the lease", e))),
        }
    }

    /// Extend the lease held with `token`; false when it is no longer ours.
    pub async fn renew(&self, token: &str) -> Result<bool, StoreError> {
        let renewed: i64 = self
            .renew
            .key(&self.key)
            .arg(token)
            .arg(self.length.as_millis() as u64)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_error("renew the lease", e))?;
        Ok(renewed == 1)
    }

    /// Give the lease up (a clean shutdown), so a standby takes over at once.
    pub async fn release(&self, token: &str) -> Result<bool, StoreError> {
        let released: i64 = self
            .release
            .key(&self.key)
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| redis_error("release the lease", e))?;
        Ok(released == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_epoch_instance_and_address() {
        let h = Holder::parse("12|ab12|10.0.0.5:11300").unwrap();
        assert_eq!(h.epoch, 12);
        assert_eq!(h.instance, "ab12");
        assert_eq!(h.address, "10.0.0.5:11300");
        assert!(Holder::parse("x|a|b").is_none());
        assert!(Holder::parse("3|a").is_none());
    }
}
