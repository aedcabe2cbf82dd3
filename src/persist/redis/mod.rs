//! Leader mode's Redis persistence: the sink that writes each batch (fenced by the
//! leader's lease), the writer of large bodies ahead of their jobs, and the loader that
//! reads a namespace back at takeover. The schema, the metadata format and the fenced
//! transactions are `crate::redis`'s, shared with the shared mode.
//!
//! - `batch`: a cut turned into the commands of one fenced script call.
//! - `call`: those commands encoded into the call.
//! - `written`: what Redis holds, as far as the sink knows (so a batch writes only
//!   what changed).
//! - `sink`: the [`Sink`](crate::persist::Sink) sending each batch, fenced.
//! - `stager`: large bodies written ahead of their jobs, on a connection of their own.
//! - `figures`: tube figures written lazily (the counters at most once a second).
//! - `counters`: the namespace counters written lazily (ids a block ahead, the stats
//!   at most once a second).
//! - `cursors`: schedules' cursors written with their ticks' jobs, and read back.
//! - `retained`: retained records (a deleted job's, kept by retention) written with the
//!   jobs, and read back.
//! - `load`: a namespace read back into a memory store's snapshot.
//! - `record`: a job record mapped to and from the metadata format.

pub mod batch;
mod call;
mod counters;
pub mod cursors;
mod figures;
mod keyed;
pub mod load;
mod record;
pub mod retained;
pub mod sink;
pub mod stager;
mod written;

pub use load::{Loaded, load};
pub use sink::RedisSink;
