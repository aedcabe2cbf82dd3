//! The history sampler behind `GET /api/v1/history` (docs/API.md; the route is
//! `api::history`): once a minute, one task per process reads the first [`MAX_TUBES`]
//! tubes' tallies through [`Engine::snapshot`] and keeps each minute's deltas in a
//! [`TubeMinutes`] (see `engine::history`); [`Recorder::page`] gives the last N minutes
//! per tube.
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

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Source;
use super::api::types::{HistoryPage, TubeHistory};
use crate::cluster::Cluster;
use crate::engine::Engine;
use crate::engine::history::{KEEP, MAX_TUBES, Tally, TubeMinutes};
use crate::time::unix_ms;
use crate::util::lock;

/// The sampler's period unless the environment shortens it.
pub const PERIOD: Duration = Duration::from_secs(60);

/// The history and its period.
#[derive(Debug)]
pub struct Recorder {
    history: Mutex<TubeMinutes>,
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
            history: Mutex::new(TubeMinutes::default()),
            period_ms,
        });
        tokio::spawn(sample(recorder.clone(), source, stop));
        recorder
    }

    /// The current period's number since the Unix epoch.
    fn period_now(&self) -> u64 {
        unix_ms() / self.period_ms
    }

    /// The last `minutes` (up to the last one that ended) of every kept tube, or of
    /// `tube`.
    pub fn page(&self, minutes: u64, tube: Option<&str>) -> HistoryPage {
        let now = self.period_now().saturating_sub(1);
        let h = lock(&self.history);
        HistoryPage {
            period_ms: self.period_ms,
            now,
            minutes,
            tubes: h
                .query(now, minutes, tube)
                .into_iter()
                .map(|(name, points)| TubeHistory {
                    name: name.to_string(),
                    points,
                })
                .collect(),
            tubes_kept: h.tubes(),
            tubes_omitted: h.omitted(),
        }
    }
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
