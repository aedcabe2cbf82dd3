//! The namespace's generation: noticing that the namespace this instance serves is gone
//! (Redis restarted without persistence, `FLUSHDB`, a new primary that never had it).
//! Starting a fresh one, as a restarted beanstalkd would, is `fresh.rs`'s.
//!
//! A namespace is born with a generation, a random token in `{P}:generation` (made by
//! the first instance to find none, `init.lua`). Every script call carries the
//! generation its caller serves and changes nothing when the namespace's differs (the
//! prelude answers `NAMESPACE_LOST`, which `crate::redis::error` classifies as
//! [`StoreError::NamespaceLost`]). Without it, ids start again at 1 in a namespace
//! Redis lost, and an old worker's `delete 1` would destroy a new producer's job 1.
//!
//! When a call is refused so (or the heartbeat finds the key gone or changed), the loss
//! is recorded here, and the timer's next tick starts afresh (`fresh.rs`): connections
//! below a floor ([`ConnId::issued`] then) are old, and the store refuses what they ask.
//!
//! Invariants: a call carries the generation current when it was built, so a command
//! that straddles the change (awaiting a lookup) fails rather than act on the new
//! namespace with an old connection's id (see `RedisStore::job_call`); a loss is acted
//! on once per generation (a refusal reported for an older generation is ignored).
//!
//! Ownership: [`Namespace`] is shared by the runner (which reads the generation into
//! every call and reports refusals) and the store (which starts afresh). Its locks are
//! never held across an `.await`. It knows nothing of the store or the scripts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};

use crate::store::ConnId;
use crate::util::lock;

pub struct Namespace {
    current: Mutex<Arc<str>>,
    /// The generation a call found gone, until the store has started afresh.
    lost: Mutex<Option<Arc<str>>>,
    /// Connections below this id belong to a namespace that is gone.
    floor: AtomicU64,
    /// How many times a fresh namespace was started (the server closes connections).
    changes: watch::Sender<u64>,
    /// Told when a loss is found, so the timer starts afresh at once.
    found_lost: Notify,
}

impl Namespace {
    pub fn new() -> Namespace {
        Namespace {
            current: Mutex::new("".into()),
            lost: Mutex::new(None),
            floor: AtomicU64::new(0),
            changes: watch::Sender::new(0),
            found_lost: Notify::new(),
        }
    }

    /// The generation calls are made for now.
    pub fn current(&self) -> Arc<str> {
        lock(&self.current).clone()
    }

    /// Serve `generation` from now on.
    pub(super) fn adopt(&self, generation: &str) {
        *lock(&self.current) = generation.into();
    }

    /// A call made for `generation` was refused: it is gone (if it is still ours).
    pub fn lost(&self, generation: &Arc<str>) {
        if *generation == self.current() {
            *lock(&self.lost) = Some(generation.clone());
            self.found_lost.notify_one();
        }
    }

    /// Resolves once a loss was found (a permit is kept if nobody waits yet).
    pub async fn wait_lost(&self) {
        self.found_lost.notified().await;
    }

    /// Whether `found`, the generation key read back by a call made for `generation`,
    /// still names it; when not, the loss is recorded (see [`Namespace::lost`]).
    pub fn still_ours(&self, generation: &Arc<str>, found: Option<&str>) -> bool {
        let ours = found == Some(&**generation);
        if !ours {
            self.lost(generation);
        }
        ours
    }

    /// The generation found gone, if it is the one served now (once).
    pub(super) fn take_lost(&self) -> Option<Arc<str>> {
        let lost = lock(&self.lost).take()?;
        (lost == self.current()).then_some(lost)
    }

    /// Starting afresh failed: `lost` is still to be acted on (at the next tick).
    pub(super) fn still_lost(&self, lost: Arc<str>) {
        *lock(&self.lost) = Some(lost);
    }

    /// Every connection below `floor` (opened so far) belongs to the namespace that is
    /// gone: what it asks is refused from now on.
    pub(super) fn mark_old_below(&self, floor: ConnId) {
        self.floor.store(floor.0, Ordering::SeqCst);
    }

    /// A fresh namespace is being started: the server closes the old connections.
    pub(super) fn announce_fresh(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    /// Whether `conn` was opened in a namespace that is gone.
    pub fn is_old(&self, conn: ConnId) -> bool {
        conn.0 < self.floor.load(Ordering::SeqCst)
    }

    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
