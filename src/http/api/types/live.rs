//! The operator API's types for what the console watches as it changes: the per-minute
//! history, the live connections and the figures `GET /events` streams.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{Bounded, Cursor, PageQuery, StatsDoc, blank_is_none};
use crate::engine::clients_list::MAX_CLIENTS;
use crate::engine::history::{KEEP, Point};

/// `GET /history?minutes=&tube=`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct HistoryQuery {
    #[serde(default)]
    pub minutes: Bounded<60, { KEEP as u64 }>,
    #[serde(default, deserialize_with = "blank_is_none")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tube: Option<String>,
}

/// The answer of `GET /history`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HistoryPage {
    pub period_ms: u64,
    /// The last minute that ended.
    pub now: u64,
    pub minutes: u64,
    pub tubes: Vec<TubeHistory>,
    pub tubes_kept: usize,
    pub tubes_omitted: u64,
}

/// One tube's minutes, oldest first (a minute with nothing in it is left out).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct TubeHistory {
    pub name: String,
    pub points: Vec<Point>,
}

/// `GET /clients?cursor=&limit=`.
pub type ClientsQuery = PageQuery<100, { MAX_CLIENTS as u64 }>;

/// The answer of `GET /clients`: live connections by id. Times are Unix milliseconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ClientsPage<'a> {
    pub clients: Vec<Client<'a>>,
    pub next_cursor: Option<Cursor>,
    pub total: usize,
    pub held_complete: bool,
    pub now: u64,
}

/// One beanstalk connection.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Client<'a> {
    pub id: u64,
    pub peer: Option<Cow<'a, str>>,
    pub relayed_from: Option<Cow<'a, str>>,
    pub since: u64,
    pub using: Cow<'a, str>,
    pub watching: Vec<Cow<'a, str>>,
    pub watching_count: usize,
    pub producer: bool,
    pub worker: bool,
    pub held: Vec<HeldJob<'a>>,
    pub held_count: usize,
    pub blocked: Option<BlockedIn<'a>>,
    pub last_command: Option<LastCommand<'a>>,
}

/// A job a connection holds reserved.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HeldJob<'a> {
    pub id: u64,
    pub tube: Cow<'a, str>,
    /// Whole seconds left before its TTR runs out.
    pub time_left: u64,
}

/// The reserve a connection waits in.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BlockedIn<'a> {
    pub since: u64,
    /// When it gives up (timeout or DEADLINE_SOON margin); `None`: never.
    pub until: Option<u64>,
    pub tubes: Vec<Cow<'a, str>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LastCommand<'a> {
    pub command: Cow<'a, str>,
    pub at: u64,
}

/// One snapshot of `GET /events` (Server-Sent Events): the server's figures and the
/// first tubes', or the error that stands instead.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LiveFigures {
    /// Unix milliseconds.
    pub at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<StatsDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tubes: Option<Vec<StatsDoc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tube_count: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
