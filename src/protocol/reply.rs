//! Replies and their exact wire form.
//!
//! Invariant: every reply ends in CRLF; in `RESERVED`/`FOUND` the byte count excludes
//! the body's own CRLF, and in `OK` it excludes the final CRLF after the YAML.

use bytes::{BufMut, Bytes, BytesMut};

use super::command::{Rejection, TubeName};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Inserted(u64),
    Buried,
    ExpectedCrlf,
    JobTooBig,
    Draining,
    Using(TubeName),
    Reserved {
        id: u64,
        body: Bytes,
    },
    DeadlineSoon,
    TimedOut,
    Deleted,
    Released,
    Touched,
    Watching(usize),
    NotIgnored,
    Found {
        id: u64,
        body: Bytes,
    },
    Kicked(u32),
    KickedJob,
    /// `OK <n>` with YAML data (without the final CRLF).
    Ok(Bytes),
    Paused,
    NotFound,
    OutOfMemory,
    InternalError,
    BadFormat,
    UnknownCommand,
}

impl From<Rejection> for Reply {
    fn from(r: Rejection) -> Reply {
        match r {
            Rejection::UnknownCommand => Reply::UnknownCommand,
            Rejection::BadFormat { .. } => Reply::BadFormat,
            Rejection::JobTooBig => Reply::JobTooBig,
            Rejection::ExpectedCrlf => Reply::ExpectedCrlf,
            Rejection::OutOfMemory => Reply::OutOfMemory,
        }
    }
}

impl Reply {
    /// Append the wire form to `dst`.
    pub fn encode(&self, dst: &mut BytesMut) {
        match self {
            Reply::Inserted(id) => line_num(dst, b"INSERTED ", *id),
            Reply::Buried => dst.put_slice(b"BURIED\r\n"),
            Reply::ExpectedCrlf => dst.put_slice(b"EXPECTED_CRLF\r\n"),
            Reply::JobTooBig => dst.put_slice(b"JOB_TOO_BIG\r\n"),
            Reply::Draining => dst.put_slice(b"DRAINING\r\n"),
            Reply::Using(t) => {
                dst.put_slice(b"USING ");
                dst.put_slice(t.as_str().as_bytes());
                dst.put_slice(b"\r\n");
            }
            Reply::Reserved { id, body } => job(dst, b"RESERVED ", *id, body),
            Reply::DeadlineSoon => dst.put_slice(b"DEADLINE_SOON\r\n"),
            Reply::TimedOut => dst.put_slice(b"TIMED_OUT\r\n"),
            Reply::Deleted => dst.put_slice(b"DELETED\r\n"),
            Reply::Released => dst.put_slice(b"RELEASED\r\n"),
            Reply::Touched => dst.put_slice(b"TOUCHED\r\n"),
            Reply::Watching(n) => line_num(dst, b"WATCHING ", *n as u64),
            Reply::NotIgnored => dst.put_slice(b"NOT_IGNORED\r\n"),
            Reply::Found { id, body } => job(dst, b"FOUND ", *id, body),
            Reply::Kicked(n) => line_num(dst, b"KICKED ", u64::from(*n)),
            Reply::KickedJob => dst.put_slice(b"KICKED\r\n"),
            Reply::Ok(data) => {
                line_num(dst, b"OK ", data.len() as u64);
                dst.put_slice(data);
                dst.put_slice(b"\r\n");
            }
            Reply::Paused => dst.put_slice(b"PAUSED\r\n"),
            Reply::NotFound => dst.put_slice(b"NOT_FOUND\r\n"),
            Reply::OutOfMemory => dst.put_slice(b"OUT_OF_MEMORY\r\n"),
            Reply::InternalError => dst.put_slice(b"INTERNAL_ERROR\r\n"),
            Reply::BadFormat => dst.put_slice(b"BAD_FORMAT\r\n"),
            Reply::UnknownCommand => dst.put_slice(b"UNKNOWN_COMMAND\r\n"),
        }
    }
}

fn line_num(dst: &mut BytesMut, word: &[u8], n: u64) {
    let mut buf = itoa::Buffer::new();
    dst.put_slice(word);
    dst.put_slice(buf.format(n).as_bytes());
    dst.put_slice(b"\r\n");
}

fn job(dst: &mut BytesMut, word: &[u8], id: u64, body: &[u8]) {
    let mut buf = itoa::Buffer::new();
    dst.reserve(word.len() + 44 + body.len());
    dst.put_slice(word);
    dst.put_slice(buf.format(id).as_bytes());
    dst.put_u8(b' ');
    dst.put_slice(buf.format(body.len()).as_bytes());
    dst.put_slice(b"\r\n");
    dst.put_slice(body);
    dst.put_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(r: Reply) -> Vec<u8> {
        let mut b = BytesMut::new();
        r.encode(&mut b);
        b.to_vec()
    }

    #[test]
    fn counts_exclude_trailing_crlf() {
        assert_eq!(
            wire(Reply::Reserved {
                id: 7,
                body: Bytes::from_static(b"a\r\nb")
            }),
            b"RESERVED 7 4\r\na\r\nb\r\n"
        );
        assert_eq!(
            wire(Reply::Ok(Bytes::from_static(b"---\n- default\n"))),
            b"OK 14\r\n---\n- default\n\r\n"
        );
        assert_eq!(wire(Reply::Kicked(3)), b"KICKED 3\r\n");
        assert_eq!(wire(Reply::KickedJob), b"KICKED\r\n");
    }
}
