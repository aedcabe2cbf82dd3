//! Retention's records in `-b DIR` (kinds 11 and 12): a deleted job's record written
//! with its delete comes back after a kill-equivalent reopen (history, figures, key,
//! body when kept), an evicted one does not; the limits given at start evict what is
//! beyond them, and that eviction is logged; compaction rewrites the records it must
//! keep; a damaged record is damage with its source; a cut coalesces a record kept and
//! evicted between two cuts into its removal; a start with retention off forgets them.

use std::path::Path;

use bytes::Bytes;

use super::format::{self, Damage, Record};
use super::{BinlogConfig, Fsync, open};
use crate::protocol::TubeName;
use crate::protocol::ext::{Key, KeyMode, Millis, PutKey};
use crate::store::memory::CutLimit;
use crate::store::retention::{EventKind, Retained, RetentionLimits};
use crate::store::{ConnId, JobId, KeyedPut, MemoryStore, NANOS_PER_SEC, NewJob, Store};

const NOW: u64 = 1_700_000_000 * NANOS_PER_SEC;
const A: ConnId = ConnId(7);
const B: ConnId = ConnId(8);

fn limits(max_jobs: usize) -> RetentionLimits {
    RetentionLimits {
        keep_ms: 3_600_000,
        max_jobs,
        max_bytes: 64 << 20,
        bodies: true,
    }
}

fn job(body: &[u8]) -> NewJob {
    NewJob {
        tube: TubeName::new(b"mail").unwrap(),
        pri: 9,
        delay_ms: 0,
        ttr_ms: 60_000,
        body: Bytes::copy_from_slice(body),
    }
}

fn tempdir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("redstalk-binret-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Open `dir` (as a start after kill -9 does: whatever the last run wrote) and restore
/// a store from it.
fn reopen(dir: &Path, file_size: u64) -> (MemoryStore, super::BinlogSink) {
    let opened = open(BinlogConfig {
        dir: dir.to_path_buf(),
        fsync: Fsync::Never,
        file_size,
    })
    .unwrap();
    (MemoryStore::restored(opened.snapshot, NOW), opened.sink)
}

async fn flush(s: &MemoryStore, sink: &mut super::BinlogSink) {
    let cut = s.cut(CutLimit::default());
    sink.write(&cut).await.unwrap();
}

async fn record(s: &MemoryStore, id: JobId) -> Option<Retained> {
    s.retained(id, NOW).await.unwrap()
}

/// Five jobs, one keyed, with a history of several events each, deleted in order by
/// conn B: their ids, oldest delete first.
async fn delete_five(s: &MemoryStore) -> Vec<JobId> {
    let mut ids = Vec::new();
    for n in 0..5u8 {
        let id = if n == 2 {
            let key = PutKey {
                key: Key::new(b"order-2").unwrap(),
                mode: KeyMode::Dedupe,
                window: Millis::ZERO,
            };
            let Ok(KeyedPut::Inserted(id)) = s.put_keyed(job(b"keyed"), &key, NOW).await else {
                panic!("no keyed job made");
            };
            id
        } else {
            s.put(job(&[b'a' + n; 10]), NOW).await.unwrap()
        };
        let at = NOW + u64::from(n) * NANOS_PER_SEC;
        s.reserve_job(A, id, at).await.unwrap().unwrap();
        assert!(s.release(A, id, 3, 0, at).await.unwrap().is_some());
        s.reserve_job(B, id, at).await.unwrap().unwrap();
        assert!(s.bury(B, id, 4, at).await.unwrap());
        s.kick_job(id, at).await.unwrap().unwrap();
        assert!(s.delete(B, id, at).await.unwrap());
        ids.push(id);
    }
    ids
}

#[tokio::test]
async fn retained_records_survive_a_restart_and_compaction() {
    let dir = tempdir("restart");
    let file_size = 8 << 10;
    let (s, mut sink) = reopen(&dir, file_size);
    s.set_retention(limits(3));
    let ids = delete_five(&s).await;
    flush(&s, &mut sink).await;
    let mut kept = Vec::new();
    for &id in &ids[2..] {
        kept.push(record(&s, id).await.expect("a record kept"));
    }
    assert_eq!(kept[0].key.as_ref().map(|k| k.as_str()), Some("order-2"));
    let kinds: Vec<EventKind> = kept[0].history.events().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::Put,
            EventKind::Reserve,
            EventKind::Release,
            EventKind::Reserve,
            EventKind::Bury,
            EventKind::Kick,
            EventKind::Delete
        ]
    );
    assert_eq!(kept[0].body.as_deref(), Some(&b"keyed"[..]));
    assert_eq!(kept[0].figures.reserves, 2);
    drop(sink);

    // Back from the log alone (no clean stop wrote anything more): the same records,
    // held until the limits are set; the evicted ones are not there.
    let (s, mut sink) = reopen(&dir, file_size);
    for r in &kept {
        assert_eq!(record(&s, r.id).await.as_ref(), Some(r));
    }
    for &id in &ids[..2] {
        assert_eq!(record(&s, id).await, None, "evicted record {id} came back");
    }
    let tube = TubeName::new(b"mail").unwrap();
    let by_key = s
        .retained_by_key(&tube, &Key::new(b"order-2").unwrap(), NOW)
        .await
        .unwrap();
    assert_eq!(by_key.map(|r| r.id), Some(ids[2]));

    // Limits tighter than the log's set: the oldest goes at start, and is logged so.
    s.set_retention(limits(2));
    assert_eq!(record(&s, ids[2]).await, None);
    flush(&s, &mut sink).await;
    drop(sink);
    let (s, mut sink) = reopen(&dir, file_size);
    s.set_retention(limits(2));
    assert_eq!(
        record(&s, ids[2]).await,
        None,
        "an eviction at start was not logged"
    );
    for r in &kept[1..] {
        assert_eq!(record(&s, r.id).await.as_ref(), Some(r));
    }

    // Churn that deletes nothing (one job released over and over) makes the log
    // compact: the files holding the records go, the records are rewritten.
    let id = s.put(job(b"churn"), NOW).await.unwrap();
    for _ in 0..3_000 {
        s.reserve_job(A, id, NOW).await.unwrap().unwrap();
        assert!(s.release(A, id, 1, 0, NOW).await.unwrap().is_some());
        flush(&s, &mut sink).await;
    }
    let first = super::replay::list_files(&dir).unwrap()[0];
    assert!(
        first > 3,
        "no compaction deleted the first files (first: {first})"
    );
    drop(sink);
    let (s, _sink) = reopen(&dir, file_size);
    for r in &kept[1..] {
        assert_eq!(
            record(&s, r.id).await.as_ref(),
            Some(r),
            "lost to compaction"
        );
    }
    assert_eq!(record(&s, ids[2]).await, None);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_record_kept_and_evicted_between_two_cuts_is_a_removal() {
    let s = MemoryStore::journaled();
    s.set_retention(limits(1));
    s.cut(CutLimit::default());
    let first = s.put(job(b"1"), NOW).await.unwrap();
    assert!(s.delete(A, first, NOW).await.unwrap());
    let second = s.put(job(b"2"), NOW).await.unwrap();
    assert!(s.delete(A, second, NOW).await.unwrap());
    let cut = s.cut(CutLimit::default());
    assert_eq!(
        cut.retained.iter().map(|r| r.id).collect::<Vec<_>>(),
        [second]
    );
    assert_eq!(cut.retained_gone, [first]);
    // A failed write: the next cut carries them again.
    s.cut_failed(&cut);
    let again = s.cut(CutLimit::default());
    assert_eq!(again.retained, cut.retained);
    assert_eq!(again.retained_gone, cut.retained_gone);
    assert!(s.cut(CutLimit::default()).retained.is_empty());
}

#[test]
fn records_round_trip_and_a_damaged_history_is_damage_with_its_source() {
    let mut history = crate::store::retention::History::default();
    history.push(crate::store::retention::Event {
        at_ms: 1_700_000_000_000,
        kind: EventKind::Put,
        conn: 0,
    });
    let r = Retained {
        id: 12,
        tube: TubeName::new(b"t").unwrap(),
        key: Some(crate::store::keys::Key::new(b"k").unwrap()),
        deleted_ms: 1_700_000_000_500,
        figures: Default::default(),
        history,
        body_len: 3,
        body: Some(Bytes::from_static(b"abc")),
    };
    for r in [
        r.clone(),
        Retained {
            key: None,
            body: None,
            ..r.clone()
        },
    ] {
        let mut buf = Vec::new();
        let n = format::put_retained(&mut buf, &r);
        assert_eq!(n, format::retained_len(&r));
        format::put_retained_gone(&mut buf, r.id);
        let file = Bytes::from(buf);
        let (back, len) = format::next(&file, 0).unwrap();
        assert_eq!(back, Record::Retained(Box::new(r.clone())));
        assert_eq!(
            format::next(&file, len).unwrap().0,
            Record::RetainedGone(12)
        );
    }
    // The history's event code 'p' made unknown, the checksum made right again.
    let mut buf = Vec::new();
    format::put_retained(&mut buf, &r);
    let text = r.history.encode().into_bytes();
    let at = buf.windows(text.len()).position(|w| w == text).unwrap();
    let code = at + text.iter().position(|&b| b == b'p').unwrap();
    buf[code] = b'Z';
    let crc = crc32fast::hash(&buf[format::FRAME_LEN..]);
    buf[4..8].copy_from_slice(&crc.to_le_bytes());
    let damage = format::next(&Bytes::from(buf), 0).unwrap_err();
    assert!(matches!(damage, Damage::History(_)), "{damage:?}");
    assert!(std::error::Error::source(&damage).is_some());
}

/// A start with retention off evicts every record the log holds, and logs it: the
/// records do not come back when a later start turns retention on again.
#[tokio::test]
async fn a_start_with_retention_off_forgets_the_records() {
    let dir = tempdir("off");
    let (s, mut sink) = reopen(&dir, 64 << 10);
    s.set_retention(limits(10));
    let ids = delete_five(&s).await;
    flush(&s, &mut sink).await;
    drop(sink);
    let (s, mut sink) = reopen(&dir, 64 << 10);
    s.set_retention(RetentionLimits::OFF);
    flush(&s, &mut sink).await;
    drop(sink);
    let (s, _sink) = reopen(&dir, 64 << 10);
    s.set_retention(limits(10));
    for id in ids {
        assert_eq!(record(&s, id).await, None, "record {id} came back");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
