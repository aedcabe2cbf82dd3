//! What both Redis modes use (the shared mode's store in `store/shared/`, leader mode's
//! persistence in `persist/redis/` and its lease in `cluster/lease.rs`): one home, so
//! neither mode reaches into the other's internals.
//!
//! - [`config`]: the Redis options (`--redis` and its TLS, Sentinel, prefix and replica
//!   options), never shown with credentials, and the [`Lookups`] every connector made
//!   from them shares.
//! - [`connection`]: [`Connector`] and [`RedisConn`], connections that follow a
//!   failover and never wait long on a Redis that is away ([`redirect`]: which calls a
//!   cluster did not run, sent again); [`target`]: the `--redis` URL (standalone,
//!   Sentinel, Cluster, TLS) turned into the current primary, a primary named having to
//!   continue the replication history of the one before it.
//! - [`placement`]: where the namespace lives (topology, slot, primary, its changes)
//!   for `/metrics`, and leader mode's check of a cluster's node timeout.
//! - [`clock`]: Redis' clock as this process's, read by the shortest of a few round
//!   trips.
//! - [`error`]: what a failed call means, classified once by kind and error code.
//! - [`keys`]: the key schema (docs/REDIS.md), and the KEYS layout Rust and Lua share.
//! - [`meta`]: a job's metadata as both modes store it (msgpack, as the Lua scripts
//!   write it).
//! - [`fenced`]: transactions that apply only while a key holds a token (leader mode's
//!   lease, the shared mode's namespace generation).
//! - [`fenced_script`]: leader mode's batches, each one script call fenced by the lease
//!   token and a batch sequence number, several in flight on one connection.
//! - [`replicas`]: the `WAIT` after a change (`--redis-wait-replicas`), read one way.
//! - [`policy`]: refusing (or warning of) a Redis that may evict keys.
//! - [`schema`]: the key layout's version, and the upgrade from the previous one, run
//!   at start by both modes.
//! - [`lockout`]: what a namespace's lease key may hold besides a lease, and locking
//!   every instance out.
//! - [`copy`]: a namespace copied to another Redis or prefix (`redstalk-namespace`).
//! - [`retained`]: a deleted job's retained record as both modes keep it (as
//!   [`cursor`] is for schedules' cursors, it reads the store's value types).
//!
//! Layering: this module uses only `protocol` (tube names), `time` and `util`; the stores and
//! the cluster build on it, and it knows nothing of them. No state is process-wide:
//! what a process's connectors share is a value ([`Lookups`]) made with its options.

pub mod clock;
pub mod config;
pub mod connection;
pub mod copy;
pub mod cursor;
pub mod error;
pub mod fenced;
pub mod fenced_script;
pub mod keys;
pub mod lockout;
pub mod meta;
pub mod placement;
pub mod policy;
pub mod redirect;
pub mod replicas;
pub mod retained;
pub mod schema;
pub mod target;
#[cfg(test)]
pub(crate) mod testing;

pub use config::RedisConfig;
pub use connection::{CONNECT_TIMEOUT, Connector, RESPONSE_TIMEOUT, RedisConn, WAIT_LIMIT};
pub use error::{CallError, Code, Fate};
pub use target::{CertificateProblem, Lookups, Target, TargetError, TlsFiles, redact};

/// Nanoseconds per microsecond: Redis keeps every time (in scripts, job metadata, the
/// due index) in microseconds of its clock.
pub const US: u64 = 1_000;
