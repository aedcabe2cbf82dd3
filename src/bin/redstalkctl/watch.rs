//! The live commands: `tail` (a line per change of a tube's counts) and `top` (a table
//! of every tube, redrawn), both polling every `--interval` seconds: `list-tubes` and
//! `stats-tube` per tube over one protocol connection, or `/api/v1/tubes` with `--api`.
//!
//! Invariants: a refresh is one poll and one output; `--count N` ends the command with
//! exit 0 after N refreshes (Ctrl-C ends it otherwise); `tail`'s first refresh prints
//! every tube's figures and later refreshes print only what changed, so nothing is
//! printed for a quiet queue; `--json` prints one JSON object per line.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde_json::{Map, Value, json};

use crate::Ctx;
use crate::api::Api;
use crate::beanstalk::Beanstalk;
use crate::dict::Dict;
use crate::error::{CtlError, Result};
use crate::inspect::{tubes_api, tubes_proto};
use crate::render;

/// The stats-tube figures `tail` follows (`pause-time-left` counts down by itself, so
/// `pause`, the pause's length, stands for it).
const TAILED: &[&str] = &[
    "current-jobs-ready",
    "current-jobs-reserved",
    "current-jobs-delayed",
    "current-jobs-buried",
    "total-jobs",
    "current-waiting",
    "cmd-delete",
    "pause",
];

#[derive(Args)]
pub struct WatchArgs {
    /// Stop after this many refreshes (by default run until Ctrl-C).
    #[arg(long)]
    pub count: Option<u64>,
    /// Seconds between refreshes.
    #[arg(long, default_value_t = 1.0)]
    pub interval: f64,
}

/// Where the figures come from, kept across refreshes.
enum Poller<'a> {
    Api(&'a Api),
    Proto(Beanstalk),
}

impl Poller<'_> {
    fn new(ctx: &Ctx) -> Result<Poller<'_>> {
        Ok(match ctx.api() {
            Some(api) => Poller::Api(api),
            None => Poller::Proto(ctx.proto()?),
        })
    }

    /// Every tube's figures, by name.
    fn poll(&mut self) -> Result<BTreeMap<String, Dict>> {
        let tubes = match self {
            Poller::Api(api) => tubes_api(api)?,
            Poller::Proto(b) => tubes_proto(b)?,
        };
        Ok(tubes.into_iter().map(|f| (f.text("name"), f)).collect())
    }
}

/// Call `refresh(n)` for n = 0, 1, … every `interval` until `count` refreshes.
fn every(a: &WatchArgs, mut refresh: impl FnMut(u64) -> Result<()>) -> Result<u8> {
    if !(a.interval.is_finite() && a.interval > 0.0) {
        return Err(CtlError::Usage("--interval must be above 0".into()));
    }
    let interval = Duration::from_secs_f64(a.interval);
    let mut n = 0;
    while a.count.is_none_or(|c| n < c) {
        if n > 0 {
            std::thread::sleep(interval);
        }
        refresh(n)?;
        n += 1;
    }
    Ok(0)
}

pub fn tail(ctx: &Ctx, a: &WatchArgs) -> Result<u8> {
    let mut poller = Poller::new(ctx)?;
    let mut last: Option<BTreeMap<String, Dict>> = None;
    every(a, |_| {
        let now = poller.poll()?;
        let (secs, clock) = time_now();
        for event in tail_events(last.as_ref(), &now) {
            if ctx.json {
                let mut obj = Map::new();
                obj.insert("time".into(), Value::from(secs));
                obj.extend(event.json);
                println!("{}", Value::Object(obj));
            } else {
                println!("{clock} {}", event.text);
            }
        }
        last = Some(now);
        Ok(())
    })
}

struct Event {
    text: String,
    json: Map<String, Value>,
}

fn event(text: String, json: Value) -> Event {
    let json = match json {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Event { text, json }
}

/// What `tail` prints for a refresh from `last` (`None`: the first) to `now`.
fn tail_events(last: Option<&BTreeMap<String, Dict>>, now: &BTreeMap<String, Dict>) -> Vec<Event> {
    let mut out = Vec::new();
    let tailed = |f: &Dict| -> Map<String, Value> {
        TAILED
            .iter()
            .filter_map(|k| Some((k.to_string(), f.get(k)?.clone())))
            .collect()
    };
    let summary = |f: &Dict| {
        TAILED
            .iter()
            .filter(|k| f.get(k).is_some())
            .map(|k| format!("{} {}", short(k), f.text(k)))
            .collect::<Vec<_>>()
            .join("  ")
    };
    for (name, f) in now {
        let before = last.map(|l| l.get(name));
        match before {
            None => out.push(event(
                format!("{name}  {}", summary(f)),
                json!({ "event": "tube", "tube": name, "figures": tailed(f) }),
            )),
            Some(None) => out.push(event(
                format!("+ {name}  {}", summary(f)),
                json!({ "event": "added", "tube": name, "figures": tailed(f) }),
            )),
            Some(Some(old)) => {
                let changed: Vec<&str> = TAILED
                    .iter()
                    .copied()
                    .filter(|k| old.get(k) != f.get(k))
                    .collect();
                if changed.is_empty() {
                    continue;
                }
                let text = changed
                    .iter()
                    .map(|k| change_text(k, old, f))
                    .collect::<Vec<_>>()
                    .join("  ");
                let changes: Map<String, Value> = changed
                    .iter()
                    .map(|k| (k.to_string(), json!([old.get(k), f.get(k)])))
                    .collect();
                out.push(event(
                    format!("{name}  {text}"),
                    json!({ "event": "changed", "tube": name, "changes": changes }),
                ));
            }
        }
    }
    for name in last.into_iter().flat_map(|l| l.keys()) {
        if !now.contains_key(name) {
            out.push(event(
                format!("- {name}"),
                json!({ "event": "removed", "tube": name }),
            ));
        }
    }
    out
}

/// `ready 3 -> 5 (+2)`.
fn change_text(key: &str, old: &Dict, new: &Dict) -> String {
    let (a, b) = (old.u64(key) as i128, new.u64(key) as i128);
    format!(
        "{} {} -> {} ({:+})",
        short(key),
        old.text(key),
        new.text(key),
        b - a
    )
}

fn short(key: &str) -> &str {
    key.strip_prefix("current-jobs-")
        .or_else(|| key.strip_prefix("current-"))
        .unwrap_or(key)
}

pub fn top(ctx: &Ctx, a: &WatchArgs) -> Result<u8> {
    let mut poller = Poller::new(ctx)?;
    let tty = std::io::stdout().is_terminal();
    every(a, |n| {
        let now = poller.poll()?;
        let (secs, clock) = time_now();
        let tubes: Vec<Dict> = now.into_values().collect();
        if ctx.json {
            let list: Vec<Value> = tubes.iter().map(Dict::to_json).collect();
            println!("{}", json!({ "time": secs, "tubes": list }));
            return Ok(());
        }
        if tty {
            // Home and clear: the table is redrawn in place.
            print!("\x1b[H\x1b[2J");
        } else if n > 0 {
            println!();
        }
        let sum = |k: &str| tubes.iter().map(|f| f.u64(k)).sum::<u64>();
        println!(
            "{clock}  {} tubes  ready {}  reserved {}  delayed {}  buried {}",
            tubes.len(),
            sum("current-jobs-ready"),
            sum("current-jobs-reserved"),
            sum("current-jobs-delayed"),
            sum("current-jobs-buried"),
        );
        print!("{}", render::tubes_table(&tubes));
        Ok(())
    })
}

/// Now as Unix seconds and as a UTC `HH:MM:SS` clock.
fn time_now() -> (f64, String) {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let s = d.as_secs() % 86_400;
    let clock = format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
    (d.as_secs_f64(), clock)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tube(name: &str, ready: u64) -> (String, Dict) {
        let yaml = format!("---\nname: {name}\ncurrent-jobs-ready: {ready}\ntotal-jobs: {ready}\n");
        (name.to_string(), Dict::from_yaml(&yaml, &["name"]))
    }

    #[test]
    fn first_refresh_lists_then_only_changes() {
        let a: BTreeMap<_, _> = [tube("a", 1), tube("b", 0)].into_iter().collect();
        assert_eq!(tail_events(None, &a).len(), 2);
        assert!(
            tail_events(Some(&a), &a).is_empty(),
            "quiet: nothing printed"
        );
        let b: BTreeMap<_, _> = [tube("a", 3), tube("c", 0)].into_iter().collect();
        let ev = tail_events(Some(&a), &b);
        let texts: Vec<&str> = ev.iter().map(|e| e.text.as_str()).collect();
        assert_eq!(
            texts,
            vec![
                "a  ready 1 -> 3 (+2)  total-jobs 1 -> 3 (+2)",
                "+ c  ready 0  total-jobs 0",
                "- b",
            ]
        );
    }
}
