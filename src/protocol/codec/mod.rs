//! Framing: bytes from a client -> [`Request`]s, one per command, in order.
//!
//! States: reading a command line (within a 224-byte window, CRLF included), discarding
//! an over-long line up to its CRLF, reading a put body of `bytes + 2`, or discarding the
//! `bytes + 2` of a put that was too big or could not be stored.
//!
//! Invariants: the codec never holds more than the line window while looking for a
//! line; a body is moved out of the read buffer as it arrives, into a buffer that grows
//! with it and never past `bytes` (so it is exactly sized when complete: the job keeps
//! it, copied once from the read buffer, and a header alone claims at most
//! [`BODY_CHUNK`]); every byte is consumed exactly once; `decode` never returns `Some`
//! without consuming input.
//!
//! Memory: the body buffer grows by fallible allocation. When the allocator refuses, the
//! put answers OUT_OF_MEMORY after its remaining bytes are discarded, as the reference
//! does when it cannot allocate a job (it skips `bytes + 2`, then replies), and the
//! connection stays in step.
//!
//! Two deliberate deviations from the reference (docs/COMPAT.md): a line ends at the
//! first CRLF, not at the first CR (the reference stalls on a stray CR), and an
//! over-long line is discarded through its own CRLF even when that CRLF straddles the
//! 224-byte boundary (the reference desyncs on a 225-byte line).

use bytes::{Buf, BytesMut};
use tokio_util::codec::Decoder;

use super::command::{Counter, Put, PutHeader, Rejection, Request};
use super::parse::{Line, parse_line};

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

#[derive(Debug)]
enum State {
    Line,
    /// Over-long line: drop everything through the next CRLF, then one BAD_FORMAT.
    DiscardLine,
    /// Reading a put body: `body` fills up to `header.bytes`, then the CRLF is checked.
    Body {
        header: PutHeader,
        body: Vec<u8>,
    },
    /// Dropping the rest of a put's `bytes + 2`; then `reply` (JOB_TOO_BIG, or
    /// OUT_OF_MEMORY when its body could not be allocated).
    Skip {
        remaining: u64,
        reply: Rejection,
    },
}

/// The server-side codec. One per connection.
#[derive(Debug)]
pub struct ServerCodec {
    state: State,
    max_job_size: u32,
}

impl ServerCodec {
    pub fn new(max_job_size: u32) -> ServerCodec {
        ServerCodec {
            state: State::Line,
            max_job_size,
        }
    }

    /// True while a command line is awaited (not in the middle of a body or a discard).
    pub fn is_between_commands(&self) -> bool {
        matches!(self.state, State::Line)
    }
}

/// The put whose body could not be allocated after `read` of its bytes: discard the
/// rest of its `bytes + 2` (freeing what was read), then answer OUT_OF_MEMORY.
fn out_of_memory(header: &PutHeader, read: usize) -> State {
    State::Skip {
        remaining: u64::from(header.bytes) + 2 - read as u64,
        reply: Rejection::OutOfMemory,
    }
}

fn find_crlf(buf: &[u8]) -> Option<usize> {
    buf.windows(2).position(|w| w == b"\r\n")
}

impl Decoder for ServerCodec {
    type Item = Request;
    type Error = std::io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Request>, std::io::Error> {
        loop {
            match &mut self.state {
                State::Line => {
                    let window = &src[..src.len().min(LINE_MAX)];
                    let Some(end) = find_crlf(window) else {
                        if src.len() >= LINE_MAX {
                            // Keep the last byte: it may be the CR of the line's CRLF.
                            src.advance(LINE_MAX - 1);
                            self.state = State::DiscardLine;
                            continue;
                        }
                        return Ok(None);
                    };
                    let line = src.split_to(end + 2);
                    let parsed = parse_line(&line[..end]);
                    match parsed {
                        Ok(Line::Command(cmd)) => return Ok(Some(Request::Command(cmd))),
                        Err(rejection) => return Ok(Some(Request::Rejected(rejection))),
                        Ok(Line::Put(header)) => {
                            if header.bytes > self.max_job_size {
                                self.state = State::Skip {
                                    remaining: u64::from(header.bytes) + 2,
                                    reply: Rejection::JobTooBig,
                                };
                                continue;
                            }
                            if header.trailing_garbage {
                                return Ok(Some(Request::Rejected(Rejection::BadFormat {
                                    counted: Some(Counter::Put),
                                })));
                            }
                            let mut body = Vec::new();
                            let first = (header.bytes as usize).min(BODY_CHUNK);
                            self.state = match body.try_reserve_exact(first) {
                                Ok(()) => State::Body { header, body },
                                Err(_) => out_of_memory(&header, 0),
                            };
                            continue;
                        }
                    }
                }
                State::DiscardLine => match find_crlf(src) {
                    Some(end) => {
                        src.advance(end + 2);
                        self.state = State::Line;
                        return Ok(Some(Request::Rejected(Rejection::BadFormat {
                            counted: None,
                        })));
                    }
                    None => {
                        let keep = usize::from(src.last() == Some(&b'\r'));
                        let drop = src.len() - keep;
                        src.advance(drop);
                        return Ok(None);
                    }
                },
                State::Body { header, body } => {
                    let want = header.bytes as usize;
                    let take = (want - body.len()).min(src.len());
                    if take > body.capacity() - body.len() {
                        // Double, but never past `want`: the last step lands on it.
                        let to = (body.len() + take).max(body.capacity().saturating_mul(2));
                        let to = to.min(want);
                        if body.try_reserve_exact(to - body.len()).is_err() {
                            self.state = out_of_memory(header, body.len());
                            continue;
                        }
                    }
                    body.extend_from_slice(&src[..take]);
                    src.advance(take);
                    if body.len() < want || src.len() < 2 {
                        return Ok(None);
                    }
                    let crlf = src.split_to(2);
                    let (header, body) = (*header, std::mem::take(body));
                    self.state = State::Line;
                    if &crlf[..] != b"\r\n" {
                        return Ok(Some(Request::Rejected(Rejection::ExpectedCrlf)));
                    }
                    debug_assert_eq!(body.capacity(), body.len(), "body not exactly sized");
                    return Ok(Some(Request::Put(Put {
                        pri: header.pri,
                        delay: header.delay,
                        ttr: header.ttr,
                        body: body.into(),
                    })));
                }
                State::Skip { remaining, reply } => {
                    let n = (*remaining).min(src.len() as u64);
                    src.advance(n as usize);
                    *remaining -= n;
                    if *remaining > 0 {
                        return Ok(None);
                    }
                    let reply = *reply;
                    self.state = State::Line;
                    return Ok(Some(Request::Rejected(reply)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::command::Command;

    fn decode_all(codec: &mut ServerCodec, input: &[u8], byte_at_a_time: bool) -> Vec<Request> {
        let mut out = Vec::new();
        let mut buf = BytesMut::new();
        let chunks: Vec<&[u8]> = if byte_at_a_time {
            input.chunks(1).collect()
        } else {
            vec![input]
        };
        for chunk in chunks {
            buf.extend_from_slice(chunk);
            while let Some(r) = codec.decode(&mut buf).unwrap() {
                out.push(r);
            }
        }
        out
    }

    #[test]
    fn too_big_discards_exactly_bytes_plus_two() {
        for whole in [true, false] {
            let mut c = ServerCodec::new(10);
            let got = decode_all(&mut c, b"put 0 0 0 11\r\ndelete 9999\r\nstats\r\n", !whole);
            assert_eq!(
                got,
                vec![
                    Request::Rejected(Rejection::JobTooBig),
                    Request::Command(Command::Stats)
                ]
            );
        }
    }

    #[test]
    fn bad_format_put_does_not_skip_body() {
        let mut c = ServerCodec::new(100);
        let got = decode_all(&mut c, b"put 0 0 0 3 x\r\nabc\r\n", false);
        assert_eq!(
            got,
            vec![
                Request::Rejected(Rejection::BadFormat {
                    counted: Some(Counter::Put)
                }),
                Request::Rejected(Rejection::UnknownCommand),
            ]
        );
    }

    #[test]
    fn over_long_line_gives_one_bad_format_and_stays_in_sync() {
        let mut input = vec![b'x'; 500];
        input.extend_from_slice(b"\r\nstats\r\n");
        for byte in [false, true] {
            let mut c = ServerCodec::new(100);
            assert_eq!(
                decode_all(&mut c, &input, byte),
                vec![
                    Request::Rejected(Rejection::BadFormat { counted: None }),
                    Request::Command(Command::Stats)
                ]
            );
        }
    }

    #[test]
    fn a_large_body_grows_as_it_arrives_and_decodes_the_same_in_any_split() {
        let body: Vec<u8> = (0..3 * BODY_CHUNK + 5)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut input = format!("put 1 2 3 {}\r\n", body.len()).into_bytes();
        input.extend_from_slice(&body);
        input.extend_from_slice(b"\r\nstats\r\n");
        // The harness checks the body buffer never exceeds the declared size, and the
        // decoder that it is exactly sized when complete.
        let got = harness::check_stream(&input, &[1000, 70_000, 3], MAX_JOB_SIZE_LIMIT);
        assert_eq!(got.len(), 2);
        let Request::Put(put) = &got[0] else {
            panic!("not a put: {:?}", got[0]);
        };
        assert_eq!(&put.body[..], &body[..]);
        assert_eq!(got[1], Request::Command(Command::Stats));
    }

    #[test]
    fn a_header_alone_claims_at_most_one_chunk() {
        let mut c = ServerCodec::new(MAX_JOB_SIZE_LIMIT);
        let mut buf = BytesMut::from(&b"put 0 0 1 1073741824\r\nabc"[..]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        let State::Body { body, .. } = &c.state else {
            panic!("not reading a body: {:?}", c.state);
        };
        assert_eq!((body.len(), body.capacity()), (3, BODY_CHUNK));
    }

    #[test]
    fn a_body_that_cannot_be_allocated_is_discarded_then_answered_in_step() {
        let mut c = ServerCodec::new(100);
        let mut buf = BytesMut::from(&b"put 0 0 1 10\r\n0123"[..]);
        assert_eq!(c.decode(&mut buf).unwrap(), None);
        // What the decoder does when the allocator refuses after 4 bytes.
        let State::Body { header, body } = &c.state else {
            panic!("not reading a body: {:?}", c.state);
        };
        c.state = out_of_memory(header, body.len());
        let rest = b"456789\r\nstats\r\n";
        let mut out = Vec::new();
        for &b in rest {
            buf.extend_from_slice(&[b]);
            while let Some(r) = c.decode(&mut buf).unwrap() {
                out.push(r);
            }
        }
        assert_eq!(
            out,
            vec![
                Request::Rejected(Rejection::OutOfMemory),
                Request::Command(Command::Stats)
            ]
        );
    }

    #[test]
    fn longest_line_is_224_bytes() {
        let ok = format!("pause-tube {} 4294967295\r\n", "a".repeat(200));
        assert_eq!(ok.len(), LINE_MAX);
        let mut c = ServerCodec::new(100);
        let got = decode_all(&mut c, ok.as_bytes(), false);
        assert!(matches!(
            got[..],
            [Request::Command(Command::PauseTube { .. })]
        ));
    }
}

#[cfg(any(test, feature = "fuzzing"))]
// Test support (the unit tests and the fuzz target): a panic is its failure report.
#[allow(clippy::expect_used, clippy::unwrap_used)]
pub mod harness;

#[cfg(test)]
mod props;
