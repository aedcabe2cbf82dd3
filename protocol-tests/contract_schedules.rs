//! The store contract's checks of schedules' ticks (store/schedule.rs;
//! docs/plans/schedules.md §3), run on the memory, durable and Redis stores by
//! `schedules_contract_memory`, `schedules_contract_durable` and
//! `schedules_contract_redis` (see `store_contract.rs`):
//! - `schedules_made_then_stale`: a tick past the cursor makes a job as a put would
//!   (tube, priority, TTR, body, ready); the same tick again and an earlier one are
//!   stale, naming the cursor's tick; ticks in order advance `last_tick_ms`, set
//!   `last_job` and count `fired`;
//! - `schedules_keyed_dedupe`: a keyed schedule's tick while its job waits (ready,
//!   reserved, delayed, buried) makes nothing, answers the job's id and state, still
//!   advances the cursor and counts `deduped`; once the job is deleted the next tick
//!   makes a new one;
//! - `schedules_skip_to`: a skip past the cursor advances it without a job and counts
//!   `skipped`; one not past it does nothing; a fire's own `skipped` adds up too;
//! - `schedules_cursors_listed_and_dropped`: every cursor, in name order; a dropped
//!   cursor is gone and its schedule fires an old tick again; dropping an unknown one
//!   is no error.
//!
//! Shared mode only, outside the contract (`schedules_shared_*`): two and three store
//! instances on one namespace firing the same ticks at once make one job per tick, the
//! others answer stale; a tick's job wakes another instance's waiters and is reserved
//! there; a tick ahead of Redis' clock is early (nothing done); a large body is refused
//! before any call; a damaged cursor field is a bad reply naming its schedule.

use std::time::{SystemTime, UNIX_EPOCH};

use redstalk::protocol::ext::{Key, KeyMode, Millis, PutKey};
use redstalk::redis::keys::Keys;
use redstalk::store::keys::KeyState;
use redstalk::store::{Cursor, Fired, LARGE_BODY, ScheduleName, StoreError, TickPut};

use super::*;

/// A tick well in the past of every store's clock (an early tick is shared mode's
/// answer alone), on a whole second.
fn base_ms() -> u64 {
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as u64;
    (wall - 3_600_000) / 1000 * 1000
}

fn sched(name: &str) -> ScheduleName {
    ScheduleName::new(name).expect("a schedule name")
}

fn tick(name: &str, tube: &str, tick_ms: u64, key: Option<&str>) -> TickPut {
    TickPut {
        schedule: sched(name),
        tick_ms,
        job: NewJob {
            tube: t(tube),
            pri: 7,
            delay_ms: 0,
            ttr_ms: 30_000,
            body: Bytes::from(format!("{name}@{tick_ms}")),
        },
        key: key.map(|k| PutKey {
            key: Key::new(k.as_bytes()).expect("a key"),
            mode: KeyMode::Dedupe,
            window: Millis::ZERO,
        }),
        skipped: 0,
    }
}

async fn fire(s: &AnyStore, t: &TickPut) -> Fired {
    s.fire_tick(t, now(s)).await.expect("fire_tick")
}

fn made(f: Fired) -> JobId {
    match f {
        Fired::Made(id) => id,
        other => panic!("expected a new job, got {other:?}"),
    }
}

async fn cursors(s: &AnyStore) -> Vec<(ScheduleName, Cursor)> {
    s.schedule_cursors().await.expect("schedule_cursors")
}

async fn cursor(s: &AnyStore, name: &str) -> Cursor {
    cursors(s)
        .await
        .into_iter()
        .find(|(n, _)| n.as_str() == name)
        .unwrap_or_else(|| panic!("no cursor for {name}"))
        .1
}

pub(super) async fn schedules_made_then_stale(s: &AnyStore) {
    let base = base_ms();
    let first = tick("every", "sc-made", base, None);
    let a = made(fire(s, &first).await);
    let j = job(s, a).await;
    assert_eq!(
        (j.tube.as_str(), j.state, j.pri, j.ttr_ms),
        ("sc-made", JobState::Ready, 7, 30_000),
        "made as a put makes it"
    );
    assert_eq!(
        s.peek(a).await.expect("peek").map(|(_, b)| b),
        Some(first.job.body.clone())
    );
    assert_eq!(
        fire(s, &first).await,
        Fired::Stale { last_tick_ms: base },
        "the same tick"
    );
    assert_eq!(
        fire(s, &tick("every", "sc-made", base - 1000, None)).await,
        Fired::Stale { last_tick_ms: base },
        "an earlier tick"
    );
    assert_eq!(
        cursor(s, "every").await,
        Cursor {
            last_tick_ms: base,
            last_job: a,
            fired: 1,
            deduped: 0,
            skipped: 0,
        }
    );
    let mut ids = vec![a];
    for k in 1..=3 {
        let id = made(fire(s, &tick("every", "sc-made", base + k * 1000, None)).await);
        assert!(!ids.contains(&id), "tick {k}: a new job");
        ids.push(id);
        let c = cursor(s, "every").await;
        assert_eq!(
            (c.last_tick_ms, c.last_job, c.fired),
            (base + k * 1000, id, k + 1)
        );
    }
    assert_eq!(tube_of(s, "sc-made").await.ready, 4, "one job per tick");
    assert_eq!(
        fire(s, &tick("every", "sc-made", base + 2000, None)).await,
        Fired::Stale {
            last_tick_ms: base + 3000
        },
        "a tick behind the cursor"
    );
}

pub(super) async fn schedules_keyed_dedupe(s: &AnyStore) {
    let base = base_ms();
    let keyed = |k: u64| tick("keyed", "sc-key", base + k * 1000, Some("nightly"));
    let a = made(fire(s, &keyed(0)).await);
    assert_eq!(
        fire(s, &keyed(1)).await,
        Fired::Deduped(a, KeyState::Ready),
        "the key's job waits"
    );
    let c = cursor(s, "keyed").await;
    assert_eq!(
        (c.last_tick_ms, c.last_job, c.fired, c.deduped),
        (base + 1000, a, 1, 1),
        "a deduped tick advances the cursor"
    );
    assert_eq!(
        fire(s, &keyed(1)).await,
        Fired::Stale {
            last_tick_ms: base + 1000
        }
    );
    let r = reserve(s, C1, &["sc-key"]).await.expect("the tick's job");
    assert_eq!(r.id, a);
    assert_eq!(
        fire(s, &keyed(2)).await,
        Fired::Deduped(a, KeyState::Reserved)
    );
    assert!(release(s, C1, a, 7, LONG).await.is_some());
    assert_eq!(
        fire(s, &keyed(3)).await,
        Fired::Deduped(a, KeyState::Delayed)
    );
    assert!(reserve_job(s, C1, a).await.is_some());
    assert!(bury(s, C1, a, 7).await);
    assert_eq!(
        fire(s, &keyed(4)).await,
        Fired::Deduped(a, KeyState::Buried)
    );
    assert!(delete(s, C1, a).await);
    let b = made(fire(s, &keyed(5)).await);
    assert_ne!(a, b, "after the delete, a new job");
    assert_eq!(state(s, b).await, JobState::Ready);
    let c = cursor(s, "keyed").await;
    assert_eq!(
        (c.last_tick_ms, c.last_job, c.fired, c.deduped, c.skipped),
        (base + 5000, b, 2, 4, 0)
    );
    assert_eq!(fire(s, &keyed(6)).await, Fired::Deduped(b, KeyState::Ready));
}

pub(super) async fn schedules_skip_to(s: &AnyStore) {
    let base = base_ms();
    let name = sched("skipper");
    assert!(
        s.skip_to(&name, base, 3).await.expect("skip_to"),
        "past the cursor"
    );
    assert_eq!(
        cursor(s, "skipper").await,
        Cursor {
            last_tick_ms: base,
            last_job: 0,
            fired: 0,
            deduped: 0,
            skipped: 3,
        }
    );
    assert!(
        !s.skip_to(&name, base, 5).await.expect("skip_to"),
        "at the cursor"
    );
    assert!(
        !s.skip_to(&name, base - 1000, 5).await.expect("skip_to"),
        "behind it"
    );
    assert_eq!(cursor(s, "skipper").await.skipped, 3, "nothing counted");
    assert_eq!(
        fire(s, &tick("skipper", "sc-skip", base, None)).await,
        Fired::Stale { last_tick_ms: base },
        "a skipped tick does not fire"
    );
    let mut late = tick("skipper", "sc-skip", base + 5000, None);
    late.skipped = 4;
    let a = made(fire(s, &late).await);
    assert_eq!(
        cursor(s, "skipper").await,
        Cursor {
            last_tick_ms: base + 5000,
            last_job: a,
            fired: 1,
            deduped: 0,
            skipped: 7,
        }
    );
    assert!(s.skip_to(&name, base + 9000, 1).await.expect("skip_to"));
    let c = cursor(s, "skipper").await;
    assert_eq!(
        (c.last_tick_ms, c.last_job, c.skipped),
        (base + 9000, a, 8),
        "a skip keeps the last job"
    );
    assert_eq!(tube_of(s, "sc-skip").await.ready, 1);
}

pub(super) async fn schedules_cursors_listed_and_dropped(s: &AnyStore) {
    let base = base_ms();
    assert!(cursors(s).await.is_empty(), "none yet");
    made(fire(s, &tick("b-two", "sc-list", base, None)).await);
    made(fire(s, &tick("a-one", "sc-list", base + 1000, None)).await);
    assert!(s.skip_to(&sched("c.three"), base, 1).await.expect("skip"));
    let names: Vec<String> = cursors(s)
        .await
        .into_iter()
        .map(|(n, _)| n.to_string())
        .collect();
    assert_eq!(names, ["a-one", "b-two", "c.three"], "in name order");

    s.drop_cursor(&sched("a-one")).await.expect("drop_cursor");
    let names: Vec<String> = cursors(s)
        .await
        .into_iter()
        .map(|(n, _)| n.to_string())
        .collect();
    assert_eq!(names, ["b-two", "c.three"]);
    s.drop_cursor(&sched("never"))
        .await
        .expect("dropping an unknown cursor");
    let again = made(fire(s, &tick("a-one", "sc-list", base, None)).await);
    assert_eq!(
        cursor(s, "a-one").await,
        Cursor {
            last_tick_ms: base,
            last_job: again,
            fired: 1,
            deduped: 0,
            skipped: 0,
        },
        "a dropped cursor starts afresh"
    );
    assert_eq!(tube_of(s, "sc-list").await.ready, 3);
}

// ---------------------------------------------------------------------------------
// Shared mode only
// ---------------------------------------------------------------------------------

/// `n` store instances on one fresh namespace, as `n` redstalk processes share it.
async fn instances(url: &str, label: &str, n: usize) -> Vec<Arc<AnyStore>> {
    let (first, prefix) = redis_store_with_prefix(url, label).await;
    let mut all = vec![Arc::new(AnyStore::Redis(first))];
    for _ in 1..n {
        let store = connect_redis_store(url, &prefix).await;
        all.push(Arc::new(AnyStore::Redis(store)));
    }
    all
}

/// Every instance fires every tick at once: one job per tick, the rest stale.
pub(super) async fn schedules_shared_race(url: &str) {
    for n in [2, 3] {
        let stores = instances(url, &format!("race{n}"), n).await;
        let base = base_ms();
        const TICKS: u64 = 25;
        for k in 0..TICKS {
            let t = tick("raced", "sc-race", base + k * 1000, None);
            let tasks: Vec<_> = stores
                .iter()
                .map(|s| {
                    let (s, t) = (s.clone(), t.clone());
                    tokio::spawn(async move { s.fire_tick(&t, now(&s)).await })
                })
                .collect();
            let mut answers = Vec::new();
            for task in tasks {
                answers.push(task.await.expect("a fire task").expect("fire_tick"));
            }
            let made: Vec<_> = answers
                .iter()
                .filter(|f| matches!(f, Fired::Made(_)))
                .collect();
            let stale = answers
                .iter()
                .filter(|f| {
                    **f == Fired::Stale {
                        last_tick_ms: base + k * 1000,
                    }
                })
                .count();
            assert_eq!(
                (made.len(), stale),
                (1, n - 1),
                "{n} instances, tick {k}: {answers:?}"
            );
        }
        for s in &stores {
            let c = cursor(s, "raced").await;
            assert_eq!(
                (c.last_tick_ms, c.fired),
                (base + (TICKS - 1) * 1000, TICKS)
            );
        }
        assert_eq!(tube_of(&stores[0], "sc-race").await.ready, TICKS);
    }
}

/// A tick fired on one instance wakes the waiters of another (the put's wake-up
/// message), whose reserve takes the job.
pub(super) async fn schedules_shared_fired_job_reserved(url: &str) {
    let stores = instances(url, "wake", 2).await;
    let (a, b) = (&stores[0], &stores[1]);
    let mut woken = b.take_wake_events().expect("the wake-up events");
    // The subscription is made at connect; give it a moment to be in place.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t = tick("woken", "sc-wake", base_ms(), None);
    let id = made(fire(a, &t).await);
    let tube = tokio::time::timeout(Duration::from_secs(5), woken.recv())
        .await
        .expect("a wake-up within 5 s")
        .expect("the wake-up channel open");
    assert_eq!(tube.as_str(), "sc-wake");
    let r = reserve(b, C1, &["sc-wake"])
        .await
        .expect("the tick's job, on the other instance");
    assert_eq!((r.id, r.body.clone()), (id, t.job.body.clone()));
    assert!(delete(b, C1, id).await);
}

/// A tick ahead of Redis' clock (by more than a second) does nothing; a large body is
/// refused before any call; a damaged cursor is a bad reply naming its schedule.
pub(super) async fn schedules_shared_refusals(url: &str) {
    let (store, prefix) = redis_store_with_prefix(url, "refusals").await;
    let s = AnyStore::Redis(store);
    let ahead = base_ms() + 2 * 3_600_000 + 60_000;
    assert_eq!(
        fire(&s, &tick("ahead", "sc-early", ahead, None)).await,
        Fired::Early
    );
    assert!(cursors(&s).await.is_empty(), "an early tick moves nothing");
    assert!(
        tube_info(&s, "sc-early").await.is_none(),
        "and makes no job"
    );

    let mut large = tick("large", "sc-large", base_ms(), None);
    large.job.body = Bytes::from(vec![b'x'; LARGE_BODY]);
    let err = s.fire_tick(&large, now(&s)).await.expect_err("too large");
    assert!(
        matches!(err, StoreError::BodyTooLarge { len, .. } if len == LARGE_BODY),
        "{err:?}"
    );
    assert!(!err.may_have_applied());
    assert!(cursors(&s).await.is_empty());

    let mut conn = redis::Client::open(url)
        .expect("a Redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: () = redis::cmd("HSET")
        .arg(Keys::new(&prefix).schedule_cursors())
        .arg("damaged")
        .arg("12 x")
        .query_async(&mut conn)
        .await
        .expect("HSET");
    for err in [
        s.fire_tick(&tick("damaged", "sc-bad", base_ms(), None), now(&s))
            .await
            .expect_err("a damaged cursor"),
        s.schedule_cursors().await.expect_err("a damaged cursor"),
    ] {
        let text = err.to_string();
        assert!(
            matches!(err, StoreError::BadReply { .. }) && text.contains("damaged"),
            "{text}"
        );
    }
    assert!(tube_info(&s, "sc-bad").await.is_none(), "no job made");
}
