//! Unit tests of the memory store's schedule cursors: a tick made, deduped by its
//! key, stale, skipped, dropped; and what persistence sees of them: a cut carries
//! each changed cursor with its tick's job (past the cut's limit), a failed cut puts
//! both back, a restore keeps the cursors.

use bytes::Bytes;

use super::{CutLimit, MemoryStore, StoreSnapshot};
use crate::protocol::TubeName;
use crate::protocol::ext::{Key, KeyMode, Millis, PutKey};
use crate::store::keys::KeyState;
use crate::store::{ConnId, Cursor, Fired, NANOS_PER_SEC, NewJob, ScheduleName, Store, TickPut};

const NOW: u64 = 1_700_000_000 * NANOS_PER_SEC;
const C1: ConnId = ConnId(1);

fn name(n: &str) -> ScheduleName {
    ScheduleName::new(n).unwrap()
}

fn tick(n: &str, tick_ms: u64, key: Option<&str>) -> TickPut {
    TickPut {
        schedule: name(n),
        tick_ms,
        job: NewJob {
            tube: TubeName::new(b"cron").unwrap(),
            pri: 10,
            delay_ms: 0,
            ttr_ms: 60_000,
            body: Bytes::from_static(b"tick"),
        },
        key: key.map(|k| PutKey {
            key: Key::new(k.as_bytes()).unwrap(),
            mode: KeyMode::Dedupe,
            window: Millis::ZERO,
        }),
        skipped: 0,
    }
}

async fn cursor(s: &MemoryStore, n: &str) -> Option<Cursor> {
    let all = s.schedule_cursors().await.unwrap();
    all.into_iter().find(|(k, _)| *k == name(n)).map(|(_, c)| c)
}

#[tokio::test]
async fn a_tick_makes_a_job_once_and_advances_the_cursor() {
    let s = MemoryStore::new();
    let Fired::Made(id) = s.fire_tick(&tick("a", 1000, None), NOW).await.unwrap() else {
        panic!("no job made");
    };
    assert!(s.peek(id).await.unwrap().is_some());
    let c = cursor(&s, "a").await.unwrap();
    assert_eq!(
        (c.last_tick_ms, c.last_job, c.fired, c.deduped),
        (1000, id, 1, 0)
    );
    for t in [1000, 999] {
        assert_eq!(
            s.fire_tick(&tick("a", t, None), NOW).await.unwrap(),
            Fired::Stale { last_tick_ms: 1000 }
        );
    }
    let mut next = tick("a", 2000, None);
    next.skipped = 3;
    let Fired::Made(id2) = s.fire_tick(&next, NOW).await.unwrap() else {
        panic!("no job made");
    };
    assert_ne!(id, id2);
    let c = cursor(&s, "a").await.unwrap();
    assert_eq!((c.last_tick_ms, c.fired, c.skipped), (2000, 2, 3));
    assert_eq!(s.totals().await.unwrap().total_jobs, 2);
}

#[tokio::test]
async fn a_keyed_tick_dedupes_while_its_job_waits_and_still_advances() {
    let s = MemoryStore::new();
    let Fired::Made(id) = s
        .fire_tick(&tick("k", 1000, Some("daily")), NOW)
        .await
        .unwrap()
    else {
        panic!("no job made");
    };
    assert_eq!(
        s.fire_tick(&tick("k", 2000, Some("daily")), NOW)
            .await
            .unwrap(),
        Fired::Deduped(id, KeyState::Ready)
    );
    let c = cursor(&s, "k").await.unwrap();
    assert_eq!(
        (c.last_tick_ms, c.last_job, c.fired, c.deduped),
        (2000, id, 1, 1)
    );
    s.reserve(C1, &[TubeName::new(b"cron").unwrap()], NOW)
        .await
        .unwrap();
    s.delete(C1, id, NOW).await.unwrap();
    let Fired::Made(again) = s
        .fire_tick(&tick("k", 3000, Some("daily")), NOW)
        .await
        .unwrap()
    else {
        panic!("the key's job is gone (no window): a new one is made");
    };
    assert_ne!(again, id);
}

#[tokio::test]
async fn skip_to_advances_without_a_job_and_drop_forgets() {
    let s = MemoryStore::new();
    assert!(s.skip_to(&name("s"), 5000, 4).await.unwrap());
    assert!(!s.skip_to(&name("s"), 5000, 1).await.unwrap());
    assert!(matches!(
        s.fire_tick(&tick("s", 4000, None), NOW).await.unwrap(),
        Fired::Stale { last_tick_ms: 5000 }
    ));
    let c = cursor(&s, "s").await.unwrap();
    assert_eq!(
        (c.last_tick_ms, c.last_job, c.fired, c.skipped),
        (5000, 0, 0, 4)
    );
    assert_eq!(s.totals().await.unwrap().total_jobs, 0);
    s.fire_tick(&tick("b", 1, None), NOW).await.unwrap();
    let names: Vec<_> = s.schedule_cursors().await.unwrap();
    assert_eq!(
        names.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["b", "s"],
        "in name order"
    );
    s.drop_cursor(&name("s")).await.unwrap();
    assert!(cursor(&s, "s").await.is_none());
    assert!(matches!(
        s.fire_tick(&tick("s", 4000, None), NOW).await.unwrap(),
        Fired::Made(_)
    ));
}

#[tokio::test]
async fn a_cut_carries_each_cursor_with_its_job_past_the_limit() {
    let s = MemoryStore::journaled();
    s.cut(CutLimit::default());
    // Plain puts fill the cut's limit first.
    for _ in 0..5 {
        s.put(tick("x", 1, None).job, NOW).await.unwrap();
    }
    let mut made = Vec::new();
    for n in ["a", "b", "c"] {
        let Fired::Made(id) = s.fire_tick(&tick(n, 1000, None), NOW).await.unwrap() else {
            panic!("no job made");
        };
        made.push(id);
    }
    let limit = CutLimit {
        records: 4,
        body_bytes: 1 << 20,
    };
    let cut = s.cut(limit);
    assert_eq!(cut.schedules.len(), 3);
    for id in &made {
        assert!(cut.jobs.iter().any(|r| r.id == *id), "job {id} left behind");
    }
    for r in &cut.schedules {
        assert!(!r.gone);
        assert_eq!(r.cursor.last_tick_ms, 1000);
        assert_eq!(r.jobs, vec![r.cursor.last_job]);
    }
    assert_eq!(
        cut.jobs.len(),
        4,
        "the ticks' jobs first, then up to the limit"
    );
    assert!(cut.last_change.is_none(), "plain puts are left for later");
    let rest = s.cut(CutLimit::default());
    assert!(rest.schedules.is_empty());
    assert_eq!(rest.jobs.len(), 4);
    // A dropped cursor is cut as gone.
    s.drop_cursor(&name("a")).await.unwrap();
    let cut = s.cut(CutLimit::default());
    assert_eq!(cut.schedules.len(), 1);
    assert!(cut.schedules[0].gone && cut.schedules[0].name == name("a"));
}

#[tokio::test]
async fn a_failed_cut_puts_cursor_and_job_back_together() {
    let s = MemoryStore::journaled();
    s.cut(CutLimit::default());
    let Fired::Made(id) = s.fire_tick(&tick("a", 1000, None), NOW).await.unwrap() else {
        panic!("no job made");
    };
    let failed = s.cut(CutLimit::default());
    assert_eq!(failed.schedules.len(), 1);
    s.cut_failed(&failed);
    // Plenty of other changes: the retry's limit is taken by none of them first.
    for _ in 0..10 {
        s.put(tick("x", 1, None).job, NOW).await.unwrap();
    }
    let again = s.cut(CutLimit {
        records: 1,
        body_bytes: 1 << 20,
    });
    assert_eq!(again.schedules.len(), 1);
    assert_eq!(again.schedules[0].jobs, vec![id]);
    assert!(again.jobs.iter().any(|r| r.id == id && r.needs_body()));
    // A retry of the same tick is stale: its step did happen.
    assert!(matches!(
        s.fire_tick(&tick("a", 1000, None), NOW).await.unwrap(),
        Fired::Stale { .. }
    ));
}

#[tokio::test]
async fn a_restored_store_keeps_its_cursors_and_notes_none() {
    let c = Cursor {
        last_tick_ms: 7000,
        last_job: 3,
        fired: 5,
        deduped: 1,
        skipped: 2,
    };
    let snap = StoreSnapshot {
        cursors: vec![(name("r"), c)],
        ..StoreSnapshot::default()
    };
    let s = MemoryStore::restored(snap, NOW);
    assert_eq!(cursor(&s, "r").await, Some(c));
    assert!(s.cut(CutLimit::default()).schedules.is_empty());
    assert!(matches!(
        s.fire_tick(&tick("r", 7000, None), NOW).await.unwrap(),
        Fired::Stale { last_tick_ms: 7000 }
    ));
}
