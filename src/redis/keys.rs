//! Key names of the Redis schema both modes keep jobs in, and the one definition of the
//! order in which the shared mode's scripts receive them (the schema is in
//! docs/REDIS.md).
//!
//! Every key starts with the configured prefix, so deployments and test runs can share
//! one Redis. A tube's keys share the hash tag `{<prefix>:t:<tube>}`, so one tube's keys
//! live in one slot of a Redis Cluster.
//!
//! KEYS layout, shared by every script: the namespace's keys ([`NsKey`] order), then
//! the script's own keys (a fixed number per script, such as an instance's reference
//! hash), then one group of keys per tube the call names ([`TubeKey`] order; a reserve
//! gets the [`RESERVE_KEYS`] of each watched tube). The Lua
//! side names a group's keys through code generated from these definitions
//! ([`lua_key_layout`], prepended to every script), so adding or reordering a key here
//! moves both sides at once.
//!
//! A tube's key names are built once and kept in a small cache shared by the clones of
//! one [`Keys`] (every command names its tube's keys; formatting them each time was a
//! measurable part of a command's cost). The cache is bounded: when it is full it is
//! emptied and refills with the tubes in use.

use foldhash::HashMap;
use std::fmt::Write;
use std::sync::{Arc, Mutex};

use crate::protocol::TubeName;
use crate::util::lock;

/// How many tubes' key names are kept.
const CACHED_TUBES: usize = 4096;

/// A group of keys that scripts receive together, in declaration order: an enum whose
/// variants index the group and name the Lua table field of each key.
macro_rules! key_group {
    ($(#[$meta:meta])* $group:ident { $($key:ident = $lua:literal,)* }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum $group {
            $($key,)*
        }

        impl $group {
            /// Every key of the group, in order.
            pub const ALL: &[Self] = &[$(Self::$key,)*];
            /// Each key's name: the Lua table field, and the last part of its key name.
            pub const NAMES: &[&str] = &[$($lua,)*];
            /// How many keys the group has (how many KEYS a group takes).
            pub const COUNT: usize = Self::NAMES.len();

            pub const fn name(self) -> &'static str {
                Self::NAMES[self as usize]
            }
        }
    };
}

key_group!(
    /// A tube's keys: three sorted sets of jobs by state and the buried FIFO, the job
    /// metadata and bodies, and the tube's own counters and pause.
    TubeKey {
        Ready = "ready",
        Delayed = "delayed",
        Reserved = "reserved",
        Buried = "buried",
        Jobs = "jobs",
        Bodies = "bodies",
        Meta = "meta",
    }
);

key_group!(
    /// The namespace's keys: the id and bury counters, the totals, the id -> tube index,
    /// the due index, the tube list with each tube's position in it, and the
    /// namespace's generation (a random token made with the namespace: a script called
    /// for another generation refuses, see the prelude).
    NsKey {
        Ids = "ids",
        Seq = "seq",
        Stats = "stats",
        Index = "index",
        Due = "due",
        Tubes = "tubes",
        Tubepos = "tubepos",
        Generation = "generation",
    }
);

/// The keys of a tube that `reserve` may touch (never the delayed or buried set): what
/// it is given of each watched tube, in this order, so that a reserve over many tubes
/// passes as few keys as it can.
pub const RESERVE_KEYS: &[TubeKey] = &[
    TubeKey::Ready,
    TubeKey::Reserved,
    TubeKey::Jobs,
    TubeKey::Bodies,
    TubeKey::Meta,
];

/// The key names of one tube, in [`TubeKey`] order.
#[derive(Clone, Debug)]
pub struct TubeKeys(Arc<[String; TubeKey::COUNT]>);

impl TubeKeys {
    pub fn get(&self, key: TubeKey) -> &str {
        &self.0[key as usize]
    }
}

/// The Lua that names the KEYS of a call, prepended to every script (before the
/// prelude): for each group its size (`N_TUBE_KEYS`), each key's offset in it
/// (`TUBE_READY`), and a function that names the keys of a group starting at KEYS index
/// `b` (`tube_group(b).ready`). Plain constructors, not loops: this runs on every call.
pub fn lua_key_layout() -> String {
    let reserve_names: Vec<&str> = RESERVE_KEYS.iter().map(|k| k.name()).collect();
    let mut lua = String::from("-- Generated from keys.rs (TubeKey, NsKey, RESERVE_KEYS).\n");
    for (group, names) in [
        ("tube", TubeKey::NAMES),
        ("ns", NsKey::NAMES),
        ("reserve", &reserve_names[..]),
    ] {
        let upper = group.to_uppercase();
        let offsets: Vec<String> = (0..names.len()).map(|i| i.to_string()).collect();
        let vars: Vec<String> = names
            .iter()
            .map(|n| format!("{upper}_{}", n.to_uppercase()))
            .collect();
        let fields: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n} = KEYS[b + {i}]"))
            .collect();
        // Writing to a String cannot fail.
        let _ = writeln!(lua, "local N_{upper}_KEYS = {}", names.len());
        let _ = writeln!(lua, "local {} = {}", vars.join(", "), offsets.join(", "));
        let _ = writeln!(
            lua,
            "local function {group}_group(b)\n  return {{ {} }}\nend",
            fields.join(", ")
        );
    }
    lua
}

#[derive(Clone, Debug)]
pub struct Keys {
    prefix: String,
    namespace: [String; NsKey::COUNT],
    tubes: Arc<Mutex<HashMap<String, TubeKeys>>>,
}

impl Keys {
    pub fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.to_string(),
            namespace: std::array::from_fn(|i| format!("{prefix}:{}", NsKey::NAMES[i])),
            tubes: Arc::default(),
        }
    }

    /// The namespace's keys, in the order scripts receive them.
    pub fn namespace(&self) -> &[String] {
        &self.namespace
    }

    pub fn ns(&self, key: NsKey) -> &str {
        &self.namespace[key as usize]
    }

    /// A tube's keys.
    pub fn tube(&self, tube: &str) -> TubeKeys {
        let mut cache = lock(&self.tubes);
        if let Some(keys) = cache.get(tube) {
            return keys.clone();
        }
        if cache.len() >= CACHED_TUBES {
            cache.clear();
        }
        let keys = TubeKeys(Arc::new(std::array::from_fn(|i| {
            self.format_key(tube, TubeKey::ALL[i])
        })));
        cache.insert(tube.to_string(), keys.clone());
        keys
    }

    /// One key of a tube, for reads over many tubes (`stats`, the safety sweep): from
    /// the cache when the tube is there, otherwise formatted alone and not cached, so
    /// a read over 100,000 tubes neither formats every key of each nor empties the
    /// cache of the tubes in use.
    pub fn tube_key(&self, tube: &str, key: TubeKey) -> String {
        if let Some(keys) = lock(&self.tubes).get(tube) {
            return keys.get(key).to_string();
        }
        self.format_key(tube, key)
    }

    fn format_key(&self, tube: &str, key: TubeKey) -> String {
        format!("{{{}:t:{tube}}}:{}", self.prefix, key.name())
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

    /// Leader mode's copy of the console's history: one hash per minute (tube → that
    /// minute's figures), expiring a little after the history forgets the minute.
    pub fn history(&self, minute: u64) -> String {
        format!("{}:history:{minute}", self.prefix)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tube_key_is_named_by_its_group_entry() {
        let keys = Keys::new("p");
        let t = keys.tube("jobs");
        assert_eq!(t.get(TubeKey::Ready), "{p:t:jobs}:ready");
        assert_eq!(t.get(TubeKey::Meta), "{p:t:jobs}:meta");
        assert_eq!(keys.ns(NsKey::Due), "p:due");
        assert_eq!(keys.namespace()[NsKey::Tubepos as usize], "p:tubepos");
    }

    #[test]
    fn the_lua_layout_names_each_key_by_its_offset() {
        let lua = lua_key_layout();
        for line in [
            "local N_TUBE_KEYS = 7",
            "local TUBE_READY, TUBE_DELAYED, TUBE_RESERVED, TUBE_BURIED, TUBE_JOBS, TUBE_BODIES, TUBE_META = 0, 1, 2, 3, 4, 5, 6",
            "  return { ready = KEYS[b + 0], delayed = KEYS[b + 1], reserved = KEYS[b + 2], buried = KEYS[b + 3], jobs = KEYS[b + 4], bodies = KEYS[b + 5], meta = KEYS[b + 6] }",
            "local N_NS_KEYS = 8",
            "local function ns_group(b)",
            "local N_RESERVE_KEYS = 5",
            "  return { ready = KEYS[b + 0], reserved = KEYS[b + 1], jobs = KEYS[b + 2], bodies = KEYS[b + 3], meta = KEYS[b + 4] }",
        ] {
            assert!(
                lua.lines().any(|l| l == line),
                "{line:?} missing from\n{lua}"
            );
        }
    }
}
