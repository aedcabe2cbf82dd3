//! The tube policies' routes (docs/API.md, *Policies*; docs/POLICIES.md): list them,
//! set one for a tube pattern (`name`, `prefix*` or `*`), remove one. Answered by any
//! instance from the process's [`PolicyBook`](crate::persist::policies::PolicyBook),
//! which persists a change before it applies it (a leader-mode standby forwards to the
//! leader like every route; both read the same Redis hash).

use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;

use super::extract::{ApiJson, PatternPath};
use super::types::{PolicyList, PolicyRemoved};
use super::{ApiError, ApiResult, ok};
use crate::http::{App, Peer};
use crate::persist::policies::ChangeError;
use crate::store::policy::{Policy, Rule};

pub(super) async fn list(State(app): State<Arc<App>>) -> ApiResult {
    ok(
        StatusCode::OK,
        PolicyList {
            policies: app.policies.current().rules(),
            persisted: app.policies.persisted(),
        },
    )
}

pub(super) async fn set(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    PatternPath(tubes): PatternPath,
    ApiJson(policy): ApiJson<Policy>,
) -> ApiResult {
    match app.policies.set(&tubes, policy).await {
        Ok(_) => {
            tracing::info!(action = "policy", %tubes, ?policy, peer = %peer.0, "api: tube policy set");
            ok(StatusCode::OK, Rule { tubes, policy })
        }
        Err(ChangeError::Refused(e)) => Err(ApiError::bad_request(e.to_string())),
        Err(ChangeError::Home(e)) => Err(ApiError::unavailable(e.to_string())),
    }
}

pub(super) async fn remove(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    PatternPath(tubes): PatternPath,
) -> ApiResult {
    match app.policies.remove(&tubes).await {
        Ok(true) => {
            tracing::info!(action = "policy-remove", %tubes, peer = %peer.0, "api: tube policy removed");
            ok(StatusCode::OK, PolicyRemoved { removed: true })
        }
        Ok(false) => Err(ApiError::not_found(format!("no policy for {tubes}"))),
        Err(e) => Err(ApiError::unavailable(e.to_string())),
    }
}
