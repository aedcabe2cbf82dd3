//! The Prometheus text exposition format (version 0.0.4) of one [`Snapshot`], rendered
//! from [`FAMILIES`], a table that names each family, its type and help, and how its
//! samples are read from the snapshot; of what the listener itself counts
//! ([`ListenerFigures`], [`LISTENER_FAMILIES`], read at every scrape); and of who tried
//! to connect to the beanstalk port ([`AccessFigures`], [`ACCESS_FAMILIES`], read at
//! every scrape); and of the schedules ([`ScheduleFigures`], [`SCHEDULE_FAMILIES`],
//! read at every scrape); and of retention's (`RETENTION_FAMILIES`). The tables and the
//! functions that read their samples are `families.rs`; this file renders them.
//!
//! Invariants: every figure comes from the snapshot, whose server and tube parts are
//! the very structs `stats` and `stats-tube` print, so a scrape and those commands
//! agree, or, for the `redstalk_redis_*` families, from where the namespace lives in
//! Redis (`crate::redis::placement`, handed in; none without Redis); every family has
//! one `# HELP` and one `# TYPE` line before its samples (a per-tube family keeps them
//! when no tube is listed); label values and help texts are
//! escaped as the format requires; histogram buckets are cumulative and end with
//! `+Inf` equal to `_count`. Pure: no I/O, no clock. Its cost is linear in the tubes
//! the snapshot lists (about 1 KiB of text each), which the snapshot caps.

mod families;
#[cfg(test)]
mod tests;

use std::fmt::{Display, Write};

use crate::engine::Snapshot;
use crate::redis::placement::Placement;
use crate::store::retention::RetentionFigures;
use families::{
    ACCESS_FAMILIES, FAMILIES, Family, LISTENER_FAMILIES, RETENTION_FAMILIES, SCHEDULE_FAMILIES,
    Samples,
};

/// The media type of [`render`]'s output.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The exposition of `snap`, and of `redis`: where the namespace lives (empty without
/// Redis).
pub fn render(snap: &Snapshot, redis: &[Placement]) -> String {
    let mut text = String::with_capacity(8192 + 1024 * snap.tubes.len());
    for family in FAMILIES {
        let mut out = Out::head(&mut text, family);
        match family.samples {
            Samples::Server(value) => out.value(value(snap)),
            Samples::ServerWith(emit) => emit(snap, &mut out),
            Samples::Redis(emit) => {
                for place in redis {
                    emit(place, &mut out);
                }
            }
            Samples::Tube(value) => {
                for t in &snap.tubes {
                    out.tube = Some(&t.name);
                    out.value(value(t));
                }
            }
            Samples::TubeWith(emit) => {
                for t in &snap.tubes {
                    out.tube = Some(&t.name);
                    emit(t, &mut out);
                }
            }
            Samples::Listener(_)
            | Samples::Access(_)
            | Samples::Schedules(_)
            | Samples::Retention(_) => {}
        }
    }
    text
}

/// What the HTTP listener counts itself: the console's event streams.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListenerFigures {
    /// Event streams open now.
    pub event_streams: u64,
    /// Live snapshots computed since the start.
    pub live_snapshots: u64,
}

/// The exposition of the listener's own figures (sent after [`render`]'s).
pub fn render_listener(figures: &ListenerFigures) -> String {
    let mut text = String::with_capacity(512);
    for family in LISTENER_FAMILIES {
        let mut out = Out::head(&mut text, family);
        if let Samples::Listener(value) = family.samples {
            out.value(value(figures));
        }
    }
    text
}

/// Who tried to connect to the beanstalk port (read from `server::Security` and the
/// listeners at every scrape).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessFigures {
    /// Per listener: its address, connections accepted since the start, open now.
    pub listeners: Vec<(String, u64, u64)>,
    /// Connections handshaking or not yet authenticated now.
    pub pending: u64,
    /// Connections closed at accept: too many pending.
    pub pending_refused: u64,
    pub handshake_failures: Vec<(&'static str, u64)>,
    pub auth_failures: Vec<(&'static str, u64)>,
    /// Commands answered FORBIDDEN, by role.
    pub refusals: Vec<(String, u64)>,
    /// SIGHUP reloads, by what (`roles`, `tls`) and outcome (`ok`, `failed`).
    pub reloads: Vec<((&'static str, &'static str), u64)>,
}

/// The exposition of the access figures (sent after [`render_listener`]'s).
pub fn render_access(figures: &AccessFigures) -> String {
    let mut text = String::with_capacity(1024);
    for family in ACCESS_FAMILIES {
        let mut out = Out::head(&mut text, family);
        if let Samples::Access(emit) = family.samples {
            emit(figures, &mut out);
        }
    }
    text
}

/// The schedules' figures (read from the runner's counters and the book at every
/// scrape).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScheduleFigures {
    /// Schedules defined now.
    pub defined: u64,
    pub made: u64,
    pub deduped: u64,
    pub skipped: u64,
    pub stale: u64,
    pub failed: u64,
}

/// The exposition of the schedules' figures (sent after [`render_access`]'s).
pub fn render_schedules(figures: &ScheduleFigures) -> String {
    let mut text = String::with_capacity(768);
    for family in SCHEDULE_FAMILIES {
        let mut out = Out::head(&mut text, family);
        if let Samples::Schedules(emit) = family.samples {
            emit(figures, &mut out);
        }
    }
    text
}

/// The exposition of retention's figures (sent after [`render_schedules`]'s, only
/// while retention is on: an instance that never turns it on shows no new family).
pub fn render_retention(figures: &RetentionFigures) -> String {
    let mut text = String::with_capacity(384);
    for family in RETENTION_FAMILIES {
        let mut out = Out::head(&mut text, family);
        if let Samples::Retention(read) = family.samples {
            out.value(read(figures));
        }
    }
    text
}

/// Where one family's samples are written: the family's name, and the `tube` label
/// that every sample of a per-tube family carries first.
pub(super) struct Out<'a> {
    text: &'a mut String,
    name: &'static str,
    tube: Option<&'a str>,
}

impl<'a> Out<'a> {
    /// A family's `# HELP` and `# TYPE` lines, and where its samples go.
    fn head(text: &'a mut String, family: &Family) -> Out<'a> {
        let _ = writeln!(
            text,
            "# HELP {} {}",
            family.name,
            escape(family.help, false)
        );
        let _ = writeln!(text, "# TYPE {} {}", family.name, family.kind.name());
        Out {
            text,
            name: family.name,
            tube: None,
        }
    }

    pub(super) fn value(&mut self, value: u64) {
        self.sample("", &[], value);
    }

    /// One sample: the family's name with `suffix` (a histogram's `_bucket`...).
    pub(super) fn sample(&mut self, suffix: &str, labels: &[(&str, &str)], value: impl Display) {
        let text = &mut *self.text;
        text.push_str(self.name);
        text.push_str(suffix);
        let tube = self.tube.map(|t| ("tube", t));
        let mut all = tube.iter().chain(labels).peekable();
        if all.peek().is_some() {
            text.push('{');
            for (i, (k, v)) in all.enumerate() {
                if i > 0 {
                    text.push(',');
                }
                let _ = write!(text, "{k}=\"{}\"", escape(v, true));
            }
            text.push('}');
        }
        let _ = writeln!(text, " {value}");
    }
}

/// The format's escapes: backslash and line feed everywhere, and the double quote in
/// label values (a help text may contain it as is).
fn escape(s: &str, label: bool) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\\', '\n', '"']) {
        return s.into();
    }
    let mut e = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => e.push_str("\\\\"),
            '\n' => e.push_str("\\n"),
            '"' if label => e.push_str("\\\""),
            c => e.push(c),
        }
    }
    e.into()
}
