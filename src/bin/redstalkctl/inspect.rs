//! The reading commands: `stats`, `tubes`, `job` (with `--api`, a deleted job's
//! retained record too: `retained.rs`), `jobs`, `search`.
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
use redstalk::http::api::types::{
    BodyShown, Bounded, Cursor, HistoryView, Job, JobQuery, JobState, JobWithBody, JobsPage,
    JobsQuery, PageQuery, RetainedWithBody, SearchPage, SearchQuery, StatsDoc, TubesPage,
    TubesQuery,
};
use serde_json::{Value, json};

use crate::Ctx;
use crate::api::{Api, seg};
use crate::beanstalk::Beanstalk;
use crate::dict::Dict;
use crate::error::{CtlError, Result};
use crate::render::{self, print_json};
use crate::retained;

pub fn stats(ctx: &Ctx) -> Result<u8> {
    let f = match ctx.api() {
        Some(api) => Dict::of_stats(api.get::<StatsDoc>("/stats", &())?),
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
        let list: Vec<Value> = tubes.iter().map(Dict::to_json).collect();
        print_json(&json!({ "tubes": list }));
    } else {
        print!("{}", render::tubes_table(&tubes));
    }
    Ok(0)
}

/// Every tube's `stats-tube` figures over the protocol, in `list-tubes` order.
pub fn tubes_proto(b: &mut Beanstalk) -> Result<Vec<Dict>> {
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
pub fn tubes_api(api: &Api) -> Result<Vec<Dict>> {
    let mut all = Vec::new();
    api.each_page(
        "/tubes",
        |cursor| TubesQuery::new(cursor, 1000),
        |page: TubesPage| {
            all.extend(page.tubes.into_iter().map(Dict::of_stats));
            true
        },
    )?;
    Ok(all)
}

#[derive(Args)]
pub struct JobArgs {
    /// The job's id (`job show ID` is the same: docs/RETENTION.md spells it so).
    #[arg(value_name = "ID")]
    pub first: String,
    /// The id after `show`.
    #[arg(hide = true)]
    pub second: Option<String>,
    /// Show the whole body (by default its first --preview bytes).
    #[arg(long)]
    pub full: bool,
    /// How many bytes of the body to show.
    #[arg(long, default_value_t = 1024)]
    pub preview: usize,
}

impl JobArgs {
    /// The id asked for: `job ID`, or `job show ID`.
    fn id(&self) -> Result<u64> {
        let text = match (self.first.as_str(), &self.second) {
            ("show", Some(id)) => id,
            (id, None) => id,
            (_, Some(extra)) => {
                return Err(CtlError::Usage(format!("job: unexpected {extra:?}")));
            }
        };
        text.parse()
            .map_err(|_| CtlError::Usage(format!("job: {text:?} is not a job id")))
    }
}

/// A job's body as a command shows it: its first bytes, as text or base64.
struct Shown {
    fields: Dict,
    /// The bytes shown.
    bytes: Vec<u8>,
    truncated: bool,
}

pub fn job(ctx: &Ctx, a: &JobArgs) -> Result<u8> {
    let (figures, body, history) = match ctx.api() {
        Some(api) => match job_api(api, a)? {
            Found::Live(figures, body, history) => (figures, body, history),
            Found::Deleted(record) => return retained::show_deleted(ctx, &record),
        },
        None => {
            let (figures, body) = job_proto(&mut ctx.proto()?, a)?;
            (figures, body, None)
        }
    };
    if ctx.json {
        let mut all = figures;
        all.0.extend(body.fields.0);
        if let Some(h) = &history {
            all.0.extend(Dict::of(h).0);
        }
        print_json(&all.to_json());
        return Ok(0);
    }
    print!("{}", render::key_values(&figures));
    if let Some(h) = &history {
        println!("history:");
        print!("{}", retained::timeline(h));
    }
    let size = figures.u64("body_size");
    let cut = if body.truncated {
        ", shown in part"
    } else {
        ""
    };
    println!("body ({size} bytes{cut}):");
    match std::str::from_utf8(&body.bytes) {
        Ok(text) => println!("{text}"),
        Err(_) => println!("{}", render::body_text(&body.bytes, usize::MAX)),
    }
    Ok(0)
}

/// What `GET /jobs/{id}` found: a live job (figures, body, its history while
/// retention is on), or a deleted job's retained record.
enum Found {
    Live(Dict, Shown, Option<HistoryView>),
    Deleted(Box<RetainedWithBody>),
}

/// The body fields of a job's JSON: `body` when the shown bytes are UTF-8, else
/// `body_base64`, and `body_truncated`.
fn shown(bytes: Vec<u8>, truncated: bool) -> Shown {
    let mut fields = Dict::default();
    match std::str::from_utf8(&bytes) {
        Ok(s) => fields.push("body", Value::from(s)),
        Err(_) => fields.push("body_base64", Value::from(B64.encode(&bytes))),
    }
    fields.push("body_truncated", Value::Bool(truncated));
    Shown {
        fields,
        bytes,
        truncated,
    }
}

/// A job over the protocol: `stats-job` figures plus `body_size`, and its body.
fn job_proto(b: &mut Beanstalk, a: &JobArgs) -> Result<(Dict, Shown)> {
    let id = a.id()?;
    let mut figures = b.stats_job(id)?;
    let body = b.peek(id)?;
    figures.push("body_size", Value::from(body.len()));
    let limit = if a.full { body.len() } else { a.preview };
    let truncated = body.len() > limit;
    let mut body = body;
    body.truncate(limit);
    Ok((figures, shown(body, truncated)))
}

/// A job from the API: its figures in `stats-job`'s order (then the API's own), its
/// body and its history; or, gone but retained, its record.
fn job_api(api: &Api, a: &JobArgs) -> Result<Found> {
    let q = JobQuery {
        body: Some(if a.full {
            BodyShown::Full
        } else {
            BodyShown::Preview
        }),
        preview: Bounded::new(a.preview as u64),
    };
    let answer: Value = api.get(&format!("/jobs/{}", a.id()?), &q)?;
    let bad = |e: serde_json::Error| CtlError::Unavailable(format!("the job's answer: {e}"));
    if answer.get("state").and_then(Value::as_str) == Some("deleted") {
        let record: RetainedWithBody = serde_json::from_value(answer).map_err(bad)?;
        return Ok(Found::Deleted(Box::new(record)));
    }
    let j: JobWithBody = serde_json::from_value(answer).map_err(bad)?;
    let bytes = match (j.body, j.body_base64) {
        (Some(text), _) => text.into_owned().into_bytes(),
        (None, Some(b)) => B64
            .decode(b)
            .map_err(|e| CtlError::Unavailable(format!("the job's body_base64: {e}")))?,
        (None, None) => Vec::new(),
    };
    Ok(Found::Live(
        Dict::of(&j.job),
        shown(bytes, j.body_truncated),
        j.history,
    ))
}

#[derive(Args)]
pub struct JobsArgs {
    pub tube: String,
    /// ready, delayed, buried or reserved.
    #[arg(long, default_value = "ready")]
    pub state: JobState,
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
    let query = |cursor| JobsQuery {
        state: Some(a.state),
        page: PageQuery::new(cursor, u64::from(a.limit)),
    };
    let mut jobs: Vec<Job<'static>> = Vec::new();
    let mut next = None;
    if a.all {
        let progress = std::io::stderr().is_terminal();
        api.each_page(&path, query, |page: JobsPage| {
            jobs.extend(page.jobs);
            if progress {
                eprint!("\r{} jobs read", jobs.len());
            }
            true
        })?;
        if progress {
            eprintln!();
        }
    } else {
        let page: JobsPage = api.get(&path, &query(a.cursor.clone().map(Cursor)))?;
        jobs = page.jobs;
        next = page.next_cursor;
    }
    if ctx.json {
        let page = JobsPage {
            tube: a.tube.clone().into(),
            state: a.state,
            jobs,
            next_cursor: next,
        };
        print_json(&page);
    } else {
        print!("{}", render::jobs_table(&jobs, false));
        if let Some(c) = next {
            eprintln!(
                "more: redstalkctl jobs {} --state {} --limit {} --cursor {}",
                a.tube, a.state, a.limit, c.0
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
    pub state: Option<JobState>,
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
    let mut found = SearchPage {
        jobs: Vec::new(),
        scanned: 0,
        next_cursor: None,
        done: false,
    };
    let query = |cursor| SearchQuery {
        contains: a.substr.clone(),
        tube: a.tube.clone(),
        state: a.state,
        scan: Bounded::new(u64::from(a.scan)),
        cursor,
    };
    api.each_page("/search", query, |page: SearchPage| {
        found.jobs.extend(page.jobs);
        found.scanned += page.scanned;
        found.next_cursor = page.next_cursor;
        found.done = page.done || found.next_cursor.is_none();
        if progress {
            eprint!("\rscanned {}, found {}", found.scanned, found.jobs.len());
        }
        !found.done && found.jobs.len() < a.limit
    })?;
    if progress {
        eprintln!();
    }
    found.jobs.truncate(a.limit);
    if ctx.json {
        print_json(&found);
    } else {
        print!("{}", render::jobs_table(&found.jobs, true));
        let more = if found.done {
            ""
        } else {
            " (stopped at --limit)"
        };
        eprintln!(
            "{} found, {} scanned{more}",
            found.jobs.len(),
            found.scanned
        );
    }
    Ok(0)
}
