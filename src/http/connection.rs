//! One HTTP connection: hyper's HTTP/1 server protocol over the socket, answered by the
//! router, under deadlines that hyper does not keep by itself.
//!
//! Invariants (it shares the one-thread runtime with the beanstalk listener):
//! - a request head is at most [`MAX_HEAD`] bytes (else hyper answers 431) and must be
//!   complete within [`HEAD_TIMEOUT`] of the connection opening or of the previous
//!   response (else 408 when a head was begun, and the connection closes); so an idle
//!   keep-alive connection lasts [`HEAD_TIMEOUT`] too;
//! - a response must be produced within [`RESPONSE_TIMEOUT`] (else 503) and written
//!   within [`WRITE_TIMEOUT`] more (else the connection is dropped);
//! - a request body is read only by the routes that take one, each within its bound
//!   (the API's, a standby's forwarder, the console's login; see `http`);
//!   hyper's read buffer is at most [`MAX_BUF`];
//! - the connection ends when it is shed (see [`super::conns`]), and on shutdown after
//!   its response in progress, within [`STOP_GRACE`];
//! - before closing, input still arriving is read and dropped for at most [`LINGER`]
//!   and [`LINGER_BYTES`], so that closing with unread data (which resets the
//!   connection) does not destroy a response in flight.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::response::Response;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::conns::{ConnState, Phase, Ticket};

/// The largest request head (request line and headers); longer ones get 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// hyper's read buffer (its minimum): a head and what a client pipelines after it.
const MAX_BUF: usize = 8 * 1024;
/// How long a client may take to send a request head (and stay idle between requests).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Upper bound of producing one response (a scrape's own bound is lower).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(12);
/// How long writing a response may take once produced.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// On shutdown, how long a response in progress may still take.
const STOP_GRACE: Duration = Duration::from_secs(1);
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 256 * 1024;
/// A write that cannot start within this is abandoned (the 408 to a head never ended).
const REPLY_WRITE: Duration = Duration::from_secs(1);

/// The 408 written when a request head does not arrive in time (hyper would close
/// without a word).
const TIMEOUT_REPLY: &[u8] = b"HTTP/1.1 408 Request Timeout\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Length: 34\r\n\
Cache-Control: no-store\r\nConnection: close\r\n\r\n\
request head not received in time\n";

/// How a connection ended.
#[derive(Debug)]
enum End {
    /// hyper finished: the client closed, or keep-alive ended, or a malformed request
    /// was answered (400, 431); the error is logged with the end.
    Done(#[allow(dead_code)] Result<(), hyper::Error>),
    /// Its deadline passed in this phase.
    Expired(Phase),
    Shed,
    Stopped,
}

/// Serve the connection `stream` until it ends.
pub(super) async fn serve(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    ticket: Ticket,
    stop: CancellationToken,
) {
    let _ = stream.set_nodelay(true);
    let state = ticket.state.clone();
    let service = {
        let state = state.clone();
        hyper::service::service_fn(move |req| respond(router.clone(), state.clone(), peer, req))
    };
    let mut conn = http1::Builder::new()
        .max_buf_size(MAX_BUF)
        .max_header_size(MAX_HEAD)
        .serve_connection(TokioIo::new(stream), service);
    let mut stop_by: Option<Instant> = None;
    let end = loop {
        let due = deadline(state.phase());
        let wake = stop_by.map_or(due, |s| s.min(due));
        tokio::select! {
            done = std::future::poll_fn(|cx| conn.poll_without_shutdown(cx)) => {
                break End::Done(done);
            }
            _ = state.shed.cancelled() => break End::Shed,
            _ = stop.cancelled(), if stop_by.is_none() => {
                // Keep-alive off: a response in progress is finished, then it closes.
                Pin::new(&mut conn).graceful_shutdown();
                stop_by = Some(Instant::now() + STOP_GRACE);
            }
            _ = tokio::time::sleep_until(wake.into()) => {
                let now = Instant::now();
                if stop_by.is_some_and(|s| now >= s) {
                    break End::Stopped;
                }
                let phase = state.phase();
                if now >= deadline(phase) {
                    break End::Expired(phase);
                }
            }
        }
    };
    tracing::debug!(%peer, ?end, "http connection ended");
    match end {
        End::Done(_) => finish(conn.into_parts().io.into_inner(), None).await,
        End::Expired(Phase::Waiting { served, .. }) => {
            let parts = conn.into_parts();
            // An idle keep-alive connection is closed without a word: a 408 there
            // could be read as the answer to the client's next request.
            let begun = !parts.read_buf.is_empty() || !served;
            finish(parts.io.into_inner(), begun.then_some(TIMEOUT_REPLY)).await;
        }
        // A response that cannot be written, a shed connection, shutdown: close now.
        End::Expired(Phase::InRequest { .. }) | End::Shed | End::Stopped => {}
    }
}

/// Answer one request through the router, marking the connection in a request until
/// the response body has been written (or dropped).
fn respond(
    router: Router,
    state: Arc<ConnState>,
    peer: SocketAddr,
    req: hyper::Request<Incoming>,
) -> Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>> {
    state.request_began();
    let guard = RequestGuard(state);
    Box::pin(async move {
        let (method, path) = (req.method().clone(), req.uri().path().to_owned());
        let mut req = req.map(Body::new);
        req.extensions_mut().insert(super::Peer(peer));
        let response = match tokio::time::timeout(RESPONSE_TIMEOUT, router.oneshot(req)).await {
            Ok(Ok(response)) => response,
            Ok(Err(never)) => match never {},
            Err(_) => super::text(
                hyper::StatusCode::SERVICE_UNAVAILABLE,
                format!("no answer within {RESPONSE_TIMEOUT:?}\n"),
            ),
        };
        tracing::debug!(%peer, %method, path, status = response.status().as_u16(), "http request");
        Ok(response.map(|body| {
            // The guard goes with the body, which hyper drops once it is written.
            Body::new(body.map_frame(move |frame| {
                let _ = &guard;
                frame
            }))
        }))
    })
}

/// Marks the end of a request when dropped.
struct RequestGuard(Arc<ConnState>);

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// When the connection's current phase runs out.
fn deadline(phase: Phase) -> Instant {
    match phase {
        Phase::Waiting { since, .. } => since + HEAD_TIMEOUT,
        Phase::InRequest { since } => since + RESPONSE_TIMEOUT + WRITE_TIMEOUT,
    }
}

/// Write `reply` if any, end the sending side, then read and drop what still arrives
/// (within [`LINGER`] and [`LINGER_BYTES`]) before closing.
async fn finish(mut stream: TcpStream, reply: Option<&[u8]>) {
    if let Some(reply) = reply {
        let written = tokio::time::timeout(REPLY_WRITE, stream.write_all(reply)).await;
        if !matches!(written, Ok(Ok(()))) {
            return;
        }
    }
    if !matches!(
        tokio::time::timeout(REPLY_WRITE, stream.shutdown()).await,
        Ok(Ok(()))
    ) {
        return;
    }
    let drain = async {
        let mut sink = [0u8; 8192];
        let mut total = 0;
        while total < LINGER_BYTES {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => total += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_timeout_reply_says_its_length() {
        let text = std::str::from_utf8(TIMEOUT_REPLY).unwrap_or_default();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
    }
}
