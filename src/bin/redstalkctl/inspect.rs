//! The reading commands: `stats`, `tubes`, `job`, `jobs`, `search`.
//!
//! Invariants: reads change nothing on the server (the protocol path uses only `stats*`,
//! `list-tubes` and `peek`); the JSON a command prints has the same shape on both paths
//! (figures under beanstalkd's names, a job's body as `body` when it is UTF-8 and as
//! `body_base64` otherwise); a tube or job that vanishes between two reads of a listing
//! is left out, not an error.

use std::io::IsTerminal;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use clap::Args;
use serde_json::{Value, json};

use crate::Ctx;
use crate::api::{Api, seg};
use crate::beanstalk::Beanstalk;
use crate::error::{CtlError, Result};
use crate::figures::Figures;
use crate::render::{self, print_json};

pub fn stats(ctx: &Ctx) -> Result<u8> {
    let f = match ctx.api() {
        Some(api) => figures_of(api.get("/stats", &[])?)?,
        None => ctx.proto()?.stats()?,
    };
    if ctx.json {
        print_json(&f.to_json());
    } else {
        print!("{}", render::key_values(&f));
    }
    Ok(0)
}

pub fn tubes(ctx: &Ctx) -> Result<u8> {
    let tubes = match ctx.api() {
        Some(api) => tubes_api(api)?,
        None => tubes_proto(&mut ctx.proto()?)?,
    };
    if ctx.json {
        let list: Vec<Value> = tubes.iter().map(Figures::to_json).collect();
        print_json(&json!({ "tubes": list }));
    } else {
        print!("{}", render::tubes_table(&tubes));
    }
    Ok(0)
}

/// Every tube's `stats-tube` figures over the protocol, in `list-tubes` order.
pub fn tubes_proto(b: &mut Beanstalk) -> Result<Vec<Figures>> {
    let mut out = Vec::new();
    for name in b.list_tubes()? {
        match b.stats_tube(&name) {
            Ok(f) => out.push(f),
            // Emptied and collected since list-tubes.
            Err(CtlError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Every tube's figures from the API, all pages, in name order.
pub fn tubes_api(api: &Api) -> Result<Vec<Figures>> {
    let limit = [("limit", "1000".to_string())];
    api.pages("/tubes", &limit, "tubes", None, false)?
        .into_iter()
        .map(figures_of)
        .collect()
}

fn figures_of(v: Value) -> Result<Figures> {
    Figures::from_json(&v)
        .ok_or_else(|| CtlError::Unavailable(format!("expected a JSON object, got {v}")))
}

#[derive(Args)]
pub struct JobArgs {
    pub id: u64,
    /// Show the whole body (by default its first --preview bytes).
    #[arg(long)]
    pub full: bool,
    /// How many bytes of the body to show.
    #[arg(long, default_value_t = 1024)]
    pub preview: usize,
}

pub fn job(ctx: &Ctx, a: &JobArgs) -> Result<u8> {
    let (figures, body) = match ctx.api() {
        Some(api) => job_api(api, a)?,
        None => job_proto(&mut ctx.proto()?, a)?,
    };
    if ctx.json {
        let mut all = figures;
        all.0.extend(body.0);
        print_json(&all.to_json());
        return Ok(0);
    }
    print!("{}", render::key_values(&figures));
    let size = figures.u64("body_size");
    let text = match (body.get("body"), body.get("body_base64")) {
        (Some(Value::String(s)), _) => s.clone(),
        (_, Some(Value::String(b))) => {
            let bytes = B64.decode(b).unwrap_or_default();
            render::body_text(&bytes, usize::MAX)
        }
        _ => String::new(),
    };
    let cut = if body.get("body_truncated") == Some(&Value::Bool(true)) {
        ", shown in part"
    } else {
        ""
    };
    println!("body ({size} bytes{cut}):");
    println!("{text}");
    Ok(0)
}

/// A job over the protocol: `stats-job` figures plus `body_size`, and the body fields.
fn job_proto(b: &mut Beanstalk, a: &JobArgs) -> Result<(Figures, Figures)> {
    let mut figures = b.stats_job(a.id)?;
    let body = b.peek(a.id)?;
    figures.push("body_size", Value::from(body.len()));
    let limit = if a.full { body.len() } else { a.preview };
    let shown = &body[..body.len().min(limit)];
    let mut fields = Figures::default();
    match std::str::from_utf8(shown) {
        Ok(s) => fields.push("body", Value::from(s)),
        Err(_) => fields.push("body_base64", Value::from(B64.encode(shown))),
    }
    fields.push("body_truncated", Value::Bool(shown.len() < body.len()));
    Ok((figures, fields))
}

/// A job from the API, its body fields apart from its figures.
fn job_api(api: &Api, a: &JobArgs) -> Result<(Figures, Figures)> {
    let mode = if a.full { "full" } else { "preview" };
    let q = [
        ("body", mode.to_string()),
        ("preview", a.preview.to_string()),
    ];
    let all = figures_of(api.get(&format!("/jobs/{}", a.id), &q)?)?;
    let is_body = |k: &str| matches!(k, "body" | "body_base64" | "body_truncated");
    let (body, mut figures): (Vec<_>, Vec<_>) = all.0.into_iter().partition(|(k, _)| is_body(k));
    // JSON objects come sorted by key; people read stats-job's order.
    let rank = |k: &str| render::JOB_ORDER.iter().position(|o| *o == k);
    figures.sort_by_key(|(k, _)| rank(k).unwrap_or(usize::MAX));
    Ok((Figures(figures), Figures(body)))
}

#[derive(Args)]
pub struct JobsArgs {
    pub tube: String,
    /// ready, delayed, buried or reserved.
    #[arg(long, default_value = "ready")]
    pub state: String,
    /// Jobs per page (at most 1000).
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// Start after this cursor (printed after a page that has more).
    #[arg(long, conflicts_with = "all")]
    pub cursor: Option<String>,
    /// Read every page.
    #[arg(long)]
    pub all: bool,
}

pub fn jobs(ctx: &Ctx, a: &JobsArgs) -> Result<u8> {
    let api = ctx.need_api("jobs")?;
    let path = format!("/tubes/{}/jobs", seg(&a.tube));
    let mut q = vec![("state", a.state.clone()), ("limit", a.limit.to_string())];
    let (jobs, next) = if a.all {
        let progress = std::io::stderr().is_terminal();
        (api.pages(&path, &q, "jobs", None, progress)?, None)
    } else {
        if let Some(c) = &a.cursor {
            q.push(("cursor", c.clone()));
        }
        let page = api.get(&path, &q)?;
        let jobs = page
            .get("jobs")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let next = page
            .get("next_cursor")
            .and_then(Value::as_str)
            .map(str::to_string);
        (jobs, next)
    };
    if ctx.json {
        print_json(&json!({
            "tube": a.tube, "state": a.state, "jobs": jobs, "next_cursor": next,
        }));
    } else {
        print!("{}", render::jobs_table(&jobs, false));
        if let Some(c) = next {
            eprintln!(
                "more: redstalkctl jobs {} --state {} --limit {} --cursor {c}",
                a.tube, a.state, a.limit
            );
        }
    }
    Ok(0)
}

#[derive(Args)]
pub struct SearchArgs {
    pub substr: String,
    /// Only this tube.
    #[arg(long)]
    pub tube: Option<String>,
    /// Only this state.
    #[arg(long)]
    pub state: Option<String>,
    /// Stop after this many matching jobs.
    #[arg(long, default_value_t = 100)]
    pub limit: usize,
    /// Jobs the server scans per request (at most 10000).
    #[arg(long, default_value_t = 1000)]
    pub scan: u32,
}

pub fn search(ctx: &Ctx, a: &SearchArgs) -> Result<u8> {
    let api = ctx.need_api("search")?;
    let progress = std::io::stderr().is_terminal();
    let mut base = vec![("contains", a.substr.clone()), ("scan", a.scan.to_string())];
    if let Some(t) = &a.tube {
        base.push(("tube", t.clone()));
    }
    if let Some(s) = &a.state {
        base.push(("state", s.clone()));
    }
    let (mut found, mut scanned, mut cursor, mut done) = (Vec::new(), 0u64, None, false);
    while !done && found.len() < a.limit {
        let mut q = base.clone();
        if let Some(c) = &cursor {
            q.push(("cursor", String::clone(c)));
        }
        let page = api.get("/search", &q)?;
        found.extend(
            page.get("jobs")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        );
        scanned += page.get("scanned").and_then(Value::as_u64).unwrap_or(0);
        cursor = page
            .get("next_cursor")
            .and_then(Value::as_str)
            .map(str::to_string);
        done = page.get("done").and_then(Value::as_bool).unwrap_or(true) || cursor.is_none();
        if progress {
            eprint!("\rscanned {scanned}, found {}", found.len());
        }
    }
    if progress {
        eprintln!();
    }
    found.truncate(a.limit);
    if ctx.json {
        print_json(&json!({
            "jobs": found, "scanned": scanned, "done": done, "next_cursor": cursor,
        }));
    } else {
        print!("{}", render::jobs_table(&found, true));
        let more = if done { "" } else { " (stopped at --limit)" };
        eprintln!("{} found, {scanned} scanned{more}", found.len());
    }
    Ok(0)
}
