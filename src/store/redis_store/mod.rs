//! The Redis store: jobs in per-tube sorted sets and hashes, shared by every redstalk
//! instance that uses the same Redis and prefix, and kept across restarts.
//!
//! Every state change is one Lua script (`lua/`), called by EVALSHA over a shared
//! multiplexed connection (concurrent calls are pipelined), touching only the keys it
//! is given. Times come from Redis `TIME`, so instances with skewed clocks agree.
//! Scripts that make a job ready publish the tube on the wake-up channel when another
//! instance listens; every instance subscribes and serves its waiting connections (an
//! instance serves its own waiters after its own commands, so it skips its own
//! messages).
//!
//! Ownership: Redis owns the jobs. This process owns only `held`, its own view of the
//! reservations its connections hold (the tube of each, and its deadline), which is
//! exact because only the holding connection can release, bury, touch or delete a
//! reserved job and the deadline is known; a reservation whose deadline has passed has
//! lapsed (some instance's timer returns it to ready).

pub mod keys;
pub mod scripts;

use foldhash::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use rand::RngExt;
use redis::aio::ConnectionManager;
use redis::{Client, IntoConnectionInfo, ProtocolVersion, PushKind, Value};
use tokio::sync::{mpsc, oneshot};

use super::{
    ConnId, JobId, JobInfo, JobState, Nanos, NewJob, Reserved, Store, StoreError, StoreResult,
    Totals, TubeInfo,
};
use crate::engine::Clock;
use crate::protocol::TubeName;
use keys::Keys;
use scripts::{Call, Scripts};

/// How long a command may wait for Redis before it answers INTERNAL_ERROR.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often an instance says it is alive, and how long until it counts as dead.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
const HEARTBEAT_LAPSES: Duration = Duration::from_secs(10);

/// Where and under which prefix to keep jobs.
#[derive(Clone, Debug)]
pub struct RedisConfig {
    pub url: String,
    pub prefix: String,
}

#[derive(Clone, Debug)]
struct Held {
    tube: TubeName,
    deadline: Nanos,
    /// The owner token of the reserve that got it (one per attempt, see
    /// [`RedisStore::attempt_owner`]).
    owner: String,
}

pub struct RedisStore {
    conn: ConnectionManager,
    keys: Keys,
    scripts: Scripts,
    /// This process's id in owner strings and in the instance registry.
    instance: String,
    /// "<instance>\n<wake-up channel>", the scripts' `origin` argument.
    origin: String,
    clock: Clock,
    held: Mutex<HashMap<ConnId, HashMap<JobId, Held>>>,
    wake: Mutex<Option<mpsc::UnboundedReceiver<TubeName>>>,
    next_heartbeat: Mutex<Nanos>,
    /// Changes of this instance's tube references, applied in order by one task.
    refs: mpsc::UnboundedSender<RefOp>,
    ref_counts: RefCounts,
    refs_dirty: Arc<AtomicBool>,
    /// Reserve attempts that failed without an answer (tubes, owner token): Redis may
    /// have run them after all, leaving a job reserved that nobody knows of. Undone by
    /// the next tick.
    uncertain: Mutex<Vec<(Vec<TubeName>, String)>>,
    attempts: std::sync::atomic::AtomicU64,
}

/// This instance's own tube references (kind, tube) -> count: what its connections
/// hold. Shared by the store (a close updates it directly) and the reference keeper.
type RefCounts = Arc<Mutex<HashMap<(&'static str, TubeName), i64>>>;

fn lock_counts(counts: &RefCounts) -> MutexGuard<'_, HashMap<(&'static str, TubeName), i64>> {
    counts.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the store shares with the reference keeper.
struct RefShared {
    counts: RefCounts,
    /// A change failed since the last restore (Redis may or may not have applied it).
    dirty: Arc<AtomicBool>,
}

/// A change for the reference keeper.
enum RefOp {
    Change {
        kind: &'static str,
        tube: TubeName,
        delta: i64,
        done: oneshot::Sender<StoreResult<()>>,
    },
    /// Re-send every count (the references were dropped while this instance stalled).
    Restore,
    /// Re-send every count if a change failed since the last time.
    SyncIfDirty,
}

/// Run the `close` script for one connection; the tubes that gained ready jobs.
async fn close_connection<'a>(
    mut target: ScriptTarget<'_>,
    script: &redis::Script,
    refs_key: &str,
    jobs: &[(JobId, TubeName, String)],
    refs: impl Iterator<Item = (&'static str, &'a TubeName)> + Clone,
) -> StoreResult<Vec<TubeName>> {
    let mut tubes: Vec<&TubeName> = jobs
        .iter()
        .map(|(_, t, _)| t)
        .chain(refs.clone().map(|(_, t)| t))
        .collect();
    tubes.sort();
    tubes.dedup();
    let index = |t: &TubeName| {
        tubes
            .iter()
            .position(|x| *x == t)
            .map_or(0, |i| i + 1)
            .to_string()
    };
    let mut inv = Call::new(script, 8 + 7 * tubes.len());
    inv.keys(target.keys.namespace()).key(refs_key);
    for t in &tubes {
        inv.keys(&target.keys.tube(t.as_str())[..]);
    }
    let names: Vec<&str> = tubes.iter().map(|t| t.as_str()).collect();
    inv.arg(target.origin).arg(names.join("\n")).arg(jobs.len());
    for (id, tube, owner) in jobs {
        inv.arg(*id).arg(owner).arg(index(tube));
    }
    for (kind, tube) in refs {
        inv.arg(kind).arg(index(tube));
    }
    let woken: Vec<usize> = inv.invoke(&mut target.conn).await.map_err(unavailable)?;
    Ok(woken
        .into_iter()
        .filter_map(|i| tubes.get(i.wrapping_sub(1)).map(|t| (*t).clone()))
        .collect())
}

/// Re-send this instance's reference counts as absolute values, and zero those Redis
/// records that `counts` lacks (a failed change that Redis applied after all).
///
/// A close runs from its connection's task, not through the keeper, and lowers `counts`
/// before it queues its script. So each count is read at the moment its script is
/// queued on the shared connection (nothing awaits in between, on the one-thread
/// runtime): a close that comes later is queued after it, one that came earlier is in
/// the count. Re-sending a stale snapshot instead could bring back, for a moment, the
/// tubes of a connection that had just closed.
async fn restore(
    target: ScriptTarget<'_>,
    script: &redis::Script,
    refs_key: &str,
    counts: &RefCounts,
) -> StoreResult<()> {
    let keys: Vec<(&'static str, TubeName)> = lock_counts(counts).keys().cloned().collect();
    for (kind, tube) in &keys {
        let n = lock_counts(counts)
            .get(&(*kind, tube.clone()))
            .copied()
            .unwrap_or(0)
            .to_string();
        let args: [&[u8]; 3] = [kind.as_bytes(), n.as_bytes(), b"set"];
        let t = ScriptTarget {
            conn: target.conn.clone(),
            keys: target.keys,
            origin: target.origin,
        };
        if let Err(err) = run_tube_script(t, script, tube.as_str(), Some(refs_key), &args).await {
            tracing::warn!(%err, "restoring tube references failed; the next heartbeat retries");
            return Err(err);
        }
    }
    let now_known = lock_counts(counts).clone();
    drop_unknown_references(target, script, refs_key, &now_known)
        .await
        .inspect_err(|err| tracing::warn!(%err, "restoring tube references failed; the next heartbeat retries"))
}

/// Set to zero every reference Redis records for this instance that `counts` lacks.
async fn drop_unknown_references(
    target: ScriptTarget<'_>,
    script: &redis::Script,
    refs_key: &str,
    counts: &HashMap<(&'static str, TubeName), i64>,
) -> StoreResult<()> {
    let mut conn = target.conn.clone();
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(refs_key)
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    for field in fields {
        let Some((kind, tube)) = field.split_once(':') else {
            continue;
        };
        let (Some(kind), Some(tube)) = (
            ["using", "watching"].into_iter().find(|k| *k == kind),
            TubeName::new(tube.as_bytes()),
        ) else {
            continue;
        };
        if counts.contains_key(&(kind, tube.clone())) {
            continue;
        }
        let t = ScriptTarget {
            conn: conn.clone(),
            keys: target.keys,
            origin: target.origin,
        };
        let args: [&[u8]; 3] = [kind.as_bytes(), b"0", b"set"];
        run_tube_script(t, script, tube.as_str(), Some(refs_key), &args).await?;
    }
    Ok(())
}

/// Where a single-tube script runs.
struct ScriptTarget<'a> {
    conn: ConnectionManager,
    keys: &'a Keys,
    /// The scripts' wake-up origin: "<instance>\n<channel>" (see `wake` in the prelude).
    origin: &'a str,
}

/// Run a single-tube script: KEYS = the tube's keys then the namespace's (and
/// `extra_key`), ARGV = tube, origin, then `args`.
async fn run_tube_script(
    mut target: ScriptTarget<'_>,
    script: &redis::Script,
    tube: &str,
    extra_key: Option<&str>,
    args: &[&[u8]],
) -> StoreResult<Value> {
    let mut inv = Call::new(script, 14 + usize::from(extra_key.is_some()));
    inv.keys(&target.keys.tube(tube)[..])
        .keys(target.keys.namespace());
    if let Some(k) = extra_key {
        inv.key(k);
    }
    inv.arg(tube).arg(target.origin);
    for a in args {
        inv.arg(*a);
    }
    inv.invoke(&mut target.conn).await.map_err(unavailable)
}

/// The reference keeper: the one task that changes this instance's tube references,
/// so that they reach Redis in the order they happened, and that can restore them all.
/// Owns the local counts (what this instance's connections hold).
async fn keep_references(
    mut ops: mpsc::UnboundedReceiver<RefOp>,
    conn: ConnectionManager,
    keys: Keys,
    origin: String,
    refs_key: String,
    shared: RefShared,
) {
    let RefShared { counts, dirty } = shared;
    let script = Scripts::new().tube_ref;
    // Redis may or may not have applied a change whose call failed (`dirty`): it is put
    // right by re-sending the absolute counts at the next heartbeat.
    while let Some(op) = ops.recv().await {
        let target = || ScriptTarget {
            conn: conn.clone(),
            keys: &keys,
            origin: &origin,
        };
        match op {
            RefOp::Change {
                kind,
                tube,
                delta,
                done,
            } => {
                let delta_arg = delta.to_string();
                let args: [&[u8]; 3] = [kind.as_bytes(), delta_arg.as_bytes(), b"add"];
                let result =
                    run_tube_script(target(), &script, tube.as_str(), Some(&refs_key), &args).await;
                // The local count follows every change asked for (the engine undoes a
                // change it could not complete); Redis is brought in line by a restore
                // when a call failed.
                {
                    let mut counts = lock_counts(&counts);
                    let count = counts.entry((kind, tube)).or_default();
                    *count = (*count + delta).max(0);
                    counts.retain(|_, n| *n > 0);
                }
                if result.is_err() {
                    dirty.store(true, Ordering::SeqCst);
                }
                let _ = done.send(result.map(|_| ()));
            }
            RefOp::Restore | RefOp::SyncIfDirty => {
                let was_dirty = dirty.swap(false, Ordering::SeqCst);
                if matches!(op, RefOp::SyncIfDirty) && !was_dirty {
                    continue;
                }
                if restore(target(), &script, &refs_key, &counts)
                    .await
                    .is_err()
                {
                    dirty.store(true, Ordering::SeqCst);
                }
            }
        }
    }
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

fn protocol_error(what: &str) -> StoreError {
    StoreError::Unavailable(format!("unexpected reply from Redis to {what}"))
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Double(d) => Some(*d as i64),
        _ => None,
    }
}

fn uint(v: &Value) -> u64 {
    int(v).map_or(0, |i| i.max(0) as u64)
}

fn text(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn array(v: Value) -> Option<Vec<Value>> {
    match v {
        Value::Array(items) | Value::Set(items) => Some(items),
        _ => None,
    }
}

fn body(v: Value) -> Bytes {
    match v {
        Value::BulkString(b) => Bytes::from(b),
        _ => Bytes::new(),
    }
}

const US: u64 = 1_000;

impl RedisStore {
    /// Connect, subscribe to wake-ups, make sure `default` exists, and read the Redis
    /// clock. Fails when Redis cannot be reached.
    pub async fn connect(config: &RedisConfig) -> Result<RedisStore, StoreError> {
        let info = config
            .url
            .as_str()
            .into_connection_info()
            .map_err(unavailable)?;
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(ProtocolVersion::RESP3);
        let client = Client::open(info.set_redis_settings(settings)).map_err(unavailable)?;
        let (push_tx, mut push_rx) = mpsc::unbounded_channel();
        let manager_config = redis::aio::ConnectionManagerConfig::new()
            .set_push_sender(push_tx)
            .set_automatic_resubscription()
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_connection_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let mut conn = client
            .get_connection_manager_with_config(manager_config)
            .await
            .map_err(unavailable)?;
        let keys = Keys::new(&config.prefix);
        let bytes: [u8; 8] = rand::rng().random();
        let instance: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let channel = keys.wake_channel();
        let origin = format!("{instance}\n{channel}");
        conn.subscribe(&channel).await.map_err(unavailable)?;

        let (wake_tx, wake_rx) = mpsc::unbounded_channel();
        let me = instance.clone();
        tokio::spawn(async move {
            while let Some(push) = push_rx.recv().await {
                if push.kind != PushKind::Message {
                    continue;
                }
                if let Some(tube) = push
                    .data
                    .get(1)
                    .and_then(text)
                    .and_then(|m| Keys::parse_wake(m, &me))
                    && wake_tx.send(tube).is_err()
                {
                    return;
                }
            }
        });

        let scripts = Scripts::new();
        for script in scripts.all() {
            script.load_async(&mut conn).await.map_err(unavailable)?;
        }
        let mut inv = Call::new(&scripts.init, 14);
        inv.keys(&keys.tube("default")[..])
            .keys(keys.namespace())
            .arg("default")
            .arg(&origin);
        let asked = std::time::Instant::now();
        let now_us: Value = inv.invoke(&mut conn).await.map_err(unavailable)?;
        // Redis read its clock about half a round trip ago.
        let now = uint(&now_us) * US + asked.elapsed().as_nanos() as u64 / 2;
        let (refs, ref_ops) = mpsc::unbounded_channel();
        let ref_counts = RefCounts::default();
        let refs_dirty = Arc::new(AtomicBool::new(false));
        tokio::spawn(keep_references(
            ref_ops,
            conn.clone(),
            keys.clone(),
            origin.clone(),
            keys.refs(&instance),
            RefShared {
                counts: ref_counts.clone(),
                dirty: refs_dirty.clone(),
            },
        ));
        let store = RedisStore {
            refs,
            ref_counts,
            refs_dirty,
            uncertain: Mutex::new(Vec::new()),
            attempts: std::sync::atomic::AtomicU64::new(0),
            conn,
            keys,
            scripts,
            instance,
            origin,
            clock: Clock::starting_at(now),
            held: Mutex::new(HashMap::default()),
            wake: Mutex::new(Some(wake_rx)),
            next_heartbeat: Mutex::new(0),
        };
        store.heartbeat(now).await?;
        Ok(store)
    }

    /// Whether Redis answers now: one PING on the shared connection (so it also tells
    /// whether the connection commands use has come back after an outage), bounded by
    /// the response timeout.
    pub async fn ping(&self) -> StoreResult<()> {
        redis::cmd("PING")
            .query_async::<()>(&mut self.conn())
            .await
            .map_err(unavailable)
    }

    /// A clock that reads (approximately) the Redis clock, for the engine.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The wake-up events from the channel (taken once, by the engine).
    pub fn take_wake_events(&self) -> Option<mpsc::UnboundedReceiver<TubeName>> {
        self.wake.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    fn held(&self) -> MutexGuard<'_, HashMap<ConnId, HashMap<JobId, Held>>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh owner token for one reserve attempt by `conn`: instance, connection and
    /// attempt, so the reservation of an attempt whose answer was lost can be told
    /// apart from any other and undone without a race.
    fn attempt_owner(&self, conn: ConnId) -> String {
        let n = self
            .attempts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("{}:{}:{n}", self.instance, conn.0)
    }

    /// A time `at_us` of the Redis clock, read by a script at `now_us`, on this
    /// process's clock: as far after our now as it was after the script's. Reservation
    /// deadlines are kept this way so that the DEADLINE_SOON margin is never decided
    /// by a skew between the two clocks (the reply arrives after the script ran, so the
    /// local deadline is never earlier than Redis').
    fn local_time(&self, at_us: u64, now_us: u64) -> Nanos {
        self.clock.now() + at_us.saturating_sub(now_us) * US
    }

    /// The reservation `conn` holds on `id`, if any.
    fn held_job(&self, conn: ConnId, id: JobId) -> Option<Held> {
        self.held().get(&conn).and_then(|m| m.get(&id)).cloned()
    }

    fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// Run a single-tube script (see [`run_tube_script`]).
    async fn tube_script(
        &self,
        script: &redis::Script,
        tube: &str,
        extra_key: Option<&str>,
        args: &[&[u8]],
    ) -> StoreResult<Value> {
        let target = ScriptTarget {
            conn: self.conn(),
            keys: &self.keys,
            origin: &self.origin,
        };
        run_tube_script(target, script, tube, extra_key, args).await
    }

    /// The tube of job `id`, from the id index.
    async fn tube_of(&self, id: JobId) -> StoreResult<Option<TubeName>> {
        let v: Value = redis::cmd("HGET")
            .arg(self.keys.index())
            .arg(id)
            .query_async(&mut self.conn())
            .await
            .map_err(unavailable)?;
        Ok(text(&v).and_then(TubeName::new))
    }

    /// Remember a reserve attempt whose answer was lost.
    fn mark_uncertain(&self, tubes: &[TubeName], owner: String) {
        let mut u = self.uncertain.lock().unwrap_or_else(|e| e.into_inner());
        u.push((tubes.to_vec(), owner));
    }

    /// Undo the reservations made by reserve attempts whose answer was lost; the tubes
    /// that got jobs back (added to `woken`).
    async fn reclaim_lost(&self, woken: &mut Vec<TubeName>) -> StoreResult<()> {
        let lost = std::mem::take(&mut *self.uncertain.lock().unwrap_or_else(|e| e.into_inner()));
        let mut result = Ok(());
        for (tubes, owner) in lost {
            if result.is_err() {
                self.mark_uncertain(&tubes, owner);
                continue;
            }
            for tube in &tubes {
                match self
                    .tube_script(
                        &self.scripts.reclaim,
                        tube.as_str(),
                        None,
                        &[owner.as_bytes()],
                    )
                    .await
                {
                    Ok(v) if uint(&v) > 0 => woken.push(tube.clone()),
                    Ok(_) => {}
                    Err(err) => {
                        result = Err(err);
                        break;
                    }
                }
            }
            if result.is_err() {
                self.mark_uncertain(&tubes, owner);
            }
        }
        result
    }

    fn hold(&self, conn: ConnId, id: JobId, held: Held) {
        self.held().entry(conn).or_default().insert(id, held);
    }

    fn unhold(&self, conn: ConnId, id: JobId) {
        let mut held = self.held();
        if let Some(m) = held.get_mut(&conn) {
            m.remove(&id);
            if m.is_empty() {
                held.remove(&conn);
            }
        }
    }

    /// Say this instance is alive, and drop the tube references of instances that
    /// stopped saying so (they crashed: their connections are gone). If this instance
    /// was itself taken for dead (it stalled for longer than the lapse), its references
    /// were dropped: it restores them.
    async fn heartbeat(&self, now: Nanos) -> StoreResult<()> {
        let first = {
            let mut next = self
                .next_heartbeat
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if now < *next {
                return Ok(());
            }
            let first = *next == 0;
            *next = now + HEARTBEAT_EVERY.as_nanos() as u64;
            first
        };
        let registry = self.keys.instances();
        let lapses_us = (now + HEARTBEAT_LAPSES.as_nanos() as u64) / US;
        let mut conn = self.conn();
        let (added, dead): (i64, Vec<String>) = redis::pipe()
            .cmd("ZADD")
            .arg(&registry)
            .arg(lapses_us)
            .arg(&self.instance)
            .cmd("ZRANGEBYSCORE")
            .arg(&registry)
            .arg("-inf")
            .arg(now / US)
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        if added == 1 && !first {
            tracing::warn!(
                instance = %self.instance,
                "this instance was taken for dead (it stalled); restoring its tube references"
            );
            let _ = self.refs.send(RefOp::Restore);
        }
        let _ = self.refs.send(RefOp::SyncIfDirty);
        for instance in dead {
            if instance != self.instance {
                self.reap(&instance).await?;
            }
        }
        Ok(())
    }

    /// Drop a dead instance's tube references (one atomic script; retried if the
    /// instance gained references between reading them and the script).
    async fn reap(&self, instance: &str) -> StoreResult<()> {
        let refs_key = self.keys.refs(instance);
        let registry = self.keys.instances();
        for _ in 0..3 {
            let fields: Vec<String> = redis::cmd("HKEYS")
                .arg(&refs_key)
                .query_async(&mut self.conn())
                .await
                .map_err(unavailable)?;
            let mut tubes: Vec<&str> = fields
                .iter()
                .filter_map(|f| f.split_once(':').map(|(_, t)| t))
                .collect();
            tubes.sort_unstable();
            tubes.dedup();
            let mut inv = Call::new(&self.scripts.reap, 9 + 7 * tubes.len());
            inv.keys(self.keys.namespace())
                .key(&registry)
                .key(&refs_key);
            for t in &tubes {
                inv.keys(&self.keys.tube(t)[..]);
            }
            inv.arg(instance);
            for t in &tubes {
                inv.arg(*t);
            }
            let outcome: i64 = inv.invoke(&mut self.conn()).await.map_err(unavailable)?;
            match outcome {
                1 => {
                    tracing::info!(
                        instance,
                        "dropped the tube references of an instance that stopped"
                    );
                    return Ok(());
                }
                0 => return Ok(()),
                _ => continue,
            }
        }
        Ok(())
    }

    /// Change this instance's references to `tube`, in order with every other change
    /// (see [`keep_references`]).
    async fn tube_ref(&self, tube: &TubeName, kind: &'static str, delta: i64) -> StoreResult<()> {
        let (done, result) = oneshot::channel();
        self.refs
            .send(RefOp::Change {
                kind,
                tube: tube.clone(),
                delta,
                done,
            })
            .map_err(|_| StoreError::Unavailable("the reference keeper stopped".into()))?;
        result
            .await
            .map_err(|_| StoreError::Unavailable("the reference keeper stopped".into()))?
    }

    async fn peek_in(
        &self,
        tube: &str,
        which: &str,
        id: JobId,
    ) -> StoreResult<Option<(JobId, Bytes)>> {
        let id = id.to_string();
        let v = self
            .tube_script(
                &self.scripts.peek,
                tube,
                None,
                &[which.as_bytes(), id.as_bytes()],
            )
            .await?;
        let Some(mut items) = array(v) else {
            return Ok(None);
        };
        if items.len() < 2 {
            return Err(protocol_error("peek"));
        }
        let b = body(items.swap_remove(1));
        Ok(Some((uint(&items[0]), b)))
    }

    fn reserved_from(
        &self,
        conn: ConnId,
        tube: TubeName,
        owner: String,
        items: Vec<Value>,
    ) -> StoreResult<Reserved> {
        let mut it = items.into_iter();
        let (Some(id), Some(b), Some(deadline), _, Some(now), waited) = (
            it.next(),
            it.next(),
            it.next(),
            it.next(),
            it.next(),
            it.next(),
        ) else {
            return Err(protocol_error("reserve"));
        };
        let (id, deadline) = (uint(&id), self.local_time(uint(&deadline), uint(&now)));
        // Negative: the job was written before its ready time was recorded.
        let waited = waited
            .as_ref()
            .and_then(int)
            .and_then(|us| u64::try_from(us).ok())
            .map(|us| us * US);
        self.hold(
            conn,
            id,
            Held {
                tube: tube.clone(),
                deadline,
                owner,
            },
        );
        Ok(Reserved {
            id,
            tube,
            body: body(b),
            deadline,
            waited,
        })
    }
}

fn parse_state(v: &Value) -> JobState {
    match text(v) {
        Some(b"reserved") => JobState::Reserved,
        Some(b"delayed") => JobState::Delayed,
        Some(b"buried") => JobState::Buried,
        _ => JobState::Ready,
    }
}

impl Store for RedisStore {
    async fn put(&self, job: NewJob, _now: Nanos) -> StoreResult<JobId> {
        let (pri, delay, ttr) = (
            job.pri.to_string(),
            job.delay_secs.to_string(),
            job.ttr_secs.to_string(),
        );
        let v = self
            .tube_script(
                &self.scripts.put,
                job.tube.as_str(),
                None,
                &[pri.as_bytes(), delay.as_bytes(), ttr.as_bytes(), &job.body],
            )
            .await?;
        array(v)
            .and_then(|items| items.first().map(uint))
            .ok_or_else(|| protocol_error("put"))
    }

    async fn burn_id(&self) -> StoreResult<JobId> {
        redis::cmd("INCR")
            .arg(self.keys.ids())
            .query_async(&mut self.conn())
            .await
            .map_err(unavailable)
    }

    async fn reserve(
        &self,
        conn: ConnId,
        watched: &[TubeName],
        _now: Nanos,
    ) -> StoreResult<Option<Reserved>> {
        let owner = self.attempt_owner(conn);
        let mut inv = Call::new(&self.scripts.reserve, 7 + watched.len());
        inv.keys(self.keys.namespace());
        for t in watched {
            // The ready key only: the script derives a tube's other keys from it.
            inv.key(&self.keys.tube(t.as_str())[0]);
        }
        inv.arg(&self.origin).arg(&owner);
        for t in watched {
            inv.arg(t.as_str());
        }
        let v: Value = match inv.invoke(&mut self.conn()).await {
            Ok(v) => v,
            Err(err) => {
                // The script may still run (a timeout does not cancel it).
                self.mark_uncertain(watched, owner);
                return Err(unavailable(err));
            }
        };
        let Some(items) = array(v) else {
            return Ok(None);
        };
        let index = items.get(3).map(uint).unwrap_or(0) as usize;
        let tube = watched
            .get(index.wrapping_sub(1))
            .cloned()
            .ok_or_else(|| protocol_error("reserve"))?;
        self.reserved_from(conn, tube, owner, items).map(Some)
    }

    async fn reserve_job(
        &self,
        conn: ConnId,
        id: JobId,
        _now: Nanos,
    ) -> StoreResult<Option<Reserved>> {
        let Some(tube) = self.tube_of(id).await? else {
            return Ok(None);
        };
        let (ids, owner) = (id.to_string(), self.attempt_owner(conn));
        let v = self
            .tube_script(
                &self.scripts.reserve_job,
                tube.as_str(),
                None,
                &[ids.as_bytes(), owner.as_bytes()],
            )
            .await
            .inspect_err(|_| self.mark_uncertain(std::slice::from_ref(&tube), owner.clone()))?;
        match array(v) {
            Some(items) => self.reserved_from(conn, tube, owner, items).map(Some),
            None => Ok(None),
        }
    }

    async fn delete(&self, conn: ConnId, id: JobId) -> StoreResult<bool> {
        // Only the holder may delete a reserved job: its token proves it. A job this
        // connection holds needs no index lookup.
        let (tube, owner) = match self.held_job(conn, id) {
            Some(h) => (h.tube, h.owner),
            None => match self.tube_of(id).await? {
                Some(tube) => (tube, String::new()),
                None => return Ok(false),
            },
        };
        let ids = id.to_string();
        let v = self
            .tube_script(
                &self.scripts.delete,
                tube.as_str(),
                None,
                &[ids.as_bytes(), owner.as_bytes()],
            )
            .await?;
        let deleted = uint(&v) == 1;
        if deleted {
            self.unhold(conn, id);
        }
        Ok(deleted)
    }

    async fn release(
        &self,
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay_secs: u32,
        _now: Nanos,
    ) -> StoreResult<Option<TubeName>> {
        let Some(Held { tube, owner, .. }) = self.held_job(conn, id) else {
            return Ok(None);
        };
        let (ids, pri, delay) = (id.to_string(), pri.to_string(), delay_secs.to_string());
        let v = self
            .tube_script(
                &self.scripts.release,
                tube.as_str(),
                None,
                &[
                    ids.as_bytes(),
                    owner.as_bytes(),
                    pri.as_bytes(),
                    delay.as_bytes(),
                ],
            )
            .await?;
        self.unhold(conn, id);
        Ok((uint(&v) == 1).then_some(tube))
    }

    async fn bury(&self, conn: ConnId, id: JobId, pri: u32) -> StoreResult<bool> {
        let Some(Held { tube, owner, .. }) = self.held_job(conn, id) else {
            return Ok(false);
        };
        let (ids, pri) = (id.to_string(), pri.to_string());
        let v = self
            .tube_script(
                &self.scripts.bury,
                tube.as_str(),
                None,
                &[ids.as_bytes(), owner.as_bytes(), pri.as_bytes()],
            )
            .await?;
        self.unhold(conn, id);
        Ok(uint(&v) == 1)
    }

    async fn touch(&self, conn: ConnId, id: JobId, _now: Nanos) -> StoreResult<Option<Nanos>> {
        let Some(Held { tube, owner, .. }) = self.held_job(conn, id) else {
            return Ok(None);
        };
        let ids = id.to_string();
        let v = self
            .tube_script(
                &self.scripts.touch,
                tube.as_str(),
                None,
                &[ids.as_bytes(), owner.as_bytes()],
            )
            .await?;
        let Some(f) = array(v).filter(|f| f.len() >= 2) else {
            self.unhold(conn, id);
            return Ok(None);
        };
        let deadline = self.local_time(uint(&f[0]), uint(&f[1]));
        self.hold(
            conn,
            id,
            Held {
                tube,
                deadline,
                owner,
            },
        );
        Ok(Some(deadline))
    }

    async fn kick(&self, tube: &TubeName, bound: u32, _now: Nanos) -> StoreResult<u32> {
        let bound = bound.to_string();
        let v = self
            .tube_script(&self.scripts.kick, tube.as_str(), None, &[bound.as_bytes()])
            .await?;
        Ok(uint(&v) as u32)
    }

    async fn kick_job(&self, id: JobId, _now: Nanos) -> StoreResult<Option<TubeName>> {
        let Some(tube) = self.tube_of(id).await? else {
            return Ok(None);
        };
        let ids = id.to_string();
        let v = self
            .tube_script(
                &self.scripts.kick_job,
                tube.as_str(),
                None,
                &[ids.as_bytes()],
            )
            .await?;
        Ok((uint(&v) == 1).then_some(tube))
    }

    async fn peek(&self, id: JobId) -> StoreResult<Option<(JobId, Bytes)>> {
        let Some(tube) = self.tube_of(id).await? else {
            return Ok(None);
        };
        self.peek_in(tube.as_str(), "id", id).await
    }

    async fn peek_ready(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        self.peek_in(tube.as_str(), "ready", 0).await
    }

    async fn peek_delayed(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        self.peek_in(tube.as_str(), "delayed", 0).await
    }

    async fn peek_buried(&self, tube: &TubeName) -> StoreResult<Option<(JobId, Bytes)>> {
        self.peek_in(tube.as_str(), "buried", 0).await
    }

    async fn job_info(&self, id: JobId, _now: Nanos) -> StoreResult<Option<JobInfo>> {
        let Some(tube) = self.tube_of(id).await? else {
            return Ok(None);
        };
        let ids = id.to_string();
        let v = self
            .tube_script(
                &self.scripts.job_info,
                tube.as_str(),
                None,
                &[ids.as_bytes()],
            )
            .await?;
        let Some(f) = array(v) else { return Ok(None) };
        if f.len() < 12 {
            return Err(protocol_error("stats-job"));
        }
        let state = parse_state(&f[4]);
        Ok(Some(JobInfo {
            id,
            tube,
            state,
            pri: uint(&f[0]) as u32,
            delay_secs: uint(&f[1]) as u32,
            ttr_secs: uint(&f[2]) as u32,
            created: uint(&f[3]) * US,
            deadline: matches!(state, JobState::Delayed | JobState::Reserved)
                .then(|| uint(&f[5]) * US),
            reserves: uint(&f[6]),
            timeouts: uint(&f[7]),
            releases: uint(&f[8]),
            buries: uint(&f[9]),
            kicks: uint(&f[10]),
            now: uint(&f[11]) * US,
        }))
    }

    async fn tube_info(&self, tube: &TubeName, _now: Nanos) -> StoreResult<Option<TubeInfo>> {
        let v = self
            .tube_script(&self.scripts.tube_info, tube.as_str(), None, &[])
            .await?;
        let Some(f) = array(v) else { return Ok(None) };
        if f.len() < 13 {
            return Err(protocol_error("stats-tube"));
        }
        let n: Vec<u64> = f.iter().map(uint).collect();
        Ok(Some(TubeInfo {
            urgent: n[0],
            ready: n[1],
            reserved: n[2],
            delayed: n[3],
            buried: n[4],
            total_jobs: n[5],
            using: n[6],
            watching: n[7],
            cmd_delete: n[8],
            cmd_pause: n[9],
            pause: n[10] * US,
            pause_until: n[11] * US,
            now: n[12] * US,
        }))
    }

    async fn totals(&self) -> StoreResult<Totals> {
        // The sets are the only count of jobs per state (the scripts keep no totals of
        // them), so the figures are summed over the tubes, in one transaction.
        let names = self.list_tubes().await?;
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HMGET")
            .arg(self.keys.stats())
            .arg(&["total_jobs", "job_timeouts"]);
        for t in &names {
            let k = self.keys.tube(t.as_str());
            pipe.cmd("ZCOUNT").arg(&k[0]).arg("-inf").arg("(1024");
            for set in &k[..4] {
                pipe.cmd("ZCARD").arg(set);
            }
        }
        let mut replies: Vec<Value> = pipe
            .query_async(&mut self.conn())
            .await
            .map_err(unavailable)?;
        if replies.len() != 1 + names.len() * 5 {
            return Err(protocol_error("stats"));
        }
        let fields = array(replies.remove(0)).unwrap_or_default();
        let f = |i: usize| fields.get(i).map_or(0, uint);
        let mut sums = [0u64; 5];
        for (i, v) in replies.iter().enumerate() {
            sums[i % 5] += uint(v);
        }
        let [urgent, ready, delayed, reserved, buried] = sums;
        Ok(Totals {
            urgent,
            ready,
            reserved,
            delayed,
            buried,
            total_jobs: f(0),
            job_timeouts: f(1),
            tubes: names.len() as u64,
        })
    }

    async fn list_tubes(&self) -> StoreResult<Vec<TubeName>> {
        let names: Vec<Vec<u8>> = redis::cmd("LRANGE")
            .arg(self.keys.tubes())
            .arg(0)
            .arg(-1)
            .query_async(&mut self.conn())
            .await
            .map_err(unavailable)?;
        Ok(names.iter().filter_map(|n| TubeName::new(n)).collect())
    }

    async fn pause(&self, tube: &TubeName, delay_secs: u32, _now: Nanos) -> StoreResult<bool> {
        let delay = delay_secs.to_string();
        let v = self
            .tube_script(
                &self.scripts.pause,
                tube.as_str(),
                None,
                &[delay.as_bytes()],
            )
            .await?;
        Ok(uint(&v) > 0)
    }

    async fn has_ready(&self, watched: &[TubeName]) -> StoreResult<bool> {
        if watched.is_empty() {
            return Ok(false);
        }
        let mut pipe = redis::pipe();
        for t in watched {
            pipe.cmd("ZCARD").arg(&self.keys.tube(t.as_str())[0]);
        }
        let counts: Vec<u64> = pipe
            .query_async(&mut self.conn())
            .await
            .map_err(unavailable)?;
        Ok(counts.iter().any(|&n| n > 0))
    }

    async fn soonest_deadline(&self, conn: ConnId) -> StoreResult<Option<Nanos>> {
        let now = self.clock.now();
        let mut held = self.held();
        let Some(jobs) = held.get_mut(&conn) else {
            return Ok(None);
        };
        // A reservation past its deadline has lapsed: some timer returns it to ready.
        jobs.retain(|_, h| h.deadline >= now);
        let soonest = jobs.values().map(|h| h.deadline).min();
        if jobs.is_empty() {
            held.remove(&conn);
        }
        Ok(soonest)
    }

    async fn release_all(&self, conn: ConnId, _now: Nanos) -> StoreResult<Vec<TubeName>> {
        let jobs = self.held().remove(&conn).unwrap_or_default();
        let mut tubes = Vec::new();
        for (id, h) in jobs {
            let ids = id.to_string();
            let v = self
                .tube_script(
                    &self.scripts.unreserve,
                    h.tube.as_str(),
                    None,
                    &[ids.as_bytes(), h.owner.as_bytes()],
                )
                .await?;
            if uint(&v) == 1 {
                tubes.push(h.tube);
            }
        }
        tubes.sort();
        tubes.dedup();
        Ok(tubes)
    }

    async fn close(
        &self,
        conn: ConnId,
        watching: &[TubeName],
        using: &TubeName,
        release_jobs: bool,
        _now: Nanos,
    ) -> StoreResult<Vec<TubeName>> {
        let held = self.held().remove(&conn).unwrap_or_default();
        let jobs: Vec<(JobId, TubeName, String)> = if release_jobs {
            held.into_iter()
                .map(|(id, h)| (id, h.tube, h.owner))
                .collect()
        } else {
            Vec::new()
        };
        let refs = watching
            .iter()
            .map(|t| ("watching", t))
            .chain(std::iter::once(("using", using)));
        {
            let mut counts = lock_counts(&self.ref_counts);
            for (kind, tube) in refs.clone() {
                if let Some(n) = counts.get_mut(&(kind, tube.clone())) {
                    *n -= 1;
                }
            }
            counts.retain(|_, n| *n > 0);
        }
        // Sent from the closing connection's own task, not through the reference
        // keeper: the script is queued on the shared Redis connection before any command
        // another connection sends after this one hung up, so none sees half the close.
        let target = ScriptTarget {
            conn: self.conn(),
            keys: &self.keys,
            origin: &self.origin,
        };
        let refs_key = self.keys.refs(&self.instance);
        let result = close_connection(target, &self.scripts.close, &refs_key, &jobs, refs).await;
        if result.is_err() {
            self.refs_dirty.store(true, Ordering::SeqCst);
        }
        result
    }

    async fn tick(&self, now: Nanos) -> StoreResult<Vec<TubeName>> {
        self.heartbeat(now).await?;
        let mut woken = Vec::new();
        self.reclaim_lost(&mut woken).await?;
        let due: Vec<Vec<u8>> = redis::cmd("ZRANGEBYSCORE")
            .arg(self.keys.due())
            .arg("-inf")
            .arg(now / US)
            .query_async(&mut self.conn())
            .await
            .map_err(unavailable)?;
        for name in due {
            let Some(tube) = TubeName::new(&name) else {
                continue;
            };
            let v = self
                .tube_script(&self.scripts.tick, tube.as_str(), None, &[])
                .await?;
            if uint(&v) == 1 {
                woken.push(tube);
            }
        }
        Ok(woken)
    }

    async fn next_deadline(&self) -> StoreResult<Option<Nanos>> {
        let head: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
            .arg(self.keys.due())
            .arg(0)
            .arg(0)
            .arg("WITHSCORES")
            .query_async(&mut self.conn())
            .await
            .map_err(unavailable)?;
        Ok(head.first().map(|(_, score)| (*score as u64) * US))
    }

    async fn use_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.tube_ref(tube, "using", 1).await
    }

    async fn unuse_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.tube_ref(tube, "using", -1).await
    }

    async fn watch_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.tube_ref(tube, "watching", 1).await
    }

    async fn unwatch_tube(&self, tube: &TubeName) -> StoreResult<()> {
        self.tube_ref(tube, "watching", -1).await
    }
}
