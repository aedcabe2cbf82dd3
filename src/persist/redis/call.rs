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
use crate::store::memory::JobRecord;

/// At most this many arguments per command, so no one command holds Redis long.
pub(super) const MAX_ARGS: usize = 2_000;

/// Bodies of this many bytes or more (on average in a command) go as arguments of their
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

    /// `HSET key id body ...`: the bodies of `jobs[of[..]]` (their ids in `ids`), each
    /// copied once, from its job record straight into the call; bodies of
    /// [`LARGE_WORDS`] bytes or more on average as arguments of their own.
    pub(super) fn bodies(&mut self, key: &str, ids: &Args, of: &[usize], jobs: &[JobRecord]) {
        let per = MAX_ARGS / 2;
        for (n, chunk) in of.chunks(per).enumerate() {
            let pairs = chunk
                .iter()
                .enumerate()
                .map(|(k, &j)| (n * per + k, &jobs[j].body[..]));
            let bytes: usize = pairs.clone().map(|(_, b)| b.len()).sum();
            if bytes >= LARGE_WORDS * chunk.len() {
                let words = pairs.flat_map(|(id, body)| [ids.word(id), body]);
                let head = [&b"HSET"[..], key.as_bytes()];
                push_words(
                    &mut self.call,
                    2 + 2 * chunk.len(),
                    head.into_iter().chain(words),
                );
            } else {
                let mut c = command_arg(&mut self.call);
                c.word(b"HSET");
                c.word(key.as_bytes());
                for (id, body) in pairs {
                    c.encoded(ids.encoded(id, id + 1));
                    c.word(body);
                }
            }
            self.commands += 1;
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
