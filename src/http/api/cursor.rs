//! What each list's [`Cursor`] holds: the key its next page starts after, as text in
//! URL-safe base64 (so clients treat it as opaque, and its format may change). One
//! [`CursorKey`] per list: a tube's name (tubes), a job's sort key in its state
//! (a tube's jobs), a tube, state and key (search), a connection id (clients).

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::error::ApiError;
use super::types::Cursor;
use crate::engine::admin_bulk::SearchCursor;
use crate::protocol::TubeName;
use crate::store::{JobState, ListKey};

/// A key a list resumes after, and its text.
pub trait CursorKey: Sized {
    fn text(&self) -> String;
    fn parse(text: &str) -> Option<Self>;
}

pub fn encode(key: &impl CursorKey) -> Cursor {
    Cursor(URL_SAFE_NO_PAD.encode(key.text()))
}

/// The key of a cursor this server gave (`None`: from the start).
pub fn decode<K: CursorKey>(cursor: Option<&Cursor>) -> Result<Option<K>, ApiError> {
    let Some(cursor) = cursor else {
        return Ok(None);
    };
    URL_SAFE_NO_PAD
        .decode(&cursor.0)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .and_then(|text| K::parse(&text))
        .map(Some)
        .ok_or_else(|| ApiError::bad_request("cursor: not one this server gave"))
}

/// The tubes listing: after this name.
impl CursorKey for TubeName {
    fn text(&self) -> String {
        self.as_str().to_string()
    }
    fn parse(text: &str) -> Option<TubeName> {
        TubeName::new(text.as_bytes())
    }
}

/// A tube's jobs: after this sort key, `primary:id`.
impl CursorKey for ListKey {
    fn text(&self) -> String {
        format!("{}:{}", self.primary, self.id)
    }
    fn parse(text: &str) -> Option<ListKey> {
        let (p, id) = text.split_once(':')?;
        Some(ListKey {
            primary: p.parse().ok()?,
            id: id.parse().ok()?,
        })
    }
}

/// The search: `state:primary:id:tube` (`-:-` for "from the state's start").
impl CursorKey for SearchCursor {
    fn text(&self) -> String {
        let (p, id) = self.after.map_or(("-".to_string(), "-".to_string()), |k| {
            (k.primary.to_string(), k.id.to_string())
        });
        format!("{}:{p}:{id}:{}", self.state.name(), self.tube)
    }
    fn parse(text: &str) -> Option<SearchCursor> {
        let mut parts = text.splitn(4, ':');
        let state: JobState = parts.next()?.parse().ok()?;
        let (p, id) = (parts.next()?, parts.next()?);
        let after = match (p.parse(), id.parse()) {
            (Ok(primary), Ok(id)) => Some(ListKey { primary, id }),
            _ => None,
        };
        let tube = TubeName::new(parts.next()?.as_bytes())?;
        Some(SearchCursor { tube, state, after })
    }
}

/// The clients listing: after this connection id.
pub struct ConnAfter(pub u64);

impl CursorKey for ConnAfter {
    fn text(&self) -> String {
        self.0.to_string()
    }
    fn parse(text: &str) -> Option<ConnAfter> {
        text.parse().ok().map(ConnAfter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round<K: CursorKey>(k: &K) -> K {
        decode::<K>(Some(&encode(k))).unwrap().unwrap()
    }

    #[test]
    fn every_key_comes_back_and_a_foreign_cursor_is_refused() {
        let key = ListKey {
            primary: 1024,
            id: 7,
        };
        assert_eq!(round(&key), key);
        let search = SearchCursor {
            tube: TubeName::new(b"a-b.c(d)").unwrap(),
            state: JobState::Buried,
            after: None,
        };
        assert_eq!(round(&search), search);
        assert_eq!(round(&ConnAfter(812)).0, 812);
        assert!(decode::<ListKey>(Some(&Cursor("not base64!".into()))).is_err());
        assert!(decode::<ListKey>(None).unwrap().is_none());
    }
}
