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
//! With an instance secret (`--relay-secret-file`, docs/SECURITY.md), the exchange is
//! version 2 and proves the standby: `redstalk-relay/2 hello <instance>` is answered
//! `redstalk-relay/2 nonce <hex>` (fresh random bytes), the standby sends
//! `redstalk-relay/2 proof <hmac> <identity>`, the HMAC-SHA256 under the secret of the
//! nonce, its instance and the identity of the client it relays ([`Relayed`]: open, or a
//! role and a name), and only then does the leader answer `leader` and serve the
//! client under that identity's role. A leader with a secret answers nothing to a
//! version 1 greeting or a wrong proof: it closes.
//!
//! Invariants: the greeting is recognised only as the very first bytes of a connection,
//! and only in leader mode; its prefix is no command of the beanstalkd protocol, so a
//! beanstalk client never sends it, and bytes that merely start like it (or a line
//! longer than [`MAX_LINE`]) are the client's, answered by the protocol as beanstalkd
//! answers them. The client of a relayed connection never sees any of these lines. A
//! proof is compared in constant time, and neither it nor the secret is logged.

use bytes::{BufMut, BytesMut};
use hmac::{KeyInit, Mac};
use subtle::ConstantTimeEq;

use crate::access::Secret;

/// What every line of the exchange starts with (version 1 of the exchange).
const PREFIX: &[u8] = b"redstalk-relay/1 ";
/// Version 2: the same lines, and the nonce and proof between them.
const PREFIX_2: &[u8] = b"redstalk-relay/2 ";
/// The longest proof line, CRLF included (an HMAC, a role, a name in hex).
pub const MAX_PROOF_LINE: usize = 640;
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
    /// `from`: a client relayed from there follows, unless it is only a `check`;
    /// `proven`: of version 2 (a proof follows the leader's nonce).
    Greeting {
        from: &'a str,
        len: usize,
        check: bool,
        proven: bool,
    },
}

/// Tell whether `buf`, the first bytes of a connection, starts with a greeting.
pub fn first_line(buf: &[u8]) -> First<'_> {
    let head = &buf[..buf.len().min(PREFIX.len())];
    let proven = head == &PREFIX_2[..head.len()];
    if head != &PREFIX[..head.len()] && !proven {
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
        Some((_, "hello", from)) => First::Greeting {
            from,
            len: end + 2,
            check: false,
            proven,
        },
        Some((_, "check", from)) => First::Greeting {
            from,
            len: end + 2,
            check: true,
            proven,
        },
        _ => First::Client,
    }
}

/// The greeting instance `me` sends before relaying a client (`check`: only to learn
/// who answers; `proven`: version 2, a proof to follow).
pub fn greeting(me: &str, check: bool, proven: bool) -> Vec<u8> {
    line(proven, if check { "check" } else { "hello" }, me)
}

/// What the instance that was greeted says it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HelloReply {
    /// It leads: the connection is served from here on.
    Leader(String),
    /// It does not lead, and closes the connection.
    Standby(String),
    /// A nonce (version 2): the proof is owed before it says more.
    Nonce(String),
}

/// Write the answer of instance `me`, leading or not, in the greeting's version.
pub fn answer(out: &mut BytesMut, proven: bool, leading: bool, me: &str) {
    out.put_slice(&line(
        proven,
        if leading { "leader" } else { "standby" },
        me,
    ));
}

/// Write a leader's nonce (version 2).
pub fn nonce(out: &mut BytesMut, nonce: &str) {
    out.put_slice(&line(true, "nonce", nonce));
}

/// Read an answer line (without its CRLF); `None` when it is not one.
pub fn parse_answer(line: &[u8]) -> Option<HelloReply> {
    match parse(line)? {
        (_, "leader", id) => Some(HelloReply::Leader(id.to_string())),
        (_, "standby", id) => Some(HelloReply::Standby(id.to_string())),
        (true, "nonce", n) => Some(HelloReply::Nonce(n.to_string())),
        _ => None,
    }
}

fn line(proven: bool, word: &str, id: &str) -> Vec<u8> {
    let prefix = if proven { PREFIX_2 } else { PREFIX };
    let mut out = Vec::with_capacity(prefix.len() + word.len() + id.len() + 3);
    out.extend_from_slice(prefix);
    out.extend_from_slice(word.as_bytes());
    out.push(b' ');
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(b"\r\n");
    out
}

/// `PREFIX <word> <id>` -> (version 2, word, id); an id is 1 to 32 ASCII letters and
/// digits.
fn parse(line: &[u8]) -> Option<(bool, &str, &str)> {
    let (proven, rest) = match line.strip_prefix(PREFIX) {
        Some(rest) => (false, rest),
        None => (true, line.strip_prefix(PREFIX_2)?),
    };
    let rest = std::str::from_utf8(rest).ok()?;
    let (word, id) = rest.split_once(' ')?;
    let valid = (1..=32).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric());
    valid.then_some((proven, word, id))
}

/// Who the client of a relayed connection is, as the standby that admitted it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Relayed {
    /// A client of an open listener: it may do everything.
    Open,
    /// An authenticated client: its role (the leader takes the role of that name from
    /// its own roles file), its identity's name (for the logs), and whether its
    /// listener takes `auth` (a second `auth` re-authenticates on the leader).
    As {
        role: String,
        name: String,
        takes_tokens: bool,
    },
}

impl Relayed {
    /// `-`, or `<role> <name in hex> <t|->`: one word each, whatever the name holds.
    fn encode(&self) -> String {
        match self {
            Relayed::Open => "-".to_string(),
            Relayed::As {
                role,
                name,
                takes_tokens,
            } => {
                let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
                let t = if *takes_tokens { "t" } else { "-" };
                format!("{role} {hex} {t}")
            }
        }
    }

    fn decode(s: &str) -> Option<Relayed> {
        if s == "-" {
            return Some(Relayed::Open);
        }
        let mut words = s.split(' ');
        let (role, hex, t) = (words.next()?, words.next()?, words.next()?);
        if words.next().is_some() || role.is_empty() || hex.len() % 2 != 0 {
            return None;
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        Some(Relayed::As {
            role: role.to_string(),
            name: String::from_utf8(bytes).ok()?,
            takes_tokens: t == "t",
        })
    }
}

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The proof of instance `from`, relaying `who`, in answer to `nonce`.
fn mac(secret: &Secret, nonce: &str, from: &str, who: &str) -> Option<String> {
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(secret.expose().as_bytes()).ok()?;
    for part in ["redstalk-relay/2", nonce, from, who] {
        m.update(part.as_bytes());
        m.update(b"\n");
    }
    Some(
        m.finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    )
}

/// The proof line instance `me` sends after the leader's `nonce`, relaying `who`.
pub fn proof(secret: &Secret, nonce: &str, me: &str, who: &Relayed) -> Option<Vec<u8>> {
    let who = who.encode();
    let mac = mac(secret, nonce, me, &who)?;
    let mut out = PREFIX_2.to_vec();
    out.extend_from_slice(format!("proof {mac} {who}\r\n").as_bytes());
    Some(out)
}

/// Check a proof line (without its CRLF) from instance `from` against `nonce`: who
/// the relayed client is, when the proof holds.
pub fn check_proof(secret: &Secret, nonce: &str, from: &str, line: &[u8]) -> Option<Relayed> {
    let rest = std::str::from_utf8(line.strip_prefix(PREFIX_2)?).ok()?;
    let rest = rest.strip_prefix("proof ")?;
    let (given, who) = rest.split_once(' ')?;
    let want = mac(secret, nonce, from, who)?;
    if !bool::from(want.as_bytes().ct_eq(given.as_bytes())) {
        return None;
    }
    Relayed::decode(who)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_greeting_is_recognised_only_whole_and_well_formed() {
        let g = greeting("0123abcd", false, false);
        assert_eq!(
            first_line(&g),
            First::Greeting {
                from: "0123abcd",
                len: g.len(),
                check: false,
                proven: false,
            }
        );
        let c = greeting("0123abcd", true, false);
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
            b"redstalk-relay/3 hello ab\r\n",
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
        answer(&mut out, false, true, "ab12");
        assert_eq!(&out[..], b"redstalk-relay/1 leader ab12\r\n");
        assert_eq!(
            parse_answer(&out[..out.len() - 2]),
            Some(HelloReply::Leader("ab12".into()))
        );
        out.clear();
        answer(&mut out, true, false, "cd");
        assert_eq!(
            parse_answer(&out[..out.len() - 2]),
            Some(HelloReply::Standby("cd".into()))
        );
        assert_eq!(parse_answer(b"UNKNOWN_COMMAND"), None);
        assert_eq!(
            parse_answer(b"redstalk-relay/1 nonce ab"),
            None,
            "v1 has none"
        );
        assert_eq!(parse_answer(b"redstalk-relay/1 hello ab"), None);
    }

    #[test]
    fn a_proof_holds_only_for_its_nonce_instance_identity_and_secret() {
        let secret = Secret::new("instance-secret-0123456789");
        let g = greeting("ab12", false, true);
        assert!(matches!(
            first_line(&g),
            First::Greeting { proven: true, .. }
        ));
        let who = Relayed::As {
            role: "producer".into(),
            name: "billing app".into(),
            takes_tokens: true,
        };
        let p = proof(&secret, "n0nce", "ab12", &who).unwrap();
        let line = &p[..p.len() - 2];
        assert_eq!(
            check_proof(&secret, "n0nce", "ab12", line),
            Some(who.clone())
        );
        assert_eq!(
            check_proof(&secret, "other", "ab12", line),
            None,
            "a replayed proof"
        );
        assert_eq!(
            check_proof(&secret, "n0nce", "cd34", line),
            None,
            "another instance"
        );
        let other = Secret::new("another-secret-0123456789");
        assert_eq!(check_proof(&other, "n0nce", "ab12", line), None);
        let forged = String::from_utf8_lossy(line).replace("producer", "admin");
        assert_eq!(
            check_proof(&secret, "n0nce", "ab12", forged.as_bytes()),
            None
        );
        let open = proof(&secret, "n", "ab12", &Relayed::Open).unwrap();
        assert_eq!(
            check_proof(&secret, "n", "ab12", &open[..open.len() - 2]),
            Some(Relayed::Open)
        );
        assert!(!String::from_utf8_lossy(&p).contains("instance-secret"));
    }
}
