//! The leader's lease in Redis: who serves a namespace in leader mode.
//!
//! `{P}:lease` holds the token of the instance that leads, `<epoch>|<instance>|<address>`
//! (the address is where standbys relay their clients), with an expiry of the lease's
//! length (key names from `crate::redis::keys::Keys`). `{P}:leader-api` holds `<token>\n<HOST:PORT>`, where the leader serves its
//! operator API (a standby forwards `/api/v1` requests there), written with the lease
//! by the same script, and believed only while its token is the lease's. Taking it is set-if-absent with a fresh epoch from `{P}:epoch`; renewing and
//! releasing check the token first, so an instance can never extend or drop a lease
//! another one took. Every batch the leader writes is fenced by the same token (its
//! script checks this key first: `crate::redis::fenced_script`). [`keep`] is the
//! leader's lease keeper: it renews, and ends the leadership when the lease's validity
//! runs out.
//!
//! Timing (see [`Lease::valid_until`]): an acquisition or renewal sent at local time `t`
//! that succeeds makes Redis keep the lease until at least `t + lease` (Redis starts the
//! expiry when it runs the command, after `t`). The leader treats its lease as valid
//! only until `t + lease - margin` on its own monotonic clock, so it stops acknowledging
//! before any other instance can take over, whatever the clocks of the machines read.
//! `t` is when the command was sent, never when its reply came: a reply that took long
//! to arrive must not stretch the lease.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::redis::keys::Keys;
use crate::redis::{Code, RedisConn};
use crate::store::StoreError;
use crate::store::durable::CommitLink;

/// The holder of a namespace's lease, as its token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub token: String,
    pub epoch: u64,
    pub instance: String,
    /// Where the leader serves clients (HOST:PORT).
    pub address: String,
    /// Where the leader serves its operator API (HOST:PORT), when it published one
    /// (`{P}:leader-api`, read with the lease; `None` from the token alone).
    pub api: Option<String>,
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
            api: None,
        })
    }
}

/// The lease, just taken.
#[derive(Clone, Debug)]
pub struct Acquired {
    pub holder: Holder,
    /// Until when it covers its holder, counted from when the acquisition was sent.
    pub valid_until: Instant,
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

const ACQUIRE: &str = r#"#!lua
-- KEYS[1] lease, KEYS[2] epoch counter, KEYS[3] the shared mode's instance registry,
-- KEYS[4] the leader's API address. ARGV[1] "<instance>|<address>", ARGV[2] lease (ms),
-- ARGV[3] this instance's API address ('' when it serves none).
-- The API address is kept as "<token>\n<address>", so it is believed only for the
-- lease it was written with (a stale one, or none, is written over at each take).
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
if ARGV[3] ~= '' then
  redis.call('SET', KEYS[4], token .. '\n' .. ARGV[3])
else
  redis.call('DEL', KEYS[4])
end
return token
"#;

const RENEW: &str = r#"#!lua
-- KEYS[1] lease; ARGV[1] token, ARGV[2] lease (ms) -> 1 renewed, 0 not ours
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"#;

const RELEASE: &str = r#"#!lua
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
    api_key: String,
    me: String,
    /// This instance's API address, published with its lease ('' for none).
    api: String,
    length: Duration,
    /// `--redis-wait-replicas`: an acquisition or renewal counts only once this many
    /// replicas confirm it (see [`Lease::confirmed_by`]).
    replicas: u32,
    /// How long a renewal waits for them.
    replica_wait: Duration,
    acquire: redis::Script,
    renew: redis::Script,
    release: redis::Script,
}

impl Lease {
    /// `instance|address` identifies this instance in its token.
    pub fn new(
        conn: RedisConn,
        keys: &Keys,
        instance: &str,
        address: &str,
        length: Duration,
    ) -> Lease {
        Lease {
            conn,
            key: keys.leader(),
            epoch_key: keys.epoch(),
            registry_key: keys.instances(),
            api_key: keys.leader_api(),
            me: format!("{instance}|{address}"),
            api: String::new(),
            length,
            replicas: 0,
            replica_wait: Duration::ZERO,
            acquire: redis::Script::new(ACQUIRE),
            renew: redis::Script::new(RENEW),
            release: redis::Script::new(RELEASE),
        }
    }

    /// Publish `api` (HOST:PORT) as this instance's API address whenever it takes
    /// the lease.
    pub fn publishing_api(mut self, api: &str) -> Lease {
        self.api = api.to_string();
        self
    }

    /// Count an acquisition or renewal only once `replicas` replicas have it (Redis
    /// `WAIT`, up to `wait`, at most a quarter of the lease). A change is acknowledged
    /// only once that many replicas have it (`--redis-wait-replicas`); the lease must be
    /// held to the same rule, or a leader whose primary was cut off from its replicas
    /// renews its lease there, unreplicated, while a failover promotes a replica on
    /// which the lease lapses and another instance takes it: two leaders, a job held
    /// through each (protocol-tests/partitions_failover.rs). Unconfirmed, a renewal
    /// fails (the leader steps down when its validity ends) and an acquisition is
    /// given back.
    pub fn confirmed_by(mut self, replicas: u32, wait: Duration) -> Lease {
        self.replicas = replicas;
        self.replica_wait = wait.min(self.length / 4);
        self
    }

    /// The `WAIT` that confirms a lease change, when one is asked for.
    fn wait_for_replicas(&self, pipe: &mut redis::Pipeline) {
        if self.replicas > 0 {
            pipe.cmd("WAIT")
                .arg(self.replicas)
                .arg(self.replica_wait.as_millis() as u64);
        }
    }

    /// Whether `confirmed` (a `WAIT`'s reply) is enough replicas for `op`.
    fn check_confirmed(
        &self,
        op: &'static str,
        confirmed: Option<redis::RedisResult<i64>>,
    ) -> Result<(), StoreError> {
        let Some(confirmed) = confirmed else {
            return Ok(());
        };
        let n = confirmed.map_err(|e| StoreError::redis(op, e))?;
        if n >= i64::from(self.replicas) {
            return Ok(());
        }
        Err(StoreError::TimedOut {
            op,
            source: Some(
                format!(
                    "{n} of {} replicas confirmed it within {:?} (--redis-wait-replicas): a \
                     failover could promote a replica without it",
                    self.replicas, self.replica_wait
                )
                .into(),
            ),
        })
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
            .map_err(|e| StoreError::redis("TIME", e))?;
        let live: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&self.registry_key)
            .arg(secs * 1_000_000 + micros)
            .arg("+inf")
            .arg("LIMIT")
            .arg(0)
            .arg(1)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError::redis("ZRANGEBYSCORE instances", e))?;
        Ok(!live.is_empty())
    }

    /// Who holds the lease now, if anyone, with the API address it published.
    pub async fn holder(&self) -> Result<Option<Holder>, StoreError> {
        let (token, api): (Option<String>, Option<String>) = redis::pipe()
            .cmd("GET")
            .arg(&self.key)
            .cmd("GET")
            .arg(&self.api_key)
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError::redis("GET lease", e))?;
        let Some(mut holder) = token.as_deref().and_then(Holder::parse) else {
            return Ok(None);
        };
        holder.api = api.and_then(|a| {
            let (token, address) = a.split_once('\n')?;
            (token == holder.token && !address.is_empty()).then(|| address.to_string())
        });
        Ok(Some(holder))
    }

    /// Take the lease if nobody holds it; `None` when someone does.
    pub async fn try_acquire(&self) -> Result<Option<Acquired>, LeaseError> {
        let sent = Instant::now();
        let length = self.length.as_millis() as u64;
        let (token, confirmed): (redis::RedisResult<Option<String>>, _) = if self.replicas == 0 {
            let token = self
                .acquire
                .key(&self.key)
                .key(&self.epoch_key)
                .key(&self.registry_key)
                .key(&self.api_key)
                .arg(&self.me)
                .arg(length)
                .arg(&self.api)
                .invoke_async(&mut self.conn.clone())
                .await;
            (token, None)
        } else {
            let mut pipe = redis::pipe();
            pipe.cmd("EVAL")
                .arg(ACQUIRE)
                .arg(4)
                .arg(&self.key)
                .arg(&self.epoch_key)
                .arg(&self.registry_key)
                .arg(&self.api_key)
                .arg(&self.me)
                .arg(length)
                .arg(&self.api);
            self.wait_for_replicas(&mut pipe);
            let (token, confirmed) = pipe
                .ignore_errors()
                .query_async(&mut self.conn.clone())
                .await
                .map_err(|e| StoreError::redis("take the lease", e))?;
            (token, Some(confirmed))
        };
        let token = match token {
            Ok(t) => t,
            Err(e) if Code::of(&e) == Some(Code::SharedModeLive) => {
                return Err(LeaseError::SharedModeLive);
            }
            Err(e) => return Err(LeaseError::Store(StoreError::redis("take the lease", e))),
        };
        let Some(holder) = token.as_deref().and_then(Holder::parse) else {
            return Ok(None);
        };
        if let Err(err) = self.check_confirmed("take the lease", confirmed) {
            // Not ours to lead on: a failover now could lose it. Give it back.
            let _ = self.release(&holder.token).await;
            return Err(LeaseError::Store(err));
        }
        Ok(Some(Acquired {
            holder,
            valid_until: self.valid_until(sent),
        }))
    }

    /// Extend the lease held with `token`; false when it is no longer ours.
    /// With replicas to confirm it, a renewal they do not confirm is an error (the lease
    /// is not extended).
    pub async fn renew(&self, token: &str) -> Result<bool, StoreError> {
        let length = self.length.as_millis() as u64;
        if self.replicas == 0 {
            let renewed: i64 = self
                .renew
                .key(&self.key)
                .arg(token)
                .arg(length)
                .invoke_async(&mut self.conn.clone())
                .await
                .map_err(|e| StoreError::redis("renew the lease", e))?;
            return Ok(renewed == 1);
        }
        let mut pipe = redis::pipe();
        pipe.cmd("EVAL")
            .arg(RENEW)
            .arg(1)
            .arg(&self.key)
            .arg(token)
            .arg(length);
        self.wait_for_replicas(&mut pipe);
        let (renewed, confirmed): (redis::RedisResult<i64>, redis::RedisResult<i64>) = pipe
            .ignore_errors()
            .query_async(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError::redis("renew the lease", e))?;
        let renewed = renewed.map_err(|e| StoreError::redis("renew the lease", e))?;
        if renewed != 1 {
            return Ok(false);
        }
        self.check_confirmed("renew the lease", Some(confirmed))?;
        Ok(true)
    }

    /// Give the lease up (a clean shutdown), so a standby takes over at once.
    pub async fn release(&self, token: &str) -> Result<bool, StoreError> {
        let released: i64 = self
            .release
            .key(&self.key)
            .arg(token)
            .invoke_async(&mut self.conn.clone())
            .await
            .map_err(|e| StoreError::redis("release the lease", e))?;
        Ok(released == 1)
    }
}

/// How soon a failed renewal is tried again (Redis may be back any moment).
const RENEW_RETRY: Duration = Duration::from_millis(100);

/// Renew the lease every quarter of its length (a failed renewal is retried every
/// 100 ms). When no renewal succeeds before the lease's validity ends (`valid_until`
/// at first: the acquisition's), or one finds the lease taken, end the term: fail-stop.
pub async fn keep(
    lease: Lease,
    token: String,
    mut valid_until: Instant,
    link: CommitLink,
    term: CancellationToken,
    committer_stop: CancellationToken,
) {
    let every = lease.length() / 4;
    let mut failed = false;
    loop {
        let next = Instant::now() + if failed { RENEW_RETRY } else { every };
        tokio::select! {
            _ = tokio::time::sleep_until(next.into()) => {}
            // Validity ran out before a renewal extended it.
            _ = tokio::time::sleep_until(valid_until.into()) => {
                tracing::error!("could not renew the lease in time; stopping as leader");
                break;
            }
            // A clean shutdown keeps renewing through its final batches; only the
            // end of the committer ends the keeper.
            _ = committer_stop.cancelled() => return,
        }
        let sent = Instant::now();
        match lease.renew(&token).await {
            Ok(true) => {
                valid_until = lease.valid_until(sent);
                link.valid.set(valid_until);
                failed = false;
            }
            Ok(false) => {
                tracing::error!("the lease was taken by another instance; stopping as leader");
                break;
            }
            Err(err) => {
                if !failed {
                    tracing::warn!(%err, "renewing the lease failed; retrying");
                }
                failed = true;
            }
        }
        if Instant::now() >= valid_until {
            tracing::error!("could not renew the lease in time; stopping as leader");
            break;
        }
    }
    link.valid.end();
    committer_stop.cancel();
    term.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::{Connector, TlsFiles};
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    /// The lease's scripts compile (SCRIPT LOAD into a real redis-server).
    #[test]
    fn the_lease_scripts_load_into_redis() {
        crate::redis::testing::assert_scripts_load(
            "the lease scripts' load test",
            &[("acquire", ACQUIRE), ("renew", RENEW), ("release", RELEASE)],
        );
    }

    /// A stand-in for Redis: `+OK` to every command, and to a script call (the lease's
    /// acquisition) a token for this test's instance, `delay` late.
    async fn slow_redis(listener: tokio::net::TcpListener, delay: Duration) {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut r = BufReader::new(r);
                let mut line = String::new();
                loop {
                    line.clear();
                    if r.read_line(&mut line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let n: usize = line.trim().trim_start_matches('*').parse().unwrap();
                    let mut args = Vec::new();
                    for _ in 0..n {
                        line.clear();
                        r.read_line(&mut line).await.unwrap();
                        let len: usize = line.trim().trim_start_matches('$').parse().unwrap();
                        let mut arg = vec![0; len + 2];
                        r.read_exact(&mut arg).await.unwrap();
                        arg.truncate(len);
                        args.push(String::from_utf8_lossy(&arg).to_uppercase());
                    }
                    let reply = if args[0].starts_with("EVAL") {
                        tokio::time::sleep(delay).await;
                        let token = "7|ab|127.0.0.1:1";
                        format!("${}\r\n{token}\r\n", token.len())
                    } else {
                        "+OK\r\n".to_string()
                    };
                    w.write_all(reply.as_bytes()).await.unwrap();
                }
            });
        }
    }

    #[tokio::test]
    async fn an_acquisition_is_valid_from_when_it_was_sent_not_answered() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let late = Duration::from_millis(300);
        tokio::spawn(slow_redis(listener, late));
        let connector = Connector::new(
            &format!("redis://{addr}/0"),
            &TlsFiles::default(),
            None,
            "t",
        )
        .unwrap();
        let conn = connector
            .managed("test", Duration::from_secs(5))
            .await
            .unwrap();
        let lease = Lease::new(
            conn,
            &Keys::new("t"),
            "ab",
            "127.0.0.1:1",
            Duration::from_millis(1000),
        );
        let asked = Instant::now();
        let acquired = lease.try_acquire().await.unwrap().unwrap();
        let answered = Instant::now();
        assert_eq!(acquired.holder.epoch, 7);
        let counted_from_reply = lease.valid_until(answered);
        eprintln!(
            "acquisition answered {} ms after it was sent; valid for {} ms from the send \
             ({} ms less than if counted from the reply)",
            (answered - asked).as_millis(),
            (acquired.valid_until - asked).as_millis(),
            (counted_from_reply - acquired.valid_until).as_millis()
        );
        // The reply came at least `late` after the send: counted from the send, the
        // validity ends at least that much sooner.
        assert!(acquired.valid_until + late <= counted_from_reply);
        assert!(acquired.valid_until >= lease.valid_until(asked));
    }

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
