//! Sockets: the accept loop with its connection limit, one task per connection,
//! signals, and graceful shutdown. Where the listening sockets come from (`-l`/`-p`,
//! `--listen`, or systemd) is [`listen`]'s and [`activation`]'s job; what a listener
//! asks of its clients (TLS, authentication) is its [`policy`], carried out by
//! [`admit`] (handshake, identity) with the process's [`security`] (roles, TLS
//! configurations, the bound on pending connections) before a connection is served.
//!
//! Each accepted connection asks a [`Router`] what to do with it: serve it with an
//! engine ([`connection`]), or relay it to another instance ([`relay`], a standby in
//! Redis leader mode). The route carries a token that ends the connection (shutdown,
//! or the end of a leadership).
//!
//! Limits: a connection needs one of `max_connections` places and one of
//! `max_descriptors` file descriptors ([`limits`]); a relayed one takes a second
//! descriptor for its side of the leader. A connection that cannot have them is closed
//! at once (refused), never left waiting in the listen queue. A connection of a TLS or
//! token listener also needs one of `--max-pending` places until it is admitted
//! (handshake and `auth` each within their timeout), so a flood of half-open
//! handshakes is closed at accept and never takes what served clients use.
//!
//! Ownership: [`run`] owns the listener and the set of connection tasks. Shutdown: stop
//! accepting, tell every connection (each finishes the command it is running and writes
//! its reply), wait up to the grace period, then return.

mod acks;
pub mod activation;
pub mod admit;
pub mod connection;
pub mod greeting;
pub mod hello;
pub mod limits;
pub mod listen;
pub mod policy;
pub mod privileges;
pub mod relay;
pub mod security;
pub mod signals;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tls;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::Engine;
use crate::util::lock;

/// What to do with a new connection.
pub enum Route {
    /// Serve it with this engine until `term` is cancelled. With a `greeting` (leader
    /// mode: this instance's id), another instance's relay greeting as the connection's
    /// first line is answered ([`hello`]).
    Serve {
        engine: Arc<Engine>,
        term: CancellationToken,
        greeting: Option<Arc<str>>,
    },
    /// Relay it, byte for byte, to the leader, until the token is cancelled.
    Relay(Arc<relay::Upstream>, CancellationToken),
}

/// Decides, per connection, how it is served.
pub trait Router: Clone + Send + Sync + 'static {
    /// The route for a new connection; `None` closes it (nobody can serve it now).
    fn route(&self) -> impl Future<Output = Option<Route>> + Send;
}

/// Every connection served by one engine (memory, `-b`, Redis shared mode).
///
/// A shared store may find the namespace it served lost (Redis restarted empty) and
/// start a fresh one: the connections of the old namespace are then closed, as a
/// restarted beanstalkd's are. Each connection gets the token of the namespace it was
/// opened in (`term`, a child of `stop`); a task cancels it and makes the next one when
/// the engine says the namespace changed. (The store itself refuses what an old
/// connection asks in the meantime; the token only closes them.)
#[derive(Clone, Debug)]
pub struct Direct {
    engine: Arc<Engine>,
    term: Arc<std::sync::Mutex<CancellationToken>>,
}

impl Direct {
    /// Serve every connection with `engine` until `stop` (call inside the runtime).
    pub fn new(engine: Arc<Engine>, stop: CancellationToken) -> Direct {
        let term = Arc::new(std::sync::Mutex::new(stop.child_token()));
        if let Some(changes) = engine.namespace_changes() {
            tokio::spawn(end_terms(changes, term.clone(), stop));
        }
        Direct { engine, term }
    }
}

/// Close the connections of a namespace when the store has started another.
async fn end_terms(
    mut changes: tokio::sync::watch::Receiver<u64>,
    term: Arc<std::sync::Mutex<CancellationToken>>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = stop.cancelled() => return,
        }
        let old = std::mem::replace(&mut *lock(&term), stop.child_token());
        tracing::warn!(
            "closing every client connection: the Redis namespace they were served from \
             is gone (Redis lost its data), as a restarted beanstalkd closes them; new \
             connections are served from a fresh namespace"
        );
        old.cancel();
    }
}

impl Router for Direct {
    async fn route(&self) -> Option<Route> {
        let term = lock(&self.term).clone();
        Some(Route::Serve {
            engine: self.engine.clone(),
            term,
            greeting: None,
        })
    }
}

pub use listen::{ListenAddr, Listener, ServerError};
use listen::{Port, Stream};
pub use security::Security;

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub max_connections: usize,
    /// File descriptors the connections may use together (see [`limits`]).
    pub max_descriptors: usize,
    pub shutdown_grace: Duration,
    /// Who may connect (TLS, roles, pending bound); [`Security::open`] without options.
    pub security: Arc<Security>,
}

/// Accept and serve connections until `shutdown` resolves, then shut down gracefully:
/// `stop` is cancelled (every route's token descends from it) and the connections get
/// the grace period to finish.
pub async fn run<R: Router>(
    router: R,
    mut listener: Listener,
    config: ServerConfig,
    stop: CancellationToken,
    shutdown: impl Future<Output = ()>,
) {
    let tasks = TaskTracker::new();
    let limit = Arc::new(Semaphore::new(config.max_connections));
    let fds = Arc::new(Semaphore::new(config.max_descriptors));
    let heap = Arc::new(HeapTrim::default());
    let refusals = Arc::new(Refusals::new(
        config.max_connections,
        config.max_descriptors,
    ));
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok(s) => s,
            Err(err) => {
                if let Some(pause) = accept_backoff(&err) {
                    tracing::warn!(%err, "accept failed; retrying in {pause:?}");
                    tokio::time::sleep(pause).await;
                } else {
                    // About that one connection (it was reset while queued...): the
                    // next one is accepted at once.
                    tracing::debug!(%err, "accept failed for one connection");
                }
                continue;
            }
        };
        let (stream, port) = stream;
        let (Ok(permit), Ok(fd)) = (
            limit.clone().try_acquire_owned(),
            fds.clone().try_acquire_owned(),
        ) else {
            refusals.note();
            drop(stream);
            continue;
        };
        let security = config.security.clone();
        let pending = match port.policy.has_pending() {
            true => match security.pending.clone().try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    security
                        .figures
                        .pending_refused
                        .fetch_add(1, Ordering::Relaxed);
                    refusals.note_pending(security.max_pending);
                    drop(stream);
                    continue;
                }
            },
            false => None,
        };
        let max = config.max_connections;
        heap.opened(max - limit.available_permits());
        let router = router.clone();
        let (heap, limit) = (heap.clone(), limit.clone());
        let spare = Spare {
            fds: fds.clone(),
            refusals: refusals.clone(),
        };
        tasks.spawn(async move {
            let open = port.opened();
            let first = First {
                port: &port,
                security: &security,
                pending,
                cert: None,
            };
            match stream {
                // Boxed: a TLS session is kilobytes, and unboxed it would size the
                // task of every connection, plain ones included (10,000 idle plain
                // clients held 7 KiB each more).
                Stream::Tcp(s, peer) if port.policy.tls => {
                    Box::pin(async {
                        let handshake = admit::handshake(s, &port, &peer, &security);
                        if let Some((tls, cert)) = handshake.await {
                            let first = First { cert, ..first };
                            handle(&router, tls, &peer, &spare, first).await;
                        }
                    })
                    .await
                }
                Stream::Tcp(s, peer) => handle(&router, s, &peer, &spare, first).await,
                Stream::Unix(s) => handle(&router, s, "unix", &spare, first).await,
            }
            drop((permit, fd, open));
            heap.closed(max - limit.available_permits());
        });
    }
    tracing::info!(
        connections = tasks.len(),
        "shutting down: no longer accepting"
    );
    listener.remove_socket_files();
    stop.cancel();
    tasks.close();
    if tokio::time::timeout(config.shutdown_grace, tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace period over; closing the remaining connections");
    }
}

/// Between two attempts to reach a leader that did not answer.
const ROUTE_RETRY: Duration = Duration::from_millis(100);

/// What a connection brings to [`handle`] from its accept and handshake.
struct First<'a> {
    port: &'a Arc<Port>,
    security: &'a Arc<Security>,
    /// Its place among the pending connections, until it is admitted.
    pending: Option<OwnedSemaphorePermit>,
    /// The names of the client certificate it presented.
    cert: Option<Vec<String>>,
}

/// Serve or relay one connection, as the router says, once it is admitted (its
/// listener's policy: see [`admit`]). A leader that cannot be reached
/// (it just died) is asked for again until the router names another one or this
/// instance takes over, so a client that connects during a failover is served after it
/// rather than refused; but not past [`relay::PATIENCE`] after its first bytes, nor at
/// all once the leader has been out of reach for that long (the client is closed at
/// once).
async fn handle<S: connection::ClientStream + Send>(
    router: &impl Router,
    mut stream: S,
    peer: &str,
    spare: &Spare,
    from: First<'_>,
) {
    let open = from.port.policy.is_open();
    let only_relays = from.port.policy.auth == policy::AuthMode::Relay;
    let Some(admitted) = admit(&mut stream, peer, from.port, from.cert, from.security).await else {
        return;
    };
    drop(from.pending);
    // The client's first bytes, read before it is relayed (they may be another
    // instance's relay greeting), then passed on; and when they came.
    let admit::Admitted {
        mut first,
        mut auth,
    } = admitted;
    let who = relayed_as(auth.as_ref());
    // An authenticated client was admitted here: its first bytes are its commands.
    let mut sniffed: Option<Instant> = (!open && !only_relays).then(Instant::now);
    loop {
        match router.route().await {
            Some(Route::Serve {
                engine,
                term,
                greeting,
            }) => {
                let greeting = greeting.and_then(|me| greeting_on(me, from.port, from.security));
                let auth = auth.take();
                return connection::serve(engine, stream, peer, term, greeting, first, auth).await;
            }
            Some(Route::Relay(upstream, _)) if !open && !only_relays && !upstream.proves() => {
                // Caught at the start (leader mode with authentication needs the
                // secret): never relay a client whose role the leader could not know.
                tracing::error!(
                    peer,
                    "cannot relay an authenticated client without --relay-secret-file; closing"
                );
                return;
            }
            Some(Route::Relay(upstream, term)) if sniffed.is_none() => {
                tokio::select! {
                    sniff = relay::sniff(&mut stream, &mut first, upstream.me()) => {
                        match sniff {
                            relay::Sniffed::Client if only_relays => {
                                admit::refuse(&mut stream, from.security, "not_an_instance").await;
                                return;
                            }
                            relay::Sniffed::Client => {}
                            relay::Sniffed::Greeted | relay::Sniffed::Gone => return,
                        }
                        sniffed = Some(Instant::now());
                    }
                    // A new leader (this instance, maybe) while the client was silent.
                    _ = term.cancelled() => {}
                }
            }
            Some(Route::Relay(upstream, term)) => {
                // The leader's side of a relay is a descriptor of its own.
                let Ok(second) = spare.fds.clone().try_acquire_owned() else {
                    spare.refusals.note();
                    return;
                };
                match upstream.connect(&who).await {
                    Ok(leader) => {
                        relay::relay(stream, leader, first, peer, term).await;
                        drop(second);
                        return;
                    }
                    Err(err)
                        if upstream.worth_waiting(sniffed.unwrap_or_else(Instant::now), &err) =>
                    {
                        drop(second);
                        tokio::time::sleep(ROUTE_RETRY).await;
                    }
                    Err(err) => {
                        tracing::info!(peer, %err, "cannot relay; closing the client's connection");
                        return;
                    }
                }
            }
            None => {
                tracing::warn!(
                    peer,
                    "no instance can serve this connection now; closing it"
                );
                return;
            }
        }
    }
}

/// A client of `port` let in (see [`admit`]); `None` when it was refused or left.
async fn admit<S: connection::ClientStream>(
    stream: &mut S,
    peer: &str,
    port: &Port,
    cert: Option<Vec<String>>,
    security: &Arc<Security>,
) -> Option<admit::Admitted> {
    if port.policy.is_open() {
        return Some(admit::Admitted {
            first: BytesMut::new(),
            auth: None,
        });
    }
    let ip = peer
        .parse::<std::net::SocketAddr>()
        .map_or(std::net::Ipv4Addr::UNSPECIFIED.into(), |a| a.ip());
    admit::identify(stream, port, ip, peer, cert, security).await
}

/// What answers a relay greeting on `port` of a leader (`me`): relay greetings are taken
/// where any client may do everything, and on listeners for instances.
fn greeting_on(me: Arc<str>, port: &Port, security: &Arc<Security>) -> Option<greeting::Greeting> {
    let only_relays = port.policy.auth == policy::AuthMode::Relay;
    (port.policy.is_open() || only_relays).then(|| greeting::Greeting {
        me,
        security: security.clone(),
        only_relays,
    })
}

/// Who a client is, as a standby tells the leader it relays the client to.
fn relayed_as(auth: Option<&admit::ConnAuth>) -> hello::Relayed {
    match auth {
        None => hello::Relayed::Open,
        Some(a) => hello::Relayed::As {
            role: a.grant.role().name.clone(),
            name: a.grant.identity().name.to_string(),
            takes_tokens: a.takes_tokens,
        },
    }
}

/// How long to pause accepting after `err`: only when the process or the system is out
/// of a resource (descriptors, buffers, memory), which accepting again at once would
/// not find either. Any other error concerns the one connection it came with.
fn accept_backoff(err: &std::io::Error) -> Option<Duration> {
    match err.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM) => {
            Some(Duration::from_millis(50))
        }
        _ => None,
    }
}

/// What a connection may take beyond its own place: a second descriptor, for a relay.
struct Spare {
    fds: Arc<Semaphore>,
    refusals: Arc<Refusals>,
}

/// Logs connections refused for want of a place or a descriptor (at accept, or when a
/// standby would relay one): the first of a wave at once, then a count every 10 s at
/// most (a connection storm must not become a log storm).
struct Refusals {
    max_connections: usize,
    max_descriptors: usize,
    /// Refused since the last log line, and when that was.
    count: std::sync::Mutex<(u64, Option<Instant>)>,
    /// The same, for connections refused as too many pending.
    pending: std::sync::Mutex<(u64, Option<Instant>)>,
}

impl Refusals {
    const EVERY: Duration = Duration::from_secs(10);

    fn new(max_connections: usize, max_descriptors: usize) -> Refusals {
        Refusals {
            max_connections,
            max_descriptors,
            count: std::sync::Mutex::new((0, None)),
            pending: std::sync::Mutex::new((0, None)),
        }
    }

    /// A connection closed at accept because `max` connections are pending already.
    fn note_pending(&self, max: usize) {
        let mut count = lock(&self.pending);
        count.0 += 1;
        if count.1.is_some_and(|at| at.elapsed() < Self::EVERY) {
            return;
        }
        tracing::warn!(
            refused = count.0,
            max_pending = max,
            "too many connections handshaking or not yet authenticated (--max-pending); \
             closing new ones of TLS and token listeners at once"
        );
        *count = (0, Some(Instant::now()));
    }

    fn note(&self) {
        let mut count = lock(&self.count);
        count.0 += 1;
        if count.1.is_some_and(|at| at.elapsed() < Self::EVERY) {
            return;
        }
        tracing::warn!(
            refused = count.0,
            max_connections = self.max_connections,
            descriptors_for_connections = self.max_descriptors,
            "connection limit reached (a relayed client takes two descriptors); closing \
             new connections at once"
        );
        *count = (0, Some(Instant::now()));
    }
}

/// Hands the heap that a wave of connections freed back to the OS.
///
/// glibc's allocator keeps freed memory for reuse and returns it only from the top of
/// the heap; after thousands of connections close, their buffers and tasks stay
/// resident (fragmented among live allocations, so the next wave does not reuse all of
/// it either). When the open connections fall to half of their peak since the last
/// trim (and by a few hundred at least), `malloc_trim` releases the free pages. A wave
/// of closes costs a handful of trims; steady traffic costs none.
#[derive(Default)]
struct HeapTrim {
    peak: AtomicUsize,
}

impl HeapTrim {
    /// Fewer closes than this since the peak are not worth a trim.
    const MIN_DROP: usize = 256;

    fn opened(&self, open: usize) {
        self.peak.fetch_max(open, Ordering::Relaxed);
    }

    fn closed(&self, open: usize) {
        let peak = self.peak.load(Ordering::Relaxed);
        if peak >= 2 * open && peak - open >= Self::MIN_DROP {
            self.peak.store(open, Ordering::Relaxed);
            trim_heap();
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    // SAFETY: malloc_trim only walks and releases the allocator's free memory.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}
