//! The store contract's checks of the operator API's store methods (`list_jobs`,
//! `job_entry`, `edit`), run like every other check on the memory, durable and Redis
//! stores (see `store_contract.rs`):
//! - `admin_listing`: each state's order (ready by (pri, id) with ties, delayed by due
//!   time, buried in bury order, reserved with its holder), pages from a cursor whose
//!   job has gone since, a body search bounded by its scan;
//! - `admin_edits`: move (ready, delayed, buried: same id, counters, state; the old
//!   tube destroyed when nothing else holds it, the new one made), priority (a ready
//!   job takes its new place), delay (0 makes a delayed job ready), bury; a reserved
//!   job and wrong states refused, a missing job not found.

use redstalk::store::{Edit, Edited, JobEntry, ListKey, ListPage, ListQuery};

use super::*;

async fn page(
    s: &AnyStore,
    tube: &str,
    state: JobState,
    after: Option<ListKey>,
    limit: usize,
) -> ListPage {
    let q = ListQuery {
        tube: t(tube),
        state,
        after,
        limit,
        scan: usize::MAX,
        contains: None,
    };
    s.list_jobs(&q, now(s)).await.expect("list_jobs")
}

/// Every job of `tube` in `state`, by pages of `limit`.
async fn all(s: &AnyStore, tube: &str, state: JobState, limit: usize) -> Vec<JobId> {
    let (mut ids, mut after) = (Vec::new(), None);
    loop {
        let p = page(s, tube, state, after, limit).await;
        assert!(p.jobs.len() <= limit);
        ids.extend(p.jobs.iter().map(|e| e.info.id));
        match p.next {
            Some(k) => after = Some(k),
            None => return ids,
        }
    }
}

async fn edit(s: &AnyStore, id: JobId, e: Edit) -> Edited {
    s.edit(id, &e, now(s)).await.expect("edit")
}

/// The entry of a done edit (panics on another outcome).
fn done(e: Edited) -> (JobEntry, Option<TubeName>) {
    match e {
        Edited::Done { entry, ready_in } => (entry, ready_in),
        other => panic!("edit not done: {other:?}"),
    }
}

pub async fn admin_listing(s: &AnyStore) {
    let pris = [5, 5, 1, 9, 5, 1, 0, 9, 5, 3];
    let (mut ready, mut needles) = (Vec::new(), BTreeSet::new());
    for (i, &p) in pris.iter().enumerate() {
        let body = if i % 2 == 0 { "a needle" } else { "hay" };
        let id = put(s, "l", p, 0, LONG, body).await;
        if i % 2 == 0 {
            needles.insert(id);
        }
        ready.push((p, id));
    }
    ready.sort();
    let want: Vec<JobId> = ready.iter().map(|&(_, id)| id).collect();
    for limit in [1, 3, 4, 100] {
        assert_eq!(
            all(s, "l", JobState::Ready, limit).await,
            want,
            "limit {limit}"
        );
    }
    // A cursor whose job was deleted since resumes after its place.
    let first = page(s, "l", JobState::Ready, None, 3).await;
    assert!(delete(s, C1, want[2]).await);
    let rest = page(s, "l", JobState::Ready, first.next, 100).await;
    let rest: Vec<JobId> = rest.jobs.iter().map(|e| e.info.id).collect();
    assert_eq!(rest, want[3..], "after a deleted cursor job");

    // A bounded search: every other body matches; 4 looked at per page.
    let mut found = Vec::new();
    let mut after = None;
    loop {
        let q = ListQuery {
            tube: t("l"),
            state: JobState::Ready,
            after,
            limit: 100,
            scan: 4,
            contains: Some(Bytes::from_static(b"needle")),
        };
        let p = s.list_jobs(&q, now(s)).await.expect("search");
        assert!(p.scanned <= 4, "scanned {}", p.scanned);
        found.extend(p.jobs.iter().map(|e| e.info.id));
        match p.next {
            Some(k) => after = Some(k),
            None => break,
        }
    }
    let matching: Vec<JobId> = want
        .iter()
        .copied()
        .filter(|&id| id != want[2] && needles.contains(&id))
        .collect();
    assert_eq!(found, matching, "search finds the matching jobs in order");

    let d1 = put(s, "l", 1, 3 * LONG, LONG, "d1").await;
    let d2 = put(s, "l", 1, LONG, LONG, "d2").await;
    let d3 = put(s, "l", 1, 2 * LONG, LONG, "d3").await;
    assert_eq!(all(s, "l", JobState::Delayed, 2).await, [d2, d3, d1]);
    for id in [d3, d1, d2] {
        reserve_and_bury(s, C1, id, 1).await;
    }
    assert_eq!(all(s, "l", JobState::Buried, 1).await, [d3, d1, d2]);
    let held = reserve(s, C2, &["l"]).await.expect("a job").id;
    let p = page(s, "l", JobState::Reserved, None, 10).await;
    assert_eq!(p.jobs.len(), 1);
    let e = &p.jobs[0];
    assert_eq!(e.info.id, held);
    assert_eq!(e.holder.as_ref().map(|h| h.conn), Some(C2.0), "the holder");
    assert!(e.body_size > 0);
}

pub async fn admin_edits(s: &AnyStore) {
    let a = put(s, "src", 50, 0, LONG, "moved ready").await;
    assert!(reserve_job(s, C1, a).await.is_some());
    assert!(release(s, C1, a, 50, 0).await.is_some());
    let (e, ready_in) = done(edit(s, a, Edit::Move(t("dst"))).await);
    assert_eq!(
        (
            e.info.tube.as_str(),
            e.info.state,
            e.info.pri,
            e.info.reserves,
            e.info.releases
        ),
        ("dst", JobState::Ready, 50, 1, 1)
    );
    assert_eq!(ready_in, Some(t("dst")));
    assert!(all(s, "src", JobState::Ready, 10).await.is_empty());
    assert_eq!(all(s, "dst", JobState::Ready, 10).await, [a]);
    assert!(!list(s).await.contains(&"src".to_string()), "src destroyed");
    assert_eq!(reserve(s, C2, &["dst"]).await.map(|r| r.id), Some(a));
    assert_eq!(
        edit(s, a, Edit::Move(t("src"))).await,
        Edited::Conflict(JobState::Reserved)
    );
    assert_eq!(
        edit(s, a, Edit::Pri(1)).await,
        Edited::Conflict(JobState::Reserved)
    );
    assert!(delete(s, C2, a).await);
    assert_eq!(edit(s, a, Edit::Bury).await, Edited::NotFound);

    let f = put(s, "src", 90, LONG, LONG, "moved delayed").await;
    let before = job(s, f).await.deadline.expect("a due time");
    let (e, ready_in) = done(edit(s, f, Edit::Move(t("dst"))).await);
    assert_eq!((e.info.state, ready_in), (JobState::Delayed, None));
    assert_near(
        "due time kept",
        e.info.deadline.expect("due"),
        before,
        before,
    );

    let g1 = put(s, "dst", 1, 0, LONG, "buried first").await;
    reserve_and_bury(s, C1, g1, 1).await;
    let g = put(s, "src", 95, 0, LONG, "moved buried").await;
    reserve_and_bury(s, C1, g, 95).await;
    let (e, _) = done(edit(s, g, Edit::Move(t("dst"))).await);
    assert_eq!((e.info.state, e.info.buries), (JobState::Buried, 1));
    assert_eq!(
        all(s, "dst", JobState::Buried, 10).await,
        [g1, g],
        "to the end"
    );
    assert_eq!(
        edit(s, g, Edit::Delay(5)).await,
        Edited::Conflict(JobState::Buried)
    );

    let b = put(s, "p", 60, 0, LONG, "b").await;
    let c = put(s, "p", 10, 0, LONG, "c").await;
    assert_eq!(all(s, "p", JobState::Ready, 10).await, [c, b]);
    let (e, _) = done(edit(s, b, Edit::Pri(3)).await);
    assert_eq!(e.info.pri, 3);
    assert_eq!(
        all(s, "p", JobState::Ready, 10).await,
        [b, c],
        "a new place"
    );

    let (e, ready_in) = done(edit(s, b, Edit::Delay(LONG)).await);
    assert_eq!(
        (e.info.state, e.info.delay_ms, ready_in),
        (JobState::Delayed, u64::from(LONG) * 1000, None)
    );
    let (e, ready_in) = done(edit(s, b, Edit::Delay(0)).await);
    assert_eq!((e.info.state, ready_in), (JobState::Ready, Some(t("p"))));
    let (e, _) = done(edit(s, c, Edit::Bury).await);
    assert_eq!((e.info.state, e.info.buries), (JobState::Buried, 1));
    assert_eq!(
        edit(s, c, Edit::Bury).await,
        Edited::Conflict(JobState::Buried)
    );
    let entry = s.job_entry(c, now(s)).await.expect("job_entry").expect("c");
    assert_eq!((entry.info.state, entry.body_size), (JobState::Buried, 1));
}
