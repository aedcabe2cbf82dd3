//! The namespace's generation: noticing that the namespace this instance serves is gone
//! (Redis restarted without persistence, `FLUSHDB`, a new primary that never had it),
//! and starting a fresh one as a restarted beanstalkd would.
//!
//! A namespace is born with a generation, a random token in `{P}:generation` (made by
//! the first instance to find none, `init.lua`). Every script call carries the
//! generation its caller serves and changes nothing when the namespace's differs (the
//! prelude answers `NAMESPACE_LOST`, which `crate::redis::error` classifies as
//! [`StoreError::NamespaceLost`]). Without it, ids start again at 1 in a namespace
//! Redis lost, and an old worker's `delete 1` would destroy a new producer's job 1.
//!
//! When a call is refused so (or the heartbeat finds the key gone or changed), the
//! timer's next tick starts afresh: every connection open until then is marked old
//! ([`ConnId::issued`] is the floor: the store refuses what an old connection asks),
//! their reservations and lost reserve attempts are forgotten (those jobs are gone),
//! the server is told to close the old connections, and this instance adopts the new
//! generation (making it, if it is the first to notice). Tube references are kept and
//! restored into the new namespace: the closing connections' closes remove theirs.
//!
//! Invariants: a call carries the generation current when it was built, so a command
//! that straddles the change (awaiting a lookup) fails rather than act on the new
//! namespace with an old connection's id (see `RedisStore::job_call`); a loss is acted
//! on once per generation (a refusal reported for an older generation is ignored).
//!
//! Ownership: [`Namespace`] is shared by the runner (which reads the generation into
//! every call and reports refusals) and the store (which starts afresh). Its locks are
//! never held across an `.await`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rand::RngExt;
use tokio::sync::{Notify, watch};

use super::RedisStore;
use crate::protocol::TubeName;
use crate::redis::US;
use crate::store::{ConnId, Nanos, StoreError, StoreResult};
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

    fn adopt(&self, generation: &str) {
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
    fn take_lost(&self) -> Option<Arc<str>> {
        let lost = lock(&self.lost).take()?;
        (lost == self.current()).then_some(lost)
    }

    /// Whether `conn` was opened in a namespace that is gone.
    pub fn is_old(&self, conn: ConnId) -> bool {
        conn.0 < self.floor.load(Ordering::SeqCst)
    }

    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

impl RedisStore {
    /// Make sure the namespace has a generation (making one if none) and its `default`
    /// tube, and serve that generation; Redis' clock at the call, on this process's
    /// clock scale (nanoseconds).
    pub(super) async fn init_namespace(run: &super::scripts::Runner) -> StoreResult<Nanos> {
        let bytes: [u8; 16] = rand::rng().random();
        let candidate: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let asked = Instant::now();
        let joined = run
            .on_tube(|s| &s.init, &[], TubeName::default_tube().as_str())
            .arg(&candidate)
            .run()
            .await?;
        run.namespace().adopt(&joined.generation);
        // Redis read its clock about half a round trip ago.
        Ok(joined.now_us * US + asked.elapsed().as_nanos() as u64 / 2)
    }

    /// If a call found the namespace gone, start afresh (see the module's header).
    /// Fails, to be tried again at the next tick, when Redis cannot be reached.
    pub(super) async fn start_fresh_if_lost(&self) -> StoreResult<()> {
        let ns = self.run.namespace();
        let Some(lost) = ns.take_lost() else {
            return Ok(());
        };
        // No await from here to the send: no command runs in between, so none of an
        // old connection's can see the held jobs gone yet not be refused.
        ns.floor.store(ConnId::issued().0, Ordering::SeqCst);
        self.held.clear();
        self.attempts.clear();
        ns.changes.send_modify(|n| *n += 1);
        tracing::warn!(
            "the Redis namespace this instance served is gone (Redis restarted without \
             its data, was flushed, or a new primary never had it): its jobs are lost; \
             closing every client connection and serving a fresh namespace, as a \
             restarted beanstalkd does"
        );
        if let Err(err) = Self::init_namespace(&self.run).await {
            // Tried again at the next tick; the connections already closed stay closed.
            *lock(&ns.lost) = Some(lost);
            // Retried at the timer's next tick (after its backoff), not at once.
            return Err(err);
        }
        self.refs.restore();
        tracing::info!("serving a fresh Redis namespace");
        Ok(())
    }

    /// Refuse what a connection of a namespace that is gone asks (`op` names it).
    pub(super) fn check_conn(&self, conn: ConnId, op: &'static str) -> StoreResult<()> {
        if self.run.namespace().is_old(conn) {
            return Err(StoreError::NamespaceLost { op });
        }
        Ok(())
    }
}
