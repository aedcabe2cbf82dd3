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

use redis::aio::MultiplexedConnection;
use redis::{RedisResult, Value};

use super::Connector;
use super::error::{CallError, Fate};
use super::keys::{JOB_BODY, Keys, NsKey};
use super::replicas::ReplicaWait;

/// Why a transaction was not applied (or may not have been).
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// The key no longer holds the token (another instance leads; the namespace is
    /// gone). Nothing was applied; this token will never write again.
    #[error("fenced: the key no longer holds this instance's token")]
    Fenced,
    /// The write failed; its fate says whether it may have been applied.
    #[error(transparent)]
    Failed(#[from] CallError),
}

/// How often a transaction whose EXEC a lease renewal aborted is re-sent before the
/// write counts as failed.
const EXEC_ATTEMPTS: usize = 4;

/// What both fences (a [`Fenced`] connection, and leader mode's batches,
/// `super::fenced_script`) hold: the connection, made anew after an error; the key that
/// fences every write and the token it must hold; and the replicas each write waits
/// for. Owned by the fence's one owner.
pub(super) struct FenceLink {
    /// Makes the connection, to the current primary.
    connector: Connector,
    /// `None` after an error.
    conn: Option<MultiplexedConnection>,
    pub(super) key: String,
    pub(super) token: String,
    /// Acknowledge a write only once replicated (Redis `WAIT`).
    pub(super) wait: Option<ReplicaWait>,
}

impl FenceLink {
    pub(super) fn new(connector: Connector, key: String, token: String) -> FenceLink {
        FenceLink {
            connector,
            conn: None,
            key,
            token,
            wait: None,
        }
    }

    /// The connection, and whether it was made just now (it holds nothing of the one
    /// before: no WATCH, no script loaded).
    pub(super) async fn connection(&mut self) -> Result<(MultiplexedConnection, bool), CallError> {
        if let Some(c) = &self.conn {
            return Ok((c.clone(), false));
        }
        let c = self
            .connector
            .single(ReplicaWait::response_timeout(self.wait))
            .await
            .map_err(CallError::connect)?;
        self.conn = Some(c.clone());
        Ok((c, true))
    }

    /// Forget the connection (after an error: the next write makes a new one).
    pub(super) fn drop_connection(&mut self) {
        self.conn = None;
    }
}

/// A connection of the leader holding `token`, fencing each transaction by its lease.
pub struct Fenced {
    /// What its errors name ("commit batch", "write body").
    op: &'static str,
    link: FenceLink,
    /// The connection WATCHes the lease, which it read as ours.
    watching: bool,
}

/// The commands writing job `id`'s large body ahead of its job: the namespace's mark
/// that no large body was ever written goes (`NsKey::Small`: a reserve must then ask a
/// body's length before it reads it), field `b` of the job's hash, and the id in the
/// namespace's `ahead` set at `now_ms` (so that a body whose writer dies before its job
/// is written is found and removed; `NsKey::Ahead`). Sized up front: the body is copied
/// into the command once, into memory allocated once.
pub fn body_ahead(keys: &Keys, id: u64, body: &[u8], now_ms: u64) -> [redis::Cmd; 3] {
    let mut unmark = redis::cmd("DEL");
    unmark.arg(keys.ns(NsKey::Small));
    let key = keys.job(id);
    let mut write = redis::Cmd::with_capacity(4, body.len() + key.len() + 8);
    write.arg("HSET").arg(key).arg(JOB_BODY).arg(body);
    let mut note = redis::cmd("ZADD");
    note.arg(keys.ns(NsKey::Ahead)).arg(now_ms).arg(id);
    [unmark, write, note]
}

/// What one sending of a transaction came to.
enum Exec {
    /// EXEC ran: the replies of the transaction's commands, and WAIT's reply if one
    /// was sent.
    Ran {
        replies: Vec<Value>,
        confirmed: Option<RedisResult<i64>>,
    },
    /// Aborted by a renewal (the key still holds the token): nothing was applied.
    Aborted,
}

impl Fenced {
    pub fn new(op: &'static str, connector: Connector, lease_key: String, token: String) -> Fenced {
        Fenced {
            op,
            link: FenceLink::new(connector, lease_key, token),
            watching: false,
        }
    }

    /// Acknowledge a transaction only once `replicas` replicas have it (Redis `WAIT`).
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Fenced {
        self.link.wait = ReplicaWait::new(replicas, timeout);
        self
    }

    /// The connection, made anew (without a WATCH) after an error.
    async fn connection(&mut self) -> Result<MultiplexedConnection, FenceError> {
        let (c, new) = self.link.connection().await?;
        if new {
            self.watching = false;
        }
        Ok(c)
    }

    /// Forget the connection (its WATCH with it).
    fn drop_connection(&mut self) {
        self.link.drop_connection();
        self.watching = false;
    }

    /// WATCH the lease and check it is ours.
    async fn watch(&mut self, conn: &mut MultiplexedConnection) -> Result<(), FenceError> {
        let (_, holder): (Value, Option<String>) = redis::pipe()
            .cmd("WATCH")
            .arg(&self.link.key)
            .cmd("GET")
            .arg(&self.link.key)
            .query_async(conn)
            .await
            .map_err(|e| CallError::new("WATCH fence key", e))?;
        if holder.as_deref() != Some(self.link.token.as_str()) {
            return Err(FenceError::Fenced);
        }
        self.watching = true;
        Ok(())
    }

    /// Send `cmd` alone in a transaction; `Ok`: its reply.
    pub async fn send_one(&mut self, cmd: redis::Cmd) -> Result<Value, FenceError> {
        let mut replies = self.send_all([cmd]).await?;
        Ok(replies.pop().unwrap_or(Value::Nil))
    }

    /// Send `cmds` as one fenced transaction; `Ok`: their replies.
    pub async fn send_all<const N: usize>(
        &mut self,
        cmds: [redis::Cmd; N],
    ) -> Result<Vec<Value>, FenceError> {
        let mut pipe = redis::pipe();
        pipe.cmd("MULTI");
        for cmd in cmds {
            pipe.add_command(cmd);
        }
        self.send(pipe, N).await
    }

    /// Send the transaction `pipe` (MULTI, then `commands` commands), followed by the
    /// WATCH and read of the key for the next one; re-sent when a renewal of the lease
    /// aborted it. `Ok`: the replies of its commands.
    pub async fn send(
        &mut self,
        pipe: redis::Pipeline,
        commands: usize,
    ) -> Result<Vec<Value>, FenceError> {
        let pipe = self.transaction(pipe);
        for _ in 0..EXEC_ATTEMPTS {
            let replies = self.exchange(&pipe).await?;
            match self.read(replies, commands)? {
                Exec::Aborted => continue,
                Exec::Ran { replies, confirmed } => {
                    if let (Some(wait), Some(reply)) = (self.link.wait, confirmed) {
                        wait.confirm(self.op, reply)?;
                    }
                    return Ok(replies);
                }
            }
        }
        Err(FenceError::Failed(CallError {
            op: self.op,
            fate: Fate::NotApplied,
            source: "the key kept changing under the transaction".into(),
        }))
    }

    /// `pipe` completed: EXEC, WAIT (with replicas to wait for), then the WATCH and
    /// read of the key for the next transaction.
    fn transaction(&self, mut pipe: redis::Pipeline) -> redis::Pipeline {
        pipe.cmd("EXEC");
        if let Some(wait) = self.link.wait {
            wait.append_to(&mut pipe);
        }
        pipe.cmd("WATCH").arg(&self.link.key);
        pipe.cmd("GET").arg(&self.link.key);
        // Each reply on its own: an error after EXEC (a WAIT refused by a primary just
        // demoted to replica) must not make a transaction that ran look not applied.
        pipe.ignore_errors();
        pipe
    }

    /// One sending of the transaction `pipe` (WATCHing the key first on a connection
    /// that does not); `Ok`: every reply. A failure gives the connection up.
    async fn exchange(&mut self, pipe: &redis::Pipeline) -> Result<Vec<Value>, FenceError> {
        let mut conn = self.connection().await?;
        if !self.watching {
            self.watch(&mut conn).await.inspect_err(|e| {
                if matches!(e, FenceError::Failed(_)) {
                    self.drop_connection();
                }
            })?;
        }
        // EXEC ran or not at all; a failure here leaves it unknown.
        pipe.query_async(&mut conn).await.map_err(|e| {
            self.drop_connection();
            CallError::new(self.op, e).into()
        })
    }

    /// What the `replies` of one sending (a transaction of `commands` commands) say;
    /// notes whether the connection still WATCHes a key that holds the token.
    fn read(&mut self, replies: Vec<Value>, commands: usize) -> Result<Exec, FenceError> {
        // An error up to EXEC's own reply (EXECABORT, a refused MULTI): EXEC did not
        // run, nothing was applied.
        if let Some(e) = replies.iter().take(commands + 2).find_map(server_error) {
            self.drop_connection();
            return Err(CallError::new(self.op, e).into());
        }
        let mut tail = replies.into_iter().skip(commands + 1);
        let exec = tail.next();
        let confirmed = match self.link.wait {
            // A reply that is no count counts as no replica.
            Some(_) => tail
                .next()
                .map(|v| redis::from_redis_value(v).unwrap_or(Ok(0))),
            None => None,
        };
        let holder = tail.nth(1);
        self.watching = matches!(
            &holder,
            Some(Value::BulkString(t)) if t.as_slice() == self.link.token.as_bytes()
        );
        match exec {
            // Aborted: the key changed since the WATCH. Nothing was applied.
            Some(Value::Nil) if self.watching => Ok(Exec::Aborted),
            Some(Value::Nil) => Err(FenceError::Fenced),
            Some(Value::Array(replies)) => Ok(Exec::Ran { replies, confirmed }),
            other => {
                self.drop_connection();
                Err(CallError::bad_reply(self.op, format!("EXEC answered {other:?}")).into())
            }
        }
    }
}

/// The error a reply is, if it is one.
fn server_error(v: &Value) -> Option<redis::RedisError> {
    match v {
        Value::ServerError(e) => Some(redis::RedisError::from(e.clone())),
        _ => None,
    }
}
