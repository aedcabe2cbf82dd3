//! A tube pattern: one tube, every tube whose name starts with a prefix, or every tube.
//! The roles file scopes roles with it, and tube policies say which tubes they govern.
//!
//! Invariant: a [`Pattern`] is a valid tube name, or a valid tube name's beginning
//! followed by `*`, or `*` alone.

use std::fmt;

use super::command::{is_tube_name_byte, is_valid_tube_name};

/// One tube pattern: a tube, every tube whose name starts with a prefix, or every tube.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Pattern {
    Tube(String),
    Prefix(String),
    Any,
}

impl Pattern {
    /// `name`, `prefix*` or `*`; `None` when it cannot match a valid tube name.
    pub fn parse(s: &str) -> Option<Pattern> {
        if s == "*" {
            return Some(Pattern::Any);
        }
        if let Some(prefix) = s.strip_suffix('*') {
            let ok = !prefix.starts_with('-')
                && prefix.len() < crate::protocol::command::MAX_TUBE_NAME_LEN
                && prefix.bytes().all(is_tube_name_byte);
            return ok.then(|| Pattern::Prefix(prefix.to_string()));
        }
        is_valid_tube_name(s.as_bytes()).then(|| Pattern::Tube(s.to_string()))
    }

    pub fn matches(&self, tube: &str) -> bool {
        match self {
            Pattern::Tube(t) => t == tube,
            Pattern::Prefix(p) => tube.starts_with(p.as_str()),
            Pattern::Any => true,
        }
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pattern::Tube(t) => f.write_str(t),
            Pattern::Prefix(p) => write!(f, "{p}*"),
            Pattern::Any => f.write_str("*"),
        }
    }
}
