//! The API's changes (token required, see `http::auth`): put, delete, move, priority,
//! delay, bury, kick (delete, delay and kick also by key), pause, and bulk changes by
//! filter. Each is logged
//! at info with what it did, to which jobs (or how many) and from which peer; the
//! answer is sent once the change is durable (`-b`, leader mode).

use axum::Extension;
use axum::http::StatusCode;
use base64::Engine as _;
use bytes::Bytes;

use super::error::{ApiError, ApiResult};
use super::extract::{ApiEngine, ApiJson, JobPath, KeyPath, TubePath, tube_name};
use super::types::{
    BulkArgs, BulkChange, BulkRequest, BulkResult, Created, Deleted, FlushTube, FlushedTube,
    KickTube, Kicked, MoveJob, Paused, PutJob, SetDelay, SetPri,
};
use super::{job_view, ok};
use crate::engine::KeyChange;
use crate::engine::admin_bulk::{Bulk, BulkAction};
use crate::http::Peer;
use crate::protocol::Put;
use crate::store::{Edit, JobId};

pub(super) async fn put(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    TubePath(tube): TubePath,
    ApiJson(req): ApiJson<PutJob>,
) -> ApiResult {
    let body = match (req.body, req.body_base64) {
        (Some(b), None) => Bytes::from(b.into_bytes()),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .map(Bytes::from)
            .map_err(|_| ApiError::bad_request("body_base64: not base64"))?,
        _ => return Err(ApiError::bad_request("give one of body or body_base64")),
    };
    let put = Put {
        pri: req.pri,
        delay: req.delay,
        ttr: req.ttr,
        body,
    };
    let id = engine.admin_put(tube.clone(), put).await?;
    tracing::info!(action = "put", id, %tube, peer = %peer.0, "api: job put");
    ok(StatusCode::CREATED, Created { id })
}

pub(super) async fn delete(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    JobPath(id): JobPath,
) -> ApiResult {
    engine.admin_delete(id).await?;
    tracing::info!(action = "delete", id, peer = %peer.0, "api: job deleted");
    ok(StatusCode::OK, Deleted { deleted: id })
}

/// `delete-key`: the key's job (unless reserved), opening its dedupe window.
pub(super) async fn delete_key(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    KeyPath(tube, key): KeyPath,
) -> ApiResult {
    let id = engine.admin_delete_key(&tube, &key).await?;
    tracing::info!(action = "delete", id, %tube, %key, peer = %peer.0, "api: job deleted by key");
    ok(StatusCode::OK, Deleted { deleted: id })
}

/// `kick-key`: the key's buried or delayed job made ready.
pub(super) async fn kick_key(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    KeyPath(tube, key): KeyPath,
) -> ApiResult {
    let job = engine
        .admin_key_change(&tube, &key, KeyChange::Kick)
        .await?;
    let id = job.stats.id;
    tracing::info!(action = "kick", id, %tube, %key, peer = %peer.0, "api: job kicked by key");
    ok(StatusCode::OK, job_view(&job))
}

/// `bury-key`: the key's ready or delayed job buried, its priority kept.
pub(super) async fn bury_key(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    KeyPath(tube, key): KeyPath,
) -> ApiResult {
    let job = engine
        .admin_key_change(&tube, &key, KeyChange::Bury)
        .await?;
    let id = job.stats.id;
    tracing::info!(action = "bury", id, %tube, %key, peer = %peer.0, "api: job buried by key");
    ok(StatusCode::OK, job_view(&job))
}

/// `retime-key`: the key's ready or delayed job due `delay` seconds from now.
pub(super) async fn delay_key(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    KeyPath(tube, key): KeyPath,
    ApiJson(req): ApiJson<SetDelay>,
) -> ApiResult {
    let change = KeyChange::Retime {
        delay_ms: u64::from(req.delay) * 1000,
    };
    let job = engine.admin_key_change(&tube, &key, change).await?;
    let id = job.stats.id;
    tracing::info!(action = "delay", id, %tube, %key, delay = req.delay, peer = %peer.0, "api: job re-delayed by key");
    ok(StatusCode::OK, job_view(&job))
}

/// One edit of one job, logged.
async fn edit(engine: ApiEngine, peer: Peer, id: JobId, edit: Edit) -> ApiResult {
    let job = engine.0.admin_edit(id, &edit).await?;
    tracing::info!(action = edit.name(), id, ?edit, tube = %job.stats.tube, peer = %peer.0, "api: job changed");
    ok(StatusCode::OK, job_view(&job))
}

pub(super) async fn move_job(
    engine: ApiEngine,
    Extension(peer): Extension<Peer>,
    JobPath(id): JobPath,
    ApiJson(req): ApiJson<MoveJob>,
) -> ApiResult {
    edit(engine, peer, id, Edit::Move(tube_name(&req.tube)?)).await
}

pub(super) async fn pri(
    engine: ApiEngine,
    Extension(peer): Extension<Peer>,
    JobPath(id): JobPath,
    ApiJson(req): ApiJson<SetPri>,
) -> ApiResult {
    edit(engine, peer, id, Edit::Pri(req.pri)).await
}

pub(super) async fn delay(
    engine: ApiEngine,
    Extension(peer): Extension<Peer>,
    JobPath(id): JobPath,
    ApiJson(req): ApiJson<SetDelay>,
) -> ApiResult {
    edit(engine, peer, id, Edit::Delay(req.delay)).await
}

pub(super) async fn bury(
    engine: ApiEngine,
    Extension(peer): Extension<Peer>,
    JobPath(id): JobPath,
) -> ApiResult {
    edit(engine, peer, id, Edit::Bury).await
}

pub(super) async fn kick_job(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    JobPath(id): JobPath,
) -> ApiResult {
    let job = engine.admin_kick_job(id).await?;
    tracing::info!(action = "kick", id, peer = %peer.0, "api: job kicked");
    ok(StatusCode::OK, job_view(&job))
}

pub(super) async fn kick_tube(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    TubePath(tube): TubePath,
    ApiJson(req): ApiJson<KickTube>,
) -> ApiResult {
    let kicked = engine.admin_kick(&tube, req.bound).await?;
    tracing::info!(action = "kick", %tube, count = kicked, peer = %peer.0, "api: tube kicked");
    ok(StatusCode::OK, Kicked { kicked })
}

/// The flush of `flush-tube` (docs/EXTENSIONS.md, *Flush*): the same engine operation,
/// in steps that let the beanstalk clients run between them.
pub(super) async fn flush(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    TubePath(tube): TubePath,
    ApiJson(req): ApiJson<FlushTube>,
) -> ApiResult {
    let flushed = engine.admin_flush(&tube, &req.states).await?;
    tracing::info!(action = "flush", %tube, states = ?req.states, count = flushed, peer = %peer.0, "api: tube flushed");
    ok(StatusCode::OK, FlushedTube { flushed })
}

pub(super) async fn pause(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    TubePath(tube): TubePath,
    ApiJson(req): ApiJson<SetDelay>,
) -> ApiResult {
    engine.admin_pause(&tube, req.delay).await?;
    tracing::info!(action = "pause", %tube, secs = req.delay, peer = %peer.0, "api: tube paused");
    ok(StatusCode::OK, Paused { paused: req.delay })
}

fn bulk_action(change: BulkChange, args: &BulkArgs) -> Result<BulkAction, ApiError> {
    let missing =
        |what: &str| ApiError::bad_request(format!("{} needs args.{what}", change.name()));
    Ok(match change {
        BulkChange::Move => BulkAction::Edit(Edit::Move(tube_name(
            args.tube.as_deref().ok_or_else(|| missing("tube"))?,
        )?)),
        BulkChange::Pri => BulkAction::Edit(Edit::Pri(args.pri.ok_or_else(|| missing("pri"))?)),
        BulkChange::Delay => {
            BulkAction::Edit(Edit::Delay(args.delay.ok_or_else(|| missing("delay"))?))
        }
        BulkChange::Bury => BulkAction::Edit(Edit::Bury),
        BulkChange::Kick => BulkAction::Kick,
        BulkChange::Delete => BulkAction::Delete,
    })
}

pub(super) async fn bulk(
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    ApiJson(req): ApiJson<BulkRequest>,
) -> ApiResult {
    let bulk = Bulk {
        action: bulk_action(req.action, &req.args)?,
        tube: tube_name(&req.filter.tube)?,
        state: req.filter.state,
        contains: req.filter.contains.map(|c| Bytes::from(c.into_bytes())),
        limit: req.filter.limit,
        dry_run: req.dry_run,
    };
    let done = engine.admin_bulk(&bulk).await?;
    tracing::info!(
        action = req.action.name(),
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
        BulkResult {
            matched: done.matched,
            changed: done.changed,
            scanned: done.scanned,
            dry_run: bulk.dry_run,
        },
    )
}
