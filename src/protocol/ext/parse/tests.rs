//! The extension grammar: every form, its bounds and its malformed variants; and that
//! the extended grammar never changes what a line the standard grammar accepts means,
//! nor what beanstalkd answers when extensions are off.

use proptest::prelude::*;

use super::*;
use crate::protocol::codec::LINE_MAX;
use crate::protocol::command::{Command, PutHeader, Timeout};
use crate::protocol::ext::{Grammar, MAX_KEY_LEN};
use crate::protocol::parse::{parse_line, parse_line_in};

fn ext(line: &str) -> Result<Line, Rejection> {
    parse_line_in(line.as_bytes(), Grammar::FULL)
}

fn ok(line: &str) -> Extension {
    match ext(line) {
        Ok(Line::Extension(e)) => *e,
        other => panic!("{line:?} parsed to {other:?}"),
    }
}

fn bad(line: &str) {
    assert_eq!(ext(line), Err(BAD), "{line:?}");
}

fn key(k: &str) -> Key {
    Key::new(k.as_bytes()).unwrap()
}

fn ms(n: u64) -> Millis {
    Millis::new(n).unwrap()
}

fn put_header(line: &str) -> ExtendedPutHeader {
    match ext(line) {
        Ok(Line::ExtendedPut(h)) => *h,
        other => panic!("{line:?} parsed to {other:?}"),
    }
}

#[test]
fn reserve_batch() {
    let rb = |max, timeout| Extension::ReserveBatch { max, timeout };
    assert_eq!(ok("reserve-batch 5"), rb(5, Millis::ZERO));
    assert_eq!(ok("reserve-batch 1 10"), rb(1, Millis::from_secs(10)));
    assert_eq!(ok("reserve-batch 1000 250ms"), rb(1000, ms(250)));
    assert_eq!(ok("reserve-batch  7  0"), rb(7, Millis::ZERO));
    assert_eq!(
        ok("reserve-batch 2 2147483647"),
        rb(2, Millis::from_secs(i32::MAX as u32))
    );
    assert_eq!(
        ok("reserve-batch 2 2147483647000ms"),
        rb(2, Millis::from_secs(i32::MAX as u32))
    );
    for line in [
        "reserve-batch 0",
        "reserve-batch 1001",
        "reserve-batch 65537",
        "reserve-batch -1",
        "reserve-batch 5 ",
        "reserve-batch 5 1 2",
        "reserve-batch 5 2147483648",
        "reserve-batch 5 2147483647001ms",
        "reserve-batch 5 1s",
        "reserve-batch 5 1.5",
        "reserve-batch x",
        "reserve-batch ",
    ] {
        bad(line);
    }
    // Without its space, the name is beanstalkd's malformed `reserve` in both grammars.
    assert_eq!(ext("reserve-batch"), Err(BAD));
    assert_eq!(ext("reserve-batchx 1"), Err(BAD));
}

#[test]
fn id_lists() {
    let batch = |op, ids: &[u64]| Extension::Batch {
        op,
        ids: ids.to_vec(),
    };
    assert_eq!(ok("delete-batch 1"), batch(BatchOp::Delete, &[1]));
    assert_eq!(
        ok("delete-batch 3 1  2 3"),
        batch(BatchOp::Delete, &[3, 1, 2, 3])
    );
    assert_eq!(
        ok("touch-batch 18446744073709551615"),
        batch(BatchOp::Touch, &[u64::MAX])
    );
    assert_eq!(
        ok("release-batch 10 1500ms 4 5"),
        batch(
            BatchOp::Release {
                pri: 10,
                delay: ms(1500)
            },
            &[4, 5]
        )
    );
    assert_eq!(
        ok("release-batch 0 0 4"),
        batch(
            BatchOp::Release {
                pri: 0,
                delay: Millis::ZERO
            },
            &[4]
        )
    );
    assert_eq!(
        ok("bury-batch 4294967295 8 9"),
        batch(BatchOp::Bury { pri: u32::MAX }, &[8, 9])
    );
    let thousand: String = (1..=1000).map(|i| format!(" {i}")).collect();
    match ok(&format!("delete-batch{thousand}")) {
        Extension::Batch { ids, .. } => assert_eq!(ids.len(), 1000),
        other => panic!("{other:?}"),
    }
    bad(&format!("delete-batch{thousand} 1001"));
    for line in [
        "delete-batch ",
        "delete-batch 1 ",
        "delete-batch 1,2",
        "delete-batch -1",
        "delete-batch 18446744073709551616",
        "touch-batch x",
        "release-batch 1 2",
        "release-batch 1 2ms",
        "release-batch 4294967296 0 1",
        "release-batch 1 4294967296 1",
        "bury-batch 1",
        "bury-batch 1 2 x",
    ] {
        bad(line);
    }
}

#[test]
fn key_commands() {
    assert_eq!(
        ok("find-key order-1234"),
        Extension::FindKey(key("order-1234"))
    );
    assert_eq!(ok("peek-key a(b)$c"), Extension::PeekKey(key("a(b)$c")));
    assert_eq!(ok("delete-key k"), Extension::DeleteKey(key("k")));
    assert_eq!(ok("kick-key k"), Extension::KickKey(key("k")));
    assert_eq!(
        ok("bury-key k 100"),
        Extension::BuryKey {
            key: key("k"),
            pri: 100
        }
    );
    assert_eq!(
        ok("retime-key order-1 90"),
        Extension::RetimeKey {
            key: key("order-1"),
            delay: Millis::from_secs(90)
        }
    );
    assert_eq!(
        ok("retime-key order-1  250ms"),
        Extension::RetimeKey {
            key: key("order-1"),
            delay: ms(250)
        }
    );
    let longest = "k".repeat(MAX_KEY_LEN);
    assert_eq!(
        ok(&format!("find-key {longest}")),
        Extension::FindKey(key(&longest))
    );
    for line in [
        "find-key ".to_string(),
        "find-key  k".to_string(),
        "find-key k ".to_string(),
        "find-key -k".to_string(),
        "find-key a:b".to_string(),
        "find-key a b".to_string(),
        format!("find-key {longest}k"),
        "bury-key k".to_string(),
        "bury-key k5".to_string(),
        "bury-key k 5 ".to_string(),
        "bury-key -k 5".to_string(),
        "retime-key k 5s".to_string(),
        "retime-key k".to_string(),
        "retime-key k:1 5".to_string(),
    ] {
        bad(&line);
    }
}

#[test]
fn flush() {
    let flush = |tube: &str, states| Extension::Flush {
        tube: TubeName::new(tube.as_bytes()).unwrap(),
        states,
    };
    assert_eq!(ok("flush-tube default"), flush("default", FlushStates::ALL));
    assert_eq!(
        ok("flush-buried emails"),
        flush("emails", FlushStates::BURIED)
    );
    assert_eq!(
        ok("flush-tube t ready delayed"),
        flush(
            "t",
            FlushStates {
                ready: true,
                delayed: true,
                buried: false,
                reserved: false
            }
        )
    );
    assert_eq!(
        ok("flush-tube t reserved buried reserved"),
        flush(
            "t",
            FlushStates {
                ready: false,
                delayed: false,
                buried: true,
                reserved: true
            }
        )
    );
    for line in [
        "flush-tube ",
        "flush-tube -t",
        "flush-tube t ",
        "flush-tube t  ready",
        "flush-tube t all",
        "flush-tube t Ready",
        "flush-buried t buried",
        "flush-buried ",
    ] {
        bad(line);
    }
}

#[test]
fn list_extensions_is_exact() {
    assert_eq!(ok("list-extensions"), Extension::ListExtensions);
    assert_eq!(ext("list-extensions "), Err(Rejection::UnknownCommand));
    assert_eq!(ext("list-extensionsx"), Err(Rejection::UnknownCommand));
}

#[test]
fn puts_with_keys_and_milliseconds() {
    let h = put_header("put 1 2 3 4 idp:order-1");
    assert_eq!(
        (h.pri, h.delay, h.ttr, h.bytes),
        (1, Millis::from_secs(2), Millis::from_secs(3), 4)
    );
    assert_eq!(
        h.tags,
        PutTags::Valid(Some(PutKey {
            key: key("order-1"),
            mode: KeyMode::Dedupe,
            window: Millis::ZERO
        }))
    );
    let h = put_header("put 0 1500ms 60000ms 5 rpl:k:300");
    assert_eq!((h.delay, h.ttr), (ms(1500), ms(60_000)));
    assert_eq!(
        h.tags,
        PutTags::Valid(Some(PutKey {
            key: key("k"),
            mode: KeyMode::Replace,
            window: Millis::from_secs(300)
        }))
    );
    let h = put_header("put 0 0 10 5 idp:k:2500ms");
    assert!(matches!(h.tags, PutTags::Valid(Some(PutKey { window, .. })) if window == ms(2500)));
    // Milliseconds alone, no key.
    let h = put_header("put 0 5ms 1 0");
    assert_eq!((h.delay, h.tags), (ms(5), PutTags::Valid(None)));
    // Extra spaces between tags are tolerated (the body is framed either way).
    assert!(matches!(
        put_header("put 0 0 1 2   idp:k").tags,
        PutTags::Valid(Some(_))
    ));
    for malformed in [
        "put 0 0 1 2 idp:",
        "put 0 0 1 2 idp:-k",
        "put 0 0 1 2 idp:k:",
        "put 0 0 1 2 idp:k:x",
        "put 0 0 1 2 idp:k:5s",
        "put 0 0 1 2 idp:k:1:2",
        "put 0 0 1 2 idp:k idp:j",
        "put 0 0 1 2 idp:k rpl:j",
        "put 0 0 1 2 grp:g",
        "put 0 0 1 2 con:c:3",
        "put 0 0 1 2 idp:k zz",
        "put 0 0 1 2 idp:k ",
        "put 0 5ms 1 2 zz",
        "put 0 5ms 1 2 ",
        "put 0 0 1 2 idp:k:4294967296",
    ] {
        assert_eq!(
            put_header(malformed).tags,
            PutTags::Malformed,
            "{malformed:?}"
        );
    }
    let longest = "k".repeat(MAX_KEY_LEN);
    assert!(matches!(
        put_header(&format!("put 0 0 1 2 idp:{longest}")).tags,
        PutTags::Valid(Some(_))
    ));
    assert_eq!(
        put_header(&format!("put 0 0 1 2 idp:{longest}k")).tags,
        PutTags::Malformed
    );
}

#[test]
fn trailing_text_that_is_not_a_tag_keeps_the_references_answer() {
    // BAD_FORMAT with the body not skipped (a header flagged for trailing garbage),
    // exactly as under the standard grammar.
    for line in [
        "put 0 0 1 2 zz",
        "put 0 0 1 2 ",
        "put 0 0 1 2 :x",
        "put 0 0 1 2 IDP:x",
        "put 0 0 1 2 1:x",
        "put 0 0 1 2x idp:k",
    ] {
        assert_eq!(ext(line), parse_line(line.as_bytes()), "{line:?}");
        assert!(matches!(
            ext(line),
            Ok(Line::Put(PutHeader {
                trailing_garbage: true,
                ..
            }))
        ));
    }
    // Numbers that do not parse: BAD_FORMAT, not framed.
    for line in [
        "put 0 1.5 1 2",
        "put 0 5s 1 2 idp:k",
        "put 0 4294967295001ms 1 2",
        "put x 0 1 2 idp:k",
        "put 0 0 1 idp:k",
    ] {
        assert_eq!(ext(line), Err(BAD), "{line:?}");
    }
    // A NUL is BAD_FORMAT in any grammar.
    assert_eq!(ext("put 0 0 1 2 idp:k\0"), Err(BAD));
    assert_eq!(ext("delete-batch 1\0"), Err(BAD));
}

#[test]
fn release_and_pause_tube_in_milliseconds() {
    assert_eq!(
        ok("release 7 10 250ms"),
        Extension::Release {
            id: 7,
            pri: 10,
            delay: ms(250)
        }
    );
    assert_eq!(
        ok("pause-tube default 1500ms"),
        Extension::PauseTube {
            tube: TubeName::default_tube(),
            delay: ms(1500)
        }
    );
    // The reference's own leniency carries over: spaces, a name glued to the verb.
    assert_eq!(
        ok("pause-tubedefault  0ms"),
        Extension::PauseTube {
            tube: TubeName::default_tube(),
            delay: Millis::ZERO
        }
    );
    // Counted once the delay parsed, then the name is checked, as the reference does.
    assert_eq!(
        ext("pause-tube -x 5ms"),
        Err(Rejection::BadFormat {
            counted: Some(Counter::PauseTube)
        })
    );
    for line in [
        "release 7 10 250ms ",
        "release 7 10 250 ms",
        "release 7 10 2.5",
        "release 7 250ms",
        "pause-tube default 5ms ",
        "pause-tube default 5mss",
    ] {
        assert_eq!(ext(line), parse_line(line.as_bytes()), "{line:?}");
    }
}

#[test]
fn lines_beanstalkd_accepts_keep_their_meaning() {
    // `reserve-with-timeout` tolerates trailing junk in the reference: `5ms` is five
    // seconds there, so it is five seconds here too (never milliseconds).
    assert_eq!(
        ext("reserve-with-timeout 5ms"),
        Ok(Line::Command(Command::ReserveWithTimeout(Timeout::Secs(5))))
    );
    // `kick` ignores trailing junk in the reference.
    assert_eq!(ext("kick 5ms"), Ok(Line::Command(Command::Kick(5))));
    for line in [
        "put 1 2 3 4",
        "release 1 2 3",
        "pause-tube default 5",
        "quit-batch",
        "stats-key k",
    ] {
        assert_eq!(ext(line), parse_line(line.as_bytes()), "{line:?}");
    }
}

#[test]
fn with_extensions_off_every_extension_line_gets_beanstalkds_answer() {
    // Checked against beanstalkd 1.12 (protocol-tests/cases/extensions_off_*).
    let unknown = [
        "delete-batch 1 2",
        "release-batch 0 0 1",
        "touch-batch 1",
        "bury-batch 0 1",
        "find-key k",
        "peek-key k",
        "delete-key k",
        "kick-key k",
        "bury-key k 1",
        "retime-key k 5ms",
        "flush-tube default",
        "flush-buried default",
        "list-extensions",
    ];
    for line in unknown {
        assert_eq!(
            parse_line(line.as_bytes()),
            Err(Rejection::UnknownCommand),
            "{line:?}"
        );
        assert!(ext(line).is_ok(), "{line:?} is an extension when on");
    }
    // A prefix of the reference's matches these: BAD_FORMAT.
    for line in [
        "reserve-batch 5",
        "release 1 0 500ms",
        "pause-tube default 500ms",
    ] {
        assert_eq!(parse_line(line.as_bytes()), Err(BAD), "{line:?}");
    }
    // A tagged put is a put with trailing text: BAD_FORMAT, counted, body not skipped.
    assert!(matches!(
        parse_line(b"put 0 0 10 5 idp:order-1"),
        Ok(Line::Put(PutHeader {
            trailing_garbage: true,
            ..
        }))
    ));
}

#[test]
fn the_longest_keyed_put_fits_the_line_window() {
    let line = format!(
        "put {} 4294967295000ms 4294967295000ms {} rpl:{}:4294967295000ms\r\n",
        u32::MAX,
        u32::MAX,
        "k".repeat(MAX_KEY_LEN)
    );
    assert!(line.len() <= LINE_MAX, "{} bytes", line.len());
    assert!(matches!(
        put_header(line.trim_end()).tags,
        PutTags::Valid(Some(_))
    ));
}

/// Lines close to the reference's commands: valid ones, and mutations of them.
fn near_line() -> impl Strategy<Value = Vec<u8>> {
    let verbs = prop_oneof![
        Just("put "),
        Just("release "),
        Just("pause-tube "),
        Just("reserve-with-timeout "),
        Just("reserve"),
        Just("delete "),
        Just("kick "),
        Just("bury "),
        Just("touch "),
        Just("peek "),
        Just("stats-tube "),
        Just("use "),
        Just("reserve-batch "),
        Just("delete-batch "),
        Just("release-batch "),
        Just("flush-tube "),
        Just("find-key "),
        Just("bury-key "),
        Just("list-extensions"),
    ];
    let token = prop_oneof![
        (0u64..5000).prop_map(|n| n.to_string()),
        (0u64..5000).prop_map(|n| format!("{n}ms")),
        Just("4294967295".to_string()),
        Just("4294967296".to_string()),
        Just("default".to_string()),
        "[a-z]{1,4}:[a-z0-9]{0,4}(:[0-9]{1,3}(ms)?)?",
        "[ -~]{0,3}",
        Just(String::new()),
    ];
    (verbs, proptest::collection::vec(token, 0..6), any::<bool>()).prop_map(
        |(verb, tokens, double)| {
            let sep = if double { "  " } else { " " };
            format!("{verb}{}", tokens.join(sep)).into_bytes()
        },
    )
}

proptest! {
    /// The heart of "opt-in by use": a line the standard grammar accepts means exactly
    /// the same under the extended one, and the standard grammar never yields an
    /// extension.
    #[test]
    fn no_accepted_line_changes_meaning(line in near_line()) {
        let standard = parse_line(&line);
        let extended = parse_line_in(&line, Grammar::FULL);
        prop_assert!(!matches!(standard, Ok(Line::Extension(_) | Line::ExtendedPut(_))));
        let accepted = match &standard {
            Ok(Line::Put(h)) => !h.trailing_garbage,
            Ok(_) => true,
            Err(_) => false,
        };
        if accepted {
            prop_assert_eq!(&standard, &extended, "{:?}", String::from_utf8_lossy(&line));
        }
        // A line the extended grammar does not claim keeps the standard answer.
        if !matches!(extended, Ok(Line::Extension(_) | Line::ExtendedPut(_)))
            && !matches!(extended, Err(Rejection::BadFormat { counted: Some(Counter::PauseTube) }))
        {
            let claimed_as_bad = standard != extended;
            if claimed_as_bad {
                // Only an extension verb's malformed line differs, and only as BAD_FORMAT.
                prop_assert_eq!(&extended, &Err(BAD), "{:?}", String::from_utf8_lossy(&line));
            }
        }
    }

    /// Any bytes: the extended parser never panics and stays within its bounds.
    #[test]
    fn any_line_parses_or_is_rejected(line in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse_line_in(&line, Grammar::FULL);
    }
}
