//! The store contract's checks of the batch and flush store calls (`reserve_many`,
//! `batch`, `flush_step`; docs/EXTENSIONS.md, *Batches*, *Flush*), run like every other
//! check on the memory, durable (`-b`: each call one change, replayed from the log) and
//! Redis stores (see `store_contract.rs`):
//! - `batch_reserve_many`: up to n jobs in (pri, id) order across the watched tubes,
//!   paused tubes skipped, each counted as a reserve, fewer when fewer are ready;
//! - `batch_list_ops`: each id as its single command from the same connection (a job
//!   another holds is missing, a repeated id missing the second time), the missing ids
//!   in the order given, `cmd-delete` not counted, a release without delay naming its
//!   tube as woken, touch moving the deadline, bury and release setting priority and
//!   counters;
//! - `batch_flush_steps`: steps of at most `max` over the states named, jobs put after
//!   the first step left alone, reserved jobs flushed under their holder, a tube that
//!   does not exist not made, a flushed tube destroyed when nothing refers to it, no
//!   `cmd-delete` counted.

use redstalk::protocol::ext::{BatchOp, FlushStates, Millis};
use redstalk::store::{BatchDone, FlushStep};

use super::*;

async fn batch(s: &AnyStore, conn: ConnId, op: BatchOp, ids: &[JobId]) -> BatchDone {
    s.batch(conn, op, ids, now(s)).await.expect("batch")
}

async fn flush(
    s: &AnyStore,
    tube: &str,
    states: FlushStates,
    upto: Option<JobId>,
    max: usize,
) -> FlushStep {
    s.flush_step(&t(tube), states, upto, max, now(s))
        .await
        .expect("flush_step")
}

pub async fn batch_reserve_many(s: &AnyStore) {
    let a5 = put(s, "ba", 5, 0, LONG, "a5").await;
    let b1 = put(s, "bb", 1, 0, LONG, "b1").await;
    let a1 = put(s, "ba", 1, 0, LONG, "a1").await;
    let p0 = put(s, "bp", 0, 0, LONG, "p0").await;
    assert!(s.pause(&t("bp"), ms(LONG), now(s)).await.expect("pause"));
    let watched = tubes(&["ba", "bb", "bp"]);
    let got = s
        .reserve_many(C1, &watched, 2, now(s))
        .await
        .expect("reserve_many");
    let ids: Vec<JobId> = got.iter().map(|r| r.id).collect();
    assert_eq!(ids, [b1, a1], "(pri, id) order across tubes, up to n");
    assert_eq!(got[0].body, body("b1"));
    assert_eq!(got[1].tube, t("ba"));
    let rest = s
        .reserve_many(C1, &watched, 10, now(s))
        .await
        .expect("reserve_many");
    assert_eq!(
        rest.iter().map(|r| r.id).collect::<Vec<_>>(),
        [a5],
        "fewer when fewer are ready; the paused tube's job stays"
    );
    for id in [b1, a1, a5] {
        let info = job(s, id).await;
        assert_eq!(
            (info.state, info.reserves),
            (JobState::Reserved, 1),
            "job {id}"
        );
    }
    assert_eq!(state(s, p0).await, JobState::Ready);
    assert!(s.soonest_deadline(C1).await.expect("soonest").is_some());
    let none = s
        .reserve_many(C1, &watched, 5, now(s))
        .await
        .expect("empty");
    assert!(none.is_empty());
    // A large body (read apart by a Redis store) comes whole, and the batch's jobs are
    // each this connection's: a list command lets them all go.
    let large = "L".repeat(redstalk::store::LARGE_BODY + 1);
    let big = put(s, "bl", 1, 0, LONG, &large).await;
    let small = put(s, "bl", 2, 0, LONG, "small").await;
    let got = s
        .reserve_many(C2, &tubes(&["bl"]), 5, now(s))
        .await
        .expect("reserve_many");
    assert_eq!(got.iter().map(|r| r.id).collect::<Vec<_>>(), [big, small]);
    assert_eq!(got[0].body.len(), large.len(), "the large body, whole");
    assert_eq!(got[1].body, body("small"));
    let done = batch(s, C2, BatchOp::Delete, &[big, small]).await;
    assert!(done.missing.is_empty(), "{:?}", done.missing);
    for id in [big, small] {
        let gone = s.job_info(id, now(s)).await.expect("job_info");
        assert!(gone.is_none(), "job {id} deleted");
    }
}

pub async fn batch_list_ops(s: &AnyStore) {
    let ids: Vec<JobId> = [
        put(s, "bl", 10, 0, LONG, "j1").await,
        put(s, "bl", 10, 0, LONG, "j2").await,
        put(s, "bl", 10, 0, LONG, "j3").await,
        put(s, "bl", 10, 0, LONG, "j4").await,
    ]
    .into();
    let (j1, j2, j3, j4) = (ids[0], ids[1], ids[2], ids[3]);
    for id in [j1, j2, j3] {
        assert!(reserve_job(s, C1, id).await.is_some());
    }
    assert!(reserve_job(s, C2, j4).await.is_some());
    // Touch: only what C1 holds; a repeated id is touched again.
    let before = job(s, j1).await.deadline.expect("a deadline");
    let done = batch(s, C1, BatchOp::Touch, &[j1, j4, 99, j1]).await;
    assert_eq!(done.missing, [j4, 99]);
    assert!(job(s, j1).await.deadline.expect("a deadline") >= before);
    // Bury and release: priority and counters; the second time an id is missing.
    let done = batch(s, C1, BatchOp::Bury { pri: 7 }, &[j1, j1, j4]).await;
    assert_eq!(done.missing, [j1, j4]);
    let info = job(s, j1).await;
    assert_eq!(
        (info.state, info.pri, info.buries),
        (JobState::Buried, 7, 1)
    );
    let release = |delay: u64| BatchOp::Release {
        pri: 3,
        delay: Millis::new(delay).expect("a duration"),
    };
    let done = batch(s, C1, release(0), &[j2, 98]).await;
    assert_eq!(done.missing, [98]);
    assert_eq!(
        done.woken,
        [t("bl")],
        "a release without delay wakes its tube"
    );
    let info = job(s, j2).await;
    assert_eq!(
        (info.state, info.pri, info.releases),
        (JobState::Ready, 3, 1)
    );
    let done = batch(s, C1, release(ms(LONG)), &[j3]).await;
    assert!(done.missing.is_empty() && done.woken.is_empty());
    assert_eq!(state(s, j3).await, JobState::Delayed);
    // Delete: anything but a job another connection holds; cmd-delete not counted.
    let done = batch(s, C1, BatchOp::Delete, &[j4, j1, j2, j1, 97]).await;
    assert_eq!(done.missing, [j4, j1, 97], "in the order given");
    assert_eq!(state(s, j4).await, JobState::Reserved);
    assert!(s.job_info(j2, now(s)).await.expect("job_info").is_none());
    assert_eq!(tube_of(s, "bl").await.cmd_delete, 0);
    let done = batch(s, C2, BatchOp::Delete, &[j4, j3]).await;
    assert!(done.missing.is_empty());
    assert!(
        tube_info(s, "bl").await.is_none(),
        "an empty tube nobody uses goes"
    );
    assert_eq!(totals(s).await.reserved, 0);
}

pub async fn batch_flush_steps(s: &AnyStore) {
    assert_eq!(
        flush(s, "nothing", FlushStates::ALL, None, 10)
            .await
            .deleted,
        0
    );
    assert!(tube_info(s, "nothing").await.is_none(), "not made");
    let mut all = Vec::new();
    for i in 0..5 {
        all.push(put(s, "bf", i, 0, LONG, "r").await);
    }
    let delayed = put(s, "bf", 0, LONG, LONG, "d").await;
    let held = put(s, "bf", 0, 0, LONG, "h").await;
    assert_eq!(reserve_job(s, C2, held).await.map(|r| r.id), Some(held));
    let buried = put(s, "bf", 0, 0, LONG, "b").await;
    reserve_and_bury(s, C1, buried, 0).await;
    // Buried only: the others stay.
    let step = flush(s, "bf", FlushStates::BURIED, None, 10).await;
    assert_eq!((step.deleted, step.more), (1, false));
    // Everything else, two at a time; a job put after the first step stays.
    let first = flush(s, "bf", FlushStates::ALL, None, 2).await;
    assert_eq!((first.deleted, first.more), (2, true));
    assert!(first.upto >= held);
    let late = put(s, "bf", 0, 0, LONG, "late").await;
    let mut deleted = first.deleted;
    loop {
        let step = flush(s, "bf", FlushStates::ALL, Some(first.upto), 2).await;
        assert!(step.deleted <= 2);
        assert_eq!(step.upto, first.upto);
        deleted += step.deleted;
        if !step.more {
            break;
        }
    }
    assert_eq!(deleted, 7, "5 ready, 1 delayed, 1 reserved");
    for id in all.iter().chain([&delayed, &held, &buried]) {
        assert!(
            s.job_info(*id, now(s)).await.expect("job_info").is_none(),
            "job {id} flushed"
        );
    }
    assert!(!delete(s, C2, held).await, "its holder finds it gone");
    assert_eq!(state(s, late).await, JobState::Ready);
    let figures = tube_of(s, "bf").await;
    assert_eq!((figures.ready, figures.cmd_delete), (1, 0));
    let step = flush(s, "bf", FlushStates::ALL, None, 10).await;
    assert_eq!(step.deleted, 1);
    assert!(
        tube_info(s, "bf").await.is_none(),
        "flushed empty, nobody uses it"
    );
    let left = totals(s).await;
    assert_eq!(total_counts(&left), [0; 5], "no job left");
    assert_eq!(left.total_jobs, 9);
}
