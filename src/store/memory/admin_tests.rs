//! Unit tests of the memory store's operator API: listing order and cursors, edits and
//! what a cut carries of them (a move leaves its old tube's keys in the same cut).

use bytes::Bytes;

use super::{CutLimit, MemoryStore, Stored};
use crate::protocol::TubeName;
use crate::store::{
    ConnId, Edit, Edited, JobState, ListKey, ListQuery, NANOS_PER_SEC, NewJob, Store,
};

const NOW: u64 = 1_700_000_000 * NANOS_PER_SEC;
const C1: ConnId = ConnId(1);

fn tube(name: &str) -> TubeName {
    TubeName::new(name.as_bytes()).unwrap()
}

fn job(t: &str, pri: u32, delay: u32, body: &'static [u8]) -> NewJob {
    NewJob {
        tube: tube(t),
        pri,
        delay_ms: crate::time::secs_as_ms(delay),
        ttr_ms: 60_000,
        body: Bytes::from_static(body),
    }
}

fn query(t: &str, state: JobState, after: Option<ListKey>, limit: usize) -> ListQuery {
    ListQuery {
        tube: tube(t),
        state,
        after,
        limit,
        scan: usize::MAX,
        contains: None,
    }
}

/// Every job of `t` in `state`, page by page of `limit`.
async fn list_all(s: &MemoryStore, t: &str, state: JobState, limit: usize) -> Vec<u64> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        let page = s
            .list_jobs(&query(t, state, after, limit), NOW)
            .await
            .unwrap();
        assert!(page.jobs.len() <= limit);
        out.extend(page.jobs.iter().map(|e| e.info.id));
        match page.next {
            Some(k) => after = Some(k),
            None => return out,
        }
    }
}

#[tokio::test]
async fn ready_listing_is_reserve_order_across_pages() {
    let s = MemoryStore::new();
    for i in 0..200u32 {
        s.put(job("a", (i * 7919) % 13, 0, b"x"), NOW)
            .await
            .unwrap();
    }
    let listed = list_all(&s, "a", JobState::Ready, 7).await;
    let mut reserved = Vec::new();
    while let Some(r) = s.reserve(C1, &[tube("a")], NOW).await.unwrap() {
        reserved.push(r.id);
    }
    assert_eq!(listed.len(), 200);
    assert_eq!(listed, reserved);
    let held = list_all(&s, "a", JobState::Reserved, 50).await;
    assert_eq!(held.len(), 200, "reserved by deadline, then id");
}

#[tokio::test]
async fn buried_and_delayed_listings_are_kick_order() {
    let s = MemoryStore::new();
    for d in [5u32, 3, 9, 1, 3] {
        s.put(job("a", 1, d, b"x"), NOW).await.unwrap();
    }
    let delayed = list_all(&s, "a", JobState::Delayed, 2).await;
    let mut ids = Vec::new();
    for id in 6..=10 {
        s.put(job("a", 10 - id as u32, 0, b"x"), NOW).await.unwrap();
        ids.push(id);
    }
    // Bury in an order unlike their priorities or ids.
    for id in [8u64, 6, 10, 7, 9] {
        assert!(matches!(
            s.edit(id, &Edit::Bury, NOW).await.unwrap(),
            Edited::Done { .. }
        ));
    }
    let buried = list_all(&s, "a", JobState::Buried, 3).await;
    assert_eq!(buried, vec![8, 6, 10, 7, 9]);
    let mut kicked = Vec::new();
    for _ in 0..5 {
        s.kick(&tube("a"), 1, NOW).await.unwrap();
        let page = s
            .list_jobs(&query("a", JobState::Buried, None, 100), NOW)
            .await
            .unwrap();
        let left: Vec<u64> = page.jobs.iter().map(|e| e.info.id).collect();
        let gone = buried
            .iter()
            .find(|id| !left.contains(id) && !kicked.contains(*id));
        kicked.push(*gone.unwrap());
    }
    assert_eq!(kicked, buried);
    // Delayed: by due time, then id; kick takes them so once nothing is buried.
    assert_eq!(delayed, vec![4, 2, 5, 1, 3]);
}

#[tokio::test]
async fn search_is_bounded_by_scan_and_resumes() {
    let s = MemoryStore::new();
    for i in 0..100u32 {
        let body: &'static [u8] = if i % 10 == 0 { b"needle here" } else { b"hay" };
        s.put(job("a", 1, 0, body), NOW).await.unwrap();
    }
    let mut q = query("a", JobState::Ready, None, 1000);
    q.scan = 25;
    q.contains = Some(Bytes::from_static(b"needle"));
    let mut found = 0;
    let mut pages = 0;
    loop {
        let page = s.list_jobs(&q, NOW).await.unwrap();
        assert!(page.scanned <= 25);
        found += page.jobs.len();
        pages += 1;
        match page.next {
            Some(k) => q.after = Some(k),
            None => break,
        }
    }
    assert_eq!((found, pages), (10, 4));
}

#[tokio::test]
async fn edits_keep_id_and_counters_and_refuse_reserved() {
    let s = MemoryStore::journaled();
    let id = s.put(job("a", 5, 0, b"body"), NOW).await.unwrap();
    s.reserve(C1, &[tube("a")], NOW).await.unwrap();
    assert_eq!(
        s.edit(id, &Edit::Move(tube("b")), NOW).await.unwrap(),
        Edited::Conflict(JobState::Reserved)
    );
    s.release(C1, id, 5, 30_000, NOW).await.unwrap();
    s.cut(CutLimit::default());
    let Edited::Done { entry, ready_in } = s.edit(id, &Edit::Move(tube("b")), NOW).await.unwrap()
    else {
        panic!("move refused")
    };
    assert_eq!(ready_in, None);
    assert_eq!(
        (
            entry.info.id,
            entry.info.state,
            entry.info.pri,
            entry.info.reserves,
            entry.info.releases
        ),
        (id, JobState::Delayed, 5, 1, 1)
    );
    assert_eq!(
        entry.info.deadline,
        Some(NOW + 30 * NANOS_PER_SEC),
        "remaining delay kept"
    );
    let c = s.cut(CutLimit::default());
    assert_eq!(c.jobs.len(), 1);
    assert_eq!(c.jobs[0].tube, tube("b"));
    assert_eq!(
        c.jobs[0].was,
        Stored::Never,
        "written whole in its new tube"
    );
    assert_eq!(c.moved.len(), 1);
    assert_eq!(
        (c.moved[0].tube.clone(), c.moved[0].was),
        (tube("a"), Stored::As(JobState::Delayed))
    );
    assert!(
        c.tubes.iter().any(|t| t.name == tube("a") && !t.kept),
        "emptied tube dropped"
    );
    let Edited::Done { ready_in, .. } = s.edit(id, &Edit::Delay(0), NOW).await.unwrap() else {
        panic!()
    };
    assert_eq!(ready_in, Some(tube("b")));
    let Edited::Done { entry, .. } = s.edit(id, &Edit::Pri(3), NOW).await.unwrap() else {
        panic!()
    };
    assert_eq!((entry.info.pri, entry.key.primary), (3, 3));
    let Edited::Done { entry, .. } = s.edit(id, &Edit::Bury, NOW).await.unwrap() else {
        panic!()
    };
    assert_eq!((entry.info.state, entry.info.buries), (JobState::Buried, 1));
    assert_eq!(
        s.edit(id, &Edit::Bury, NOW).await.unwrap(),
        Edited::Conflict(JobState::Buried)
    );
    assert_eq!(
        s.edit(999, &Edit::Bury, NOW).await.unwrap(),
        Edited::NotFound
    );
}

#[tokio::test]
async fn a_move_back_and_a_delete_after_a_move_leave_nothing_behind() {
    let s = MemoryStore::journaled();
    let id = s.put(job("a", 5, 0, b"body"), NOW).await.unwrap();
    let keep = s.put(job("a", 5, 0, b"body"), NOW).await.unwrap();
    s.cut(CutLimit::default());
    s.edit(id, &Edit::Move(tube("b")), NOW).await.unwrap();
    s.edit(id, &Edit::Move(tube("a")), NOW).await.unwrap();
    let c = s.cut(CutLimit::default());
    assert!(c.moved.is_empty(), "back where persistence holds it");
    assert_eq!(c.jobs[0].was, Stored::As(JobState::Ready));
    s.edit(id, &Edit::Move(tube("b")), NOW).await.unwrap();
    s.delete(C1, id, NOW).await.unwrap();
    let c = s.cut(CutLimit::default());
    assert!(c.jobs.is_empty() && c.moved.is_empty());
    assert_eq!(c.gone.len(), 1);
    assert_eq!((c.gone[0].id, c.gone[0].tube.clone()), (id, tube("a")));
    let _ = keep;
}
