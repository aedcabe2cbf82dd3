//! The history sampler and `GET /api/v1/history` (docs/API.md): once a minute, one task
//! per process reads the first [`MAX_TUBES`] tubes' tallies through
//! [`Engine::snapshot`] and keeps each minute's deltas in an [`History`] (see
//! `engine::history`); the API returns the last N minutes per tube.
//!
//! Invariants:
//! - one sampler per HTTP listener, started with it and ended by its stop token; it
//!   never runs more than once a period, and touches the hot path not at all (the
//!   tallies are the store's, kept under the lock each command takes anyway);
//! - the lock on the history is never held across an `.await`;
//! - when the engine changes (a leader-mode instance loses or takes the lead), the
//!   next sample only sets the base: one engine's counts are not another's;
//! - leader mode: the leader also writes each minute to Redis (`cluster::history`,
//!   failures logged once, never retried into a backlog), and an instance that takes
//!   the lead reads the last 24 hours back first, so the history survives a change of
//!   leader. Memory, `-b` and shared modes keep it in this process only.
//!
//! The period is a minute; `REDSTALK_HISTORY_PERIOD_MS` shortens it for tests (each
//! "minute" of the history is then one period).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Query, State};
use axum::http::StatusCode;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::api::{ApiError, ApiResult, ok};
use super::{App, Source};
use crate::cluster::Cluster;
use crate::engine::Engine;
use crate::engine::history::{History, KEEP, MAX_TUBES, Tally};
use crate::util::lock;

/// The sampler's period unless the environment shortens it.
pub const PERIOD: Duration = Duration::from_secs(60);

/// The history and its period.
#[derive(Debug)]
pub struct Recorder {
    history: Mutex<History>,
    period_ms: u64,
}

impl Recorder {
    /// Start the sampler for `source`; it ends when `stop` is cancelled.
    pub fn start(source: Source, stop: CancellationToken) -> Arc<Recorder> {
        let period_ms = std::env::var("REDSTALK_HISTORY_PERIOD_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&ms| ms >= 10)
            .unwrap_or(PERIOD.as_millis() as u64);
        let recorder = Arc::new(Recorder {
            history: Mutex::new(History::default()),
            period_ms,
        });
        tokio::spawn(sample(recorder.clone(), source, stop));
        recorder
    }

    /// The current period's number since the Unix epoch.
    fn period_now(&self) -> u64 {
        unix_ms() / self.period_ms
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Once a period, at its boundary on the wall clock, record the period that ended. The
/// base is taken at once when the sampler starts, and within a second of an engine
/// appearing (a leadership), so little of a new engine's work goes uncounted.
async fn sample(recorder: Arc<Recorder>, source: Source, stop: CancellationToken) {
    const LOOK_FOR_ENGINE_MS: u64 = 1_000;
    let mut seen: Option<Arc<Engine>> = None;
    let mut failing = false;
    let mut first = true;
    loop {
        let now = unix_ms();
        let next = (now / recorder.period_ms + 1) * recorder.period_ms;
        let wait = match (first, &seen) {
            (true, _) => 0,
            (false, None) => (next - now).min(LOOK_FOR_ENGINE_MS),
            (false, Some(_)) => next - now,
        };
        first = false;
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(wait)) => {}
            () = stop.cancelled() => return,
        }
        // The last period that ended (a wake before a boundary only takes a base).
        let ended = (unix_ms() / recorder.period_ms).saturating_sub(1);
        let Some(engine) = source.engine() else {
            seen = None;
            continue;
        };
        if !seen.as_ref().is_some_and(|s| Arc::ptr_eq(s, &engine)) {
            lock(&recorder.history).rebase();
            seen = Some(engine.clone());
            if let Source::Cluster(c) = &source {
                reload(&recorder, c, ended).await;
            }
        }
        let snapshot = match engine.snapshot(MAX_TUBES).await {
            Ok(s) => s,
            Err(err) => {
                tracing::warn!(%err, "history: could not read the tubes' figures; this minute is skipped");
                continue;
            }
        };
        let tubes: Vec<(String, Tally)> = snapshot
            .tubes
            .iter()
            .map(|t| (t.name.clone(), Tally::of(t)))
            .collect();
        let points = {
            let mut h = lock(&recorder.history);
            h.record(ended, &tubes, snapshot.tubes_omitted);
            h.points_at(ended)
        };
        if let Source::Cluster(c) = &source {
            let ttl_ms = (KEEP as u64 + 60) * recorder.period_ms;
            match c.save_history(ended, &points, ttl_ms).await {
                Ok(()) if failing => {
                    tracing::info!("history: written to Redis again");
                    failing = false;
                }
                Ok(()) => {}
                Err(err) if !failing => {
                    tracing::warn!(%err, "history: could not write this minute to Redis (said once until it works again)");
                    failing = true;
                }
                Err(_) => {}
            }
        }
    }
}

/// This instance took the lead: the history is the namespace's, read back from Redis
/// (what the previous leaders recorded), not what this process kept before.
async fn reload(recorder: &Recorder, cluster: &Cluster, now: u64) {
    match cluster.load_history(now).await {
        Ok(points) => {
            let mut h = lock(&recorder.history);
            h.clear();
            for (tube, p) in &points {
                h.push(tube, *p);
            }
            tracing::info!(
                points = points.len(),
                tubes = h.tubes(),
                "history: read back from Redis"
            );
        }
        Err(err) => {
            tracing::warn!(%err, "history: could not read it back from Redis; it starts empty")
        }
    }
}

/// `GET /api/v1/history?minutes=N&tube=NAME`: the last N minutes (1 to 1,440; 60 by
/// default) of every kept tube, or of one.
pub(super) async fn api(
    State(app): State<Arc<App>>,
    Query(p): Query<HashMap<String, String>>,
) -> ApiResult {
    let minutes = match p.get("minutes").filter(|v| !v.is_empty()) {
        None => 60,
        Some(v) => match v.parse::<u64>() {
            Ok(n) if (1..=KEEP as u64).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "minutes must be 1 to {KEEP}"
                )));
            }
        },
    };
    let tube = p.get("tube").filter(|t| !t.is_empty());
    let r = &app.history;
    // The last period that ended.
    let now = r.period_now().saturating_sub(1);
    let body = {
        let h = lock(&r.history);
        let tubes: Vec<_> = h
            .query(now, minutes, tube.map(String::as_str))
            .into_iter()
            .map(|(name, points)| json!({"name": name, "points": points}))
            .collect();
        json!({
            "period_ms": r.period_ms,
            "now": now,
            "minutes": minutes,
            "tubes": tubes,
            "tubes_kept": h.tubes(),
            "tubes_omitted": h.omitted(),
        })
    };
    ok(StatusCode::OK, body)
}
