//! The listening sockets and accepting from them: bound from `-l`/`-p` (one socket,
//! TCP or unix), or inherited from systemd (every socket it passed; see
//! [`super::activation`]).
//!
//! Invariants: a unix socket file is removed at shutdown only if redstalk created it;
//! an inherited socket's file belongs to the socket unit, which keeps listening on it
//! and starts the next redstalk when a client connects. Accepting takes from the
//! sockets in turn, so a busy one cannot starve the others.

use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::PathBuf;
use std::task::Poll;

use tokio::net::{TcpListener, TcpSocket, TcpStream, UnixListener, UnixStream};

use super::activation::{Inherited, InheritedListener};

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

/// The sockets redstalk accepts connections on (at least one).
#[derive(Debug)]
pub struct Listener {
    sockets: Vec<Socket>,
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
    /// Bind `addr`. A unix socket path that already exists is replaced, as the
    /// reference does.
    pub fn bind(addr: &ListenAddr) -> Result<Listener, ServerError> {
        let err = |cause| ServerError::Bind {
            addr: addr.to_string(),
            cause,
        };
        let socket = match addr {
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
        };
        Ok(Listener {
            sockets: vec![socket],
            next: 0,
        })
    }

    /// Serve the sockets systemd passed (`inherited` must not be empty). Must run
    /// inside the async runtime.
    pub fn inherited(inherited: Vec<Inherited>) -> Result<Listener, ServerError> {
        let sockets = inherited
            .into_iter()
            .map(|i| {
                let err = |source| ServerError::Inherited { fd: i.fd, source };
                Ok(match i.listener {
                    InheritedListener::Tcp(l) => {
                        Socket::Tcp(TcpListener::from_std(l).map_err(err)?)
                    }
                    InheritedListener::Unix(l) => Socket::Unix {
                        listener: UnixListener::from_std(l).map_err(err)?,
                        created: None,
                    },
                })
            })
            .collect::<Result<Vec<_>, ServerError>>()?;
        Ok(Listener { sockets, next: 0 })
    }

    /// What is listened on (the port when 0 was asked for), for the logs.
    pub fn describe(&self) -> String {
        let one = |s: &Socket| match s {
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
        };
        let all: Vec<String> = self.sockets.iter().map(one).collect();
        all.join(", ")
    }

    /// The next connection on any of the sockets; an error is `accept`'s own.
    pub async fn accept(&mut self) -> std::io::Result<Stream> {
        let n = self.sockets.len();
        std::future::poll_fn(|cx| {
            for k in 0..n {
                let i = (self.next + k) % n;
                let polled = match &self.sockets[i] {
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
                    return Poll::Ready(r);
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Remove the socket files redstalk created (not inherited ones).
    pub fn remove_socket_files(&self) {
        for s in &self.sockets {
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
