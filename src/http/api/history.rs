//! `GET /api/v1/history?minutes=N&tube=NAME`: the last N minutes (1 to 1,440; 60 by
//! default) of every kept tube, or of one, from the listener's sampler
//! (`http::history`).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;

use super::error::ApiResult;
use super::extract::ApiQuery;
use super::ok;
use super::types::HistoryQuery;
use crate::http::App;

pub(super) async fn history(
    State(app): State<Arc<App>>,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> ApiResult {
    ok(
        StatusCode::OK,
        app.history.page(q.minutes.get(), q.tube.as_deref()),
    )
}
