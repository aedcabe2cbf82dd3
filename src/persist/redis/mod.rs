//! Leader mode's Redis persistence: the sink that writes each batch (fenced by the
//! leader's lease), the loader that reads a namespace back at takeover, and the job
//! metadata encoding both share with the shared mode's scripts.

pub mod batch;
pub mod load;
pub mod meta;
pub mod sink;
pub mod stager;

pub use load::{Loaded, load};
pub use sink::RedisSink;
