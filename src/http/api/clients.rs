//! `GET /api/v1/clients`: a page of this instance's live beanstalk connections (see
//! `engine::clients_list`), in id order from `after`, at most `limit` (default 100).
//! A read: it passes the same access rules as the others (it shows peer addresses, so
//! `--admin-read-auth` asks for the token here too); a standby forwards it to the
//! leader, whose connections (relayed ones included) are the clients.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde::Serialize;

use super::{ApiError, ApiResult, engine_of, ok};
use crate::engine::clients_list::{ClientInfo, MAX_CLIENTS};
use crate::http::App;
use crate::store::{NANOS_PER_SEC, Nanos};

const DEFAULT_LIMIT: usize = 100;

#[derive(Serialize)]
struct PageJson<'a> {
    clients: Vec<ClientJson<'a>>,
    next: Option<String>,
    total: usize,
    held_complete: bool,
    /// Milliseconds since the epoch, as every time here.
    now: u64,
}

#[derive(Serialize)]
struct ClientJson<'a> {
    id: u64,
    peer: Option<&'a str>,
    relayed_from: Option<&'a str>,
    since: u64,
    using: &'a str,
    watching: Vec<&'a str>,
    watching_count: usize,
    producer: bool,
    worker: bool,
    held: Vec<HeldJson<'a>>,
    held_count: usize,
    blocked: Option<BlockedJson<'a>>,
    last_command: Option<LastJson>,
}

#[derive(Serialize)]
struct HeldJson<'a> {
    id: u64,
    tube: &'a str,
    /// Whole seconds left before its TTR runs out.
    time_left: u64,
}

#[derive(Serialize)]
struct BlockedJson<'a> {
    since: u64,
    /// When it gives up (timeout or DEADLINE_SOON margin); absent: never.
    until: Option<u64>,
    tubes: Vec<&'a str>,
}

#[derive(Serialize)]
struct LastJson {
    command: &'static str,
    at: u64,
}

fn ms(t: Nanos) -> u64 {
    t / 1_000_000
}

impl<'a> ClientJson<'a> {
    fn of(c: &'a ClientInfo, now: Nanos) -> ClientJson<'a> {
        ClientJson {
            id: c.id,
            peer: c.peer.as_deref(),
            relayed_from: c.relayed_from.as_deref(),
            since: ms(c.since),
            using: c.using.as_str(),
            watching: c.watching.iter().map(|t| t.as_str()).collect(),
            watching_count: c.watching_count,
            producer: c.producer,
            worker: c.worker,
            held: c
                .held
                .iter()
                .map(|j| HeldJson {
                    id: j.id,
                    tube: j.tube.as_str(),
                    time_left: j
                        .deadline
                        .map_or(0, |d| d.saturating_sub(now) / NANOS_PER_SEC),
                })
                .collect(),
            held_count: c.held_count,
            blocked: c.blocked.as_ref().map(|b| BlockedJson {
                since: ms(b.since),
                until: b.until.map(ms),
                tubes: b
                    .watched
                    .iter()
                    .take(crate::engine::clients_list::SHOWN_TUBES)
                    .map(|t| t.as_str())
                    .collect(),
            }),
            last_command: c.last_command.map(|(command, at)| LastJson {
                command,
                at: ms(at),
            }),
        }
    }
}

pub(super) async fn clients(
    State(app): State<Arc<App>>,
    Query(p): Query<HashMap<String, String>>,
) -> ApiResult {
    let engine = engine_of(&app)?;
    let limit = match p.get("limit").filter(|v| !v.is_empty()) {
        None => DEFAULT_LIMIT,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=MAX_CLIENTS).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "limit must be 1 to {MAX_CLIENTS}"
                )));
            }
        },
    };
    let after = match p.get("after").filter(|v| !v.is_empty()) {
        None => 0,
        Some(v) => v
            .parse::<u64>()
            .map_err(|_| ApiError::bad_request(format!("after: {v:?} is not a connection id")))?,
    };
    let page = engine.admin_clients(after, limit).await?;
    let body = PageJson {
        clients: page
            .clients
            .iter()
            .map(|c| ClientJson::of(c, page.now))
            .collect(),
        next: page.next.map(|n| n.to_string()),
        total: page.total,
        held_complete: page.held_complete,
        now: ms(page.now),
    };
    ok(StatusCode::OK, body)
}
