//! What redstalkctl prints: aligned tables and `key: value` lists for people, JSON for
//! scripts, and the table shapes of tubes and jobs that several commands share.
//!
//! Invariants: data goes to stdout, progress and errors to stderr, so `--json` stdout is
//! always one parseable JSON document (or, for `tail`/`top`, one per line); a column
//! whose cells are all numbers is right-aligned, others left-aligned.

use redstalk::http::api::types::{HeldBy, Job};
use serde::Serialize;

use crate::dict::{Dict, display};

/// A table of text cells under a header row.
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, columns two spaces apart.
    pub fn render(&self) -> String {
        let cols = self.headers.len();
        let mut width: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        // A column is numeric when its cells are numbers or `-`, at least one a number.
        let mut numeric = vec![true; cols];
        let mut some_number = vec![false; cols];
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate().take(cols) {
                width[i] = width[i].max(cell.chars().count());
                let number = cell.parse::<f64>().is_ok();
                some_number[i] |= number;
                numeric[i] &= number || cell == "-";
            }
        }
        for (n, some) in numeric.iter_mut().zip(&some_number) {
            *n &= *some;
        }
        let line = |cells: &[String]| {
            let mut out = String::new();
            for (i, cell) in cells.iter().enumerate().take(cols) {
                let pad = width[i].saturating_sub(cell.chars().count());
                if i > 0 {
                    out.push_str("  ");
                }
                if numeric[i] {
                    out.push_str(&" ".repeat(pad));
                    out.push_str(cell);
                } else {
                    out.push_str(cell);
                    if i + 1 < cols {
                        out.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.trim_end().to_string() + "\n"
        };
        let mut out = line(&self.headers);
        for row in &self.rows {
            out.push_str(&line(row));
        }
        out
    }
}

/// Print `v` as pretty JSON on stdout.
pub fn print_json(v: &impl Serialize) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

/// `key: value` lines, keys padded to one width.
pub fn key_values(f: &Dict) -> String {
    let w = f.0.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    f.0.iter()
        .map(|(k, v)| format!("{k:<w$}  {}\n", display(v)))
        .collect()
}

/// The columns of the tubes table: header and stats-tube key.
pub const TUBE_COLUMNS: &[(&str, &str)] = &[
    ("TUBE", "name"),
    ("READY", "current-jobs-ready"),
    ("URGENT", "current-jobs-urgent"),
    ("RESERVED", "current-jobs-reserved"),
    ("DELAYED", "current-jobs-delayed"),
    ("BURIED", "current-jobs-buried"),
    ("TOTAL", "total-jobs"),
    ("USING", "current-using"),
    ("WATCHING", "current-watching"),
    ("WAITING", "current-waiting"),
    ("PAUSE-LEFT", "pause-time-left"),
];

pub fn tubes_table(tubes: &[Dict]) -> String {
    let headers: Vec<&str> = TUBE_COLUMNS.iter().map(|(h, _)| *h).collect();
    let mut t = Table::new(&headers);
    for f in tubes {
        t.row(TUBE_COLUMNS.iter().map(|(_, k)| f.text(k)).collect());
    }
    t.render()
}

/// A column's cell of a job.
type Cell = fn(&Job<'_>) -> String;

/// The columns of the jobs table: header and cell.
const JOB_COLUMNS: &[(&str, Cell)] = &[
    ("ID", |j| j.stats.id.to_string()),
    ("STATE", |j| j.stats.state.to_string()),
    ("PRI", |j| j.stats.pri.to_string()),
    ("AGE", |j| j.stats.age.to_string()),
    ("DELAY", |j| j.stats.delay.to_string()),
    ("TTR", |j| j.stats.ttr.to_string()),
    ("TIME-LEFT", |j| j.stats.time_left.to_string()),
    ("RESERVES", |j| j.stats.reserves.to_string()),
    ("BURIES", |j| j.stats.buries.to_string()),
    ("KICKS", |j| j.stats.kicks.to_string()),
    ("SIZE", |j| j.body_size.to_string()),
];

/// A jobs table; with `with_tube` a TUBE column, a KEY column when a job has a key,
/// and a HOLDER column (`addr#conn@instance`) for reserved jobs.
pub fn jobs_table(jobs: &[Job<'_>], with_tube: bool) -> String {
    let mut headers: Vec<&str> = JOB_COLUMNS.iter().map(|(h, _)| *h).collect();
    if with_tube {
        headers.insert(1, "TUBE");
    }
    // Only a table with a keyed job has the KEY column: others print as before keys.
    let keyed = jobs.iter().any(|j| j.key.is_some());
    if keyed {
        headers.push("KEY");
    }
    headers.push("HOLDER");
    let mut t = Table::new(&headers);
    for job in jobs {
        let mut row: Vec<String> = JOB_COLUMNS.iter().map(|(_, cell)| cell(job)).collect();
        if with_tube {
            row.insert(1, job.stats.tube.clone());
        }
        if keyed {
            row.push(job.key.as_deref().unwrap_or("-").to_string());
        }
        row.push(holder(job.holder.as_ref()));
        t.row(row);
    }
    t.render()
}

fn holder(h: Option<&HeldBy<'_>>) -> String {
    let Some(h) = h else {
        return "-".to_string();
    };
    let addr = h.addr.as_deref().unwrap_or("-");
    format!("{addr}#{}@{}", h.conn, h.instance)
}

/// At most `limit` bytes of `body` as text for a terminal: invalid UTF-8 replaced,
/// control characters but newline and tab escaped.
pub fn body_text(body: &[u8], limit: usize) -> String {
    let shown = &body[..body.len().min(limit)];
    let text: String = String::from_utf8_lossy(shown)
        .chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
    if body.len() > limit {
        format!("{text}… ({} more bytes)", body.len() - limit)
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_right_text_left() {
        let mut t = Table::new(&["TUBE", "READY"]);
        t.row(vec!["default".into(), "3".into()]);
        t.row(vec!["a".into(), "120".into()]);
        assert_eq!(
            t.render(),
            "TUBE     READY\ndefault      3\na          120\n"
        );
    }

    #[test]
    fn a_column_of_dashes_is_text() {
        let mut t = Table::new(&["ID", "HOLDER"]);
        t.row(vec!["7".into(), "-".into()]);
        t.row(vec!["10".into(), "-".into()]);
        assert_eq!(t.render(), "ID  HOLDER\n 7  -\n10  -\n");
    }

    #[test]
    fn holder_cell() {
        let h = HeldBy {
            instance: "i1".into(),
            addr: Some("10.0.0.1:5".into()),
            conn: 7,
        };
        assert_eq!(holder(Some(&h)), "10.0.0.1:5#7@i1");
        assert_eq!(holder(None), "-");
    }
}
