//! Key names of the Redis schema both modes keep jobs in, and the one definition of the
//! order in which the shared mode's scripts receive them (the schema is in
//! docs/REDIS.md).
//!
//! Every key starts with the namespace's hash tag `{<prefix>}`, so deployments and test
//! runs can share one Redis, and every key of a namespace (the lease's, the tubes', the
//! wake-up channel's name) hashes to one slot of a Redis Cluster ([`slot_of`]): every
//! script and batch of a namespace names keys of one slot only. A prefix is never empty
//! and holds no `{` or `}` ([`check_prefix`]): an empty or broken tag would make Redis
//! hash whole key names and spread the namespace. The layout before this one (schema 1)
//! is known to `crate::redis::schema` alone, which renames it at start.
//!
//! KEYS layout, shared by every script: the namespace's keys it reads ([`NsKey`] order;
//! the shared mode's `scripts.rs` passes and names only those), then
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
    /// A tube's keys: three sorted sets of jobs by state and the buried FIFO, the
    /// tube's own counters and pause, and its job keys (key -> id, a live job's or a
    /// deleted one's inside its dedupe window). A job itself is a key of its own
    /// ([`Keys::job`]).
    TubeKey {
        Ready = "ready",
        Delayed = "delayed",
        Reserved = "reserved",
        Buried = "buried",
        Meta = "meta",
        Keys = "keys",
    }
);

impl TubeKey {
    /// The keys a tube's destruction leaves: its job keys and their dedupe windows
    /// (docs/EXTENSIONS.md: a window keeps its key, not the tube).
    pub const KEPT: &[TubeKey] = &[TubeKey::Keys];
}

key_group!(
    /// The namespace's keys: the id and bury counters, the totals, the due index, the
    /// tube list with each tube's position in it, and the namespace's generation (a
    /// random token made with the namespace: a script called for another generation
    /// refuses, see the prelude), the ends of the open dedupe windows (member
    /// `<tube>\n<key>`), and the large bodies written ahead of their jobs (member the
    /// id, score the time written, ms: a writer that died between the two leaves a job
    /// key holding only a body, which nothing else names; docs/REDIS.md), and the mark
    /// that no large body was ever written in the namespace (made with a fresh
    /// namespace, deleted by the first body written ahead and by every new leader:
    /// while it is there a reserve reads a body with its job, without first asking its
    /// length).
    NsKey {
        Ids = "ids",
        Seq = "seq",
        Stats = "stats",
        Due = "due",
        Tubes = "tubes",
        Tubepos = "tubepos",
        Generation = "generation",
        Keywin = "keywin",
        Ahead = "ahead",
        Small = "small",
    }
);

/// The keys of a tube that `reserve` may touch (never the delayed or buried set): what
/// it is given of each watched tube, in this order, so that a reserve over many tubes
/// passes as few keys as it can.
pub const RESERVE_KEYS: &[TubeKey] = &[TubeKey::Ready, TubeKey::Reserved, TubeKey::Meta];

/// The key names of one tube, in [`TubeKey`] order.
#[derive(Clone, Debug)]
pub struct TubeKeys(Arc<[String; TubeKey::COUNT]>);

impl TubeKeys {
    pub fn get(&self, key: TubeKey) -> &str {
        &self.0[key as usize]
    }
}

/// What a tube's key names hold between the namespace's tag and the tube's name
/// (`{<prefix>}:t:<tube>:<name>`): the one spelling [`Keys`] and the scripts' generated
/// `tube_key_of` share.
const TUBE_INFIX: &str = ":t:";

/// What a job's key holds between the namespace's tag and the job's id
/// (`{<prefix>}:j:<id>`), shared by [`Keys::job`] and the scripts' `job_key_of`.
const JOB_INFIX: &str = ":j:";

/// The fields of a job's hash ([`Keys::job`]): its tube's name, its metadata (the
/// msgpack array of `crate::redis::meta`) and its body. A hash with a body and no
/// metadata is a large body written ahead of its job ([`NsKey::Ahead`]).
pub const JOB_TUBE: &str = "t";
pub const JOB_META: &str = "m";
pub const JOB_BODY: &str = "b";

/// The Lua that names the KEYS of a call, prepended to every script (before the
/// prelude): for each group its size (`N_TUBE_KEYS`), each key's offset in it
/// (`TUBE_READY`), and a function that names the keys of a group starting at KEYS index
/// `b` (`tube_group(b).ready`). Plain constructors, not loops: this runs on every call.
/// Then `tube_key_of(tag, tube, name)`, one key of a tube the call was not given (a
/// dedupe window names its tube only in the namespace's window set),
/// `tube_group_of(tag, tube)`, every key of such a tube as `tube_group` names them (a
/// command by id alone finds its job's tube in the job's hash), and
/// `job_key_of(tag, id)`, a job's key (a reserve cannot declare the job it will pick;
/// the key has the namespace's tag, so it is in the slot of the declared keys), both
/// spelt as [`Keys`] spells them.
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
    let _ = writeln!(
        lua,
        "local function tube_key_of(tag, tube, name)\n  return tag .. '{TUBE_INFIX}' .. tube .. ':' .. name\nend"
    );
    let of: Vec<String> = TubeKey::NAMES
        .iter()
        .map(|n| format!("{n} = tube_key_of(tag, tube, '{n}')"))
        .collect();
    let _ = writeln!(
        lua,
        "local function tube_group_of(tag, tube)\n  return {{ {} }}\nend",
        of.join(", ")
    );
    let _ = writeln!(
        lua,
        "local function job_key_of(tag, id)\n  return tag .. '{JOB_INFIX}' .. id\nend"
    );
    lua
}

/// Why a prefix cannot name a namespace.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrefixError {
    #[error("--redis-prefix is empty: give a name (the default is \"redstalk\")")]
    Empty,
    #[error(
        "--redis-prefix {0:?} contains '{{' or '}}': the prefix becomes the hash tag of every \
         key ({{PREFIX}}), so it cannot hold braces; give a name without them"
    )]
    Braces(String),
}

/// Refuse a prefix that cannot be a hash tag.
pub fn check_prefix(prefix: &str) -> Result<(), PrefixError> {
    if prefix.is_empty() {
        return Err(PrefixError::Empty);
    }
    if prefix.contains(['{', '}']) {
        return Err(PrefixError::Braces(prefix.to_string()));
    }
    Ok(())
}

/// The commit key of the namespace whose lease key is `lease_key` (`{P}:lease`): the
/// same hash tag, so the same slot of a Redis Cluster ([`Keys::commit`] names it; the
/// batch fence is given only the lease key).
pub fn commit_key(lease_key: &str) -> String {
    format!("{lease_key}:commit")
}

/// The Redis Cluster slot of `key`: CRC16 (XMODEM) of its hash tag (the part between
/// the first `{` and the next `}`, when not empty) or of the whole key, mod 16384.
pub fn slot_of(key: &[u8]) -> u16 {
    let mut hashed = key;
    if let Some(open) = key.iter().position(|&b| b == b'{')
        && let Some(len) = key[open + 1..].iter().position(|&b| b == b'}')
        && len > 0
    {
        hashed = &key[open + 1..open + 1 + len];
    }
    crc16_xmodem(hashed) % 16384
}

/// CRC16, polynomial 0x1021, initial value 0 (what Redis Cluster hashes keys with).
fn crc16_xmodem(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A SCAN pattern for keys starting with `start` (Redis glob characters escaped).
pub fn scan_pattern(start: &str) -> String {
    let mut p = String::with_capacity(start.len() + 1);
    for c in start.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('*');
    p
}

#[derive(Clone, Debug)]
pub struct Keys {
    /// `{<prefix>}`: the hash tag every key starts with.
    tag: String,
    namespace: [String; NsKey::COUNT],
    tubes: Arc<Mutex<HashMap<String, TubeKeys>>>,
}

impl Keys {
    /// The keys of the namespace `prefix` (checked by [`check_prefix`] at start).
    pub fn new(prefix: &str) -> Keys {
        let tag = format!("{{{prefix}}}");
        Keys {
            namespace: std::array::from_fn(|i| format!("{tag}:{}", NsKey::NAMES[i])),
            tag,
            tubes: Arc::default(),
        }
    }

    /// The namespace's hash tag, `{<prefix>}`.
    pub fn tag(&self) -> &str {
        &self.tag
    }

    /// The lease of leader mode (`crate::cluster::lease`). Schema 2's was `{P}:leader`,
    /// which the upgrade to schema 3 leaves holding a tombstone for good, so that no
    /// version before schema 3 serves the namespace again (`crate::redis::schema`).
    pub fn leader(&self) -> String {
        format!("{}:lease", self.tag)
    }

    /// The lease's epoch counter.
    pub fn epoch(&self) -> String {
        format!("{}:epoch", self.tag)
    }

    /// Where the leader publishes its operator API's address.
    pub fn leader_api(&self) -> String {
        format!("{}:leader-api", self.tag)
    }

    /// The sequence of leader mode's batches (`crate::redis::fenced_script`).
    pub fn commit(&self) -> String {
        commit_key(&self.leader())
    }

    /// The layout's version (`crate::redis::schema`).
    pub fn schema(&self) -> String {
        format!("{}:schema", self.tag)
    }

    /// The namespace's keys, in the order scripts receive them.
    pub fn namespace(&self) -> &[String] {
        &self.namespace
    }

    pub fn ns(&self, key: NsKey) -> &str {
        &self.namespace[key as usize]
    }

    /// A job's hash: fields [`JOB_TUBE`], [`JOB_META`] and [`JOB_BODY`].
    pub fn job(&self, id: u64) -> String {
        let mut key = String::new();
        self.job_into(&mut key, id);
        key
    }

    /// [`Keys::job`] written into `key` (emptied first), for a caller that names many
    /// jobs with one buffer (a leader batch).
    pub fn job_into(&self, key: &mut String, id: u64) {
        key.clear();
        key.push_str(&self.tag);
        key.push_str(JOB_INFIX);
        key.push_str(itoa::Buffer::new().format(id));
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
        format!("{}{TUBE_INFIX}{tube}:{}", self.tag, key.name())
    }

    /// The hash of use/watch references held by connections of one instance, so that a
    /// crashed instance's references can be dropped by the others.
    pub fn refs(&self, instance: &str) -> String {
        format!("{}:refs:{instance}", self.tag)
    }

    /// Live instances: member instance id, score the time its heartbeat lapses.
    pub fn instances(&self) -> String {
        format!("{}:instances", self.tag)
    }

    /// Leader mode's copy of the console's history: one hash per minute (tube → that
    /// minute's figures), expiring a little after the history forgets the minute.
    pub fn history(&self, minute: u64) -> String {
        format!("{}:history:{minute}", self.tag)
    }

    /// The tube policies: a hash, tubes pattern → the rule as JSON (persist/policies.rs).
    pub fn policies(&self) -> String {
        format!("{}:policies", self.tag)
    }

    /// The count of changes to [`Keys::policies`], which every instance reads each
    /// second to know whether to read the hash again.
    pub fn policies_version(&self) -> String {
        format!("{}:policies:version", self.tag)
    }

    /// The schedules' definitions: a hash, schedule name → the definition as JSON
    /// (persist/schedules.rs).
    pub fn schedules(&self) -> String {
        format!("{}:schedules", self.tag)
    }

    /// The count of changes to [`Keys::schedules`], read each second by every instance.
    pub fn schedules_version(&self) -> String {
        format!("{}:schedules:version", self.tag)
    }

    /// The schedules' cursors: a hash, schedule name → "<last_tick_ms> <last_job>
    /// <fired> <deduped> <skipped>" (decimals, one space apart), written in the same
    /// atomic step as each tick's job (store/schedule.rs).
    pub fn schedule_cursors(&self) -> String {
        format!("{}:sched:cursor", self.tag)
    }

    /// A deleted job's retained record (store/retention.rs): a hash, spelt as the
    /// scripts' `ret_key('ret:' .. id)` spells it (store/shared/lua/prelude.lua, RET).
    pub fn retained_record(&self, id: u64) -> String {
        format!("{}:ret:{id}", self.tag)
    }

    /// The retained records in delete order: a zset, delete time (ms) -> the id
    /// zero-padded to 20 digits (so records deleted in one ms list in id order).
    pub fn retained(&self) -> String {
        format!("{}:retained", self.tag)
    }

    /// The newest retained record of each (tube, key): a hash, "<tube>\n<key>" -> id.
    pub fn retained_keys(&self) -> String {
        format!("{}:retained:key", self.tag)
    }

    /// The retained records' accounted size in all (`Retained::bytes`), a counter.
    pub fn retained_bytes(&self) -> String {
        format!("{}:retained:bytes", self.tag)
    }

    /// A live job's history while retention is on: a string in `History::encode`'s
    /// form, appended to by the scripts.
    pub fn job_history(&self, id: u64) -> String {
        format!("{}:jh:{id}", self.tag)
    }

    /// The pub/sub channel on which scripts announce tubes that gained ready jobs.
    pub fn wake_channel(&self) -> String {
        format!("{}:wake", self.tag)
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
    fn scan_patterns_match_the_prefix_literally() {
        assert_eq!(scan_pattern("{a*b:t:"), "{a\\*b:t:*");
        assert_eq!(scan_pattern("x[1]?:refs:"), "x\\[1\\]\\?:refs:*");
    }

    #[test]
    fn a_tube_key_is_named_by_its_group_entry() {
        let keys = Keys::new("p");
        let t = keys.tube("jobs");
        assert_eq!(t.get(TubeKey::Ready), "{p}:t:jobs:ready");
        assert_eq!(t.get(TubeKey::Meta), "{p}:t:jobs:meta");
        assert_eq!(keys.ns(NsKey::Due), "{p}:due");
        assert_eq!(keys.namespace()[NsKey::Tubepos as usize], "{p}:tubepos");
        assert_eq!(keys.leader(), "{p}:lease");
        assert_eq!(keys.commit(), "{p}:lease:commit");
        assert_eq!(keys.job(12), "{p}:j:12");
        assert_eq!(keys.schema(), "{p}:schema");
    }

    #[test]
    fn slots_are_those_redis_cluster_computes() {
        // CLUSTER KEYSLOT on Redis 7.0.15 (docs/plans/redis-cluster.md).
        for (key, slot) in [
            ("{redstalk}", 10415),
            ("{billing}", 12682),
            ("{emails}", 3728),
            ("{orders}", 105),
            ("redstalk", 10415),
            ("{orders}:t:default:ready", 105),
            // The first `{...}` with something inside is the tag; an empty one is not.
            ("x{orders}{billing}", 105),
            ("{}orders", slot_of(b"{}orders")),
        ] {
            assert_eq!(slot_of(key.as_bytes()), slot, "{key}");
        }
        // Redis Cluster's specification: CRC16 of "123456789" is 0x31C3.
        assert_eq!(crc16_xmodem(b"123456789"), 0x31C3);
        assert_ne!(slot_of(b"{}orders"), slot_of(b"orders"));
    }

    #[test]
    fn every_key_of_a_namespace_hashes_to_the_slot_of_its_prefix() {
        for prefix in ["redstalk", "billing", "a:b", "with space", "ü"] {
            let keys = Keys::new(prefix);
            let slot = slot_of(prefix.as_bytes());
            let mut names: Vec<String> = keys.namespace().to_vec();
            names.extend(keys.tube("default").0.iter().cloned());
            names.extend(keys.tube("{odd}tube").0.iter().cloned());
            names.extend([
                keys.refs("ab12"),
                keys.instances(),
                keys.wake_channel(),
                keys.leader(),
                keys.epoch(),
                keys.leader_api(),
                keys.commit(),
                keys.schema(),
                keys.history(29_000_000),
                keys.tube_key("other", TubeKey::Buried),
                keys.job(u64::MAX),
            ]);
            for name in &names {
                assert_eq!(slot_of(name.as_bytes()), slot, "{name} of {prefix:?}");
                assert!(name.starts_with(keys.tag()), "{name}");
            }
            println!("prefix {prefix:?}: {} names in slot {slot}", names.len());
        }
    }

    #[test]
    fn a_prefix_that_cannot_be_a_hash_tag_is_refused() {
        assert_eq!(check_prefix(""), Err(PrefixError::Empty));
        for bad in ["{a", "a}", "{a}", "x{}"] {
            assert!(
                matches!(check_prefix(bad), Err(PrefixError::Braces(_))),
                "{bad}"
            );
        }
        assert_eq!(check_prefix("redstalk:prod"), Ok(()));
    }

    #[test]
    fn the_lua_layout_names_each_key_by_its_offset() {
        let lua = lua_key_layout();
        for line in [
            "local N_TUBE_KEYS = 6",
            "local TUBE_READY, TUBE_DELAYED, TUBE_RESERVED, TUBE_BURIED, TUBE_META, TUBE_KEYS = 0, 1, 2, 3, 4, 5",
            "  return { ready = KEYS[b + 0], delayed = KEYS[b + 1], reserved = KEYS[b + 2], buried = KEYS[b + 3], meta = KEYS[b + 4], keys = KEYS[b + 5] }",
            "local N_NS_KEYS = 10",
            "local function ns_group(b)",
            "local N_RESERVE_KEYS = 3",
            "  return { ready = KEYS[b + 0], reserved = KEYS[b + 1], meta = KEYS[b + 2] }",
            "  return tag .. ':j:' .. id",
        ] {
            assert!(
                lua.lines().any(|l| l == line),
                "{line:?} missing from\n{lua}"
            );
        }
    }
}
