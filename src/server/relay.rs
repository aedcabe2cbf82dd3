//! A standby's connection: the client's bytes go, unchanged, to the leader, and the
//! leader's back (Redis leader mode). The leader sees one connection per client, with
//! that client's own session; the standby understands nothing of the protocol.
//!
//! Ownership: the task owns both sockets. Each direction copies through its own fixed
//! buffer (tokio's `copy_bidirectional`: 8 KiB each), so a client that floods, or a
//! leader that answers a large job, is held back by TCP flow control, never by memory.
//! A half-close is passed on (a client's shutdown of its sending side reaches the
//! leader, which answers a waiting reserve with TIMED_OUT, as beanstalkd does). When
//! either side ends, or the term ends (a new leader), both are closed.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// How long connecting to the leader may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Connect to the leader at `leader`.
pub async fn connect(leader: &str) -> std::io::Result<TcpStream> {
    let upstream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(leader))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    upstream.set_nodelay(true)?;
    Ok(upstream)
}

/// Relay `client` to `upstream` (the leader) until either side closes or `term` ends.
pub async fn relay<S: AsyncRead + AsyncWrite + Unpin>(
    mut client: S,
    mut upstream: TcpStream,
    peer: &str,
    term: CancellationToken,
) {
    tracing::info!(peer, "relaying a connection to the leader");
    tokio::select! {
        done = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {
            if let Err(err) = done {
                tracing::debug!(%err, peer, "relay ended");
            }
        }
        _ = term.cancelled() => {
            tracing::info!(peer, "the leader changed; closing a relayed connection");
        }
    }
}
