//! The changing commands: `put`, `delete`, `kick`, `pause`, `flush` (protocol or API), and
//! `bury`, `move`, `pri`, `delay` and the bulk move (API only).
//!
//! Invariants: a single-job change is one request, so it is atomic as the server makes
//! it; a bulk move is sent in steps of at most [`BULK_STEP`] jobs with progress on
//! stderr after each, stops when a step matches or changes nothing, and exits 1
//! (partial) when fewer jobs changed than matched; a dry run is one request (the server
//! counts exactly what a real run would change).

use std::io::{IsTerminal, Read};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use clap::Args;
use redstalk::http::api::types::{
    BulkArgs, BulkChange, BulkFilter, BulkRequest, BulkResult, Created, Deleted, FlushTube,
    FlushedTube, Job, JobState, KickTube, Kicked, MoveJob, Paused, PutJob, SetDelay, SetPri,
};
use serde_json::json;

use crate::Ctx;
use crate::api::seg;
use crate::error::{CtlError, EXIT_OK, EXIT_PARTIAL, Result};
use crate::render::{self, print_json};

/// Jobs per bulk request: the server's own step, so each request stays short.
const BULK_STEP: u64 = 1000;

#[derive(Args)]
pub struct PutArgs {
    pub tube: String,
    /// The body, or `-` to read it from stdin.
    pub body: String,
    #[arg(long, default_value_t = 1024)]
    pub pri: u32,
    /// Seconds before the job is ready.
    #[arg(long, default_value_t = 0)]
    pub delay: u32,
    /// Seconds a worker may hold the job.
    #[arg(long, default_value_t = 60)]
    pub ttr: u32,
}

pub fn put(ctx: &Ctx, a: &PutArgs) -> Result<u8> {
    let body = if a.body == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| CtlError::Usage(format!("reading the body from stdin: {e}")))?;
        buf
    } else {
        a.body.clone().into_bytes()
    };
    let id = match ctx.api() {
        Some(api) => {
            let (text, base64) = match std::str::from_utf8(&body) {
                Ok(s) => (Some(s.to_string()), None),
                Err(_) => (None, Some(B64.encode(&body))),
            };
            let req = PutJob {
                body: text,
                body_base64: base64,
                pri: a.pri,
                delay: a.delay,
                ttr: a.ttr,
            };
            let created: Created = api.post(&format!("/tubes/{}/jobs", seg(&a.tube)), &req)?;
            created.id
        }
        None => ctx.proto()?.put(&a.tube, a.pri, a.delay, a.ttr, &body)?,
    };
    if ctx.json {
        print_json(&json!({ "id": id, "tube": a.tube }));
    } else {
        println!("inserted job {id} into {}", a.tube);
    }
    Ok(EXIT_OK)
}

pub fn delete(ctx: &Ctx, id: u64) -> Result<u8> {
    match ctx.api() {
        Some(api) => {
            let _: Deleted = api.delete(&format!("/jobs/{id}"))?;
        }
        None => ctx.proto()?.delete(id)?,
    }
    if ctx.json {
        print_json(&json!({ "deleted": id }));
    } else {
        println!("deleted job {id}");
    }
    Ok(EXIT_OK)
}

#[derive(Args)]
pub struct KickArgs {
    /// The tube whose buried (else delayed) jobs to kick.
    #[arg(required_unless_present = "job", conflicts_with = "job")]
    pub tube: Option<String>,
    /// At most this many jobs.
    #[arg(default_value_t = 1)]
    pub bound: u64,
    /// Kick this one buried or delayed job instead.
    #[arg(long)]
    pub job: Option<u64>,
}

pub fn kick(ctx: &Ctx, a: &KickArgs) -> Result<u8> {
    if let Some(id) = a.job {
        match ctx.api() {
            Some(api) => {
                let _: Job = api.post_empty(&format!("/jobs/{id}/kick"))?;
            }
            None => ctx.proto()?.kick_job(id)?,
        }
        if ctx.json {
            print_json(&json!({ "kicked": 1, "id": id }));
        } else {
            println!("kicked job {id}");
        }
        return Ok(EXIT_OK);
    }
    let tube = a
        .tube
        .as_deref()
        .ok_or_else(|| CtlError::Usage("kick needs a TUBE or --job ID".into()))?;
    let kicked = match ctx.api() {
        Some(api) => {
            let path = format!("/tubes/{}/kick", seg(tube));
            let bound = u32::try_from(a.bound).unwrap_or(u32::MAX);
            let kicked: Kicked = api.post(&path, &KickTube { bound })?;
            u64::from(kicked.kicked)
        }
        None => ctx.proto()?.kick(tube, a.bound)?,
    };
    if ctx.json {
        print_json(&json!({ "kicked": kicked, "tube": tube }));
    } else {
        println!("kicked {kicked} jobs in {tube}");
    }
    Ok(EXIT_OK)
}

#[derive(Args)]
pub struct FlushArgs {
    /// The tube to empty.
    pub tube: String,
    /// Only jobs in this state (repeatable); none: every job of the tube.
    #[arg(long = "state", value_name = "STATE")]
    pub states: Vec<JobState>,
}

/// `flush`: delete a tube's jobs (in the states named), in the server's bounded steps;
/// a tube that does not exist flushes nothing.
pub fn flush(ctx: &Ctx, a: &FlushArgs) -> Result<u8> {
    let flushed = match ctx.api() {
        Some(api) => {
            let path = format!("/tubes/{}/flush", seg(&a.tube));
            let req = FlushTube {
                states: a.states.clone(),
            };
            let done: FlushedTube = api.post(&path, &req)?;
            done.flushed
        }
        None => {
            let states: Vec<&str> = a.states.iter().map(|s| s.name()).collect();
            ctx.proto()?.flush_tube(&a.tube, &states)?
        }
    };
    if ctx.json {
        print_json(&json!({ "flushed": flushed, "tube": a.tube }));
    } else {
        println!("flushed {flushed} jobs of {}", a.tube);
    }
    Ok(EXIT_OK)
}

pub fn pause(ctx: &Ctx, tube: &str, secs: u32) -> Result<u8> {
    match ctx.api() {
        Some(api) => {
            let path = format!("/tubes/{}/pause", seg(tube));
            let _: Paused = api.post(&path, &SetDelay { delay: secs })?;
        }
        None => ctx.proto()?.pause_tube(tube, secs)?,
    }
    if ctx.json {
        print_json(&json!({ "paused": secs, "tube": tube }));
    } else {
        println!("paused {tube} for {secs} s");
    }
    Ok(EXIT_OK)
}

/// A change of one job in place (API only).
pub enum JobChange {
    Bury,
    Pri(u32),
    Delay(u32),
}

/// `bury`, `pri`, `delay` of one job: `POST /jobs/{id}/{action}`; prints the job as it
/// is after.
pub fn job_action(ctx: &Ctx, id: u64, change: JobChange) -> Result<u8> {
    let (action, path) = match change {
        JobChange::Bury => ("bury", format!("/jobs/{id}/bury")),
        JobChange::Pri(_) => ("pri", format!("/jobs/{id}/pri")),
        JobChange::Delay(_) => ("delay", format!("/jobs/{id}/delay")),
    };
    let api = ctx.need_api(action)?;
    let job: Job = match change {
        JobChange::Bury => api.post_empty(&path)?,
        JobChange::Pri(pri) => api.post(&path, &SetPri { pri })?,
        JobChange::Delay(delay) => api.post(&path, &SetDelay { delay })?,
    };
    print_job(ctx, job);
    Ok(EXIT_OK)
}

fn print_job(ctx: &Ctx, job: Job<'_>) {
    if ctx.json {
        print_json(&job);
    } else {
        print!("{}", render::jobs_table(&[job], true));
    }
}

#[derive(Args)]
pub struct MoveArgs {
    /// The job to move (or use --from/--to for many).
    #[arg(requires = "tube", conflicts_with_all = ["from", "to"])]
    pub id: Option<u64>,
    /// The tube to move it to.
    pub tube: Option<String>,
    /// Bulk: the tube to take jobs from.
    #[arg(long, requires_all = ["to", "limit"])]
    pub from: Option<String>,
    /// Bulk: the jobs' state (ready, delayed or buried).
    #[arg(long, default_value = "ready")]
    pub state: JobState,
    /// Bulk: the tube to move them to.
    #[arg(long)]
    pub to: Option<String>,
    /// Bulk: move at most this many jobs (at most 100000).
    #[arg(long)]
    pub limit: Option<u64>,
    /// Bulk: only jobs whose body contains this.
    #[arg(long)]
    pub contains: Option<String>,
    /// Bulk: count the jobs that would move, move none.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn move_jobs(ctx: &Ctx, a: &MoveArgs) -> Result<u8> {
    let api = ctx.need_api("move")?;
    if let (Some(id), Some(tube)) = (a.id, &a.tube) {
        let req = MoveJob { tube: tube.clone() };
        let job: Job = api.post(&format!("/jobs/{id}/move"), &req)?;
        print_job(ctx, job);
        return Ok(EXIT_OK);
    }
    let (Some(from), Some(to), Some(limit)) = (&a.from, &a.to, a.limit) else {
        return Err(CtlError::Usage(
            "move needs ID TUBE, or --from TUBE --to TUBE --limit N".into(),
        ));
    };
    let req = |n: u64, dry_run: bool| BulkRequest {
        action: BulkChange::Move,
        filter: BulkFilter {
            tube: from.clone(),
            state: a.state,
            contains: a.contains.clone(),
            limit: usize::try_from(n).unwrap_or(usize::MAX),
        },
        args: BulkArgs {
            tube: Some(to.clone()),
            ..BulkArgs::default()
        },
        dry_run,
    };
    let total = if a.dry_run {
        api.post("/bulk", &req(limit, true))?
    } else {
        bulk_steps(limit, |n| api.post("/bulk", &req(n, false)))?
    };
    if ctx.json {
        print_json(&BulkResult {
            dry_run: a.dry_run,
            ..total
        });
    } else if a.dry_run {
        println!(
            "would move {} jobs from {from} to {to} (scanned {}; dry run)",
            total.matched, total.scanned
        );
    } else {
        println!(
            "moved {} of {} matched jobs from {from} to {to} (scanned {})",
            total.changed, total.matched, total.scanned
        );
    }
    Ok(if !a.dry_run && total.changed < total.matched {
        EXIT_PARTIAL
    } else {
        EXIT_OK
    })
}

/// Run a bulk change of up to `limit` jobs as steps of at most [`BULK_STEP`], `step(n)`
/// doing one; progress on stderr after each step.
fn bulk_steps(limit: u64, mut step: impl FnMut(u64) -> Result<BulkResult>) -> Result<BulkResult> {
    let tty = std::io::stderr().is_terminal();
    let mut total = BulkResult::default();
    // Counted by matches, not changes: a matched job that could not change (it was
    // reserved meanwhile) left the filter's state, and the limit bounds the jobs touched.
    while total.matched < limit {
        let n = (limit - total.matched).min(BULK_STEP);
        let t = step(n)?;
        total.matched += t.matched;
        total.changed += t.changed;
        total.scanned += t.scanned;
        let end = if tty { "\r" } else { "\n" };
        eprint!("changed {} of at most {limit}{end}", total.changed);
        // Fewer matches than asked: the filter is exhausted. Nothing changed: going on
        // would only match the same unchangeable jobs again.
        if t.matched < n || t.changed == 0 {
            break;
        }
    }
    if tty {
        eprintln!();
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_steps_stop_when_the_filter_is_exhausted() {
        let mut left = 2500u64;
        let mut asked = Vec::new();
        let total = bulk_steps(10_000, |n| {
            asked.push(n);
            let m = n.min(left);
            left -= m;
            Ok(BulkResult {
                matched: m,
                changed: m,
                scanned: m,
                dry_run: false,
            })
        })
        .unwrap();
        assert_eq!(asked, vec![1000, 1000, 1000]);
        assert_eq!((total.matched, total.changed), (2500, 2500));
    }

    #[test]
    fn bulk_steps_stop_at_the_limit_and_when_nothing_changes() {
        let mut asked = Vec::new();
        let total = bulk_steps(1500, |n| {
            asked.push(n);
            Ok(BulkResult {
                matched: n,
                changed: n,
                scanned: n,
                dry_run: false,
            })
        })
        .unwrap();
        assert_eq!(asked, vec![1000, 500]);
        assert_eq!(total.changed, 1500);
        let stuck = bulk_steps(5000, |n| {
            Ok(BulkResult {
                matched: n,
                changed: 0,
                scanned: n,
                dry_run: false,
            })
        })
        .unwrap();
        assert_eq!((stuck.matched, stuck.changed), (1000, 0));
    }
}
