//! The API's reads: who this is, `stats`, tubes, a tube's jobs in one state from a
//! cursor, one job with (a preview of) its body, the raw body, and the bounded body
//! search. None changes anything; each is bounded (a page, one job, a scan budget).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::IntoResponse;
use base64::Engine as _;
use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{
    ApiError, ApiResult, JobJson, decode_cursor, encode_cursor, engine_of, ok, parse_state,
};
use crate::engine::admin_bulk::{MAX_SCAN, Search, SearchCursor};
use crate::engine::stats::Figures;
use crate::http::{App, Source};
use crate::protocol::TubeName;
use crate::store::admin::MAX_LIST;
use crate::store::{JobId, ListKey, ListQuery};

type Params = Query<HashMap<String, String>>;

/// A number parameter, `default` when absent, at most `max`.
fn number(
    p: &HashMap<String, String>,
    name: &str,
    default: usize,
    max: usize,
) -> Result<usize, ApiError> {
    let Some(v) = p.get(name).filter(|v| !v.is_empty()) else {
        return Ok(default);
    };
    match v.parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(ApiError::bad_request(format!("{name} must be 1 to {max}"))),
    }
}

pub fn tube_name(s: &str) -> Result<TubeName, ApiError> {
    TubeName::new(s.as_bytes())
        .ok_or_else(|| ApiError::bad_request(format!("{s:?} is not a tube name")))
}

pub fn job_id(s: &str) -> Result<JobId, ApiError> {
    s.parse()
        .map_err(|_| ApiError::bad_request(format!("{s:?} is not a job id")))
}

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

pub(super) async fn whoami(State(app): State<Arc<App>>) -> ApiResult {
    let (mode, role, instance) = match &app.source {
        Source::Engine(e) => {
            let mode = match e.store_name() {
                "memory" => "memory",
                "redis" => "shared",
                _ => "binlog",
            };
            (mode, "serving", e.instance_id().to_string())
        }
        Source::Cluster(c) => {
            let role = if c.engine().is_some() {
                "leader"
            } else {
                "standby"
            };
            ("leader", role, c.instance().to_string())
        }
    };
    let a = &app.access;
    ok(
        StatusCode::OK,
        json!({
            "version": env!("CARGO_PKG_VERSION"), "mode": mode, "role": role,
            "instance": instance, "read_only": a.read_only,
            "reads_need_token": a.reads_need_token, "changes_allowed": a.changes_allowed(),
        }),
    )
}

pub(super) async fn stats(State(app): State<Arc<App>>) -> ApiResult {
    let engine = engine_of(&app)?;
    ok(StatusCode::OK, stats_json(&engine).await?)
}

/// The `stats` figures as JSON (also the console's live snapshot).
pub(in crate::http) async fn stats_json(engine: &crate::engine::Engine) -> Result<Value, ApiError> {
    let s = engine
        .server_stats(engine.clock.now())
        .await
        .map_err(|e| ApiError::unavailable(e.chain()))?;
    let mut figures = JsonFigures::default();
    s.emit(&mut figures);
    Ok(Value::Object(figures.0))
}

/// One tube's `stats-tube` figures as JSON (also the console's live snapshot).
pub(in crate::http) async fn tube_json(
    engine: &crate::engine::Engine,
    tube: &TubeName,
) -> Result<Option<Value>, ApiError> {
    let t = engine
        .tube_stats(tube, engine.clock.now())
        .await
        .map_err(|e| ApiError::unavailable(e.chain()))?;
    Ok(t.map(|t| {
        let mut figures = JsonFigures::default();
        t.emit(&mut figures);
        Value::Object(figures.0)
    }))
}

pub(super) async fn tubes(State(app): State<Arc<App>>, Query(p): Params) -> ApiResult {
    let engine = engine_of(&app)?;
    let limit = number(&p, "limit", 50, MAX_LIST)?;
    let after = match p.get("cursor").filter(|c| !c.is_empty()) {
        Some(c) => Some(decode_cursor(c)?),
        None => None,
    };
    let names = engine.admin_tubes().await?;
    let start = after.map_or(0, |a| names.partition_point(|n| n.as_str() <= a.as_str()));
    let mut out = Vec::new();
    for name in names.iter().skip(start).take(limit) {
        if let Some(v) = tube_json(&engine, name).await? {
            out.push(v);
        }
    }
    let next = (start + limit < names.len())
        .then(|| {
            names
                .get(start + limit - 1)
                .map(|n| encode_cursor(n.as_str()))
        })
        .flatten();
    ok(StatusCode::OK, json!({"tubes": out, "next_cursor": next}))
}

pub(super) async fn tube(State(app): State<Arc<App>>, Path(tube): Path<String>) -> ApiResult {
    let engine = engine_of(&app)?;
    match tube_json(&engine, &tube_name(&tube)?).await? {
        Some(v) => ok(StatusCode::OK, v),
        None => Err(ApiError::not_found(format!("no tube {tube}"))),
    }
}

fn list_cursor(c: &str) -> Result<ListKey, ApiError> {
    let text = decode_cursor(c)?;
    let bad = || ApiError::bad_request("cursor: not one this server gave");
    let (p, id) = text.split_once(':').ok_or_else(bad)?;
    Ok(ListKey {
        primary: p.parse().map_err(|_| bad())?,
        id: id.parse().map_err(|_| bad())?,
    })
}

fn key_cursor(k: ListKey) -> String {
    encode_cursor(&format!("{}:{}", k.primary, k.id))
}

pub(super) async fn jobs(
    State(app): State<Arc<App>>,
    Path(tube): Path<String>,
    Query(p): Params,
) -> ApiResult {
    let engine = engine_of(&app)?;
    let state = parse_state(p.get("state").map_or("ready", String::as_str))?;
    let query = ListQuery {
        tube: tube_name(&tube)?,
        state,
        after: p
            .get("cursor")
            .filter(|c| !c.is_empty())
            .map(|c| list_cursor(c))
            .transpose()?,
        limit: number(&p, "limit", 50, MAX_LIST)?,
        scan: usize::MAX,
        contains: None,
    };
    let (jobs, page) = engine.admin_list(&query).await?;
    #[derive(Serialize)]
    struct Page<'a> {
        tube: &'a str,
        state: &'a str,
        jobs: Vec<JobJson<'a>>,
        next_cursor: Option<String>,
    }
    ok(
        StatusCode::OK,
        Page {
            tube: &tube,
            state: state.name(),
            jobs: jobs.iter().map(JobJson::of).collect(),
            next_cursor: page.next.map(key_cursor),
        },
    )
}

pub(super) async fn job(
    State(app): State<Arc<App>>,
    Path(id): Path<String>,
    Query(p): Params,
) -> ApiResult {
    let engine = engine_of(&app)?;
    let (job, body) = engine.admin_job_with_body(job_id(&id)?).await?;
    let cap = match p.get("body").map_or("preview", String::as_str) {
        "none" => Some(0),
        "preview" => Some(number(&p, "preview", 1024, 65_536)?),
        "full" => None,
        other => {
            return Err(ApiError::bad_request(format!(
                "body={other}: expected none, preview or full"
            )));
        }
    };
    let shown = &body[..cap.unwrap_or(body.len()).min(body.len())];
    let (mut text, mut base64) = (None, None);
    if cap != Some(0) {
        match std::str::from_utf8(shown) {
            Ok(s) => text = Some(s),
            Err(_) => base64 = Some(base64::engine::general_purpose::STANDARD.encode(shown)),
        }
    }
    #[derive(Serialize)]
    struct WithBody<'a> {
        #[serde(flatten)]
        job: JobJson<'a>,
        body_truncated: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        body: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        body_base64: Option<String>,
    }
    ok(
        StatusCode::OK,
        WithBody {
            job: JobJson::of(&job),
            body_truncated: shown.len() < body.len(),
            body: text,
            body_base64: base64,
        },
    )
}

pub(super) async fn body(State(app): State<Arc<App>>, Path(id): Path<String>) -> ApiResult {
    let engine = engine_of(&app)?;
    let (_, body) = engine.admin_job_with_body(job_id(&id)?).await?;
    let mut r = body.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(r)
}

fn search_cursor(c: &str) -> Result<SearchCursor, ApiError> {
    let text = decode_cursor(c)?;
    let bad = || ApiError::bad_request("cursor: not one this server gave");
    let mut parts = text.splitn(4, ':');
    let state = parse_state(parts.next().ok_or_else(bad)?)?;
    let (p, id) = (parts.next().ok_or_else(bad)?, parts.next().ok_or_else(bad)?);
    let after = match (p.parse(), id.parse()) {
        (Ok(primary), Ok(id)) => Some(ListKey { primary, id }),
        _ => None,
    };
    let tube = tube_name(parts.next().ok_or_else(bad)?)?;
    Ok(SearchCursor { tube, state, after })
}

fn search_cursor_text(c: &SearchCursor) -> String {
    let (p, id) = c.after.map_or(("-".to_string(), "-".to_string()), |k| {
        (k.primary.to_string(), k.id.to_string())
    });
    encode_cursor(&format!("{}:{p}:{id}:{}", c.state.name(), c.tube))
}

pub(super) async fn search(State(app): State<Arc<App>>, Query(p): Params) -> ApiResult {
    let engine = engine_of(&app)?;
    let contains = p
        .get("contains")
        .filter(|c| !c.is_empty())
        .ok_or_else(|| ApiError::bad_request("contains: the substring to look for is required"))?;
    let req = Search {
        contains: bytes::Bytes::from(contains.clone().into_bytes()),
        tube: p
            .get("tube")
            .filter(|t| !t.is_empty())
            .map(|t| tube_name(t))
            .transpose()?,
        state: p
            .get("state")
            .filter(|s| !s.is_empty())
            .map(|s| parse_state(s))
            .transpose()?,
        scan: number(&p, "scan", 1000, MAX_SCAN)?,
        cursor: p
            .get("cursor")
            .filter(|c| !c.is_empty())
            .map(|c| search_cursor(c))
            .transpose()?,
    };
    let found = engine.admin_search(&req).await?;
    #[derive(Serialize)]
    struct Found<'a> {
        jobs: Vec<JobJson<'a>>,
        scanned: u64,
        next_cursor: Option<String>,
        done: bool,
    }
    ok(
        StatusCode::OK,
        Found {
            jobs: found.jobs.iter().map(JobJson::of).collect(),
            scanned: found.scanned,
            next_cursor: found.next.as_ref().map(search_cursor_text),
            done: found.next.is_none(),
        },
    )
}
