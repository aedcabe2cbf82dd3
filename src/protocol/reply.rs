//! Replies and their exact wire form.
//!
//! Invariant: every reply ends in CRLF; in `RESERVED`/`FOUND` the byte count excludes
//! the body's own CRLF, and in `OK` it excludes the final CRLF after the YAML.

use bytes::{BufMut, Bytes, BytesMut};

use super::command::{Rejection, TubeName};
use super::ext::{BatchKind, KeyState};

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
    /// Extensions (docs/EXTENSIONS.md), from here to `Flushed`: only ever the answer to
    /// an extension. `INSERTED <id> <STATE>`: a keyed put found its key's job (dedupe:
    /// unchanged; replace: replaced, now READY or DELAYED).
    InsertedExisting {
        id: u64,
        state: KeyState,
    },
    /// `CONFLICT <id> <STATE>`: the key's job is in a state the command may not change;
    /// nothing changed.
    Conflict {
        id: u64,
        state: KeyState,
    },
    /// `FOUND_KEY <id> <STATE>`: `find-key`.
    FoundKey {
        id: u64,
        state: KeyState,
    },
    /// `RESERVED_BATCH <k>`, then `k` replies `RESERVED <id> <bytes>` with their bodies.
    ReservedBatch(Vec<(u64, Bytes)>),
    /// `<VERB>_BATCH <done> <missing>`, then the ids not found, each after a space.
    Batch {
        kind: BatchKind,
        done: u32,
        missing: Vec<u64>,
    },
    /// `RETIMED`: `retime-key`.
    Retimed,
    /// `FLUSHED <n>`: how many jobs a flush deleted.
    Flushed(u64),
    /// `OK <n>` with YAML data (without the final CRLF).
    Ok(Bytes),
    Paused,
    NotFound,
    OutOfMemory,
    InternalError,
    BadFormat,
    UnknownCommand,
    /// Extensions (docs/SECURITY.md), never sent on an open listener: `auth` took the
    /// token...
    Authenticated,
    /// ...or did not (the connection is then closed)...
    Unauthorized,
    /// ...and a command the connection's role may not run.
    Forbidden,
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
            Reply::InsertedExisting { id, state } => id_state(dst, b"INSERTED ", *id, *state),
            Reply::Conflict { id, state } => id_state(dst, b"CONFLICT ", *id, *state),
            Reply::FoundKey { id, state } => id_state(dst, b"FOUND_KEY ", *id, *state),
            Reply::ReservedBatch(jobs) => {
                line_num(dst, b"RESERVED_BATCH ", jobs.len() as u64);
                for (id, body) in jobs {
                    job(dst, b"RESERVED ", *id, body);
                }
            }
            Reply::Batch {
                kind,
                done,
                missing,
            } => {
                let mut buf = itoa::Buffer::new();
                dst.put_slice(batch_word(*kind));
                dst.put_u8(b' ');
                dst.put_slice(buf.format(*done).as_bytes());
                dst.put_u8(b' ');
                dst.put_slice(buf.format(missing.len()).as_bytes());
                for id in missing {
                    dst.put_u8(b' ');
                    dst.put_slice(buf.format(*id).as_bytes());
                }
                dst.put_slice(b"\r\n");
            }
            Reply::Retimed => dst.put_slice(b"RETIMED\r\n"),
            Reply::Flushed(n) => line_num(dst, b"FLUSHED ", *n),
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
            Reply::Authenticated => dst.put_slice(b"AUTHENTICATED\r\n"),
            Reply::Unauthorized => dst.put_slice(b"UNAUTHORIZED\r\n"),
            Reply::Forbidden => dst.put_slice(b"FORBIDDEN\r\n"),
        }
    }
}

fn line_num(dst: &mut BytesMut, word: &[u8], n: u64) {
    let mut buf = itoa::Buffer::new();
    dst.put_slice(word);
    dst.put_slice(buf.format(n).as_bytes());
    dst.put_slice(b"\r\n");
}

fn id_state(dst: &mut BytesMut, word: &[u8], id: u64, state: KeyState) {
    let mut buf = itoa::Buffer::new();
    dst.put_slice(word);
    dst.put_slice(buf.format(id).as_bytes());
    dst.put_u8(b' ');
    dst.put_slice(state.word().as_bytes());
    dst.put_slice(b"\r\n");
}

fn batch_word(kind: BatchKind) -> &'static [u8] {
    match kind {
        BatchKind::Delete => b"DELETED_BATCH",
        BatchKind::Release => b"RELEASED_BATCH",
        BatchKind::Touch => b"TOUCHED_BATCH",
        BatchKind::Bury => b"BURIED_BATCH",
    }
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

    #[test]
    fn extension_replies_byte_for_byte() {
        let cases: Vec<(Reply, &[u8])> = vec![
            (
                Reply::InsertedExisting {
                    id: 7,
                    state: KeyState::Ready,
                },
                b"INSERTED 7 READY\r\n",
            ),
            (
                Reply::InsertedExisting {
                    id: u64::MAX,
                    state: KeyState::Deleted,
                },
                b"INSERTED 18446744073709551615 DELETED\r\n",
            ),
            (
                Reply::Conflict {
                    id: 3,
                    state: KeyState::Reserved,
                },
                b"CONFLICT 3 RESERVED\r\n",
            ),
            (
                Reply::Conflict {
                    id: 3,
                    state: KeyState::Buried,
                },
                b"CONFLICT 3 BURIED\r\n",
            ),
            (
                Reply::FoundKey {
                    id: 12,
                    state: KeyState::Delayed,
                },
                b"FOUND_KEY 12 DELAYED\r\n",
            ),
            (Reply::ReservedBatch(Vec::new()), b"RESERVED_BATCH 0\r\n"),
            (
                Reply::ReservedBatch(vec![
                    (1, Bytes::from_static(b"hello")),
                    (2, Bytes::from_static(b"")),
                    (30, Bytes::from_static(b"a\r\nb")),
                ]),
                b"RESERVED_BATCH 3\r\nRESERVED 1 5\r\nhello\r\nRESERVED 2 0\r\n\r\nRESERVED 30 4\r\na\r\nb\r\n",
            ),
            (
                Reply::Batch {
                    kind: BatchKind::Delete,
                    done: 3,
                    missing: Vec::new(),
                },
                b"DELETED_BATCH 3 0\r\n",
            ),
            (
                Reply::Batch {
                    kind: BatchKind::Release,
                    done: 1,
                    missing: vec![9, 4],
                },
                b"RELEASED_BATCH 1 2 9 4\r\n",
            ),
            (
                Reply::Batch {
                    kind: BatchKind::Touch,
                    done: 0,
                    missing: vec![5],
                },
                b"TOUCHED_BATCH 0 1 5\r\n",
            ),
            (
                Reply::Batch {
                    kind: BatchKind::Bury,
                    done: 2,
                    missing: Vec::new(),
                },
                b"BURIED_BATCH 2 0\r\n",
            ),
            (Reply::Retimed, b"RETIMED\r\n"),
            (Reply::Flushed(0), b"FLUSHED 0\r\n"),
            (Reply::Flushed(1_000_000), b"FLUSHED 1000000\r\n"),
        ];
        for (reply, bytes) in cases {
            assert_eq!(
                wire(reply.clone()),
                bytes,
                "{reply:?} as {:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
