//! A leader-mode standby's operator API: every `/api/v1` request but `/whoami` (which
//! says what this instance is) is forwarded to the leader's HTTP listener, whose
//! address the leader publishes in Redis beside its lease (`crate::cluster::lease`):
//! method, path, query, headers (`Authorization` and `Origin` included: the leader
//! decides access, comparing `Origin` with the `Host` the client sent, which is kept)
//! and body, over a plain TCP connection with hyper's HTTP/1 client, one per request.
//! The leader's answer is streamed back as it comes, so the event stream
//! (`/api/v1/events`, a response that lasts seconds) reaches a console opened on a
//! standby live, event by event.
//!
//! A console session of the standby (its cookie: an HMAC under the standby's own key,
//! which the leader cannot check) travels as the standby's admin token instead, only
//! when the standby itself accepts the session (same origin, see
//! `http::console::Session`); the leader then checks that token as for any client.
//!
//! Invariants: a forwarded request body is at most [`MAX_API_BODY`] bytes (read before
//! connecting); connecting takes at most [`CONNECT_TIMEOUT`] and the leader's response
//! head at most [`FORWARD_TIMEOUT`], below the listener's own response deadline; the
//! body then streams under the listener's deadlines (`http::connection`), and the
//! connection to the leader ends when the body does or is dropped; when the standby
//! cannot forward it answers `503 unavailable` with the reason, never hangs.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::access::{bearer, peer_ip};
use super::{API_PREFIX, ApiError, MAX_API_BODY};
use crate::http::console::limit::Limited;
use crate::http::{App, Source};

/// The longest a connection to the leader's API may take to open.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The longest the leader may take to send the head of its answer to a forwarded
/// request (under the listener's own response deadline, so the client gets this
/// instance's 503, not a timeout). The body then streams: an event stream lasts longer.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(9);

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

/// Before every API route (and its access checks): a standby forwards the request.
pub(in crate::http) async fn standby(
    State(app): State<Arc<App>>,
    req: Request,
    next: Next,
) -> Response {
    let Source::Cluster(cluster) = &app.source else {
        return next.run(req).await;
    };
    if cluster.engine().is_some() || req.uri().path() == "/whoami" {
        return next.run(req).await;
    }
    let addr = match cluster.leader_api() {
        Ok(addr) => addr,
        Err(why) => {
            return ApiError::unavailable(format!(
                "this instance is a standby and cannot forward to the leader: {why}"
            ))
            .into_response();
        }
    };
    if let Err(limited) = count_token(&app, &req) {
        return limited.into_response();
    }
    let (parts, body) = req.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_API_BODY).await else {
        return ApiError::bad_request(format!(
            "the request body is larger than {MAX_API_BODY} bytes, or was cut short"
        ))
        .into_response();
    };
    let mut req = Request::from_parts(parts, body);
    session_as_token(&app, req.headers_mut());
    match forward(&addr, req).await {
        Ok(response) => response,
        Err(err) => ApiError::unavailable(format!(
            "this instance is a standby and cannot reach the leader's API at {addr}: {err}"
        ))
        .into_response(),
    }
}

/// The guessing bound holds here too (`http::console::limit`): the leader sees every
/// forwarded request come from this standby, so the client's address is known only
/// here. A limited client is refused; a token this standby's own does not match is
/// counted, and forwarded (the leader decides).
fn count_token(app: &App, req: &Request) -> Result<(), Limited> {
    let Some(given) = bearer(req.headers()) else {
        return Ok(());
    };
    let peer = peer_ip(req);
    app.login_limit.check(peer)?;
    if app.access.token.as_ref().is_some_and(|t| !t.matches(given)) {
        app.login_limit.failed(peer);
    }
    Ok(())
}

/// A request that this standby's console session authorizes (and that carries no
/// token of its own) goes on with the standby's token instead of the cookie, which
/// only this process can check.
fn session_as_token(app: &App, headers: &mut HeaderMap) {
    let Some(token) = &app.access.token else {
        return;
    };
    if headers.contains_key(header::AUTHORIZATION) || !app.session.accepts(headers) {
        return;
    }
    let Ok(bearer) = HeaderValue::from_str(&format!("Bearer {}", token.expose_str())) else {
        return;
    };
    headers.remove(header::COOKIE);
    headers.insert(header::AUTHORIZATION, bearer);
}

/// Send `req` to `addr` and bring back its answer, the body streamed as it arrives.
async fn forward(addr: &str, req: Request<Bytes>) -> Result<Response, ForwardError> {
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
