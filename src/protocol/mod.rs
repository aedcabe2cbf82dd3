//! The beanstalkd text protocol as pure values: framing ([`codec`]), the command-line
//! grammar ([`parse`]), replies ([`reply`]) and the YAML documents ([`yaml`]).
//! No I/O and no clock live here, so all of it can be fuzzed and property-tested.

pub mod codec;
pub mod command;
pub mod parse;
pub mod reply;
pub mod yaml;

pub use codec::ServerCodec;
pub use command::{Command, Counter, Put, Rejection, Request, TubeName};
pub use reply::Reply;
