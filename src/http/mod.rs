//! The HTTP listener (`--http ADDR`, also `--metrics ADDR`): axum's router over hyper's
//! HTTP/1.1. Routes: `GET /metrics` (the Prometheus exposition of [`Engine::snapshot`],
//! see [`metrics`]), `GET /healthz` and `GET /readyz` (see [`probes`]), the operator API
//! under `/api/v1` (see [`api`], docs/API.md), behind its access control ([`auth`]),
//! with its live events, and the web console under `/console/` (see [`console`],
//! docs/CONSOLE.md), where `GET /` redirects. Other paths are 404, other methods 405
//! (under `/api/v1`, as the API's JSON error). Every response carries the console's
//! security headers (CSP, nosniff).
//!
//! Invariants (it shares the one-thread runtime with the beanstalk listener, so it must
//! never hold the thread or grow without bound):
//! - nothing here blocks the runtime: sockets are tokio's, a scrape's store calls are
//!   the store's own async calls, and its rendering runs on the blocking pool;
//! - at most [`MAX_CONNECTIONS`] connections are open; a new one is always admitted,
//!   shedding the oldest one not in a request (see [`conns`]), so probes are answered
//!   whatever other connections do;
//! - every connection has deadlines: request head, response, write (see
//!   [`connection`]); a request body is read only by the API's routes that take one
//!   (at most [`api::MAX_API_BODY`] bytes), a standby's forwarder (the same bound) and
//!   the console's login (at most [`console::MAX_LOGIN`]); over the bound: 413, as
//!   the API's JSON error;
//! - on shutdown the listener stops accepting, and connections end after their
//!   response in progress (within a second).

pub mod api;
pub mod auth;
pub mod connection;
mod conns;
pub mod console;
pub mod exposition;
pub mod history;
pub mod metrics;
pub mod probes;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request as HttpRequest};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::cluster::Cluster;
use crate::engine::Engine;
use crate::redis::placement::Placements;

/// Connections open at once; beyond, the oldest idle or slow one is closed.
pub const MAX_CONNECTIONS: usize = 256;

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

/// How the listener serves.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// Tubes with per-tube series in `/metrics` (`--metrics-tubes`): the first by name.
    pub metrics_tubes: usize,
    /// The operator API's own settings (read auth, read-only).
    pub access: auth::Access,
    /// Who may connect to the beanstalk port (its roles and token check are the
    /// API's too), and its figures.
    pub security: Arc<crate::server::Security>,
    /// The beanstalk listeners (their figures).
    pub ports: Vec<Arc<crate::server::listen::Port>>,
    /// How this process keeps its jobs (the API's `/whoami` says it).
    pub mode: api::types::Mode,
    /// Where the process's Redis namespaces live, for `/metrics` (the value its Redis
    /// connectors record into; empty without Redis).
    pub placements: Arc<Placements>,
    /// The process's tube policies and schedules (the API's `/policies`, `/schedules`).
    pub books: crate::persist::books::Books,
}

/// The address of the client of an HTTP request (set by [`connection`]), for the log
/// of each change and the token's guessing bound.
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

/// The HTTP listener could not start; the message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error(
        "cannot serve HTTP on {addr}: {cause} (is another program on that port? choose another with --http)"
    )]
    Bind {
        addr: SocketAddr,
        // Not a `source`: the message already names it, and a chain would repeat it.
        cause: std::io::Error,
    },
}

/// A bound HTTP listener.
#[derive(Debug)]
pub struct HttpListener(TcpListener);

impl HttpListener {
    /// Bind `addr` (call inside the runtime, before dropping privileges).
    pub fn bind(addr: SocketAddr) -> Result<HttpListener, HttpError> {
        crate::server::listen::bind_tcp(addr, 128)
            .map(HttpListener)
            .map_err(|cause| HttpError::Bind { addr, cause })
    }

    /// What was actually bound (the port when 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

/// What the routes share.
struct App {
    source: Source,
    mode: api::types::Mode,
    scrapes: Arc<metrics::Scrapes>,
    auth: Arc<auth::Auth>,
    security: Arc<crate::server::Security>,
    ports: Vec<Arc<crate::server::listen::Port>>,
    events: Arc<api::Events>,
    history: Arc<history::Recorder>,
    /// The tube policies (their routes: `api::policies`).
    policies: Arc<crate::persist::policies::PolicyBook>,
    /// The schedules (their routes: `api::schedules`).
    schedules: Arc<crate::persist::schedules::ScheduleBook>,
}

/// Every route: `/metrics`, the probes and `/` (GET only), the API under `/api/v1`
/// (its own methods; where each request is served decided first, then its access
/// checks, then a standby forwards), and the console.
fn router(source: Source, config: &HttpConfig, stop: &CancellationToken) -> Router {
    let app = Arc::new(App {
        events: api::Events::start(source.clone(), stop.clone()),
        history: history::Recorder::start(source.clone(), stop.clone()),
        source,
        mode: config.mode,
        scrapes: metrics::Scrapes::new(config.metrics_tubes, config.placements.clone()),
        auth: Arc::new(auth::Auth::new(
            &config.access,
            config.security.control.clone(),
        )),
        security: config.security.clone(),
        ports: config.ports.clone(),
        policies: config.books.policies.clone(),
        schedules: config.books.schedules.clone(),
    });
    let plain = Router::new()
        .route("/", get(|| async { Redirect::to("/console/") }))
        .route("/metrics", get(metrics::scrape))
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz))
        .fallback(not_found)
        .layer(middleware::from_fn(only_get));
    // The last layer added runs first.
    let api = api::router()
        .layer(middleware::from_fn(api::forward::forward))
        .layer(middleware::from_fn_with_state(
            app.auth.clone(),
            auth::guard,
        ))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            api::forward::locate,
        ))
        .layer(DefaultBodyLimit::max(api::MAX_API_BODY));
    Router::new()
        .nest(api::API_PREFIX, api)
        .merge(console::router())
        .merge(plain)
        .layer(middleware::map_response(console::security_headers))
        .with_state(app)
}

/// Serve HTTP requests until `stop` is cancelled, then let the connections finish.
pub async fn serve(
    source: Source,
    listener: HttpListener,
    config: HttpConfig,
    stop: CancellationToken,
) {
    let router = router(source, &config, &stop);
    let conns = conns::Conns::new(MAX_CONNECTIONS);
    let mut tasks = JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.0.accept() => a,
            _ = stop.cancelled() => break,
        };
        while tasks.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(err) => {
                tracing::warn!(%err, "http: accept failed; retrying in 50 ms");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let ticket = conns.admit();
        tasks.spawn(connection::serve(
            stream,
            peer,
            router.clone(),
            ticket,
            stop.clone(),
        ));
    }
    drop(listener);
    while tasks.join_next().await.is_some() {}
}

/// A plain-text response (never cached).
fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body.into(),
    )
        .into_response()
}

/// Every route is GET only (HEAD included: a HEAD of `/metrics` would cost a scrape).
async fn only_get(req: HttpRequest, next: Next) -> Response {
    if req.method() == Method::GET {
        return next.run(req).await;
    }
    let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "only GET is served\n");
    response
        .headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET"));
    response
}

async fn not_found() -> Response {
    text(
        StatusCode::NOT_FOUND,
        "not found: try /metrics, /healthz, /readyz, /api/v1 or /console/\n",
    )
}
