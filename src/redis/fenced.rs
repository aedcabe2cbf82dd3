//! A connection whose transactions apply only while a key holds this instance's token:
//! leader mode's lease (the writer of large bodies, the takeover's clean-up; batches
//! are fenced by `fenced_script`), and the shared
//! mode's namespace generation (large bodies, written ahead of their put script).
//!
//! The connection WATCHes the key and reads it; a transaction is sent only while the
//! value read back is the token, and EXEC runs only if nobody touched the key since.
//! Another instance can take the lease only by setting the key (a namespace started
//! afresh sets a new generation), which aborts the EXEC: a transaction is never applied
//! under someone else's lease, nor in another namespace. A renewal (made on another
//! connection) aborts an EXEC too: nothing was applied, the key is read again and the
//! transaction re-sent. Each transaction is followed, in the same round trip, by the
//! WATCH and GET for the next one. A new connection (after an error) has no WATCH: it
//! WATCHes and reads first.
//!
//! Ownership: one task owns each `Fenced` (its WATCH is connection state, so two
//! transactions must never interleave on it).

use std::time::Duration;

use redis::Value;
use redis::aio::MultiplexedConnection;

use super::error::{CallError, Outcome};
use super::{Connector, RESPONSE_TIMEOUT};

/// Why a transaction was not applied (or may not have been).
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// The key no longer holds the token (another instance leads; the namespace is
    /// gone). Nothing was applied; this token will never write again.
    #[error("fenced: the key no longer holds this instance's token")]
    Fenced,
    /// The write failed; its outcome says whether it may have been applied.
    #[error(transparent)]
    Failed(#[from] CallError),
}

/// How often a transaction whose EXEC a lease renewal aborted is re-sent before the
/// write counts as failed.
const EXEC_ATTEMPTS: usize = 4;

/// A connection of the leader holding `token`, fencing each transaction by its lease.
pub struct Fenced {
    /// What its errors name ("commit batch", "write body").
    op: &'static str,
    /// Makes the connection, to the current primary.
    connector: Connector,
    /// `None` after an error.
    conn: Option<MultiplexedConnection>,
    /// The connection WATCHes the lease, which it read as ours.
    watching: bool,
    lease_key: String,
    token: String,
    /// Wait for this many replicas to confirm each transaction (acknowledged means
    /// replicated), within `wait_timeout`.
    wait_replicas: u32,
    wait_timeout: Duration,
}

/// The command writing job `id`'s body into `key` (its tube's body hash), sized up
/// front: the body is copied into it once, into memory allocated once.
pub fn hset_body(key: &str, id: u64, body: &[u8]) -> redis::Cmd {
    let mut c = redis::Cmd::with_capacity(4, body.len() + key.len() + 24);
    c.arg("HSET").arg(key).arg(id).arg(body);
    c
}

impl Fenced {
    pub fn new(op: &'static str, connector: Connector, lease_key: String, token: String) -> Fenced {
        Fenced {
            op,
            connector,
            conn: None,
            watching: false,
            lease_key,
            token,
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
        }
    }

    /// Acknowledge a transaction only once `replicas` replicas have it (Redis `WAIT`).
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Fenced {
        self.wait_replicas = replicas;
        self.wait_timeout = timeout;
        self
    }

    /// The connection, made anew (without a WATCH) after an error.
    async fn connection(&mut self) -> Result<MultiplexedConnection, FenceError> {
        if let Some(c) = &self.conn {
            return Ok(c.clone());
        }
        // A WAIT answers after its timeout at the latest: the reply may take that long.
        let wait = if self.wait_replicas > 0 {
            self.wait_timeout
        } else {
            Duration::ZERO
        };
        let c = self
            .connector
            .single(RESPONSE_TIMEOUT + wait)
            .await
            .map_err(CallError::connect)?;
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
    async fn watch(&mut self, conn: &mut MultiplexedConnection) -> Result<(), FenceError> {
        let (_, holder): (Value, Option<String>) = redis::pipe()
            .cmd("WATCH")
            .arg(&self.lease_key)
            .cmd("GET")
            .arg(&self.lease_key)
            .query_async(conn)
            .await
            .map_err(|e| CallError::new("WATCH fence key", e))?;
        if holder.as_deref() != Some(self.token.as_str()) {
            return Err(FenceError::Fenced);
        }
        self.watching = true;
        Ok(())
    }

    /// Send `cmd` alone in a transaction; `Ok`: its reply.
    pub async fn send_one(&mut self, cmd: redis::Cmd) -> Result<Value, FenceError> {
        let mut pipe = redis::pipe();
        pipe.cmd("MULTI").add_command(cmd);
        let mut replies = self.send(pipe, 1).await?;
        Ok(replies.pop().unwrap_or(Value::Nil))
    }

    /// Send the transaction `pipe` (MULTI, then `commands` commands), followed by the
    /// WATCH and read of the key for the next one; re-sent when a renewal of the lease
    /// aborted it. `Ok`: the replies of its commands.
    pub async fn send(
        &mut self,
        mut pipe: redis::Pipeline,
        commands: usize,
    ) -> Result<Vec<Value>, FenceError> {
        pipe.cmd("EXEC");
        if self.wait_replicas > 0 {
            pipe.cmd("WAIT")
                .arg(self.wait_replicas)
                .arg(self.wait_timeout.as_millis() as u64);
        }
        pipe.cmd("WATCH").arg(&self.lease_key);
        pipe.cmd("GET").arg(&self.lease_key);
        // Each reply on its own: an error after EXEC (a WAIT refused by a primary just
        // demoted to replica) must not make a transaction that ran look not applied.
        pipe.ignore_errors();
        for _ in 0..EXEC_ATTEMPTS {
            let mut conn = self.connection().await?;
            if !self.watching {
                self.watch(&mut conn).await.inspect_err(|e| {
                    if matches!(e, FenceError::Failed(_)) {
                        self.drop_connection();
                    }
                })?;
            }
            // EXEC ran or not at all; a failure here leaves it unknown.
            let replies: Vec<Value> = match pipe.query_async(&mut conn).await {
                Ok(r) => r,
                Err(e) => {
                    self.drop_connection();
                    return Err(CallError::new(self.op, e).into());
                }
            };
            // An error up to EXEC's own reply (EXECABORT, a refused MULTI): EXEC did not
            // run, nothing was applied.
            if let Some(e) = replies.iter().take(commands + 2).find_map(server_error) {
                self.drop_connection();
                return Err(CallError::new(self.op, e).into());
            }
            let mut tail = replies.into_iter().skip(commands + 1);
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
            let applied = match exec {
                // Aborted: the key changed since the WATCH. Nothing was applied.
                Some(Value::Nil) => {
                    if !self.watching {
                        return Err(FenceError::Fenced);
                    }
                    continue;
                }
                Some(Value::Array(items)) => items,
                other => {
                    self.drop_connection();
                    return Err(
                        CallError::bad_reply(self.op, format!("EXEC answered {other:?}")).into(),
                    );
                }
            };
            if let Some(v) = confirmed {
                let n = match v {
                    Value::Int(n) => n,
                    Value::ServerError(e) => {
                        return Err(FenceError::Failed(CallError {
                            op: "WAIT",
                            outcome: Outcome::MayHaveApplied,
                            source: Box::new(redis::RedisError::from(e)),
                        }));
                    }
                    _ => 0,
                };
                if n < i64::from(self.wait_replicas) {
                    return Err(FenceError::Failed(CallError {
                        op: "WAIT",
                        outcome: Outcome::MayHaveApplied,
                        source: format!(
                            "{n} of {} replicas confirmed the batch in time",
                            self.wait_replicas
                        )
                        .into(),
                    }));
                }
            }
            return Ok(applied);
        }
        Err(FenceError::Failed(CallError {
            op: self.op,
            outcome: Outcome::NotApplied,
            source: "the key kept changing under the transaction".into(),
        }))
    }
}

/// The error a reply is, if it is one.
fn server_error(v: &Value) -> Option<redis::RedisError> {
    match v {
        Value::ServerError(e) => Some(redis::RedisError::from(e.clone())),
        _ => None,
    }
}
