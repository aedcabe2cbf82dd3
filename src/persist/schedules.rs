//! The schedules' definitions (src/schedule, docs/SCHEDULES.md) as a [`Book`]: kept in
//! this process, in `-b DIR/schedules.json`, or in the hash `{P}:schedules` with its
//! counter `{P}:schedules:version`; every instance follows them (the engine's runner
//! fires what the current set says). `--schedules FILE` (TOML, [`ScheduleFile`]) is
//! the seed, written into the home at start. The schedules' cursors are not here: they
//! are the store's, persisted with each tick's job.

use std::path::Path;

use super::book::{self, Book, Kept};
use crate::redis::keys::Keys;
use crate::schedule::{ScheduleDoc, ScheduleError, ScheduleFile, Schedules};

pub use super::book::{ChangeError, Home, HomeError};

/// The process's schedules.
pub type ScheduleBook = Book<Schedules>;

impl Kept for Schedules {
    type Entry = ScheduleDoc;
    type Refused = ScheduleError;
    const WHAT: &'static str = "schedules";
    const FILE_NAME: &'static str = "schedules.json";

    fn redis_keys(keys: &Keys) -> (String, String) {
        (keys.schedules(), keys.schedules_version())
    }
    fn with(&self, name: &str, doc: ScheduleDoc) -> Result<Schedules, ScheduleError> {
        Schedules::with(self, name, &doc)
    }
    fn without(&self, name: &str) -> Option<Schedules> {
        Schedules::without(self, name)
    }
    fn entry(&self, name: &str) -> Option<ScheduleDoc> {
        self.get(name).map(|s| s.doc())
    }
    fn entries(&self) -> Vec<(String, ScheduleDoc)> {
        self.iter().map(|s| (s.name.to_string(), s.doc())).collect()
    }
    fn from_kept(
        entries: Vec<(String, ScheduleDoc)>,
        skipped: impl FnMut(&str, ScheduleError),
    ) -> Schedules {
        Schedules::from_kept(entries, skipped)
    }
    fn seeded(
        mut self,
        seed: Vec<(String, ScheduleDoc)>,
        mut refused: impl FnMut(&str, ScheduleError),
    ) -> Schedules {
        for (name, doc) in seed {
            if let Err(e) = self.define(&name, &doc) {
                refused(&name, e);
            }
        }
        self
    }
    fn file_text(&self) -> Vec<u8> {
        // The file is a JSON object, name → definition (docs are plain values: they
        // always serialize).
        let map: serde_json::Map<String, serde_json::Value> = self
            .iter()
            .map(|s| {
                let doc = serde_json::to_value(s.doc()).unwrap_or_default();
                (s.name.to_string(), doc)
            })
            .collect();
        serde_json::to_vec_pretty(&map).unwrap_or_default()
    }
    fn from_file_text(bytes: &[u8]) -> Result<Vec<(String, ScheduleDoc)>, serde_json::Error> {
        let map: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(bytes)?;
        map.into_iter()
            .map(|(name, doc)| Ok((name, serde_json::from_value(doc)?)))
            .collect()
    }
}

/// The `--schedules` file's schedules, as a seed for [`Book::open`]; `now_ms` is when
/// those whose timing is new count from.
pub fn read_seed(path: &Path, now_ms: u64) -> Result<Vec<(String, ScheduleDoc)>, HomeError> {
    let text = book::read_text(Schedules::WHAT, path)?;
    ScheduleFile::parse(&text, now_ms).map_err(|why| book::damaged(Schedules::WHAT, path, why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_file_home_keeps_schedules_and_a_reseed_keeps_their_timing() {
        let dir = std::env::temp_dir().join(format!("rs-schedules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let _ = std::fs::remove_file(dir.join(Schedules::FILE_NAME));
        let seed = ScheduleFile::parse(
            "[[schedule]]\nname = \"a\"\ntube = \"t\"\nevery_ms = 1000\n",
            100,
        )
        .unwrap();
        let book = ScheduleBook::open(Home::file::<Schedules>(&dir), seed)
            .await
            .unwrap();
        let mut doc = book.current().get("a").unwrap().doc();
        doc.body = Some("b".into());
        doc.changed_ms = 500;
        book.set("b", doc).await.unwrap();

        let reseed = ScheduleFile::parse(
            "[[schedule]]\nname = \"a\"\ntube = \"t\"\nevery_ms = 1000\n",
            900,
        )
        .unwrap();
        let again = ScheduleBook::open(Home::file::<Schedules>(&dir), reseed)
            .await
            .unwrap();
        let set = again.current();
        assert_eq!(set.len(), 2);
        assert_eq!(set.get("a").unwrap().changed_ms, 100, "same timing: kept");
        assert_eq!(set.get("b").unwrap().changed_ms, 500);
        assert!(again.remove("b").await.unwrap());
        let third = ScheduleBook::open(Home::file::<Schedules>(&dir), Vec::new())
            .await
            .unwrap();
        assert_eq!(third.current().len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
