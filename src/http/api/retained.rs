//! Retention's routes (docs/API.md, *Retention*): `GET /retained` (the records newest
//! first, or a key's newest), and the views `GET /jobs/{id}` and the key find use for a
//! deleted, retained job and for a live job's history.
//!
//! Invariants: with retention off, no answer changes (no `history` field, a deleted
//! job is 404 as before); a record's events name their connection by id and, while
//! this instance knows it, by address; a page holds at most `limit` records and its
//! cursor is the last one's (deleted_ms, id).

use std::borrow::Cow;

use axum::http::StatusCode;
use base64::Engine as _;

use super::cursor::{CursorKey, decode, encode};
use super::error::{ApiError, ApiResult};
use super::extract::{ApiEngine, ApiQuery, tube_name};
use super::ok;
use super::schedules::utc;
use super::types::{
    BodyShown, HistoryEvent, HistoryView, JobQuery, RetainedJob, RetainedPage, RetainedQueryDoc,
    RetainedWithBody, RetentionView, WindowState,
};
use crate::engine::Engine;
use crate::protocol::ext::Key;
use crate::store::JobId;
use crate::store::retention::{EventKind, History, Retained, RetainedQuery};

/// The retained listing: before this (deleted_ms, id), `ms:id`.
pub struct RetainedBefore(pub u64, pub JobId);

impl CursorKey for RetainedBefore {
    fn text(&self) -> String {
        format!("{}:{}", self.0, self.1)
    }
    fn parse(text: &str) -> Option<RetainedBefore> {
        let (ms, id) = text.split_once(':')?;
        Some(RetainedBefore(ms.parse().ok()?, id.parse().ok()?))
    }
}

/// An event kind's name in the API (the store's serde name, snake_case).
pub fn event_name(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Put => "put",
        EventKind::Reserve => "reserve",
        EventKind::Release => "release",
        EventKind::Bury => "bury",
        EventKind::DeadLetter => "dead_letter",
        EventKind::Kick => "kick",
        EventKind::Timeout => "timeout",
        EventKind::HolderClosed => "holder_closed",
        EventKind::Edit => "edit",
        EventKind::Delete => "delete",
        EventKind::Flush => "flush",
    }
}

/// A history as the API shows it.
pub fn history_view(engine: &Engine, history: &History) -> HistoryView {
    HistoryView {
        history: history
            .events()
            .map(|e| HistoryEvent {
                at: utc(e.at_ms),
                at_ms: e.at_ms,
                event: event_name(e.kind).to_string(),
                conn: e.conn,
                addr: engine.conn_addr(e.conn).map(|a| a.to_string()),
            })
            .collect(),
        history_dropped: history.dropped(),
    }
}

/// A record as the API shows it; its history only when `with_history`.
pub fn retained_view(engine: &Engine, r: &Retained, with_history: bool) -> RetainedJob {
    let f = &r.figures;
    RetainedJob {
        id: r.id,
        tube: r.tube.as_str().to_string(),
        state: WindowState::Deleted,
        key: r.key.as_ref().map(|k| k.as_str().to_string()),
        deleted_at: utc(r.deleted_ms),
        deleted_at_ms: r.deleted_ms,
        created_at: utc(f.created_ms),
        created_at_ms: f.created_ms,
        pri: f.pri,
        age: r.deleted_ms.saturating_sub(f.created_ms) / 1000,
        delay: f.delay_ms / 1000,
        ttr: f.ttr_ms / 1000,
        reserves: f.reserves,
        timeouts: f.timeouts,
        releases: f.releases,
        buries: f.buries,
        kicks: f.kicks,
        body_size: r.body_len as u64,
        history: with_history.then(|| history_view(engine, &r.history)),
    }
}

/// The part of `body` a job query asks to see: (text, base64, truncated), as a live
/// job's answer gives it.
pub fn shown_body<'b>(
    q: &JobQuery,
    body: &'b [u8],
) -> (Option<Cow<'b, str>>, Option<String>, bool) {
    let cap = match q.body.unwrap_or_default() {
        BodyShown::None => 0,
        BodyShown::Preview => q.preview.size(),
        BodyShown::Full => body.len(),
    };
    let shown = &body[..cap.min(body.len())];
    let (mut text, mut base64) = (None, None);
    if cap > 0 {
        match std::str::from_utf8(shown) {
            Ok(s) => text = Some(Cow::Borrowed(s)),
            Err(_) => base64 = Some(base64::engine::general_purpose::STANDARD.encode(shown)),
        }
    }
    (text, base64, shown.len() < body.len())
}

/// `GET /jobs/{id}` of a retained record.
pub fn retained_answer(engine: &Engine, r: &Retained, q: &JobQuery) -> ApiResult {
    let (text, base64, truncated) = match &r.body {
        Some(body) => {
            let (t, b, cut) = shown_body(q, body);
            (t.map(Cow::into_owned), b, cut)
        }
        None => (None, None, false),
    };
    ok(
        StatusCode::OK,
        RetainedWithBody {
            job: retained_view(engine, r, true),
            body_kept: r.body.is_some(),
            body_truncated: truncated,
            body: text,
            body_base64: base64,
        },
    )
}

/// The retention limits as the API shows them.
pub fn retention_view(engine: &Engine) -> RetentionView {
    let l = engine.retention();
    RetentionView {
        on: l.is_on(),
        keep_ms: l.keep_ms,
        max_jobs: l.max_jobs as u64,
        max_bytes: l.max_bytes as u64,
        bodies: l.bodies,
    }
}

/// `GET /retained`.
pub(super) async fn list(
    ApiEngine(engine): ApiEngine,
    ApiQuery(q): ApiQuery<RetainedQueryDoc>,
) -> ApiResult {
    let tube = q.tube.as_deref().map(tube_name).transpose()?;
    let figures = engine.admin_retention_figures().await?;
    let mut page = RetainedPage {
        retention: retention_view(&engine),
        records: figures.records,
        bytes: figures.bytes,
        jobs: Vec::new(),
        next_cursor: None,
    };
    if let Some(key) = &q.key {
        let Some(tube) = &tube else {
            return Err(ApiError::bad_request("key: needs tube (a key is a tube's)"));
        };
        let key = Key::new(key.as_bytes())
            .ok_or_else(|| ApiError::bad_request(format!("{key:?} is not a key")))?;
        if let Some(r) = engine.admin_retained_by_key(tube, &key).await? {
            page.jobs.push(retained_view(&engine, &r, false));
        }
        return ok(StatusCode::OK, page);
    }
    let before: Option<RetainedBefore> = decode(q.cursor.as_ref())?;
    let limit = q.limit.size();
    let query = RetainedQuery {
        before: before.map(|b| (b.0, b.1)),
        limit,
        tube,
    };
    let records = engine.admin_list_retained(&query).await?;
    // A full page may have a next one; the last record is where it starts.
    if records.len() == limit {
        page.next_cursor = records
            .last()
            .map(|r| encode(&RetainedBefore(r.deleted_ms, r.id)));
    }
    page.jobs = records
        .iter()
        .map(|r| retained_view(&engine, r, false))
        .collect();
    ok(StatusCode::OK, page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cursor_comes_back() {
        let c = encode(&RetainedBefore(1_733_400_000_000, 42));
        let back: Option<RetainedBefore> = decode(Some(&c)).unwrap();
        let back = back.unwrap();
        assert_eq!((back.0, back.1), (1_733_400_000_000, 42));
    }
}
