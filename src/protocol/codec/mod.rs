//! Framing: bytes from a client -> requests, one per command, in order: [`Request`]s
//! ([`ServerCodec`], beanstalkd's grammar) or [`Frame`]s ([`FrameCodec`], either grammar;
//! under the extended one, extensions too).
//!
//! States: reading a command line (within a 224-byte window, CRLF included), discarding
//! an over-long line up to its CRLF, reading a put body of `bytes + 2`, or discarding the
//! `bytes + 2` of a put that was too big, could not be stored, or (extended grammar)
//! carried malformed tags.
//!
//! Invariants: the codec never holds more than the line window while looking for a
//! line (224 bytes; under an extended grammar serving batches, [`LIST_LINE_MAX`] for a
//! line that starts with a list command's verb, and no other); a body is moved out of
//! the read buffer as it arrives, into a buffer that grows with it and never past
//! `bytes` (so it is exactly sized when complete: the job keeps it, copied once from the
//! read buffer, and a header alone claims at most [`BODY_CHUNK`]); every byte is
//! consumed exactly once; `decode` never returns `Some` without consuming input.
//!
//! Memory: the body buffer grows by fallible allocation. When the allocator refuses, or
//! the process's memory budget does not admit the body (`crate::util::memory`: under a
//! container's limit allocation never fails, the kernel kills the process instead), the
//! put answers OUT_OF_MEMORY after its remaining bytes are discarded, as the reference
//! does when it cannot allocate a job (it skips `bytes + 2`, then replies), and the
//! connection stays in step.
//!
//! Two deliberate deviations from the reference (docs/COMPAT.md): a line ends at the
//! first CRLF, not at the first CR (the reference stalls on a stray CR), and an
//! over-long line is discarded through its own CRLF even when that CRLF straddles the
//! 224-byte boundary (the reference desyncs on a 225-byte line).

use std::sync::Arc;

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

use super::command::{Counter, Put, Rejection, Request};
use super::ext::parse::{LIST_VERBS, PutTags};
use super::ext::{ExtendedPut, Extension, Family, Frame, Grammar, LIST_LINE_MAX, Millis, PutKey};
use super::parse::{Line, parse_line_in};
use crate::util::memory::MemoryBudget;

/// The reference's command buffer: the longest line, CRLF included.
pub const LINE_MAX: usize = 224;

/// The reference's default `-z`.
pub const DEFAULT_MAX_JOB_SIZE: u32 = 65_535;

/// The largest `-z` the reference accepts (larger values are clamped).
pub const MAX_JOB_SIZE_LIMIT: u32 = 1 << 30;

/// A body up to this size is allocated whole when its header arrives (above the
/// reference's default `-z`, so ordinary bodies are allocated once); a larger one
/// starts here and doubles as its bytes arrive, so a header cannot claim memory the
/// client never sends.
pub const BODY_CHUNK: usize = 64 * 1024;

/// What the codec is reading: the decoder's state.
#[derive(Debug)]
enum Reading {
    /// A command line (within the line window).
    Line,
    /// Over-long line: drop everything through the next CRLF, then one BAD_FORMAT.
    DiscardLine,
    /// Reading a put body: `body` fills up to `put.bytes`, then the CRLF is checked.
    Body { put: PendingPut, body: Vec<u8> },
    /// Dropping the rest of a put's `bytes + 2`; then `reply` (JOB_TOO_BIG,
    /// OUT_OF_MEMORY when its body could not be allocated, or BAD_FORMAT for malformed
    /// tags).
    Skip { remaining: u64, reply: Rejection },
}

/// A put whose body is being read.
#[derive(Debug)]
struct PendingPut {
    bytes: u32,
    pri: u32,
    delay: Millis,
    ttr: Millis,
    /// In the extended grammar (it yields an [`ExtendedPut`]), with its key if any.
    extended: Option<Option<PutKey>>,
}

impl PendingPut {
    fn into_frame(self, body: Vec<u8>) -> Frame {
        let body = body.into();
        match self.extended {
            Some(key) => Frame::extension(Extension::Put(ExtendedPut {
                pri: self.pri,
                delay: self.delay,
                ttr: self.ttr,
                key,
                body,
            })),
            // Standard: the durations came from u32 seconds.
            None => Frame::Standard(Request::Put(Put {
                pri: self.pri,
                delay: secs(self.delay),
                ttr: secs(self.ttr),
                body,
            })),
        }
    }
}

fn secs(d: Millis) -> u32 {
    u32::try_from(d.as_millis() / 1000).unwrap_or(u32::MAX)
}

/// The framing state machine both codecs share.
#[derive(Debug)]
struct Framer {
    reading: Reading,
    max_job_size: u32,
    grammar: Grammar,
    /// How many bytes of the buffered line were searched for CRLF already (a list line
    /// may arrive in many reads).
    scanned: usize,
    /// A put whose body this budget does not admit answers OUT_OF_MEMORY, as one the
    /// allocator refused.
    budget: Option<Arc<MemoryBudget>>,
}

/// The codec of beanstalkd's grammar. One per connection.
#[derive(Debug)]
pub struct ServerCodec(Framer);

impl ServerCodec {
    pub fn new(max_job_size: u32) -> ServerCodec {
        ServerCodec(Framer::new(max_job_size, Grammar::Standard))
    }

    /// Admit put bodies against `budget` (`crate::util::memory`).
    pub fn with_budget(mut self, budget: Option<Arc<MemoryBudget>>) -> ServerCodec {
        self.0.budget = budget;
        self
    }

    /// True while a command line is awaited (not in the middle of a body or a discard).
    pub fn is_between_commands(&self) -> bool {
        self.0.is_between_commands()
    }
}

/// The codec of either grammar, yielding [`Frame`]s. One per connection.
#[derive(Debug)]
pub struct FrameCodec(Framer);

impl FrameCodec {
    pub fn new(max_job_size: u32, grammar: Grammar) -> FrameCodec {
        FrameCodec(Framer::new(max_job_size, grammar))
    }

    /// Admit put bodies against `budget` (`crate::util::memory`).
    pub fn with_budget(mut self, budget: Option<Arc<MemoryBudget>>) -> FrameCodec {
        self.0.budget = budget;
        self
    }

    /// True while a command line is awaited (not in the middle of a body or a discard).
    pub fn is_between_commands(&self) -> bool {
        self.0.is_between_commands()
    }
}

impl Decoder for ServerCodec {
    type Item = Request;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Request>, std::io::Error> {
        Ok(self.0.decode(src).map(|frame| match frame {
            Frame::Standard(req) => req,
            // The standard grammar yields no extension; if it did, beanstalkd's answer
            // to a line it does not know is this.
            Frame::Extension(_) => Request::Rejected(Rejection::UnknownCommand),
        }))
    }
}

impl Decoder for FrameCodec {
    type Item = Frame;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, std::io::Error> {
        Ok(self.0.decode(src))
    }
}

/// The put whose body could not be allocated after `read` of its bytes: discard the
/// rest of its `bytes + 2` (freeing what was read), then answer OUT_OF_MEMORY.
fn out_of_memory(bytes: u32, read: usize) -> Reading {
    Reading::Skip {
        remaining: u64::from(bytes) + 2 - read as u64,
        reply: Rejection::OutOfMemory,
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

fn rejected(r: Rejection) -> Option<Frame> {
    Some(Frame::Standard(Request::Rejected(r)))
}

impl Framer {
    fn new(max_job_size: u32, grammar: Grammar) -> Framer {
        Framer {
            reading: Reading::Line,
            max_job_size,
            grammar,
            scanned: 0,
            budget: None,
        }
    }

    fn is_between_commands(&self) -> bool {
        matches!(self.reading, Reading::Line)
    }

    /// The longest line `src` may hold: 224 bytes, or [`LIST_LINE_MAX`] for a list
    /// command under an extended grammar that serves batches.
    fn line_limit(&self, src: &[u8]) -> usize {
        let list = self.grammar.serves(Family::Batches)
            && LIST_VERBS.iter().any(|verb| src.starts_with(verb));
        if list { LIST_LINE_MAX } else { LINE_MAX }
    }

    /// After a put header: skip a too-big body, or start reading it.
    fn start_body(&mut self, put: PendingPut, skip_with: Option<Rejection>) {
        let remaining = u64::from(put.bytes) + 2;
        if put.bytes > self.max_job_size {
            self.reading = Reading::Skip {
                remaining,
                reply: Rejection::JobTooBig,
            };
            return;
        }
        if let Some(reply) = skip_with {
            self.reading = Reading::Skip { remaining, reply };
            return;
        }
        if self.budget.as_ref().is_some_and(|b| !b.admit(put.bytes)) {
            self.reading = out_of_memory(put.bytes, 0);
            return;
        }
        let mut body = Vec::new();
        let first = (put.bytes as usize).min(BODY_CHUNK);
        self.reading = match body.try_reserve_exact(first) {
            Ok(()) => Reading::Body { put, body },
            Err(_) => out_of_memory(put.bytes, 0),
        };
    }

    fn decode(&mut self, src: &mut BytesMut) -> Option<Frame> {
        loop {
            match &mut self.reading {
                Reading::Line => {
                    let limit = self.line_limit(src);
                    let window = &src[..src.len().min(limit)];
                    // The CR of a CRLF may be the last byte searched before.
                    let from = self.scanned.saturating_sub(1).min(window.len());
                    let Some(end) = find_crlf(&window[from..]).map(|at| from + at) else {
                        if src.len() >= limit {
                            // Keep the last byte: it may be the CR of the line's CRLF.
                            src.advance(limit - 1);
                            self.scanned = 0;
                            self.reading = Reading::DiscardLine;
                            continue;
                        }
                        self.scanned = window.len();
                        return None;
                    };
                    self.scanned = 0;
                    let line = src.split_to(end + 2);
                    match parse_line_in(&line[..end], self.grammar) {
                        Ok(Line::Command(cmd)) => {
                            return Some(Frame::Standard(Request::Command(cmd)));
                        }
                        Ok(Line::Extension(ext)) => return Some(Frame::Extension(ext)),
                        Err(rejection) => return rejected(rejection),
                        Ok(Line::Put(header)) => {
                            if header.trailing_garbage && header.bytes <= self.max_job_size {
                                // Not skipped: the reference reads the body as commands.
                                return rejected(Rejection::BadFormat {
                                    counted: Some(Counter::Put),
                                });
                            }
                            let put = PendingPut {
                                bytes: header.bytes,
                                pri: header.pri,
                                delay: Millis::from_secs(header.delay),
                                ttr: Millis::from_secs(header.ttr),
                                extended: None,
                            };
                            self.start_body(put, None);
                        }
                        Ok(Line::ExtendedPut(header)) => {
                            let (key, skip_with) = match header.tags {
                                PutTags::Valid(key) => (key, None),
                                PutTags::Malformed => (
                                    None,
                                    Some(Rejection::BadFormat {
                                        counted: Some(Counter::Put),
                                    }),
                                ),
                            };
                            let put = PendingPut {
                                bytes: header.bytes,
                                pri: header.pri,
                                delay: header.delay,
                                ttr: header.ttr,
                                extended: Some(key),
                            };
                            self.start_body(put, skip_with);
                        }
                    }
                }
                Reading::DiscardLine => match find_crlf(src) {
                    Some(end) => {
                        src.advance(end + 2);
                        self.reading = Reading::Line;
                        return rejected(Rejection::BadFormat { counted: None });
                    }
                    None => {
                        let keep = usize::from(src.last() == Some(&b'\r'));
                        let drop = src.len() - keep;
                        src.advance(drop);
                        return None;
                    }
                },
                Reading::Body { put, body } => {
                    let want = put.bytes as usize;
                    let take = (want - body.len()).min(src.len());
                    if take > body.capacity() - body.len() {
                        // Double, but never past `want`: the last step lands on it.
                        let to = (body.len() + take).max(body.capacity().saturating_mul(2));
                        let to = to.min(want);
                        if body.try_reserve_exact(to - body.len()).is_err() {
                            self.reading = out_of_memory(put.bytes, body.len());
                            continue;
                        }
                    }
                    body.extend_from_slice(&src[..take]);
                    src.advance(take);
                    if body.len() < want || src.len() < 2 {
                        return None;
                    }
                    let crlf = src.split_to(2);
                    let Reading::Body { put, body } =
                        std::mem::replace(&mut self.reading, Reading::Line)
                    else {
                        continue;
                    };
                    if &crlf[..] != b"\r\n" {
                        return rejected(Rejection::ExpectedCrlf);
                    }
                    debug_assert_eq!(body.capacity(), body.len(), "body not exactly sized");
                    return Some(put.into_frame(body));
                }
                Reading::Skip { remaining, reply } => {
                    let n = (*remaining).min(src.len() as u64);
                    src.advance(n as usize);
                    *remaining -= n;
                    if *remaining > 0 {
                        return None;
                    }
                    let reply = *reply;
                    self.reading = Reading::Line;
                    return rejected(reply);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod extended_tests;

#[cfg(any(test, feature = "fuzzing"))]
// Test support (the unit tests and the fuzz target): a panic is its failure report.
#[allow(clippy::expect_used, clippy::unwrap_used)]
pub mod harness;

#[cfg(test)]
mod props;
