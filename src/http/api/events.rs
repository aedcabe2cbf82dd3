//! `GET /api/v1/events`: Server-Sent Events that push the server's figures and the
//! first tubes' counts to the console's pages, so they update without reload.
//!
//! Invariants (many open tabs must cost what one costs):
//! - one producer task computes a snapshot — through the API's own reads — at most once
//!   a second, and only while someone listens; every subscriber reads the same value
//!   from a `watch` channel;
//! - at most [`MAX_SUBSCRIBERS`] streams are open (beyond: 503), and a snapshot lists at
//!   most [`SNAPSHOT_TUBES`] tubes (the first by name, with the total count);
//! - a stream lasts at most [`STREAM_FOR`], within the connection's response deadline
//!   (see `http::connection`); its first event tells the browser to reconnect after a
//!   second (`retry:`), which `EventSource` does by itself. A stream ends at once on
//!   shutdown. The events are axum's ([`Sse`]); each snapshot is serialized once, for
//!   every stream.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::response::sse::{Event, Sse};
use futures_util::Stream;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use super::reads::{stats_doc, tube_doc};
use super::types::LiveFigures;
use crate::http::exposition::ListenerFigures;
use crate::http::{App, Source};

/// Streams open at once.
pub const MAX_SUBSCRIBERS: usize = 128;
/// Tubes in a snapshot.
pub const SNAPSHOT_TUBES: usize = 100;
/// How often a snapshot is computed, at most.
pub const PERIOD: Duration = Duration::from_secs(1);
/// How long one stream lasts before the browser reconnects.
pub const STREAM_FOR: Duration = Duration::from_secs(10);

/// The shared snapshot and its subscribers.
#[derive(Debug)]
pub struct Events {
    tx: watch::Sender<Option<Arc<str>>>,
    /// Wakes the producer when a first subscriber arrives.
    wake: Notify,
    open: AtomicUsize,
    /// Snapshots computed since the start (for tests and figures).
    computed: AtomicU64,
    /// Shutdown: the producer and every stream end.
    stop: CancellationToken,
}

impl Events {
    /// Start the producer for `source`; it ends when `stop` is cancelled.
    pub fn start(source: Source, stop: CancellationToken) -> Arc<Events> {
        let events = Arc::new(Events {
            tx: watch::channel(None).0,
            wake: Notify::new(),
            open: AtomicUsize::new(0),
            computed: AtomicU64::new(0),
            stop: stop.clone(),
        });
        tokio::spawn(produce(events.clone(), source, stop));
        events
    }

    /// How many snapshots have been computed.
    pub fn computed(&self) -> u64 {
        self.computed.load(Ordering::Relaxed)
    }

    /// How many streams are open.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// The figures `/metrics` shows of the event streams.
    pub fn figures(&self) -> ListenerFigures {
        ListenerFigures {
            event_streams: self.open() as u64,
            live_snapshots: self.computed(),
        }
    }

    /// A new subscriber, or `None` when [`MAX_SUBSCRIBERS`] are open.
    fn subscribe(self: &Arc<Events>) -> Option<Subscriber> {
        let admitted = self
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_SUBSCRIBERS).then_some(n + 1)
            })
            .is_ok();
        if !admitted {
            return None;
        }
        let rx = self.tx.subscribe();
        self.wake.notify_one();
        Some(Subscriber {
            rx,
            events: self.clone(),
        })
    }
}

/// One open stream; counted until dropped.
struct Subscriber {
    rx: watch::Receiver<Option<Arc<str>>>,
    events: Arc<Events>,
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.events.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Compute a snapshot each [`PERIOD`] while anyone listens; sleep while no one does.
async fn produce(events: Arc<Events>, source: Source, stop: CancellationToken) {
    loop {
        if events.tx.receiver_count() == 0 {
            // A stale snapshot must not be the first thing a new subscriber sees.
            events.tx.send_replace(None);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = events.wake.notified() => continue,
            }
        }
        let snap = snapshot(&source).await;
        events.computed.fetch_add(1, Ordering::Relaxed);
        let text = serde_json::to_string(&snap).unwrap_or_default();
        events.tx.send_replace(Some(text.into()));
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PERIOD) => {}
        }
    }
}

/// The server's figures and the first tubes' counts, or the error that stands instead.
async fn snapshot(source: &Source) -> LiveFigures {
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut live = LiveFigures {
        at,
        stats: None,
        tubes: None,
        tube_count: None,
        error: None,
    };
    let Some(engine) = source.engine() else {
        live.error = Some("this instance does not lead: no figures".into());
        return live;
    };
    let figures = async {
        let stats = stats_doc(&engine).await?;
        let names = engine.admin_tubes().await?;
        let mut tubes = Vec::new();
        for name in names.iter().take(SNAPSHOT_TUBES) {
            if let Some(t) = tube_doc(&engine, name).await? {
                tubes.push(t);
            }
        }
        Ok::<_, ApiError>((stats, tubes, names.len()))
    };
    match figures.await {
        Ok((stats, tubes, count)) => {
            live.stats = Some(stats);
            live.tubes = Some(tubes);
            live.tube_count = Some(count);
        }
        Err(e) => live.error = Some(e.message().to_string()),
    }
    live
}

/// `GET /api/v1/events`: `text/event-stream` of snapshots (each event's data one
/// [`LiveFigures`] in JSON).
pub(super) async fn stream(
    State(app): State<Arc<App>>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Some(sub) = app.events.subscribe() else {
        return Err(ApiError::unavailable(format!(
            "{MAX_SUBSCRIBERS} event streams are open; retry later"
        )));
    };
    let end = Instant::now() + STREAM_FOR;
    let events = futures_util::stream::unfold((sub, true), move |(mut sub, first)| async move {
        if first {
            let event = Event::default().retry(Duration::from_secs(1));
            let now = sub.rx.borrow_and_update().clone();
            let event = match now {
                Some(now) => event.data(&*now),
                None => event,
            };
            return Some((Ok(event), (sub, false)));
        }
        let stop = sub.events.stop.clone();
        loop {
            let changed = tokio::select! {
                _ = stop.cancelled() => return None,
                c = tokio::time::timeout_at(end, sub.rx.changed()) => c,
            };
            match changed {
                Ok(Ok(())) => {
                    let now = sub.rx.borrow_and_update().clone();
                    if let Some(now) = now {
                        return Some((Ok(Event::default().data(&*now)), (sub, false)));
                    }
                }
                // The time is up.
                _ => return None,
            }
        }
    });
    Ok(Sse::new(events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, EngineConfig};
    use crate::store::{AnyStore, MemoryStore};

    fn events() -> Arc<Events> {
        let engine = Engine::start(
            AnyStore::Memory(MemoryStore::new()),
            EngineConfig {
                max_job_size: 65_535,
                memory: None,
                dialect: Default::default(),
                extensions: true,
                keys: Default::default(),
                policies: None,
                schedules: None,
                retention: Default::default(),
            },
        );
        Events::start(Source::Engine(engine), CancellationToken::new())
    }

    #[tokio::test(start_paused = true)]
    async fn many_subscribers_share_one_snapshot_a_second_and_are_bounded() {
        let events = events();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(events.computed(), 0, "no subscriber, no work");

        let mut subs: Vec<Subscriber> = (0..MAX_SUBSCRIBERS)
            .map(|_| events.subscribe().unwrap())
            .collect();
        assert!(events.subscribe().is_none(), "bounded");
        tokio::time::sleep(Duration::from_millis(10_500)).await;
        let computed = events.computed();
        println!("{MAX_SUBSCRIBERS} subscribers for 10.5 s: {computed} snapshots");
        assert!((10..=12).contains(&computed), "{computed} snapshots");
        let first = subs[0].rx.borrow_and_update().clone().unwrap();
        for s in &mut subs {
            let now = s.rx.borrow_and_update().clone().unwrap();
            assert!(Arc::ptr_eq(&first, &now), "one value for all");
        }
        assert!(first.contains("\"tube_count\":1"), "{first}");

        subs.pop();
        assert!(events.subscribe().is_some(), "a slot frees when one leaves");
        subs.clear();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let idle = events.computed();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(events.computed(), idle, "no work once everyone left");
    }
}
