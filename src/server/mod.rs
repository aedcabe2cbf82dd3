//! Sockets: the accept loop with its connection limit, one task per connection,
//! signals, and graceful shutdown. Where the listening sockets come from (`-l`/`-p`,
//! or systemd) is [`listen`]'s and [`activation`]'s job.
//!
//! Each accepted connection asks a [`Router`] what to do with it: serve it with an
//! engine ([`connection`]), or relay it to another instance ([`relay`], a standby in
//! Redis leader mode). The route carries a token that ends the connection (shutdown,
//! or the end of a leadership).
//!
//! Ownership: [`run`] owns the listener and the set of connection tasks. Shutdown: stop
//! accepting, tell every connection (each finishes the command it is running and writes
//! its reply), wait up to the grace period, then return.

pub mod activation;
pub mod connection;
pub mod listen;
pub mod privileges;
pub mod relay;
pub mod signals;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::Engine;

/// What to do with a new connection.
pub enum Route {
    /// Serve it with this engine until the token is cancelled.
    Serve(Arc<Engine>, CancellationToken),
    /// Relay it, byte for byte, to the instance at this address (HOST:PORT).
    Relay(String, CancellationToken),
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
        let old = std::mem::replace(
            &mut *term.lock().unwrap_or_else(|e| e.into_inner()),
            stop.child_token(),
        );
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
        let term = self.term.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Some(Route::Serve(self.engine.clone(), term))
    }
}

use listen::Stream;
pub use listen::{ListenAddr, Listener, ServerError};

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub max_connections: usize,
    pub shutdown_grace: Duration,
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
    let heap = Arc::new(HeapTrim::default());
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let stream = match accepted {
            Ok(s) => s,
            Err(err) => {
                // Typically EMFILE: back off briefly instead of spinning.
                tracing::warn!(%err, "accept failed; retrying in 50 ms");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            tracing::warn!(
                limit = config.max_connections,
                "connection limit reached; closing a new connection"
            );
            drop(stream);
            continue;
        };
        let max = config.max_connections;
        heap.opened(max - limit.available_permits());
        let router = router.clone();
        let (heap, limit) = (heap.clone(), limit.clone());
        tasks.spawn(async move {
            match stream {
                Stream::Tcp(s, peer) => handle(&router, s, &peer).await,
                Stream::Unix(s) => handle(&router, s, "unix").await,
            }
            drop(permit);
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

/// How long a connection may wait for an instance to serve it (a leader that died is
/// replaced within its lease).
const ROUTE_PATIENCE: Duration = Duration::from_secs(5);
/// Between two attempts to reach a leader that did not answer.
const ROUTE_RETRY: Duration = Duration::from_millis(100);

/// Serve or relay one connection, as the router says. A leader that cannot be reached
/// (it just died) is asked for again until the router names another one or this
/// instance takes over, so a client that connects during a failover is served after it
/// rather than refused.
async fn handle<S: connection::Socket + Send>(router: &impl Router, stream: S, peer: &str) {
    let give_up = tokio::time::Instant::now() + ROUTE_PATIENCE;
    loop {
        match router.route().await {
            Some(Route::Serve(engine, term)) => {
                return connection::serve(engine, stream, peer, term).await;
            }
            Some(Route::Relay(leader, term)) => match relay::connect(&leader).await {
                Ok(upstream) => return relay::relay(stream, upstream, peer, term).await,
                Err(err) if tokio::time::Instant::now() >= give_up => {
                    tracing::warn!(%err, leader, peer, "cannot reach the leader; closing the client's connection");
                    return;
                }
                Err(_) => tokio::time::sleep(ROUTE_RETRY).await,
            },
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
