//! Unit tests of the memory store's journal: what a cut carries, how changes coalesce,
//! what a failed write leaves, and what a restored store starts from.

use bytes::Bytes;

use super::{Cut, CutLimit, MemoryStore, StoreSnapshot, Stored};
use crate::protocol::TubeName;
use crate::store::{ConnId, JobState, NANOS_PER_SEC, NewJob, Store};

const NOW: u64 = 1_700_000_000 * NANOS_PER_SEC;
const C1: ConnId = ConnId(1);

fn tube(name: &str) -> TubeName {
    TubeName::new(name.as_bytes()).unwrap()
}

fn job(t: &str, pri: u32, delay: u32) -> NewJob {
    NewJob {
        tube: tube(t),
        pri,
        delay_ms: crate::time::secs_as_ms(delay),
        ttr_ms: 60_000,
        body: Bytes::from_static(b"body"),
    }
}

fn cut(s: &MemoryStore) -> Cut {
    s.cut(CutLimit::default())
}

#[tokio::test]
async fn a_cut_carries_each_changed_job_once_as_it_is_now() {
    let s = MemoryStore::journaled();
    let first = cut(&s);
    assert!(
        first.last_change.is_some(),
        "the default tube is the first change"
    );
    let id = s.put(job("a", 5, 0), NOW).await.unwrap();
    s.reserve(C1, &[tube("a")], NOW).await.unwrap();
    s.release(C1, id, 7, 0, NOW).await.unwrap();
    let c = cut(&s);
    assert_eq!(c.jobs.len(), 1, "three changes of one job, one record");
    let r = &c.jobs[0];
    assert_eq!(
        (r.id, r.state, r.pri, r.releases, r.reserves),
        (id, JobState::Ready, 7, 1, 1)
    );
    assert_eq!(r.was, Stored::Never);
    assert!(r.needs_body());
    assert_eq!(c.last_change, Some(s.last_change()));
    assert!(c.tubes.iter().any(|t| t.name == tube("a") && t.kept));
    assert_eq!(c.counters.last_id, id);
    // Nothing changed since: the next cut is empty, and the job is stored as ready.
    let again = cut(&s);
    assert!(again.is_empty());
    s.delete(C1, id, NOW).await.unwrap();
    let c = cut(&s);
    assert_eq!(c.gone.len(), 1);
    assert_eq!(c.gone[0].was, Stored::As(JobState::Ready));
    assert!(c.tubes.iter().any(|t| t.name == tube("a") && !t.kept));
}

#[tokio::test]
async fn a_job_put_and_deleted_between_cuts_never_reaches_persistence() {
    let s = MemoryStore::journaled();
    cut(&s);
    let id = s.put(job("a", 5, 0), NOW).await.unwrap();
    assert!(s.delete(C1, id, NOW).await.unwrap());
    let c = cut(&s);
    assert!(c.jobs.is_empty() && c.gone.is_empty(), "{c:?}");
    // The id is used up; the tube came and went (nothing refers to it), so persistence
    // is told it is not kept.
    assert_eq!(c.counters.last_id, id);
    assert!(c.tubes.iter().any(|t| t.name == tube("a") && !t.kept));
}

#[tokio::test]
async fn a_failed_cut_is_rewritten_whole_by_the_next() {
    let s = MemoryStore::journaled();
    cut(&s);
    let a = s.put(job("a", 5, 0), NOW).await.unwrap();
    let b = s.put(job("a", 6, 0), NOW).await.unwrap();
    let failed = cut(&s);
    assert_eq!(failed.jobs.len(), 2);
    // While the write was out, b was deleted.
    s.delete(C1, b, NOW).await.unwrap();
    s.cut_failed(&failed);
    let retry = cut(&s);
    let ra = retry.jobs.iter().find(|r| r.id == a).expect("a rewritten");
    assert_eq!(ra.was, Stored::Unknown, "it may or may not have landed");
    assert!(ra.needs_body());
    let gb = retry.gone.iter().find(|g| g.id == b).expect("b's removal");
    assert_eq!(
        gb.was,
        Stored::Unknown,
        "b may have landed: remove it from every set"
    );
    assert!(retry.last_change.is_some());
}

#[tokio::test]
async fn a_cut_is_bounded_and_the_rest_follows() {
    let s = MemoryStore::journaled();
    cut(&s);
    for i in 0..10 {
        s.put(job("a", i, 0), NOW).await.unwrap();
    }
    let limit = CutLimit {
        records: 4,
        body_bytes: 1 << 20,
    };
    let mut seen = 0;
    let mut cuts = 0;
    loop {
        let c = s.cut(limit);
        cuts += 1;
        assert!(c.jobs.len() <= 4);
        seen += c.jobs.len();
        if c.last_change.is_some() {
            // Tubes come with the last part only, once no job of theirs is left over.
            assert!(!c.tubes.is_empty());
            break;
        }
        assert!(c.tubes.is_empty());
    }
    assert_eq!((seen, cuts), (10, 3));
}

#[tokio::test]
async fn a_restored_store_gives_reserved_jobs_back_and_keeps_the_rest() {
    let s = MemoryStore::journaled();
    cut(&s);
    let ready = s.put(job("a", 5, 0), NOW).await.unwrap();
    let delayed = s.put(job("a", 6, 100), NOW).await.unwrap();
    let held = s.put(job("b", 1, 0), NOW).await.unwrap();
    let b1 = s.put(job("c", 9, 0), NOW).await.unwrap();
    let b2 = s.put(job("c", 9, 0), NOW).await.unwrap();
    for id in [b2, b1] {
        s.reserve_job(C1, id, NOW).await.unwrap();
        s.bury(C1, id, 9, 0).await.unwrap();
    }
    s.reserve(C1, &[tube("b")], NOW).await.unwrap();
    s.pause(&tube("a"), 30_000, NOW).await.unwrap();
    // Everything as persistence has it, in a snapshot (what a loader reads back).
    let c = cut(&s);
    let snap = StoreSnapshot {
        jobs: c.jobs.clone(),
        tubes: c.tubes.iter().filter(|t| t.kept).cloned().collect(),
        counters: c.counters,
        windows: Vec::new(),
        cursors: Vec::new(),
        retained: Vec::new(),
    };
    let later = NOW + 5 * NANOS_PER_SEC;
    let r = MemoryStore::restored(snap, later);
    let info = async |id| r.job_info(id, later).await.unwrap().unwrap();
    assert_eq!(info(ready).await.state, JobState::Ready);
    let d = info(delayed).await;
    assert_eq!(
        (d.state, d.deadline),
        (JobState::Delayed, Some(NOW + 100 * NANOS_PER_SEC))
    );
    let h = info(held).await;
    assert_eq!(
        (h.state, h.reserves),
        (JobState::Ready, 1),
        "given back, counters kept"
    );
    // Buried in bury order (b2 first), not id order.
    assert_eq!(
        r.peek_buried(&tube("c")).await.unwrap().map(|(id, _)| id),
        Some(b2)
    );
    let t = r.tube_info(&tube("a"), later).await.unwrap().unwrap();
    assert_eq!(t.pause_until, NOW + 30 * NANOS_PER_SEC);
    // Ids continue; the first cut writes the job given back and every tube, no more.
    let first = cut(&r);
    assert_eq!(
        first.jobs.iter().map(|j| j.id).collect::<Vec<_>>(),
        vec![held]
    );
    assert_eq!(first.jobs[0].was, Stored::As(JobState::Reserved));
    assert!(!first.tubes.is_empty());
    let next = r.put(job("a", 0, 0), later).await.unwrap();
    assert!(next > b2);
}

#[tokio::test]
async fn a_put_whose_body_was_written_ahead_is_cut_without_it() {
    let s = MemoryStore::journaled();
    cut(&s);
    let (id, _) = s.begin_staged(&tube("big"));
    // While the body is on its way the job is nowhere, and the tube's keys are kept
    // even though it holds no job: its body is being written.
    assert!(s.peek(id).await.unwrap().is_none());
    let c = cut(&s);
    assert!(c.jobs.is_empty());
    assert_eq!(c.counters.last_id, id, "the id is taken");
    assert!(c.tubes.iter().any(|t| t.name == tube("big") && t.kept));
    s.put_staged(id, job("big", 1, 0), NOW, true);
    let c = cut(&s);
    assert_eq!(c.jobs.len(), 1);
    assert_eq!(c.jobs[0].was, Stored::BodyOnly);
    assert!(
        !c.jobs[0].needs_body(),
        "the body is in persistence already"
    );
    assert_eq!(s.peek(id).await.unwrap().map(|(i, _)| i), Some(id));
    // Deleted, its body is removed like any job's.
    s.reserve(C1, &[tube("big")], NOW).await.unwrap();
    s.delete(C1, id, NOW).await.unwrap();
    let c = cut(&s);
    assert_eq!(c.gone.len(), 1);
    assert!(c.tubes.iter().any(|t| t.name == tube("big") && !t.kept));
}

#[tokio::test]
async fn a_body_that_did_not_land_is_written_with_its_job() {
    let s = MemoryStore::journaled();
    cut(&s);
    let (id, _) = s.begin_staged(&tube("big"));
    s.put_staged(id, job("big", 1, 0), NOW, false);
    let c = cut(&s);
    assert_eq!(
        c.jobs[0].was,
        Stored::Unknown,
        "it may or may not have landed"
    );
    assert!(c.jobs[0].needs_body());
}

#[tokio::test]
async fn an_abandoned_put_removes_the_body_it_may_have_left() {
    let s = MemoryStore::journaled();
    cut(&s);
    let (id, _) = s.begin_staged(&tube("big"));
    cut(&s);
    s.abandon_staged(id, &tube("big"));
    let c = cut(&s);
    assert!(c.jobs.is_empty());
    assert_eq!(c.gone.len(), 1);
    assert_eq!((c.gone[0].id, c.gone[0].was), (id, Stored::Unknown));
    assert!(c.tubes.iter().any(|t| t.name == tube("big") && !t.kept));
    assert!(
        s.list_tubes()
            .await
            .unwrap()
            .iter()
            .all(|t| *t != tube("big"))
    );
    // The id stays used.
    let next = s.put(job("big", 1, 0), NOW).await.unwrap();
    assert_eq!(next, id + 1);
}

/// A tube a connection uses stays kept while it goes empty between jobs, so
/// its keys in Redis are not dropped and made again for every job.
#[tokio::test]
async fn a_used_tube_stays_kept_while_it_goes_empty() {
    let s = MemoryStore::journaled();
    s.use_tube(&tube("solo")).await.unwrap();
    cut(&s);
    let id = s.put(job("solo", 5, 0), NOW).await.unwrap();
    cut(&s);
    s.reserve(C1, &[tube("solo")], NOW).await.unwrap();
    s.delete(C1, id, NOW).await.unwrap();
    let c = cut(&s);
    assert_eq!(c.gone.len(), 1);
    assert!(
        c.tubes.iter().all(|t| t.name != tube("solo") || t.kept),
        "an empty tube in use was dropped: {:?}",
        c.tubes
    );
    // Once nothing refers to it, it goes.
    s.unuse_tube(&tube("solo")).await.unwrap();
    let c = cut(&s);
    assert!(c.tubes.iter().any(|t| t.name == tube("solo") && !t.kept));
}

/// The reservation of a job persistence holds as ready is no change a cut
/// writes (a takeover makes it ready anyway); its delete removes it from the ready set;
/// a clean stop's flush writes the reservations still held.
#[tokio::test]
async fn a_reservation_is_written_only_by_a_flush() {
    let s = MemoryStore::journaled();
    cut(&s);
    let a = s.put(job("a", 5, 0), NOW).await.unwrap();
    let b = s.put(job("a", 6, 0), NOW).await.unwrap();
    cut(&s);
    let before = s.last_change();
    s.reserve(C1, &[tube("a")], NOW).await.unwrap();
    s.reserve(C1, &[tube("a")], NOW).await.unwrap();
    assert_eq!(
        s.last_change(),
        before,
        "a reservation took a change number"
    );
    assert!(cut(&s).is_empty(), "a reservation was cut");
    s.delete(C1, a, NOW).await.unwrap();
    let c = cut(&s);
    assert_eq!(c.gone.len(), 1);
    assert_eq!(c.gone[0].was, Stored::As(JobState::Ready));
    s.flush_reservations();
    assert!(s.last_change() > before);
    let c = cut(&s);
    assert_eq!(c.jobs.len(), 1);
    assert_eq!((c.jobs[0].id, c.jobs[0].state), (b, JobState::Reserved));
    assert_eq!(c.jobs[0].was, Stored::As(JobState::Ready));
    assert!(!c.jobs[0].needs_body());
}
