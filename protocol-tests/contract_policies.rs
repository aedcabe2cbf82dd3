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
//!
//! And, on the memory and Redis stores alike, outside the contract:
//! - `a_dead_letter_moved_or_kicked_keeps_a_meta_leader_mode_reads`: a dead letter
//!   with and without a key keeps its reason when the operator API moves it to
//!   another tube, loses it when kicked; in Redis its meta (written by the shared
//!   mode's scripts, with the fields before the reason filled) reads back through
//!   `redis::meta`, leader mode's reader, as the same job.

use std::sync::Arc;

use redstalk::protocol::ext::{BatchOp, Key, KeyMode, Millis, PutKey};
use redstalk::redis::meta::{self, MetaState};
use redstalk::store::policy::{Backoff, DeadCause, DeadLetter, DeadReason, Policies, Policy};
use redstalk::store::{Edit, Edited, KeyedPut};

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

/// A dead letter with a key (`keyed`) or without, in tube "dm" (one reserve buries):
/// its id.
async fn dead_letter_in_dm(s: &AnyStore, keyed: bool) -> JobId {
    let job = new_job("dm", 3, 0, LONG, "x");
    let id = if keyed {
        let pk = PutKey {
            key: Key::new(b"k-1").expect("a key"),
            mode: KeyMode::Dedupe,
            window: Millis::ZERO,
        };
        match s.put_keyed(job, &pk, now(s)).await.expect("put_keyed") {
            KeyedPut::Inserted(id) => id,
            other => panic!("expected a new keyed job, got {other:?}"),
        }
    } else {
        s.put(job, now(s)).await.expect("put")
    };
    cycle(s, C1, "dm", id).await;
    assert_eq!(state(s, id).await, JobState::Buried);
    assert_eq!(dead(s, id).await, reason(DeadCause::Reserves, 1, 1));
    id
}

/// In Redis, job `id`'s meta in `tube` as leader mode reads it (`None`: no store to
/// read, the memory store).
async fn meta_of(redis: Option<(&str, &str)>, tube: &str, id: JobId) -> Option<meta::Meta> {
    let (url, prefix) = redis?;
    let client = redis::Client::open(url).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis");
    let (of, raw): (String, Vec<u8>) = redis::cmd("HMGET")
        .arg(format!("{{{prefix}}}:j:{id}"))
        .arg("t")
        .arg("m")
        .query_async(&mut conn)
        .await
        .expect("HMGET a job's tube and meta");
    assert_eq!(of, tube, "job {id}'s hash names another tube");
    Some(meta::decode(id, &raw).unwrap_or_else(|e| panic!("job {id}'s meta: {e:?}")))
}

async fn moved_or_kicked(s: &AnyStore, redis: Option<(&str, &str)>) {
    set(s, &[("dm*", dead_letter(Some(1), None))]);
    for keyed in [false, true] {
        let id = dead_letter_in_dm(s, keyed).await;
        if let Some(m) = meta_of(redis, "dm", id).await {
            assert_eq!(m.state, MetaState::Buried);
            assert_eq!(m.dead, reason(DeadCause::Reserves, 1, 1), "keyed {keyed}");
            assert_eq!(m.key.map(|(k, _)| k), keyed.then(|| "k-1".to_string()));
            assert_eq!((m.pri, m.ttr_ms, m.delay_ms), (9, ms(LONG), 0));
        }
        // A move keeps it buried, a dead letter still; a keyed job leaves its key.
        let moved = s.edit(id, &Edit::Move(t("dm-2")), now(s)).await;
        let Ok(Edited::Done { entry, .. }) = moved else {
            panic!("move {id}: {moved:?}");
        };
        assert_eq!(entry.dead, reason(DeadCause::Reserves, 1, 1), "moved");
        assert_eq!(entry.job_key, None, "a move leaves the key behind");
        if let Some(m) = meta_of(redis, "dm-2", id).await {
            assert_eq!((m.state, m.key), (MetaState::Buried, None));
            assert_eq!(m.dead, reason(DeadCause::Reserves, 1, 1));
        }
        // A kick clears the reason; the meta still reads (no key, no reason).
        assert_eq!(
            s.kick_job(id, now(s)).await.expect("kick_job"),
            Some(t("dm-2"))
        );
        assert_eq!(dead(s, id).await, None, "kicked");
        if let Some(m) = meta_of(redis, "dm-2", id).await {
            assert_eq!((m.state, m.key, m.dead), (MetaState::Ready, None, None));
        }
        assert!(delete(s, C1, id).await);
    }
}

#[tokio::test]
async fn a_dead_letter_moved_or_kicked_keeps_a_meta_leader_mode_reads() {
    moved_or_kicked(&AnyStore::Memory(MemoryStore::new()), None).await;
    let Some(server) = start_redis() else { return };
    let url = server.url();
    let (store, prefix) = redis_store_with_prefix(&url, "dead-meta").await;
    moved_or_kicked(&AnyStore::Redis(store), Some((&url, &prefix))).await;
}
