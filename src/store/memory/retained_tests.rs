//! Unit tests of the memory store's retention: the timer wakes for the oldest record's
//! end and the tick evicts it; a job released many times keeps a bounded history.

use bytes::Bytes;

use super::MemoryStore;
use crate::protocol::TubeName;
use crate::store::retention::{EventKind, HISTORY_HEAD, HISTORY_TAIL, RetentionLimits};
use crate::store::{ConnId, NANOS_PER_SEC, NewJob, Store};

const NOW: u64 = 1_700_000_000 * NANOS_PER_SEC;
const C1: ConnId = ConnId(1);

fn job() -> NewJob {
    NewJob {
        tube: TubeName::new(b"t").unwrap(),
        pri: 1,
        delay_ms: 0,
        ttr_ms: 60_000,
        body: Bytes::from_static(b"body"),
    }
}

fn limits(keep_ms: u64) -> RetentionLimits {
    RetentionLimits {
        keep_ms,
        ..RetentionLimits::OFF
    }
}

#[tokio::test]
async fn the_timer_wakes_to_evict_the_oldest_record() {
    let s = MemoryStore::new();
    s.set_retention(limits(10_000));
    let id = s.put(job(), NOW).await.unwrap();
    assert!(s.delete(C1, id, NOW).await.unwrap());
    let end = s.next_deadline().await.unwrap().expect("the record's end");
    assert_eq!(end, NOW + 10_001 * 1_000_000);
    s.tick(end - 1_000_000).await.unwrap();
    assert_eq!(s.retention_figures().await.unwrap().records, 1);
    s.tick(end).await.unwrap();
    assert_eq!(s.retention_figures().await.unwrap().records, 0);
    assert_eq!(s.next_deadline().await.unwrap(), None);
}

#[tokio::test]
async fn a_job_released_often_keeps_its_first_and_latest_events() {
    let s = MemoryStore::new();
    s.set_retention(limits(60_000));
    let id = s.put(job(), NOW).await.unwrap();
    for n in 0..100u64 {
        let at = NOW + n * NANOS_PER_SEC;
        s.reserve_job(C1, id, at).await.unwrap().expect("reserved");
        s.release(C1, id, 1, 0, at)
            .await
            .unwrap()
            .expect("released");
    }
    assert!(s.delete(C1, id, NOW + 100 * NANOS_PER_SEC).await.unwrap());
    let r = s
        .retained(id, NOW + 100 * NANOS_PER_SEC)
        .await
        .unwrap()
        .expect("kept");
    let events: Vec<_> = r.history.events().map(|e| e.kind).collect();
    assert_eq!(events.len(), HISTORY_HEAD + HISTORY_TAIL);
    assert_eq!(events[0], EventKind::Put);
    assert_eq!(events.last(), Some(&EventKind::Delete));
    // put + 200 reserve/release + delete = 202 events; 32 kept.
    assert_eq!(r.history.dropped(), 202 - 32);
    assert_eq!(r.figures.releases, 100);
    s.set_retention(RetentionLimits::OFF);
    assert!(
        s.retained(id, NOW).await.unwrap().is_none(),
        "off drops all"
    );
}
