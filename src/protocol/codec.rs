//! Framing: bytes from a client -> [`Request`]s, one per command, in order.
//!
//! States: reading a command line (within a 224-byte window, CRLF included), discarding
//! an over-long line up to its CRLF, reading a put body of `bytes + 2`, or discarding the
//! `bytes + 2` of a put that was too big.
//!
//! Invariants: the codec never holds more than the line window while looking for a
//! line, and never more than `max_job_size + 2` for a body; every byte is consumed
//! exactly once; `decode` never returns `Some` without consuming input.
//!
//! Two deliberate deviations from the reference (docs/COMPAT.md): a line ends at the
//! first CRLF, not at the first CR (the reference stalls on a stray CR), and an
//! over-long line is discarded through its own CRLF even when that CRLF straddles the
//! 224-byte boundary (the reference desyncs on a 225-byte line).

use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use super::command::{Counter, Put, PutHeader, Rejection, Request};
use super::parse::{Line, parse_line};
use super::reply::Reply;

/// The reference's command buffer: the longest line, CRLF included.
pub const LINE_MAX: usize = 224;

/// The reference's default `-z`.
pub const DEFAULT_MAX_JOB_SIZE: u32 = 65_535;

/// The largest `-z` the reference accepts (larger values are clamped).
pub const MAX_JOB_SIZE_LIMIT: u32 = 1 << 30;

#[derive(Debug)]
enum State {
    Line,
    /// Over-long line: drop everything through the next CRLF, then one BAD_FORMAT.
    DiscardLine,
    /// Reading a put body: `need` = bytes + 2.
    Body {
        header: PutHeader,
        need: usize,
    },
    /// Dropping the body of a put that was too big; then JOB_TOO_BIG.
    Skip {
        remaining: u64,
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
                                };
                                continue;
                            }
                            if header.trailing_garbage {
                                return Ok(Some(Request::Rejected(Rejection::BadFormat {
                                    counted: Some(Counter::Put),
                                })));
                            }
                            let need = header.bytes as usize + 2;
                            self.state = State::Body { header, need };
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
                State::Body { header, need } => {
                    let (header, need) = (*header, *need);
                    if src.len() < need {
                        src.reserve(need - src.len());
                        return Ok(None);
                    }
                    self.state = State::Line;
                    let framed = src.split_to(need);
                    if &framed[need - 2..] != b"\r\n" {
                        return Ok(Some(Request::Rejected(Rejection::ExpectedCrlf)));
                    }
                    // The job keeps its own exactly-sized copy of the body, so a stored
                    // job never pins a connection's read buffer.
                    let body = bytes::Bytes::copy_from_slice(&framed[..need - 2]);
                    return Ok(Some(Request::Put(Put {
                        pri: header.pri,
                        delay: header.delay,
                        ttr: header.ttr,
                        body,
                    })));
                }
                State::Skip { remaining } => {
                    let n = (*remaining).min(src.len() as u64);
                    src.advance(n as usize);
                    *remaining -= n;
                    if *remaining > 0 {
                        return Ok(None);
                    }
                    self.state = State::Line;
                    return Ok(Some(Request::Rejected(Rejection::JobTooBig)));
                }
            }
        }
    }
}

impl Encoder<&Reply> for ServerCodec {
    type Error = std::io::Error;

    fn encode(&mut self, reply: &Reply, dst: &mut BytesMut) -> Result<(), std::io::Error> {
        reply.encode(dst);
        Ok(())
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

/// Checks of the codec's invariants on any input, shared by the property tests below
/// and the fuzz target (`protocol-tests/fuzz/`, which enables the `fuzzing` feature).
/// Every function panics on a violation.
#[cfg(any(test, feature = "fuzzing"))]
pub mod harness {
    use super::*;
    use crate::protocol::command::Command;

    /// Decode `input` fed in the given chunk sizes (cycled). After every call that asks
    /// for more input, the buffer must hold no more than the state needs: less than a
    /// line window between commands, at most a CR while discarding a line, less than
    /// the body while reading one, nothing while skipping one. A call that returns a
    /// request must have consumed input.
    pub fn decode_chunked(input: &[u8], chunks: &[usize], max_job_size: u32) -> Vec<Request> {
        let mut codec = ServerCodec::new(max_job_size);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut rest = input;
        let mut sizes = chunks.iter().cycle();
        while !rest.is_empty() {
            let n = (*sizes.next().unwrap_or(&1)).clamp(1, rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            // Each call makes progress or asks for more: never loops forever.
            for _ in 0..=input.len() {
                let before = buf.len();
                match codec.decode(&mut buf).expect("decode never fails") {
                    Some(r) => out.push(r),
                    None => break,
                }
                assert!(buf.len() < before, "a request without consuming input");
            }
            let held = buf.len();
            match &codec.state {
                State::Line => assert!(held < LINE_MAX, "line window exceeded: {held}"),
                State::DiscardLine => assert!(held <= 1, "kept {held} bytes of a long line"),
                State::Body { need, .. } => assert!(held < *need, "body of {need} holds {held}"),
                State::Skip { .. } => assert_eq!(held, 0, "kept bytes of a skipped body"),
            }
        }
        out
    }

    /// What the reference can answer to a request the protocol layer rejected.
    pub const REJECTION_REPLIES: [&[u8]; 4] = [
        b"BAD_FORMAT\r\n",
        b"UNKNOWN_COMMAND\r\n",
        b"EXPECTED_CRLF\r\n",
        b"JOB_TOO_BIG\r\n",
    ];

    /// A request is within the protocol's limits, and a rejection's reply is one of the
    /// reference's error lines.
    pub fn check_request(r: &Request, max_job_size: u32) {
        match r {
            Request::Rejected(rej) => {
                let mut wire = BytesMut::new();
                Reply::from(*rej).encode(&mut wire);
                assert!(
                    REJECTION_REPLIES.contains(&&wire[..]),
                    "{rej:?} answers {wire:?}"
                );
            }
            Request::Put(put) => assert!(put.body.len() <= max_job_size as usize),
            Request::Command(Command::ReserveWithTimeout(secs)) => {
                assert!(*secs <= i32::MAX as u32)
            }
            Request::Command(_) => {}
        }
    }

    /// Decode `input` whole, in `chunks`, and byte by byte: the same requests each
    /// time, every one checked; returns them.
    pub fn check_stream(input: &[u8], chunks: &[usize], max_job_size: u32) -> Vec<Request> {
        let whole = decode_chunked(input, &[input.len().max(1)], max_job_size);
        let split = decode_chunked(input, chunks, max_job_size);
        let bytewise = decode_chunked(input, &[1], max_job_size);
        assert_eq!(whole, split, "split reads decode differently");
        assert_eq!(whole, bytewise, "byte-by-byte reads decode differently");
        for r in &whole {
            check_request(r, max_job_size);
        }
        whole
    }
}

/// Property tests: framing must not depend on how the bytes are split into reads, and
/// malformed input draws exactly the reference's error replies, in step.
#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use super::harness::{check_stream, decode_chunked};
    use super::*;
    use crate::protocol::command::Command;

    fn client_line() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"reserve\r\n".to_vec()),
            Just(b"stats\r\n".to_vec()),
            (0u64..1000).prop_map(|id| format!("delete {id}\r\n").into_bytes()),
            "[a-z]{1,10}".prop_map(|t| format!("use {t}\r\n").into_bytes()),
            (0u32..5, proptest::collection::vec(any::<u8>(), 0..40)).prop_map(|(pri, body)| {
                let mut v = format!("put {pri} 0 10 {}\r\n", body.len()).into_bytes();
                v.extend_from_slice(&body);
                v.extend_from_slice(b"\r\n");
                v
            }),
            proptest::collection::vec(any::<u8>(), 0..300).prop_map(|mut junk| {
                junk.extend_from_slice(b"\r\n");
                junk
            }),
        ]
    }

    /// What one piece of a stream must decode to.
    #[derive(Clone, Debug)]
    enum Expect {
        Command,
        Put(usize),
        BadFormat,
        Unknown,
        ExpectedCrlf,
        TooBig,
        /// A command or a rejection, but not a put (junk of unknown meaning).
        OneLine,
    }

    const MAX_JOB: u32 = 100;

    /// Bytes that contain no CR, so no CRLF can appear inside them.
    fn no_cr(len: std::ops::Range<usize>) -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            any::<u8>().prop_map(|b| if b == b'\r' { b'.' } else { b }),
            len,
        )
    }

    fn line(text: String) -> Vec<u8> {
        format!("{text}\r\n").into_bytes()
    }

    /// One self-delimiting piece of client input and what it must decode to. Malformed
    /// pieces never swallow the next piece, so a stream of them must decode in step.
    fn piece() -> impl Strategy<Value = (Vec<u8>, Expect)> {
        let huge = prop_oneof![
            Just("put 99999999999999999999 0 60 1"),
            Just("put 0 4294967296 60 1"),
            Just("put 0 0 60 18446744073709551616"),
            Just("put -1 0 60 1"),
            Just("put 1 2 3"),
            Just("delete 18446744073709551616"),
            Just("release 1 4294967296 0"),
            Just("bury 1 99999999999999999999"),
            Just("kick 99999999999999999999"),
            Just("reserve-with-timeout 2147483648"),
            Just("reserve-with-timeout 99999999999999999999"),
            Just("peek 1 "),
            Just("touch +1"),
            Just("pause-tube default 4294967296"),
        ];
        let bad_tube = prop_oneof![
            Just("use -x".to_string()),
            Just("watch a:b".to_string()),
            Just("ignore ".to_string()),
            Just("use  two".to_string()),
            Just("use a b".to_string()),
            Just("stats-tube é".to_string()),
            Just(format!("use {}", "a".repeat(201))),
            "[a-z]{1,20}".prop_map(|t| format!("watch {t}\0")),
        ];
        prop_oneof![
            client_line().prop_filter_map("a known line", |l| {
                let is_put = l.starts_with(b"put ");
                let known = is_put
                    || [&b"reserve"[..], b"stats", b"delete", b"use "]
                        .iter()
                        .any(|p| l.starts_with(p));
                let body = l
                    .len()
                    .saturating_sub(l.iter().position(|&b| b == b'\n')? + 3);
                known.then(|| {
                    let e = if is_put {
                        Expect::Put(body)
                    } else {
                        Expect::Command
                    };
                    (l, e)
                })
            }),
            huge.prop_map(|l| (line(l.into()), Expect::BadFormat)),
            bad_tube.prop_map(|l| (line(l), Expect::BadFormat)),
            "[xyzXYZ!#][a-z -]{0,30}".prop_map(|l| (line(l), Expect::Unknown)),
            // A body whose last two bytes are not CRLF.
            (no_cr(0..MAX_JOB as usize), "[a-z]{2}").prop_map(|(body, end)| {
                let mut v = format!("put 0 0 1 {}\r\n", body.len()).into_bytes();
                v.extend_from_slice(&body);
                v.extend_from_slice(end.as_bytes());
                (v, Expect::ExpectedCrlf)
            }),
            // Too big: `bytes + 2` of anything, CRLFs and commands included, skipped.
            (1u32..300, any::<u8>()).prop_map(|(over, fill)| {
                let n = MAX_JOB + over;
                let mut v = format!("put 0 0 1 {n}\r\n").into_bytes();
                let junk = [b"delete 1\r\n".as_slice(), &[fill]].concat();
                v.extend(junk.iter().cycle().take(n as usize + 2));
                (v, Expect::TooBig)
            }),
            // Over-long lines: 223 bytes or more before the CRLF.
            no_cr(LINE_MAX - 1..700).prop_map(|mut l| {
                l.extend_from_slice(b"\r\n");
                (l, Expect::BadFormat)
            }),
            // Junk that fits a line and is not a put header: one request of some kind.
            no_cr(0..LINE_MAX - 2)
                .prop_filter("not a put", |l| !l.starts_with(b"put "))
                .prop_map(|mut l| {
                    l.extend_from_slice(b"\r\n");
                    (l, Expect::OneLine)
                }),
        ]
    }

    fn matches(r: &Request, e: &Expect) -> bool {
        match (e, r) {
            (Expect::Command, Request::Command(_)) => true,
            (Expect::Put(n), Request::Put(p)) => p.body.len() == *n,
            (Expect::BadFormat, Request::Rejected(Rejection::BadFormat { .. })) => true,
            (Expect::Unknown, Request::Rejected(Rejection::UnknownCommand)) => true,
            (Expect::ExpectedCrlf, Request::Rejected(Rejection::ExpectedCrlf)) => true,
            (Expect::TooBig, Request::Rejected(Rejection::JobTooBig)) => true,
            (Expect::OneLine, Request::Command(_) | Request::Rejected(_)) => true,
            _ => false,
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_decode_the_same_whole_or_split(
            input in proptest::collection::vec(any::<u8>(), 0..2000),
            chunks in proptest::collection::vec(1usize..64, 1..8),
        ) {
            check_stream(&input, &chunks, MAX_JOB);
        }

        #[test]
        fn client_streams_decode_the_same_whole_or_byte_by_byte(
            lines in proptest::collection::vec(client_line(), 0..30),
        ) {
            let input: Vec<u8> = lines.concat();
            let whole = check_stream(&input, &[7], 65_535);
            let puts = lines.iter().filter(|l| l.starts_with(b"put ")).count();
            let got_puts = whole.iter().filter(|r| matches!(r, Request::Put(_))).count();
            prop_assert_eq!(puts, got_puts);
        }

        /// Random and malformed input — huge numbers, bodies without CRLF, too-big
        /// bodies full of commands, over-long lines, invalid tube names, unknown verbs,
        /// junk — mixed with valid commands: one request per piece, in order, each the
        /// one the reference gives, and the framing never falls out of step.
        #[test]
        fn malformed_input_draws_the_reference_replies_in_step(
            pieces in proptest::collection::vec(piece(), 1..25),
            chunks in proptest::collection::vec(1usize..300, 1..6),
        ) {
            let input: Vec<u8> = pieces.iter().flat_map(|(b, _)| b.clone()).collect();
            let got = check_stream(&input, &chunks, MAX_JOB);
            prop_assert_eq!(got.len(), pieces.len(), "requests for {:?}", pieces);
            for (i, (r, (bytes, e))) in got.iter().zip(&pieces).enumerate() {
                prop_assert!(
                    matches(r, e),
                    "piece {} {:?} decoded to {:?}, expected {:?}",
                    i,
                    String::from_utf8_lossy(bytes),
                    r,
                    e
                );
            }
            // The stream stays usable: a command after all of it is understood.
            let mut tail = input.clone();
            tail.extend_from_slice(b"stats\r\n");
            let after = decode_chunked(&tail, &chunks, MAX_JOB);
            prop_assert_eq!(after.last(), Some(&Request::Command(Command::Stats)));
        }
    }
}
