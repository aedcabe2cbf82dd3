//! Property tests: framing must not depend on how the bytes are split into reads, and
//! malformed input draws exactly the reference's error replies, in step.

use proptest::prelude::*;

use super::harness::{check_stream, check_stream_in, decode_chunked};
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
        // A number only 1.12 reads: the engine answers BAD_FORMAT as 1.13 (the
        // reference) does, and the line is framed like any other.
        (
            Expect::BadFormat,
            Request::Command(Command::ReserveWithTimeout(crate::protocol::Timeout::Only1_12(_))),
        ) => true,
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

/// What one piece of an extended-grammar stream must decode to.
#[derive(Clone, Debug)]
enum ExtExpect {
    /// An extension (a put with this body length, or a command).
    Extension(Option<usize>),
    /// A standard request of the same shape as under [`Expect`].
    Standard(Expect),
    /// Malformed tags: the body discarded, then BAD_FORMAT counted as a put.
    DrainedBadFormat,
}

fn keyed_put(body: &[u8], tags: &str) -> Vec<u8> {
    let mut v = format!("put 0 1500ms 60 {} {tags}\r\n", body.len()).into_bytes();
    v.extend_from_slice(body);
    v.extend_from_slice(b"\r\n");
    v
}

/// Pieces of an extended-grammar stream: extension lines, keyed puts whose bodies are
/// full of commands (valid tags, malformed tags), over-long list lines, and the
/// standard pieces.
fn ext_piece() -> impl Strategy<Value = (Vec<u8>, ExtExpect)> {
    let commands_body = proptest::collection::vec(
        prop_oneof![
            Just(b"delete 1\r\n".to_vec()),
            Just(b"flush-tube default\r\n".to_vec()),
            no_cr(0..8)
        ],
        0..5,
    )
    .prop_map(|parts| parts.concat())
    .prop_filter("fits -z", |b| b.len() <= MAX_JOB as usize);
    let ext_line = prop_oneof![
        (1u16..=1000, 0u32..5000).prop_map(|(n, t)| format!("reserve-batch {n} {t}ms")),
        proptest::collection::vec(any::<u64>(), 1..30).prop_map(|ids| {
            let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
            format!("delete-batch {}", ids.join(" "))
        }),
        "[a-z0-9-]{1,20}".prop_map(|k| format!("find-key k{k}")),
        "[a-z0-9-]{1,20}".prop_map(|k| format!("retime-key k{k} 250ms")),
        Just("flush-tube default ready buried".to_string()),
        Just("list-extensions".to_string()),
        Just("release 3 0 10ms".to_string()),
    ];
    prop_oneof![
        ext_line.prop_map(|l| (line(l), ExtExpect::Extension(None))),
        (commands_body.clone(), "[a-z0-9]{1,30}").prop_map(|(body, key)| {
            let n = body.len();
            (
                keyed_put(&body, &format!("idp:{key}:30")),
                ExtExpect::Extension(Some(n)),
            )
        }),
        (
            commands_body,
            prop_oneof![
                Just("idp:"),
                Just("grp:g"),
                Just("idp:k idp:j"),
                Just("idp:-k"),
                Just("idp:k:5s")
            ]
        )
            .prop_map(|(body, tags)| (keyed_put(&body, tags), ExtExpect::DrainedBadFormat)),
        // A list line past the 224-byte window, within its own.
        (40usize..400).prop_map(|n| {
            let ids: Vec<String> = (0..n as u64).map(|i| i.to_string()).collect();
            (
                line(format!("touch-batch {}", ids.join(" "))),
                ExtExpect::Extension(None),
            )
        }),
        // A list line past its own window: one BAD_FORMAT.
        Just((
            line(format!("delete-batch {}", "1 ".repeat(LIST_LINE_MAX))),
            ExtExpect::Standard(Expect::BadFormat)
        )),
        piece().prop_map(|(bytes, e)| (bytes, ExtExpect::Standard(e))),
    ]
}

fn ext_matches(f: &Frame, e: &ExtExpect) -> bool {
    match (e, f) {
        (ExtExpect::Extension(None), Frame::Extension(ext)) => {
            !matches!(**ext, crate::protocol::Extension::Put(_))
        }
        (ExtExpect::Extension(Some(n)), Frame::Extension(ext)) => {
            matches!(&**ext, crate::protocol::Extension::Put(p) if p.body.len() == *n)
        }
        (
            ExtExpect::DrainedBadFormat,
            Frame::Standard(Request::Rejected(Rejection::BadFormat {
                counted: Some(Counter::Put),
            })),
        ) => true,
        (ExtExpect::Standard(e), Frame::Standard(r)) => matches(r, e),
        // Junk may happen to be an extension line.
        (ExtExpect::Standard(Expect::OneLine), Frame::Extension(_)) => true,
        _ => false,
    }
}

proptest! {
    /// Under the extended grammar, extension lines, keyed puts whose bodies hold
    /// commands (with valid or malformed tags), list lines longer than 224 bytes and
    /// the standard pieces decode one request per piece, in step, however split.
    #[test]
    fn extended_streams_decode_in_step(
        pieces in proptest::collection::vec(ext_piece(), 1..20),
        chunks in proptest::collection::vec(1usize..300, 1..6),
    ) {
        let input: Vec<u8> = pieces.iter().flat_map(|(b, _)| b.clone()).collect();
        let got = check_stream_in(&input, &chunks, MAX_JOB, Grammar::FULL);
        prop_assert_eq!(got.len(), pieces.len(), "requests for {:?}", pieces);
        for (i, (f, (bytes, e))) in got.iter().zip(&pieces).enumerate() {
            prop_assert!(
                ext_matches(f, e),
                "piece {} {:?} decoded to {:?}, expected {:?}",
                i,
                String::from_utf8_lossy(bytes),
                f,
                e
            );
        }
    }

    /// The standard pieces decode the same under either grammar, one for one (junk
    /// lines aside, which may happen to be extension lines; none of them frames a body).
    #[test]
    fn standard_streams_decode_the_same_in_either_grammar(
        pieces in proptest::collection::vec(piece(), 1..20),
        chunks in proptest::collection::vec(1usize..300, 1..6),
    ) {
        let input: Vec<u8> = pieces.iter().flat_map(|(b, _)| b.clone()).collect();
        let standard = check_stream_in(&input, &chunks, MAX_JOB, Grammar::Standard);
        let extended = check_stream_in(&input, &chunks, MAX_JOB, Grammar::FULL);
        prop_assert_eq!(standard.len(), pieces.len());
        prop_assert_eq!(extended.len(), pieces.len());
        for ((s, e), (bytes, expect)) in standard.iter().zip(&extended).zip(&pieces) {
            if !matches!(expect, Expect::OneLine) {
                prop_assert_eq!(s, e, "{:?}", String::from_utf8_lossy(bytes));
            }
        }
    }

    #[test]
    fn arbitrary_bytes_decode_the_same_whole_or_split_in_the_extended_grammar(
        input in proptest::collection::vec(any::<u8>(), 0..2000),
        chunks in proptest::collection::vec(1usize..64, 1..8),
    ) {
        check_stream_in(&input, &chunks, MAX_JOB, Grammar::FULL);
    }
}
