//! One complete command line (without its CRLF) -> a command, a put header, or the
//! reply the reference gives for it.
//!
//! This mirrors the reference's `which_cmd` and argument readers, quirks included:
//! prefix dispatch in the reference's order (so `reserved` is a malformed `reserve`, and
//! `pause-tubedefault 1` pauses `default`), strict numbers (spaces before, digits only,
//! overflow rejected, nothing after the last one), `kick`'s `strtoul` leniency,
//! `reserve-with-timeout`'s tolerance of trailing junk, and `pause-tube` counting itself
//! before it validates anything. Pure: no I/O, no state.
//!
//! Under the extended grammar ([`parse_line_in`]) a line is read by the standard grammar
//! first, and only a line it rejects (or a put it flags for trailing text) is offered
//! to the extension grammar ([`super::ext::parse`]): no line the reference accepts can
//! change meaning.

use nom::bytes::complete::{take_while, take_while1};
use nom::character::complete::digit1;
use nom::{IResult, Parser};

use super::command::{
    Command, Counter, PutHeader, Rejection, Timeout, TubeName, is_tube_name_byte,
};
use super::ext::parse::{ExtendedPutHeader, extend};
use super::ext::{Extension, Grammar};

/// A parsed line: a command, or a put header whose body the codec must still frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Line {
    Command(Command),
    Put(PutHeader),
    /// Only under [`Grammar::Extended`]. Boxed, as in [`Frame`]: a line is moved
    /// through every layer of the parse, and beanstalkd's own lines should not pay for
    /// the size of the rare extended ones.
    Extension(Box<Extension>),
    /// A put in the extended grammar (only under [`Grammar::Extended`]).
    ExtendedPut(Box<ExtendedPutHeader>),
}

pub(in crate::protocol) const BAD: Rejection = Rejection::BadFormat { counted: None };

/// The reference's dispatch prefixes, in its order; the first that matches wins.
#[derive(Clone, Copy)]
enum Verb {
    Put,
    Peek,
    PeekReady,
    PeekDelayed,
    PeekBuried,
    ReserveWithTimeout,
    ReserveJob,
    Reserve,
    Delete,
    Release,
    Bury,
    Kick,
    KickJob,
    Touch,
    StatsJob,
    StatsTube,
    Stats,
    Use,
    Watch,
    Ignore,
    ListTubesWatched,
    ListTubeUsed,
    ListTubes,
    Quit,
    PauseTube,
}

const PREFIXES: [(&[u8], Verb); 25] = [
    (b"put ", Verb::Put),
    (b"peek ", Verb::Peek),
    (b"peek-ready", Verb::PeekReady),
    (b"peek-delayed", Verb::PeekDelayed),
    (b"peek-buried", Verb::PeekBuried),
    (b"reserve-with-timeout ", Verb::ReserveWithTimeout),
    (b"reserve-job ", Verb::ReserveJob),
    (b"reserve", Verb::Reserve),
    (b"delete ", Verb::Delete),
    (b"release ", Verb::Release),
    (b"bury ", Verb::Bury),
    (b"kick ", Verb::Kick),
    (b"kick-job ", Verb::KickJob),
    (b"touch ", Verb::Touch),
    (b"stats-job ", Verb::StatsJob),
    (b"stats-tube ", Verb::StatsTube),
    (b"stats", Verb::Stats),
    (b"use ", Verb::Use),
    (b"watch ", Verb::Watch),
    (b"ignore ", Verb::Ignore),
    (b"list-tubes-watched", Verb::ListTubesWatched),
    (b"list-tube-used", Verb::ListTubeUsed),
    (b"list-tubes", Verb::ListTubes),
    (b"quit", Verb::Quit),
    (b"pause-tube", Verb::PauseTube),
];

/// Parse one command line (the bytes before CRLF) in beanstalkd's grammar.
pub fn parse_line(line: &[u8]) -> Result<Line, Rejection> {
    parse_line_in(line, Grammar::Standard)
}

/// Parse one command line in `grammar`.
pub fn parse_line_in(line: &[u8], grammar: Grammar) -> Result<Line, Rejection> {
    let standard = parse_standard(line);
    match grammar {
        Grammar::Standard => standard,
        Grammar::Extended(served) => extend(line, standard, served),
    }
}

fn parse_standard(line: &[u8]) -> Result<Line, Rejection> {
    // The reference NUL-terminates the line and rejects it if strlen disagrees.
    if line.contains(&0) {
        return Err(BAD);
    }
    let Some((prefix, verb)) = PREFIXES.iter().find(|(p, _)| line.starts_with(p)) else {
        return Err(Rejection::UnknownCommand);
    };
    let args = &line[prefix.len()..];
    let cmd = match verb {
        Verb::Put => return parse_put(args).map(Line::Put),
        Verb::Peek => Command::Peek(last_u64(args)?),
        Verb::PeekReady => exact(args, Command::PeekReady)?,
        Verb::PeekDelayed => exact(args, Command::PeekDelayed)?,
        Verb::PeekBuried => exact(args, Command::PeekBuried)?,
        Verb::ReserveWithTimeout => {
            // Trailing junk is tolerated here (an end pointer is passed); 1.13 rejects
            // values above INT_MAX, 1.12 reads them its own way (see `Timeout`).
            let strict = number::<u32>(args)
                .ok()
                .map(|(_, n)| n)
                .filter(|&n| n <= i32::MAX as u32);
            let timeout = match strict {
                Some(n) => Timeout::Secs(n),
                None => {
                    let n = strtol_int(args).ok_or(BAD)?;
                    Timeout::Only1_12(u32::try_from(n).ok())
                }
            };
            Command::ReserveWithTimeout(timeout)
        }
        Verb::ReserveJob => Command::ReserveJob(last_u64(args)?),
        Verb::Reserve => exact(args, Command::Reserve)?,
        Verb::Delete => Command::Delete(last_u64(args)?),
        Verb::Release => {
            let (rest, id) = number::<u64>(args).map_err(|_| BAD)?;
            let (rest, pri) = number::<u32>(rest).map_err(|_| BAD)?;
            let delay = last(rest, number::<u32>)?;
            Command::Release { id, pri, delay }
        }
        Verb::Bury => {
            let (rest, id) = number::<u64>(args).map_err(|_| BAD)?;
            let pri = last(rest, number::<u32>)?;
            Command::Bury { id, pri }
        }
        Verb::Kick => Command::Kick(strtoul_u32(args).ok_or(BAD)?),
        Verb::KickJob => Command::KickJob(last_u64(args)?),
        Verb::Touch => Command::Touch(last_u64(args)?),
        Verb::StatsJob => Command::StatsJob(last_u64(args)?),
        Verb::StatsTube => Command::StatsTube(whole_name(args)?),
        Verb::Stats => exact(args, Command::Stats)?,
        Verb::Use => Command::Use(whole_name(args)?),
        Verb::Watch => Command::Watch(whole_name(args)?),
        Verb::Ignore => Command::Ignore(whole_name(args)?),
        Verb::ListTubesWatched => exact(args, Command::ListTubesWatched)?,
        Verb::ListTubeUsed => exact(args, Command::ListTubeUsed)?,
        Verb::ListTubes => exact(args, Command::ListTubes)?,
        // Any line that merely starts with "quit" quits.
        Verb::Quit => Command::Quit,
        Verb::PauseTube => parse_pause_tube(args)?,
    };
    Ok(Line::Command(cmd))
}

/// `put <pri> <delay> <ttr> <bytes>`: junk after `<bytes>` is only flagged, because the
/// size check comes first in the reference.
fn parse_put(args: &[u8]) -> Result<PutHeader, Rejection> {
    let mut fields = (number::<u32>, number::<u32>, number::<u32>, number::<u32>);
    let (rest, (pri, delay, ttr, bytes)) = fields.parse(args).map_err(|_| BAD)?;
    Ok(PutHeader {
        pri,
        delay,
        ttr,
        bytes,
        trailing_garbage: !rest.is_empty(),
    })
}

/// `pause-tube`: spaces, a run of name bytes, then the delay as the last number. The
/// reference counts the command once the delay parsed, and only then validates the name.
fn parse_pause_tube(args: &[u8]) -> Result<Command, Rejection> {
    let res: IResult<&[u8], &[u8]> = (spaces, take_while1(is_tube_name_byte))
        .map(|(_, name)| name)
        .parse(args);
    let (rest, name) = res.map_err(|_| BAD)?;
    let delay = last(rest, number::<u32>)?;
    let tube = TubeName::new(name).ok_or(Rejection::BadFormat {
        counted: Some(Counter::PauseTube),
    })?;
    Ok(Command::PauseTube { tube, delay })
}

/// A no-argument command: nothing may follow the verb.
fn exact(args: &[u8], cmd: Command) -> Result<Command, Rejection> {
    if args.is_empty() { Ok(cmd) } else { Err(BAD) }
}

/// The whole rest of the line is a tube name (so no extra spaces either side).
fn whole_name(args: &[u8]) -> Result<TubeName, Rejection> {
    TubeName::new(args).ok_or(BAD)
}

fn last_u64(args: &[u8]) -> Result<u64, Rejection> {
    last(args, number::<u64>)
}

/// Run `p` and require that it consumed the rest of the line.
pub(in crate::protocol) fn last<T>(
    input: &[u8],
    mut p: impl FnMut(&[u8]) -> IResult<&[u8], T>,
) -> Result<T, Rejection> {
    match p(input) {
        Ok((b"", v)) => Ok(v),
        _ => Err(BAD),
    }
}

pub(in crate::protocol) fn spaces(input: &[u8]) -> IResult<&[u8], &[u8]> {
    take_while(|b| b == b' ').parse(input)
}

/// Unsigned decimal that fits in `T`: leading spaces (not tabs) skipped, the first byte
/// must be a digit (no sign), leading zeros are decimal, overflow is an error.
pub(in crate::protocol) fn number<T: TryFrom<u64>>(input: &[u8]) -> IResult<&[u8], T> {
    let (rest, (_, digits)) = (spaces, digit1).parse(input)?;
    let fail = || {
        nom::Err::Error(nom::error::Error::new(
            input,
            nom::error::ErrorKind::TooLarge,
        ))
    };
    let value = decimal(digits).ok_or_else(fail)?;
    let value = T::try_from(value).map_err(|_| fail())?;
    Ok((rest, value))
}

pub(in crate::protocol) fn decimal(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |acc, d| {
        acc.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// C's `strtol` stored into an `int`, as beanstalkd 1.12 read `reserve-with-timeout`:
/// leading whitespace, an optional sign, digits (none at all is 0), anything after
/// ignored; then truncated to 32 bits. Only overflow of a 64-bit `long` (ERANGE) is an
/// error.
fn strtol_int(args: &[u8]) -> Option<i32> {
    let (negative, digits) = c_sign_and_digits(args);
    let magnitude = decimal(digits)?;
    let value: i64 = if negative {
        // Down to -2^63.
        0i64.checked_sub_unsigned(magnitude)?
    } else {
        i64::try_from(magnitude).ok()?
    };
    Some(value as i32)
}

/// What C's `strto*` functions read: leading whitespace skipped, whether a minus sign
/// followed, and the run of digits after the sign (possibly empty).
fn c_sign_and_digits(args: &[u8]) -> (bool, &[u8]) {
    let is_c_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r');
    let start = args
        .iter()
        .position(|&b| !is_c_space(b))
        .unwrap_or(args.len());
    let mut rest = &args[start..];
    let mut negative = false;
    if let Some((&sign @ (b'+' | b'-'), tail)) = rest.split_first() {
        negative = sign == b'-';
        rest = tail;
    }
    let n_digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    (negative, &rest[..n_digits])
}

/// C's `strtoul` into an `unsigned int`, as `kick` reads its bound: leading whitespace,
/// an optional sign (a minus negates modulo 2^64), digits, anything after ignored; then
/// truncated to 32 bits. Only "no digits" and overflow of 64 bits are errors.
fn strtoul_u32(args: &[u8]) -> Option<u32> {
    let (negative, digits) = c_sign_and_digits(args);
    if digits.is_empty() {
        return None;
    }
    let magnitude = decimal(digits)?;
    let value = if negative {
        magnitude.wrapping_neg()
    } else {
        magnitude
    };
    Some(value as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(line: &str) -> Result<Command, Rejection> {
        match parse_line(line.as_bytes()) {
            Ok(Line::Command(c)) => Ok(c),
            Err(e) => Err(e),
            Ok(other) => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn prefix_dispatch_quirks() {
        assert_eq!(cmd("reserved"), Err(BAD));
        assert_eq!(cmd("stats "), Err(BAD));
        assert_eq!(cmd("stats-job"), Err(BAD));
        assert_eq!(cmd("PUT 1 2 3 4"), Err(Rejection::UnknownCommand));
        assert_eq!(cmd("put"), Err(Rejection::UnknownCommand));
        assert_eq!(cmd(""), Err(Rejection::UnknownCommand));
        assert_eq!(cmd("quitxyz"), Ok(Command::Quit));
        assert_eq!(
            cmd("pause-tubedefault 1"),
            Ok(Command::PauseTube {
                tube: TubeName::default_tube(),
                delay: 1
            })
        );
        assert_eq!(cmd("pause-tube default 1 "), Err(BAD));
        assert_eq!(
            cmd("pause-tube -x 1"),
            Err(Rejection::BadFormat {
                counted: Some(Counter::PauseTube)
            })
        );
    }

    #[test]
    fn numbers_are_strict_except_where_the_reference_is_lenient() {
        assert_eq!(cmd("delete  1"), Ok(Command::Delete(1)));
        assert_eq!(cmd("delete 1 "), Err(BAD));
        assert_eq!(cmd("delete -1"), Err(BAD));
        assert_eq!(
            cmd("delete 18446744073709551615"),
            Ok(Command::Delete(u64::MAX))
        );
        assert_eq!(cmd("delete 18446744073709551616"), Err(BAD));
        assert_eq!(cmd("kick -1"), Ok(Command::Kick(u32::MAX)));
        assert_eq!(cmd("kick 4294967297"), Ok(Command::Kick(1)));
        assert_eq!(cmd("kick 5abc"), Ok(Command::Kick(5)));
        assert_eq!(cmd("kick \t7"), Ok(Command::Kick(7)));
        assert_eq!(cmd("kick abc"), Err(BAD));
        let rwt = |t| Ok(Command::ReserveWithTimeout(t));
        assert_eq!(cmd("reserve-with-timeout 5abc"), rwt(Timeout::Secs(5)));
        assert_eq!(cmd("reserve-with-timeout  5"), rwt(Timeout::Secs(5)));
        assert_eq!(
            cmd("reserve-with-timeout 2147483647"),
            rwt(Timeout::Secs(i32::MAX as u32))
        );
    }

    #[test]
    fn reserve_with_timeout_as_1_12_read_it() {
        // What 1.13 rejects, 1.12 read with strtol into an int (checked against 1.12).
        let only = |t| Ok(Command::ReserveWithTimeout(Timeout::Only1_12(t)));
        assert_eq!(cmd("reserve-with-timeout -1"), only(None));
        assert_eq!(cmd("reserve-with-timeout 2147483648"), only(None));
        assert_eq!(cmd("reserve-with-timeout 9223372036854775807"), only(None));
        assert_eq!(cmd("reserve-with-timeout 4294967297"), only(Some(1)));
        assert_eq!(cmd("reserve-with-timeout 4294967296"), only(Some(0)));
        assert_eq!(cmd("reserve-with-timeout +0"), only(Some(0)));
        assert_eq!(cmd("reserve-with-timeout \t1"), only(Some(1)));
        assert_eq!(cmd("reserve-with-timeout -0"), only(Some(0)));
        assert_eq!(cmd("reserve-with-timeout -"), only(Some(0)));
        assert_eq!(cmd("reserve-with-timeout "), only(Some(0)));
        assert_eq!(cmd("reserve-with-timeout abc"), only(Some(0)));
        // -2^63 fits a long, and its low 32 bits are 0.
        assert_eq!(
            cmd("reserve-with-timeout -9223372036854775808"),
            only(Some(0))
        );
        // Beyond a 64-bit long: BAD_FORMAT in both.
        assert_eq!(cmd("reserve-with-timeout 9223372036854775808"), Err(BAD));
        assert_eq!(cmd("reserve-with-timeout -9223372036854775809"), Err(BAD));
        assert_eq!(cmd("reserve-with-timeout 99999999999999999999"), Err(BAD));
        for (t, v112, v113) in [
            (Timeout::Secs(3), Some(Some(3)), Some(Some(3))),
            (Timeout::Only1_12(Some(1)), Some(Some(1)), None),
            (Timeout::Only1_12(None), Some(None), None),
        ] {
            assert_eq!(t.read_as(crate::protocol::Dialect::V1_12), v112);
            assert_eq!(t.read_as(crate::protocol::Dialect::V1_13), v113);
        }
    }

    #[test]
    fn put_header() {
        let h = parse_line(b"put 00 000 0001 01 zz").unwrap();
        assert_eq!(
            h,
            Line::Put(PutHeader {
                pri: 0,
                delay: 0,
                ttr: 1,
                bytes: 1,
                trailing_garbage: true
            })
        );
        assert_eq!(parse_line(b"put 1x 2 3 4"), Err(BAD));
        assert_eq!(parse_line(b"put 4294967296 0 0 1"), Err(BAD));
        assert_eq!(parse_line(b"put 1 2 3"), Err(BAD));
    }

    #[test]
    fn tube_names() {
        assert!(cmd("use (x)$;.+/_").is_ok());
        assert!(cmd("use foo-").is_ok());
        assert_eq!(cmd("use -foo"), Err(BAD));
        assert_eq!(cmd("use  foo"), Err(BAD));
        assert_eq!(cmd("use a:b"), Err(BAD));
        assert!(cmd(&format!("use {}", "a".repeat(200))).is_ok());
        assert_eq!(cmd(&format!("use {}", "a".repeat(201))), Err(BAD));
        assert_eq!(cmd("use a\0b"), Err(BAD));
    }
}
