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

#[cfg(test)]
mod tests {
    use super::super::KeyAnswer;
    use super::*;

    fn record(history: bool) -> RetainedJob {
        RetainedJob {
            id: 7,
            tube: "emails".to_string(),
            state: WindowState::Deleted,
            key: Some("order-1".to_string()),
            deleted_at: "2026-12-05T21:40:03.250Z".to_string(),
            deleted_at_ms: 1_796_420_403_250,
            created_at: "2026-12-05T21:40:00Z".to_string(),
            created_at_ms: 1_796_420_400_000,
            pri: 1024,
            age: 3,
            delay: 0,
            ttr: 60,
            reserves: 2,
            timeouts: 0,
            releases: 1,
            buries: 0,
            kicks: 0,
            body_size: 22,
            history: history.then(|| HistoryView {
                history: vec![HistoryEvent {
                    at: "2026-12-05T21:40:00Z".to_string(),
                    at_ms: 1_796_420_400_000,
                    event: "put".to_string(),
                    conn: 0,
                    addr: None,
                }],
                history_dropped: 0,
            }),
        }
    }

    #[test]
    fn a_key_answer_reads_back_as_the_record_not_the_window() {
        let text = serde_json::to_string(&KeyAnswer::Retained(Box::new(record(true)))).unwrap();
        match serde_json::from_str::<KeyAnswer>(&text).unwrap() {
            KeyAnswer::Retained(r) => assert_eq!(*r, record(true)),
            other => panic!("{other:?}"),
        }
        let window = r#"{"id": 7, "state": "deleted"}"#;
        assert!(matches!(
            serde_json::from_str::<KeyAnswer>(window).unwrap(),
            KeyAnswer::Window(_)
        ));
    }

    #[test]
    fn a_listing_entry_has_no_history_fields() {
        let v = serde_json::to_value(record(false)).unwrap();
        assert!(v.get("history").is_none() && v.get("history_dropped").is_none());
        assert_eq!(v["state"], "deleted");
        let back: RetainedJob = serde_json::from_value(v).unwrap();
        assert_eq!(back, record(false));
    }
}
