//! Retention in redstalkctl (docs/CLI.md, *Retention*; docs/RETENTION.md): `retained
//! list [--tube T] [--key K]`, the records of deleted jobs newest first, and the
//! readable form of a deleted job's record and of a job's history that `job ID`
//! prints.
//!
//! Invariants: every command here needs the API (the beanstalk protocol has no view
//! of deleted jobs: `stats-job` answers NOT_FOUND as in beanstalkd); `--json` prints
//! the API's own answer.

use clap::{Args, Subcommand};
use redstalk::http::api::types::{
    Bounded, Cursor, HistoryView, RetainedJob, RetainedPage, RetainedQueryDoc, RetainedWithBody,
};

use crate::Ctx;
use crate::dict::Dict;
use crate::error::{EXIT_OK, Result};
use crate::render::{self, Table, print_json};

#[derive(Subcommand)]
pub enum RetainedCmd {
    /// The retained records of deleted jobs, newest first (API).
    List(ListArgs),
}

#[derive(Args)]
pub struct ListArgs {
    /// Only this tube's records.
    #[arg(long)]
    pub tube: Option<String>,
    /// The newest record of the job that had this key (needs --tube).
    #[arg(long, requires = "tube")]
    pub key: Option<String>,
    /// Records per page (at most 1000).
    #[arg(long, default_value_t = 50)]
    pub limit: u32,
    /// Start after this cursor (printed after a page that has more).
    #[arg(long)]
    pub cursor: Option<String>,
}

pub fn retained(ctx: &Ctx, cmd: &RetainedCmd) -> Result<u8> {
    match cmd {
        RetainedCmd::List(a) => list(ctx, a),
    }
}

fn list(ctx: &Ctx, a: &ListArgs) -> Result<u8> {
    let api = ctx.need_api("retained list")?;
    let q = RetainedQueryDoc {
        tube: a.tube.clone(),
        key: a.key.clone(),
        cursor: a.cursor.clone().map(Cursor),
        limit: Bounded::new(u64::from(a.limit)),
    };
    let page: RetainedPage = api.get("/retained", &q)?;
    if ctx.json {
        print_json(&page);
        return Ok(EXIT_OK);
    }
    let r = &page.retention;
    if !r.on {
        println!("retention is off on this server (redstalk --retain DURATION turns it on)");
        return Ok(EXIT_OK);
    }
    println!(
        "retention: keep {}, at most {} records and {} bytes{}; {} records, {} bytes",
        keep_text(r.keep_ms),
        r.max_jobs,
        r.max_bytes,
        if r.bodies { ", with bodies" } else { "" },
        page.records,
        page.bytes
    );
    print!("{}", records_table(&page.jobs));
    if let Some(c) = page.next_cursor {
        let tube = a
            .tube
            .as_ref()
            .map_or(String::new(), |t| format!(" --tube {t}"));
        eprintln!(
            "more: redstalkctl retained list{tube} --limit {} --cursor {}",
            a.limit, c.0
        );
    }
    Ok(EXIT_OK)
}

/// A duration in ms as `--retain` takes it (`90s`, `30m`, `24h`, `7d`).
fn keep_text(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        _ if s > 0 && s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s > 0 && s.is_multiple_of(3_600) => format!("{}h", s / 3_600),
        _ if s > 0 && s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

fn records_table(jobs: &[RetainedJob]) -> String {
    let mut t = Table::new(&[
        "id",
        "tube",
        "key",
        "deleted_at",
        "reserves",
        "releases",
        "timeouts",
        "body_size",
    ]);
    for j in jobs {
        t.row(vec![
            j.id.to_string(),
            j.tube.clone(),
            j.key.clone().unwrap_or_else(|| "-".to_string()),
            j.deleted_at.clone(),
            j.reserves.to_string(),
            j.releases.to_string(),
            j.timeouts.to_string(),
            j.body_size.to_string(),
        ]);
    }
    t.render()
}

/// A history as a timeline: one line per kept event (time, event, connection), and
/// where events were not kept, how many.
pub fn timeline(h: &HistoryView) -> String {
    let mut t = Table::new(&["time", "event", "conn"]);
    for (i, e) in h.history.iter().enumerate() {
        // The store keeps the first 8 events and the latest ones: the gap is after
        // the 8th.
        if i == 8 && h.history_dropped > 0 {
            t.row(vec![
                "...".to_string(),
                format!("({} events not kept)", h.history_dropped),
                String::new(),
            ]);
        }
        let conn = match (e.conn, &e.addr) {
            (0, _) => "-".to_string(),
            (c, Some(addr)) => format!("{c} ({addr})"),
            (c, None) => c.to_string(),
        };
        t.row(vec![e.at.clone(), e.event.clone(), conn]);
    }
    t.render()
}

/// `job ID` of a deleted, retained job: its record, its history, its body if kept.
pub fn show_deleted(ctx: &Ctx, r: &RetainedWithBody) -> Result<u8> {
    if ctx.json {
        print_json(r);
        return Ok(EXIT_OK);
    }
    let mut record = r.job.clone();
    let history = record.history.take().unwrap_or_default();
    print!("{}", render::key_values(&Dict::of(&record)));
    println!("history:");
    print!("{}", timeline(&history));
    match (&r.body, &r.body_base64, r.body_kept) {
        (_, _, false) => println!(
            "body ({} bytes): not kept (redstalk --retain-bodies keeps it)",
            record.body_size
        ),
        (Some(text), _, true) => {
            let cut = if r.body_truncated {
                ", shown in part"
            } else {
                ""
            };
            println!("body ({} bytes{cut}):", record.body_size);
            println!("{text}");
        }
        (None, Some(b64), true) => {
            println!("body ({} bytes, base64):", record.body_size);
            println!("{b64}");
        }
        (None, None, true) => println!("body ({} bytes)", record.body_size),
    }
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redstalk::http::api::types::HistoryEvent;

    #[test]
    fn keep_reads_as_the_flag_takes_it() {
        assert_eq!(keep_text(3_600_000), "1h");
        assert_eq!(keep_text(90_000), "90s");
        assert_eq!(keep_text(86_400_000 * 7), "7d");
    }

    #[test]
    fn the_timeline_marks_the_gap_and_names_connections() {
        let e = |n: u64, conn: u64| HistoryEvent {
            at: format!("t{n}"),
            at_ms: n,
            event: "release".to_string(),
            conn,
            addr: (conn == 7).then(|| "10.0.0.7:5".to_string()),
        };
        let h = HistoryView {
            history: (0..10).map(|n| e(n, if n == 9 { 7 } else { 0 })).collect(),
            history_dropped: 40,
        };
        let text = timeline(&h);
        assert!(text.contains("(40 events not kept)"), "{text}");
        assert!(text.contains("7 (10.0.0.7:5)"), "{text}");
    }
}
