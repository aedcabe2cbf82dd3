//! The schedules' routes (docs/API.md, *Schedules*; docs/SCHEDULES.md): list them, show
//! one with its last fires, create or replace one, pause, resume, run one now, remove
//! one. Definitions are the process's [`ScheduleBook`](crate::persist::schedules::ScheduleBook),
//! which persists a change before it applies it; cursors are the store's, read through
//! the engine that answers here (a leader-mode standby forwards like every route).
//!
//! Invariants: `changed_ms` is always the server's (the engine's clock), never the
//! client's — the book keeps the old one when the timing did not change, so a
//! replacement of a body does not move the ticks; a run never moves the cursor; every
//! change is logged at info with its action and peer.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{FromRequestParts, Path, State};
use axum::http::StatusCode;
use axum::http::request::Parts;

use super::extract::{ApiEngine, ApiJson};
use super::types::{
    FireKind, FireView, NextTick, ScheduleCursor, ScheduleList, ScheduleRan, ScheduleRemoved,
    ScheduleView,
};
use super::{ApiError, ApiResult, ok};
use crate::engine::Engine;
use crate::engine::schedules::{Fire, FireResult};
use crate::http::{App, Peer};
use crate::persist::schedules::ChangeError;
use crate::schedule::{Schedule, ScheduleDoc, ScheduleError};
use crate::store::{Cursor, ScheduleName};

/// How many coming ticks a view shows.
pub const NEXT_TICKS: usize = 5;

/// The schedule name of a route's `{name}`.
pub(super) struct SchedulePath(ScheduleName);

impl<S: Send + Sync> FromRequestParts<S> for SchedulePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(name) = Path::<String>::from_request_parts(parts, state).await?;
        ScheduleName::new(&name)
            .map(SchedulePath)
            .ok_or_else(|| ApiError::bad_request(ScheduleError::Name(name).to_string()))
    }
}

pub(super) async fn list(State(app): State<Arc<App>>, ApiEngine(engine): ApiEngine) -> ApiResult {
    let set = app.schedules.current();
    let cursors: HashMap<_, _> = engine.admin_schedule_cursors().await?.into_iter().collect();
    let now_ms = engine.admin_now_ms();
    let schedules = set
        .iter()
        .map(|s| {
            let cursor = cursors.get(&s.name).copied().unwrap_or_default();
            view(s, cursor, now_ms, None)
        })
        .collect();
    ok(
        StatusCode::OK,
        ScheduleList {
            schedules,
            persisted: app.schedules.persisted(),
        },
    )
}

pub(super) async fn show(
    State(app): State<Arc<App>>,
    ApiEngine(engine): ApiEngine,
    SchedulePath(name): SchedulePath,
) -> ApiResult {
    let schedule = find(&app, &name)?;
    let last = engine
        .schedule_fires()
        .recent(&name)
        .iter()
        .map(fire_view)
        .collect();
    answer(&engine, &schedule, Some(last)).await
}

pub(super) async fn set(
    State(app): State<Arc<App>>,
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    SchedulePath(name): SchedulePath,
    ApiJson(mut doc): ApiJson<ScheduleDoc>,
) -> ApiResult {
    match doc.name.take() {
        Some(given) if given != name.as_str() => {
            return Err(ApiError::bad_request(format!(
                "the body names schedule {given:?}, the path {name:?}"
            )));
        }
        _ => {}
    }
    doc.changed_ms = engine.admin_now_ms();
    let set = match app.schedules.set(name.as_str(), doc).await {
        Ok(set) => set,
        Err(ChangeError::Refused(e)) => return Err(ApiError::bad_request(e.to_string())),
        Err(ChangeError::Home(e)) => return Err(ApiError::unavailable(e.to_string())),
    };
    let schedule = set
        .get(name.as_str())
        .cloned()
        .ok_or_else(|| ApiError::not_found(format!("schedule {name} was removed meanwhile")))?;
    tracing::info!(action = "schedule", %name, spec = ?schedule.spec, tube = %schedule.tube, peer = %peer.0, "api: schedule set");
    answer_change(&engine, &schedule).await
}

pub(super) async fn pause(
    State(app): State<Arc<App>>,
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    SchedulePath(name): SchedulePath,
) -> ApiResult {
    set_paused(&app, &engine, peer, name, true).await
}

pub(super) async fn resume(
    State(app): State<Arc<App>>,
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    SchedulePath(name): SchedulePath,
) -> ApiResult {
    set_paused(&app, &engine, peer, name, false).await
}

async fn set_paused(
    app: &App,
    engine: &Engine,
    peer: Peer,
    name: ScheduleName,
    paused: bool,
) -> ApiResult {
    let now_ms = engine.admin_now_ms();
    let changed = app
        .schedules
        .change(name.as_str(), |set| {
            let Some(old) = set.get(name.as_str()) else {
                return Ok(None);
            };
            let mut doc = old.doc();
            doc.paused = paused;
            // Kept by the book when the schedule already was in that state.
            doc.changed_ms = now_ms;
            set.with(name.as_str(), &doc).map(Some)
        })
        .await;
    let set = match changed {
        Ok(Some(set)) => set,
        Ok(None) => return Err(no_schedule(&name)),
        Err(ChangeError::Refused(e)) => return Err(ApiError::bad_request(e.to_string())),
        Err(ChangeError::Home(e)) => return Err(ApiError::unavailable(e.to_string())),
    };
    let schedule = set
        .get(name.as_str())
        .cloned()
        .ok_or_else(|| no_schedule(&name))?;
    let action = if paused {
        "schedule-pause"
    } else {
        "schedule-resume"
    };
    tracing::info!(action, %name, peer = %peer.0, "api: schedule paused or resumed");
    answer_change(engine, &schedule).await
}

pub(super) async fn run(
    State(app): State<Arc<App>>,
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    SchedulePath(name): SchedulePath,
) -> ApiResult {
    let schedule = find(&app, &name)?;
    let ran = engine.admin_run_schedule(&schedule).await?;
    tracing::info!(action = "schedule-run", %name, id = ran.id, deduped = ran.deduped, peer = %peer.0, "api: schedule run");
    ok(
        StatusCode::OK,
        ScheduleRan {
            id: ran.id,
            deduped: ran.deduped,
        },
    )
}

pub(super) async fn remove(
    State(app): State<Arc<App>>,
    ApiEngine(engine): ApiEngine,
    Extension(peer): Extension<Peer>,
    SchedulePath(name): SchedulePath,
) -> ApiResult {
    match app.schedules.remove(name.as_str()).await {
        Ok(true) => {}
        Ok(false) => return Err(no_schedule(&name)),
        Err(e) => return Err(ApiError::unavailable(e.to_string())),
    }
    tracing::info!(action = "schedule-remove", %name, peer = %peer.0, "api: schedule removed");
    // The definition is gone, so a retry would answer 404: a cursor left behind is
    // said in the log, not to the client. It is harmless — a schedule defined again
    // under the name has a later `changed_ms`, so no tick the old cursor covers fires.
    if let Err(err) = engine.admin_drop_cursor(&name).await {
        tracing::warn!(%name, err = %err, "schedules: the removed schedule's cursor stays");
    }
    ok(StatusCode::OK, ScheduleRemoved { removed: true })
}

fn find(app: &App, name: &ScheduleName) -> Result<Arc<Schedule>, ApiError> {
    app.schedules
        .current()
        .get(name.as_str())
        .cloned()
        .ok_or_else(|| no_schedule(name))
}

fn no_schedule(name: &ScheduleName) -> ApiError {
    ApiError::not_found(format!("no schedule {name}"))
}

/// The answer of a change that was made: its view, or, when the cursor cannot be
/// read, a 503 that says the change stands (a bare 503 reads as "nothing changed").
async fn answer_change(engine: &Engine, schedule: &Schedule) -> ApiResult {
    answer(engine, schedule, None).await.map_err(|e| {
        ApiError::unavailable(format!(
            "schedule {} was changed, but its cursor could not be read: {}",
            schedule.name,
            e.message()
        ))
    })
}

/// `schedule`'s view with its cursor as the store has it now.
async fn answer(engine: &Engine, schedule: &Schedule, last: Option<Vec<FireView>>) -> ApiResult {
    let cursor = engine
        .admin_schedule_cursors()
        .await?
        .into_iter()
        .find_map(|(n, c)| (n == schedule.name).then_some(c))
        .unwrap_or_default();
    ok(
        StatusCode::OK,
        view(schedule, cursor, engine.admin_now_ms(), last),
    )
}

fn view(s: &Schedule, c: Cursor, now_ms: u64, last: Option<Vec<FireView>>) -> ScheduleView {
    let mut doc = s.doc();
    doc.name = Some(s.name.to_string());
    let next = if s.paused {
        Vec::new()
    } else {
        s.upcoming(now_ms.max(c.last_tick_ms), NEXT_TICKS)
            .into_iter()
            .map(|ms| NextTick {
                utc: utc(ms),
                local: s.spec.local(ms),
                ms,
            })
            .collect()
    };
    ScheduleView {
        doc,
        cursor: ScheduleCursor {
            last_tick_ms: c.last_tick_ms,
            last_job: c.last_job,
            fired: c.fired,
            deduped: c.deduped,
            skipped: c.skipped,
        },
        next,
        last,
    }
}

fn fire_view(f: &Fire) -> FireView {
    let (result, job, skipped, error) = match &f.result {
        FireResult::Made(id) => (FireKind::Made, Some(*id), None, None),
        FireResult::Deduped(id) => (FireKind::Deduped, Some(*id), None, None),
        FireResult::Skipped(n) => (FireKind::Skipped, None, Some(*n), None),
        FireResult::Failed(why) => (FireKind::Failed, None, None, Some(why.clone())),
    };
    FireView {
        tick_ms: f.tick_ms,
        tick: utc(f.tick_ms),
        at_ms: f.at_ms,
        result,
        job,
        skipped,
        error,
    }
}

/// An instant as RFC 3339 UTC text (empty past chrono's range, which no tick reaches).
pub(super) fn utc(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(String::new, |t| {
            t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
        })
}
