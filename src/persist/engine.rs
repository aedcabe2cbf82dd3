//! A persisted engine, built in one place for `-b DIR` and Redis leader mode: a restored
//! memory store, the commit link, the committer writing through a sink (and, in leader
//! mode, the writer of large bodies), the [`DurableStore`] over them, and an engine on
//! that store; and its end, with the final flush of a clean shutdown.
//!
//! Ownership: [`Persisted`] owns the engine's handle, the committer's and the
//! stager's task handles, and the token that stops them; [`Persisted::finish`] and
//! [`Persisted::abandon`] await every one of them, so nothing it started outlives it.
//!
//! Invariant: the engine is shut down only after the committer stopped, so no reply
//! is acknowledged for a change the committer will not write.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Sink;
use super::committer::{self, Ended};
use crate::engine::{Engine, EngineConfig};
use crate::store::durable::{CommitLink, DurableStore, Stager};
use crate::store::memory::CutLimit;
use crate::store::{AnyStore, Clock, LogFigures, MemoryStore};

/// How long a clean shutdown waits for the last batch (the store's own wait for a
/// commit, `COMMIT_TIMEOUT`, may end it sooner).
pub const FINAL_FLUSH: Duration = Duration::from_secs(2);

/// What a persisted store is made of.
pub struct Parts<S> {
    /// Journaled: restored from what the sink's medium holds.
    pub memory: MemoryStore,
    pub clock: Clock,
    /// Where the committer writes.
    pub sink: S,
    /// How much one batch carries.
    pub limit: CutLimit,
    /// The store's name (logs, `/metrics`, `-V`).
    pub name: &'static str,
    /// Made by the caller, who may need it first (leader mode: the lease keeper).
    pub link: CommitLink,
    /// Stops the committer and the stager; cancelled by [`Persisted`] at its end, or
    /// earlier by the caller (leader mode: the lease lost).
    pub stop: CancellationToken,
    /// The local log's figures (`-b`).
    pub log_figures: Option<Arc<LogFigures>>,
    /// Where large bodies are written ahead of their jobs, and the task that writes
    /// them (leader mode); the task must end at `stop`.
    pub stager: Option<(Stager, JoinHandle<()>)>,
}

/// The tasks that persist a [`DurableStore`]: the committer, and the stager if any.
pub struct Committing {
    memory: Arc<MemoryStore>,
    link: CommitLink,
    stop: CancellationToken,
    committer: Option<JoinHandle<Ended>>,
    stager: Option<JoinHandle<()>>,
}

impl Committing {
    /// Start the committer over `parts.memory`, and the store whose replies wait for
    /// it (call inside a tokio runtime).
    pub fn start<S: Sink>(parts: Parts<S>) -> (DurableStore, Committing) {
        let memory = Arc::new(parts.memory);
        let committer = tokio::spawn(committer::run(
            memory.clone(),
            parts.link.clone(),
            parts.sink,
            parts.limit,
            parts.stop.clone(),
        ));
        let mut store =
            DurableStore::new(memory.clone(), parts.link.clone(), parts.clock, parts.name);
        if let Some(figures) = parts.log_figures {
            store = store.with_log_figures(figures);
        }
        let mut stager_task = None;
        if let Some((stager, task)) = parts.stager {
            store = store.with_stager(stager);
            stager_task = Some(task);
        }
        let committing = Committing {
            memory,
            link: parts.link,
            stop: parts.stop,
            committer: Some(committer),
            stager: stager_task,
        };
        (store, committing)
    }

    /// Resolves when the committer ended by itself (another instance fenced it, or its
    /// stop token was cancelled by someone else). Cancel-safe; pending for ever once
    /// it was returned.
    pub async fn ended(&mut self) -> Ended {
        match self.committer.as_mut() {
            Some(task) => {
                let ended = task.await.unwrap_or(Ended::Stopped);
                self.committer = None;
                ended
            }
            None => std::future::pending().await,
        }
    }

    /// A clean stop: have the next batch write what was held back, the reservations
    /// no batch wrote (the jobs clients hold stay held in persistence; see the
    /// journal's header) and what the sink holds back (`Sink::finishing`). The flag is
    /// set before the change is noted, so the batch holding that change sees it.
    pub fn finishing(&self) {
        self.link
            .finishing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.memory.flush_reservations();
        self.link.changed.notify_one();
    }

    /// Stop the committer and the stager and wait until they have ended.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.committer.take() {
            let _ = task.await;
        }
        if let Some(task) = self.stager.take() {
            let _ = task.await;
        }
    }
}

/// An engine on a persisted store, with the tasks that persist it.
pub struct Persisted {
    engine: Arc<Engine>,
    committing: Committing,
}

impl Persisted {
    /// Start the committer, the store and an engine on it (call inside a tokio runtime).
    pub fn start<S: Sink>(parts: Parts<S>, config: EngineConfig) -> Persisted {
        let (store, committing) = Committing::start(parts);
        let engine = Engine::start(AnyStore::Durable(store), config);
        Persisted { engine, committing }
    }

    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Resolves when the committer ended by itself (see [`Committing::ended`]).
    pub async fn committer_ended(&mut self) -> Ended {
        self.committing.ended().await
    }

    /// A clean shutdown, once the connections have finished: write what is left (for
    /// at most [`FINAL_FLUSH`]), then stop the committer and the engine.
    pub async fn finish(self) {
        self.committing.finishing();
        let last = self.engine.last_change();
        let store = self.engine.store_name();
        match tokio::time::timeout(FINAL_FLUSH, self.engine.durable(last)).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::warn!(%err, store, "the last changes may not have been persisted")
            }
            Err(_) => tracing::warn!(store, "the last changes were not persisted in time"),
        }
        self.abandon().await;
    }

    /// Stop at once, without a final flush (the leadership was lost: nothing more may
    /// be written), then stop the engine.
    pub async fn abandon(self) {
        self.committing.stop().await;
        self.engine.shutdown().await;
    }
}
