//! The relay greeting: the one line a redstalk standby (Redis leader mode) sends before
//! it relays a client, and the one line it gets back. Pure: bytes in, values out.
//!
//! A standby that relays a client connects to the leader's advertised address and first
//! sends `redstalk-relay/1 hello <instance>\r\n`. Whoever answers says what it is:
//! `redstalk-relay/1 leader <instance>\r\n` (the rest of the connection is the client's,
//! byte for byte), or `redstalk-relay/1 standby <instance>\r\n` (and closes: a standby
//! never relays a relayed connection, so nothing can chain or loop). An instance that
//! reads its own id there knows the address reaches itself, however it is spelt.
//! A check of an address (is a leader there, is it this instance) greets with `check`
//! instead of `hello`: it is answered the same way and then closed, and counts as no
//! connection in the leader's `stats` (a beanstalkd client would never see one there).
//!
//! Invariants: the greeting is recognised only as the very first bytes of a connection,
//! and only in leader mode; its prefix is no command of the beanstalkd protocol, so a
//! beanstalk client never sends it, and bytes that merely start like it (or a line
//! longer than [`MAX_LINE`]) are the client's, answered by the protocol as beanstalkd
//! answers them. The client of a relayed connection never sees either line.

use bytes::{BufMut, BytesMut};

/// What every line of the exchange starts with (version 1 of the exchange).
const PREFIX: &[u8] = b"redstalk-relay/1 ";
/// The longest greeting or answer line, CRLF included.
pub const MAX_LINE: usize = 96;

/// What the first bytes of a connection are.
#[derive(Debug, PartialEq, Eq)]
pub enum First<'a> {
    /// Too few bytes to tell (they are a beginning of a greeting).
    Undecided,
    /// A client's bytes.
    Client,
    /// Another instance's greeting, `len` bytes long (CRLF included), from instance
    /// `from`: a client relayed from there follows, unless it is only a `check`.
    Greeting {
        from: &'a str,
        len: usize,
        check: bool,
    },
}

/// Tell whether `buf`, the first bytes of a connection, starts with a greeting.
pub fn first_line(buf: &[u8]) -> First<'_> {
    let head = &buf[..buf.len().min(PREFIX.len())];
    if head != &PREFIX[..head.len()] {
        return First::Client;
    }
    let window = &buf[..buf.len().min(MAX_LINE)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n") else {
        return if buf.len() >= MAX_LINE {
            First::Client
        } else {
            First::Undecided
        };
    };
    match parse(&buf[..end]) {
        Some(("hello", from)) => First::Greeting {
            from,
            len: end + 2,
            check: false,
        },
        Some(("check", from)) => First::Greeting {
            from,
            len: end + 2,
            check: true,
        },
        _ => First::Client,
    }
}

/// The greeting instance `me` sends before relaying a client (`check`: only to learn
/// who answers).
pub fn greeting(me: &str, check: bool) -> Vec<u8> {
    line(if check { "check" } else { "hello" }, me)
}

/// What the instance that was greeted says it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// It leads: the connection is served from here on.
    Leader(String),
    /// It does not lead, and closes the connection.
    Standby(String),
}

/// Write the answer of instance `me`, leading or not.
pub fn answer(out: &mut BytesMut, leading: bool, me: &str) {
    out.put_slice(&line(if leading { "leader" } else { "standby" }, me));
}

/// Read an answer line (without its CRLF); `None` when it is not one.
pub fn parse_answer(line: &[u8]) -> Option<Answer> {
    match parse(line)? {
        ("leader", id) => Some(Answer::Leader(id.to_string())),
        ("standby", id) => Some(Answer::Standby(id.to_string())),
        _ => None,
    }
}

fn line(word: &str, id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX.len() + word.len() + id.len() + 3);
    out.extend_from_slice(PREFIX);
    out.extend_from_slice(word.as_bytes());
    out.push(b' ');
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

/// `PREFIX <word> <id>` -> (word, id); an id is 1 to 32 ASCII letters and digits.
fn parse(line: &[u8]) -> Option<(&str, &str)> {
    let rest = std::str::from_utf8(line.strip_prefix(PREFIX)?).ok()?;
    let (word, id) = rest.split_once(' ')?;
    let valid = (1..=32).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric());
    valid.then_some((word, id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_greeting_is_recognised_only_whole_and_well_formed() {
        let g = greeting("0123abcd", false);
        assert_eq!(
            first_line(&g),
            First::Greeting {
                from: "0123abcd",
                len: g.len(),
                check: false,
            }
        );
        let c = greeting("0123abcd", true);
        assert!(matches!(
            first_line(&c),
            First::Greeting { check: true, .. }
        ));
        let mut more = g.clone();
        more.extend_from_slice(b"put 0 0 1 1\r\n");
        assert!(matches!(first_line(&more), First::Greeting { len, .. } if len == g.len()));
        for cut in 0..g.len() {
            assert_eq!(first_line(&g[..cut]), First::Undecided, "{cut} bytes");
        }
        for client in [
            &b"put 0 0 60 1\r\nx\r\n"[..],
            b"reserve\r\n",
            b"redstalk-relay/2 hello ab\r\n",
            b"redstalk-relay/1 hello \r\n",
            b"redstalk-relay/1 hello a-b\r\n",
            b"redstalk-relay/1 leader ab\r\n",
        ] {
            assert_eq!(
                first_line(client),
                First::Client,
                "{:?}",
                String::from_utf8_lossy(client)
            );
        }
        // A bare LF does not end the line (as in the protocol): still undecided.
        assert_eq!(first_line(b"redstalk-relay/1 hello ab\n"), First::Undecided);
        // A long line that starts like a greeting is the client's.
        let mut long = PREFIX.to_vec();
        long.resize(MAX_LINE, b'a');
        assert_eq!(first_line(&long), First::Client);
    }

    #[test]
    fn answers_round_trip() {
        let mut out = BytesMut::new();
        answer(&mut out, true, "ab12");
        assert_eq!(&out[..], b"redstalk-relay/1 leader ab12\r\n");
        assert_eq!(
            parse_answer(&out[..out.len() - 2]),
            Some(Answer::Leader("ab12".into()))
        );
        out.clear();
        answer(&mut out, false, "cd");
        assert_eq!(
            parse_answer(&out[..out.len() - 2]),
            Some(Answer::Standby("cd".into()))
        );
        assert_eq!(parse_answer(b"UNKNOWN_COMMAND"), None);
        assert_eq!(parse_answer(b"redstalk-relay/1 hello ab"), None);
    }
}
