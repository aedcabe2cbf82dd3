//! Sockets: the listener (TCP or a unix socket), the accept loop with its connection
//! limit, one task per connection, signals, and graceful shutdown.
//!
//! Ownership: [`run`] owns the listener and the set of connection tasks. Shutdown: stop
//! accepting, tell every connection (each finishes the command it is running and writes
//! its reply), wait up to the grace period, then return.

pub mod connection;
pub mod privileges;
pub mod signals;

use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket, UnixListener};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::engine::Engine;

/// The reference's listen backlog.
const BACKLOG: u32 = 1024;

/// Where to listen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// A bound listener.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

/// Errors that stop the server from starting; the message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "cannot listen on {addr}: {cause} (is another server on that port? choose another with -p or -l)"
    )]
    Bind {
        addr: String,
        // Not a `source`: the message already names it, and a chain would repeat it.
        cause: std::io::Error,
    },
    #[error(
        "{path:?} exists and is not a socket; refusing to replace it (choose another path for -l unix:)"
    )]
    NotASocket { path: PathBuf },
}

impl Listener {
    /// Bind `addr`. A unix socket path that already exists is replaced, as the
    /// reference does.
    pub fn bind(addr: &ListenAddr) -> Result<Listener, ServerError> {
        let err = |cause| ServerError::Bind {
            addr: addr.to_string(),
            cause,
        };
        match addr {
            ListenAddr::Tcp(sa) => {
                let socket = if sa.is_ipv4() {
                    TcpSocket::new_v4()
                } else {
                    TcpSocket::new_v6()
                }
                .map_err(err)?;
                socket.set_reuseaddr(true).map_err(err)?;
                socket.bind(*sa).map_err(err)?;
                Ok(Listener::Tcp(socket.listen(BACKLOG).map_err(err)?))
            }
            ListenAddr::Unix(path) => {
                // Replace a stale socket, as the reference does, but never another file.
                match std::fs::symlink_metadata(path) {
                    Ok(meta) if meta.file_type().is_socket() => {
                        std::fs::remove_file(path).map_err(err)?;
                    }
                    Ok(_) => return Err(ServerError::NotASocket { path: path.clone() }),
                    Err(_) => {}
                }
                Ok(Listener::Unix(
                    UnixListener::bind(path).map_err(err)?,
                    path.clone(),
                ))
            }
        }
    }

    /// What was actually bound (the port when 0 was asked for).
    pub fn describe(&self) -> String {
        match self {
            Listener::Tcp(l) => l
                .local_addr()
                .map_or_else(|_| "tcp".into(), |a| a.to_string()),
            Listener::Unix(_, p) => format!("unix:{}", p.display()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub max_connections: usize,
    pub shutdown_grace: Duration,
}

/// Accept and serve connections until `shutdown` resolves, then shut down gracefully.
pub async fn run(
    engine: Arc<Engine>,
    listener: Listener,
    config: ServerConfig,
    shutdown: impl Future<Output = ()>,
) {
    let stop = CancellationToken::new();
    let tasks = TaskTracker::new();
    let limit = Arc::new(Semaphore::new(config.max_connections));
    let heap = Arc::new(HeapTrim::default());
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = accept(&listener) => a,
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
        let (engine, stop) = (engine.clone(), stop.clone());
        let (heap, limit) = (heap.clone(), limit.clone());
        tasks.spawn(async move {
            match stream {
                Stream::Tcp(s, peer) => connection::serve(engine, s, &peer, stop).await,
                Stream::Unix(s) => connection::serve(engine, s, "unix", stop).await,
            }
            drop(permit);
            heap.closed(max - limit.available_permits());
        });
    }
    tracing::info!(
        connections = tasks.len(),
        "shutting down: no longer accepting"
    );
    if let Listener::Unix(_, path) = &listener {
        let _ = std::fs::remove_file(path);
    }
    stop.cancel();
    tasks.close();
    if tokio::time::timeout(config.shutdown_grace, tasks.wait())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace period over; closing the remaining connections");
    }
    engine.shutdown();
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
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}

enum Stream {
    /// With the peer's address, for the logs.
    Tcp(tokio::net::TcpStream, String),
    Unix(tokio::net::UnixStream),
}

async fn accept(listener: &Listener) -> std::io::Result<Stream> {
    match listener {
        Listener::Tcp(l) => {
            let (s, peer) = l.accept().await?;
            // Replies are written whole; don't let Nagle hold them back.
            s.set_nodelay(true)?;
            Ok(Stream::Tcp(s, peer.to_string()))
        }
        Listener::Unix(l, _) => Ok(Stream::Unix(l.accept().await?.0)),
    }
}
