//! A connection's first steps on a listener that is not open (docs/SECURITY.md): the
//! TLS handshake, then who the client is: its certificate's identity, the listener's
//! role, or the token of its first command, `auth <token>` (beanstalkd-rs's wire form:
//! `AUTHENTICATED`, or `UNAUTHORIZED` and a close).
//!
//! Invariants: nothing the client sends before it is admitted reaches the engine (it is
//! not even a connection there yet); the first line is read within the protocol's
//! 224-byte window, so a client cannot make this hold more (a longer line is refused at
//! once); each step has its timeout (the caller holds the connection's pending place
//! throughout); a refusal is answered, the rest of the client's input drained for a
//! moment (so a reset does not destroy the answer) and the connection closed; a token
//! is never logged, only the identity it stands for.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

use super::listen::Port;
use super::policy::AuthMode;
use super::security::Security;
use super::tls;
use crate::access::{ADMIN, Grant, Identity, IdentityKey, Role};

/// beanstalkd's command line window (CRLF included).
pub const LINE_MAX: usize = 224;
/// After a refusal, what is read and dropped at most before closing.
const DRAIN_FOR: Duration = Duration::from_secs(1);
const DRAIN_MAX: usize = 4 << 20;

/// An authenticated connection's access: its grant, and what re-checks it.
#[derive(Debug)]
pub struct ConnAuth {
    pub grant: Grant,
    pub security: Arc<Security>,
    /// `auth <token>` is a command on this listener (a second `auth` re-authenticates).
    pub takes_tokens: bool,
    /// The client's address, for the guessing bound.
    pub ip: IpAddr,
}

/// A client let in: what it already sent beyond its authentication, and its access
/// (`None`: it may do everything).
#[derive(Debug)]
pub struct Admitted {
    pub first: BytesMut,
    pub auth: Option<ConnAuth>,
}

/// The TLS handshake of a connection of `port`, within the handshake timeout; with the
/// names of the client's certificate when it presented one.
pub async fn handshake(
    tcp: TcpStream,
    port: &Port,
    peer: &str,
    security: &Security,
) -> Option<(TlsStream<TcpStream>, Option<Vec<String>>)> {
    let acceptor = security.tls.as_ref()?.acceptor(port.policy.auth)?;
    let done = tokio::time::timeout(security.handshake_timeout, acceptor.accept(tcp)).await;
    let err = match done {
        Ok(Ok(stream)) => {
            let names = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|der| tls::certificate_names(der));
            return Some((stream, names));
        }
        Ok(Err(err)) => err,
        Err(_) => std::io::Error::new(std::io::ErrorKind::TimedOut, "handshake timed out"),
    };
    let reason = tls::handshake_failure(&err);
    security.figures.handshake_failed(reason);
    tracing::debug!(peer, listener = %port.label, reason, %err, "TLS handshake failed");
    None
}

/// Who the client of a connection of `port` is; `None` when it was refused (answered
/// and closed) or left. `cert`: its certificate's names, when it presented one.
pub async fn identify<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    port: &Port,
    ip: IpAddr,
    peer: &str,
    cert: Option<Vec<String>>,
    security: &Arc<Security>,
) -> Option<Admitted> {
    let control = &security.control;
    let conn = |grant: Grant| {
        Some(Admitted {
            first: BytesMut::new(),
            auth: Some(ConnAuth {
                grant,
                security: security.clone(),
                takes_tokens: port.policy.auth.takes_tokens(),
                ip,
            }),
        })
    };
    let policy = &port.policy;
    match policy.auth {
        AuthMode::None => {
            let Some(role) = &policy.role else {
                return Some(Admitted {
                    first: BytesMut::new(),
                    auth: None,
                });
            };
            match control.grant(IdentityKey::Role(role.clone())) {
                Some(grant) => return conn(grant),
                None => {
                    tracing::warn!(peer, listener = %port.label, role, "the listener's role is not in the roles file; closing");
                    refuse(stream, security, "unknown_role").await;
                    return None;
                }
            }
        }
        AuthMode::Relay => {
            // Only instances; their greeting is answered by the route (leader mode).
            return Some(Admitted {
                first: BytesMut::new(),
                auth: None,
            });
        }
        AuthMode::Cert | AuthMode::TokenOrCert => {
            if let Some(names) = cert.filter(|n| !n.is_empty()) {
                match cert_grant(security, names.clone()) {
                    Some(grant) => {
                        log_admitted(peer, port, grant.identity(), "certificate");
                        return conn(grant);
                    }
                    None if policy.auth == AuthMode::Cert => {
                        tracing::info!(peer, listener = %port.label, names = ?names, "a client certificate the roles file does not name; closing");
                        refuse(stream, security, "unknown_cert").await;
                        return None;
                    }
                    None => {}
                }
            } else if policy.auth == AuthMode::Cert {
                // The verifier requires one: not reached, but never let one in without.
                refuse(stream, security, "no_client_cert").await;
                return None;
            }
        }
        AuthMode::Token => {}
    }
    token_first(stream, port, ip, peer, security).await
}

/// A client that must send `auth <token>` first: let in with its token's identity, or
/// refused (`None`).
async fn token_first<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    port: &Port,
    ip: IpAddr,
    peer: &str,
    security: &Arc<Security>,
) -> Option<Admitted> {
    let control = &security.control;
    let mut first = BytesMut::with_capacity(LINE_MAX);
    let line = tokio::time::timeout(security.auth_timeout, read_line(stream, &mut first)).await;
    let reason = match line {
        Err(_) => "timeout",
        Ok(FirstLine::Gone) => return None,
        Ok(FirstLine::Quit) => return None,
        Ok(FirstLine::TooLong) => "line_too_long",
        Ok(FirstLine::Other) => "no_auth",
        Ok(FirstLine::Auth { token, len }) => {
            let token = first.split_to(len).split_off(token);
            let token = token.strip_suffix(b"\r\n").unwrap_or(&token);
            match control.check_token(ip, token) {
                Ok(grant) => {
                    log_admitted(peer, port, grant.identity(), "token");
                    let answered = async {
                        stream.write_all(b"AUTHENTICATED\r\n").await?;
                        stream.flush().await
                    };
                    if answered.await.is_err() {
                        return None;
                    }
                    return Some(Admitted {
                        first,
                        auth: Some(ConnAuth {
                            grant,
                            security: security.clone(),
                            takes_tokens: true,
                            ip,
                        }),
                    });
                }
                Err(refused) => {
                    tracing::info!(peer, listener = %port.label, reason = refused.reason(), "auth failed");
                    refused.reason()
                }
            }
        }
    };
    if reason != "wrong_token" && reason != "limited" && reason != "no_token_configured" {
        tracing::info!(peer, listener = %port.label, reason, "auth failed");
    }
    refuse(stream, security, reason).await;
    None
}

/// The grant of a client certificate with `names`: the roles file's identity of the
/// first name it knows; without a roles file, any certificate the CA signed is the
/// built-in admin (named after its first name).
fn cert_grant(security: &Security, names: Vec<String>) -> Option<Grant> {
    let control = &security.control;
    if control.config().roles_file.is_some() {
        return control.grant(IdentityKey::Cert(names));
    }
    let role = control
        .roles()
        .role(ADMIN)
        .cloned()
        .unwrap_or_else(|| Arc::new(Role::admin()));
    let identity = Identity {
        name: names
            .first()
            .map(String::as_str)
            .unwrap_or("client certificate")
            .into(),
        role,
    };
    Some(Grant::new(
        IdentityKey::Role(ADMIN.to_string()),
        identity,
        control.generation(),
    ))
}

fn log_admitted(peer: &str, port: &Port, identity: &Identity, by: &'static str) {
    tracing::info!(
        peer,
        listener = %port.label,
        identity = %identity.name,
        role = %identity.role.name,
        by,
        "authenticated"
    );
}

/// What the first line of a connection that must authenticate is.
enum FirstLine {
    /// `auth <token>`: the token starts at `token`, the line (CRLF included) is `len`.
    Auth { token: usize, len: usize },
    /// A line starting `quit`: closed without a word, as beanstalkd's quit.
    Quit,
    /// Any other line.
    Other,
    /// No CRLF within the protocol's line window.
    TooLong,
    /// The client left before a whole line.
    Gone,
}

/// Read until the first line is whole (or cannot be one) into `buf`.
async fn read_line<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut BytesMut) -> FirstLine {
    loop {
        let window = &buf[..buf.len().min(LINE_MAX)];
        if let Some(end) = window.windows(2).position(|w| w == b"\r\n") {
            let line = &buf[..end];
            return if line.starts_with(b"auth ") {
                FirstLine::Auth {
                    token: 5,
                    len: end + 2,
                }
            } else if line.starts_with(b"quit") {
                FirstLine::Quit
            } else {
                FirstLine::Other
            };
        }
        if buf.len() >= LINE_MAX {
            return FirstLine::TooLong;
        }
        buf.reserve(LINE_MAX);
        match stream.read_buf(buf).await {
            Ok(0) | Err(_) => return FirstLine::Gone,
            Ok(_) => {}
        }
    }
}

/// Answer `UNAUTHORIZED`, count why, and close: the rest of the client's input is read
/// and dropped for a moment first, so the answer is not lost to a reset.
pub async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    security: &Security,
    reason: &'static str,
) {
    security.figures.auth_failed(reason);
    if stream.write_all(b"UNAUTHORIZED\r\n").await.is_err() {
        return;
    }
    let _ = stream.flush().await;
    let _ = stream.shutdown().await;
    let drain = async {
        // On the heap: an array here would be part of every connection task's future,
        // 8 KiB more for each idle connection, refused or not.
        let mut sink = vec![0u8; 8192];
        let mut read = 0;
        while read < DRAIN_MAX {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_FOR, drain).await;
}
