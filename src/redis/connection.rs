//! Connections to Redis for both Redis modes: the one place that turns `--redis` and
//! its TLS and sentinel options into connections, follows a failover, and bounds how
//! long anything waits for Redis.
//!
//! A [`Connector`] makes three kinds of connection:
//! - [`Connector::managed`]: a [`RedisConn`], shared by clones, that reconnects by
//!   itself (the shared store's commands, the lease, loads);
//! - [`Connector::subscriber`]: the same, that (re)subscribes to a shard channel
//!   (SSUBSCRIBE) on every new connection and forwards its messages; it carries nothing
//!   else, so Redis' pub/sub output-buffer limit never applies to a connection that
//!   carries replies;
//! - [`Connector::single`]: one plain connection, never replaced behind its owner's
//!   back (the fences of `fenced.rs`: a [`Fenced`](super::fenced::Fenced) connection's
//!   WATCH is state of that one connection, and leader mode's batches, several in
//!   flight, must reach Redis in the order sent, on a connection their script was
//!   loaded on).
//!
//! Failover: every new connection asks the [`Target`] for the primary, so with
//! sentinels it goes wherever they point now. A connection is given up (and a new one
//! made in the background) when a call on it fails in a way that says the connection is
//! unusable: dropped, timed out, an I/O or protocol error, READONLY (the server was
//! demoted), or, on a Redis Cluster, MOVED or CLUSTERDOWN (the namespace's slot has
//! another owner, or none for now; MOVED's address is asked first next time).
//!
//! Re-sending (invariant): a call is sent again only when every reply says the cluster
//! ran none of it (MOVED, ASK, TRYAGAIN, CLUSTERDOWN; a WAIT's reply aside), after
//! 50, 100, 200 ms while within [`WAIT_LIMIT`] of its first sending; then its caller
//! gets the redirect (nothing applied). A call that may have run (an I/O error, a
//! timeout) is never sent again here.
//!
//! Why not redis-rs' `ConnectionManager` (its `connection-manager` feature is not
//! enabled): it reconnects to the one address its `Client` was made for, so it never
//! asks the sentinels again and stays on a demoted primary; it gives a connection up
//! only on an I/O or unrecoverable error, never on READONLY; and during an outage every
//! call awaits the reconnection in progress, with its retries and backoff, so a client
//! would wait on a Redis known to be away. [`RedisConn`] asks the [`Target`] anew at
//! every connection, replaces a connection that answered READONLY, and, once an attempt
//! to reconnect has failed, fails calls at once (bounded waits, below).
//!
//! Bounded waits (invariant): a call never waits for Redis longer than about
//! [`WAIT_LIMIT`] past the moment the outage began. While the connection is being made
//! again, a call waits for that attempt only until [`WAIT_LIMIT`] after the failed call
//! was sent, and not at all once an attempt has failed: during an outage every call
//! fails at once (not applied), and the reconnection goes on behind it with backoff.
//!
//! Ownership: a [`RedisConn`]'s clones share one state; the reconnecting task and the
//! subscription's push handler hold it weakly, so they end when the last clone drops.
//! A subscription's messages go to its owner on an unbounded channel: redis-rs calls
//! the push handler synchronously, so it can neither wait for room nor drop a message;
//! what bounds the channel is its reader, which does no I/O and keeps up with what one
//! connection can read, and Redis' own output-buffer limit on the subscriber.

use std::future::Future;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::util::lock;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, Pipeline, PushInfo, PushKind, RedisError, RedisFuture, RedisResult,
    Value,
};
use tokio::sync::{Notify, mpsc};

use super::error::Code;
use super::redirect::{command_redirected, pipeline_redirected, resend_after};
use super::target::{CertificateProblem, Lookups, Target, TargetError, TlsFiles};

/// How long one attempt to connect may take (asking the sentinels included).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How many attempts a managed connection's first connection (a start) makes when
/// they time out; see [`Connector::start`].
const FIRST_ATTEMPTS: u32 = 3;
/// How long a command may wait for its reply before it fails.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long after an outage began a call may still wait for a new connection.
pub const WAIT_LIMIT: Duration = Duration::from_secs(1);
/// How long a call that finds no connection waits for the attempt it asks for.
const ATTEMPT_WAIT: Duration = Duration::from_millis(250);
/// Backoff between attempts to connect again.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_millis(500);
/// Makes connections to the Redis the options name. Cheap to clone.
#[derive(Clone)]
pub struct Connector {
    target: Arc<Target>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector").finish_non_exhaustive()
    }
}

impl Connector {
    /// A connector that shares nothing with others (a tool's, a test's); a server's are
    /// made from its options ([`RedisConfig::connector`](super::RedisConfig::connector)),
    /// which share the process's [`Lookups`].
    pub fn new(
        url: &str,
        tls: &TlsFiles,
        sentinel_password: Option<&str>,
        prefix: &str,
    ) -> Result<Connector, TargetError> {
        Ok(Connector::to(Target::new(
            url,
            tls,
            sentinel_password,
            prefix,
            &Lookups::default(),
        )?))
    }

    /// The connector of `target`.
    pub fn to(target: Target) -> Connector {
        Connector {
            target: Arc::new(target),
        }
    }

    /// Whether the target is a Redis Cluster's slot owner (`redis+cluster://`).
    pub fn is_cluster(&self) -> bool {
        self.target.is_cluster()
    }

    /// A connection that reconnects by itself; fails when the first attempt fails
    /// (so a start with a wrong password says so).
    pub async fn managed(
        &self,
        role: &'static str,
        response_timeout: Duration,
    ) -> RedisResult<RedisConn> {
        self.start(role, response_timeout, None).await
    }

    /// A connection subscribed to `channel`, whose messages (and nothing else) go to
    /// `messages`; subscribed again on every new connection.
    pub async fn subscriber(
        &self,
        channel: String,
        messages: mpsc::UnboundedSender<PushInfo>,
    ) -> RedisResult<RedisConn> {
        self.start("subscription", RESPONSE_TIMEOUT, Some((channel, messages)))
            .await
    }

    /// One plain connection to the current primary; its owner replaces it after an
    /// error.
    pub async fn single(&self, response_timeout: Duration) -> RedisResult<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(response_timeout));
        let target = self.target.clone();
        within_connect_timeout(async move {
            let client = target.primary().await?;
            client
                .get_multiplexed_async_connection_with_config(&config)
                .await
        })
        .await
    }

    async fn start(
        &self,
        role: &'static str,
        response_timeout: Duration,
        subscription: Option<(String, mpsc::UnboundedSender<PushInfo>)>,
    ) -> RedisResult<RedisConn> {
        let inner = Arc::new(Inner {
            target: self.target.clone(),
            role,
            response_timeout,
            subscription,
            link: Mutex::new(Link::Down {
                since: Instant::now(),
                failures: 0,
                last: None,
                generation: 0,
            }),
            changed: Notify::new(),
            hurry: Notify::new(),
        });
        let conn = inner.first_connection().await?;
        inner.set(Link::Up {
            conn,
            generation: 1,
        });
        Ok(RedisConn { inner })
    }
}

/// A connection to the primary that is made again after it fails; calls never wait
/// long for it (see the module header). Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct RedisConn {
    inner: Arc<Inner>,
}

struct Inner {
    target: Arc<Target>,
    /// What the connection is for, in logs.
    role: &'static str,
    response_timeout: Duration,
    subscription: Option<(String, mpsc::UnboundedSender<PushInfo>)>,
    link: Mutex<Link>,
    /// Told whenever the link changes (connected, or an attempt failed).
    changed: Notify,
    /// Told by a call that waits: the next attempt should not wait out its backoff.
    hurry: Notify,
}

/// The connection's link to Redis: up (with its connection), or being made again.
enum Link {
    Up {
        conn: MultiplexedConnection,
        generation: u64,
    },
    /// Being made again, by one task.
    Down {
        /// When the call that found the connection unusable was sent.
        since: Instant,
        /// Attempts that failed so far, and the last one's error.
        failures: u64,
        last: Option<RedisError>,
        /// Of the connection that was lost.
        generation: u64,
    },
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Link> {
        lock(&self.link)
    }

    fn set(&self, link: Link) {
        *self.lock() = link;
        self.changed.notify_waiters();
    }

    /// The first connection, made while its owner starts. An attempt that timed out is
    /// made again, up to [`FIRST_ATTEMPTS`] in all: Redis was reached but slow (a loaded
    /// machine; on a Redis Cluster over TLS one attempt is three rounds of handshakes:
    /// the nodes asked, the candidate proved, the connection made), and a start should
    /// not fail for one slow second when the running server rides out much longer
    /// outages. Anything else (refused, credentials, a certificate) fails at once, so a
    /// start against an absent or misconfigured Redis says so at once.
    async fn first_connection(self: &Arc<Inner>) -> RedisResult<MultiplexedConnection> {
        let mut attempt = 1;
        loop {
            match self.establish(1).await {
                Err(e) if e.is_timeout() && attempt < FIRST_ATTEMPTS => {
                    tracing::warn!(
                        role = self.role,
                        attempt,
                        err = %e,
                        "Redis was slow to answer while connecting; trying again"
                    );
                    attempt += 1;
                }
                done => return done,
            }
        }
    }

    /// A new connection to the current primary, subscribed when this one is a
    /// subscription.
    async fn establish(self: &Arc<Inner>, generation: u64) -> RedisResult<MultiplexedConnection> {
        // Every connection hears of its own end, so an idle one is made again before
        // the next call finds it broken.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(self.response_timeout))
            .set_push_sender(Pushes {
                inner: Arc::downgrade(self),
                generation,
                messages: self.subscription.as_ref().map(|(_, m)| m.clone()),
            });
        let target = self.target.clone();
        let channel = self.subscription.as_ref().map(|(c, _)| c.clone());
        within_connect_timeout(async move {
            let client = target.primary().await?;
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            if let Some(channel) = channel {
                // A shard channel (it hashes like a key, so it lives on the namespace's
                // slot's primary): redis-rs 1.8 has no `ssubscribe`, but takes the
                // confirmation push as the reply to this command.
                redis::cmd("SSUBSCRIBE")
                    .arg(channel)
                    .exec_async(&mut conn)
                    .await?;
            }
            Ok(conn)
        })
        .await
    }

    /// The current connection. When there is none, the outcome of the attempt to make
    /// one (asked for at once) is waited for while the outage is young (until
    /// [`WAIT_LIMIT`] after it began), or for [`ATTEMPT_WAIT`] while Redis refuses
    /// connections (it is restarting, or a new primary is being named); never when it
    /// does not answer at all.
    async fn get(&self) -> RedisResult<(MultiplexedConnection, u64)> {
        let mut seen: Option<(u64, Instant)> = None;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let deadline = match &*self.lock() {
                Link::Up { conn, generation } => return Ok((conn.clone(), *generation)),
                Link::Down {
                    since,
                    failures,
                    last,
                    ..
                } => match seen {
                    None => {
                        let now = Instant::now();
                        let refused = last.as_ref().is_some_and(|e| e.is_connection_refusal());
                        let deadline = if *since + WAIT_LIMIT > now {
                            *since + WAIT_LIMIT
                        } else if refused {
                            now + ATTEMPT_WAIT
                        } else {
                            return Err(self.not_connected(last.as_ref()));
                        };
                        seen = Some((*failures, deadline));
                        deadline
                    }
                    // An attempt failed while this call waited.
                    Some((before, _)) if *failures > before => {
                        return Err(self.not_connected(last.as_ref()));
                    }
                    Some((_, deadline)) => deadline,
                },
            };
            self.hurry.notify_one();
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, changed).await.is_err() {
                return Err(self.not_connected(None));
            }
        }
    }

    /// A call that was never sent: nothing was applied.
    fn not_connected(&self, last: Option<&RedisError>) -> RedisError {
        let detail = match last {
            Some(e) => format!("not connected to Redis ({}): {e}", self.role),
            None => format!("not connected to Redis ({}): reconnecting", self.role),
        };
        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, detail).into()
    }

    /// The connection of `generation` failed a call sent at `since`: give it up and
    /// make a new one in the background (once per connection).
    fn lost(self: &Arc<Inner>, generation: u64, since: Instant, why: &dyn std::fmt::Display) {
        {
            let mut link = self.lock();
            match &*link {
                Link::Up { generation: g, .. } if *g == generation => {}
                _ => return,
            }
            *link = Link::Down {
                since,
                failures: 0,
                last: None,
                generation,
            };
        }
        tracing::warn!(role = self.role, %why, "lost the Redis connection; connecting again");
        tokio::spawn(reconnect(Arc::downgrade(self)));
    }

    /// Give the connection up when `result` (the replies of `values`) says it is
    /// unusable; a MOVED reply's address is the next connection's first candidate.
    fn check<'v, T>(
        self: &Arc<Inner>,
        result: &'v RedisResult<T>,
        values: impl FnOnce(&'v T) -> &'v [Value],
        generation: u64,
        since: Instant,
    ) {
        match result {
            Err(e) if unusable(e) => {
                if let Some(addr) = moved_address(Code::of(e), e.detail()) {
                    self.target.moved_to(addr);
                }
                self.lost(generation, since, e)
            }
            Ok(v) => {
                // An error inside a pipeline's replies arrives as a value.
                let moved = values(v).iter().find_map(|v| match v {
                    Value::ServerError(e) if Code::of_reply(e).owner_changed() => Some(e),
                    _ => None,
                });
                if let Some(e) = moved {
                    if let Some(addr) = moved_address(Some(Code::of_reply(e)), e.details()) {
                        self.target.moved_to(addr);
                    }
                    self.lost(
                        generation,
                        since,
                        &format!(
                            "{}: the server no longer serves the namespace as its primary",
                            e.code()
                        ),
                    );
                }
            }
            Err(_) => {}
        }
    }
}

/// The `HOST:PORT` a MOVED reply names (`MOVED <slot> <HOST:PORT>`), from its code and
/// detail, whether it came as an error or as a value among a pipeline's replies.
fn moved_address(code: Option<Code>, detail: Option<&str>) -> Option<&str> {
    if code != Some(Code::Moved) {
        return None;
    }
    detail?.split_ascii_whitespace().nth(1)
}

/// Whether an error means the connection (or the server behind it, no longer primary
/// of the namespace) should be replaced.
fn unusable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_unrecoverable_error()
        || Code::of(e).is_some_and(Code::owner_changed)
}

/// Run a connection attempt with [`CONNECT_TIMEOUT`] over all of it.
async fn within_connect_timeout<T>(
    attempt: impl Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(CONNECT_TIMEOUT, attempt).await {
        // A certificate problem rustls names only obscurely is said plainly.
        Ok(r) => r.map_err(CertificateProblem::explain),
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "Redis (or a sentinel) did not answer within {CONNECT_TIMEOUT:?} while connecting"
            ),
        )
        .into()),
    }
}

/// Make the connection again until it works or nobody uses it any more.
async fn reconnect(weak: Weak<Inner>) {
    let mut delay = RETRY_FIRST;
    let mut attempts = 0u32;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let (since, generation) = match &*inner.lock() {
            Link::Down {
                since, generation, ..
            } => (*since, *generation + 1),
            Link::Up { .. } => return,
        };
        attempts += 1;
        match inner.establish(generation).await {
            Ok(conn) => {
                inner.set(Link::Up { conn, generation });
                tracing::warn!(
                    role = inner.role,
                    attempts,
                    down_ms = since.elapsed().as_millis() as u64,
                    "connected to Redis again"
                );
                return;
            }
            Err(e) => {
                // The first failure of an outage, then one line in twenty.
                if attempts == 1 || attempts.is_multiple_of(20) {
                    tracing::warn!(role = inner.role, attempts, err = %e, "cannot reach Redis yet");
                }
                if let Link::Down { failures, last, .. } = &mut *inner.lock() {
                    *failures += 1;
                    *last = Some(e);
                }
                inner.changed.notify_waiters();
            }
        }
        // Wait out the backoff, or less when a call is waiting (but never attempt more
        // often than every RETRY_FIRST).
        if tokio::time::timeout(delay, inner.hurry.notified())
            .await
            .is_ok()
        {
            tokio::time::sleep(RETRY_FIRST).await;
        }
        delay = (delay * 2).min(RETRY_MAX);
    }
}

/// The push handler of a connection: a disconnection starts a new connection (which
/// subscribes again); a subscription's messages go on.
struct Pushes {
    inner: Weak<Inner>,
    generation: u64,
    messages: Option<mpsc::UnboundedSender<PushInfo>>,
}

impl redis::aio::AsyncPushSender for Pushes {
    fn send(&self, info: PushInfo) -> Result<(), redis::aio::SendError> {
        // Nothing here ever unsubscribes: an `sunsubscribe` is Redis dropping the
        // subscription (the slot moved, or its primary was demoted), so the connection
        // is made again, to the slot's owner, and subscribes again.
        let why = match info.kind {
            PushKind::Disconnection => Some("the connection closed"),
            PushKind::SUnsubscribe => Some("Redis ended the shard channel's subscription"),
            _ => None,
        };
        if let Some(why) = why {
            if let Some(inner) = self.inner.upgrade() {
                inner.lost(self.generation, Instant::now(), &why);
            }
            return Ok(());
        }
        match &self.messages {
            Some(m) => m.send(info).map_err(|_| redis::aio::SendError),
            None => Ok(()),
        }
    }
}

impl ConnectionLike for RedisConn {
    /// Sent again (after a short pause, within [`WAIT_LIMIT`]) only while the cluster
    /// answers that it did not run it; never after an error that leaves it unknown.
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let first = Instant::now();
            let mut tries = 0;
            loop {
                let (mut conn, generation) = self.inner.get().await?;
                let result = conn.req_packed_command(cmd).await;
                self.inner
                    .check(&result, std::slice::from_ref, generation, first);
                match resend_after(first, tries, WAIT_LIMIT) {
                    Some(pause) if command_redirected(&result) => tokio::time::sleep(pause).await,
                    _ => return result,
                }
                tries += 1;
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let first = Instant::now();
            let mut tries = 0;
            loop {
                let (mut conn, generation) = self.inner.get().await?;
                let result = conn.req_packed_commands(pipeline, offset, count).await;
                self.inner.check(&result, Vec::as_slice, generation, first);
                let redirected =
                    matches!(&result, Ok(v) if pipeline_redirected(pipeline, offset, v));
                match resend_after(first, tries, WAIT_LIMIT) {
                    Some(pause) if redirected => tokio::time::sleep(pause).await,
                    _ => return result,
                }
                tries += 1;
            }
        })
    }

    fn get_db(&self) -> i64 {
        match &*self.inner.lock() {
            Link::Up { conn, .. } => conn.get_db(),
            Link::Down { .. } => 0,
        }
    }
}

#[cfg(test)]
mod tests;
