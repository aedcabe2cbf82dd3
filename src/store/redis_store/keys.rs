//! Key names of the Redis store, in one place (the schema is in docs/REDIS.md).
//!
//! Every key starts with the configured prefix, so deployments and test runs can share
//! one Redis. A tube's keys share the hash tag `{<prefix>:t:<tube>}`, so one tube's keys
//! live in one slot of a Redis Cluster.
//!
//! A tube's key names are built once and kept in a small cache shared by the clones of
//! one [`Keys`] (every command names its tube's seven keys; formatting them each time
//! was a measurable part of a command's cost). The cache is bounded: when it is full it
//! is emptied and refills with the tubes in use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::protocol::TubeName;

/// How many tubes' key names are kept.
const CACHED_TUBES: usize = 4096;

/// The key names of one tube, in [`TUBE_KEYS`] order.
pub type TubeKeys = Arc<[String; 7]>;

/// The seven keys of one tube, in the order the scripts expect. Each is the tube's
/// `{<prefix>:t:<tube>}:` followed by its name here: `reserve.lua` is given only the
/// ready key of each watched tube and derives the others by that rule.
pub const TUBE_KEYS: [&str; 7] = [
    "ready", "delayed", "reserved", "buried", "jobs", "bodies", "meta",
];

#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
    namespace: [String; 7],
    tubes: Arc<Mutex<HashMap<String, TubeKeys>>>,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        let p = prefix;
        Keys {
            prefix: p.to_string(),
            namespace: [
                format!("{p}:ids"),
                format!("{p}:seq"),
                format!("{p}:stats"),
                format!("{p}:index"),
                format!("{p}:due"),
                format!("{p}:tubes"),
                format!("{p}:tubepos"),
            ],
            tubes: Arc::default(),
        }
    }

    /// The namespace keys: ids, seq, stats, index, due, tubes, tubepos.
    pub fn namespace(&self) -> &[String; 7] {
        &self.namespace
    }

    pub fn ids(&self) -> &str {
        &self.namespace[0]
    }
    pub fn stats(&self) -> &str {
        &self.namespace[2]
    }
    pub fn index(&self) -> &str {
        &self.namespace[3]
    }
    pub fn due(&self) -> &str {
        &self.namespace[4]
    }
    pub fn tubes(&self) -> &str {
        &self.namespace[5]
    }

    /// A tube's keys: ready, delayed, reserved, buried, jobs, bodies, meta.
    pub fn tube(&self, tube: &str) -> TubeKeys {
        let mut cache = self.tubes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(keys) = cache.get(tube) {
            return keys.clone();
        }
        if cache.len() >= CACHED_TUBES {
            cache.clear();
        }
        let keys: TubeKeys =
            Arc::new(TUBE_KEYS.map(|k| format!("{{{}:t:{tube}}}:{k}", self.prefix)));
        cache.insert(tube.to_string(), keys.clone());
        keys
    }

    /// The hash of use/watch references held by connections of one instance, so that a
    /// crashed instance's references can be dropped by the others.
    pub fn refs(&self, instance: &str) -> String {
        format!("{}:refs:{instance}", self.prefix)
    }

    /// Live instances: member instance id, score the time its heartbeat lapses.
    pub fn instances(&self) -> String {
        format!("{}:instances", self.prefix)
    }

    /// The pub/sub channel on which scripts announce tubes that gained ready jobs.
    pub fn wake_channel(&self) -> String {
        format!("{}:wake", self.prefix)
    }

    /// The tube named in a wake-up message ("<instance>\n<tube>"), unless the message
    /// is from instance `me` (which served its own waiters) or malformed.
    pub fn parse_wake(payload: &[u8], me: &str) -> Option<TubeName> {
        let split = payload.iter().position(|&b| b == b'\n')?;
        let (from, tube) = (&payload[..split], &payload[split + 1..]);
        if from == me.as_bytes() {
            return None;
        }
        TubeName::new(tube)
    }
}
