//! A batch's commands written into its script call (`crate::redis::fenced_script`):
//! [`Args`] gathers one command's arguments, [`Batch`] appends commands to the call.
//!
//! Encoding: each command is one argument of the call, its words already in the
//! script's encoding (`fenced_script::command_arg`), so redis-rs packs a handful of
//! arguments per batch, not every word. A command's arguments are gathered in a few
//! reused buffers, encoded as they are written (numbers formatted on the stack), and
//! copied into the call in one piece; the call is sized up front; a body is copied
//! once, from its job record straight into the call (redis-rs then packs the call for
//! the socket: the one copy that is not ours). Bodies of [`LARGE_WORDS`] bytes or more
//! go as arguments of their own, the script's other form. No command carries more than
//! [`MAX_ARGS`] arguments.

use crate::redis::fenced_script::{command_arg, encode_word, push_words, word_head_len};
use crate::redis::keys::{JOB_BODY, JOB_META, JOB_TUBE};

/// At most this many arguments per command, so no one command holds Redis long.
pub(super) const MAX_ARGS: usize = 2_000;

/// Bodies of this many bytes or more go as arguments of their
/// own, not MessagePack-encoded: the Lua copy of a body costs Redis more than the
/// arguments it saves from about this size (2026-11-27-leader-encode.md).
pub(super) const LARGE_WORDS: usize = 256;

/// Arguments of one command, gathered ahead in one buffer, each already encoded as a
/// word of the batch script's command argument (`fenced_script::encode_word`).
#[derive(Debug, Default)]
pub(super) struct Args {
    data: Vec<u8>,
    /// Where each argument's encoding ends in `data`.
    ends: Vec<usize>,
}

impl Args {
    pub(super) fn push(&mut self, a: &[u8]) {
        encode_word(&mut self.data, a);
        self.ends.push(self.data.len());
    }

    pub(super) fn num(&mut self, n: u64) {
        self.push(itoa::Buffer::new().format(n).as_bytes());
    }

    /// A job's sorted-set member: its id zero-padded to 20 digits, so that equal scores
    /// order by id.
    pub(super) fn member(&mut self, id: u64) {
        let mut digits = [b'0'; 20];
        let mut buf = itoa::Buffer::new();
        let s = buf.format(id).as_bytes();
        digits[20 - s.len()..].copy_from_slice(s);
        self.push(&digits);
    }

    pub(super) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Argument `i` itself (its encoding without its head).
    pub(super) fn word(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        let encoded = &self.data[start..self.ends[i]];
        &encoded[word_head_len(encoded[0])..]
    }

    /// The encoding of arguments `from..to`, in one piece.
    pub(super) fn encoded(&self, from: usize, to: usize) -> &[u8] {
        let start = if from == 0 { 0 } else { self.ends[from - 1] };
        &self.data[start..self.ends[to - 1]]
    }

    pub(super) fn clear(&mut self) {
        self.data.clear();
        self.ends.clear();
    }
}

/// The commands of one batch, appended to its script call (see
/// `crate::redis::fenced_script`).
pub struct Batch {
    pub call: redis::Cmd,
    pub commands: usize,
}

impl Batch {
    pub(super) fn new(call: redis::Cmd) -> Batch {
        Batch { call, commands: 0 }
    }

    /// One command on `key`, its arguments split over several commands of at most
    /// [`MAX_ARGS`], in groups of `group` (a field and its value stay together).
    /// Nothing is sent for no arguments.
    pub(super) fn cmd(&mut self, name: &'static str, key: &str, args: &Args, group: usize) {
        let per = (MAX_ARGS / group.max(1)) * group.max(1);
        let mut i = 0;
        while i < args.len() {
            let end = (i + per).min(args.len());
            let mut c = command_arg(&mut self.call);
            c.word(name.as_bytes());
            c.word(key.as_bytes());
            c.encoded(args.encoded(i, end));
            self.commands += 1;
            i = end;
        }
    }

    /// `HSET <job key> [t <tube>] m <meta> [b <body>]`: one job's hash (`meta` the
    /// encoded argument of its metadata, the body copied once, from its job record
    /// straight into the call; a body of [`LARGE_WORDS`] bytes or more as an argument
    /// of its own).
    pub(super) fn job(
        &mut self,
        key: &str,
        tube: Option<&[u8]>,
        meta: &Args,
        m: usize,
        body: Option<&[u8]>,
    ) {
        let tube = tube.map(|t| [JOB_TUBE.as_bytes(), t]);
        match body {
            Some(body) if body.len() >= LARGE_WORDS => {
                let words = [&b"HSET"[..], key.as_bytes()]
                    .into_iter()
                    .chain(tube.into_iter().flatten())
                    .chain([JOB_META.as_bytes(), meta.word(m), JOB_BODY.as_bytes(), body]);
                let count = 6 + if tube.is_some() { 2 } else { 0 };
                push_words(&mut self.call, count, words);
            }
            _ => {
                let mut c = command_arg(&mut self.call);
                c.word(b"HSET");
                c.word(key.as_bytes());
                for w in tube.into_iter().flatten() {
                    c.word(w);
                }
                c.word(JOB_META.as_bytes());
                c.encoded(meta.encoded(m, m + 1));
                if let Some(body) = body {
                    c.word(JOB_BODY.as_bytes());
                    c.word(body);
                }
            }
        }
        self.commands += 1;
    }

    /// A command whose arguments are all keys (`DEL k ...`), split over several
    /// commands of at most [`MAX_ARGS`]. Nothing is sent for no keys.
    pub(super) fn keys(&mut self, name: &'static str, keys: &Args) {
        let mut i = 0;
        while i < keys.len() {
            let end = (i + MAX_ARGS).min(keys.len());
            let mut c = command_arg(&mut self.call);
            c.word(name.as_bytes());
            c.encoded(keys.encoded(i, end));
            self.commands += 1;
            i = end;
        }
    }

    /// A command with no arguments but its key.
    pub(super) fn bare(&mut self, name: &'static str, key: &str) {
        let mut c = command_arg(&mut self.call);
        c.word(name.as_bytes());
        c.word(key.as_bytes());
        self.commands += 1;
    }

    pub fn is_empty(&self) -> bool {
        self.commands == 0
    }
}
