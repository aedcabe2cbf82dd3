//! Unit tests of the extended grammar's framing: keyed puts and their bodies, malformed
//! tags discarding the body, tagged puts with extensions off, list lines past 224 bytes,
//! families not served framed as beanstalkd's grammar frames them, key commands.

use super::*;
use crate::protocol::command::Command;
use crate::protocol::ext::{BatchOp, Families, Key, KeyMode};

fn frames(grammar: Grammar, input: &[u8]) -> Vec<Frame> {
    harness::check_stream_in(input, &[3, 50, 1], 100, grammar)
}

fn standard(r: Request) -> Frame {
    Frame::Standard(r)
}

#[test]
fn a_keyed_put_frames_its_body() {
    let got = frames(
        Grammar::FULL,
        b"put 5 1500ms 60 8 idp:order-7:30\r\ndelete 9\r\nstats\r\n",
    );
    let Some(Extension::Put(put)) = got[0].as_extension() else {
        panic!("not an extended put: {got:?}");
    };
    assert_eq!(
        (put.pri, put.delay.as_millis(), put.ttr.as_millis()),
        (5, 1500, 60_000)
    );
    assert_eq!(&put.body[..], b"delete 9");
    let key = put.key.as_ref().unwrap();
    assert_eq!(
        (key.key.as_str(), key.mode, key.window.as_millis()),
        ("order-7", KeyMode::Dedupe, 30_000)
    );
    assert_eq!(got[1], standard(Request::Command(Command::Stats)));
    assert_eq!(got.len(), 2);
}

#[test]
fn malformed_tags_discard_the_body_so_it_never_runs() {
    for tags in ["idp:", "grp:g", "idp:k idp:j", "rpl:k:5s"] {
        let input = format!("put 0 0 60 11 {tags}\r\ndelete 1\r\nx\r\nstats\r\n");
        assert_eq!(
            frames(Grammar::FULL, input.as_bytes()),
            vec![
                standard(Request::Rejected(Rejection::BadFormat {
                    counted: Some(Counter::Put)
                })),
                standard(Request::Command(Command::Stats)),
            ],
            "{tags}"
        );
    }
}

#[test]
fn with_extensions_off_a_tagged_put_is_what_beanstalkd_makes_of_it() {
    // BAD_FORMAT, then the body read as commands (checked against the oracle:
    // protocol-tests/cases/extensions_off_a_tagged_put_runs_its_body_as_a_command.txt).
    assert_eq!(
        frames(Grammar::Standard, b"put 0 0 60 8 idp:k\r\ndelete 9\r\n"),
        vec![
            standard(Request::Rejected(Rejection::BadFormat {
                counted: Some(Counter::Put)
            })),
            standard(Request::Command(Command::Delete(9))),
        ]
    );
}

#[test]
fn extended_puts_check_size_then_crlf() {
    assert_eq!(
        frames(Grammar::FULL, b"put 0 0 1 101 idp:k\r\n"),
        Vec::<Frame>::new(),
        "waits for the 103 bytes it skips"
    );
    let mut input = b"put 0 0 1 101 grp:x\r\n".to_vec();
    input.extend(std::iter::repeat_n(b'z', 103));
    input.extend_from_slice(b"stats\r\n");
    assert_eq!(
        frames(Grammar::FULL, &input),
        vec![
            standard(Request::Rejected(Rejection::JobTooBig)),
            standard(Request::Command(Command::Stats)),
        ]
    );
    assert_eq!(
        frames(Grammar::FULL, b"put 0 0 1 3 idp:k\r\nabcXY"),
        vec![standard(Request::Rejected(Rejection::ExpectedCrlf))]
    );
}

#[test]
fn list_lines_may_pass_224_bytes_only_under_the_extended_grammar() {
    let ids: Vec<String> = (1..=1000u64).map(|i| (i * 1_000_003).to_string()).collect();
    let line = format!("delete-batch {}\r\nstats\r\n", ids.join(" "));
    assert!(line.len() > LINE_MAX);
    let got = frames(Grammar::FULL, line.as_bytes());
    let Some(Extension::Batch {
        op: BatchOp::Delete,
        ids: got_ids,
    }) = got[0].as_extension()
    else {
        panic!("not a batch: {:?}", got[0]);
    };
    assert_eq!(got_ids.len(), 1000);
    assert_eq!(got[1], standard(Request::Command(Command::Stats)));
    // Standard: an over-long line, one BAD_FORMAT, in step.
    assert_eq!(
        frames(Grammar::Standard, line.as_bytes()),
        vec![
            standard(Request::Rejected(Rejection::BadFormat { counted: None })),
            standard(Request::Command(Command::Stats)),
        ]
    );
    // Any other long line keeps the 224-byte window under the extended grammar.
    let long = format!("find-key {}\r\nstats\r\n", "k".repeat(300));
    assert_eq!(
        frames(Grammar::FULL, long.as_bytes()),
        vec![
            standard(Request::Rejected(Rejection::BadFormat { counted: None })),
            standard(Request::Command(Command::Stats)),
        ]
    );
    // A list line past its own window: one BAD_FORMAT, in step.
    let huge = format!("touch-batch {}\r\nstats\r\n", "7 ".repeat(LIST_LINE_MAX));
    assert_eq!(
        frames(Grammar::FULL, huge.as_bytes()),
        vec![
            standard(Request::Rejected(Rejection::BadFormat { counted: None })),
            standard(Request::Command(Command::Stats)),
        ]
    );
}

#[test]
fn a_family_not_served_is_framed_as_the_standard_grammar_frames_it() {
    let only_ms = Grammar::Extended(Families::of(Family::Milliseconds));
    let list = format!("delete-batch{}\r\nstats\r\n", " 7".repeat(200));
    for input in [
        "put 0 0 60 8 idp:k\r\ndelete 9\r\n",
        "put 0 500ms 60 8 rpl:k\r\ndelete 9\r\n",
        "reserve-batch 5\r\nfind-key k\r\nflush-tube t\r\n",
        &list,
    ] {
        assert_eq!(
            frames(only_ms, input.as_bytes()),
            frames(Grammar::Standard, input.as_bytes()),
            "{input:?}"
        );
    }
    let got = frames(only_ms, b"put 0 500ms 60 1\r\nx\r\nlist-extensions\r\n");
    assert!(
        matches!(got[0].as_extension(), Some(Extension::Put(_))),
        "{got:?}"
    );
    assert_eq!(got[1], Frame::extension(Extension::ListExtensions));
    let none = Grammar::Extended(Families::NONE);
    assert_eq!(
        frames(none, b"list-extensions\r\nrelease 1 0 5ms\r\n"),
        vec![
            Frame::extension(Extension::ListExtensions),
            standard(Request::Rejected(Rejection::BadFormat { counted: None })),
        ]
    );
}

#[test]
fn a_key_command_is_an_extension_frame() {
    assert_eq!(
        frames(Grammar::FULL, b"delete-key order-1\r\n"),
        vec![Frame::extension(Extension::DeleteKey(
            Key::new(b"order-1").unwrap()
        ))]
    );
    assert_eq!(
        frames(Grammar::Standard, b"delete-key order-1\r\n"),
        vec![standard(Request::Rejected(Rejection::UnknownCommand))]
    );
}
