//! The API's changes (token required, see `access.rs`): put, delete, move, priority,
//! delay, bury, kick, pause, and bulk changes by filter. Each is logged at info with
//! what it did, to which jobs (or how many) and from which peer; the answer is sent
//! once the change is durable (`-b`, leader mode).

use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use base64::Engine as _;
use bytes::Bytes;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::reads::{job_id, tube_name};
use super::{ApiError, ApiResult, JobJson, MAX_API_BODY, engine_of, ok, parse_state};
use crate::engine::admin::AdminPut;
use crate::engine::admin_bulk::{Bulk, BulkAction};
use crate::http::{App, Peer};
use crate::store::Edit;

fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, ApiError> {
    if body.len() > MAX_API_BODY {
        return Err(ApiError::bad_request("request body too large"));
    }
    let body: &[u8] = if body.is_empty() { b"{}" } else { body };
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(format!("JSON: {e}")))
}

#[derive(Deserialize)]
pub(super) struct PutReq {
    body: Option<String>,
    body_base64: Option<String>,
    pri: Option<u32>,
    delay: Option<u32>,
    ttr: Option<u32>,
}

pub(super) async fn put(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    Path(tube): Path<String>,
    body: Bytes,
) -> ApiResult {
    let engine = engine_of(&app)?;
    let req: PutReq = parse(&body)?;
    let body = match (req.body, req.body_base64) {
        (Some(b), None) => Bytes::from(b.into_bytes()),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map(Bytes::from)
            .map_err(|_| ApiError::bad_request("body_base64: not base64"))?,
        _ => return Err(ApiError::bad_request("give one of body or body_base64")),
    };
    let tube = tube_name(&tube)?;
    let id = engine
        .admin_put(AdminPut {
            tube: tube.clone(),
            body,
            pri: req.pri.unwrap_or(1024),
            delay: req.delay.unwrap_or(0),
            ttr: req.ttr.unwrap_or(60),
        })
        .await?;
    tracing::info!(action = "put", id, %tube, peer = %peer.0, "api: job put");
    ok(StatusCode::CREATED, json!({"id": id}))
}

pub(super) async fn delete(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    Path(id): Path<String>,
) -> ApiResult {
    let engine = engine_of(&app)?;
    let id = job_id(&id)?;
    engine.admin_delete(id).await?;
    tracing::info!(action = "delete", id, peer = %peer.0, "api: job deleted");
    ok(StatusCode::OK, json!({"deleted": id}))
}

/// One edit of one job, logged.
async fn edit(app: &App, peer: Peer, id: &str, edit: Edit) -> ApiResult {
    let engine = engine_of(app)?;
    let id = job_id(id)?;
    let job = engine.admin_edit(id, &edit).await?;
    tracing::info!(action = edit.name(), id, ?edit, tube = %job.stats.tube, peer = %peer.0, "api: job changed");
    ok(StatusCode::OK, JobJson::of(&job))
}

#[derive(Deserialize)]
pub(super) struct MoveReq {
    tube: String,
}

pub(super) async fn move_job(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let req: MoveReq = parse(&body)?;
    edit(&app, peer, &id, Edit::Move(tube_name(&req.tube)?)).await
}

#[derive(Deserialize)]
pub(super) struct PriReq {
    pri: u32,
}

pub(super) async fn pri(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let req: PriReq = parse(&body)?;
    edit(&app, peer, &id, Edit::Pri(req.pri)).await
}

#[derive(Deserialize)]
pub(super) struct DelayReq {
    delay: u32,
}

pub(super) async fn delay(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    Path(id): Path<String>,
    body: Bytes,
) -> ApiResult {
    let req: DelayReq = parse(&body)?;
    edit(&app, peer, &id, Edit::Delay(req.delay)).await
}

pub(super) async fn bury(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    Path(id): Path<String>,
) -> ApiResult {
    edit(&app, peer, &id, Edit::Bury).await
}

pub(super) async fn kick_job(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    Path(id): Path<String>,
) -> ApiResult {
    let engine = engine_of(&app)?;
    let id = job_id(&id)?;
    let job = engine.admin_kick_job(id).await?;
    tracing::info!(action = "kick", id, peer = %peer.0, "api: job kicked");
    ok(StatusCode::OK, JobJson::of(&job))
}

#[derive(Deserialize)]
pub(super) struct BoundReq {
    bound: u32,
}

pub(super) async fn kick_tube(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    Path(tube): Path<String>,
    body: Bytes,
) -> ApiResult {
    let engine = engine_of(&app)?;
    let req: BoundReq = parse(&body)?;
    let tube = tube_name(&tube)?;
    let n = engine.admin_kick(&tube, req.bound).await?;
    tracing::info!(action = "kick", %tube, count = n, peer = %peer.0, "api: tube kicked");
    ok(StatusCode::OK, json!({"kicked": n}))
}

pub(super) async fn pause(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    Path(tube): Path<String>,
    body: Bytes,
) -> ApiResult {
    let engine = engine_of(&app)?;
    let req: DelayReq = parse(&body)?;
    let tube = tube_name(&tube)?;
    engine.admin_pause(&tube, req.delay).await?;
    tracing::info!(action = "pause", %tube, secs = req.delay, peer = %peer.0, "api: tube paused");
    ok(StatusCode::OK, json!({"paused": req.delay}))
}

#[derive(Deserialize)]
pub(super) struct BulkReq {
    action: String,
    filter: BulkFilter,
    #[serde(default)]
    args: BulkArgs,
    #[serde(default)]
    dry_run: bool,
}

#[derive(Deserialize)]
pub(super) struct BulkFilter {
    tube: String,
    state: String,
    contains: Option<String>,
    limit: Option<usize>,
}

#[derive(Deserialize, Default)]
pub(super) struct BulkArgs {
    tube: Option<String>,
    pri: Option<u32>,
    delay: Option<u32>,
}

fn bulk_action(action: &str, args: &BulkArgs) -> Result<BulkAction, ApiError> {
    let missing = |what: &str| ApiError::bad_request(format!("{action} needs args.{what}"));
    Ok(match action {
        "move" => BulkAction::Edit(Edit::Move(tube_name(
            args.tube.as_deref().ok_or_else(|| missing("tube"))?,
        )?)),
        "pri" => BulkAction::Edit(Edit::Pri(args.pri.ok_or_else(|| missing("pri"))?)),
        "delay" => BulkAction::Edit(Edit::Delay(args.delay.ok_or_else(|| missing("delay"))?)),
        "bury" => BulkAction::Edit(Edit::Bury),
        "kick" => BulkAction::Kick,
        "delete" => BulkAction::Delete,
        other => {
            return Err(ApiError::bad_request(format!(
                "action {other:?}: expected move, pri, delay, bury, kick or delete"
            )));
        }
    })
}

pub(super) async fn bulk(
    State(app): State<Arc<App>>,
    Extension(peer): Extension<Peer>,
    body: Bytes,
) -> ApiResult {
    let engine = engine_of(&app)?;
    let req: BulkReq = parse(&body)?;
    let bulk = Bulk {
        action: bulk_action(&req.action, &req.args)?,
        tube: tube_name(&req.filter.tube)?,
        state: parse_state(&req.filter.state)?,
        contains: req.filter.contains.map(|c| Bytes::from(c.into_bytes())),
        limit: req
            .filter
            .limit
            .ok_or_else(|| ApiError::bad_request("filter.limit is required"))?,
        dry_run: req.dry_run,
    };
    let done = engine.admin_bulk(&bulk).await?;
    tracing::info!(
        action = req.action,
        tube = %bulk.tube,
        state = bulk.state.name(),
        dry_run = bulk.dry_run,
        matched = done.matched,
        changed = done.changed,
        peer = %peer.0,
        "api: bulk change"
    );
    ok(
        StatusCode::OK,
        json!({
            "matched": done.matched, "changed": done.changed,
            "scanned": done.scanned, "dry_run": bulk.dry_run,
        }),
    )
}
