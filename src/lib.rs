//! redstalk: a job-queue server that speaks the beanstalkd protocol byte for byte and can
//! keep its jobs in Redis.
//!
//! Layout (each layer only uses the ones above it):
//! - [`protocol`]: bytes <-> values (codec, parser, replies, YAML). No I/O, no clock.
//! - [`store`]: where jobs live, behind one trait: [`store::memory`] and
//!   [`store::redis_store`].
//! - [`engine`]: beanstalkd semantics that do not depend on storage: blocking reserve and
//!   its waiters, DEADLINE_SOON, timers, drain mode, counters. Time is passed in.
//! - [`server`]: sockets, one task per connection, shutdown and signals.
//! - [`metrics`]: the optional HTTP listener: Prometheus metrics (the figures of
//!   `stats` and `stats-tube`), liveness and readiness.
//! - [`cli`]: beanstalkd-compatible command-line flags.

pub mod cli;
pub mod engine;
pub mod metrics;
pub mod protocol;
pub mod server;
pub mod store;
pub mod util;
