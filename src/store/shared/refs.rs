//! This instance's tube references (the tubes its connections use and watch) and the
//! reference keeper, the one task that changes them in Redis.
//!
//! Redis keeps each instance's references in its hash `{P}:refs:<instance>` and their sum
//! in each tube's meta (a tube exists while it has references or jobs). The keeper
//! applies changes in the order they happened, and can restore the whole hash: after
//! this instance was taken for dead (its references were dropped by another), or after
//! a change whose call failed (Redis may or may not have applied it), the absolute
//! counts are re-sent at the next heartbeat.
//!
//! Ownership: the local counts (`(kind, tube) -> count`, what this instance's
//! connections hold) are shared by the keeper, which follows every change, and the
//! store, whose close lowers them directly (a close runs from its connection's own
//! task; see `RedisStore::close`). Their lock is never held across an `.await`.
//! Invariant: a change never moves a shared count by more than this instance's own
//! count moved (the `tube_ref` script), so a stalled instance cannot take away other
//! instances' references.
//!
//! Bounds: the keeper's channel is unbounded, and bounded by its senders: a change is
//! sent by a connection's task, which awaits its result before it sends another (at
//! most one change per connection is queued); a restore or re-sync is sent at most once
//! per heartbeat (every second) or fresh namespace; and each of the keeper's calls ends
//! within the response timeout, so the queue drains even while Redis is away.

use foldhash::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{mpsc, oneshot};

use super::scripts::Runner;
use crate::protocol::TubeName;
use crate::store::{StoreError, StoreResult};
use crate::util::lock;

/// How a connection refers to a tube (the field names in Redis).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefKind {
    Using,
    Watching,
}

impl RefKind {
    pub fn name(self) -> &'static str {
        match self {
            RefKind::Using => "using",
            RefKind::Watching => "watching",
        }
    }

    fn parse(name: &str) -> Option<RefKind> {
        [RefKind::Using, RefKind::Watching]
            .into_iter()
            .find(|k| k.name() == name)
    }
}

type Counts = HashMap<(RefKind, TubeName), i64>;

/// A change for the reference keeper.
enum RefOp {
    Change {
        kind: RefKind,
        tube: TubeName,
        delta: i64,
        done: oneshot::Sender<StoreResult<()>>,
    },
    /// Re-send every count (the references were dropped while this instance stalled).
    Restore,
    /// Re-send every count if a change failed since the last time.
    SyncIfDirty,
}

/// The store's handle on its references and their keeper.
pub struct References {
    ops: mpsc::UnboundedSender<RefOp>,
    shared: RefCounts,
    /// This instance's reference hash.
    key: String,
}

/// What the store shares with the keeper.
#[derive(Clone)]
struct RefCounts {
    counts: Arc<Mutex<Counts>>,
    /// A change failed since the last restore (Redis may or may not have applied it).
    dirty: Arc<AtomicBool>,
}

impl RefCounts {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        lock(&self.counts)
    }

    fn count(&self, kind: RefKind, tube: &TubeName) -> i64 {
        self.counts()
            .get(&(kind, tube.clone()))
            .copied()
            .unwrap_or(0)
    }
}

fn keeper_gone() -> StoreError {
    StoreError::NotApplied {
        op: "tube_ref",
        source: Some("the reference keeper task stopped".into()),
    }
}

impl References {
    /// Start the keeper of the references kept in hash `key`, calling scripts with `run`.
    pub fn start(run: Runner, key: String) -> References {
        let (ops, rx) = mpsc::unbounded_channel();
        let shared = RefCounts {
            counts: Arc::default(),
            dirty: Arc::default(),
        };
        let keeper = Keeper {
            run,
            key: key.clone(),
            shared: shared.clone(),
        };
        tokio::spawn(keeper.keep(rx));
        References { ops, shared, key }
    }

    /// This instance's reference hash.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Change this instance's references to `tube`, in order with every other change.
    pub async fn change(&self, tube: &TubeName, kind: RefKind, delta: i64) -> StoreResult<()> {
        let (done, result) = oneshot::channel();
        self.ops
            .send(RefOp::Change {
                kind,
                tube: tube.clone(),
                delta,
                done,
            })
            .map_err(|_| keeper_gone())?;
        result.await.map_err(|_| keeper_gone())?
    }

    /// Re-send every count (this instance was taken for dead).
    pub fn restore(&self) {
        let _ = self.ops.send(RefOp::Restore);
    }

    /// Re-send every count if a change failed since the last time.
    pub fn sync_if_dirty(&self) {
        let _ = self.ops.send(RefOp::SyncIfDirty);
    }

    /// This instance's count of `kind` references to `tube`, read as a close queues the
    /// script that sets it in Redis.
    pub fn count(&self, kind: RefKind, tube: &TubeName) -> i64 {
        self.shared.count(kind, tube)
    }

    /// Whether a connection of this instance uses or watches `tube` (so a delete need
    /// not check whether the tube is left unreferenced: see `delete_found` in the
    /// prelude).
    pub fn refers(&self, tube: &TubeName) -> bool {
        [RefKind::Using, RefKind::Watching]
            .into_iter()
            .any(|kind| self.count(kind, tube) > 0)
    }

    /// A closing connection's references leave the local counts (its close script
    /// drops them in Redis).
    pub fn forget<'a>(&self, refs: impl Iterator<Item = (RefKind, &'a TubeName)>) {
        let mut counts = self.shared.counts();
        for (kind, tube) in refs {
            let key = (kind, tube.clone());
            if let Some(n) = counts.get_mut(&key) {
                *n -= 1;
                if *n <= 0 {
                    counts.remove(&key);
                }
            }
        }
    }

    /// A change made outside the keeper failed: Redis may or may not have applied it.
    pub fn mark_dirty(&self) {
        self.shared.dirty.store(true, Ordering::SeqCst);
    }
}

/// The reference keeper: owns the order of changes.
struct Keeper {
    run: Runner,
    key: String,
    shared: RefCounts,
}

impl Keeper {
    async fn keep(self, mut ops: mpsc::UnboundedReceiver<RefOp>) {
        while let Some(op) = ops.recv().await {
            match op {
                RefOp::Change {
                    kind,
                    tube,
                    delta,
                    done,
                } => {
                    // The local count follows every change asked for (the engine undoes
                    // a change it could not complete); Redis is brought in line by a
                    // restore when a call failed. It moves as the change is queued (no
                    // await in between), so a close that sends this instance's absolute
                    // counts (see close.lua) never reads one that misses a change queued
                    // before it. Only the changed entry is looked at: a retain over every
                    // count made each change cost the number of tubes referred to.
                    {
                        let mut counts = self.shared.counts();
                        let key = (kind, tube.clone());
                        let count = (counts.get(&key).copied().unwrap_or(0) + delta).max(0);
                        if count > 0 {
                            counts.insert(key, count);
                        } else {
                            counts.remove(&key);
                        }
                    }
                    let result = self.send(kind, &tube, delta, "add").await;
                    if result.is_err() {
                        self.shared.dirty.store(true, Ordering::SeqCst);
                    }
                    let _ = done.send(result);
                }
                RefOp::Restore | RefOp::SyncIfDirty => {
                    let was_dirty = self.shared.dirty.swap(false, Ordering::SeqCst);
                    if matches!(op, RefOp::SyncIfDirty) && !was_dirty {
                        continue;
                    }
                    if let Err(err) = self.restore().await {
                        tracing::warn!(%err, "restoring tube references failed; the next heartbeat retries");
                        self.shared.dirty.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
    }

    /// One `tube_ref` call: `mode` "add" moves the count by `amount`, "set" sets it.
    async fn send(
        &self,
        kind: RefKind,
        tube: &TubeName,
        amount: i64,
        mode: &str,
    ) -> StoreResult<()> {
        self.run
            .on_tube(|s| &s.tube_ref, &[&self.key], tube.as_str())
            .arg((kind.name(), amount, mode))
            .run()
            .await
            .map(|_applied| ())
    }

    /// Re-send this instance's reference counts as absolute values, and zero those Redis
    /// records that the local counts lack (a failed change that Redis applied after all).
    ///
    /// A close runs from its connection's task, not through the keeper, and lowers the
    /// counts before it queues its script. So each count is read at the moment its
    /// script is queued on the shared connection (nothing awaits in between, on the
    /// one-thread runtime): a close that comes later is queued after it, one that came
    /// earlier is in the count. Re-sending a stale snapshot instead could bring back, for
    /// a moment, the tubes of a connection that had just closed.
    async fn restore(&self) -> StoreResult<()> {
        let known: Vec<(RefKind, TubeName)> = self.shared.counts().keys().cloned().collect();
        for (kind, tube) in &known {
            let n = self.shared.count(*kind, tube);
            self.send(*kind, tube, n, "set").await?;
        }
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg(&self.key)
            .query_async(&mut self.run.conn())
            .await
            .map_err(|e| StoreError::redis("HKEYS refs", e))?;
        for field in fields {
            let Some((kind, tube)) = field.split_once(':') else {
                continue;
            };
            let (Some(kind), Some(tube)) = (RefKind::parse(kind), TubeName::new(tube.as_bytes()))
            else {
                continue;
            };
            let unknown = !self.shared.counts().contains_key(&(kind, tube.clone()));
            if unknown {
                self.send(kind, &tube, 0, "set").await?;
            }
        }
        Ok(())
    }
}
