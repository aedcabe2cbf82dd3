//! Unit tests of the memory store's keys: the window sweep and its bound, a replace
//! keeping the job's (pri, id) place, and what a cut and a restore carry of keys.

use bytes::Bytes;

use super::{CutLimit, MemoryStore, StoreSnapshot};
use crate::protocol::TubeName;
use crate::protocol::ext::{Key, KeyMode, Millis, PutKey};
use crate::store::keys::{KeySlot, KeyState};
use crate::store::{ConnId, KeyLimits, KeyOp, KeyOutcome, KeyedPut, NANOS_PER_SEC, NewJob, Store};

const NOW: u64 = 1_700_000_000 * NANOS_PER_SEC;
const C1: ConnId = ConnId(1);

fn tube() -> TubeName {
    TubeName::new(b"t").unwrap()
}

fn key(k: &str) -> Key {
    Key::new(k.as_bytes()).unwrap()
}

fn job(pri: u32, body: &'static [u8]) -> NewJob {
    NewJob {
        tube: tube(),
        pri,
        delay_ms: 0,
        ttr_ms: 60_000,
        body: Bytes::from_static(body),
    }
}

fn pk(k: &str, mode: KeyMode, window_ms: u64) -> PutKey {
    PutKey {
        key: key(k),
        mode,
        window: Millis::new(window_ms).unwrap(),
    }
}

async fn put(s: &MemoryStore, pri: u32, body: &'static [u8], key: PutKey) -> KeyedPut {
    s.put_keyed(job(pri, body), &key, NOW).await.unwrap()
}

async fn find(s: &MemoryStore, k: &str, now: u64) -> KeyOutcome {
    s.by_key(C1, &tube(), &key(k), KeyOp::Find, now)
        .await
        .unwrap()
}

#[tokio::test]
async fn the_timer_ends_windows_and_the_bound_ends_the_soonest_early() {
    let s = MemoryStore::new();
    s.set_key_limits(KeyLimits {
        windows_max: 2,
        ..KeyLimits::default()
    });
    for (i, k) in ["a", "b", "c"].into_iter().enumerate() {
        let KeyedPut::Inserted(id) =
            put(&s, 0, b"x", pk(k, KeyMode::Dedupe, 1000 + i as u64)).await
        else {
            panic!("a new key makes a job");
        };
        assert!(s.delete(C1, id, NOW).await.unwrap());
    }
    // Three windows asked for, two kept: `a`'s, the soonest to end, ended early.
    assert_eq!(s.key_windows_evicted(), 1);
    assert_eq!(find(&s, "a", NOW).await, KeyOutcome::NotFound);
    assert_eq!(
        find(&s, "b", NOW).await,
        KeyOutcome::Found(2, KeyState::Deleted)
    );
    let b_end = NOW + 1001 * 1_000_000;
    assert_eq!(s.next_deadline().await.unwrap(), Some(b_end));
    s.tick(b_end).await.unwrap();
    assert_eq!(find(&s, "b", b_end).await, KeyOutcome::NotFound);
    assert_eq!(
        find(&s, "c", b_end).await,
        KeyOutcome::Found(3, KeyState::Deleted)
    );
    s.tick(b_end + 1_000_000).await.unwrap();
    assert_eq!(s.next_deadline().await.unwrap(), None, "no window left");
    assert_eq!(s.lock().keys.get(&tube(), &key("c")), KeySlot::Free);
}

#[tokio::test]
async fn a_replace_keeps_the_jobs_place_by_priority_and_id() {
    let s = MemoryStore::new();
    let rpl = |k| pk(k, KeyMode::Replace, 0);
    assert_eq!(put(&s, 5, b"old", rpl("k")).await, KeyedPut::Inserted(1));
    assert_eq!(
        put(&s, 5, b"younger", rpl("o")).await,
        KeyedPut::Inserted(2)
    );
    // Replaced at the same priority: it still goes before the younger job.
    assert_eq!(
        put(&s, 5, b"new", rpl("k")).await,
        KeyedPut::Replaced(1, KeyState::Ready)
    );
    let r = s.reserve(C1, &[tube()], NOW).await.unwrap().unwrap();
    assert_eq!((r.id, &r.body[..]), (1, &b"new"[..]));
    s.release(C1, 1, 5, 0, NOW).await.unwrap();
    // A lower priority sends it behind.
    put(&s, 9, b"newer", rpl("k")).await;
    let r = s.reserve(C1, &[tube()], NOW).await.unwrap().unwrap();
    assert_eq!(r.id, 2);
}

#[tokio::test]
async fn cuts_carry_keys_and_a_restore_keeps_live_keys_and_open_windows() {
    let s = MemoryStore::journaled();
    let KeyedPut::Inserted(live) = put(&s, 0, b"l", pk("live", KeyMode::Dedupe, 0)).await else {
        panic!("new");
    };
    let KeyedPut::Inserted(gone) = put(&s, 0, b"g", pk("gone", KeyMode::Dedupe, 5000)).await else {
        panic!("new");
    };
    assert!(s.delete(C1, gone, NOW).await.unwrap());
    let c = s.cut(CutLimit::default());
    let window = KeySlot::Window {
        id: gone,
        until: NOW + 5 * NANOS_PER_SEC,
    };
    assert!(
        c.keys
            .iter()
            .any(|k| k.key == key("gone") && k.slot == window)
    );
    assert!(
        c.keys
            .iter()
            .any(|k| k.key == key("live") && k.slot == KeySlot::Live(live))
    );
    let record = c.jobs.iter().find(|r| r.id == live).unwrap();
    assert_eq!(
        record.key.as_ref().map(|k| k.key.clone()),
        Some(key("live"))
    );
    let snap = |windows| StoreSnapshot {
        jobs: c.jobs.clone(),
        tubes: c.tubes.iter().filter(|t| t.kept).cloned().collect(),
        counters: c.counters,
        windows,
        cursors: Vec::new(),
        retained: Vec::new(),
    };
    let windows: Vec<_> = c
        .keys
        .iter()
        .filter(|k| k.key == key("gone"))
        .cloned()
        .collect();
    let r = MemoryStore::restored(snap(windows.clone()), NOW + NANOS_PER_SEC);
    assert_eq!(
        find(&r, "live", NOW).await,
        KeyOutcome::Found(live, KeyState::Ready)
    );
    assert_eq!(
        find(&r, "gone", NOW).await,
        KeyOutcome::Found(gone, KeyState::Deleted)
    );
    // Restored after the window's end: the key is free, and the first cut frees it.
    let late = NOW + 6 * NANOS_PER_SEC;
    let r = MemoryStore::restored(snap(windows), late);
    assert_eq!(find(&r, "gone", late).await, KeyOutcome::NotFound);
    let first = r.cut(CutLimit::default());
    assert!(
        first
            .keys
            .iter()
            .any(|k| k.key == key("gone") && k.slot == KeySlot::Free)
    );
}
