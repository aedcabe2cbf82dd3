//! The store contract's check of calls made at once (`concurrent_callers`), run like
//! every other check on the memory, durable and Redis stores (see `store_contract.rs`):
//! many connections put, reserve and delete at the same time, each on its own tube and
//! all into one shared tube; each gets its own job back with its body, a second delete
//! finds nothing, every tube's counters add up, and the shared tube serves each job
//! once, each connection's reserves in (pri, id) order.
//!
//! And shared mode's combining (src/store/shared/scripts/combine.rs), against a private
//! redis-server: calls made while others are in flight go to Redis as one `many` call
//! (counted in `INFO commandstats`); a job found damaged fails only the call that
//! picked it; a `many` after `SCRIPT FLUSH` and `FUNCTION FLUSH` is loaded again and answered; a namespace
//! lost fails every call of a `many` as it fails a call alone; a caller gone before or
//! while making a `many` leaves the others answered and the places in flight passing on.

use futures_util::future::join_all;
use redstalk::redis::Code;
use redstalk::store::StoreError;
use support::namespace::redis_conn;

use super::*;

const WORKERS: u64 = 24;
const ROUNDS: u64 = 12;

/// The priority of worker `w`'s job of round `r` in the shared tube (a few values, so
/// ties are broken by id).
fn shared_pri(w: u64, r: u64) -> u32 {
    ((w * ROUNDS + r) % 7) as u32
}

pub(super) async fn concurrent_callers(s: &AnyStore) {
    let worker = |w: u64| async move {
        let conn = ConnId(100 + w);
        let tube = format!("w{w}");
        // Keeps the tube (and its counters) while the rounds' jobs come and go.
        put(s, &tube, 1000, 0, LONG, "anchor").await;
        for r in 0..ROUNDS {
            let body = format!("{w}/{r}");
            let id = put(s, &tube, 0, 0, LONG, &body).await;
            put(s, "together", shared_pri(w, r), 0, LONG, &body).await;
            let got = reserve(s, conn, &[&tube]).await.expect("its own job");
            assert_eq!((got.id, &got.body[..]), (id, body.as_bytes()));
            assert!(delete(s, conn, id).await, "delete {id}");
            assert!(!delete(s, conn, id).await, "{id} deleted twice");
        }
    };
    join_all((0..WORKERS).map(worker)).await;
    // Every put counted once in the namespace's figures, each with an id of its own.
    assert_eq!(totals(s).await.total_jobs, WORKERS * (1 + 2 * ROUNDS));
    for w in 0..WORKERS {
        let ti = tube_of(s, &format!("w{w}")).await;
        assert_eq!(
            (ti.ready, ti.reserved, ti.total_jobs, ti.cmd_delete),
            (1, 0, ROUNDS + 1, ROUNDS),
            "tube w{w}"
        );
    }

    // The shared tube, drained by every connection at once.
    let drain = |w: u64| async move {
        let conn = ConnId(100 + w);
        let mut got = Vec::new();
        while let Some(r) = reserve(s, conn, &["together"]).await {
            got.push((r.id, String::from_utf8_lossy(&r.body).into_owned()));
        }
        got
    };
    let drained = join_all((0..WORKERS).map(drain)).await;
    let mut bodies = Vec::new();
    for got in &drained {
        let order: Vec<(u32, JobId)> = got
            .iter()
            .map(|(id, body)| {
                let (w, r) = body.split_once('/').expect("w/r");
                let pri = shared_pri(w.parse().expect("w"), r.parse().expect("r"));
                (pri, *id)
            })
            .collect();
        assert!(order.is_sorted(), "one connection's reserves: {order:?}");
        bodies.extend(got.iter().map(|(_, b)| b.clone()));
    }
    bodies.sort();
    let mut expected: Vec<String> = (0..WORKERS)
        .flat_map(|w| (0..ROUNDS).map(move |r| format!("{w}/{r}")))
        .collect();
    expected.sort();
    assert_eq!(bodies, expected, "each shared job reserved once");
    let ti = tube_of(s, "together").await;
    assert_eq!(
        (ti.ready, ti.reserved, ti.total_jobs),
        (0, WORKERS * ROUNDS, WORKERS * ROUNDS)
    );
}

/// Redis' count of script calls (EVALSHA and FCALL) so far.
fn script_calls_on(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(c)
        .expect("INFO");
    script_calls_of(&calls_in(&info))
}

/// The calls of the contract's concurrent check reach Redis as far fewer script calls:
/// those made while two were in flight went together.
#[tokio::test]
async fn calls_made_at_once_go_to_redis_together() {
    let Some(redis) = start_redis() else { return };
    let mut c = redis_conn(&redis);
    let s = AnyStore::Redis(redis_store(&redis.url(), "together").await);
    let before = script_calls_on(&mut c);
    concurrent_callers(&s).await;
    let calls = script_calls_on(&mut c) - before;
    // Per worker: the anchor, then per round two puts, a reserve and two deletes; the
    // drain: each job and one empty reserve per connection.
    let made = WORKERS * (1 + 5 * ROUNDS) + WORKERS * ROUNDS + WORKERS;
    eprintln!("{made} store calls went to Redis as {calls} script calls");
    assert!(calls * 3 < made, "{made} store calls, {calls} script calls");
}

/// A job damaged in Redis fails only the reserve that picked it, when that reserve went
/// together with others: the others get their jobs, the puts beside them are made.
#[tokio::test]
async fn a_damaged_job_fails_only_its_own_call() {
    let Some(redis) = start_redis() else { return };
    let mut c = redis_conn(&redis);
    let (store, prefix) = redis_store_with_prefix(&redis.url(), "damaged").await;
    let s = AnyStore::Redis(store);
    let mut ids = Vec::new();
    for i in 0..8 {
        ids.push(put(&s, "d", i, 0, LONG, &format!("job {i}")).await);
    }
    let damaged = ids[2];
    redis::cmd("HDEL")
        .arg(redstalk::redis::keys::Keys::new(&prefix).job(damaged))
        .arg("m")
        .exec(&mut c)
        .expect("HDEL");
    let watched = tubes(&["d"]);
    let reserves = join_all((0..8).map(|i| s.reserve(ConnId(10 + i), &watched, now(&s))));
    let puts = join_all((0..8).map(|i| s.put(new_job("e", 0, 0, LONG, &format!("{i}")), now(&s))));
    let (reserved, put) = tokio::join!(reserves, puts);
    let mut failed = 0;
    let mut got = Vec::new();
    for r in reserved {
        match r {
            Err(e) => {
                assert_eq!(Code::found_in(&e), Some(Code::Damaged), "{e}");
                failed += 1;
            }
            Ok(r) => got.push(r.expect("a job").id),
        }
    }
    got.sort();
    let mut rest = ids.clone();
    rest.retain(|&id| id != damaged);
    assert_eq!((failed, got), (1, rest));
    assert!(put.iter().all(Result::is_ok), "{put:?}");
    assert_eq!(tube_of(&s, "e").await.ready, 8);
}

/// Calls made together after Redis lost its scripts and functions (`SCRIPT FLUSH`,
/// `FUNCTION FLUSH`) are answered: the `many` is loaded again. After the namespace is lost (`FLUSHALL`), every call made
/// together fails as a call alone does, with nothing applied.
#[tokio::test]
async fn calls_made_together_after_script_flush_and_namespace_loss() {
    let Some(redis) = start_redis() else { return };
    let mut c = redis_conn(&redis);
    let s = AnyStore::Redis(redis_store(&redis.url(), "flushed").await);
    let puts = |n: u64| {
        let s = &s;
        join_all((0..n).map(move |i| s.put(new_job("f", 0, 0, LONG, &format!("{i}")), now(s))))
    };
    for flush in ["SCRIPT", "FUNCTION"] {
        redis::cmd(flush)
            .arg("FLUSH")
            .exec(&mut c)
            .expect("SCRIPT FLUSH, FUNCTION FLUSH");
    }
    let before = script_calls_on(&mut c);
    let made = puts(20).await;
    assert!(made.iter().all(Result::is_ok), "{made:?}");
    assert_eq!(tube_of(&s, "f").await.ready, 20);
    // Some of them went together (the scripts' reloads and resends included): this
    // checked a `many`'s reload, not only each call's.
    let calls = script_calls_on(&mut c) - before;
    assert!(calls < 20, "20 puts made {calls} script calls");

    redis::cmd("FLUSHALL").exec(&mut c).expect("FLUSHALL");
    let refused = puts(10).await;
    for r in &refused {
        assert!(
            matches!(r, Err(StoreError::NamespaceLost { .. })),
            "{refused:?}"
        );
    }
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).expect("KEYS");
    assert!(
        keys.iter().all(|k| !k.contains(":t:f:")),
        "nothing applied: {keys:?}"
    );
}

/// Callers that go away while their calls wait to be combined (an HTTP request whose
/// client left) leave the others answered, and the places in flight passing on: the
/// first caller queued, woken to make the next `many`, is dropped once before reading
/// its turn and once while making it. Every call that kept its caller is made and
/// answered; a dropped call is made or not, never twice; and calls made afterwards are
/// still answered (a place lost with a dropped caller would leave them queued for ever).
#[tokio::test]
async fn callers_gone_while_combined_leave_the_others_answered() {
    use std::future::{Future, poll_fn};
    use std::pin::Pin;
    use std::task::Poll;
    type PutCall<'a> = Pin<Box<dyn Future<Output = Result<JobId, StoreError>> + 'a>>;

    const LONG_WAIT: std::time::Duration = std::time::Duration::from_secs(60);
    let Some(redis) = start_redis() else { return };
    let s = AnyStore::Redis(redis_store(&redis.url(), "gone").await);
    const CALLS: usize = 40;
    // The first calls go alone; the rest queue behind them in the order polled.
    const ALONE: usize = 4;
    let mut made = 0;
    for (round, while_making) in [(0, false), (1, true)] {
        let tube = format!("g{round}");
        let mut calls: Vec<Option<PutCall>> = (0..CALLS)
            .map(|i| {
                Some(
                    Box::pin(s.put(new_job(&tube, 0, 0, LONG, &format!("{i}")), now(&s)))
                        as PutCall,
                )
            })
            .collect();
        // One poll takes each to Redis or to the queue (a put reaches its script call
        // without waiting for anything).
        poll_fn(|cx| {
            for call in calls.iter_mut().flatten() {
                assert!(call.as_mut().poll(cx).is_pending(), "answered at once");
            }
            Poll::Ready(())
        })
        .await;
        let maker = ALONE;
        if while_making {
            // The calls alone answer; the first queued caller is handed the rest.
            for slot in calls.iter_mut().take(ALONE) {
                if let Some(call) = slot.take() {
                    call.await.expect("a call alone");
                }
            }
            // It starts the `many`, and goes away.
            if let Some(call) = calls[maker].as_mut() {
                let started = poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx).is_pending())).await;
                assert!(started, "the many answered before Redis could");
            }
            calls[maker] = None;
        } else {
            // It goes away before its turn, with the next three.
            for call in &mut calls[maker..maker + 4] {
                *call = None;
            }
        }
        let kept = calls.iter().flatten().count();
        let answers = tokio::time::timeout(LONG_WAIT, join_all(calls.into_iter().flatten()))
            .await
            .expect("every caller left is answered");
        assert!(answers.iter().all(Result::is_ok), "{answers:?}");
        let ready = tube_of(&s, &tube).await.ready as usize;
        eprintln!("round {round}: {kept} callers kept, {ready} jobs made of {CALLS}");
        assert!((kept..=CALLS).contains(&ready), "{ready} jobs");
        made += ready;
    }
    // The places passed on: calls made now are answered.
    let after = tokio::time::timeout(
        LONG_WAIT,
        join_all((0..CALLS).map(|i| s.put(new_job("after", 0, 0, LONG, &format!("{i}")), now(&s)))),
    )
    .await
    .expect("calls made afterwards are answered");
    assert!(after.iter().all(Result::is_ok), "{after:?}");
    assert_eq!(tube_of(&s, "after").await.ready as usize, CALLS);
    eprintln!("{made} jobs made in the two rounds");
}
