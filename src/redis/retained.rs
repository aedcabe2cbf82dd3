//! A retained record (store/retention.rs: a deleted job's record kept by retention) as
//! both Redis modes keep it: the hash [`Keys::retained_record`] with the fields
//!
//! - `t` tube, `k` key (only when the job had one), `d` delete time (ms),
//! - `f` figures: `"<pri> <delay_ms> <ttr_ms> <created_ms> <reserves> <timeouts>
//!   <releases> <buries> <kicks>"` (decimals one space apart),
//! - `h` history in `History::encode`'s text, `n` the body's length, `b` the body
//!   (only when kept), `z` the record's accounted size (`Retained::bytes`);
//!
//! the zset [`Keys::retained`] (score: delete time in ms, member: the id zero-padded to
//! 20 digits), the hash [`Keys::retained_keys`] (`"<tube>\n<key>"` → the newest id) and
//! the string [`Keys::retained_bytes`] (the sum of the records' `z`). Shared mode's scripts write
//! this form (`RET` in store/shared/lua/prelude.lua), leader mode's batches write it
//! (`persist/redis/retained.rs`), and one reader reads both.
//!
//! Invariant: [`record_of`] of [`record_fields`]' fields is the record itself.
//!
//! [`Keys::retained_record`]: super::keys::Keys::retained_record
//! [`Keys::retained`]: super::keys::Keys::retained
//! [`Keys::retained_keys`]: super::keys::Keys::retained_keys
//! [`Keys::retained_bytes`]: super::keys::Keys::retained_bytes

use bytes::Bytes;

use crate::protocol::TubeName;
use crate::store::JobId;
use crate::store::keys::Key;
use crate::store::retention::{History, HistoryError, Retained, RetainedFigures};

/// The field of [`Keys::retained_keys`](super::keys::Keys::retained_keys) for `key` of
/// `tube`.
pub fn key_field(tube: &TubeName, key: &Key) -> Vec<u8> {
    let mut f = Vec::with_capacity(tube.as_str().len() + 1 + key.as_str().len());
    f.extend_from_slice(tube.as_str().as_bytes());
    f.push(b'\n');
    f.extend_from_slice(key.as_str().as_bytes());
    f
}

/// The id of a zset member of [`Keys::retained`](super::keys::Keys::retained).
pub fn member_id(member: &[u8]) -> Option<JobId> {
    if member.is_empty() || !member.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(member).ok()?.parse().ok()
}

/// `f` as the `f` field holds it.
pub fn figures_text(f: &RetainedFigures) -> String {
    format!(
        "{} {} {} {} {} {} {} {} {}",
        f.pri,
        f.delay_ms,
        f.ttr_ms,
        f.created_ms,
        f.reserves,
        f.timeouts,
        f.releases,
        f.buries,
        f.kicks
    )
}

fn number(text: &[u8]) -> Option<u64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// The `f` field read back; `None` unless exactly nine decimals one space apart, each
/// in its field's range.
pub fn parse_figures(text: &[u8]) -> Option<RetainedFigures> {
    let mut parts = text.split(|&b| b == b' ').map(number);
    let mut next = || parts.next().flatten();
    let f = RetainedFigures {
        pri: u32::try_from(next()?).ok()?,
        delay_ms: next()?,
        ttr_ms: next()?,
        created_ms: next()?,
        reserves: u32::try_from(next()?).ok()?,
        timeouts: u32::try_from(next()?).ok()?,
        releases: u32::try_from(next()?).ok()?,
        buries: u32::try_from(next()?).ok()?,
        kicks: u32::try_from(next()?).ok()?,
    };
    parts.next().is_none().then_some(f)
}

/// The hash fields of `r`, in the order a writer sets them.
pub fn record_fields(r: &Retained) -> Vec<(&'static [u8], Bytes)> {
    let text = |s: String| Bytes::from(s.into_bytes());
    let mut out = vec![
        (
            &b"t"[..],
            Bytes::copy_from_slice(r.tube.as_str().as_bytes()),
        ),
        (b"d", text(r.deleted_ms.to_string())),
        (b"f", text(figures_text(&r.figures))),
        (b"h", text(r.history.encode())),
        (b"n", text(r.body_len.to_string())),
    ];
    if let Some(k) = &r.key {
        out.push((b"k", Bytes::copy_from_slice(k.as_str().as_bytes())));
    }
    if let Some(b) = &r.body {
        out.push((b"b", b.clone()));
    }
    out.push((b"z", text(r.bytes().to_string())));
    out
}

/// Why a record's hash does not read as a record.
#[derive(Debug, thiserror::Error)]
pub enum RetainedFormError {
    #[error("retained record {id}: its {field} field is missing")]
    Missing { id: JobId, field: &'static str },
    #[error("retained record {id}: its {field} field does not read")]
    Bad { id: JobId, field: &'static str },
    #[error("retained record {id}: its history does not read")]
    History {
        id: JobId,
        #[source]
        source: HistoryError,
    },
}

/// Record `id` from its hash's fields (unknown fields are ignored: `z`, and whatever a
/// later version adds).
pub fn record_of(
    id: JobId,
    fields: Vec<(Vec<u8>, Vec<u8>)>,
) -> Result<Retained, RetainedFormError> {
    let bad = |field| RetainedFormError::Bad { id, field };
    let missing = |field| RetainedFormError::Missing { id, field };
    let (mut tube, mut key, mut deleted, mut figures) = (None, None, None, None);
    let (mut history, mut body_len, mut body) = (History::default(), None, None);
    for (name, value) in fields {
        match &name[..] {
            b"t" => tube = Some(TubeName::new(&value).ok_or_else(|| bad("tube"))?),
            b"k" => key = Some(Key::new(&value).ok_or_else(|| bad("key"))?),
            b"d" => deleted = Some(number(&value).ok_or_else(|| bad("delete time"))?),
            b"f" => figures = Some(parse_figures(&value).ok_or_else(|| bad("figures"))?),
            b"h" => {
                history = History::decode(&value)
                    .map_err(|source| RetainedFormError::History { id, source })?
            }
            b"n" => {
                let n = number(&value).and_then(|n| usize::try_from(n).ok());
                body_len = Some(n.ok_or_else(|| bad("body length"))?);
            }
            b"b" => body = Some(Bytes::from(value)),
            _ => {}
        }
    }
    Ok(Retained {
        id,
        tube: tube.ok_or_else(|| missing("tube"))?,
        key,
        deleted_ms: deleted.ok_or_else(|| missing("delete time"))?,
        figures: figures.ok_or_else(|| missing("figures"))?,
        history,
        body_len: body_len.or(body.as_ref().map(Bytes::len)).unwrap_or(0),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::retention::{Event, EventKind};

    fn record(body: Option<&'static [u8]>, key: Option<&str>) -> Retained {
        let mut history = History::default();
        for (at_ms, kind, conn) in [
            (1_000, EventKind::Put, 0),
            (1_250, EventKind::Reserve, 7),
            (1_300, EventKind::Delete, 7),
        ] {
            history.push(Event { at_ms, kind, conn });
        }
        Retained {
            id: 42,
            tube: TubeName::new(b"emails").unwrap(),
            key: key.map(|k| Key::new(k.as_bytes()).unwrap()),
            deleted_ms: 1_300,
            figures: RetainedFigures {
                pri: 4_294_967_295,
                delay_ms: 0,
                ttr_ms: 60_000,
                created_ms: 1_000,
                reserves: 1,
                timeouts: 0,
                releases: 0,
                buries: 0,
                kicks: 0,
            },
            history,
            body_len: 5,
            body: body.map(Bytes::from_static),
        }
    }

    fn fields(r: &Retained) -> Vec<(Vec<u8>, Vec<u8>)> {
        record_fields(r)
            .into_iter()
            .map(|(f, v)| (f.to_vec(), v.to_vec()))
            .collect()
    }

    #[test]
    fn a_record_reads_back_from_its_fields() {
        for r in [record(None, None), record(Some(b"hello"), Some("order-1"))] {
            assert_eq!(record_of(r.id, fields(&r)).unwrap(), r);
        }
    }

    #[test]
    fn a_damaged_record_names_its_field() {
        let r = record(None, None);
        let mut f = fields(&r);
        f.retain(|(name, _)| name != b"d");
        assert!(matches!(
            record_of(42, f),
            Err(RetainedFormError::Missing {
                field: "delete time",
                ..
            })
        ));
        let mut f = fields(&r);
        f.push((b"h".to_vec(), b"0 12zz".to_vec()));
        let err = record_of(42, f).unwrap_err();
        assert!(std::error::Error::source(&err).is_some(), "{err}");
        assert!(parse_figures(b"1 2 3 4 5 6 7 8 9 10").is_none());
        assert!(parse_figures(b"1 2 3").is_none());
        assert_eq!(member_id(b"00000000000000000042"), Some(42));
        assert_eq!(member_id(b"+42"), None);
    }
}
