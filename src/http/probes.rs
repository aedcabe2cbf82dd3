//! `GET /healthz` and `GET /readyz`, for orchestrators.
//!
//! `/healthz` is 200 while the process runs: it asks nothing of the store, so it
//! answers as soon as its connection is served (see [`super::conns`] for why that is
//! always soon). `/readyz` is 200 while the store answers and 503 with the reason while
//! it does not, within [`READY_TIMEOUT`]; a standby (Redis leader mode) is ready while
//! it can relay to a leader that answers (its check may take about 2 s: a connect and a
//! greeting, each bounded by 1 s).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;

use super::{App, Source, text};
use crate::cluster::Cluster;
use crate::engine::Engine;

/// Upper bound of one `/readyz` check.
pub const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// `GET /healthz`.
pub(super) async fn healthz() -> Response {
    text(StatusCode::OK, "ok\n")
}

/// `GET /readyz`.
pub(super) async fn readyz(State(app): State<Arc<App>>) -> Response {
    match &app.source {
        Source::Engine(engine) => engine_ready(engine).await,
        Source::Cluster(cluster) => match cluster.engine() {
            Some(engine) => engine_ready(&engine).await,
            None => standby_ready(cluster).await,
        },
    }
}

/// An instance that serves its clients from `engine`: ready while its store answers.
async fn engine_ready(engine: &Engine) -> Response {
    match tokio::time::timeout(READY_TIMEOUT, engine.store_ready()).await {
        Ok(Ok(())) => text(StatusCode::OK, "ready\n"),
        Ok(Err(err)) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {err}\n"),
        ),
        Err(_) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: the {} store did not answer within {READY_TIMEOUT:?}\n",
                engine.store_name()
            ),
        ),
    }
}

/// A standby (Redis leader mode): ready while it can relay its clients to a leader
/// that answers (see `cluster::standby`); else 503 with the reason.
async fn standby_ready(cluster: &Cluster) -> Response {
    let readiness = cluster.readiness().await;
    let status = if readiness.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    text(status, format!("{readiness}\n"))
}
