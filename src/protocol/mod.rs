//! The beanstalkd text protocol as pure values: framing ([`codec`]), the command-line
//! grammar ([`parse`]), replies ([`reply`]), the YAML documents ([`yaml`]) and the
//! release they follow ([`dialect`]: 1.13, or 1.12 with `--compat 1.12`).
//! No I/O and no clock live here, so all of it can be fuzzed and property-tested.

pub mod codec;
pub mod command;
pub mod dialect;
pub mod parse;
pub mod reply;
pub mod yaml;

pub use codec::ServerCodec;
pub use command::{Command, Counter, Put, Rejection, Request, Timeout, TubeName};
pub use dialect::Dialect;
pub use reply::Reply;
