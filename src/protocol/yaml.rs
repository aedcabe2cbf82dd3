//! The YAML of beanstalkd's replies, written exactly as beanstalkd 1.13 (or, with
//! `--compat 1.12`, 1.12) writes it: the [`Doc`] writer (used by the engine's stats
//! documents, which know the keys and their order) and the tube lists of `list-tubes`
//! and `list-tubes-watched`.
//!
//! Invariant: strings are quoted with plain `"` and never escaped (1.12 leaves the
//! values of [`Doc::string`] bare), and each document is `---\n` plus one
//! `\n`-terminated line per key.

use std::fmt::Write;

use bytes::Bytes;

use super::Dialect;
use super::command::TubeName;

/// A YAML mapping document being written, one `key: value` line at a time.
pub struct Doc {
    text: String,
    dialect: Dialect,
}

impl Doc {
    pub fn new(dialect: Dialect) -> Doc {
        let mut text = String::with_capacity(1024);
        text.push_str("---\n");
        Doc { text, dialect }
    }
    pub fn num(&mut self, key: &str, v: impl std::fmt::Display) {
        let _ = writeln!(self.text, "{key}: {v}");
    }
    /// A string value quoted by every release (`version`).
    pub fn quoted(&mut self, key: &str, v: &str) {
        let _ = writeln!(self.text, "{key}: \"{v}\"");
    }
    /// A string value 1.13 quotes and 1.12 prints bare (`name`, `tube`, `hostname`,
    /// `os`, `platform`).
    pub fn string(&mut self, key: &str, v: &str) {
        if self.dialect.quotes_strings() {
            self.quoted(key, v);
        } else {
            self.num(key, v);
        }
    }
    pub fn secs(&mut self, key: &str, (s, us): (u64, u32)) {
        let _ = writeln!(self.text, "{key}: {s}.{us:06}");
    }
    pub fn done(self) -> Bytes {
        Bytes::from(self.text)
    }
}

/// `list-tubes` / `list-tubes-watched`: names are not quoted.
pub fn tube_list<'a>(names: impl IntoIterator<Item = &'a TubeName>) -> Bytes {
    name_list(names.into_iter().map(TubeName::as_str))
}

/// A YAML list of bare names (`list-tubes`' form; `list-extensions` uses it too).
pub fn name_list<'a>(names: impl IntoIterator<Item = &'a str>) -> Bytes {
    // The same in every release.
    let mut d = Doc::new(Dialect::default());
    for n in names {
        d.text.push_str("- ");
        d.text.push_str(n);
        d.text.push('\n');
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

    #[test]
    fn strings_are_bare_in_1_12_but_version_stays_quoted() {
        for (dialect, want) in [
            (Dialect::V1_13, "---\ntube: \"x\"\nversion: \"1.13\"\n"),
            (Dialect::V1_12, "---\ntube: x\nversion: \"1.13\"\n"),
        ] {
            let mut d = Doc::new(dialect);
            d.string("tube", "x");
            d.quoted("version", "1.13");
            assert_eq!(&d.done()[..], want.as_bytes());
        }
    }
}
