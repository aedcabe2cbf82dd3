//! Checks of the codec's invariants on any input, shared by the property tests
//! and the fuzz target (`protocol-tests/fuzz/`, which enables the `fuzzing` feature).
//! Every function panics on a violation.

use super::*;
use crate::protocol::command::Command;
use crate::protocol::ext::{Extension, MAX_BATCH, MAX_KEY_LEN};

/// Decode `input` fed in the given chunk sizes (cycled). After every call that asks
/// for more input, the buffer must hold no more than what it is reading needs: less than a
/// line window between commands, at most a CR while discarding a line, at most the
/// first byte of the CRLF while reading a body (whose own buffer never grows past
/// the declared size), nothing while skipping one. A call that returns a request
/// must have consumed input.
pub fn decode_chunked(input: &[u8], chunks: &[usize], max_job_size: u32) -> Vec<Request> {
    decode_frames(input, chunks, max_job_size, Grammar::Standard)
        .into_iter()
        .map(|frame| match frame {
            Frame::Standard(req) => req,
            Frame::Extension(ext) => panic!("the standard grammar yielded {ext:?}"),
        })
        .collect()
}

/// [`decode_chunked`] in `grammar`; under the extended grammar a line that starts with
/// a list command's verb may take [`LIST_LINE_MAX`].
pub fn decode_frames(
    input: &[u8],
    chunks: &[usize],
    max_job_size: u32,
    grammar: Grammar,
) -> Vec<Frame> {
    let mut codec = Framer::new(max_job_size, grammar);
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
            match codec.decode(&mut buf) {
                Some(r) => out.push(r),
                None => break,
            }
            assert!(buf.len() < before, "a request without consuming input");
        }
        let held = buf.len();
        match &codec.reading {
            Reading::Line => {
                let limit = codec.line_limit(&buf);
                assert!(held < limit, "line window of {limit} exceeded: {held}")
            }
            Reading::DiscardLine => assert!(held <= 1, "kept {held} bytes of a long line"),
            Reading::Body { put, body } => {
                assert!(held <= 1, "kept {held} bytes of a body in the read buffer");
                let want = put.bytes as usize;
                assert!(
                    body.capacity() <= want,
                    "body of {want} claims {}",
                    body.capacity()
                );
            }
            Reading::Skip { .. } => assert_eq!(held, 0, "kept bytes of a skipped body"),
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

/// [`check_request`] for a frame: an extension is within the document's bounds too.
pub fn check_frame(f: &Frame, max_job_size: u32) {
    let ext = match f {
        Frame::Standard(r) => return check_request(r, max_job_size),
        Frame::Extension(ext) => &**ext,
    };
    match ext {
        Extension::Put(put) => {
            assert!(put.body.len() <= max_job_size as usize);
            if let Some(k) = &put.key {
                assert!(k.key.as_str().len() <= MAX_KEY_LEN);
            }
        }
        Extension::ReserveBatch { max, timeout } => {
            assert!((1..=MAX_BATCH).contains(&usize::from(*max)));
            assert!(timeout.as_millis() <= i32::MAX as u64 * 1000);
        }
        Extension::Batch { ids, .. } => assert!((1..=MAX_BATCH).contains(&ids.len())),
        Extension::FindKey(k)
        | Extension::PeekKey(k)
        | Extension::DeleteKey(k)
        | Extension::KickKey(k)
        | Extension::BuryKey { key: k, .. }
        | Extension::RetimeKey { key: k, .. } => assert!(k.as_str().len() <= MAX_KEY_LEN),
        _ => {}
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

/// [`check_stream`] in `grammar`, for frames.
pub fn check_stream_in(
    input: &[u8],
    chunks: &[usize],
    max_job_size: u32,
    grammar: Grammar,
) -> Vec<Frame> {
    let whole = decode_frames(input, &[input.len().max(1)], max_job_size, grammar);
    let split = decode_frames(input, chunks, max_job_size, grammar);
    let bytewise = decode_frames(input, &[1], max_job_size, grammar);
    assert_eq!(whole, split, "split reads decode differently");
    assert_eq!(whole, bytewise, "byte-by-byte reads decode differently");
    for f in &whole {
        check_frame(f, max_job_size);
    }
    whole
}
