//! A schedule's cursor as both Redis modes keep it in the hash
//! [`Keys::schedule_cursors`](super::keys::Keys::schedule_cursors): `"<last_tick_ms>
//! <last_job> <fired> <deduped> <skipped>"`, decimals one space apart. Leader mode's
//! batches write it, shared mode's scripts (`fire.lua`, `skip.lua`) read and write the
//! same text, so a namespace reopens in either mode.

use crate::store::Cursor;

/// `c` as the cursors hash holds it.
pub fn cursor_text(c: &Cursor) -> String {
    format!(
        "{} {} {} {} {}",
        c.last_tick_ms, c.last_job, c.fired, c.deduped, c.skipped
    )
}

/// A cursor read from the cursors hash; `None` unless exactly five decimals one space
/// apart.
pub fn parse_cursor(text: &[u8]) -> Option<Cursor> {
    let mut parts = text.split(|&b| b == b' ').map(|p| {
        // `u64::from_str` takes a leading '+', which no writer emits.
        (!p.is_empty() && p.iter().all(u8::is_ascii_digit))
            .then(|| std::str::from_utf8(p).ok()?.parse::<u64>().ok())
            .flatten()
    });
    let mut next = || parts.next().flatten();
    let cursor = Cursor {
        last_tick_ms: next()?,
        last_job: next()?,
        fired: next()?,
        deduped: next()?,
        skipped: next()?,
    };
    parts.next().is_none().then_some(cursor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_is_five_decimals_one_space_apart() {
        let c = Cursor {
            last_tick_ms: 1_733_370_000_000,
            last_job: 42,
            fired: 7,
            deduped: 2,
            skipped: 3,
        };
        assert_eq!(cursor_text(&c), "1733370000000 42 7 2 3");
        assert_eq!(parse_cursor(cursor_text(&c).as_bytes()), Some(c));
        assert_eq!(parse_cursor(b"0 0 0 0 0"), Some(Cursor::default()));
        for bad in [
            "",
            "1 2 3 4",
            "1 2 3 4 5 6",
            "1  2 3 4 5",
            "1 2 3 4 5 ",
            "+1 2 3 4 5",
            "-1 2 3 4 5",
            "1 2 x 4 5",
            "99999999999999999999 0 0 0 0",
        ] {
            assert_eq!(parse_cursor(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
