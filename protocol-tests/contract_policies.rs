//! The store contract's checks of tube policies (docs/POLICIES.md), run like every other
//! check on the memory, durable and Redis stores (see `store_contract.rs`):
//! - `policies_dead_letter`: a job whose reservations end without a delete (release,
//!   the holder's close, a list release) is buried once it has been reserved the
//!   rule's number of times, keeping its priority, with the reason in its entry and
//!   its counters as the reference counts them (one bury more); a kick gives it the
//!   limit again and clears the reason; a bury by its holder records no reason; a
//!   tube no rule governs is untouched; the most specific rule wins;
//! - `policies_dead_letter_timeouts`: a lapsed TTR (one real 2.1 s sleep) counts
//!   toward a `timeouts` limit and buries the job at the tick instead of making it
//!   ready;
//! - `policies_backoff`: a release with delay 0 gets base × factor^releases, capped
//!   at the maximum; a release with a delay keeps it; a tube without a rule gets
//!   none.

use std::sync::Arc;

use redstalk::protocol::ext::{BatchOp, Millis};
use redstalk::store::policy::{Backoff, DeadCause, DeadLetter, DeadReason, Policies, Policy};

use super::*;

fn dead_letter(reserves: Option<u32>, timeouts: Option<u32>) -> Policy {
    Policy {
        dead_letter: Some(DeadLetter { reserves, timeouts }),
        backoff: None,
    }
}

fn set(s: &AnyStore, rules: &[(&str, Policy)]) {
    let mut p = Policies::default();
    for (tubes, policy) in rules {
        p = p.with(tubes, *policy).expect("a valid rule");
    }
    s.set_policies(Arc::new(p));
}

async fn dead(s: &AnyStore, id: JobId) -> Option<DeadReason> {
    s.job_entry(id, now(s))
        .await
        .expect("job_entry")
        .unwrap_or_else(|| panic!("job {id} should exist"))
        .dead
}

async fn cycle(s: &AnyStore, conn: ConnId, tube: &str, id: JobId) {
    let r = reserve(s, conn, &[tube]).await.expect("a ready job");
    assert_eq!(r.id, id);
    assert!(release(s, conn, id, 9, 0).await.is_some(), "release {id}");
}

fn reason(cause: DeadCause, count: u32, limit: u32) -> Option<DeadReason> {
    Some(DeadReason {
        cause,
        count,
        limit,
    })
}

pub(super) async fn policies_dead_letter(s: &AnyStore) {
    set(
        s,
        &[
            ("dl*", dead_letter(Some(5), None)),
            ("dl-a*", dead_letter(Some(2), None)),
        ],
    );
    let a = put(s, "dl-a1", 3, 0, LONG, "a").await;
    cycle(s, C1, "dl-a1", a).await;
    assert_eq!(state(s, a).await, JobState::Ready, "one reserve of two");
    cycle(s, C1, "dl-a1", a).await;
    let j = job(s, a).await;
    assert_eq!(
        j.state,
        JobState::Buried,
        "the second ended reservation buries it"
    );
    assert_eq!((j.pri, counters(&j)), (9, [2, 0, 2, 1, 0]));
    assert_eq!(dead(s, a).await, reason(DeadCause::Reserves, 2, 2));
    assert_eq!(tube_of(s, "dl-a1").await.buried, 1);

    // A kick gives it two more and clears the reason.
    assert_eq!(
        s.kick_job(a, now(s)).await.expect("kick_job"),
        Some(t("dl-a1"))
    );
    assert_eq!(dead(s, a).await, None, "kicked: no reason");
    cycle(s, C1, "dl-a1", a).await;
    assert_eq!(state(s, a).await, JobState::Ready, "3 reserves of 4");
    // The holder's close ends a reservation too.
    assert!(reserve(s, C2, &["dl-a1"]).await.is_some());
    s.close(C2, &[], None, true, now(s)).await.expect("close");
    assert_eq!(state(s, a).await, JobState::Buried);
    assert_eq!(dead(s, a).await, reason(DeadCause::Reserves, 4, 2));

    // A list release is a release.
    let b = put(s, "dl-b", 1, 0, LONG, "b").await;
    for n in 1..=5 {
        let r = reserve(s, C1, &["dl-b"]).await.expect("b ready");
        let op = BatchOp::Release {
            pri: 1,
            delay: Millis::ZERO,
        };
        let done = s.batch(C1, op, &[r.id], now(s)).await.expect("batch");
        assert!(done.missing.is_empty());
        let want = if n < 5 {
            JobState::Ready
        } else {
            JobState::Buried
        };
        assert_eq!(
            state(s, b).await,
            want,
            "the less specific rule: 5 (after {n})"
        );
    }
    assert_eq!(dead(s, b).await, reason(DeadCause::Reserves, 5, 5));

    // Its holder's bury is not a dead letter; another tube has no rule.
    let c = put(s, "dl-a2", 1, 0, LONG, "c").await;
    reserve_and_bury(s, C1, c, 1).await;
    assert_eq!(dead(s, c).await, None);
    let d = put(s, "other", 1, 0, LONG, "d").await;
    for _ in 0..6 {
        cycle(s, C1, "other", d).await;
    }
    assert_eq!(
        state(s, d).await,
        JobState::Ready,
        "no rule, no dead letter"
    );

    // Without rules again, nothing is buried.
    s.set_policies(Arc::new(Policies::default()));
    let e = put(s, "dl-a3", 1, 0, LONG, "e").await;
    for _ in 0..3 {
        cycle(s, C1, "dl-a3", e).await;
    }
    assert_eq!(state(s, e).await, JobState::Ready);
}

pub(super) async fn policies_dead_letter_timeouts(s: &AnyStore) {
    set(s, &[("dt", dead_letter(Some(10), Some(1)))]);
    let a = put(s, "dt", 4, 0, 1, "TTR 1 s").await;
    let b = put(s, "dn", 4, 0, 1, "no rule").await;
    assert!(reserve(s, C1, &["dt"]).await.is_some());
    assert!(reserve(s, C1, &["dn"]).await.is_some());
    tokio::time::sleep(Duration::from_millis(2100)).await;
    s.tick(now(s)).await.expect("tick");
    let j = job(s, a).await;
    assert_eq!(j.state, JobState::Buried, "one lapsed TTR of one");
    assert_eq!(counters(&j), [1, 1, 0, 1, 0]);
    assert_eq!(dead(s, a).await, reason(DeadCause::Timeouts, 1, 1));
    assert_eq!(state(s, b).await, JobState::Ready, "no rule: ready");
    assert_eq!(totals(s).await.job_timeouts, 2);
}

pub(super) async fn policies_backoff(s: &AnyStore) {
    let backoff = Policy {
        dead_letter: None,
        backoff: Some(Backoff {
            base_ms: 2000,
            factor: 3.0,
            max_ms: 10_000,
            jitter: 0.0,
        }),
    };
    set(s, &[("bo", backoff)]);
    let a = put(s, "bo", 1, 0, LONG, "a").await;
    let mut delays = Vec::new();
    for _ in 0..3 {
        assert!(reserve_job(s, C1, a).await.is_some());
        assert!(release(s, C1, a, 1, 0).await.is_some());
        let j = job(s, a).await;
        assert_eq!(j.state, JobState::Delayed);
        delays.push(j.delay_ms);
    }
    assert_eq!(
        delays,
        [2000, 6000, 10_000],
        "base × 3^releases, at most the maximum"
    );
    assert!(reserve_job(s, C1, a).await.is_some());
    assert!(release(s, C1, a, 1, 7).await.is_some());
    assert_eq!(
        job(s, a).await.delay_ms,
        7000,
        "a release's own delay stands"
    );

    let b = put(s, "nb", 1, 0, LONG, "b").await;
    cycle(s, C1, "nb", b).await;
    let j = job(s, b).await;
    assert_eq!(
        (j.state, j.delay_ms),
        (JobState::Ready, 0),
        "no rule: ready"
    );
}
