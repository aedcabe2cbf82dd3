//! Retention (docs/plans/retention.md; issue 32 part 3): what a store keeps of a job
//! after its delete, when the operator asked for it — the job's figures, key, history
//! and (opt-in) body — and the bounded set of such records.
//!
//! Values only, no I/O: the stores record [`Event`]s into a live job's [`History`] and
//! move the job's [`Retained`] record into their [`RetainedSet`] at delete.
//!
//! Invariants: a history holds at most [`HISTORY_HEAD`] + [`HISTORY_TAIL`] events (the
//! first ones and the latest ones; those between are counted, not kept); a set holds at
//! most `max_jobs` records and `max_bytes` of their accounted size, and none older than
//! `keep_ms` once [`RetainedSet::expire`] ran; the oldest go first; the key index names
//! the newest retained job of each (tube, key).

use std::collections::{BTreeSet, HashMap, VecDeque};

use bytes::Bytes;
use serde::Serialize;

use super::JobId;
use super::keys::Key;
use crate::protocol::TubeName;

/// The first events of a job a history keeps (its put and first reserves).
pub const HISTORY_HEAD: usize = 8;
/// The latest events of a job a history keeps.
pub const HISTORY_TAIL: usize = 24;

/// How much to retain (`--retain`, `--retain-jobs`, `--retain-bytes`, `--retain-bodies`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionLimits {
    /// How long a record is kept after its delete (ms); 0: retention is off.
    pub keep_ms: u64,
    pub max_jobs: usize,
    pub max_bytes: usize,
    /// Whether a record keeps the job's body.
    pub bodies: bool,
}

impl RetentionLimits {
    /// Retention off: nothing recorded, nothing kept.
    pub const OFF: RetentionLimits = RetentionLimits {
        keep_ms: 0,
        max_jobs: 100_000,
        max_bytes: 64 << 20,
        bodies: false,
    };

    pub fn is_on(&self) -> bool {
        self.keep_ms > 0 && self.max_jobs > 0
    }
}

impl Default for RetentionLimits {
    fn default() -> Self {
        RetentionLimits::OFF
    }
}

/// What happened to a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Put,
    Reserve,
    Release,
    /// Buried by its holder.
    Bury,
    /// Buried by a tube policy's dead letter rule.
    DeadLetter,
    Kick,
    /// Its TTR lapsed (the holder's connection in `conn`).
    Timeout,
    /// Its holder's connection closed.
    HolderClosed,
    /// Changed in place through the operator API.
    Edit,
    Delete,
    /// Deleted by a flush.
    Flush,
}

/// Each kind's letter in [`History::encode`]'s text form (the `-b` log's records, the
/// Redis hashes and shared mode's scripts all write this one form).
const KIND_CODES: [(EventKind, u8); 11] = [
    (EventKind::Put, b'p'),
    (EventKind::Reserve, b'r'),
    (EventKind::Release, b'l'),
    (EventKind::Bury, b'b'),
    (EventKind::DeadLetter, b'x'),
    (EventKind::Kick, b'k'),
    (EventKind::Timeout, b't'),
    (EventKind::HolderClosed, b'c'),
    (EventKind::Edit, b'e'),
    (EventKind::Delete, b'd'),
    (EventKind::Flush, b'f'),
];

impl EventKind {
    pub fn code(self) -> u8 {
        KIND_CODES
            .iter()
            .find(|(kind, _)| *kind == self)
            .map_or(b'?', |(_, code)| *code)
    }

    pub fn from_code(code: u8) -> Option<EventKind> {
        KIND_CODES
            .iter()
            .find(|(_, c)| *c == code)
            .map(|(kind, _)| *kind)
    }
}

/// A history's text form that did not parse (a corrupt log record or Redis field).
#[derive(Debug, thiserror::Error)]
#[error("malformed job history near byte {at}")]
pub struct HistoryError {
    pub at: usize,
}

/// One event: when, what, and the connection that did it (0: none, or the API).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Event {
    pub at_ms: u64,
    pub kind: EventKind,
    pub conn: u64,
}

/// A job's events: the first [`HISTORY_HEAD`] and the latest [`HISTORY_TAIL`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    head: Vec<Event>,
    tail: VecDeque<Event>,
    /// Events between the head and the tail that were not kept.
    dropped: u64,
}

impl History {
    pub fn push(&mut self, event: Event) {
        if self.head.len() < HISTORY_HEAD {
            self.head.push(event);
            return;
        }
        if self.tail.len() == HISTORY_TAIL {
            self.tail.pop_front();
            self.dropped += 1;
        }
        self.tail.push_back(event);
    }

    /// The kept events, oldest first.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.head.iter().chain(self.tail.iter())
    }

    /// How many events between the first and the latest were not kept (they came
    /// after [`History::events`]' head, before its tail).
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.head.is_empty()
    }

    fn bytes(&self) -> usize {
        self.len() * std::mem::size_of::<Event>()
    }

    /// The text form: the dropped count, then each kept event as `<at_ms><code><conn>`,
    /// space-separated (`"0 1733400000000p0 1733400000250r7 1733400000300d7"`). Made
    /// to be appended to by a Lua script with string operations alone.
    pub fn encode(&self) -> String {
        use std::fmt::Write;
        let mut out = self.dropped.to_string();
        for e in self.events() {
            let _ = write!(out, " {}{}{}", e.at_ms, e.kind.code() as char, e.conn);
        }
        out
    }

    /// Read [`History::encode`]'s form back. Events past the bounds (a form written by
    /// a writer that kept more) are pushed as new ones, so the bounds still hold.
    pub fn decode(text: &[u8]) -> Result<History, HistoryError> {
        let mut words = text.split(|&b| b == b' ').filter(|w| !w.is_empty());
        let mut at = 0;
        let dropped = match words.next() {
            Some(word) => number(word).ok_or(HistoryError { at })?,
            None => return Ok(History::default()),
        };
        let mut history = History::default();
        for word in words {
            at = word.as_ptr() as usize - text.as_ptr() as usize;
            let split = word
                .iter()
                .position(|b| !b.is_ascii_digit())
                .ok_or(HistoryError { at })?;
            let kind = EventKind::from_code(word[split]).ok_or(HistoryError { at })?;
            let at_ms = number(&word[..split]).ok_or(HistoryError { at })?;
            let conn = number(&word[split + 1..]).ok_or(HistoryError { at })?;
            history.push(Event { at_ms, kind, conn });
        }
        history.dropped += dropped;
        Ok(history)
    }
}

fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// A deleted job's figures as `stats-job` last showed them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RetainedFigures {
    pub pri: u32,
    pub delay_ms: u64,
    pub ttr_ms: u64,
    pub created_ms: u64,
    pub reserves: u32,
    pub timeouts: u32,
    pub releases: u32,
    pub buries: u32,
    pub kicks: u32,
}

/// What is kept of a deleted job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retained {
    pub id: JobId,
    pub tube: TubeName,
    pub key: Option<Key>,
    pub deleted_ms: u64,
    pub figures: RetainedFigures,
    pub history: History,
    pub body_len: usize,
    /// The body, when the limits keep bodies.
    pub body: Option<Bytes>,
}

/// A listing of retained records: newest first, deleted before `before` ((deleted_ms,
/// id); `None`: from the newest), of `tube` only when given.
#[derive(Clone, Debug, Default)]
pub struct RetainedQuery {
    pub before: Option<(u64, JobId)>,
    pub limit: usize,
    pub tube: Option<TubeName>,
}

/// How much a store retains now (`/metrics`, the API's listing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RetentionFigures {
    pub records: u64,
    /// The records' accounted size ([`Retained::bytes`]).
    pub bytes: u64,
}

/// What a record is counted as against `max_bytes`: its own fields, its events, its
/// names and its body (not the allocator's overhead, which the docs state per mode).
const RECORD_OVERHEAD: usize = 128;

impl Retained {
    pub fn bytes(&self) -> usize {
        RECORD_OVERHEAD
            + self.tube.as_str().len()
            + self.key.as_ref().map_or(0, |k| k.as_str().len())
            + self.history.bytes()
            + self.body.as_ref().map_or(0, Bytes::len)
    }
}

/// The retained records of a store, oldest first, bounded by its limits.
#[derive(Debug, Default)]
pub struct RetainedSet {
    limits: RetentionLimits,
    by_id: HashMap<JobId, Retained>,
    /// (deleted_ms, id): eviction and listing order.
    order: BTreeSet<(u64, JobId)>,
    by_key: HashMap<(TubeName, Key), JobId>,
    bytes: usize,
}

impl RetainedSet {
    pub fn new(limits: RetentionLimits) -> RetainedSet {
        RetainedSet {
            limits,
            ..RetainedSet::default()
        }
    }

    pub fn limits(&self) -> RetentionLimits {
        self.limits
    }

    /// New limits: the set is cut to them at once; the ids evicted.
    pub fn set_limits(&mut self, limits: RetentionLimits) -> Vec<JobId> {
        self.limits = limits;
        let mut gone = Vec::new();
        if !limits.is_on() {
            gone.extend(self.order.iter().map(|(_, id)| *id));
            *self = RetainedSet::new(limits);
            return gone;
        }
        self.trim(&mut gone);
        gone
    }

    /// Keep `record` (its body dropped unless bodies are kept); the ids evicted to make
    /// room (possibly `record`'s own, when it alone is over the bytes bound).
    pub fn keep(&mut self, mut record: Retained) -> Vec<JobId> {
        let mut gone = Vec::new();
        if !self.limits.is_on() {
            return gone;
        }
        if !self.limits.bodies {
            record.body = None;
        }
        if let Some(old) = self.remove(record.id) {
            gone.push(old.id);
        }
        self.bytes += record.bytes();
        self.order.insert((record.deleted_ms, record.id));
        if let Some(key) = &record.key {
            self.by_key
                .insert((record.tube.clone(), key.clone()), record.id);
        }
        self.by_id.insert(record.id, record);
        self.trim(&mut gone);
        gone
    }

    /// Drop records deleted before `now_ms - keep_ms`, at most `max` of them; the ids.
    pub fn expire(&mut self, now_ms: u64, max: usize) -> Vec<JobId> {
        let horizon = now_ms.saturating_sub(self.limits.keep_ms);
        let mut gone = Vec::new();
        while gone.len() < max {
            match self.order.first() {
                Some(&(at, id)) if at < horizon => {
                    self.remove(id);
                    gone.push(id);
                }
                _ => break,
            }
        }
        gone
    }

    pub fn get(&self, id: JobId) -> Option<&Retained> {
        self.by_id.get(&id)
    }

    /// The newest retained job of `tube` with `key`.
    pub fn by_key(&self, tube: &TubeName, key: &Key) -> Option<&Retained> {
        let id = self.by_key.get(&(tube.clone(), key.clone()))?;
        self.by_id.get(id)
    }

    /// Up to `limit` records, newest first, deleted before `before` ((deleted_ms, id);
    /// `None`: from the newest), of `tube` only when given.
    pub fn page(
        &self,
        before: Option<(u64, JobId)>,
        limit: usize,
        tube: Option<&TubeName>,
    ) -> Vec<&Retained> {
        let upto = before.unwrap_or((u64::MAX, JobId::MAX));
        self.order
            .range(..upto)
            .rev()
            .filter_map(|(_, id)| self.by_id.get(id))
            .filter(|r| tube.is_none_or(|t| &r.tube == t))
            .take(limit)
            .collect()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// The oldest record's (deleted_ms, id).
    pub fn oldest(&self) -> Option<(u64, JobId)> {
        self.order.first().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The records' accounted size.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn trim(&mut self, gone: &mut Vec<JobId>) {
        while self.by_id.len() > self.limits.max_jobs || self.bytes > self.limits.max_bytes {
            let Some(&(_, id)) = self.order.first() else {
                break;
            };
            self.remove(id);
            gone.push(id);
        }
    }

    fn remove(&mut self, id: JobId) -> Option<Retained> {
        let record = self.by_id.remove(&id)?;
        self.order.remove(&(record.deleted_ms, id));
        self.bytes -= record.bytes();
        if let Some(key) = &record.key {
            let slot = (record.tube.clone(), key.clone());
            if self.by_key.get(&slot) == Some(&id) {
                self.by_key.remove(&slot);
            }
        }
        Some(record)
    }
}

#[cfg(test)]
mod tests;
