//! When a schedule fires: a cron expression in a time zone, or a fixed interval
//! ([`Spec`]), and its ticks as instants in milliseconds since the Unix epoch.
//!
//! Cron expressions are croner's (5 fields, or 6 with leading seconds; `L`, `W`, `#`,
//! the `@daily`-style aliases); years are refused, so a schedule never simply ends.
//! Ticks in a time zone follow croner's daylight-saving rule, pinned by this file's
//! tests (docs/SCHEDULES.md, *Daylight saving*): a fixed time that does not exist
//! fires at the first instant after the gap, a fixed time that happens twice fires
//! at its first occurrence only; `*` or a step in a time field follows real time.
//! The tz database is compiled in (chrono-tz), so every instance, on any host,
//! computes the same instants.
//!
//! Interval ticks are `anchor + k * every` (the anchor: when the schedule was made or
//! its spec last changed), in UTC, so every instance computes the same instants too.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// The shortest interval (ms).
pub const MIN_EVERY_MS: u64 = 1000;

/// The longest interval (ms): a year, so that an interval's ticks stay far from
/// overflow and a schedule that never seems to fire is a mistake caught early.
pub const MAX_EVERY_MS: u64 = 366 * 24 * 3600 * 1000;

/// When a schedule fires.
#[derive(Clone)]
pub enum Spec {
    /// At each instant a cron expression names, read in a time zone.
    Cron {
        /// The expression as written (an alias as written too).
        expr: String,
        tz: Tz,
        cron: Box<Cron>,
    },
    /// Every `every_ms`, from the schedule's anchor.
    Every { every_ms: u64 },
}

/// Why a spec was refused (the API answers 400 with this text).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    #[error("cron expression {expr:?}: {reason}")]
    Cron { expr: String, reason: String },
    #[error("unknown time zone {0:?} (an IANA name such as \"Europe/Berlin\", or \"UTC\")")]
    TimeZone(String),
    #[error("every_ms {0} is out of range ({MIN_EVERY_MS} to {MAX_EVERY_MS})")]
    Every(u64),
    #[error("cron expression {0:?} never fires")]
    Never(String),
}

impl Spec {
    /// A cron spec: `expr` in time zone `tz` (an IANA name).
    pub fn cron(expr: &str, tz: &str) -> Result<Spec, SpecError> {
        let zone = Tz::from_str(tz).map_err(|_| SpecError::TimeZone(tz.to_string()))?;
        let refused = |reason: &str| SpecError::Cron {
            expr: expr.to_string(),
            reason: reason.to_string(),
        };
        let written = expr.trim();
        // croner knows neither of these; `@midnight` is cron's other name for `@daily`.
        let pattern = match written.to_ascii_lowercase().as_str() {
            "@midnight" => "@daily",
            "@reboot" => return Err(refused("there is no boot in a server-side schedule")),
            _ => written,
        };
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(pattern)
            .map_err(|e| refused(&e.to_string()))?;
        let spec = Spec::Cron {
            expr: written.to_string(),
            tz: zone,
            cron: Box::new(cron),
        };
        // From the Unix epoch, an expression that can match finds a tick within
        // croner's search limit; one that cannot (`0 0 30 2 *`) is refused here,
        // not found silent later.
        if spec.next_after(0, 0).is_none() {
            return Err(SpecError::Never(written.to_string()));
        }
        Ok(spec)
    }

    /// An interval spec.
    pub fn every(every_ms: u64) -> Result<Spec, SpecError> {
        if !(MIN_EVERY_MS..=MAX_EVERY_MS).contains(&every_ms) {
            return Err(SpecError::Every(every_ms));
        }
        Ok(Spec::Every { every_ms })
    }

    /// The first tick after `after_ms` (strictly), for a schedule anchored at
    /// `anchor_ms` (an interval's origin; a cron spec ignores it). `None` only when a
    /// cron expression has no tick left within croner's search limit.
    pub fn next_after(&self, after_ms: u64, anchor_ms: u64) -> Option<u64> {
        match self {
            Spec::Every { every_ms } => {
                if after_ms < anchor_ms {
                    return Some(anchor_ms);
                }
                let k = (after_ms - anchor_ms) / every_ms + 1;
                anchor_ms.checked_add(k.checked_mul(*every_ms)?)
            }
            Spec::Cron { tz, cron, .. } => {
                let after = i64::try_from(after_ms).ok()?;
                let start = DateTime::<Utc>::from_timestamp_millis(after)?.with_timezone(tz);
                // croner works in whole seconds: from 10.5 s, "after" must not give 10 s.
                let next = cron.find_next_occurrence(&start, false).ok()?;
                let ms = u64::try_from(next.timestamp_millis()).ok()?;
                if ms > after_ms {
                    Some(ms)
                } else {
                    self.next_after(after_ms.div_ceil(1000) * 1000, anchor_ms)
                }
            }
        }
    }

    /// The last tick at or before `at_ms` (and not before `anchor_ms`, for an
    /// interval); `None` when there is none.
    pub fn last_at_or_before(&self, at_ms: u64, anchor_ms: u64) -> Option<u64> {
        match self {
            Spec::Every { every_ms } => {
                let k = at_ms.checked_sub(anchor_ms)? / every_ms;
                Some(anchor_ms + k * every_ms)
            }
            Spec::Cron { tz, cron, .. } => {
                let at = i64::try_from(at_ms).ok()?;
                let start = DateTime::<Utc>::from_timestamp_millis(at)?.with_timezone(tz);
                let last = cron.find_previous_occurrence(&start, true).ok()?;
                let ms = u64::try_from(last.timestamp_millis()).ok()?;
                // croner works in whole seconds: from 10.5 s, "at or before" may give 11 s.
                if ms <= at_ms {
                    Some(ms)
                } else {
                    self.last_at_or_before(at_ms.checked_sub(1000)?, anchor_ms)
                }
            }
        }
    }

    /// The ticks after `after_ms` up to and including `upto_ms`, at most `max` of them,
    /// and whether there were more.
    pub fn ticks_between(
        &self,
        after_ms: u64,
        upto_ms: u64,
        anchor_ms: u64,
        max: usize,
    ) -> (Vec<u64>, bool) {
        let mut ticks = Vec::new();
        let mut at = after_ms;
        while let Some(next) = self.next_after(at, anchor_ms) {
            if next > upto_ms {
                return (ticks, false);
            }
            if ticks.len() == max {
                return (ticks, true);
            }
            ticks.push(next);
            at = next;
        }
        (ticks, false)
    }

    /// The time zone ticks are read in (UTC for an interval).
    pub fn tz(&self) -> Tz {
        match self {
            Spec::Cron { tz, .. } => *tz,
            Spec::Every { .. } => Tz::UTC,
        }
    }

    /// An instant as the spec's time zone shows it, RFC 3339 with its offset.
    pub fn local(&self, ms: u64) -> String {
        let at = i64::try_from(ms)
            .ok()
            .and_then(|ms| self.tz().timestamp_millis_opt(ms).single());
        at.map_or_else(String::new, |t| t.to_rfc3339())
    }
}

impl fmt::Debug for Spec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Spec::Cron { expr, tz, .. } => write!(f, "cron {expr:?} in {tz}"),
            Spec::Every { every_ms } => write!(f, "every {every_ms} ms"),
        }
    }
}

impl PartialEq for Spec {
    fn eq(&self, other: &Spec) -> bool {
        match (self, other) {
            (Spec::Cron { expr: a, tz: x, .. }, Spec::Cron { expr: b, tz: y, .. }) => {
                a == b && x == y
            }
            (Spec::Every { every_ms: a }, Spec::Every { every_ms: b }) => a == b,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests;
