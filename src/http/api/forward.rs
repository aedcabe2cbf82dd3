//! Where an `/api/v1` request is answered, decided once ([`locate`], before the access
//! guard): by this instance's engine, or — on a leader-mode standby — by the leader's
//! HTTP listener, whose address the leader publishes in Redis beside its lease
//! (`crate::cluster::lease`); and the forwarding itself ([`forward`], after the guard):
//! method, path, query, headers (`Authorization` and `Origin` included: the leader
//! decides access, comparing `Origin` with the `Host` the client sent, which is kept)
//! and body, over a plain TCP connection with hyper's HTTP/1 client, one per request.
//! The leader's answer is streamed back as it comes, so the event stream
//! (`/api/v1/events`, a response that lasts seconds) reaches a console opened on a
//! standby live, event by event. `/whoami` is answered by the standby itself (it says
//! what this instance is).
//!
//! Invariants: a forwarded request body is at most [`MAX_API_BODY`] bytes (read before
//! connecting; over it, 413 `payload_too_large`); connecting takes at most
//! [`CONNECT_TIMEOUT`] and the leader's response head at most [`FORWARD_TIMEOUT`],
//! below the listener's own response deadline; the body then streams under the
//! listener's deadlines (`http::connection`), and the connection to the leader ends
//! when the body does or is dropped; when the standby cannot forward it answers `503
//! unavailable` with the reason, never hangs.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderName, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::error::ApiError;
use super::{API_PREFIX, MAX_API_BODY};
use crate::engine::Engine;
use crate::http::{App, Source};

/// The longest a connection to the leader's API may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest the leader may take to send the head of its answer to a forwarded
/// request (under the listener's own response deadline, so the client gets this
/// instance's 503, not a timeout). The body then streams: an event stream lasts longer.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(9);

/// Where a request is answered (a request extension, set by [`locate`]).
#[derive(Clone, Debug)]
pub enum Served {
    /// By this instance's engine (it serves, or leads).
    Here(Arc<Engine>),
    /// By the leader's API at this address (this instance is a standby).
    Leader(String),
    /// By this standby itself, which has no engine (`/whoami`).
    Standby,
}

/// Why a request could not be forwarded.
#[derive(Debug, thiserror::Error)]
enum ForwardError {
    #[error("cannot connect within {CONNECT_TIMEOUT:?}")]
    ConnectTimeout,
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("no answer within {FORWARD_TIMEOUT:?}")]
    Timeout,
    #[error("{0}")]
    Http(#[from] hyper::Error),
    #[error("cannot build the request: {0}")]
    Request(#[from] axum::http::Error),
}

/// Headers that belong to one connection, not to the request or response.
const HOP_BY_HOP: [HeaderName; 5] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::TE,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
];

/// Before everything else of the API: where this request is answered. A standby that
/// knows no leader's API answers 503 at once.
pub(in crate::http) async fn locate(
    State(app): State<Arc<App>>,
    mut req: Request,
    next: Next,
) -> Response {
    let served = match &app.source {
        Source::Engine(engine) => Served::Here(engine.clone()),
        Source::Cluster(cluster) => match cluster.engine() {
            Some(engine) => Served::Here(engine),
            None if req.uri().path() == "/whoami" => Served::Standby,
            None => match cluster.leader_api() {
                Ok(addr) => Served::Leader(addr),
                Err(why) => {
                    return ApiError::unavailable(format!(
                        "this instance is a standby and cannot forward to the leader: {why}"
                    ))
                    .into_response();
                }
            },
        },
    };
    req.extensions_mut().insert(served);
    next.run(req).await
}

/// After the access guard: a request served by the leader is sent there.
pub(in crate::http) async fn forward(req: Request, next: Next) -> Response {
    let Some(Served::Leader(addr)) = req.extensions().get::<Served>().cloned() else {
        return next.run(req).await;
    };
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, MAX_API_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => {
            return ApiError::too_large(MAX_API_BODY).into_response();
        }
        Err(e) => {
            return ApiError::bad_request(format!("the request body was cut short: {e}"))
                .into_response();
        }
    };
    match send(&addr, Request::from_parts(parts, body)).await {
        Ok(response) => response,
        Err(err) => ApiError::unavailable(format!(
            "this instance is a standby and cannot reach the leader's API at {addr}: {err}"
        ))
        .into_response(),
    }
}

/// Send `req` to `addr` and bring back its answer, the body streamed as it arrives.
async fn send(addr: &str, req: Request<Bytes>) -> Result<Response, ForwardError> {
    let (parts, body) = req.into_parts();
    // Nested under /api/v1, the request's own URI lost its prefix.
    let target = format!(
        "{API_PREFIX}{}",
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut out = hyper::Request::builder()
        .method(parts.method)
        .uri(target)
        .body(Full::new(body))?;
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(name) {
            out.headers_mut().append(name.clone(), value.clone());
        }
    }
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| ForwardError::ConnectTimeout)?
        .map_err(ForwardError::Connect)?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = tokio::time::timeout(
        FORWARD_TIMEOUT,
        hyper::client::conn::http1::handshake(TokioIo::new(stream)),
    )
    .await
    .map_err(|_| ForwardError::Timeout)??;
    // The connection runs beside the answer; aborted when the body is done or dropped
    // (the client left, or the listener's deadline passed).
    let conn = AbortOnDrop(tokio::spawn(conn));
    let answer = tokio::time::timeout(FORWARD_TIMEOUT, sender.send_request(out))
        .await
        .map_err(|_| ForwardError::Timeout)??;
    let (mut head, body) = answer.into_parts();
    for name in &HOP_BY_HOP {
        head.headers.remove(name);
    }
    let body = body.map_frame(move |frame| {
        let _ = &conn;
        frame
    });
    Ok(Response::from_parts(head, Body::new(body)))
}

/// A task aborted when this is dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
