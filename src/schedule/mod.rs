//! Schedules (docs/SCHEDULES.md): jobs the server puts into a tube at each tick of a
//! cron expression or an interval. This module holds the definitions as values — what
//! the API and every home take ([`ScheduleDoc`]), a checked one ([`Schedule`]), the set
//! of them ([`Schedules`]) — and when each fires (`spec.rs`). Pure: no I/O, no clock
//! (the times it needs are passed in). Where definitions are kept is
//! `persist/schedules.rs`; what fires them is `engine/schedules.rs`; each tick's cursor
//! is the store's (`store/schedule.rs`).

pub mod spec;

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub use spec::{Spec, SpecError};

use crate::protocol::TubeName;
use crate::protocol::ext::{Key, KeyMode, PutKey};
use crate::store::{LARGE_BODY, MIN_TTR_MS, NewJob, ScheduleName, TickPut};

/// The most schedules a namespace keeps.
pub const MAX_SCHEDULES: usize = 10_000;

/// A put's default priority and TTR, as beanstalk clients use them.
const DEFAULT_PRI: u32 = 1024;
const DEFAULT_TTR_MS: u64 = 60_000;

/// The longest delay a put may ask for (beanstalkd's: 2^32 - 1 seconds).
const MAX_DELAY_MS: u64 = u32::MAX as u64 * 1000;

/// What happens to ticks missed while nothing ran (more than [`MISSED_AFTER_MS`] late).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Missed {
    /// None of them fires; they are counted as skipped.
    #[default]
    Skip,
    /// The latest of them fires once; the others are counted as skipped.
    Once,
}

/// A tick fired later than this after its instant counts as missed (the server was
/// down, or the schedule paused): fired or skipped as the schedule's [`Missed`] says.
pub const MISSED_AFTER_MS: u64 = 60_000;

/// A schedule as the API takes it and every home keeps it (JSON; TOML in a
/// `--schedules` file, with a `name`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleDoc {
    /// Only in a `--schedules` file (the API names a schedule in its path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub tube: String,
    /// The job's body as UTF-8 text, or
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// as base64 (either, not both; neither: an empty body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    #[serde(default = "default_pri")]
    pub pri: u32,
    #[serde(default)]
    pub delay_ms: u64,
    #[serde(default = "default_ttr")]
    pub ttr_ms: u64,
    /// A key (docs/EXTENSIONS.md, *Keys*): a tick while the key's job still waits
    /// makes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// A cron expression (with `tz`), or
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// the IANA time zone the cron expression is read in (default UTC);
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
    /// an interval in milliseconds (exactly one of `cron` and `every_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_ms: Option<u64>,
    #[serde(default)]
    pub missed: Missed,
    #[serde(default)]
    pub paused: bool,
    /// When the schedule's timing (spec or pause) last changed: no tick at or before
    /// it fires, and an interval counts from it. Set by the server.
    #[serde(default)]
    pub changed_ms: u64,
}

fn default_pri() -> u32 {
    DEFAULT_PRI
}

fn default_ttr() -> u64 {
    DEFAULT_TTR_MS
}

/// Why a schedule was refused (the API's 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    #[error("{0:?} is not a schedule name (1 to 64 of A-Z a-z 0-9 . _ -)")]
    Name(String),
    #[error("{0:?} is not a tube name")]
    Tube(String),
    #[error("{0:?} is not a key")]
    Key(String),
    #[error("give either body or body_base64, not both")]
    TwoBodies,
    #[error("body_base64 is not base64: {0}")]
    Base64(String),
    #[error("the body is {0} bytes; a schedule's body must be under {LARGE_BODY}")]
    BodyTooBig(usize),
    #[error("delay_ms {0} is over the longest delay ({MAX_DELAY_MS})")]
    Delay(u64),
    #[error("give exactly one of cron and every_ms")]
    NoSpec,
    #[error("tz applies to cron only")]
    TzWithoutCron,
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("at most {MAX_SCHEDULES} schedules")]
    TooMany,
}

/// A checked schedule.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    pub name: ScheduleName,
    pub tube: TubeName,
    pub body: Bytes,
    pub pri: u32,
    pub delay_ms: u64,
    /// Raised to at least [`MIN_TTR_MS`], as a put's.
    pub ttr_ms: u64,
    pub key: Option<Key>,
    pub spec: Spec,
    pub missed: Missed,
    pub paused: bool,
    pub changed_ms: u64,
}

impl Schedule {
    /// Check `doc` as schedule `name`.
    pub fn from_doc(name: &str, doc: &ScheduleDoc) -> Result<Schedule, ScheduleError> {
        let name = ScheduleName::new(name).ok_or_else(|| ScheduleError::Name(name.into()))?;
        let tube = TubeName::new(doc.tube.as_bytes())
            .ok_or_else(|| ScheduleError::Tube(doc.tube.clone()))?;
        let body = match (&doc.body, &doc.body_base64) {
            (Some(_), Some(_)) => return Err(ScheduleError::TwoBodies),
            (Some(text), None) => Bytes::from(text.clone().into_bytes()),
            (None, Some(b64)) => base64::engine::general_purpose::STANDARD
                .decode(b64)
                .map(Bytes::from)
                .map_err(|e| ScheduleError::Base64(e.to_string()))?,
            (None, None) => Bytes::new(),
        };
        if body.len() >= LARGE_BODY {
            return Err(ScheduleError::BodyTooBig(body.len()));
        }
        if doc.delay_ms > MAX_DELAY_MS {
            return Err(ScheduleError::Delay(doc.delay_ms));
        }
        let key = match &doc.key {
            Some(k) => Some(Key::new(k.as_bytes()).ok_or_else(|| ScheduleError::Key(k.clone()))?),
            None => None,
        };
        let spec = match (&doc.cron, doc.every_ms) {
            (Some(expr), None) => Spec::cron(expr, doc.tz.as_deref().unwrap_or("UTC"))?,
            (None, Some(_)) if doc.tz.is_some() => return Err(ScheduleError::TzWithoutCron),
            (None, Some(every)) => Spec::every(every)?,
            _ => return Err(ScheduleError::NoSpec),
        };
        Ok(Schedule {
            name,
            tube,
            body,
            pri: doc.pri,
            delay_ms: doc.delay_ms,
            ttr_ms: doc.ttr_ms.max(MIN_TTR_MS),
            key,
            spec,
            missed: doc.missed,
            paused: doc.paused,
            changed_ms: doc.changed_ms,
        })
    }

    /// The schedule as the API shows it and every home keeps it.
    pub fn doc(&self) -> ScheduleDoc {
        let (body, body_base64) = match std::str::from_utf8(&self.body) {
            Ok(text) => (Some(text.to_string()), None),
            Err(_) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(&self.body)),
            ),
        };
        let (cron, tz, every_ms) = match &self.spec {
            Spec::Cron { expr, tz, .. } => (Some(expr.clone()), Some(tz.name().to_string()), None),
            Spec::Every { every_ms } => (None, None, Some(*every_ms)),
        };
        ScheduleDoc {
            name: None,
            tube: self.tube.as_str().to_string(),
            body,
            body_base64,
            pri: self.pri,
            delay_ms: self.delay_ms,
            ttr_ms: self.ttr_ms,
            key: self.key.as_ref().map(|k| k.as_str().to_string()),
            cron,
            tz,
            every_ms,
            missed: self.missed,
            paused: self.paused,
            changed_ms: self.changed_ms,
        }
    }

    /// The first tick after `after_ms` that may fire: never one at or before the
    /// schedule's last change.
    pub fn next_after(&self, after_ms: u64) -> Option<u64> {
        self.spec
            .next_after(after_ms.max(self.changed_ms), self.changed_ms)
    }

    /// The next `n` ticks after `after_ms` (what the API shows as "next").
    pub fn upcoming(&self, after_ms: u64, n: usize) -> Vec<u64> {
        let mut ticks = Vec::with_capacity(n);
        let mut at = after_ms;
        while ticks.len() < n {
            match self.next_after(at) {
                Some(t) => {
                    ticks.push(t);
                    at = t;
                }
                None => break,
            }
        }
        ticks
    }

    /// The job of one tick (`tick_ms`), with `skipped` ticks passed over before it.
    pub fn tick(&self, tick_ms: u64, skipped: u64) -> TickPut {
        TickPut {
            schedule: self.name.clone(),
            tick_ms,
            job: self.job(),
            key: self.put_key(),
            skipped,
        }
    }

    /// The job a tick (or a run outside the ticks) puts.
    pub fn job(&self) -> NewJob {
        NewJob {
            tube: self.tube.clone(),
            pri: self.pri,
            delay_ms: self.delay_ms,
            ttr_ms: self.ttr_ms,
            body: self.body.clone(),
        }
    }

    /// The key a tick puts with: dedupe, no window (a tick after the job's delete
    /// makes a new one).
    pub fn put_key(&self) -> Option<PutKey> {
        self.key.as_ref().map(|key| PutKey {
            key: key.clone(),
            mode: KeyMode::Dedupe,
            window: Default::default(),
        })
    }

    /// Whether `other` fires at the same instants as this one (a change of anything
    /// else keeps the schedule's `changed_ms`).
    pub fn same_timing(&self, other: &Schedule) -> bool {
        self.spec == other.spec && self.paused == other.paused
    }
}

/// Every schedule of a namespace, by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedules {
    by_name: BTreeMap<ScheduleName, Arc<Schedule>>,
}

impl Schedules {
    /// The set with `name` defined by `doc`. A replacement that keeps the timing keeps
    /// the old `changed_ms` (so a restart that seeds the same file moves nothing);
    /// otherwise the doc's (the caller's "now").
    pub fn with(&self, name: &str, doc: &ScheduleDoc) -> Result<Schedules, ScheduleError> {
        let mut next = self.clone();
        next.define(name, doc)?;
        Ok(next)
    }

    /// [`Schedules::with`] in place.
    pub fn define(&mut self, name: &str, doc: &ScheduleDoc) -> Result<(), ScheduleError> {
        let mut schedule = Schedule::from_doc(name, doc)?;
        match self.by_name.get(&schedule.name) {
            Some(old) if old.same_timing(&schedule) => schedule.changed_ms = old.changed_ms,
            Some(_) => {}
            None if self.by_name.len() >= MAX_SCHEDULES => return Err(ScheduleError::TooMany),
            None => {}
        }
        self.by_name
            .insert(schedule.name.clone(), Arc::new(schedule));
        Ok(())
    }

    /// The set without `name`; `None` when there is no such schedule.
    pub fn without(&self, name: &str) -> Option<Schedules> {
        let name = ScheduleName::new(name)?;
        let mut next = self.clone();
        next.by_name.remove(&name)?;
        Some(next)
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Schedule>> {
        self.by_name.get(&ScheduleName::new(name)?)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Schedule>> {
        self.by_name.values()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// A set of kept definitions: each not valid is passed to `skipped`; past
    /// [`MAX_SCHEDULES`], the rest are refused as too many. Linear in their number.
    pub fn from_kept(
        docs: Vec<(String, ScheduleDoc)>,
        mut skipped: impl FnMut(&str, ScheduleError),
    ) -> Schedules {
        let mut by_name = BTreeMap::new();
        for (name, doc) in docs {
            match Schedule::from_doc(&name, &doc) {
                Ok(_) if by_name.len() >= MAX_SCHEDULES => skipped(&name, ScheduleError::TooMany),
                Ok(s) => {
                    by_name.insert(s.name.clone(), Arc::new(s));
                }
                Err(e) => skipped(&name, e),
            }
        }
        Schedules { by_name }
    }
}

/// A `--schedules` file: `[[schedule]]` tables, each a [`ScheduleDoc`] with a `name`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleFile {
    #[serde(default)]
    pub schedule: Vec<ScheduleDoc>,
}

impl ScheduleFile {
    /// The file's schedules, each checked, with their names; `now_ms` is their
    /// `changed_ms` (kept by [`Schedules::with`] where the timing did not change).
    pub fn parse(text: &str, now_ms: u64) -> Result<Vec<(String, ScheduleDoc)>, String> {
        let file: ScheduleFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut docs = Vec::new();
        for mut doc in file.schedule {
            let name = doc.name.take().ok_or("a [[schedule]] without a name")?;
            doc.changed_ms = now_ms;
            Schedule::from_doc(&name, &doc).map_err(|e| format!("schedule {name}: {e}"))?;
            docs.push((name, doc));
        }
        Ok(docs)
    }
}

#[cfg(test)]
mod tests;
