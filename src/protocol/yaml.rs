//! The YAML of beanstalkd's replies, written exactly as beanstalkd 1.13 writes it: the
//! [`Doc`] writer (used by the engine's stats documents, which know the keys and their
//! order) and the tube lists of `list-tubes` and `list-tubes-watched`.
//!
//! Invariant: strings are quoted with plain `"` and never escaped, and each document is
//! `---\n` plus one `\n`-terminated line per key.

use std::fmt::Write;

use bytes::Bytes;

use super::command::TubeName;

/// A YAML mapping document being written, one `key: value` line at a time.
pub struct Doc(String);

impl Default for Doc {
    fn default() -> Self {
        Self::new()
    }
}

impl Doc {
    pub fn new() -> Doc {
        let mut s = String::with_capacity(1024);
        s.push_str("---\n");
        Doc(s)
    }
    pub fn num(&mut self, key: &str, v: impl std::fmt::Display) {
        let _ = writeln!(self.0, "{key}: {v}");
    }
    pub fn quoted(&mut self, key: &str, v: &str) {
        let _ = writeln!(self.0, "{key}: \"{v}\"");
    }
    pub fn secs(&mut self, key: &str, (s, us): (u64, u32)) {
        let _ = writeln!(self.0, "{key}: {s}.{us:06}");
    }
    pub fn done(self) -> Bytes {
        Bytes::from(self.0)
    }
}

/// `list-tubes` / `list-tubes-watched`: names are not quoted.
pub fn tube_list<'a>(names: impl IntoIterator<Item = &'a TubeName>) -> Bytes {
    let mut d = Doc::new();
    for n in names {
        d.0.push_str("- ");
        d.0.push_str(n.as_str());
        d.0.push('\n');
    }
    d.done()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_matches_reference_bytes() {
        assert_eq!(
            &tube_list([&TubeName::default_tube()])[..],
            b"---\n- default\n"
        );
    }
}
