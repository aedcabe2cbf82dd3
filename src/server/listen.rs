//! The listening sockets and accepting from them: the default listener bound from
//! `-l`/`-p` (TCP or unix) or the sockets systemd passed in its place (see
//! [`super::activation`]), and the `--listen` ones, each with its [`Policy`] (TLS, how
//! clients authenticate; see [`super::policy`]).
//!
//! Invariants: a unix socket file is removed at shutdown only if redstalk created it;
//! an inherited socket's file belongs to the socket unit, which keeps listening on it
//! and starts the next redstalk when a client connects. Accepting takes from the
//! sockets in turn, so a busy one cannot starve the others. Every accepted connection
//! comes with its listener's [`Port`] (policy, label, figures).

use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::task::Poll;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::{TcpListener, TcpSocket, TcpStream, UnixListener, UnixStream};

use super::activation::{Inherited, InheritedListener};
use super::policy::{ListenerSpec, Policy, SpecAddr};

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
    #[error("cannot serve descriptor {fd} passed by systemd: {source}")]
    Inherited { fd: i32, source: std::io::Error },
    #[error(
        "--listen fd:{0}: systemd passed no socket named {0:?} (FileDescriptorName= in the \
         socket unit; passed: {1})"
    )]
    NoSuchFd(String, String),
}

/// One listener: where, its policy, and its figures (for `/metrics`).
#[derive(Debug)]
pub struct Port {
    /// The address, as the logs and metrics name the listener.
    pub label: String,
    pub policy: Policy,
    /// Connections accepted since the start.
    pub accepted: AtomicU64,
    /// Connections open now (authenticated or not).
    pub open: AtomicU64,
}

impl Port {
    fn new(label: String, policy: Policy) -> Arc<Port> {
        Arc::new(Port {
            label,
            policy,
            accepted: AtomicU64::new(0),
            open: AtomicU64::new(0),
        })
    }

    /// A connection of this listener opened; the guard counts it closed when dropped.
    pub fn opened(self: &Arc<Port>) -> PortGuard {
        self.accepted.fetch_add(1, Ordering::Relaxed);
        self.open.fetch_add(1, Ordering::Relaxed);
        PortGuard(self.clone())
    }
}

/// An open connection of a [`Port`].
#[derive(Debug)]
pub struct PortGuard(Arc<Port>);

impl Drop for PortGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A TCP listener on `addr` with SO_REUSEADDR (a restart must not fail on the previous
/// process's TIME_WAIT sockets). Call inside the runtime.
pub fn bind_tcp(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }?;
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// One listening socket.
#[derive(Debug)]
enum Socket {
    Tcp(TcpListener),
    Unix {
        listener: UnixListener,
        /// The file to remove at shutdown: `Some` only when redstalk created it.
        created: Option<PathBuf>,
    },
}

/// The sockets redstalk accepts connections on (at least one), each with its port.
#[derive(Debug)]
pub struct Listener {
    sockets: Vec<(Socket, Arc<Port>)>,
    /// Where the next accept starts looking, so the sockets take turns.
    next: usize,
}

/// An accepted connection.
pub enum Stream {
    /// With the peer's address, for the logs.
    Tcp(TcpStream, String),
    Unix(UnixStream),
}

impl Listener {
    /// Bind `addr`, open as beanstalkd's. A unix socket path that already exists is
    /// replaced, as the reference does.
    pub fn bind(addr: &ListenAddr) -> Result<Listener, ServerError> {
        let socket = bind_one(addr)?;
        let port = Port::new(describe_socket(&socket), Policy::default());
        Ok(Listener {
            sockets: vec![(socket, port)],
            next: 0,
        })
    }

    /// Every listener: the default one at `default` (open, as beanstalkd's), or the
    /// sockets systemd passed in its place (each with the policy of the `--listen
    /// fd:NAME` naming it, else open), and every other `--listen`. Must run inside the
    /// async runtime.
    pub fn bind_all(
        default: Option<&ListenAddr>,
        specs: &[ListenerSpec],
        inherited: Vec<Inherited>,
    ) -> Result<Listener, ServerError> {
        let passed: Vec<String> = inherited.iter().filter_map(|i| i.name.clone()).collect();
        for spec in specs {
            if let SpecAddr::Fd(name) = &spec.addr
                && !passed.contains(name)
            {
                return Err(ServerError::NoSuchFd(name.clone(), passed.join(", ")));
            }
        }
        let mut sockets = Vec::new();
        if inherited.is_empty() {
            if let Some(addr) = default {
                sockets.extend(Listener::bind(addr)?.sockets);
            }
        } else {
            for i in inherited {
                let named = specs
                    .iter()
                    .find(|s| matches!(&s.addr, SpecAddr::Fd(n) if Some(n) == i.name.as_ref()));
                let policy = named.map(|s| s.policy.clone()).unwrap_or_default();
                let label = match &i.name {
                    Some(n) => format!("fd:{n}"),
                    None => format!("fd:{}", i.fd),
                };
                let socket = adopt(i)?;
                sockets.push((socket, Port::new(label, policy)));
            }
        }
        for spec in specs {
            let addr = match &spec.addr {
                SpecAddr::Tcp(a) => ListenAddr::Tcp(*a),
                SpecAddr::Unix(p) => ListenAddr::Unix(p.clone()),
                SpecAddr::Fd(_) => continue,
            };
            let socket = bind_one(&addr)?;
            let port = Port::new(describe_socket(&socket), spec.policy.clone());
            sockets.push((socket, port));
        }
        Ok(Listener { sockets, next: 0 })
    }

    /// Every listener's port (for `/metrics`).
    pub fn ports(&self) -> Vec<Arc<Port>> {
        self.sockets.iter().map(|(_, p)| p.clone()).collect()
    }

    /// Serve the sockets systemd passed (`inherited` must not be empty), open. Must
    /// run inside the async runtime.
    pub fn inherited(inherited: Vec<Inherited>) -> Result<Listener, ServerError> {
        Listener::bind_all(None, &[], inherited)
    }

    /// What is listened on (the port when 0 was asked for), for the logs.
    pub fn describe(&self) -> String {
        let all: Vec<String> = self
            .sockets
            .iter()
            .map(|(_, p)| match p.policy.is_open() {
                true => p.label.clone(),
                false => format!("{} ({})", p.label, describe_policy(&p.policy)),
            })
            .collect();
        all.join(", ")
    }

    /// The address of the first TCP listener whose policy is `wanted` (for tests and
    /// the default `--advertise`).
    pub fn tcp_addr(&self, wanted: impl Fn(&Policy) -> bool) -> Option<SocketAddr> {
        self.sockets.iter().find_map(|(s, p)| match s {
            Socket::Tcp(l) if wanted(&p.policy) => l.local_addr().ok(),
            _ => None,
        })
    }
}

/// A policy, briefly, for the start line.
fn describe_policy(p: &Policy) -> String {
    let mut parts = Vec::new();
    if p.tls {
        parts.push("tls".to_string());
    }
    parts.push(format!("auth={}", p.auth.name()));
    if let Some(r) = &p.role {
        parts.push(format!("role={r}"));
    }
    parts.join(",")
}

/// One socket bound at `addr`.
fn bind_one(addr: &ListenAddr) -> Result<Socket, ServerError> {
    let err = |cause| ServerError::Bind {
        addr: addr.to_string(),
        cause,
    };
    Ok(match addr {
        ListenAddr::Tcp(sa) => Socket::Tcp(bind_tcp(*sa, BACKLOG).map_err(err)?),
        ListenAddr::Unix(path) => {
            // Replace a stale socket, as the reference does, but never another file.
            match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.file_type().is_socket() => {
                    std::fs::remove_file(path).map_err(err)?;
                }
                Ok(_) => return Err(ServerError::NotASocket { path: path.clone() }),
                Err(_) => {}
            }
            Socket::Unix {
                listener: UnixListener::bind(path).map_err(err)?,
                created: Some(path.clone()),
            }
        }
    })
}

/// A socket systemd passed, registered with the runtime.
fn adopt(i: Inherited) -> Result<Socket, ServerError> {
    let err = |source| ServerError::Inherited { fd: i.fd, source };
    Ok(match i.listener {
        InheritedListener::Tcp(l) => Socket::Tcp(TcpListener::from_std(l).map_err(err)?),
        InheritedListener::Unix(l) => Socket::Unix {
            listener: UnixListener::from_std(l).map_err(err)?,
            created: None,
        },
    })
}

/// Where a socket listens (the port when 0 was asked for).
fn describe_socket(s: &Socket) -> String {
    match s {
        Socket::Tcp(l) => l
            .local_addr()
            .map_or_else(|_| "tcp".into(), |a| a.to_string()),
        Socket::Unix { listener, .. } => match listener.local_addr() {
            Ok(a) => match a.as_pathname() {
                Some(p) => format!("unix:{}", p.display()),
                None => "unix (unnamed or abstract)".into(),
            },
            Err(_) => "unix".into(),
        },
    }
}

impl Listener {
    /// The next connection on any of the sockets, with its listener's port; an error
    /// is `accept`'s own.
    pub async fn accept(&mut self) -> std::io::Result<(Stream, Arc<Port>)> {
        let n = self.sockets.len();
        std::future::poll_fn(|cx| {
            for k in 0..n {
                let i = (self.next + k) % n;
                let (socket, port) = &self.sockets[i];
                let polled = match socket {
                    Socket::Tcp(l) => l.poll_accept(cx).map_ok(|(s, peer)| {
                        // Replies are written whole; don't let Nagle hold them back.
                        // Failing that costs only latency: the connection is served
                        // anyway, and no other connection waits for it.
                        if let Err(err) = s.set_nodelay(true) {
                            tracing::debug!(%err, %peer, "could not set TCP_NODELAY");
                        }
                        Stream::Tcp(s, peer.to_string())
                    }),
                    Socket::Unix { listener, .. } => {
                        listener.poll_accept(cx).map_ok(|(s, _)| Stream::Unix(s))
                    }
                };
                if let Poll::Ready(r) = polled {
                    self.next = i + 1;
                    return Poll::Ready(r.map(|s| (s, port.clone())));
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Remove the socket files redstalk created (not inherited ones).
    pub fn remove_socket_files(&self) {
        for (s, _) in &self.sockets {
            if let Socket::Unix {
                created: Some(path),
                ..
            } = s
            {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
