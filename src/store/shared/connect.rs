//! Connecting: one multiplexed RESP3 connection for commands and another for the
//! wake-up subscription (Redis applies its pub/sub output-buffer limit to a connection
//! that subscribed: replies, however large, never travel on that one), the scripts
//! loaded up front, the `default` tube made sure of, the Redis clock read, and this
//! instance registered.
//!
//! Both connections are [`RedisConn`]s: made again by themselves (after a failover, to
//! the new primary), the subscription renewed; a command that cannot get an answer
//! within `RESPONSE_TIMEOUT` (plus the WAIT timeout, with `--redis-wait-replicas`)
//! fails (INTERNAL_ERROR), never hangs.
//!
//! Ownership: the task that forwards wake-ups owns the push receiver and the
//! subscription's connection; it ends when the engine drops the wake-up receiver.
//!
//! Bounds: both channels of the wake-ups are unbounded, because redis-rs hands a
//! message to the push channel synchronously (it cannot wait for room) and a wake-up
//! must not be lost. The push channel is drained by the forwarding task, which does
//! no I/O, so it holds at most what the subscription's connection read since the task
//! last ran; Redis itself drops a subscriber that falls behind its pub/sub output-buffer
//! limit (the connection is then made again). The wake-up channel is drained by the
//! engine's serve task at each round; it holds the tubes other instances woke during
//! one serve pass, whose Redis calls each end within the response timeout.

use std::sync::Mutex;

use rand::RngExt;
use redis::{PushInfo, PushKind};
use tokio::sync::mpsc;

use super::RedisStore;
use super::decode::text;
use super::eviction::EvictionChecks;
use super::held::HeldJobs;
use super::reclaim::Attempts;
use super::refs::References;
use super::scripts::Runner;
use crate::protocol::TubeName;
use crate::redis::keys::Keys;
use crate::redis::replicas::ReplicaWait;
use crate::redis::{CallError, RedisConfig, RedisConn};
use crate::store::StoreError;

/// Command connections with `--redis-wait-replicas` (see `connect`).
const WAIT_LANES: usize = 8;

impl RedisStore {
    /// Connect (commands, and the wake-up subscription on a connection of its own),
    /// make sure `default` exists, and read the Redis clock. Fails when Redis cannot be
    /// reached or refuses the credentials.
    pub async fn connect(config: &RedisConfig) -> Result<RedisStore, StoreError> {
        let connector = config.connector()?;
        let wait = ReplicaWait::new(config.wait_replicas, config.wait_timeout);
        let response_timeout = ReplicaWait::response_timeout(wait);
        // WAIT blocks the connection it is sent on until the replicas confirm, and every
        // command pipelined behind it waits too: with replicas to wait for, commands go
        // out on several connections in turn, so their WAITs overlap.
        let lanes = if wait.is_some() { WAIT_LANES } else { 1 };
        let mut conns = Vec::with_capacity(lanes);
        for _ in 0..lanes {
            conns.push(
                connector
                    .managed("commands", response_timeout)
                    .await
                    .map_err(CallError::connect)?,
            );
        }
        let keys = Keys::new(&config.prefix);
        let bytes: [u8; 8] = rand::rng().random();
        let instance: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let channel = keys.wake_channel();
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let subscription = connector
            .subscriber(channel.clone(), push_tx)
            .await
            .map_err(CallError::connect)?;
        let wake_rx = forward_wake_ups(push_rx, instance.clone(), subscription);

        let run = Runner::new(conns, keys, &format!("{instance}\n{channel}"), wait);
        run.scripts().load_all(&mut run.conn()).await?;
        RedisStore::init_namespace(&run).await?;
        let clock = RedisStore::read_clock(&run).await?;
        let now = clock.now();
        let refs = References::start(run.clone(), run.keys().refs(&instance));
        let store = RedisStore {
            attempts: Attempts::new(&instance),
            run,
            connector,
            instance,
            clock,
            held: HeldJobs::default(),
            refs,
            wake: Mutex::new(Some(wake_rx)),
            next_heartbeat: Mutex::new(0),
            next_window_sweep: Mutex::new(0),
            next_ahead_sweep: Mutex::new(0),
            eviction: EvictionChecks::default(),
            windows_max: crate::store::KeyLimits::WINDOWS_MAX.into(),
            policies: Mutex::default(),
            retention: Mutex::default(),
            retention_on: false.into(),
            layout_refused: false.into(),
        };
        store.heartbeat(now).await?;
        Ok(store)
    }
}

/// Forward the tubes named on the wake-up channel by other instances (`me` skips its
/// own messages) until the receiver is dropped.
/// The task owns the subscription's connection: it closes when the task ends.
fn forward_wake_ups(
    mut pushes: mpsc::UnboundedReceiver<PushInfo>,
    me: String,
    subscription: RedisConn,
) -> mpsc::UnboundedReceiver<TubeName> {
    let (wake_tx, wake_rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let _subscription = subscription;
        while let Some(push) = pushes.recv().await {
            if push.kind != PushKind::SMessage {
                continue;
            }
            if let Some(tube) = push
                .data
                .get(1)
                .and_then(|m| text(m).ok())
                .and_then(|m| Keys::parse_wake(m, &me))
                && wake_tx.send(tube).is_err()
            {
                return;
            }
        }
    });
    wake_rx
}
