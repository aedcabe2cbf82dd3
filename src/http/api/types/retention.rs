//! Retention's part of the API contract (docs/API.md, *Retention*; docs/RETENTION.md):
//! a deleted job's record as `GET /jobs/{id}` and `GET /tubes/{t}/keys/{k}` answer it,
//! a job's history as a list of events, and the page of `GET /retained` with the
//! limits and totals.
//!
//! Invariant: pure data, as `types.rs`. A record carries `"state": "deleted"` and
//! `stats-job`'s figures under the live job's names (so a client reads both alike);
//! instants are both RFC 3339 UTC text (for people) and ms since the Unix epoch (for
//! programs), as the schedules' are.

use serde::{Deserialize, Serialize};

use super::{Bounded, Cursor, MAX_PAGE, WindowState, blank_is_none};
use crate::store::JobId;

/// One event of a job's history: when, what (`put`, `reserve`, `release`, `bury`,
/// `dead_letter`, `kick`, `timeout`, `holder_closed`, `edit`, `delete`, `flush`), and
/// the connection that did it (0: none, the API or the server itself) with its address
/// while this instance knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub at: String,
    pub at_ms: u64,
    pub event: String,
    pub conn: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
}

/// A job's kept events, oldest first, and how many between the first and the latest
/// were not kept (the store keeps the first 8 and the latest 24).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryView {
    pub history: Vec<HistoryEvent>,
    pub history_dropped: u64,
}

/// A deleted job's record: its id, tube, key, when it was deleted, the figures
/// `stats-job` last showed (`pri`, `delay` and `ttr` in seconds, `age` at its delete,
/// the counters), its body's size and (its own answer and a key's) its history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetainedJob {
    pub id: JobId,
    pub tube: String,
    pub state: WindowState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    pub deleted_at: String,
    pub deleted_at_ms: u64,
    pub created_at: String,
    pub created_at_ms: u64,
    pub pri: u32,
    pub age: u64,
    pub delay: u64,
    pub ttr: u64,
    pub reserves: u32,
    pub timeouts: u32,
    pub releases: u32,
    pub buries: u32,
    pub kicks: u32,
    pub body_size: u64,
    /// The events (absent in a listing's entries).
    #[serde(default, skip_serializing_if = "Option::is_none", flatten)]
    pub history: Option<HistoryView>,
}

/// `GET /jobs/{id}` of a deleted, retained job: the record and, when `--retain-bodies`
/// kept it, its body as a live job's (`body` or `body_base64`, `body_truncated`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RetainedWithBody {
    #[serde(flatten)]
    pub job: RetainedJob,
    /// Whether the record kept the body (`--retain-bodies`).
    pub body_kept: bool,
    pub body_truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
}

/// `GET /retained?tube=&key=&cursor=&limit=` (`after` is taken for `cursor`); `key`
/// needs `tube` and answers the key's newest record alone.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RetainedQueryDoc {
    #[serde(default, deserialize_with = "blank_is_none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tube: Option<String>,
    #[serde(default, deserialize_with = "blank_is_none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    #[serde(default, alias = "after", deserialize_with = "blank_is_none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Cursor>,
    #[serde(default)]
    pub limit: Bounded<50, MAX_PAGE>,
}

/// The retention this instance runs with (`--retain*`): `on` false keeps nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionView {
    pub on: bool,
    /// How long a record is kept after its delete (ms).
    pub keep_ms: u64,
    pub max_jobs: u64,
    pub max_bytes: u64,
    pub bodies: bool,
}

/// The answer of `GET /retained`: the limits, the totals (records and their accounted
/// bytes), a page of records newest first (without their histories) and where the
/// next page starts.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RetainedPage {
    pub retention: RetentionView,
    pub records: u64,
    pub bytes: u64,
    pub jobs: Vec<RetainedJob>,
    pub next_cursor: Option<Cursor>,
}
