//! redstalk: a job-queue server that speaks the beanstalkd protocol byte for byte, and
//! keeps its jobs in memory, or in Redis (leader or shared mode).
//!
//! Map (each layer only uses the ones listed before it):
//!
//! ```text
//! time        Nanos and the Clock every layer reads (wall clock, never backwards)
//! util        SwapList: the reference's list order (list-tubes, list-tubes-watched);
//!             `lock`, the one poison-tolerant mutex guard
//! protocol/   bytes <-> values: codec (framing), parse (one line -> a command),
//!             command, reply, yaml. No I/O, no clock.
//! access/     who may do what, on the beanstalk port and the HTTP API: tokens and
//!             their guessing bound, roles and the roles file, the check of a
//!             connection's commands against its role
//! redis/      what both Redis modes use: the options, connections (the URL, TLS,
//!             sentinels, following a failover, bounded waits), the key schema, the
//!             job metadata format, fenced transactions, the eviction policy check,
//!             what a failed call means (by error code)
//! store/      where jobs live, behind the Store trait (one method per transition);
//!             a store's changes are numbered (`Change`) when persisted in batches:
//!   memory/     the memory store; with a journal it notes changes for persistence
//!   durable/    the memory store whose replies wait until a committer persisted them,
//!               its commit link, and large bodies written ahead of their jobs
//!   shared/     Redis shared mode: every transition one Lua script in Redis
//! schedule/   schedules as values: definitions, cron (croner, tz compiled in) and
//!             interval ticks; no I/O, no clock
//! engine/     beanstalkd semantics over any store: dispatch, reserve and its waiters,
//!             serve passes, DEADLINE_SOON, the timer, stats, drain mode, the registry
//!             of live connections; every reply comes with its acknowledgement (now,
//!             or once change N is durable)
//! persist/    group commit: the committer takes cuts of a journaled memory store and
//!             writes them through a Sink (redis/: leader mode's batches, one fenced
//!             script call each, and the loader; binlog/: `-b DIR`'s local log and its
//!             replay);
//!             engine: the one place a persisted engine is built and ended;
//!             book: an operator's definitions (policies, schedules) and their home
//! server/     sockets: listeners (and systemd's), one task per connection (serve with
//!             an engine, or relay to the leader, as the Router says; replies held
//!             until acknowledged), signals, privileges, graceful shutdown
//! cluster/    leader mode: the lease, who leads, loading at takeover, fail-stop; it
//!             is a server Router (serve as leader, relay as standby)
//! http/       the optional HTTP listener (axum on hyper): Prometheus metrics (shared,
//!             capped per tube), /healthz, /readyz, the operator API (/api/v1) and
//!             the web console; every connection bounded
//! cli         beanstalkd's flags and redstalk's own
//! build_info  the version, commit and toolchain of this build (`-v`, `-Vv`)
//! manual      man pages and shell completions from the clap definitions, and the
//!             README's flag tables checked against them
//! ```
//!
//! The binary (`main.rs`) parses the flags, starts what serves clients (an engine on a
//! store, or a cluster of roles), binds, and runs the server until SIGTERM.

pub mod access;
pub mod build_info;
pub mod cli;
pub mod cluster;
pub mod engine;
pub mod http;
pub mod manual;
pub mod persist;
pub mod protocol;
pub mod redis;
pub mod schedule;
pub mod server;
pub mod store;
pub mod time;
pub mod util;
