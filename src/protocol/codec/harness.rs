//! Checks of the codec's invariants on any input, shared by the property tests
//! and the fuzz target (`protocol-tests/fuzz/`, which enables the `fuzzing` feature).
//! Every function panics on a violation.

use super::*;
use crate::protocol::command::Command;

/// Decode `input` fed in the given chunk sizes (cycled). After every call that asks
/// for more input, the buffer must hold no more than the state needs: less than a
/// line window between commands, at most a CR while discarding a line, at most the
/// first byte of the CRLF while reading a body (whose own buffer never grows past
/// the declared size), nothing while skipping one. A call that returns a request
/// must have consumed input.
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
            State::Body { header, body } => {
                assert!(held <= 1, "kept {held} bytes of a body in the read buffer");
                let want = header.bytes as usize;
                assert!(
                    body.capacity() <= want,
                    "body of {want} claims {}",
                    body.capacity()
                );
            }
            State::Skip { .. } => assert_eq!(held, 0, "kept bytes of a skipped body"),
        }
    }
    out
}

/// What the reference can answer to a request the protocol layer rejected.
pub const REJECTION_REPLIES: [&[u8]; 5] = [
    b"BAD_FORMAT\r\n",
    b"UNKNOWN_COMMAND\r\n",
    b"EXPECTED_CRLF\r\n",
    b"JOB_TOO_BIG\r\n",
    b"OUT_OF_MEMORY\r\n",
];

/// A request is within the protocol's limits, and a rejection's reply is one of the
/// reference's error lines.
pub fn check_request(r: &Request, max_job_size: u32) {
    match r {
        Request::Rejected(rej) => {
            let mut wire = BytesMut::new();
            crate::protocol::Reply::from(*rej).encode(&mut wire);
            assert!(
                REJECTION_REPLIES.contains(&&wire[..]),
                "{rej:?} answers {wire:?}"
            );
        }
        Request::Put(put) => assert!(put.body.len() <= max_job_size as usize),
        Request::Command(Command::ReserveWithTimeout(crate::protocol::Timeout::Secs(secs))) => {
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
