//! The beanstalkd text protocol as pure values: framing ([`codec`]), the command-line
//! grammar ([`parse`]), replies ([`reply`]), the YAML documents ([`yaml`]) and the
//! release they follow ([`dialect`]: 1.13, or 1.12 with `--compat 1.12`), and redstalk's
//! extensions to the grammar ([`ext`], docs/EXTENSIONS.md).
//! No I/O and no clock live here, so all of it can be fuzzed and property-tested.

pub mod codec;
pub mod command;
pub mod dialect;
pub mod ext;
pub mod parse;
pub mod pattern;
pub mod reply;
pub mod yaml;

pub use codec::{FrameCodec, ServerCodec};
pub use command::{Command, Counter, Put, Rejection, Request, Timeout, TubeName};
pub use dialect::Dialect;
pub use ext::{EXTENSION_VERBS, Extension, Families, Family, Frame, Grammar};
pub use reply::Reply;
