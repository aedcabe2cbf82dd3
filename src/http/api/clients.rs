//! `GET /api/v1/clients`: a page of this instance's live beanstalk connections (see
//! `engine::clients_list`), in id order from a cursor, at most `limit` (default 100).
//! A read: it passes the same access rules as the others (it shows peer addresses, so
//! `--admin-read-auth` asks for the token here too); a standby forwards it to the
//! leader, whose connections (relayed ones included) are the clients.

use std::borrow::Cow;

use axum::http::StatusCode;

use super::cursor::{ConnAfter, decode, encode};
use super::error::ApiResult;
use super::extract::{ApiEngine, ApiQuery};
use super::ok;
use super::types::{BlockedIn, Client, ClientsPage, ClientsQuery, HeldJob, LastCommand};
use crate::engine::clients::SHOWN_TUBES;
use crate::engine::clients_list::ClientInfo;
use crate::protocol::TubeName;
use crate::store::{NANOS_PER_SEC, Nanos};

/// Milliseconds since the epoch, as every time here.
fn ms(t: Nanos) -> u64 {
    t / 1_000_000
}

/// A tube's name, borrowed.
fn name(t: &TubeName) -> Cow<'_, str> {
    Cow::Borrowed(t.as_str())
}

fn client_view(c: &ClientInfo, now: Nanos) -> Client<'_> {
    Client {
        id: c.id,
        peer: c.peer.as_deref().map(Cow::Borrowed),
        relayed_from: c.relayed_from.as_deref().map(Cow::Borrowed),
        since: ms(c.since),
        using: name(&c.using),
        watching: c.watching.iter().map(name).collect(),
        watching_count: c.watching_count,
        producer: c.producer,
        worker: c.worker,
        held: c
            .held
            .iter()
            .map(|j| HeldJob {
                id: j.id,
                tube: name(&j.tube),
                time_left: j
                    .deadline
                    .map_or(0, |d| d.saturating_sub(now) / NANOS_PER_SEC),
            })
            .collect(),
        held_count: c.held_count,
        blocked: c.blocked.as_ref().map(|b| BlockedIn {
            since: ms(b.since),
            until: b.until.map(ms),
            tubes: b.watched.iter().take(SHOWN_TUBES).map(name).collect(),
        }),
        last_command: c.last_command.map(|(command, at)| LastCommand {
            command: Cow::Borrowed(command),
            at: ms(at),
        }),
    }
}

pub(super) async fn clients(
    ApiEngine(engine): ApiEngine,
    ApiQuery(q): ApiQuery<ClientsQuery>,
) -> ApiResult {
    let after = decode::<ConnAfter>(q.cursor.as_ref())?.map_or(0, |a| a.0);
    let page = engine.admin_clients(after, q.limit.size()).await?;
    ok(
        StatusCode::OK,
        ClientsPage {
            clients: page
                .clients
                .iter()
                .map(|c| client_view(c, page.now))
                .collect(),
            next_cursor: page.next.map(|n| encode(&ConnAfter(n))),
            total: page.total,
            held_complete: page.held_complete,
            now: ms(page.now),
        },
    )
}
