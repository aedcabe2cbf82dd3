//! The operator API's contract as types: every request body, query and answer of
//! `/api/v1` (docs/API.md), `Serialize + Deserialize`, shared by the server (which
//! writes answers and reads requests) and redstalkctl (which does the opposite), so the
//! two cannot drift apart.
//!
//! Conventions, the same for every route:
//! - a list is paged by an opaque [`Cursor`]: the request's `cursor` (absent or empty:
//!   from the start) and `limit`, the answer's `next_cursor` (`null`: the end). A
//!   cursor's text may change between versions; a client only hands it back;
//! - a count in a query is a [`Bounded`]: absent or empty takes its default, else 1 to
//!   its maximum;
//! - every error is an [`ErrorBody`] whose [`ErrorCode`] decides the HTTP status;
//! - a job is a [`Job`] (`stats-job`'s figures under their names, its body size and
//!   its holder).
//!
//! Invariant: pure data (serde only). Answers borrow what they can (`Cow`), so the
//! server serializes a page of 1,000 jobs without copying their strings; a client
//! deserializes them owned.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::engine::JobStats;
use crate::engine::admin_bulk::MAX_SCAN;
pub use crate::store::JobState;
use crate::store::admin::MAX_LIST;
use crate::store::policy::{DeadReason, Rule};

mod retention;
pub use retention::{
    HistoryEvent, HistoryView, RetainedJob, RetainedPage, RetainedQueryDoc, RetainedWithBody,
    RetentionView,
};
mod changes;
pub use changes::{
    BulkArgs, BulkChange, BulkFilter, BulkRequest, BulkResult, Created, Deleted, Done, FlushTube,
    FlushedTube, KickTube, Kicked, Login, MoveJob, Paused, PutJob, SessionState, SetDelay, SetPri,
};
mod live;
pub use live::{
    BlockedIn, Client, ClientsPage, ClientsQuery, HeldJob, HistoryPage, HistoryQuery, LastCommand,
    LiveFigures, TubeHistory,
};
mod schedules;
pub use schedules::{
    FireKind, FireView, NextTick, ScheduleCursor, ScheduleList, ScheduleRan, ScheduleRemoved,
    ScheduleView,
};

/// A page's size as the request asks for it.
const MAX_PAGE: u64 = MAX_LIST as u64;

/// What went wrong, as a client tells errors apart (the status follows from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// A malformed parameter, cursor or body; a count beyond its bounds (400).
    BadRequest,
    /// The token is missing or wrong, or none is configured for changes (401).
    Unauthorized,
    /// A change from another origin (403).
    Forbidden,
    /// A change while the server runs `--admin-read-only` (403).
    ReadOnly,
    /// No such job, tube or route (404).
    NotFound,
    /// The route does not take this method (405).
    MethodNotAllowed,
    /// The job's state does not take the change (409).
    Conflict,
    /// The request body is larger than the route reads (413).
    PayloadTooLarge,
    /// Too many wrong tokens from this address: retry after `Retry-After` (429).
    TooManyRequests,
    /// The store is down, a change is not known to be persisted, the server drains,
    /// a standby cannot reach its leader (503).
    Unavailable,
    /// A code this client does not know (a newer server's).
    #[serde(other)]
    Unknown,
}

/// Every error's body: `{"error": {"code", "message"}}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    pub message: String,
}

/// Where a list resumes (opaque: given by the server, handed back by the client).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Cursor(pub String);

impl FromStr for Cursor {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Cursor, Self::Err> {
        Ok(Cursor(s.to_string()))
    }
}

/// A list's answer: where the next page starts (`None`: this was the last).
pub trait Paged {
    fn next_cursor(&self) -> Option<&Cursor>;
}

/// A count in a query: `DEFAULT` when absent or empty, else 1 to `MAX`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Bounded<const DEFAULT: u64, const MAX: u64>(u64);

impl<const DEFAULT: u64, const MAX: u64> Bounded<DEFAULT, MAX> {
    /// `n` as a client asks for it (the server checks the bounds).
    pub fn new(n: u64) -> Self {
        Bounded(n)
    }

    pub fn get(self) -> u64 {
        self.0
    }

    /// As a size (the bounds are far below `usize::MAX`).
    pub fn size(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

impl<const DEFAULT: u64, const MAX: u64> Default for Bounded<DEFAULT, MAX> {
    fn default() -> Self {
        Bounded(DEFAULT)
    }
}

impl<'de, const DEFAULT: u64, const MAX: u64> Deserialize<'de> for Bounded<DEFAULT, MAX> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Count<const DEFAULT: u64, const MAX: u64>;
        impl<const DEFAULT: u64, const MAX: u64> Visitor<'_> for Count<DEFAULT, MAX> {
            type Value = Bounded<DEFAULT, MAX>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a number from 1 to {MAX}")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                if (1..=MAX).contains(&n) {
                    Ok(Bounded(n))
                } else {
                    Err(E::custom(format!("must be 1 to {MAX}")))
                }
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                if s.is_empty() {
                    return Ok(Bounded(DEFAULT));
                }
                let n = s
                    .parse::<u64>()
                    .map_err(|_| E::custom(format!("must be 1 to {MAX}")))?;
                self.visit_u64(n)
            }
        }
        d.deserialize_any(Count::<DEFAULT, MAX>)
    }
}

/// An optional query value: absent or empty is `None`, else `T` parsed from the text.
pub fn blank_is_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    let text = Option::<String>::deserialize(d)?;
    match text.filter(|t| !t.is_empty()) {
        None => Ok(None),
        Some(t) => t.parse().map(Some).map_err(de::Error::custom),
    }
}

// ---- reads ----

/// How this instance keeps its jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Memory,
    Binlog,
    Leader,
    Shared,
}

/// What this instance does in its mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceRole {
    /// Serves its own engine (memory, `-b`, shared mode).
    Serving,
    /// Leads (leader mode).
    Leader,
    /// Relays its clients and forwards the API to the leader (leader mode).
    Standby,
}

/// `GET /whoami`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WhoAmI {
    pub version: String,
    pub mode: Mode,
    pub role: InstanceRole,
    pub instance: String,
    pub read_only: bool,
    pub reads_need_token: bool,
    pub changes_allowed: bool,
}

/// A stats document's figures (`stats`, `stats-tube`): beanstalkd's keys in its order,
/// numbers as numbers, `draining` a boolean, `rusage-*` seconds as a fraction.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StatsDoc(pub Map<String, Value>);

/// Which page of a list: after `cursor` (none: the first), at most `limit` entries
/// (`DEFAULT` when not given, at most `MAX`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PageQuery<const DEFAULT: u64, const MAX: u64> {
    #[serde(default, deserialize_with = "blank_is_none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Cursor>,
    #[serde(default)]
    pub limit: Bounded<DEFAULT, MAX>,
}

impl<const DEFAULT: u64, const MAX: u64> PageQuery<DEFAULT, MAX> {
    /// The page after `cursor`, of `limit` entries.
    pub fn new(cursor: Option<Cursor>, limit: u64) -> Self {
        PageQuery {
            cursor,
            limit: Bounded::new(limit),
        }
    }
}

/// `GET /tubes?cursor=&limit=`.
pub type TubesQuery = PageQuery<50, MAX_PAGE>;

/// The answer of `GET /tubes`: tubes by name.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TubesPage {
    pub tubes: Vec<StatsDoc>,
    pub next_cursor: Option<Cursor>,
}

/// A job: `stats-job`'s figures under their names, its key (a keyed job's only), its
/// body size, and for a reserved job who holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job<'a> {
    #[serde(flatten)]
    pub stats: Cow<'a, JobStats>,
    /// A keyed job's key (absent: the job has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<Cow<'a, str>>,
    pub body_size: u64,
    pub holder: Option<HeldBy<'a>>,
    /// Why a tube policy's dead letter rule buried it (absent: it did not, or the job
    /// left the buried state since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_letter: Option<Box<DeadLetter>>,
}

/// A dead letter's reason: which limit (`reserves` or `timeouts`), the job's count and
/// the limit, and the same in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    #[serde(flatten)]
    pub why: DeadReason,
    pub reason: String,
}

impl From<DeadReason> for DeadLetter {
    fn from(why: DeadReason) -> DeadLetter {
        DeadLetter {
            reason: why.to_string(),
            why,
        }
    }
}

/// `GET /policies`: every tube policy, most specific first, and whether they persist
/// (`false`: memory mode, this process only).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyList {
    pub policies: Vec<Rule>,
    pub persisted: bool,
}

/// `DELETE /policies/{tubes}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyRemoved {
    pub removed: bool,
}

/// Who holds a reserved job: the instance, the client's address (known only on that
/// instance), its connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldBy<'a> {
    pub instance: Cow<'a, str>,
    pub addr: Option<Cow<'a, str>>,
    pub conn: u64,
}

/// The answer of `GET /tubes/{tube}/keys/{key}`: the key's job, or the job deleted
/// inside the key's dedupe window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum KeyAnswer<'a> {
    Job(Box<Job<'a>>),
    /// The key's job is deleted and retained (`--retain`): its record (a superset of
    /// the window's `id` and `state`).
    Retained(Box<RetainedJob>),
    Window(KeyWindow),
}

/// A key inside its dedupe window: the deleted job's id, and `"state": "deleted"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyWindow {
    pub id: u64,
    pub state: WindowState,
}

/// The one state a window's answer names (a job's states are [`JobState`]'s).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowState {
    Deleted,
}

/// `GET /tubes/{tube}/jobs?state=&cursor=&limit=`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct JobsQuery {
    #[serde(default, deserialize_with = "blank_is_none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    #[serde(flatten)]
    pub page: PageQuery<50, MAX_PAGE>,
}

/// The answer of `GET /tubes/{tube}/jobs`: in the order the server takes them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobsPage<'a> {
    pub tube: Cow<'a, str>,
    pub state: JobState,
    pub jobs: Vec<Job<'a>>,
    pub next_cursor: Option<Cursor>,
}

/// How much of a job's body `GET /jobs/{id}` shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BodyShown {
    None,
    #[default]
    Preview,
    Full,
}

impl FromStr for BodyShown {
    type Err = String;

    fn from_str(s: &str) -> Result<BodyShown, String> {
        match s {
            "none" => Ok(BodyShown::None),
            "preview" => Ok(BodyShown::Preview),
            "full" => Ok(BodyShown::Full),
            other => Err(format!("body={other}: expected none, preview or full")),
        }
    }
}

/// `GET /jobs/{id}?body=&preview=`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct JobQuery {
    #[serde(default, deserialize_with = "blank_is_none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<BodyShown>,
    #[serde(default)]
    pub preview: Bounded<1024, 65_536>,
}

/// The answer of `GET /jobs/{id}`: the job, and its body (or its first bytes) as text
/// when that is UTF-8, else in base64.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobWithBody<'a> {
    #[serde(flatten)]
    pub job: Job<'a>,
    pub body_truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_base64: Option<String>,
    /// Its events so far: only while retention is on (`--retain`).
    #[serde(default, skip_serializing_if = "Option::is_none", flatten)]
    pub history: Option<HistoryView>,
}

/// `GET /search?contains=&tube=&state=&scan=&cursor=`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SearchQuery {
    #[serde(default)]
    pub contains: String,
    #[serde(default, deserialize_with = "blank_is_none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tube: Option<String>,
    #[serde(default, deserialize_with = "blank_is_none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<JobState>,
    #[serde(default)]
    pub scan: Bounded<1000, { MAX_SCAN as u64 }>,
    #[serde(default, deserialize_with = "blank_is_none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor: Option<Cursor>,
}

/// The answer of `GET /search`: `done` once every job was looked at.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SearchPage<'a> {
    pub jobs: Vec<Job<'a>>,
    pub scanned: u64,
    pub next_cursor: Option<Cursor>,
    pub done: bool,
}

impl Paged for TubesPage {
    fn next_cursor(&self) -> Option<&Cursor> {
        self.next_cursor.as_ref()
    }
}

impl Paged for JobsPage<'_> {
    fn next_cursor(&self) -> Option<&Cursor> {
        self.next_cursor.as_ref()
    }
}

impl Paged for SearchPage<'_> {
    fn next_cursor(&self) -> Option<&Cursor> {
        self.next_cursor.as_ref()
    }
}

impl Paged for ClientsPage<'_> {
    fn next_cursor(&self) -> Option<&Cursor> {
        self.next_cursor.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_read_blank_as_absent_and_check_bounds() {
        let q: JobsQuery = serde_urlencoded::from_str("state=&cursor=&limit=").unwrap();
        assert_eq!(
            (q.state, q.page.cursor, q.page.limit.get()),
            (None, None, 50)
        );
        let q: JobsQuery = serde_urlencoded::from_str("state=buried&limit=1000").unwrap();
        assert_eq!(
            (q.state, q.page.limit.get()),
            (Some(JobState::Buried), 1000)
        );
        let q: JobsQuery = serde_urlencoded::from_str("cursor=abc").unwrap();
        assert_eq!(q.page.cursor, Some(Cursor("abc".into())));
        for bad in ["limit=0", "limit=1001", "limit=x", "state=gone"] {
            assert!(
                serde_urlencoded::from_str::<JobsQuery>(bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_client_writes_the_query_the_server_reads() {
        let q = SearchQuery {
            contains: "a b&c".into(),
            state: Some(JobState::Delayed),
            scan: Bounded::new(200),
            cursor: Some(Cursor("x-y".into())),
            ..SearchQuery::default()
        };
        let text = serde_urlencoded::to_string(&q).unwrap();
        assert!(!text.contains("tube="), "{text}");
        let back: SearchQuery = serde_urlencoded::from_str(&text).unwrap();
        assert_eq!(
            (back.contains.as_str(), back.state, back.scan.get()),
            ("a b&c", Some(JobState::Delayed), 200)
        );
        assert_eq!(back.cursor, q.cursor);
    }

    #[test]
    fn a_job_is_stats_jobs_figures_then_its_size_and_holder() {
        let job = Job {
            dead_letter: None,
            stats: Cow::Owned(JobStats {
                id: 7,
                tube: "emails".into(),
                state: JobState::Reserved,
                pri: 1024,
                age: 12,
                delay: 0,
                ttr: 60,
                time_left: 48,
                file: 0,
                reserves: 1,
                timeouts: 0,
                releases: 0,
                buries: 0,
                kicks: 0,
            }),
            key: None,
            body_size: 118,
            holder: Some(HeldBy {
                instance: "e7c5".into(),
                addr: None,
                conn: 42,
            }),
        };
        let text = serde_json::to_string(&job).unwrap();
        assert_eq!(
            text,
            r#"{"id":7,"tube":"emails","state":"reserved","pri":1024,"age":12,"delay":0,"ttr":60,"time-left":48,"file":0,"reserves":1,"timeouts":0,"releases":0,"buries":0,"kicks":0,"body_size":118,"holder":{"instance":"e7c5","addr":null,"conn":42}}"#
        );
        let back: Job = serde_json::from_str(&text).unwrap();
        assert_eq!(back, job);
    }

    #[test]
    fn an_unknown_error_code_is_read_as_unknown() {
        let e: ErrorBody =
            serde_json::from_str(r#"{"error": {"code": "gone_fishing", "message": "m"}}"#).unwrap();
        assert_eq!(e.error.code, ErrorCode::Unknown);
        let known = serde_json::to_string(&ErrorCode::PayloadTooLarge).unwrap();
        assert_eq!(known, "\"payload_too_large\"");
    }
}
