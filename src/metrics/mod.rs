//! The metrics listener (`--metrics ADDR`): a small HTTP/1.1 responder with three
//! routes. `GET /metrics` is the Prometheus exposition of [`Engine::snapshot`] (the
//! same figures as `stats` and `stats-tube`); `GET /healthz` is 200 while the process
//! runs; `GET /readyz` is 200 while the store answers and 503 with the reason while it
//! does not. Other paths are 404, other methods 405.
//!
//! Why hand-written rather than hyper: three fixed routes, GET only, one response per
//! connection. Reading one bounded request head and writing one response is a page of
//! code; hyper would bring hyper, hyper-util, http-body-util and their trees into a
//! server that otherwise speaks no HTTP.
//!
//! Invariants (it shares the one-thread runtime with the beanstalk listener, so it must
//! never hold the thread or grow without bound):
//! - nothing here blocks: sockets are tokio's, and a scrape's store calls are the
//!   store's own async calls, bounded by its timeouts and by [`SCRAPE_TIMEOUT`];
//! - a request head is at most [`MAX_HEAD`] bytes and must arrive within
//!   [`READ_TIMEOUT`]; a body is never read;
//! - at most [`MAX_CONNECTIONS`] are served at once (more are closed at once);
//! - every response carries `Connection: close` and ends the connection.

pub mod exposition;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::cluster::Cluster;
use crate::engine::Engine;

/// Whose figures the listener serves.
#[derive(Clone, Debug)]
pub enum Source {
    /// One engine for the process's life (memory, `-b`, Redis shared mode).
    Engine(Arc<Engine>),
    /// Redis leader mode: the engine of this instance's leadership, while it leads; a
    /// standby has no figures of its own (its clients are the leader's).
    Cluster(Arc<Cluster>),
}

impl Source {
    fn engine(&self) -> Option<Arc<Engine>> {
        match self {
            Source::Engine(e) => Some(e.clone()),
            Source::Cluster(c) => c.engine(),
        }
    }
}

/// The largest request head (request line and headers) accepted; longer ones get 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing a response may take.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Upper bound of one `/metrics` scrape (the store's own calls time out sooner; this
/// covers many tubes on a slow store).
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound of one `/readyz` check.
const READY_TIMEOUT: Duration = Duration::from_secs(2);
/// Metrics connections served at once.
pub const MAX_CONNECTIONS: usize = 64;
/// After a response, input still arriving (an unread body, the rest of an oversized
/// head) is read and dropped for at most this long and this much, so that closing with
/// unread data (which resets the connection) does not destroy the response in flight.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 256 * 1024;

/// The metrics listener could not start; the message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error(
        "cannot serve metrics on {addr}: {cause} (is another program on that port? choose another with --metrics)"
    )]
    Bind {
        addr: SocketAddr,
        // Not a `source`: the message already names it, and a chain would repeat it.
        cause: std::io::Error,
    },
}

/// A bound metrics listener.
#[derive(Debug)]
pub struct MetricsListener(TcpListener);

impl MetricsListener {
    /// Bind `addr` (call inside the runtime, before dropping privileges).
    pub fn bind(addr: SocketAddr) -> Result<MetricsListener, MetricsError> {
        crate::server::listen::bind_tcp(addr, 128)
            .map(MetricsListener)
            .map_err(|cause| MetricsError::Bind { addr, cause })
    }

    /// What was actually bound (the port when 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// Serve metrics requests until `stop` is cancelled.
pub async fn serve(source: Source, listener: MetricsListener, stop: CancellationToken) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            a = listener.0.accept() => a,
            _ = stop.cancelled() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(err) => {
                tracing::warn!(%err, "metrics: accept failed; retrying in 50 ms");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            tracing::warn!(
                %peer,
                limit = MAX_CONNECTIONS,
                "metrics: too many connections; closing a new one"
            );
            continue;
        };
        let (source, stop) = (source.clone(), stop.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = handle(&source, stream, peer) => {}
                _ = stop.cancelled() => {}
            }
            drop(permit);
        });
    }
}

/// Why a request head could not be read.
#[derive(Debug)]
enum HeadError {
    TooLarge,
    Malformed,
    /// The client went away or the socket failed: nothing to answer.
    Gone,
}

/// The parts of a request that decide the response.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    method: String,
    /// Without the query string.
    path: String,
}

/// One response, always with `Connection: close`.
struct Response {
    status: u16,
    content_type: &'static str,
    body: String,
}

impl Response {
    fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            503 => "Service Unavailable",
            _ => "",
        };
        let allow = if self.status == 405 {
            "Allow: GET\r\n"
        } else {
            ""
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        out.extend_from_slice(self.body.as_bytes());
        out
    }
}

async fn handle(source: &Source, mut stream: TcpStream, peer: SocketAddr) {
    let head = tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await;
    let response = match head {
        Ok(Ok(req)) => {
            let response = match source.engine() {
                Some(engine) => route(&engine, &req).await,
                None => standby(source, &req).await,
            };
            tracing::debug!(%peer, method = %req.method, path = %req.path, status = response.status, "metrics request");
            response
        }
        Ok(Err(HeadError::Gone)) => return,
        Ok(Err(err)) => {
            tracing::debug!(%peer, ?err, "metrics: refused a request");
            match err {
                HeadError::TooLarge => {
                    Response::text(431, format!("request head over {MAX_HEAD} bytes\n"))
                }
                _ => Response::text(400, "malformed request\n"),
            }
        }
        Err(_) => {
            tracing::debug!(%peer, "metrics: request head not received in time");
            Response::text(408, "request head not received in time\n")
        }
    };
    let write = async {
        stream.write_all(&response.encode()).await?;
        stream.shutdown().await
    };
    if matches!(tokio::time::timeout(WRITE_TIMEOUT, write).await, Ok(Ok(()))) {
        linger(&mut stream).await;
    }
}

/// Read and drop input until the client closes, within [`LINGER`] and [`LINGER_BYTES`].
async fn linger(stream: &mut TcpStream) {
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

/// Read up to the end of the request head (an empty line), at most [`MAX_HEAD`] bytes.
async fn read_head(stream: &mut TcpStream) -> Result<Request, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await.map_err(|_| HeadError::Gone)?;
        if n == 0 {
            return Err(if buf.is_empty() {
                HeadError::Gone
            } else {
                HeadError::Malformed
            });
        }
        // Search only where a terminator could newly appear.
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find_head_end(&buf[from..]) {
            return parse_head(&buf[..from + end]);
        }
        if buf.len() > MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
    }
}

/// The offset just past the empty line that ends a head (CRLF CRLF, or bare LF LF as
/// lenient servers accept).
fn find_head_end(buf: &[u8]) -> Option<usize> {
    let crlf = buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4);
    let lf = buf.windows(2).position(|w| w == b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The request line of a complete head: `METHOD SP TARGET SP HTTP/1.x`.
fn parse_head(head: &[u8]) -> Result<Request, HeadError> {
    if head.len() > MAX_HEAD {
        return Err(HeadError::TooLarge);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = std::str::from_utf8(line).map_err(|_| HeadError::Malformed)?;
    let mut parts = line.trim_end_matches('\r').split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed);
    };
    if method.is_empty() || !target.starts_with('/') || !version.starts_with("HTTP/1.") {
        return Err(HeadError::Malformed);
    }
    let path = target.split('?').next().unwrap_or(target);
    Ok(Request {
        method: method.to_string(),
        path: path.to_string(),
    })
}

/// An instance of leader mode that does not lead: alive, with no figures of its own;
/// ready while it can relay its clients to the leader ([`Cluster::readiness`]).
async fn standby(source: &Source, req: &Request) -> Response {
    if req.method != "GET" {
        return Response::text(405, "only GET is served\n");
    }
    match req.path.as_str() {
        "/healthz" => Response::text(200, "ok\n"),
        "/readyz" => match source {
            Source::Cluster(cluster) => {
                let readiness = cluster.readiness().await;
                let status = if readiness.is_ready() { 200 } else { 503 };
                Response::text(status, format!("{readiness}\n"))
            }
            Source::Engine(_) => Response::text(200, "ready\n"),
        },
        "/metrics" => Response::text(
            503,
            "standby: this instance relays its clients to the leader; scrape the leader\n",
        ),
        _ => Response::text(404, "not found: try /metrics, /healthz or /readyz\n"),
    }
}

async fn route(engine: &Engine, req: &Request) -> Response {
    if req.method != "GET" {
        return Response::text(405, "only GET is served\n");
    }
    match req.path.as_str() {
        "/metrics" => match tokio::time::timeout(SCRAPE_TIMEOUT, engine.snapshot()).await {
            Ok(Ok(snap)) => Response {
                status: 200,
                content_type: exposition::CONTENT_TYPE,
                body: exposition::render(&snap),
            },
            Ok(Err(err)) => {
                tracing::warn!(%err, "metrics: the store did not answer a scrape; answered 503");
                Response::text(503, format!("store unavailable: {err}\n"))
            }
            Err(_) => Response::text(
                503,
                format!("store did not answer within {SCRAPE_TIMEOUT:?}\n"),
            ),
        },
        "/healthz" => Response::text(200, "ok\n"),
        "/readyz" => match tokio::time::timeout(READY_TIMEOUT, engine.store_ready()).await {
            Ok(Ok(())) => Response::text(200, "ready\n"),
            Ok(Err(err)) => Response::text(503, format!("not ready: {err}\n")),
            Err(_) => Response::text(
                503,
                format!(
                    "not ready: the {} store did not answer within {READY_TIMEOUT:?}\n",
                    engine.store_name()
                ),
            ),
        },
        _ => Response::text(404, "not found: try /metrics, /healthz or /readyz\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_line_is_parsed_and_the_query_dropped() {
        let r = parse_head(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(
            r,
            Request {
                method: "GET".into(),
                path: "/metrics".into()
            }
        );
        assert!(matches!(
            parse_head(b"GET  /metrics HTTP/1.1\r\n\r\n"),
            Err(HeadError::Malformed)
        ));
        assert!(matches!(
            parse_head(b"GET /metrics SPDY/3\r\n\r\n"),
            Err(HeadError::Malformed)
        ));
    }

    #[test]
    fn head_end_is_found_with_crlf_or_bare_lf() {
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\n\r\nbody"), Some(18));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\n\n"), Some(16));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }

    #[test]
    fn responses_close_and_say_their_length() {
        let bytes = Response::text(405, "no\n").encode();
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
        assert!(text.contains("Allow: GET\r\n"));
        assert!(text.contains("Connection: close\r\n"));
        assert!(text.ends_with("Content-Length: 3\r\nAllow: GET\r\nCache-Control: no-store\r\nConnection: close\r\n\r\nno\n"));
    }
}
