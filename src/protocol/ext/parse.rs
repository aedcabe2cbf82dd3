//! The extension grammar (docs/EXTENSIONS.md, "Grammar"). It is offered only a line
//! the standard grammar rejected, or a `put` whose numbers parsed but which has text
//! after `<bytes>`; whatever it does not claim keeps the standard grammar's answer.
//!
//! It claims:
//! - a line that starts with an extension verb and its space (`reserve-batch `,
//!   `delete-key `, ...), or is exactly `list-extensions`: a malformed one is
//!   `BAD_FORMAT`, not counted;
//! - `put` whose delay or TTR is in milliseconds, or whose text after `<bytes>` looks
//!   like tags (`idp:...`): its body is always framed, and malformed tags are answered
//!   `BAD_FORMAT` after the body is discarded (a body must never run as a command);
//! - `release` and `pause-tube` whose delay is in milliseconds, and nothing else;
//!
//! and of these only what belongs to a family the grammar serves ([`super::Grammar`]):
//! every other line keeps the standard grammar's answer, as with extensions off.
//!
//! Numbers are read as the reference reads them (spaces before, digits only, overflow
//! rejected, nothing after the last); a duration is a number with an optional `ms`.

use nom::bytes::complete::{tag, take_while1};
use nom::character::complete::digit1;
use nom::combinator::opt;
use nom::{IResult, Parser};

use super::{
    BatchOp, Extension, Families, Family, FlushStates, Key, KeyMode, MAX_BATCH, Millis, PutKey,
};
use crate::protocol::command::{Counter, Rejection, TubeName, is_tube_name_byte};
use crate::protocol::parse::{BAD, Line, decimal, last, number, spaces};

/// The longest `reserve-batch` timeout: the reference's bound for
/// `reserve-with-timeout` (INT_MAX seconds).
const MAX_TIMEOUT: Millis = Millis(i32::MAX as u64 * 1000);

/// The header of a `put` in the extended grammar, as the codec needs it to frame the
/// body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExtendedPutHeader {
    pub pri: u32,
    pub delay: Millis,
    pub ttr: Millis,
    pub bytes: u32,
    pub tags: PutTags,
}

/// The tags after a put's `<bytes>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutTags {
    /// Well-formed: no key, or one key tag.
    Valid(Option<PutKey>),
    /// Not a tag this server reads (tuber's `grp:`, `aft:`, `con:` included), a second
    /// key tag, or a bad key or window: the body is discarded, then `BAD_FORMAT`
    /// (counted as a put, as the reference counts a put with trailing text).
    Malformed,
}

/// An extension verb: the line starts with this (its space included).
#[derive(Clone, Copy)]
enum Verb {
    Put,
    Release,
    PauseTube,
    ReserveBatch,
    DeleteBatch,
    ReleaseBatch,
    TouchBatch,
    BuryBatch,
    FindKey,
    PeekKey,
    DeleteKey,
    KickKey,
    BuryKey,
    RetimeKey,
    FlushTube,
    FlushBuried,
}

const VERBS: [(&[u8], Verb); 16] = [
    (b"put ", Verb::Put),
    (b"release ", Verb::Release),
    // No space: the reference's own prefix (`pause-tubedefault 1` pauses `default`).
    (b"pause-tube", Verb::PauseTube),
    (b"reserve-batch ", Verb::ReserveBatch),
    (b"delete-batch ", Verb::DeleteBatch),
    (b"release-batch ", Verb::ReleaseBatch),
    (b"touch-batch ", Verb::TouchBatch),
    (b"bury-batch ", Verb::BuryBatch),
    (b"find-key ", Verb::FindKey),
    (b"peek-key ", Verb::PeekKey),
    (b"delete-key ", Verb::DeleteKey),
    (b"kick-key ", Verb::KickKey),
    (b"bury-key ", Verb::BuryKey),
    (b"retime-key ", Verb::RetimeKey),
    (b"flush-tube ", Verb::FlushTube),
    (b"flush-buried ", Verb::FlushBuried),
];

/// The verbs whose line may be longer than 224 bytes (up to
/// [`super::LIST_LINE_MAX`]): they carry a list of ids.
pub const LIST_VERBS: [&[u8]; 4] = [
    b"delete-batch ",
    b"release-batch ",
    b"touch-batch ",
    b"bury-batch ",
];

/// The standard grammar's answer for `line`, or the extension it is if its families are
/// `served`.
pub(in crate::protocol) fn extend(
    line: &[u8],
    standard: Result<Line, Rejection>,
    served: Families,
) -> Result<Line, Rejection> {
    let offered = match &standard {
        Ok(Line::Put(header)) => header.trailing_garbage,
        Ok(_) => false,
        Err(_) => true,
    };
    // A NUL makes any line BAD_FORMAT in the reference, extensions or not.
    if !offered || line.contains(&0) {
        return standard;
    }
    match extension(line) {
        Some((needs, ext)) if served.covers(needs) => ext,
        _ => standard,
    }
}

/// `line` as an extension, if it is one (well-formed or not), with the families it
/// needs (none: `list-extensions`).
fn extension(line: &[u8]) -> Option<(Families, Result<Line, Rejection>)> {
    if line == b"list-extensions" {
        return Some((
            Families::NONE,
            Ok(Line::Extension(Box::new(Extension::ListExtensions))),
        ));
    }
    let (verb, args) = VERBS
        .iter()
        .find_map(|(prefix, verb)| line.strip_prefix(*prefix).map(|args| (*verb, args)))?;
    let ms = Families::of(Family::Milliseconds);
    let ext = match verb {
        Verb::Put => {
            return put(args).map(|(needs, h)| (needs, Ok(Line::ExtendedPut(Box::new(h)))));
        }
        Verb::Release => return release(args).map(|e| (ms, Ok(Line::Extension(Box::new(e))))),
        Verb::PauseTube => {
            return pause_tube(args).map(|e| (ms, e.map(|e| Line::Extension(Box::new(e)))));
        }
        Verb::ReserveBatch => reserve_batch(args),
        Verb::DeleteBatch => ids(args).map(|ids| Extension::Batch {
            op: BatchOp::Delete,
            ids,
        }),
        Verb::TouchBatch => ids(args).map(|ids| Extension::Batch {
            op: BatchOp::Touch,
            ids,
        }),
        Verb::ReleaseBatch => release_batch(args),
        Verb::BuryBatch => bury_batch(args),
        Verb::FindKey => whole_key(args).map(Extension::FindKey),
        Verb::PeekKey => whole_key(args).map(Extension::PeekKey),
        Verb::DeleteKey => whole_key(args).map(Extension::DeleteKey),
        Verb::KickKey => whole_key(args).map(Extension::KickKey),
        Verb::BuryKey => {
            key_then(args, number::<u32>).map(|(key, pri)| Extension::BuryKey { key, pri })
        }
        Verb::RetimeKey => {
            key_then(args, duration).map(|(key, delay)| Extension::RetimeKey { key, delay })
        }
        Verb::FlushTube => flush_tube(args),
        Verb::FlushBuried => TubeName::new(args).ok_or(BAD).map(|tube| Extension::Flush {
            tube,
            states: FlushStates::BURIED,
        }),
    };
    Some((
        Families::of(verb.family()),
        ext.map(|e| Line::Extension(Box::new(e))),
    ))
}

impl Verb {
    /// The family of a verb that is an extension whatever its arguments (the put,
    /// release and pause-tube forms say theirs where they are read).
    fn family(self) -> Family {
        match self {
            Verb::Put | Verb::Release | Verb::PauseTube => Family::Milliseconds,
            Verb::ReserveBatch
            | Verb::DeleteBatch
            | Verb::ReleaseBatch
            | Verb::TouchBatch
            | Verb::BuryBatch => Family::Batches,
            Verb::FindKey
            | Verb::PeekKey
            | Verb::DeleteKey
            | Verb::KickKey
            | Verb::BuryKey
            | Verb::RetimeKey => Family::Keys,
            Verb::FlushTube | Verb::FlushBuried => Family::Flush,
        }
    }
}

/// `put <pri> <delay> <ttr> <bytes>[ <tag>...]`: an extension when a duration is in
/// milliseconds or the text after `<bytes>` starts like a tag (which needs the keys
/// family: the only tags are key tags); `None` otherwise (the standard answer stands:
/// BAD_FORMAT, the body not skipped, as the reference).
fn put(args: &[u8]) -> Option<(Families, ExtendedPutHeader)> {
    let mut header = (number::<u32>, duration_unit, duration_unit, number::<u32>);
    let (tail, (pri, (delay, delay_ms), (ttr, ttr_ms), bytes)) = header.parse(args).ok()?;
    let mut needs = Families::NONE;
    if delay_ms || ttr_ms {
        needs = needs.with(Family::Milliseconds);
    }
    if tag_shaped(tail) {
        needs = needs.with(Family::Keys);
    }
    if needs == Families::NONE {
        return None;
    }
    let tags = match put_tags(tail) {
        Some(key) => PutTags::Valid(key),
        None => PutTags::Malformed,
    };
    let header = ExtendedPutHeader {
        pri,
        delay,
        ttr,
        bytes,
        tags,
    };
    Some((needs, header))
}

/// Spaces, then lower-case letters and a colon: the start of a tag.
fn tag_shaped(tail: &[u8]) -> bool {
    let rest = tail.trim_ascii_start();
    let letters = rest.iter().take_while(|b| b.is_ascii_lowercase()).count();
    rest.len() < tail.len() && letters > 0 && rest.get(letters) == Some(&b':')
}

/// Space-separated tags: at most one key tag. `None` when malformed.
fn put_tags(mut rest: &[u8]) -> Option<Option<PutKey>> {
    let mut key = None;
    while !rest.is_empty() {
        let after = rest.trim_ascii_start();
        if after.len() == rest.len() {
            return None;
        }
        let end = after.iter().position(|&b| b == b' ').unwrap_or(after.len());
        let parsed = put_key(&after[..end])?;
        if key.replace(parsed).is_some() {
            return None;
        }
        rest = &after[end..];
    }
    Some(key)
}

/// `idp:<key>[:<window>]` or `rpl:<key>[:<window>]`.
fn put_key(token: &[u8]) -> Option<PutKey> {
    let (mode, rest) = if let Some(rest) = token.strip_prefix(b"idp:") {
        (KeyMode::Dedupe, rest)
    } else {
        (KeyMode::Replace, token.strip_prefix(b"rpl:")?)
    };
    // A key has no colon, so the first one starts the window.
    let (key, window) = match rest.iter().position(|&b| b == b':') {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let window = match window {
        Some(w) if w.first().is_some_and(u8::is_ascii_digit) => last(w, duration).ok()?,
        Some(_) => return None,
        None => Millis::ZERO,
    };
    Some(PutKey {
        key: Key::new(key)?,
        mode,
        window,
    })
}

/// `release <id> <pri> <delay>` with the delay in milliseconds.
fn release(args: &[u8]) -> Option<Extension> {
    let mut fields = (number::<u64>, number::<u32>, duration_unit);
    match fields.parse(args) {
        Ok((b"", (id, pri, (delay, true)))) => Some(Extension::Release { id, pri, delay }),
        _ => None,
    }
}

/// `pause-tube <tube> <delay>` with the delay in milliseconds: counted once the delay
/// parsed, then the name is checked (the reference's order).
fn pause_tube(args: &[u8]) -> Option<Result<Extension, Rejection>> {
    let mut head = (spaces, take_while1(is_tube_name_byte)).map(|(_, name)| name);
    let res: IResult<&[u8], &[u8]> = head.parse(args);
    let (rest, name) = res.ok()?;
    let (delay, in_ms) = last(rest, duration_unit).ok()?;
    if !in_ms {
        return None;
    }
    Some(match TubeName::new(name) {
        Some(tube) => Ok(Extension::PauseTube { tube, delay }),
        None => Err(Rejection::BadFormat {
            counted: Some(Counter::PauseTube),
        }),
    })
}

/// `reserve-batch <n>[ <timeout>]`: 1 ≤ n ≤ 1000; timeout at most INT_MAX seconds.
fn reserve_batch(args: &[u8]) -> Result<Extension, Rejection> {
    let (max, timeout) = last(args, |i| (number::<u32>, opt(duration)).parse(i))?;
    let max = u16::try_from(max)
        .ok()
        .filter(|&n| n >= 1 && usize::from(n) <= MAX_BATCH)
        .ok_or(BAD)?;
    let timeout = timeout.unwrap_or(Millis::ZERO);
    if timeout > MAX_TIMEOUT {
        return Err(BAD);
    }
    Ok(Extension::ReserveBatch { max, timeout })
}

fn release_batch(args: &[u8]) -> Result<Extension, Rejection> {
    let mut fields = (number::<u32>, duration);
    let (rest, (pri, delay)) = fields.parse(args).map_err(|_| BAD)?;
    let ids = ids(rest)?;
    Ok(Extension::Batch {
        op: BatchOp::Release { pri, delay },
        ids,
    })
}

fn bury_batch(args: &[u8]) -> Result<Extension, Rejection> {
    let (rest, pri) = number::<u32>(args).map_err(|_| BAD)?;
    let ids = ids(rest)?;
    Ok(Extension::Batch {
        op: BatchOp::Bury { pri },
        ids,
    })
}

/// 1–[`MAX_BATCH`] ids, each after spaces, and nothing after the last.
fn ids(mut rest: &[u8]) -> Result<Vec<u64>, Rejection> {
    let mut ids = Vec::new();
    loop {
        let (after, id) = number::<u64>(rest).map_err(|_| BAD)?;
        if ids.len() == MAX_BATCH {
            return Err(BAD);
        }
        ids.push(id);
        if after.is_empty() {
            return Ok(ids);
        }
        rest = after;
    }
}

/// The whole rest of the line is a key (so no spaces either side).
fn whole_key(args: &[u8]) -> Result<Key, Rejection> {
    Key::new(args).ok_or(BAD)
}

/// A key, then `p` as the last field.
fn key_then<T>(
    args: &[u8],
    p: impl FnMut(&[u8]) -> IResult<&[u8], T>,
) -> Result<(Key, T), Rejection> {
    let res: IResult<&[u8], &[u8]> = take_while1(is_tube_name_byte).parse(args);
    let (rest, key) = res.map_err(|_| BAD)?;
    if !rest.starts_with(b" ") {
        return Err(BAD);
    }
    let value = last(rest, p)?;
    Ok((Key::new(key).ok_or(BAD)?, value))
}

/// `flush-tube <tube>[ <state>...]`: no state named is every state.
fn flush_tube(args: &[u8]) -> Result<Extension, Rejection> {
    let mut words = args.split(|&b| b == b' ');
    let tube = words.next().and_then(TubeName::new).ok_or(BAD)?;
    let mut states = FlushStates {
        ready: false,
        delayed: false,
        buried: false,
        reserved: false,
    };
    let mut named = false;
    for word in words {
        let slot = match word {
            b"ready" => &mut states.ready,
            b"delayed" => &mut states.delayed,
            b"buried" => &mut states.buried,
            b"reserved" => &mut states.reserved,
            _ => return Err(BAD),
        };
        *slot = true;
        named = true;
    }
    let states = if named { states } else { FlushStates::ALL };
    Ok(Extension::Flush { tube, states })
}

/// A duration after spaces: whole seconds (a u32, as the reference reads its numbers)
/// or `<n>ms` (at most `u32::MAX` seconds' worth); also says whether it was in ms.
fn duration_unit(input: &[u8]) -> IResult<&[u8], (Millis, bool)> {
    let (rest, (_, digits, ms)) = (spaces, digit1, opt(tag(&b"ms"[..]))).parse(input)?;
    let value = decimal(digits).and_then(|n| match ms {
        Some(_) => Millis::new(n),
        None => u32::try_from(n).ok().map(Millis::from_secs),
    });
    match value {
        Some(v) => Ok((rest, (v, ms.is_some()))),
        None => Err(nom::Err::Error(nom::error::Error::new(
            input,
            nom::error::ErrorKind::TooLarge,
        ))),
    }
}

fn duration(input: &[u8]) -> IResult<&[u8], Millis> {
    duration_unit.map(|(d, _)| d).parse(input)
}

#[cfg(test)]
mod tests;
