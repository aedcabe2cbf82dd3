//! Unit tests of beanstalkd's grammar framing: a put too big, badly formed or over-long
//! stays in step and discards exactly its bytes; a large body grows as it arrives, the
//! same in any split, and one that cannot be allocated is answered in step; the longest
//! line is 224 bytes.

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
    let Reading::Body { body, .. } = &c.0.reading else {
        panic!("not reading a body: {:?}", c.0.reading);
    };
    assert_eq!((body.len(), body.capacity()), (3, BODY_CHUNK));
}

#[test]
fn a_body_that_cannot_be_allocated_is_discarded_then_answered_in_step() {
    let mut c = ServerCodec::new(100);
    let mut buf = BytesMut::from(&b"put 0 0 1 10\r\n0123"[..]);
    assert_eq!(c.decode(&mut buf).unwrap(), None);
    // What the decoder does when the allocator refuses after 4 bytes.
    let Reading::Body { put, body } = &c.0.reading else {
        panic!("not reading a body: {:?}", c.0.reading);
    };
    c.0.reading = out_of_memory(put.bytes, body.len());
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
