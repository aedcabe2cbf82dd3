//! `redstalkctl schedule list|show|set|pause|resume|run|remove`: the schedules
//! (docs/SCHEDULES.md) through the API's `/schedules` (there is no protocol command for
//! them: without `--api`, exit 3).
//!
//! Invariants: `--json` prints the API's own answer; `set` sends exactly the definition
//! the flags say (unset flags take the API's defaults), and the server judges it (400 →
//! exit 2 with its message); durations are read here only to turn them into the API's
//! milliseconds.

use std::io::Read;

use base64::Engine as _;
use clap::{ArgGroup, Args, Subcommand};
use redstalk::http::api::types::{
    FireKind, FireView, ScheduleList, ScheduleRan, ScheduleRemoved, ScheduleView,
};
use redstalk::schedule::{Missed, ScheduleDoc};

use crate::Ctx;
use crate::api::seg;
use crate::error::{CtlError, EXIT_OK, Result};
use crate::render::{Table, body_text, print_json};

#[derive(Subcommand)]
pub enum ScheduleCmd {
    /// Every schedule with its next tick and counts.
    List,
    /// One schedule: its definition, cursor, next ticks and this instance's last fires.
    Show { name: String },
    /// Create NAME or replace its definition (a change of timing counts from now).
    Set(Box<SetArgs>),
    /// Stop NAME's ticks (the ticks meanwhile are not fired).
    Pause { name: String },
    /// Start NAME's ticks again, from now.
    Resume { name: String },
    /// Put NAME's job now, outside its ticks (with a key: none while its job waits).
    Run { name: String },
    /// Remove NAME (and its cursor).
    Remove { name: String },
}

#[derive(Args)]
#[command(group(ArgGroup::new("spec").required(true).args(["cron", "every"])))]
#[command(group(ArgGroup::new("content").args(["body", "body_file"])))]
pub struct SetArgs {
    /// The schedule's name (1 to 64 of A-Z a-z 0-9 . _ -).
    pub name: String,
    /// The tube its jobs go into.
    #[arg(long)]
    pub tube: String,
    /// A cron expression: 5 fields, or 6 with leading seconds (`30 2 * * *`, `@daily`).
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// The IANA time zone the cron expression is read in (default UTC).
    #[arg(long, value_name = "ZONE", requires = "cron")]
    pub tz: Option<String>,
    /// An interval: 30s, 5m, 1h, 1d, 1500ms (a bare number is seconds).
    #[arg(long, value_name = "DURATION", value_parser = duration_ms)]
    pub every: Option<u64>,
    /// The job's body.
    #[arg(long, value_name = "TEXT")]
    pub body: Option<String>,
    /// The job's body, read from a file (`-`: stdin).
    #[arg(long, value_name = "FILE")]
    pub body_file: Option<String>,
    #[arg(long, value_name = "N")]
    pub pri: Option<u32>,
    /// How long each job waits before it is ready (a duration, as --every).
    #[arg(long, value_name = "DURATION", value_parser = duration_ms)]
    pub delay: Option<u64>,
    /// How long a worker may hold each job (a duration, as --every).
    #[arg(long, value_name = "DURATION", value_parser = duration_ms)]
    pub ttr: Option<u64>,
    /// A key: a tick while the key's job still waits makes none.
    #[arg(long, value_name = "K")]
    pub key: Option<String>,
    /// Ticks missed while nothing ran (over 60 s late): skip them all, or fire the
    /// latest once.
    #[arg(long, value_name = "skip|once", value_parser = missed)]
    pub missed: Option<Missed>,
    /// Define it paused.
    #[arg(long)]
    pub paused: bool,
}

impl SetArgs {
    fn doc(&self) -> Result<ScheduleDoc> {
        let mut doc = ScheduleDoc {
            tube: self.tube.clone(),
            cron: self.cron.clone(),
            tz: self.tz.clone(),
            every_ms: self.every,
            key: self.key.clone(),
            missed: self.missed.unwrap_or_default(),
            paused: self.paused,
            delay_ms: self.delay.unwrap_or(0),
            ..ScheduleDoc::default()
        };
        // The defaults are the API's (serde's), not Default's zeros.
        let defaults: ScheduleDoc = serde_json::from_str(r#"{"tube":""}"#)
            .map_err(|e| CtlError::Usage(format!("defaults: {e}")))?;
        doc.pri = self.pri.unwrap_or(defaults.pri);
        doc.ttr_ms = self.ttr.unwrap_or(defaults.ttr_ms);
        match (&self.body, &self.body_file) {
            (Some(text), _) => doc.body = Some(text.clone()),
            (None, Some(file)) => match String::from_utf8(read_file(file)?) {
                Ok(text) => doc.body = Some(text),
                Err(e) => {
                    doc.body_base64 =
                        Some(base64::engine::general_purpose::STANDARD.encode(e.into_bytes()))
                }
            },
            (None, None) => {}
        }
        Ok(doc)
    }
}

fn read_file(file: &str) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let read = if file == "-" {
        std::io::stdin().read_to_end(&mut buf).map(|_| ())
    } else {
        std::fs::read(file).map(|b| buf = b)
    };
    read.map_err(|e| CtlError::Usage(format!("reading the body from {file}: {e}")))?;
    Ok(buf)
}

/// A duration as milliseconds: a number with `ms`, `s`, `m`, `h` or `d`, or a bare
/// number of seconds (as `put`'s --delay and --ttr).
fn duration_ms(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (30s, 5m, 1h, 1d, 1500ms)"))?;
    let per = match unit {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{unit:?}: the units are ms, s, m, h and d")),
    };
    n.checked_mul(per)
        .ok_or_else(|| format!("{text:?} is too long"))
}

fn missed(text: &str) -> std::result::Result<Missed, String> {
    match text {
        "skip" => Ok(Missed::Skip),
        "once" => Ok(Missed::Once),
        _ => Err(format!("{text:?}: give skip or once")),
    }
}

pub fn schedule(ctx: &Ctx, cmd: &ScheduleCmd) -> Result<u8> {
    let api = ctx.need_api("schedule")?;
    let path = |name: &str, action: &str| format!("/schedules/{}{action}", seg(name));
    match cmd {
        ScheduleCmd::List => {
            let list: ScheduleList = api.get("/schedules", &())?;
            if ctx.json {
                print_json(&list);
            } else {
                print!("{}", table(&list.schedules));
                if !list.persisted {
                    eprintln!("(memory mode: these schedules last as long as the server runs)");
                }
            }
        }
        ScheduleCmd::Show { name } => {
            let view: ScheduleView = api.get(&path(name, ""), &())?;
            if ctx.json {
                print_json(&view);
            } else {
                print!("{}", details(&view));
            }
        }
        ScheduleCmd::Set(a) => {
            let view: ScheduleView = api.put(&path(&a.name, ""), &a.doc()?)?;
            shown(ctx, &view);
        }
        ScheduleCmd::Pause { name } => {
            let view: ScheduleView = api.post_empty(&path(name, "/pause"))?;
            shown(ctx, &view);
        }
        ScheduleCmd::Resume { name } => {
            let view: ScheduleView = api.post_empty(&path(name, "/resume"))?;
            shown(ctx, &view);
        }
        ScheduleCmd::Run { name } => {
            let ran: ScheduleRan = api.post_empty(&path(name, "/run"))?;
            if ctx.json {
                print_json(&ran);
            } else if ran.deduped {
                println!("no job made: the key's job {} still waits", ran.id);
            } else {
                println!("put job {}", ran.id);
            }
        }
        ScheduleCmd::Remove { name } => {
            let removed: ScheduleRemoved = api.delete(&path(name, ""))?;
            if ctx.json {
                print_json(&removed);
            } else {
                println!("removed schedule {name}");
            }
        }
    }
    Ok(EXIT_OK)
}

fn shown(ctx: &Ctx, view: &ScheduleView) {
    if ctx.json {
        print_json(view);
    } else {
        print!("{}", table(std::slice::from_ref(view)));
    }
}

fn name(v: &ScheduleView) -> String {
    v.doc.name.clone().unwrap_or_default()
}

/// `cron "EXPR" ZONE` or `every DURATION`.
fn spec(v: &ScheduleView) -> String {
    match (&v.doc.cron, v.doc.every_ms) {
        (Some(expr), _) => format!("{expr} ({})", v.doc.tz.as_deref().unwrap_or("UTC")),
        (None, Some(ms)) => format!("every {}", duration_text(ms)),
        (None, None) => "-".into(),
    }
}

fn duration_text(ms: u64) -> String {
    for (per, unit) in [
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
    ] {
        if ms >= per && ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

fn state(v: &ScheduleView) -> &'static str {
    if v.doc.paused { "paused" } else { "active" }
}

fn table(views: &[ScheduleView]) -> String {
    let mut t = Table::new(&[
        "NAME",
        "TUBE",
        "SPEC",
        "NEXT (LOCAL)",
        "LAST JOB",
        "STATE",
        "FIRED",
        "DEDUPED",
        "SKIPPED",
    ]);
    for v in views {
        let next = v.next.first().map_or("-".to_string(), |n| n.local.clone());
        let last = match v.cursor.last_job {
            0 => "-".to_string(),
            id => id.to_string(),
        };
        t.row(vec![
            name(v),
            v.doc.tube.clone(),
            spec(v),
            next,
            last,
            state(v).into(),
            v.cursor.fired.to_string(),
            v.cursor.deduped.to_string(),
            v.cursor.skipped.to_string(),
        ]);
    }
    t.render()
}

/// `schedule show`: the definition and cursor as lines, then the next ticks and the
/// last fires as tables.
fn details(v: &ScheduleView) -> String {
    let d = &v.doc;
    let body = match (&d.body, &d.body_base64) {
        (Some(text), _) => body_text(text.as_bytes(), 200),
        (None, Some(b64)) => format!("(base64) {b64}"),
        (None, None) => String::new(),
    };
    let c = &v.cursor;
    let mut out = String::new();
    for (k, val) in [
        ("name", name(v)),
        ("tube", d.tube.clone()),
        ("spec", spec(v)),
        ("state", state(v).into()),
        ("body", body),
        ("pri", d.pri.to_string()),
        ("delay", duration_text(d.delay_ms)),
        ("ttr", duration_text(d.ttr_ms)),
        ("key", d.key.clone().unwrap_or_else(|| "-".into())),
        ("missed", format!("{:?}", d.missed).to_lowercase()),
        ("changed_ms", d.changed_ms.to_string()),
        ("last_tick_ms", c.last_tick_ms.to_string()),
        ("last_job", c.last_job.to_string()),
        ("fired", c.fired.to_string()),
        ("deduped", c.deduped.to_string()),
        ("skipped", c.skipped.to_string()),
    ] {
        out.push_str(&format!("{k:<13} {val}\n"));
    }
    let mut next = Table::new(&["NEXT (LOCAL)", "UTC"]);
    for n in &v.next {
        next.row(vec![n.local.clone(), n.utc.clone()]);
    }
    out.push('\n');
    out.push_str(&next.render());
    let last = v.last.as_deref().unwrap_or_default();
    if !last.is_empty() {
        out.push('\n');
        out.push_str(&fires(last));
    }
    out
}

fn fires(last: &[FireView]) -> String {
    let mut t = Table::new(&["TICK (UTC)", "RESULT", "JOB", "DETAIL"]);
    for f in last.iter().rev() {
        let result = match f.result {
            FireKind::Made => "made",
            FireKind::Deduped => "deduped",
            FireKind::Skipped => "skipped",
            FireKind::Failed => "failed",
        };
        let detail = match (&f.error, f.skipped) {
            (Some(e), _) => e.clone(),
            (None, Some(n)) => format!("{n} ticks passed over"),
            (None, None) => String::new(),
        };
        t.row(vec![
            f.tick.clone(),
            result.into(),
            f.job.map_or("-".to_string(), |id| id.to_string()),
            detail,
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_milliseconds() {
        assert_eq!(duration_ms("30s"), Ok(30_000));
        assert_eq!(duration_ms("5m"), Ok(300_000));
        assert_eq!(duration_ms("1h"), Ok(3_600_000));
        assert_eq!(duration_ms("1500ms"), Ok(1_500));
        assert_eq!(duration_ms("2"), Ok(2_000));
        assert!(duration_ms("5x").is_err());
        assert!(duration_ms("m").is_err());
        assert_eq!(duration_text(300_000), "5m");
        assert_eq!(duration_text(1_500), "1500ms");
    }
}
