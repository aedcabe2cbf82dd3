//! A standby's connection (Redis leader mode): the client's bytes go, unchanged, to the
//! leader, and the leader's back. The leader sees one connection per client, with that
//! client's own session; the standby understands nothing of the protocol but the relay
//! greeting ([`super::hello`]).
//!
//! Before relaying, the standby reads the client's first bytes ([`sniff`]): a relay
//! greeting there means another instance relayed this connection to us, and a standby
//! never relays a relayed connection (it answers that it does not lead and closes), so
//! a leader address that reaches a standby, under whatever spelling, costs one
//! connection per client instead of an endless chain. Then it connects to the leader
//! and greets it ([`Upstream::connect`]): only an instance that answers that it leads
//! gets the client's bytes. With the instance secret, the greeting proves this standby
//! and says who the client is (its role, when it authenticated here): the leader
//! enforces that role ([`super::hello`], version 2). Every step is bounded: [`CONNECT_TIMEOUT`] to connect,
//! [`GREETING_TIMEOUT`] for the answer (an address that accepts but never answers is
//! given up), and TCP keepalive on the leader's side while relaying (a leader whose
//! host vanished without a word is noticed within [`KEEPALIVE_LIMIT`]). A relay has no
//! plain idle timeout: a worker may wait in `reserve` for hours, silent both ways.
//!
//! [`Upstream`] also keeps what the last attempt to reach the leader found, for the
//! standby's readiness and for how long a client waits (see [`Upstream::worth_waiting`]).
//!
//! Ownership: the task owns both sockets. Each direction copies through its own fixed
//! buffer (tokio's `copy_bidirectional`: 8 KiB each), so a client that floods, or a
//! leader that answers a large job, is held back by TCP flow control, never by memory.
//! A half-close is passed on (a client's shutdown of its sending side reaches the
//! leader, which answers a waiting reserve with TIMED_OUT, as beanstalkd does). When
//! either side ends, or the term ends (a new leader), both are closed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::hello::{self, First, HelloReply, Relayed};
use crate::access::Secret;
use crate::util::lock;

/// How long connecting to the leader may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the leader may take to answer the relay greeting.
pub const GREETING_TIMEOUT: Duration = Duration::from_secs(1);
/// Keepalive of the leader's side of a relay: first probe after this much silence...
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// ...then one every this long...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// ...and the connection is dropped after this many unanswered.
const KEEPALIVE_RETRIES: u32 = 3;
/// How long a leader that vanished without a word can hold a relay.
pub const KEEPALIVE_LIMIT: Duration = Duration::from_secs(
    KEEPALIVE_IDLE.as_secs() + KEEPALIVE_INTERVAL.as_secs() * KEEPALIVE_RETRIES as u64,
);
/// How long a client may wait for this standby to reach the leader, as long as the
/// leader has not been out of reach for longer than that already (a failover is
/// replaced within its lease; a leader out of reach for longer is not coming back soon).
pub const PATIENCE: Duration = Duration::from_secs(5);

/// Why the leader could not be reached; each says what the operator can do.
#[derive(Clone, Debug, thiserror::Error)]
pub enum RelayError {
    #[error(
        "the leader (instance {leader}) advertises no address (it listens on a unix socket \
         only and was given no --advertise): standbys cannot relay their clients to it; \
         give the leader --advertise HOST:PORT"
    )]
    NoAddress { leader: String },
    #[error("cannot connect to the leader at {address}: {source}")]
    Connect {
        address: String,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error(
        "the leader's address {address} accepted the connection but did not answer the \
         relay greeting within {GREETING_TIMEOUT:?} (not a redstalk instance, or one not \
         serving yet)"
    )]
    NoAnswer { address: String },
    #[error(
        "the leader at {address} closed the connection without answering the relay \
         greeting (at its connection limit, or stopping)"
    )]
    Closed { address: String },
    #[error(
        "the leader's address {address} answered the relay greeting with {answer:?}: it is \
         not a redstalk instance of this version (the leader's --advertise must reach the \
         leader)"
    )]
    NotRedstalk { address: String, answer: String },
    #[error(
        "the leader's address {address} reaches this instance itself, not the leader \
         (instance {leader}): the leader's --advertise names this instance (under another \
         spelling, or through a load balancer), or a previous process of this instance \
         held the lease (it lapses by itself)"
    )]
    ItSelf { address: String, leader: String },
    #[error(
        "the leader's address {address} reaches instance {reached}, which does not lead \
         (the leader is instance {leader}): the leader's --advertise must reach the leader \
         itself, not another instance or a load balancer in front of several"
    )]
    NotLeader {
        address: String,
        reached: String,
        leader: String,
    },
}

impl RelayError {
    /// The leader's address leads elsewhere (or nowhere): a configuration to fix, not
    /// a leader that is away for a moment (a failover).
    pub fn is_misdirection(&self) -> bool {
        !matches!(
            self,
            RelayError::Connect { .. } | RelayError::NoAnswer { .. } | RelayError::Closed { .. }
        )
    }
}

/// Why greeting an address failed, before it is put in a standby's terms.
#[derive(Debug, thiserror::Error)]
pub enum GreetError {
    #[error("cannot connect: {0}")]
    Connect(#[source] std::io::Error),
    #[error("no answer to the relay greeting within {GREETING_TIMEOUT:?}")]
    NoAnswer,
    #[error("closed the connection without answering the relay greeting")]
    Closed,
    /// What came back instead of an answer.
    #[error("answered {0:?} to the relay greeting")]
    Garbled(String),
}

/// Connect to `address` and greet whoever answers there as instance `me` (`check`:
/// only to learn who answers; it then closes), proving it with `secret` when given (then
/// saying the client is `who`); the connection and what it says it is.
pub async fn greet(
    address: &str,
    me: &str,
    check: bool,
    secret: Option<&Secret>,
    who: &Relayed,
) -> Result<(TcpStream, HelloReply), GreetError> {
    let mut upstream =
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(address)).await {
            Ok(Ok(s)) => s,
            Ok(Err(err)) => return Err(GreetError::Connect(err)),
            Err(_) => {
                return Err(GreetError::Connect(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no connection within {CONNECT_TIMEOUT:?}"),
                )));
            }
        };
    // Replies are written whole; don't let Nagle hold the client's requests back.
    upstream.set_nodelay(true).map_err(GreetError::Connect)?;
    let exchange = async {
        upstream
            .write_all(&hello::greeting(me, check, secret.is_some()))
            .await?;
        let line = read_answer(&mut upstream).await?;
        let (Some(secret), Some(HelloReply::Nonce(nonce))) = (secret, hello::parse_answer(&line))
        else {
            return Ok(line);
        };
        let proof = hello::proof(secret, &nonce, me, who).unwrap_or_default();
        upstream.write_all(&proof).await?;
        read_answer(&mut upstream).await
    };
    let line = match tokio::time::timeout(GREETING_TIMEOUT, exchange).await {
        Ok(Ok(line)) => line,
        Ok(Err(err)) => return Err(GreetError::Connect(err)),
        Err(_) => return Err(GreetError::NoAnswer),
    };
    if line.is_empty() {
        return Err(GreetError::Closed);
    }
    match hello::parse_answer(&line) {
        Some(HelloReply::Nonce(_)) | None => Err(GreetError::Garbled(
            String::from_utf8_lossy(&line).into_owned(),
        )),
        Some(answer) => Ok((upstream, answer)),
    }
}

/// One answer line without its CRLF, at most [`hello::MAX_LINE`] bytes. Anything after
/// the line is left in the result (a leader says nothing more before the client asks),
/// so that it fails to parse.
async fn read_answer(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut line = Vec::with_capacity(hello::MAX_LINE);
    let mut chunk = [0u8; hello::MAX_LINE];
    while line.len() < hello::MAX_LINE {
        let n = s.read(&mut chunk[..hello::MAX_LINE - line.len()]).await?;
        if n == 0 {
            break;
        }
        line.extend_from_slice(&chunk[..n]);
        if line.ends_with(b"\r\n") {
            line.truncate(line.len() - 2);
            break;
        }
    }
    Ok(line)
}

/// The leader a standby relays to during one term, and what the last attempt to reach
/// it found. Shared by the term's connections and the cluster (readiness).
#[derive(Debug)]
pub struct Upstream {
    /// The leader's advertised address (empty: it advertises none).
    address: String,
    /// The leader's instance id, as its lease says.
    leader: String,
    /// This instance's id, sent in the greeting.
    me: Arc<str>,
    /// The instance secret the greeting proves (`--relay-secret-file`).
    secret: Option<Secret>,
    health: Mutex<Health>,
}

#[derive(Debug, Default)]
struct Health {
    last: Option<(Instant, Result<(), RelayError>)>,
    /// Since when every attempt failed (`None`: the last one worked, or none was made).
    failing_since: Option<Instant>,
}

impl Upstream {
    pub fn new(address: String, leader: String, me: Arc<str>, secret: Option<Secret>) -> Upstream {
        Upstream {
            address,
            leader,
            me,
            secret,
            health: Mutex::default(),
        }
    }

    /// Whether greetings prove this instance (an instance secret is configured).
    pub fn proves(&self) -> bool {
        self.secret.is_some()
    }

    pub fn address(&self) -> &str {
        &self.address
    }

    pub fn leader(&self) -> &str {
        &self.leader
    }

    /// This instance's id.
    pub fn me(&self) -> &str {
        &self.me
    }

    /// Connect to the leader and greet it, saying the client is `who`: a connection to
    /// relay that client over, or why there is none. The outcome is noted (and a
    /// change of it logged).
    pub async fn connect(&self, who: &Relayed) -> Result<TcpStream, RelayError> {
        let outcome = self.try_connect(false, who).await;
        self.note(outcome.as_ref().map(|_| ()).map_err(Clone::clone));
        outcome
    }

    /// Whether the leader can be reached and greeted now (noted as [`Self::connect`]
    /// notes it); the leader counts no connection for it.
    pub async fn check(&self) -> Result<(), RelayError> {
        let outcome = self.try_connect(true, &Relayed::Open).await.map(drop);
        self.note(outcome.clone());
        outcome
    }

    async fn try_connect(&self, check: bool, who: &Relayed) -> Result<TcpStream, RelayError> {
        let address = self.address.clone();
        if address.is_empty() {
            return Err(RelayError::NoAddress {
                leader: self.leader.clone(),
            });
        }
        let (upstream, answer) = greet(&address, &self.me, check, self.secret.as_ref(), who)
            .await
            .map_err(|e| match e {
                GreetError::Connect(source) => RelayError::Connect {
                    address: address.clone(),
                    source: Arc::new(source),
                },
                GreetError::NoAnswer => RelayError::NoAnswer {
                    address: address.clone(),
                },
                GreetError::Closed => RelayError::Closed {
                    address: address.clone(),
                },
                GreetError::Garbled(answer) => RelayError::NotRedstalk {
                    address: address.clone(),
                    answer,
                },
            })?;
        match answer {
            // A leader other than the lease's: a newer one (this view is a moment
            // old); it leads, so it serves.
            HelloReply::Leader(_) => {
                keep_alive(&upstream);
                Ok(upstream)
            }
            HelloReply::Standby(id) if *id == *self.me => Err(RelayError::ItSelf {
                address,
                leader: self.leader.clone(),
            }),
            // `greet` returns no nonce: it answers it.
            HelloReply::Standby(reached) | HelloReply::Nonce(reached) => {
                Err(RelayError::NotLeader {
                    address,
                    reached,
                    leader: self.leader.clone(),
                })
            }
        }
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        lock(&self.health)
    }

    fn note(&self, outcome: Result<(), RelayError>) {
        let now = Instant::now();
        let mut h = self.health();
        let was: Option<Result<(), String>> = h
            .last
            .as_ref()
            .map(|(_, r)| r.as_ref().map(|_| ()).map_err(ToString::to_string));
        let is = outcome.as_ref().map(|_| ()).map_err(ToString::to_string);
        let misdirected = outcome.as_ref().is_err_and(RelayError::is_misdirection);
        match &outcome {
            Ok(()) => h.failing_since = None,
            Err(_) => {
                h.failing_since.get_or_insert(now);
            }
        }
        h.last = Some((now, outcome));
        drop(h);
        // Changes only: a client per second meeting the same fault logs it once.
        if was.as_ref() == Some(&is) {
            return;
        }
        match is {
            Ok(()) if was.is_some() => {
                tracing::info!(leader = %self.address, "reached the leader again; relaying clients");
            }
            Ok(()) => {}
            Err(reason) if misdirected => {
                tracing::error!("standby cannot relay its clients: {reason}");
            }
            // The leader may be away for a moment (a failover): a warning.
            Err(reason) => tracing::warn!("standby cannot relay its clients: {reason}"),
        }
    }

    /// What the last attempt found, if it was made within `fresh`.
    pub fn last(&self, fresh: Duration) -> Option<Result<(), RelayError>> {
        let h = self.health();
        let (at, outcome) = h.last.as_ref()?;
        (at.elapsed() <= fresh).then(|| outcome.clone())
    }

    /// Whether a client that arrived at `arrived`, whose attempt just failed with
    /// `err`, should wait for another: within [`PATIENCE`] of its arrival, unless the
    /// leader has been out of reach for longer than that already or cannot be reached
    /// at all (no address).
    pub fn worth_waiting(&self, arrived: Instant, err: &RelayError) -> bool {
        if matches!(err, RelayError::NoAddress { .. }) || arrived.elapsed() >= PATIENCE {
            return false;
        }
        self.health()
            .failing_since
            .is_none_or(|since| since.elapsed() < PATIENCE)
    }
}

/// Keepalive on the leader's side of a relay; failing to set it only loses the early
/// notice of a vanished leader (the lease still ends the relay).
fn keep_alive(upstream: &TcpStream) {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_RETRIES);
    if let Err(err) = socket2::SockRef::from(upstream).set_tcp_keepalive(&keepalive) {
        tracing::debug!(%err, "could not set keepalive on a relay to the leader");
    }
}

/// What the first bytes of a connection to be relayed were.
#[derive(Debug, PartialEq, Eq)]
pub enum Sniffed {
    /// A client's: relay them.
    Client,
    /// Another instance's relay greeting: answered (this instance does not lead), and
    /// the connection is to be closed.
    Greeted,
    /// The connection ended before it said anything.
    Gone,
}

/// Read the first bytes of a connection this standby is about to relay into `first`
/// (they go to the leader before anything else), until they tell a client from
/// another instance's relay greeting, which is answered here.
pub async fn sniff<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    first: &mut BytesMut,
    me: &str,
) -> Sniffed {
    loop {
        match hello::first_line(first) {
            First::Client => return Sniffed::Client,
            First::Greeting { from, proven, .. } => {
                if from != me {
                    tracing::debug!(
                        from,
                        "refused a connection another instance relayed here: this instance \
                         does not lead, and a relayed connection is never relayed again"
                    );
                }
                let mut out = BytesMut::new();
                hello::answer(&mut out, proven, false, me);
                let _ = stream.write_all(&out).await;
                let _ = stream.shutdown().await;
                return Sniffed::Greeted;
            }
            First::Undecided => {
                first.reserve(1024);
                match stream.read_buf(first).await {
                    Ok(0) | Err(_) => return Sniffed::Gone,
                    Ok(_) => {}
                }
            }
        }
    }
}

/// Relay `client` to `upstream` (the leader, greeted) until either side closes or
/// `term` ends; `first` (the client's first bytes, already read) goes first.
pub async fn relay<S: AsyncRead + AsyncWrite + Unpin>(
    mut client: S,
    mut upstream: TcpStream,
    first: BytesMut,
    peer: &str,
    term: CancellationToken,
) {
    tracing::info!(peer, "relaying a connection to the leader");
    let copy = async {
        upstream.write_all(&first).await?;
        tokio::io::copy_bidirectional(&mut client, &mut upstream).await
    };
    tokio::select! {
        done = copy => {
            if let Err(err) = done {
                tracing::debug!(%err, peer, "relay ended");
            }
        }
        _ = term.cancelled() => {
            tracing::info!(peer, "the leader changed; closing a relayed connection");
        }
    }
}
