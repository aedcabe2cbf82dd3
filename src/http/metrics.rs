//! `GET /metrics`: the Prometheus exposition, built at most one at a time and shared.
//!
//! Invariants:
//! - at most one exposition is being built (snapshot, then render); a scrape that
//!   arrives meanwhile waits for it and is answered the same bytes; a built exposition
//!   is answered again, as is, for [`REUSE`] after it was built, or for as long as it
//!   took to build if that was longer. So however many clients scrape, the store is
//!   read and the text rendered at most about once a second, and never more than half
//!   the time (a slow store, many tubes); one copy of the text is held however many
//!   responses send it;
//! - the snapshot lists at most `--metrics-tubes` tubes (see [`Engine::snapshot`]), so
//!   the work and the text are bounded whatever the number of tubes; the snapshot is
//!   taken on the runtime (store calls) and yields between tubes, the text is rendered
//!   on the blocking pool, never on the runtime's one thread;
//! - a build is bounded by [`SCRAPE_TIMEOUT`]; a failed one is not kept (the next
//!   scrape tries again);
//! - the listener's own figures (the console's event streams open, snapshots
//!   computed) are read at each scrape, rendered through their own table
//!   ([`exposition::render_listener`]) and sent after the shared text, which is not
//!   copied.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};

use super::{App, exposition};
use crate::engine::Engine;
use crate::redis::placement::Placements;
use crate::store::StoreError;
use crate::util::lock;

/// How long a built exposition is answered again (at least).
pub const REUSE: Duration = Duration::from_secs(1);
/// Upper bound of building one exposition (the store's own calls time out sooner; this
/// covers many tubes on a slow store).
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a scrape has no exposition.
#[derive(Clone, Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("store unavailable: {0}")]
    Store(#[source] Arc<StoreError>),
    #[error("store did not answer within {SCRAPE_TIMEOUT:?}")]
    Timeout,
    /// The build task ended without a result (it panicked): a defect.
    #[error("the exposition could not be built: {0}")]
    Build(Arc<str>),
}

type ScrapeInFlight = Shared<BoxFuture<'static, Result<Bytes, ScrapeError>>>;

/// The exposition being built, or the last one built.
enum Slot {
    Empty,
    Building(ScrapeInFlight),
    Built { until: Instant, text: Bytes },
}

/// The shared builder of expositions (one per listener).
pub(super) struct Scrapes {
    max_tubes: usize,
    /// Where the process's Redis namespaces live (none without Redis).
    placements: Arc<Placements>,
    slot: Mutex<Slot>,
}

impl Scrapes {
    pub(super) fn new(max_tubes: usize, placements: Arc<Placements>) -> Arc<Scrapes> {
        Arc::new(Scrapes {
            max_tubes,
            placements,
            slot: Mutex::new(Slot::Empty),
        })
    }

    /// An exposition of `engine`: the last one if recent, the one being built, or a
    /// new one.
    async fn get(self: &Arc<Self>, engine: Arc<Engine>) -> Result<Bytes, ScrapeError> {
        let pending = {
            let mut slot = self.lock();
            match &*slot {
                Slot::Built { until, text } if Instant::now() < *until => {
                    return Ok(text.clone());
                }
                // A build whose task died without updating the slot is over too.
                Slot::Building(p) if p.peek().is_none() => p.clone(),
                _ => {
                    let p = self.build(engine);
                    *slot = Slot::Building(p.clone());
                    p
                }
            }
        };
        pending.await
    }

    /// Start building an exposition on a task of its own (so that it completes, and
    /// updates the slot, even if every scraper waiting for it goes away).
    fn build(self: &Arc<Self>, engine: Arc<Engine>) -> ScrapeInFlight {
        let this = self.clone();
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let built = tokio::time::timeout(SCRAPE_TIMEOUT, this.render(&engine)).await;
            let built = built.unwrap_or(Err(ScrapeError::Timeout));
            if let Err(err) = &built {
                tracing::warn!(%err, "metrics: no exposition; the scrapes waiting for it are answered 503");
            }
            *this.lock() = match &built {
                Ok(text) => Slot::Built {
                    until: Instant::now() + started.elapsed().max(REUSE),
                    text: text.clone(),
                },
                Err(_) => Slot::Empty,
            };
            built
        });
        async move {
            task.await
                .unwrap_or_else(|err| Err(ScrapeError::Build(err.to_string().into())))
        }
        .boxed()
        .shared()
    }

    async fn render(&self, engine: &Engine) -> Result<Bytes, ScrapeError> {
        let started = Instant::now();
        let snap = engine
            .snapshot(self.max_tubes)
            .await
            .map_err(|e| ScrapeError::Store(Arc::new(e)))?;
        let snapshot_ms = started.elapsed().as_millis() as u64;
        let (listed, omitted) = (snap.tubes.len(), snap.tubes_omitted);
        let redis = self.placements.all();
        let text = tokio::task::spawn_blocking(move || exposition::render(&snap, &redis))
            .await
            .map_err(|err| ScrapeError::Build(err.to_string().into()))?;
        tracing::debug!(
            tubes = listed,
            omitted,
            bytes = text.len(),
            snapshot_ms,
            total_ms = started.elapsed().as_millis() as u64,
            "metrics: exposition built"
        );
        Ok(Bytes::from(text))
    }

    fn lock(&self) -> MutexGuard<'_, Slot> {
        lock(&self.slot)
    }
}

/// Who tried to connect to the beanstalk port, now.
fn access_figures(app: &App) -> exposition::AccessFigures {
    use std::sync::atomic::Ordering::Relaxed;
    let s = &app.security;
    exposition::AccessFigures {
        listeners: app
            .ports
            .iter()
            .map(|p| {
                (
                    p.label.clone(),
                    p.accepted.load(Relaxed),
                    p.open.load(Relaxed),
                )
            })
            .collect(),
        pending: s.pending_now() as u64,
        pending_refused: s.figures.pending_refused(),
        handshake_failures: s.figures.handshake_failures(),
        auth_failures: s.figures.auth_failures(),
        refusals: s.figures.refusals(),
        reloads: s.figures.reloads(),
    }
}

/// The schedules' figures, now: this engine's fires, the book's schedules.
fn schedule_figures(app: &App, engine: &Engine) -> exposition::ScheduleFigures {
    use std::sync::atomic::Ordering::Relaxed;
    let f = engine.schedule_fires();
    exposition::ScheduleFigures {
        defined: app.schedules.current().len() as u64,
        made: f.made.load(Relaxed),
        deduped: f.deduped.load(Relaxed),
        skipped: f.skipped.load(Relaxed),
        stale: f.stale.load(Relaxed),
        failed: f.failed.load(Relaxed),
    }
}

/// `GET /metrics`.
pub(super) async fn scrape(State(app): State<Arc<App>>) -> Response {
    let Some(engine) = app.source.engine() else {
        return standby();
    };
    let schedules = schedule_figures(&app, &engine);
    // Only while on: an instance that never turns retention on shows nothing new. A
    // store that cannot answer leaves the families out rather than failing the scrape.
    let retention = if engine.retention().is_on() {
        engine.admin_retention_figures().await.ok()
    } else {
        None
    };
    match app.scrapes.get(engine).await {
        Ok(text) => {
            let console = Bytes::from(exposition::render_listener(&app.events.figures()));
            let access = Bytes::from(exposition::render_access(&access_figures(&app)));
            let schedules = Bytes::from(exposition::render_schedules(&schedules));
            let retention = Bytes::from(
                retention
                    .as_ref()
                    .map(exposition::render_retention)
                    .unwrap_or_default(),
            );
            let chunks = [text, console, access, schedules, retention]
                .map(Ok::<_, std::convert::Infallible>);
            (
                [
                    (header::CONTENT_TYPE, exposition::CONTENT_TYPE),
                    (header::CACHE_CONTROL, "no-store"),
                ],
                axum::body::Body::from_stream(futures_util::stream::iter(chunks)),
            )
                .into_response()
        }
        Err(err) => super::text(StatusCode::SERVICE_UNAVAILABLE, format!("{err}\n")),
    }
}

/// A standby (Redis leader mode) has no figures of its own: its clients are the
/// leader's.
fn standby() -> Response {
    super::text(
        StatusCode::SERVICE_UNAVAILABLE,
        "standby: this instance relays its clients to the leader; scrape the leader\n",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;
    use crate::store::{AnyStore, MemoryStore};

    #[tokio::test]
    async fn concurrent_scrapes_share_one_exposition() {
        let engine = Engine::start(
            AnyStore::Memory(MemoryStore::new()),
            EngineConfig {
                max_job_size: 65535,
                memory: None,
                dialect: Default::default(),
                extensions: true,
                keys: Default::default(),
                policies: None,
                schedules: None,
                retention: Default::default(),
            },
        );
        let scrapes = Scrapes::new(10, Arc::default());
        let all = futures_util::future::join_all((0..8).map(|_| scrapes.get(engine.clone()))).await;
        let first = all[0].as_ref().map(|b| b.as_ptr()).ok();
        assert!(first.is_some());
        for b in &all {
            assert_eq!(
                b.as_ref().map(|b| b.as_ptr()).ok(),
                first,
                "one text, shared"
            );
        }
        // Within REUSE, the same text again.
        let again = scrapes.get(engine.clone()).await;
        assert_eq!(again.as_ref().map(|b| b.as_ptr()).ok(), first);
        engine.shutdown().await;
    }
}
