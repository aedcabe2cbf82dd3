//! The API's reads: who this is, `stats`, tubes, a tube's jobs in one state from a
//! cursor, one job with (a preview of) its body, a tube's job by key, the raw body, and
//! the bounded body search. None changes anything; each is bounded (a page, one job, a scan budget).

use std::borrow::Cow;
use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use serde_json::{Map, Value, json};

use super::cursor::{decode, encode};
use super::error::{ApiError, ApiResult};
use super::extract::{ApiEngine, ApiQuery, JobPath, KeyPath, TubePath, tube_name};
use super::forward::Served;
use super::retained;
use super::types::{
    InstanceRole, JobQuery, JobWithBody, JobsPage, JobsQuery, KeyAnswer, KeyWindow, SearchPage,
    SearchQuery, StatsDoc, TubesPage, TubesQuery, WhoAmI, WindowState,
};
use super::{job_view, ok};
use crate::engine::admin::AdminError;
use crate::engine::admin_bulk::Search;
use crate::engine::stats::Figures;
use crate::engine::{Engine, KeyFound};
use crate::http::{App, Source};
use crate::protocol::TubeName;
use crate::store::retention::Retained;
use crate::store::{JobState, ListQuery};

/// A stats document's figures as a JSON object (keys as the YAML names them, numbers
/// as numbers, `draining` a boolean, `rusage-*` seconds as a fraction).
#[derive(Default)]
struct JsonFigures(Map<String, Value>);

impl Figures for JsonFigures {
    fn num(&mut self, key: &str, v: u64) {
        self.0.insert(key.to_string(), json!(v));
    }
    fn flag(&mut self, key: &str, v: bool) {
        self.0.insert(key.to_string(), json!(v));
    }
    fn bare(&mut self, key: &str, v: &str) {
        self.0.insert(key.to_string(), json!(v));
    }
    fn quoted(&mut self, key: &str, v: &str) {
        self.0.insert(key.to_string(), json!(v));
    }
    fn string(&mut self, key: &str, v: &str) {
        self.0.insert(key.to_string(), json!(v));
    }
    fn secs(&mut self, key: &str, (s, us): (u64, u32)) {
        self.0
            .insert(key.to_string(), json!(s as f64 + f64::from(us) / 1e6));
    }
}

pub(super) async fn whoami(
    State(app): State<Arc<App>>,
    Extension(served): Extension<Served>,
) -> ApiResult {
    let (role, instance) = match (&app.source, &served) {
        (Source::Engine(e), _) => (InstanceRole::Serving, e.instance_id().to_string()),
        (Source::Cluster(c), Served::Here(_)) => (InstanceRole::Leader, c.instance().to_string()),
        (Source::Cluster(c), _) => (InstanceRole::Standby, c.instance().to_string()),
    };
    let access = app.auth.access();
    ok(
        StatusCode::OK,
        WhoAmI {
            version: env!("CARGO_PKG_VERSION").to_string(),
            mode: app.mode,
            role,
            instance,
            read_only: access.read_only,
            reads_need_token: access.reads_need_token,
            changes_allowed: app.auth.changes_allowed(),
        },
    )
}

pub(super) async fn stats(ApiEngine(engine): ApiEngine) -> ApiResult {
    ok(StatusCode::OK, stats_doc(&engine).await?)
}

/// The `stats` figures (also the console's live snapshot).
pub(super) async fn stats_doc(engine: &Engine) -> Result<StatsDoc, ApiError> {
    let s = engine.server_stats(engine.clock.now()).await?;
    let mut figures = JsonFigures::default();
    s.emit(&mut figures);
    Ok(StatsDoc(figures.0))
}

/// One tube's `stats-tube` figures (also the console's live snapshot).
pub(super) async fn tube_doc(
    engine: &Engine,
    tube: &TubeName,
) -> Result<Option<StatsDoc>, ApiError> {
    let t = engine.tube_stats(tube, engine.clock.now()).await?;
    Ok(t.map(|t| {
        let mut figures = JsonFigures::default();
        t.emit(&mut figures);
        StatsDoc(figures.0)
    }))
}

pub(super) async fn tubes(
    ApiEngine(engine): ApiEngine,
    ApiQuery(q): ApiQuery<TubesQuery>,
) -> ApiResult {
    let limit = q.limit.size();
    let after: Option<TubeName> = decode(q.cursor.as_ref())?;
    let names = engine.admin_tubes().await?;
    let start = after.map_or(0, |a| names.partition_point(|n| *n <= a));
    let mut tubes = Vec::new();
    for name in names.iter().skip(start).take(limit) {
        if let Some(t) = tube_doc(&engine, name).await? {
            tubes.push(t);
        }
    }
    let next_cursor = (start + limit < names.len())
        .then(|| names.get(start + limit - 1).map(encode))
        .flatten();
    ok(StatusCode::OK, TubesPage { tubes, next_cursor })
}

pub(super) async fn tube(ApiEngine(engine): ApiEngine, TubePath(tube): TubePath) -> ApiResult {
    match tube_doc(&engine, &tube).await? {
        Some(t) => ok(StatusCode::OK, t),
        None => Err(ApiError::not_found(format!("no tube {tube}"))),
    }
}

pub(super) async fn jobs(
    ApiEngine(engine): ApiEngine,
    TubePath(tube): TubePath,
    ApiQuery(q): ApiQuery<JobsQuery>,
) -> ApiResult {
    let state = q.state.unwrap_or(JobState::Ready);
    let query = ListQuery {
        tube: tube.clone(),
        state,
        after: decode(q.page.cursor.as_ref())?,
        limit: q.page.limit.size(),
        scan: usize::MAX,
        contains: None,
    };
    let (jobs, page) = engine.admin_list(&query).await?;
    ok(
        StatusCode::OK,
        JobsPage {
            tube: Cow::Borrowed(tube.as_str()),
            state,
            jobs: jobs.iter().map(job_view).collect(),
            next_cursor: page.next.as_ref().map(encode),
        },
    )
}

pub(super) async fn job(
    ApiEngine(engine): ApiEngine,
    JobPath(id): JobPath,
    ApiQuery(q): ApiQuery<JobQuery>,
) -> ApiResult {
    let (job, body, history) = match engine.admin_job_with_history(id).await {
        Ok(found) => found,
        // Gone: its record, while retention keeps it (docs/RETENTION.md).
        Err(AdminError::NoJob(_)) => match engine.admin_retained(id).await? {
            Some(r) => return retained::retained_answer(&engine, &r, &q),
            None => return Err(AdminError::NoJob(id).into()),
        },
        Err(e) => return Err(e.into()),
    };
    let (text, base64, truncated) = retained::shown_body(&q, &body);
    let history = history.map(|h| retained::history_view(&engine, &h));
    ok(
        StatusCode::OK,
        JobWithBody {
            job: job_view(&job),
            body_truncated: truncated,
            body: text,
            body_base64: base64,
            history,
        },
    )
}

/// The key's job (no scan: the store's find by key), or its window.
pub(super) async fn by_key(ApiEngine(engine): ApiEngine, KeyPath(tube, key): KeyPath) -> ApiResult {
    let window = match engine.admin_find_key(&tube, &key).await {
        Ok(KeyFound::Job(job)) => {
            return ok(StatusCode::OK, KeyAnswer::Job(Box::new(job_view(&job))));
        }
        Ok(KeyFound::Window(id)) => Some(id),
        Err(AdminError::NoKey { .. }) => None,
        Err(e) => return Err(e.into()),
    };
    // No live job: the key's newest retained record (docs/RETENTION.md), which says
    // more than the window's id; with retention off, the answer is as before.
    if let Some(r) = engine.admin_retained_by_key(&tube, &key).await?
        && window.is_none_or(|id| id == r.id)
    {
        let view = retained::retained_view(&engine, &r, true);
        return ok(StatusCode::OK, KeyAnswer::Retained(Box::new(view)));
    }
    match window {
        Some(id) => ok(
            StatusCode::OK,
            KeyAnswer::Window(KeyWindow {
                id,
                state: WindowState::Deleted,
            }),
        ),
        None => Err(AdminError::NoKey { tube, key }.into()),
    }
}

pub(super) async fn body(ApiEngine(engine): ApiEngine, JobPath(id): JobPath) -> ApiResult {
    let body = match engine.admin_job_with_body(id).await {
        Ok((_, body)) => body,
        // A retained record's body, when `--retain-bodies` kept it.
        Err(AdminError::NoJob(_)) => match engine.admin_retained(id).await? {
            Some(Retained {
                body: Some(body), ..
            }) => body,
            _ => return Err(AdminError::NoJob(id).into()),
        },
        Err(e) => return Err(e.into()),
    };
    let mut r = body.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(r)
}

pub(super) async fn search(
    ApiEngine(engine): ApiEngine,
    ApiQuery(q): ApiQuery<SearchQuery>,
) -> ApiResult {
    if q.contains.is_empty() {
        return Err(ApiError::bad_request(
            "contains: the substring to look for is required",
        ));
    }
    let req = Search {
        contains: bytes::Bytes::from(q.contains.into_bytes()),
        tube: q.tube.as_deref().map(tube_name).transpose()?,
        state: q.state,
        scan: q.scan.size(),
        cursor: decode(q.cursor.as_ref())?,
    };
    let found = engine.admin_search(&req).await?;
    ok(
        StatusCode::OK,
        SearchPage {
            jobs: found.jobs.iter().map(job_view).collect(),
            scanned: found.scanned,
            next_cursor: found.next.as_ref().map(encode),
            done: found.next.is_none(),
        },
    )
}
