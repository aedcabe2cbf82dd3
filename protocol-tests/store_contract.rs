//! The store contract: the semantics every [`Store`] engine must share, checked on the
//! library directly (no server, no sockets), on the in-memory store and on the Redis
//! store alike.
//!
//! Two parts:
//!
//! 1. A contract suite ([`CHECKS`]): async checks taking a fresh `&AnyStore` each, run
//!    once on a `MemoryStore` (`contract_memory`), once on a `DurableStore` whose
//!    committer writes a binlog in a fresh directory, as `-b` runs it
//!    (`contract_durable`: after each check every change must be persisted and the log
//!    replay as many jobs as the store holds), and once on a `RedisStore` with a fresh
//!    key prefix per check (`contract_redis`; again on a Redis without `FUNCTION`,
//!    where the scripts are called by `EVALSHA`: `contract_redis_by_evalsha`). They
//!    cover ids and `burn_id`;
//!    reserve order by (pri, id) across the watched tubes and the reserved job's
//!    deadline; pause skipping a tube (and `reserve-job`, peeks and `has_ready`
//!    ignoring it), resume by a zero pause; `reserve_job` on ready, delayed and buried
//!    jobs (and not on reserved ones); delete rules (a job reserved by another
//!    connection is not deleted); release, bury and touch only by the holder, with the
//!    new priority, delay and counters; kick preferring buried jobs (in bury order)
//!    over delayed ones (in due order) and never mixing the two in one kick;
//!    `kick_job`; the peeks; `tube_info`, `totals` and `job_info` figures; the tube
//!    list order after tube destruction (the removed tube's slot takes the last
//!    tube); use/watch references keeping tubes alive, and destruction dropping their
//!    counters and pause; `close` without references returning jobs with their counters untouched;
//!    `soonest_deadline`/`next_deadline`; `tick` promoting delayed jobs, expiring
//!    reservations and ending pauses; and the wait a reserve reports (since the job
//!    last became ready: put, release, kick, `close` without references, the end of its delay or its
//!    lapsed deadline). Only [`timed_tick`] (one real 2.1 s sleep) and
//!    [`waits_since_ready`] (300 ms sleeps) wait on the clock (both stores read wall or
//!    Redis time); the checks run concurrently. The operator API's store methods
//!    (listing from a cursor, search, job entry, edits in place) are checked in
//!    `contract_admin.rs`; the batch and flush calls (`reserve_many`, `batch`,
//!    `flush_step`) in `contract_batch.rs`; keyed jobs (dedupe, replace, conflict, the
//!    commands by key, windows, a flush freeing a key, a move leaving its key) in
//!    `contract_keys.rs`; tube policies (dead letters by reserves and by lapsed TTRs,
//!    backoff) in `contract_policies.rs`; calls made at once by many connections (and
//!    shared mode's combining of them, with its failures) in `contract_concurrent.rs`;
//!    shared mode's commands by id alone, one script call each, in
//!    `contract_by_id.rs`; what Redis runs for shared mode's put, reserve and delete
//!    (each job's hash read once by a reserve, a body's length asked only once a large
//!    body was written, a watched tube's references not read by a delete) in
//!    `contract_commands.rs`. Retention (each job's history, the deleted job's record, the
//!    bounds, the off state) is a suite of its own (`RETENTION_CHECKS`, in
//!    `contract_retention.rs`), run per store by `retention_contract_{memory,durable,
//!    redis}`. Schedules' ticks (made, stale, deduped, skipped, the cursors) are a suite of their own (`SCHEDULE_CHECKS`, in
//!    `contract_schedules.rs`), run per store by `schedules_contract_{memory,durable,
//!    redis}`, with shared-mode-only tests beside them (`schedules_shared_*`: instances
//!    racing one tick, a tick waking another instance, early/large/damaged refusals).
//!
//! 2. A seeded randomized differential (`memory_vs_redis_differential`): one random
//!    sequence of store operations (four fake connections, five tube names, ids mostly
//!    of live or held jobs, every `Store` method) is applied to a `MemoryStore` and a
//!    `RedisStore`, and every result is compared: ids, bodies, tubes, booleans, counts,
//!    tube lists. After every operation `totals()`, the tube list and `job_info` of
//!    the jobs the operation named, made or released are compared too; every 50
//!    operations (and at the end) also `tube_info` of every tube name, `job_info` of
//!    the live and held jobs (of every id ever handed out, at the end), `has_ready`,
//!    `peek_ready`, `soonest_deadline` and `next_deadline`. Phases of 150 operations
//!    alternate between the plain mix and one that also deletes jobs and drops
//!    references, so tubes are often destroyed (and the list reordered). So that
//!    nothing depends on timing, delays are 0 or at least 100 000 s and TTRs at least
//!    100 000 s (distinct long values differ by far more than a run lasts, so the
//!    delayed order is fixed by the sequence), and pauses are 0 ("resume now", ended
//!    by the next `tick`) or long. The memory store gets a synthetic clock (1 ms per
//!    operation) and the Redis store its own. Clock-derived values are compared only
//!    as far as the clocks cannot change them: `job_info` ignores `created`, `now` and
//!    the deadline's value (only whether there is one); `tube_info` ignores `now`,
//!    compares the pause in whole seconds and whether it is set, and `pause_until`
//!    only as set or not; a touch or reserve deadline and
//!    `soonest_deadline`/`next_deadline` only as present or not (and `next_deadline`
//!    by the rule of `agree`). A per-operation
//!    summary (how many had an effect or found something, how many tubes were
//!    destroyed) is printed so a generator that stopped hitting anything shows.
//!    Odd seeds run with retention on in both stores: each touched job's history and
//!    retained record (events' kinds and connections, figures but `created`, body)
//!    are compared after its operation, and every job's at each sweep.
//!
//! 3. Bounded script calls (Redis only): a tick of 5,000 due delayed jobs, a kick of more
//!    jobs than one call moves (and never mixing buried and delayed ones when a call's
//!    worth are buried), and the reclaim of a lost reserve among 2,500 reservations all
//!    finish over several calls of at most `SCRIPT_CHUNK` jobs each.
//!
//! 4. Dedupe windows past their end in Redis (`contract_windows.rs`): swept by the
//!    tick, and dropped before a delete evicts an open one, never counted as evicted.
//!
//! Environment: `REDSTALK_STORE_SEED` (one seed or a comma-separated list, decimal or
//! 0x-hex; default: three fixed seeds plus one from the clock, printed),
//! `REDSTALK_STORE_OPS` (operations per seed, default 1000). On a mismatch the test
//! prints the seed, step, operation, both results, the preceding operations and the
//! replay command, and fails. It ends with the line
//! `store contract: N ops over K seeds, memory vs redis, M mismatches`.
//!
//! Redis: each test starts its own `redis-server` on a free port (never 6379) through
//! `support::redis`; when it is not installed the Redis parts are skipped loudly,
//! unless `REDSTALK_REQUIRE_ORACLE=1` makes that a failure.

// A test reports failure by panicking: unwrap and expect are how it says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod contract_admin;
mod contract_batch;
mod contract_by_id;
mod contract_commands;
mod contract_concurrent;
mod contract_keys;
mod contract_policies;
mod contract_retention;
mod contract_schedules;
mod contract_windows;
mod support;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use contract_admin::{admin_edits, admin_listing};
use contract_batch::{batch_flush_steps, batch_list_ops, batch_reserve_many};
use contract_concurrent::concurrent_callers;
use contract_keys::{
    keys_commands, keys_dedupe_and_replace, keys_in_entries, keys_move, keys_windows,
};
use contract_policies::{policies_backoff, policies_dead_letter, policies_dead_letter_timeouts};
use contract_retention::{
    retention_bounds, retention_by_key, retention_closes_timeouts_and_flush, retention_history,
    retention_off,
};
use contract_schedules::{
    schedules_cursors_listed_and_dropped, schedules_keyed_dedupe, schedules_made_then_stale,
    schedules_shared_fired_job_reserved, schedules_shared_race, schedules_shared_refusals,
    schedules_skip_to,
};
use redstalk::persist::binlog::{self, BinlogConfig, Fsync};
use redstalk::persist::engine::Committing;
use redstalk::protocol::TubeName;
use redstalk::redis::RedisConfig;
use redstalk::store::durable::DurableStore;
use redstalk::store::retention::{EventKind, History, Retained, RetentionLimits};
use redstalk::store::shared::SCRIPT_CHUNK;
use redstalk::store::{
    AnyStore, Clock, ConnId, JobId, JobInfo, JobState, MemoryStore, NANOS_PER_SEC, Nanos, NewJob,
    RedisStore, Reserved, Store, StoreResult, Totals, TubeInfo,
};
use support::redis::RedisServer;
use support::rng::Rng;

// ---------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------

/// A delay or TTR (seconds) that never runs out during a test.
const LONG: u32 = 100_000;
/// How far a store's deadline may sit from the local estimate (Redis time vs ours).
const SLACK: Nanos = NANOS_PER_SEC;

const C1: ConnId = ConnId(1);
const C2: ConnId = ConnId(2);

fn t(name: &str) -> TubeName {
    TubeName::new(name.as_bytes()).expect("valid tube name")
}

fn tubes(names: &[&str]) -> Vec<TubeName> {
    names.iter().map(|n| t(n)).collect()
}

/// The store's own time (wall clock, or the Redis clock).
fn now(s: &AnyStore) -> Nanos {
    s.clock().now()
}

fn secs(n: u32) -> Nanos {
    u64::from(n) * NANOS_PER_SEC
}

/// Whole seconds as the store takes a duration (ms).
fn ms(secs: u32) -> u64 {
    u64::from(secs) * 1000
}

/// Assert that `value` is within [`SLACK`] of `[lo, hi]`.
fn assert_near(what: &str, value: Nanos, lo: Nanos, hi: Nanos) {
    assert!(
        value + SLACK >= lo && value <= hi + SLACK,
        "{what}: {value} not within [{lo}, {hi}] (± {SLACK} ns)"
    );
}

/// A job for `tube` (delay and TTR in seconds).
fn new_job(tube: &str, pri: u32, delay: u32, ttr: u32, body: &str) -> NewJob {
    NewJob {
        tube: t(tube),
        pri,
        delay_ms: ms(delay),
        ttr_ms: ms(ttr),
        body: Bytes::copy_from_slice(body.as_bytes()),
    }
}

async fn put(s: &AnyStore, tube: &str, pri: u32, delay: u32, ttr: u32, body: &str) -> JobId {
    let job = new_job(tube, pri, delay, ttr, body);
    s.put(job, now(s)).await.expect("put")
}

async fn reserve(s: &AnyStore, conn: ConnId, watched: &[&str]) -> Option<Reserved> {
    s.reserve(conn, &tubes(watched), now(s))
        .await
        .expect("reserve")
}

async fn reserve_job(s: &AnyStore, conn: ConnId, id: JobId) -> Option<Reserved> {
    s.reserve_job(conn, id, now(s)).await.expect("reserve_job")
}

async fn release(s: &AnyStore, conn: ConnId, id: JobId, pri: u32, delay: u32) -> Option<String> {
    s.release(conn, id, pri, ms(delay), now(s))
        .await
        .expect("release")
        .map(|t| t.to_string())
}

async fn bury(s: &AnyStore, conn: ConnId, id: JobId, pri: u32) -> bool {
    s.bury(conn, id, pri, now(s)).await.expect("bury")
}

async fn delete(s: &AnyStore, conn: ConnId, id: JobId) -> bool {
    s.delete(conn, id, now(s)).await.expect("delete")
}

/// Reserve job `id` for `conn` and bury it at priority `pri`.
async fn reserve_and_bury(s: &AnyStore, conn: ConnId, id: JobId, pri: u32) {
    assert!(reserve_job(s, conn, id).await.is_some(), "reserve_job {id}");
    assert!(bury(s, conn, id, pri).await, "bury {id}");
}

async fn job(s: &AnyStore, id: JobId) -> JobInfo {
    s.job_info(id, now(s))
        .await
        .expect("job_info")
        .unwrap_or_else(|| panic!("job {id} should exist"))
}

async fn state(s: &AnyStore, id: JobId) -> JobState {
    job(s, id).await.state
}

async fn tube_info(s: &AnyStore, tube: &str) -> Option<TubeInfo> {
    s.tube_info(&t(tube), now(s)).await.expect("tube_info")
}

async fn tube_of(s: &AnyStore, tube: &str) -> TubeInfo {
    tube_info(s, tube)
        .await
        .unwrap_or_else(|| panic!("tube {tube} should exist"))
}

async fn totals(s: &AnyStore) -> Totals {
    s.totals().await.expect("totals")
}

async fn list(s: &AnyStore) -> Vec<String> {
    s.list_tubes()
        .await
        .expect("list_tubes")
        .iter()
        .map(|t| t.to_string())
        .collect()
}

fn peek_body(r: StoreResult<Option<(JobId, Bytes)>>) -> Option<(JobId, String)> {
    r.expect("peek")
        .map(|(id, b)| (id, String::from_utf8_lossy(&b).into_owned()))
}

fn body(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The (counters) part of a job's figures: reserves, timeouts, releases, buries, kicks.
fn counters(j: &JobInfo) -> [u64; 5] {
    [j.reserves, j.timeouts, j.releases, j.buries, j.kicks]
}

/// The job-count part of a tube's figures: urgent, ready, reserved, delayed, buried.
fn counts(ti: &TubeInfo) -> [u64; 5] {
    [ti.urgent, ti.ready, ti.reserved, ti.delayed, ti.buried]
}

fn total_counts(x: &Totals) -> [u64; 5] {
    [x.urgent, x.ready, x.reserved, x.delayed, x.buried]
}

fn sorted_names(v: Vec<TubeName>) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|t| t.to_string()).collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------
// Part 1: the contract suite
// ---------------------------------------------------------------------------------

/// Ids start at 1 and increase; reserve takes the least (pri, id) among the watched
/// tubes only, with a deadline of now + TTR.
async fn put_and_reserve_order(s: &AnyStore) {
    let a1 = put(s, "a", 10, 0, LONG, "a1").await;
    let b1 = put(s, "b", 5, 0, LONG, "b1").await;
    let a2 = put(s, "a", 5, 0, LONG, "a2").await;
    let b2 = put(s, "b", 10, 0, LONG, "b2").await;
    let c1 = put(s, "c", 0, 0, LONG, "c1").await;
    let a3 = put(s, "a", u32::MAX, 0, 7, "a3").await;
    let b3 = put(s, "b", 0, 0, LONG + 1, "b3").await;
    assert_eq!([a1, b1, a2, b2, c1, a3, b3], [1, 2, 3, 4, 5, 6, 7], "ids");

    let mut got = Vec::new();
    loop {
        let before = now(s);
        let Some(r) = reserve(s, C1, &["a", "b"]).await else {
            break;
        };
        let ttr = job(s, r.id).await.ttr_ms * 1_000_000;
        assert_near("reserve deadline", r.deadline, before + ttr, now(s) + ttr);
        got.push((r.id, r.tube.to_string(), r.body));
    }
    let want = [
        (b3, "b", "b3"),
        (b1, "b", "b1"),
        (a2, "a", "a2"),
        (a1, "a", "a1"),
        (b2, "b", "b2"),
        (a3, "a", "a3"),
    ];
    let want: Vec<_> = want
        .iter()
        .map(|&(id, tube, b)| (id, tube.to_string(), body(b)))
        .collect();
    assert_eq!(got, want, "reserve order over [a, b] by (pri, id)");

    assert!(reserve(s, C1, &[]).await.is_none(), "no watched tubes");
    assert!(reserve(s, C1, &["nosuch"]).await.is_none(), "unknown tube");
    let r = reserve(s, C2, &["nosuch", "c", "a"]).await.expect("c1");
    assert_eq!((r.id, r.tube.as_str()), (c1, "c"));

    let j = job(s, a3).await;
    assert_eq!(j.state, JobState::Reserved);
    assert_eq!((j.pri, j.ttr_ms, j.delay_ms), (u32::MAX, 7000, 0));
    assert_eq!(counters(&j), [1, 0, 0, 0, 0]);
    assert!(j.deadline.is_some(), "a reserved job has a deadline");
    let x = totals(s).await;
    assert_eq!(total_counts(&x), [0, 0, 7, 0, 0]);
    assert_eq!((x.total_jobs, x.tubes), (7, 4));
}

/// A paused tube is skipped by reserve, but not by reserve_job, peeks or has_ready; a
/// zero pause resumes it, and the next tick clears the pause.
async fn pause_skips_tube(s: &AnyStore) {
    let a = put(s, "a", 0, 0, LONG, "a").await;
    let b = put(s, "b", 100, 0, LONG, "b").await;
    let before = now(s);
    assert!(s.pause(&t("a"), ms(LONG), now(s)).await.expect("pause"));
    let ti = tube_of(s, "a").await;
    assert_eq!(ti.pause, secs(LONG), "pause as set");
    assert_near(
        "pause_until",
        ti.pause_until,
        before + secs(LONG),
        now(s) + secs(LONG),
    );
    assert_eq!(ti.cmd_pause, 1);
    assert_eq!(tube_of(s, "b").await.pause, 0);

    let r = reserve(s, C1, &["a", "b"]).await.map(|r| r.id);
    assert_eq!(r, Some(b), "the paused tube's more urgent job is skipped");
    assert!(reserve(s, C1, &["a"]).await.is_none(), "only a paused tube");
    assert!(s.has_ready(&tubes(&["a"])).await.expect("has_ready"));
    let peeked = peek_body(s.peek_ready(&t("a")).await);
    assert_eq!(peeked, Some((a, "a".into())), "peek ignores the pause");
    assert!(
        reserve_job(s, C1, a).await.is_some(),
        "reserve_job ignores it"
    );
    assert_eq!(release(s, C1, a, 0, 0).await.as_deref(), Some("a"));

    assert!(!s.pause(&t("nosuch"), 5, now(s)).await.expect("pause"));
    assert!(
        tube_info(s, "nosuch").await.is_none(),
        "pause creates no tube"
    );

    assert!(s.pause(&t("a"), 0, now(s)).await.expect("pause 0"));
    assert_eq!(tube_of(s, "a").await.cmd_pause, 2);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let r = reserve(s, C1, &["a"]).await.map(|r| r.id);
    assert_eq!(r, Some(a), "a zero pause resumes the tube");
    let woken = sorted_names(s.tick(now(s)).await.expect("tick"));
    assert!(
        woken.contains(&"a".to_string()),
        "tick ends the pause: {woken:?}"
    );
    let ti = tube_of(s, "a").await;
    assert_eq!((ti.pause, ti.pause_until), (0, 0), "pause cleared by tick");
}

/// reserve_job takes a ready, delayed or buried job, never a reserved one.
async fn reserve_job_states(s: &AnyStore) {
    let r = put(s, "a", 5, 0, LONG, "ready").await;
    let d = put(s, "a", 5, LONG, LONG, "delayed").await;
    let b = put(s, "b", 5, 0, LONG, "buried").await;
    reserve_and_bury(s, C2, b, 9).await;
    assert_eq!(total_counts(&totals(s).await), [1, 1, 0, 1, 1]);

    let got = reserve_job(s, C1, r).await.expect("ready job");
    assert_eq!(
        (got.id, got.tube.as_str(), got.body),
        (r, "a", body("ready"))
    );
    assert!(reserve_job(s, C2, r).await.is_none(), "reserved by another");
    assert!(reserve_job(s, C1, r).await.is_none(), "reserved by itself");
    let got = reserve_job(s, C1, d).await.expect("delayed job");
    assert_eq!(got.body, body("delayed"));
    let got = reserve_job(s, C1, b).await.expect("buried job");
    assert_eq!((got.tube.as_str(), got.body), ("b", body("buried")));
    assert!(reserve_job(s, C1, 999).await.is_none(), "no such job");

    for id in [r, d, b] {
        assert_eq!(state(s, id).await, JobState::Reserved);
    }
    assert_eq!(counters(&job(s, b).await), [2, 0, 0, 1, 0]);
    assert_eq!(job(s, b).await.pri, 9, "the bury priority stays");
    assert_eq!(total_counts(&totals(s).await), [0, 0, 3, 0, 0]);
    assert_eq!(counts(&tube_of(s, "a").await), [0, 0, 2, 0, 0]);
    // The held jobs are C1's now: C2 (the old burier) cannot touch them.
    assert!(!bury(s, C2, b, 1).await);
    assert_eq!(release(s, C1, b, 1, 0).await.as_deref(), Some("b"));
}

/// Anyone may delete a job that is not reserved; a reserved job only its holder.
async fn delete_rules(s: &AnyStore) {
    s.watch_tube(&t("a")).await.expect("watch");
    let ready = put(s, "a", 1, 0, LONG, "r").await;
    let delayed = put(s, "a", 1, LONG, LONG, "d").await;
    let buried = put(s, "a", 1, 0, LONG, "b").await;
    reserve_and_bury(s, C1, buried, 1).await;
    let held = put(s, "a", 1, 0, LONG, "h").await;
    assert!(reserve_job(s, C1, held).await.is_some());

    assert!(delete(s, C2, ready).await, "ready, by anyone");
    assert!(delete(s, C2, delayed).await, "delayed, by anyone");
    assert!(delete(s, C2, buried).await, "buried, by anyone");
    assert!(!delete(s, C2, held).await, "reserved by another connection");
    assert_eq!(state(s, held).await, JobState::Reserved, "still held");
    assert!(delete(s, C1, held).await, "by its holder");
    assert!(!delete(s, C1, held).await, "already gone");
    assert!(!delete(s, C1, 999).await, "never existed");
    for id in [ready, delayed, buried, held] {
        assert!(s.job_info(id, now(s)).await.expect("job_info").is_none());
        assert!(s.peek(id).await.expect("peek").is_none());
    }
    let ti = tube_of(s, "a").await;
    assert_eq!(counts(&ti), [0; 5]);
    assert_eq!((ti.cmd_delete, ti.total_jobs), (4, 4));
    let x = totals(s).await;
    assert_eq!(total_counts(&x), [0; 5]);
    assert_eq!(x.total_jobs, 4, "total_jobs counts puts, not live jobs");
    assert_eq!(release(s, C1, held, 1, 0).await, None, "gone, not held");
}

/// Release, bury and touch act only on a job the connection holds.
async fn holder_only(s: &AnyStore) {
    s.watch_tube(&t("x")).await.expect("watch");
    let j = put(s, "x", 50, 0, LONG, "j").await;
    let k = put(s, "x", 60, 0, LONG + 5, "k").await;
    let d1 = reserve(s, C1, &["x"]).await.expect("j").deadline;

    assert_eq!(release(s, C2, j, 1, 0).await, None, "release by another");
    assert!(!bury(s, C2, j, 1).await, "bury by another");
    assert!(s.touch(C2, j, now(s)).await.expect("touch").is_none());
    assert_eq!(
        release(s, C1, k, 1, 0).await,
        None,
        "release of a ready job"
    );
    assert!(!bury(s, C1, k, 1).await, "bury of a ready job");
    assert!(s.touch(C1, k, now(s)).await.expect("touch").is_none());
    assert_eq!(
        counters(&job(s, j).await),
        [1, 0, 0, 0, 0],
        "nothing counted"
    );

    tokio::time::sleep(Duration::from_millis(2)).await;
    let before = now(s);
    let d2 = s.touch(C1, j, now(s)).await.expect("touch").expect("held");
    assert!(d2 >= d1, "touch restarts the TTR: {d2} < {d1}");
    assert_near(
        "touch deadline",
        d2,
        before + secs(LONG),
        now(s) + secs(LONG),
    );
    assert_eq!(s.soonest_deadline(C1).await.expect("soonest"), Some(d2));

    assert_eq!(release(s, C1, j, 70, 0).await.as_deref(), Some("x"));
    let info = job(s, j).await;
    assert_eq!(
        (info.state, info.pri, info.delay_ms),
        (JobState::Ready, 70, 0)
    );
    assert_eq!(counters(&info), [1, 0, 1, 0, 0]);
    assert_eq!(info.deadline, None);
    assert_eq!(release(s, C1, j, 70, 0).await, None, "no longer held");
    assert_eq!(s.soonest_deadline(C1).await.expect("soonest"), None);

    let r = reserve(s, C1, &["x"]).await.expect("k");
    assert_eq!(r.id, k, "pri 60 before the released job's new pri 70");
    assert_eq!(release(s, C1, k, 60, LONG).await.as_deref(), Some("x"));
    let info = job(s, k).await;
    assert_eq!((info.state, info.delay_ms), (JobState::Delayed, ms(LONG)));
    assert!(info.deadline.is_some(), "a delayed job has a due time");
    assert_eq!(counts(&tube_of(s, "x").await), [1, 1, 0, 1, 0]);

    assert_eq!(reserve(s, C2, &["x"]).await.map(|r| r.id), Some(j));
    assert!(bury(s, C2, j, 7).await);
    let info = job(s, j).await;
    assert_eq!((info.state, info.pri), (JobState::Buried, 7));
    assert_eq!(counters(&info), [2, 0, 1, 1, 0]);
    assert!(!bury(s, C2, j, 7).await, "buried, not held");
    assert!(s.touch(C2, j, now(s)).await.expect("touch").is_none());
    assert_eq!(counts(&tube_of(s, "x").await), [0, 0, 0, 1, 1]);
}

/// Kick takes buried jobs (in bury order) while there are any, else delayed ones (in
/// due order), never both in one call.
async fn kick_order(s: &AnyStore) {
    s.watch_tube(&t("k")).await.expect("watch");
    let d1 = put(s, "k", 1, 3 * LONG, LONG, "d1").await;
    let d2 = put(s, "k", 1, LONG, LONG, "d2").await;
    let d3 = put(s, "k", 1, 2 * LONG, LONG, "d3").await;
    let b1 = put(s, "k", 1, 0, LONG, "b1").await;
    let b2 = put(s, "k", 1, 0, LONG, "b2").await;
    let b3 = put(s, "k", 1, 0, LONG, "b3").await;
    for id in [b2, b3, b1] {
        reserve_and_bury(s, C1, id, 1).await;
    }
    assert_eq!(
        peek_body(s.peek_buried(&t("k")).await).map(|p| p.0),
        Some(b2)
    );
    assert_eq!(
        peek_body(s.peek_delayed(&t("k")).await).map(|p| p.0),
        Some(d2)
    );

    let k = t("k");
    assert_eq!(s.kick(&k, 0, now(s)).await.expect("kick"), 0, "bound 0");
    assert_eq!(s.kick(&k, 2, now(s)).await.expect("kick"), 2);
    assert_eq!(
        [state(s, b2).await, state(s, b3).await, state(s, b1).await],
        [JobState::Ready, JobState::Ready, JobState::Buried],
        "the first two buried, in bury order"
    );
    assert_eq!(
        s.kick(&k, 10, now(s)).await.expect("kick"),
        1,
        "only buried jobs"
    );
    assert_eq!(state(s, d2).await, JobState::Delayed);
    assert_eq!(s.kick(&k, 2, now(s)).await.expect("kick"), 2);
    assert_eq!(
        [state(s, d2).await, state(s, d3).await, state(s, d1).await],
        [JobState::Ready, JobState::Ready, JobState::Delayed],
        "then delayed ones, soonest due first"
    );
    assert_eq!(s.kick(&k, u32::MAX, now(s)).await.expect("kick"), 1);
    assert_eq!(
        s.kick(&k, 5, now(s)).await.expect("kick"),
        0,
        "nothing left"
    );
    assert_eq!(s.kick(&t("nosuch"), 5, now(s)).await.expect("kick"), 0);
    assert!(
        tube_info(s, "nosuch").await.is_none(),
        "kick creates no tube"
    );
    for id in [d1, d2, d3, b1, b2, b3] {
        let j = job(s, id).await;
        assert_eq!(j.state, JobState::Ready);
        assert_eq!(j.kicks, 1, "job {id} kicked once");
    }
    assert_eq!(counts(&tube_of(s, "k").await), [6, 6, 0, 0, 0]);
}

/// kick_job moves one buried or delayed job to ready.
async fn kick_job_rules(s: &AnyStore) {
    let b = put(s, "a", 2000, 0, LONG, "b").await;
    reserve_and_bury(s, C1, b, 2000).await;
    let d = put(s, "b", 2000, LONG, LONG, "d").await;
    let r = put(s, "a", 2000, 0, LONG, "r").await;
    let h = put(s, "a", 2000, 0, LONG, "h").await;
    assert!(reserve_job(s, C1, h).await.is_some());

    let kick = |id| async move {
        s.kick_job(id, now(s))
            .await
            .expect("kick_job")
            .map(|t| t.to_string())
    };
    assert_eq!(kick(b).await.as_deref(), Some("a"), "buried");
    assert_eq!(kick(d).await.as_deref(), Some("b"), "delayed");
    assert_eq!(kick(r).await, None, "ready");
    assert_eq!(kick(h).await, None, "reserved");
    assert_eq!(kick(999).await, None, "no such job");
    assert_eq!(kick(b).await, None, "already kicked");
    for id in [b, d] {
        let j = job(s, id).await;
        assert_eq!((j.state, j.kicks), (JobState::Ready, 1));
    }
    assert_eq!(job(s, r).await.kicks, 0);
    assert_eq!(total_counts(&totals(s).await), [0, 3, 1, 0, 0]);
}

/// peek by id in any state; peek-ready by (pri, id), peek-delayed by due time,
/// peek-buried in bury order.
async fn peeks(s: &AnyStore) {
    s.watch_tube(&t("p")).await.expect("watch");
    let p = t("p");
    for which in 0..3 {
        for tube in [&p, &t("nosuch")] {
            let got = match which {
                0 => s.peek_ready(tube).await,
                1 => s.peek_delayed(tube).await,
                _ => s.peek_buried(tube).await,
            };
            assert!(got.expect("peek").is_none(), "empty tube {tube}");
        }
    }
    let r1 = put(s, "p", 9, 0, LONG, "r1").await;
    let r2 = put(s, "p", 3, 0, LONG, "r2").await;
    let r3 = put(s, "p", 3, 0, LONG, "r3").await;
    let d1 = put(s, "p", 0, 2 * LONG, LONG, "d1").await;
    let d2 = put(s, "p", 0, LONG, LONG, "d2").await;
    let _ = put(s, "q", 0, 0, LONG, "other tube").await;
    assert_eq!(peek_body(s.peek_ready(&p).await), Some((r2, "r2".into())));
    assert_eq!(peek_body(s.peek_delayed(&p).await), Some((d2, "d2".into())));
    reserve_and_bury(s, C1, r3, 3).await;
    reserve_and_bury(s, C1, r1, 0).await;
    assert_eq!(peek_body(s.peek_buried(&p).await), Some((r3, "r3".into())));
    assert!(reserve_job(s, C2, d1).await.is_some());
    for (id, b) in [(r1, "r1"), (r2, "r2"), (r3, "r3"), (d1, "d1"), (d2, "d2")] {
        assert_eq!(
            peek_body(s.peek(id).await),
            Some((id, b.into())),
            "peek {id}"
        );
    }
    assert_eq!(peek_body(s.peek(999).await), None);
    assert!(reserve_job(s, C2, r2).await.is_some());
    assert_eq!(peek_body(s.peek_ready(&p).await), None, "r2 reserved");
    assert_eq!(peek_body(s.peek_delayed(&p).await), Some((d2, "d2".into())));
}

/// The figures of tube_info, totals and job_info; has_ready, soonest_deadline,
/// next_deadline.
async fn figures(s: &AnyStore) {
    let f = t("f");
    s.use_tube(&f).await.expect("use");
    s.watch_tube(&f).await.expect("watch");
    s.watch_tube(&f).await.expect("watch");
    let before = now(s);
    let urgent = put(s, "f", 1023, 0, LONG, "urgent").await;
    let normal = put(s, "f", 1024, 0, LONG, "normal").await;
    let delayed = put(s, "f", 0, LONG, 3, "delayed").await;
    let buried = put(s, "f", 5, 0, LONG, "buried").await;
    reserve_and_bury(s, C1, buried, 5).await;
    let held = put(s, "f", 6, 0, LONG + 10, "held").await;
    let held_deadline = reserve_job(s, C1, held).await.expect("held").deadline;
    let held2 = put(s, "f", 6, 0, LONG + 20, "held2").await;
    assert!(reserve_job(s, C1, held2).await.is_some());
    let dflt = put(s, "default", 0, 0, LONG, "default").await;
    let after = now(s);

    let ti = tube_of(s, "f").await;
    assert_eq!(
        counts(&ti),
        [1, 2, 2, 1, 1],
        "urgent ready reserved delayed buried"
    );
    assert_eq!((ti.total_jobs, ti.using, ti.watching), (6, 1, 2));
    assert_eq!(
        (ti.cmd_delete, ti.cmd_pause, ti.pause, ti.pause_until),
        (0, 0, 0, 0)
    );
    assert_near("tube_info now", ti.now, before, now(s));
    let td = tube_of(s, "default").await;
    assert_eq!(counts(&td), [1, 1, 0, 0, 0]);
    assert_eq!((td.total_jobs, td.using, td.watching), (1, 0, 0));
    let x = totals(s).await;
    assert_eq!(total_counts(&x), [2, 3, 2, 1, 1]);
    assert_eq!((x.total_jobs, x.job_timeouts, x.tubes), (7, 0, 2));

    let j = job(s, delayed).await;
    assert_eq!(
        (j.id, j.tube.as_str(), j.state),
        (delayed, "f", JobState::Delayed)
    );
    assert_eq!((j.pri, j.delay_ms, j.ttr_ms), (0, ms(LONG), 3000));
    assert_eq!(counters(&j), [0; 5]);
    assert_near("created", j.created, before, after);
    let due = j.deadline.expect("a delayed job's due time");
    assert_near("due", due, before + secs(LONG), after + secs(LONG));
    assert_near("job_info now", j.now, before, now(s));
    let j = job(s, held).await;
    assert_eq!(j.state, JobState::Reserved);
    // The same deadline, read back: the Redis store reports reservations on the
    // engine's clock and job figures on the Redis clock, so allow their skew.
    let skew = secs(1) / 20;
    let deadline = j.deadline.expect("a reserved job's deadline");
    assert_near(
        "held deadline",
        deadline,
        held_deadline - skew,
        held_deadline + skew,
    );
    assert_eq!(counters(&j), [1, 0, 0, 0, 0]);
    let j = job(s, buried).await;
    assert_eq!((j.state, j.deadline, j.pri), (JobState::Buried, None, 5));
    assert_eq!(counters(&j), [1, 0, 0, 1, 0]);
    for id in [urgent, normal, dflt] {
        let j = job(s, id).await;
        assert_eq!((j.state, j.deadline), (JobState::Ready, None));
    }
    assert!(s.job_info(999, now(s)).await.expect("job_info").is_none());
    assert!(tube_info(s, "nosuch").await.is_none());

    assert!(
        s.has_ready(&tubes(&["nosuch", "f"]))
            .await
            .expect("has_ready")
    );
    assert!(!s.has_ready(&tubes(&["nosuch"])).await.expect("has_ready"));
    assert!(!s.has_ready(&[]).await.expect("has_ready"));
    let soonest = s.soonest_deadline(C1).await.expect("soonest");
    assert_eq!(soonest, Some(held_deadline), "the earlier of the two TTRs");
    assert_eq!(s.soonest_deadline(C2).await.expect("soonest"), None);
    let next = s.next_deadline().await.expect("next").expect("a deadline");
    assert_near(
        "next deadline (the delayed job)",
        next,
        before + secs(LONG),
        after + secs(LONG),
    );
}

/// The tube list keeps creation order, and a destroyed tube's slot is taken by the
/// last tube (the reference's swap-remove).
async fn list_tubes_after_gc(s: &AnyStore) {
    assert_eq!(list(s).await, ["default"], "default always exists");
    for name in ["a", "b", "c", "d"] {
        s.watch_tube(&t(name)).await.expect("watch");
    }
    assert_eq!(list(s).await, ["default", "a", "b", "c", "d"]);
    s.unwatch_tube(&t("b")).await.expect("unwatch");
    assert_eq!(list(s).await, ["default", "a", "d", "c"], "d took b's slot");
    let e = put(s, "e", 1, 0, LONG, "keeps e alive").await;
    assert_eq!(list(s).await, ["default", "a", "d", "c", "e"]);
    s.unwatch_tube(&t("a")).await.expect("unwatch");
    assert_eq!(list(s).await, ["default", "e", "d", "c"]);
    assert!(delete(s, C1, e).await);
    assert_eq!(
        list(s).await,
        ["default", "c", "d"],
        "e went with its last job"
    );
    s.unwatch_tube(&t("c")).await.expect("unwatch");
    assert_eq!(list(s).await, ["default", "d"], "the last one just goes");
    s.watch_tube(&t("default")).await.expect("watch");
    s.unwatch_tube(&t("default")).await.expect("unwatch");
    s.use_tube(&t("b")).await.expect("use");
    assert_eq!(
        list(s).await,
        ["default", "d", "b"],
        "default is never destroyed"
    );
    assert_eq!(totals(s).await.tubes, 3);
}

/// use/watch references keep a tube alive; destroying it drops its counters and
/// pause, so it comes back fresh.
async fn refs_and_gc(s: &AnyStore) {
    let a = t("a");
    s.use_tube(&a).await.expect("use");
    s.use_tube(&a).await.expect("use");
    s.watch_tube(&a).await.expect("watch");
    let ti = tube_of(s, "a").await;
    assert_eq!((ti.using, ti.watching), (2, 1));
    let id = put(s, "a", 1, 0, LONG, "x").await;
    assert!(delete(s, C1, id).await);
    assert!(s.pause(&a, ms(LONG), now(s)).await.expect("pause"));
    let ti = tube_of(s, "a").await;
    assert_eq!((ti.total_jobs, ti.cmd_delete, ti.cmd_pause), (1, 1, 1));
    assert!(ti.pause > 0);

    s.unuse_tube(&a).await.expect("unuse");
    s.unwatch_tube(&a).await.expect("unwatch");
    assert_eq!(tube_of(s, "a").await.using, 1, "one user left");
    assert!(
        s.next_deadline().await.expect("next").is_some(),
        "the pause's end"
    );
    s.unuse_tube(&a).await.expect("unuse");
    assert!(tube_info(s, "a").await.is_none(), "no jobs, no references");
    assert_eq!(list(s).await, ["default"]);
    assert_eq!(totals(s).await.tubes, 1);
    assert_eq!(
        s.next_deadline().await.expect("next"),
        None,
        "its pause went too"
    );

    s.watch_tube(&a).await.expect("watch");
    let ti = tube_of(s, "a").await;
    let fresh = TubeInfo {
        watching: 1,
        now: ti.now,
        ..TubeInfo::default()
    };
    assert_eq!(ti, fresh, "a new tube of the same name starts from zero");
    let id = put(s, "a", 1, 0, LONG, "y").await;
    assert_eq!(
        reserve(s, C1, &["a"]).await.map(|r| r.id),
        Some(id),
        "not paused"
    );

    // A tube without references lives while it holds a job, in any state.
    s.unwatch_tube(&a).await.expect("unwatch");
    assert!(tube_info(s, "a").await.is_some(), "its job is reserved");
    assert!(bury(s, C1, id, 1).await);
    assert!(tube_info(s, "a").await.is_some(), "its job is buried");
    assert!(delete(s, C2, id).await);
    assert!(tube_info(s, "a").await.is_none());
}

/// A close without references returns every job a connection holds to ready at once, counters
/// untouched, and names the tubes that gained ready jobs.
async fn close_without_references_rules(s: &AnyStore) {
    let a = put(s, "ra", 1, 0, LONG, "a").await;
    let b = put(s, "rb", 2, 0, LONG, "b").await;
    let a2 = put(s, "ra", 3, 0, LONG, "a2").await;
    let other = put(s, "ra", 4, 0, LONG, "other").await;
    for id in [b, a, a2] {
        assert!(reserve_job(s, C1, id).await.is_some());
    }
    assert!(reserve_job(s, C2, other).await.is_some());
    assert!(s.soonest_deadline(C1).await.expect("soonest").is_some());

    let tubes = sorted_names(s.close(C1, &[], None, true, now(s)).await.expect("close"));
    assert_eq!(tubes, ["ra", "rb"]);
    for id in [a, b, a2] {
        let j = job(s, id).await;
        assert_eq!((j.state, j.deadline), (JobState::Ready, None));
        assert_eq!(counters(&j), [1, 0, 0, 0, 0], "counters untouched");
    }
    assert_eq!(state(s, other).await, JobState::Reserved, "C2's job stays");
    let x = totals(s).await;
    assert_eq!(total_counts(&x), [3, 3, 1, 0, 0]);
    assert_eq!(x.job_timeouts, 0);
    assert_eq!(counts(&tube_of(s, "ra").await), [2, 2, 1, 0, 0]);
    assert_eq!(s.soonest_deadline(C1).await.expect("soonest"), None);
    assert_eq!(release(s, C1, a, 1, 0).await, None, "no longer held");
    assert!(
        s.close(C1, &[], None, true, now(s))
            .await
            .expect("close")
            .is_empty()
    );
    assert!(
        s.close(ConnId(77), &[], None, true, now(s))
            .await
            .expect("close")
            .is_empty()
    );
    assert_eq!(reserve(s, C1, &["rb", "ra"]).await.map(|r| r.id), Some(a));
}

/// A reserve reports how long the job had been ready: since its put, release, kick,
/// or its holder's `close` without references, and not since anything earlier; `reserve_job` of a
/// ready job likewise, of a buried one 0. (Real time: 300 ms sleeps.)
async fn waits_since_ready(s: &AnyStore) {
    const PAUSE: Duration = Duration::from_millis(300);
    let long = PAUSE.as_nanos() as Nanos;
    // A wait that started just now: well under the pause even on a busy machine.
    let short = long / 2;
    let waited = |r: Option<Reserved>| r.expect("a job").waited.expect("a recorded wait");

    let a = put(s, "w", 1, 0, LONG, "a").await;
    tokio::time::sleep(PAUSE).await;
    let w = waited(reserve(s, C1, &["w"]).await);
    assert!((long..long + SLACK).contains(&w), "since put: {w}");

    assert_eq!(release(s, C1, a, 1, 0).await.as_deref(), Some("w"));
    assert!(
        waited(reserve(s, C1, &["w"]).await) < short,
        "since release"
    );

    assert!(bury(s, C1, a, 1).await);
    tokio::time::sleep(PAUSE).await;
    assert_eq!(s.kick(&t("w"), 1, now(s)).await.expect("kick"), 1);
    assert!(waited(reserve(s, C1, &["w"]).await) < short, "since kick");

    tokio::time::sleep(PAUSE).await;
    assert_eq!(
        sorted_names(s.close(C1, &[], None, true, now(s)).await.expect("close")),
        ["w"]
    );
    assert!(waited(reserve(s, C2, &["w"]).await) < short, "since close");

    assert!(bury(s, C2, a, 1).await);
    assert_eq!(
        waited(reserve_job(s, C1, a).await),
        0,
        "a buried job never waited"
    );

    let b = put(s, "w", 1, 0, LONG, "b").await;
    tokio::time::sleep(PAUSE).await;
    let w = waited(reserve_job(s, C1, b).await);
    assert!(
        (long..long + SLACK).contains(&w),
        "reserve_job since put: {w}"
    );
}

/// burn_id consumes an id without making a job.
async fn burn_id_consumes(s: &AnyStore) {
    assert_eq!(put(s, "default", 1, 0, LONG, "1").await, 1);
    assert_eq!(s.burn_id().await.expect("burn"), 2);
    assert_eq!(s.burn_id().await.expect("burn"), 3);
    assert_eq!(put(s, "default", 1, 0, LONG, "4").await, 4);
    for id in [2, 3] {
        assert!(s.peek(id).await.expect("peek").is_none());
        assert!(s.job_info(id, now(s)).await.expect("job_info").is_none());
    }
    let x = totals(s).await;
    assert_eq!((x.total_jobs, x.ready), (2, 2));
    assert_eq!(tube_of(s, "default").await.total_jobs, 2);
}

/// tick (real time, 1 s delays): delayed jobs become ready, lapsed reservations return
/// to ready with a timeout counted, pauses end.
async fn timed_tick(s: &AnyStore) {
    s.watch_tube(&t("tp")).await.expect("watch");
    let d = put(s, "td", 1, 1, LONG, "due in 1 s").await;
    let r = put(s, "tr", 1, 0, 1, "TTR 1 s").await;
    assert_eq!(reserve(s, C1, &["tr"]).await.map(|x| x.id), Some(r));
    assert!(s.pause(&t("tp"), ms(1), now(s)).await.expect("pause"));
    let start = now(s);

    let early = s.tick(now(s)).await.expect("tick");
    assert!(
        early.is_empty(),
        "nothing due yet: {early:?} {} ms after the puts",
        (now(s) - start) / 1_000_000
    );
    assert_eq!(state(s, d).await, JobState::Delayed);
    assert_eq!(state(s, r).await, JobState::Reserved);
    let next = s.next_deadline().await.expect("next").expect("deadlines");
    assert_near("next deadline", next, start, start + secs(1));
    assert!(s.soonest_deadline(C1).await.expect("soonest").is_some());

    tokio::time::sleep(Duration::from_millis(2100)).await;
    let woken = sorted_names(s.tick(now(s)).await.expect("tick"));
    assert_eq!(woken, ["td", "tp", "tr"]);

    let j = job(s, d).await;
    assert_eq!((j.state, j.deadline), (JobState::Ready, None));
    assert_eq!(counters(&j), [0; 5], "promotion is not a kick");
    let j = job(s, r).await;
    assert_eq!((j.state, j.deadline), (JobState::Ready, None));
    assert_eq!(counters(&j), [1, 1, 0, 0, 0], "one timeout");
    let ti = tube_of(s, "tp").await;
    assert_eq!((ti.pause, ti.pause_until, ti.cmd_pause), (0, 0, 1));
    let x = totals(s).await;
    assert_eq!(total_counts(&x), [2, 2, 0, 0, 0]);
    assert_eq!(x.job_timeouts, 1);

    assert_eq!(
        release(s, C1, r, 1, 0).await,
        None,
        "the reservation lapsed"
    );
    assert_eq!(s.soonest_deadline(C1).await.expect("soonest"), None);
    assert_eq!(s.next_deadline().await.expect("next"), None);
    assert!(s.tick(now(s)).await.expect("tick").is_empty(), "all done");
    assert_eq!(totals(s).await.job_timeouts, 1);
    // Both have been ready since their due time and deadline (about 1 s before this
    // tick), not since the tick noticed.
    for (tube, id) in [("tr", r), ("td", d)] {
        let got = reserve(s, C2, &[tube]).await.expect("ready");
        assert_eq!(got.id, id);
        let w = got.waited.expect("a recorded wait");
        assert!(
            (secs(1) - NANOS_PER_SEC / 10..secs(3)).contains(&w),
            "{tube}: waited {w} ns"
        );
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;
type Check = (&'static str, fn(Arc<AnyStore>) -> BoxFuture);

macro_rules! checks {
    ($($name:ident),* $(,)?) => {
        &[$((stringify!($name), |s: Arc<AnyStore>| -> BoxFuture {
            Box::pin(async move { $name(&s).await })
        })),*]
    };
}

/// Every contract check; each gets a fresh store.
const CHECKS: &[Check] = checks![
    put_and_reserve_order,
    pause_skips_tube,
    reserve_job_states,
    delete_rules,
    holder_only,
    kick_order,
    kick_job_rules,
    peeks,
    figures,
    list_tubes_after_gc,
    refs_and_gc,
    close_without_references_rules,
    burn_id_consumes,
    timed_tick,
    waits_since_ready,
    admin_listing,
    admin_edits,
    batch_reserve_many,
    batch_list_ops,
    batch_flush_steps,
    keys_dedupe_and_replace,
    keys_commands,
    keys_windows,
    keys_move,
    keys_in_entries,
    policies_dead_letter,
    policies_dead_letter_timeouts,
    policies_backoff,
    concurrent_callers,
];

/// Retention's checks (`contract_retention.rs`), each on a fresh store: a suite of
/// their own, like the schedules'.
const RETENTION_CHECKS: &[Check] = checks![
    retention_history,
    retention_by_key,
    retention_bounds,
    retention_closes_timeouts_and_flush,
    retention_off,
];

/// The schedules' checks (`contract_schedules.rs`), each on a fresh store. A suite of
/// their own, so each store's schedules can be run (and fail) apart from the rest.
const SCHEDULE_CHECKS: &[Check] = checks![
    schedules_made_then_stale,
    schedules_keyed_dedupe,
    schedules_skip_to,
    schedules_cursors_listed_and_dropped,
];

static PREFIXES: AtomicU64 = AtomicU64::new(0);

/// A fresh Redis store: a prefix no other store of this process uses.
async fn redis_store(url: &str, label: &str) -> RedisStore {
    redis_store_with_prefix(url, label).await.0
}

/// [`redis_store`], and its prefix (for a test that reads its keys in Redis).
async fn redis_store_with_prefix(url: &str, label: &str) -> (RedisStore, String) {
    let n = PREFIXES.fetch_add(1, Ordering::Relaxed);
    let prefix = format!("rs-contract-{}-{label}-{n}", std::process::id());
    (connect_redis_store(url, &prefix).await, prefix)
}

/// A Redis store on the namespace `prefix` (another instance, when one is there).
async fn connect_redis_store(url: &str, prefix: &str) -> RedisStore {
    let config = RedisConfig {
        url: url.to_string(),
        prefix: prefix.to_string(),
        ..RedisConfig::default()
    };
    RedisStore::connect(&config)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// Start a private redis-server, or `None` (said loudly) when it is not installed and
/// not required.
fn start_redis() -> Option<RedisServer> {
    support::redis::private_redis(&[], "Redis store contract tests")
}

/// Which store a contract run checks.
#[derive(Clone, Copy)]
enum Engine<'a> {
    Memory,
    /// The memory store persisted by a committer, as `-b DIR` runs it.
    Durable,
    Redis(&'a str),
}

impl Engine<'_> {
    fn name(self) -> &'static str {
        match self {
            Engine::Memory => "memory",
            Engine::Durable => "durable",
            Engine::Redis(_) => "redis",
        }
    }
}

/// A `DurableStore` as `-b DIR` runs it: a journaled memory store whose committer
/// writes every change to a binlog in a fresh directory; the directory and the
/// committer, to check what reached the log.
fn durable_store() -> (DurableStore, Committing, PathBuf) {
    let dir = support::fresh_dir();
    let opened = binlog::open(log_config(&dir)).expect("open a binlog in a fresh directory");
    let (store, committing) = Committing::start(opened.into_parts(Clock::new()));
    (store, committing, dir)
}

fn log_config(dir: &Path) -> BinlogConfig {
    BinlogConfig {
        dir: dir.to_path_buf(),
        fsync: Fsync::Never,
        file_size: binlog::DEFAULT_FILE_SIZE,
    }
}

/// After a check on a durable store: every change it made reaches the log (the store
/// says so, and replaying the log finds as many jobs as the store holds).
async fn check_persisted(name: &str, store: &AnyStore, committing: Committing, dir: &Path) {
    store
        .durable(store.last_change())
        .await
        .unwrap_or_else(|e| panic!("{name}: the committer did not persist every change: {e}"));
    let t = totals(store).await;
    committing.stop().await;
    let replayed = reopen(name, dir).await;
    let held = t.ready + t.reserved + t.delayed + t.buried;
    assert_eq!(
        replayed.snapshot.jobs.len() as u64,
        held,
        "{name}: the log holds another number of jobs than the store"
    );
    drop(replayed);
    let _ = std::fs::remove_dir_all(dir);
}

/// Open the log again once the stopped committer's sink has let its lock go. The lock
/// is an flock on the open file: a redis-server another test of this process starts
/// meanwhile inherits the descriptor between its fork and its exec, and holds the lock
/// that long, so a `Locked` answer is waited out (up to 10 s, printed when it happens).
async fn reopen(name: &str, dir: &Path) -> binlog::Opened {
    let started = Instant::now();
    for attempt in 0.. {
        match binlog::open(log_config(dir)) {
            Ok(opened) => {
                if attempt > 0 {
                    println!(
                        "{name}: the log was locked for {:?} after the stop",
                        started.elapsed()
                    );
                }
                return opened;
            }
            Err(binlog::BinlogError::Locked(_)) if started.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("{name}: reopen the binlog: {e}"),
        }
    }
    unreachable!("the loop returns or panics")
}

/// Run every check concurrently, each on a fresh store, and fail naming the checks
/// that failed.
async fn run_contract(engine: Engine<'_>) {
    run_checks(engine, CHECKS).await;
}

/// [`run_contract`] of the checks `checks`.
async fn run_checks(engine: Engine<'_>, checks: &[Check]) {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for &(name, check) in checks {
        let task = match engine {
            Engine::Memory => tokio::spawn(check(Arc::new(AnyStore::Memory(MemoryStore::new())))),
            Engine::Redis(url) => {
                let store = AnyStore::Redis(redis_store(url, name).await);
                tokio::spawn(check(Arc::new(store)))
            }
            Engine::Durable => {
                let (store, committing, dir) = durable_store();
                let store = Arc::new(AnyStore::Durable(store));
                tokio::spawn(async move {
                    check(store.clone()).await;
                    check_persisted(name, &store, committing, &dir).await;
                })
            }
        };
        tasks.push((name, task));
    }
    let mut failed = Vec::new();
    for (name, task) in tasks {
        if task.await.is_err() {
            failed.push(name);
        }
    }
    let engine = engine.name();
    eprintln!(
        "store contract ({engine}): {} checks, {} failed, {:.1} s",
        checks.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        failed.is_empty(),
        "{engine} store broke the contract in {failed:?}"
    );
}

#[tokio::test]
async fn contract_memory() {
    run_contract(Engine::Memory).await;
}

#[tokio::test]
async fn contract_durable() {
    run_contract(Engine::Durable).await;
}

#[tokio::test]
async fn contract_redis() {
    let Some(redis) = start_redis() else { return };
    run_contract(Engine::Redis(&redis.url())).await;
}

/// The contract on a Redis that refuses `FUNCTION` (renamed away, as an ACL without it
/// or a Redis before 7 leaves it): every script is called by `EVALSHA` instead of as a
/// Redis Function (docs/REDIS.md, *Scripts*), with the same outcome.
#[tokio::test]
async fn contract_redis_by_evalsha() {
    let Some(redis) = support::redis::private_redis(
        &["--rename-command", "FUNCTION", ""],
        "Redis store contract tests",
    ) else {
        return;
    };
    let url = redis.url();
    run_contract(Engine::Redis(&url)).await;
    let calls = calls_by_command(&url).await;
    let by = |c: &str| calls.get(c).copied().unwrap_or(0);
    assert!(
        by("evalsha") > 1000 && by("fcall") == 0,
        "every call by EVALSHA: {calls:?}"
    );
}

#[tokio::test]
async fn schedules_contract_memory() {
    run_checks(Engine::Memory, SCHEDULE_CHECKS).await;
}

#[tokio::test]
async fn schedules_contract_durable() {
    run_checks(Engine::Durable, SCHEDULE_CHECKS).await;
}

#[tokio::test]
async fn schedules_contract_redis() {
    let Some(redis) = start_redis() else { return };
    run_checks(Engine::Redis(&redis.url()), SCHEDULE_CHECKS).await;
}

#[tokio::test]
async fn retention_contract_memory() {
    run_checks(Engine::Memory, RETENTION_CHECKS).await;
}

#[tokio::test]
async fn retention_contract_durable() {
    run_checks(Engine::Durable, RETENTION_CHECKS).await;
}

#[tokio::test]
async fn retention_contract_redis() {
    let Some(redis) = start_redis() else { return };
    run_checks(Engine::Redis(&redis.url()), RETENTION_CHECKS).await;
}

#[tokio::test]
async fn schedules_shared_instances_race_one_tick() {
    let Some(redis) = start_redis() else { return };
    schedules_shared_race(&redis.url()).await;
}

#[tokio::test]
async fn schedules_shared_tick_wakes_another_instance() {
    let Some(redis) = start_redis() else { return };
    schedules_shared_fired_job_reserved(&redis.url()).await;
}

#[tokio::test]
async fn schedules_shared_early_large_and_damaged() {
    let Some(redis) = start_redis() else { return };
    schedules_shared_refusals(&redis.url()).await;
}

/// Retention in shared mode: two instances on one namespace keep one history per job
/// and one retained set (a job put by one, reserved, released and deleted through the
/// other is found by both); a dead letter's bury is its holder's; a job released 80
/// times keeps 32 events in Redis, the count between them dropped; a record's Redis
/// memory is printed (the docs state it); and an instance with retention off leaves no
/// key of it in Redis.
#[tokio::test]
async fn retention_shared_instances_share_one_set() {
    use redstalk::store::retention::{EventKind, RetentionLimits};
    let Some(redis) = start_redis() else { return };
    let url = redis.url();
    let (first, prefix) = redis_store_with_prefix(&url, "retention").await;
    let a = AnyStore::Redis(first);
    let b = AnyStore::Redis(connect_redis_store(&url, &prefix).await);
    let on = RetentionLimits {
        keep_ms: 3_600_000,
        max_jobs: 1_000,
        max_bytes: 1 << 20,
        bodies: false,
    };
    a.set_retention(on);
    b.set_retention(on);

    let id = put(&a, "rs", 1, 0, LONG, "shared").await;
    assert_eq!(reserve(&b, C1, &["rs"]).await.map(|r| r.id), Some(id));
    assert!(release(&b, C1, id, 1, 0).await.is_some());
    assert!(reserve_job(&b, C2, id).await.is_some());
    let live = a
        .job_entry(id, now(&a))
        .await
        .expect("entry")
        .expect("lives");
    assert_eq!(
        live.history.map(|h| h.len()),
        Some(4),
        "b's events, seen by a"
    );
    assert!(delete(&b, C2, id).await);
    let r = a
        .retained(id, now(&a))
        .await
        .expect("retained")
        .expect("b's delete, retained for a");
    let kinds: Vec<(EventKind, u64)> = r.history.events().map(|e| (e.kind, e.conn)).collect();
    assert_eq!(
        kinds,
        [
            (EventKind::Put, 0),
            (EventKind::Reserve, 1),
            (EventKind::Release, 1),
            (EventKind::Reserve, 2),
            (EventKind::Delete, 2)
        ]
    );

    // A release a dead letter rule turns into a bury is that bury, by the holder.
    use redstalk::store::policy::{DeadLetter, Policies, Policy};
    let rule = Policy {
        dead_letter: Some(DeadLetter {
            reserves: Some(1),
            timeouts: None,
        }),
        backoff: None,
    };
    let policies = Policies::default()
        .with("rs-dead", rule)
        .expect("a valid rule");
    b.set_policies(Arc::new(policies));
    let dead = put(&a, "rs-dead", 1, 0, LONG, "dead").await;
    assert!(reserve_job(&b, C2, dead).await.is_some());
    assert!(release(&b, C2, dead, 1, 0).await.is_some());
    let entry = a
        .job_entry(dead, now(&a))
        .await
        .expect("entry")
        .expect("lives");
    let kinds: Vec<(EventKind, u64)> = entry
        .history
        .expect("history")
        .events()
        .map(|e| (e.kind, e.conn))
        .collect();
    assert_eq!(
        kinds,
        [
            (EventKind::Put, 0),
            (EventKind::Reserve, 2),
            (EventKind::DeadLetter, 2)
        ]
    );

    // A long history stays bounded in Redis, and reads back with its dropped count.
    let busy = put(&a, "rs", 1, 0, LONG, "busy").await;
    for _ in 0..80 {
        assert!(reserve_job(&a, C1, busy).await.is_some());
        assert!(release(&a, C1, busy, 1, 0).await.is_some());
    }
    let client = redis::Client::open(url.as_str()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis");
    let stored: String = redis::cmd("GET")
        .arg(format!("{{{prefix}}}:jh:{busy}"))
        .query_async(&mut conn)
        .await
        .expect("GET history");
    assert!(stored.len() <= 2_100, "{} bytes: {stored}", stored.len());
    assert!(
        stored.split(' ').count() < 161,
        "cut to its bounds once: {stored}"
    );
    assert!(delete(&a, C1, busy).await);
    let r = b
        .retained(busy, now(&b))
        .await
        .expect("retained")
        .expect("kept");
    assert_eq!(r.history.len(), 32);
    assert_eq!(
        r.history.dropped(),
        162 - 32,
        "put, 80 x (reserve, release), delete"
    );
    assert_eq!(
        r.history.events().last().map(|e| e.kind),
        Some(EventKind::Delete)
    );

    // A record's own hash (MEMORY USAGE): a typical one (put, reserve, delete), and one
    // whose history passes Redis' hash-max-listpack-value (64 bytes), which Redis keeps
    // as a hash table rather than a listpack.
    let typical = put(&a, "rs", 1, 0, LONG, "x").await;
    assert!(reserve_job(&a, C1, typical).await.is_some());
    assert!(delete(&a, C1, typical).await);
    for (what, record) in [("3 events", typical), ("5 events", id)] {
        let bytes: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(format!("{{{prefix}}}:ret:{record}"))
            .query_async(&mut conn)
            .await
            .expect("MEMORY USAGE");
        println!("MEMORY USAGE of a retained record without body ({what}): {bytes} bytes");
        assert!(bytes < 1_024, "{bytes}");
    }
    let used = |conn: &mut redis::aio::MultiplexedConnection| {
        let mut conn = conn.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("memory")
                .query_async(&mut conn)
                .await
                .expect("INFO memory");
            info.lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|n| n.trim().parse::<i64>().ok())
                .expect("used_memory")
        }
    };
    let before = used(&mut conn).await;
    for _ in 0..500 {
        let id = put(&a, "rs-mem", 1, 0, LONG, "x").await;
        assert!(delete(&a, C1, id).await);
    }
    let per = (used(&mut conn).await - before) / 500;
    println!(
        "Redis memory per retained record without body (2 events; its hash, its place in \
         the order, the byte total): ~{per} bytes"
    );

    // Off: nothing of retention is written.
    let (off, off_prefix) = redis_store_with_prefix(&url, "retention-off").await;
    let off = AnyStore::Redis(off);
    let id = put(&off, "ro", 1, 0, LONG, "x").await;
    assert!(reserve_job(&off, C1, id).await.is_some());
    assert!(delete(&off, C1, id).await);
    for pattern in [":jh:*", ":ret*"] {
        let found: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{{{off_prefix}}}{pattern}"))
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        assert!(found.is_empty(), "{found:?}");
    }
}

// ---------------------------------------------------------------------------------
// Part 2: the randomized differential, memory vs redis
// ---------------------------------------------------------------------------------

const FIXED_SEEDS: [u64; 3] = [0x5707_0001, 0x5707_0002, 0x5707_0003];
const DEFAULT_OPS: usize = 1000;
/// Fake connections.
const CONNS: u64 = 4;
/// The tube names operations draw from (`default` always exists; the others come and
/// go with jobs and references).
const TUBES: [&str; 5] = ["default", "alpha", "beta", "gamma", "delta"];
/// Steps per phase of the generator (plain, then shrinking, and so on).
const PHASE: usize = 150;
/// A full comparison every this many operations.
const SWEEP_EVERY: usize = 50;
/// Operations shown before a mismatch.
const HISTORY: usize = 25;

#[derive(Clone, Debug)]
enum Op {
    Put {
        tube: TubeName,
        pri: u32,
        delay: u32,
        ttr: u32,
        body: Bytes,
    },
    BurnId,
    Reserve {
        conn: ConnId,
        watched: Vec<TubeName>,
    },
    ReserveJob {
        conn: ConnId,
        id: JobId,
    },
    Delete {
        conn: ConnId,
        id: JobId,
    },
    Release {
        conn: ConnId,
        id: JobId,
        pri: u32,
        delay: u32,
    },
    Bury {
        conn: ConnId,
        id: JobId,
        pri: u32,
    },
    Touch {
        conn: ConnId,
        id: JobId,
    },
    Kick {
        tube: TubeName,
        bound: u32,
    },
    KickJob {
        id: JobId,
    },
    Peek {
        id: JobId,
    },
    PeekReady {
        tube: TubeName,
    },
    PeekDelayed {
        tube: TubeName,
    },
    PeekBuried {
        tube: TubeName,
    },
    JobInfo {
        id: JobId,
    },
    TubeInfo {
        tube: TubeName,
    },
    Totals,
    ListTubes,
    Pause {
        tube: TubeName,
        delay: u32,
    },
    HasReady {
        watched: Vec<TubeName>,
    },
    SoonestDeadline {
        conn: ConnId,
    },
    NextDeadline,
    ReleaseAll {
        conn: ConnId,
    },
    Use {
        conn: ConnId,
        tube: TubeName,
    },
    Unuse {
        conn: ConnId,
        tube: TubeName,
    },
    Watch {
        conn: ConnId,
        tube: TubeName,
    },
    Unwatch {
        conn: ConnId,
        tube: TubeName,
    },
    Tick,
    /// A live job's history while retention is on (a check, never generated).
    History {
        id: JobId,
    },
    /// A deleted job's retained record (a check, never generated).
    Record {
        id: JobId,
    },
}

/// What the stores' records and histories must agree on: the events' kinds and
/// connections (their times come from each store's clock), the figures but `created`,
/// the tube, key and body.
#[derive(Debug, PartialEq)]
struct RecordFigs {
    tube: TubeName,
    key: Option<String>,
    events: Vec<(EventKind, u64)>,
    dropped: u64,
    figures: [u64; 8],
    body_len: usize,
    body: Option<Bytes>,
}

fn event_list(h: &History) -> Vec<(EventKind, u64)> {
    h.events().map(|e| (e.kind, e.conn)).collect()
}

impl From<Retained> for RecordFigs {
    fn from(r: Retained) -> Self {
        let f = r.figures;
        RecordFigs {
            tube: r.tube,
            key: r.key.map(|k| k.as_str().to_string()),
            events: event_list(&r.history),
            dropped: r.history.dropped(),
            figures: [
                u64::from(f.pri),
                f.delay_ms,
                f.ttr_ms,
                u64::from(f.reserves),
                u64::from(f.timeouts),
                u64::from(f.releases),
                u64::from(f.buries),
                u64::from(f.kicks),
            ],
            body_len: r.body_len,
            body: r.body,
        }
    }
}

/// A job's figures without the clock-dependent values.
#[derive(Debug, PartialEq)]
struct JobFigs {
    id: JobId,
    tube: TubeName,
    state: JobState,
    pri: u32,
    delay_ms: u64,
    ttr_ms: u64,
    has_deadline: bool,
    counters: [u64; 5],
}

impl From<JobInfo> for JobFigs {
    fn from(j: JobInfo) -> Self {
        JobFigs {
            id: j.id,
            tube: j.tube.clone(),
            state: j.state,
            pri: j.pri,
            delay_ms: j.delay_ms,
            ttr_ms: j.ttr_ms,
            has_deadline: j.deadline.is_some(),
            counters: counters(&j),
        }
    }
}

/// A tube's figures without the clock-dependent values.
#[derive(Debug, PartialEq)]
struct TubeFigs {
    counts: [u64; 5],
    total_jobs: u64,
    using: u64,
    watching: u64,
    cmd_delete: u64,
    cmd_pause: u64,
    paused: bool,
    pause_secs: u64,
    pause_until_set: bool,
}

impl From<TubeInfo> for TubeFigs {
    fn from(t: TubeInfo) -> Self {
        TubeFigs {
            counts: counts(&t),
            total_jobs: t.total_jobs,
            using: t.using,
            watching: t.watching,
            cmd_delete: t.cmd_delete,
            cmd_pause: t.cmd_pause,
            paused: t.pause > 0,
            pause_secs: t.pause / NANOS_PER_SEC,
            pause_until_set: t.pause_until > 0,
        }
    }
}

/// An operation's result, normalised so that the two stores' results compare equal.
#[derive(Debug, PartialEq)]
enum Out {
    Id(JobId),
    Reserved(Option<(JobId, TubeName, Bytes)>),
    Bool(bool),
    Tube(Option<TubeName>),
    Count(u32),
    Body(Option<(JobId, Bytes)>),
    Job(Option<JobFigs>),
    TubeFigs(Option<TubeFigs>),
    Totals(Totals),
    Tubes(Vec<TubeName>),
    Unit,
    Events(Option<(Vec<(EventKind, u64)>, u64)>),
    Record(Option<RecordFigs>),
}

/// Whether the two stores' results for `op` agree: equal, except for the next deadline.
/// The Redis store's may be early (its due index is lowered eagerly and raised only when
/// a tick finds nothing due), so it may name a time when the memory store names none.
/// With `retention` on, the memory store also names the end of its oldest retained
/// record, which the Redis store leaves to its sweep (`Store::next_deadline`), so the
/// Redis store may name none when the memory store names one.
fn agree(op: &Op, memory: &Out, redis: &Out, retention: bool) -> bool {
    match (op, memory, redis) {
        (Op::NextDeadline, Out::Bool(false), Out::Bool(_)) => true,
        (Op::NextDeadline, Out::Bool(true), Out::Bool(false)) => retention,
        _ => memory == redis,
    }
}

/// Apply `op` to `s` at `now` (the store's own time) and normalise the result.
async fn apply(s: &AnyStore, op: &Op, now: Nanos) -> StoreResult<Out> {
    let reserved = |r: Option<Reserved>| Out::Reserved(r.map(|r| (r.id, r.tube, r.body)));
    Ok(match op {
        Op::Put {
            tube,
            pri,
            delay,
            ttr,
            body,
        } => {
            let job = NewJob {
                tube: tube.clone(),
                pri: *pri,
                delay_ms: ms(*delay),
                ttr_ms: ms(*ttr),
                body: body.clone(),
            };
            Out::Id(s.put(job, now).await?)
        }
        Op::BurnId => Out::Id(s.burn_id().await?),
        Op::Reserve { conn, watched } => reserved(s.reserve(*conn, watched, now).await?),
        Op::ReserveJob { conn, id } => reserved(s.reserve_job(*conn, *id, now).await?),
        Op::Delete { conn, id } => Out::Bool(s.delete(*conn, *id, now).await?),
        Op::Release {
            conn,
            id,
            pri,
            delay,
        } => Out::Tube(s.release(*conn, *id, *pri, ms(*delay), now).await?),
        Op::Bury { conn, id, pri } => Out::Bool(s.bury(*conn, *id, *pri, now).await?),
        Op::Touch { conn, id } => Out::Bool(s.touch(*conn, *id, now).await?.is_some()),
        Op::Kick { tube, bound } => Out::Count(s.kick(tube, *bound, now).await?),
        Op::KickJob { id } => Out::Tube(s.kick_job(*id, now).await?),
        Op::Peek { id } => Out::Body(s.peek(*id).await?),
        Op::PeekReady { tube } => Out::Body(s.peek_ready(tube).await?),
        Op::PeekDelayed { tube } => Out::Body(s.peek_delayed(tube).await?),
        Op::PeekBuried { tube } => Out::Body(s.peek_buried(tube).await?),
        Op::JobInfo { id } => Out::Job(s.job_info(*id, now).await?.map(JobFigs::from)),
        Op::TubeInfo { tube } => Out::TubeFigs(s.tube_info(tube, now).await?.map(TubeFigs::from)),
        Op::Totals => Out::Totals(s.totals().await?),
        Op::ListTubes => Out::Tubes(s.list_tubes().await?),
        Op::Pause { tube, delay } => Out::Bool(s.pause(tube, ms(*delay), now).await?),
        Op::HasReady { watched } => Out::Bool(s.has_ready(watched).await?),
        Op::SoonestDeadline { conn } => Out::Bool(s.soonest_deadline(*conn).await?.is_some()),
        Op::NextDeadline => Out::Bool(s.next_deadline().await?.is_some()),
        Op::ReleaseAll { conn } => {
            let mut v = s.close(*conn, &[], None, true, now).await?;
            v.sort();
            Out::Tubes(v)
        }
        Op::Use { tube, .. } => {
            s.use_tube(tube).await?;
            Out::Unit
        }
        Op::Unuse { tube, .. } => {
            s.unuse_tube(tube).await?;
            Out::Unit
        }
        Op::Watch { tube, .. } => {
            s.watch_tube(tube).await?;
            Out::Unit
        }
        Op::Unwatch { tube, .. } => {
            s.unwatch_tube(tube).await?;
            Out::Unit
        }
        Op::Tick => {
            let mut v = s.tick(now).await?;
            v.sort();
            v.dedup();
            Out::Tubes(v)
        }
        Op::History { id } => Out::Events(
            s.job_entry(*id, now)
                .await?
                .and_then(|e| e.history)
                .map(|h| (event_list(&h), h.dropped())),
        ),
        Op::Record { id } => Out::Record(s.retained(*id, now).await?.map(RecordFigs::from)),
    })
}

/// What the generator knows (from the memory store's results) to aim its operations.
#[derive(Default)]
struct Model {
    /// One past the highest id handed out.
    next_id: JobId,
    live: BTreeSet<JobId>,
    held: BTreeMap<ConnId, BTreeSet<JobId>>,
    /// (connection, tube) -> count, for use and watch references.
    using: BTreeMap<(ConnId, TubeName), u32>,
    watching: BTreeMap<(ConnId, TubeName), u32>,
}

fn nth<T: Clone>(set: &BTreeSet<T>, rng: &mut Rng) -> Option<T> {
    if set.is_empty() {
        return None;
    }
    set.iter()
        .nth(rng.below(set.len() as u64) as usize)
        .cloned()
}

impl Model {
    fn new() -> Model {
        Model {
            next_id: 1,
            ..Model::default()
        }
    }

    fn conn(rng: &mut Rng) -> ConnId {
        ConnId(1 + rng.below(CONNS))
    }

    fn tube(rng: &mut Rng) -> TubeName {
        let name: &&str = rng.pick(&TUBES);
        t(name)
    }

    fn pri(rng: &mut Rng) -> u32 {
        match rng.below(10) {
            0 => 0,
            1 => 1023,
            2 => 1024,
            3 => u32::MAX,
            4 | 5 => 100,
            6 => 5000,
            _ => rng.below(2048) as u32,
        }
    }

    /// 0 mostly, else a long delay (multiples of `LONG`, or the maximum).
    fn delay(rng: &mut Rng, zero_percent: u64) -> u32 {
        if rng.chance(zero_percent) {
            0
        } else if rng.chance(3) {
            u32::MAX
        } else {
            LONG * (1 + rng.below(5) as u32)
        }
    }

    fn ttr(rng: &mut Rng) -> u32 {
        match rng.below(20) {
            0 => u32::MAX,
            1..=9 => LONG,
            _ => LONG + rng.below(1000) as u32,
        }
    }

    fn body(rng: &mut Rng) -> Bytes {
        let len = rng.below(12) as usize;
        (0..len).map(|_| rng.next_u64() as u8).collect()
    }

    /// A job id: one held by `conn` (`own` percent of the time, when it holds any),
    /// else mostly one held by any connection or a live one.
    fn id(&self, rng: &mut Rng, conn: ConnId, own: u64) -> JobId {
        if rng.chance(own)
            && let Some(id) = self.held.get(&conn).and_then(|h| nth(h, rng))
        {
            return id;
        }
        let roll = rng.below(100);
        if roll < 20 {
            let all: BTreeSet<JobId> = self.held.values().flatten().copied().collect();
            if let Some(id) = nth(&all, rng) {
                return id;
            }
        }
        if roll < 92
            && let Some(id) = nth(&self.live, rng)
        {
            return id;
        }
        rng.below(self.next_id + 3)
    }

    fn holder(&self, id: JobId) -> Option<ConnId> {
        self.held
            .iter()
            .find(|(_, h)| h.contains(&id))
            .map(|(c, _)| *c)
    }

    /// In a shrinking phase: delete a live job (as its holder, mostly) or drop a use or
    /// watch reference, so that tubes get destroyed and the tube list reordered.
    fn shrink_op(&self, rng: &mut Rng, conn: ConnId) -> Option<Op> {
        if rng.chance(60)
            && let Some(id) = nth(&self.live, rng)
        {
            let conn = match self.holder(id) {
                Some(h) if rng.chance(85) => h,
                _ => conn,
            };
            return Some(Op::Delete { conn, id });
        }
        let refs: BTreeSet<(bool, ConnId, TubeName)> = self
            .using
            .keys()
            .map(|(c, t)| (false, *c, t.clone()))
            .chain(self.watching.keys().map(|(c, t)| (true, *c, t.clone())))
            .collect();
        let (watch, conn, tube) = nth(&refs, rng)?;
        Some(if watch {
            Op::Unwatch { conn, tube }
        } else {
            Op::Unuse { conn, tube }
        })
    }

    fn watched(&self, rng: &mut Rng, conn: ConnId) -> Vec<TubeName> {
        let mine: Vec<TubeName> = self
            .watching
            .keys()
            .filter(|(c, _)| *c == conn)
            .map(|(_, t)| t.clone())
            .collect();
        if !mine.is_empty() && rng.chance(80) {
            return mine;
        }
        let mut v: Vec<TubeName> = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let tube = Self::tube(rng);
            if !v.contains(&tube) {
                v.push(tube);
            }
        }
        v
    }

    /// A tube `conn` holds a reference of this kind to, if any.
    fn referenced(
        refs: &BTreeMap<(ConnId, TubeName), u32>,
        rng: &mut Rng,
        conn: ConnId,
    ) -> Option<TubeName> {
        let mine: BTreeSet<TubeName> = refs
            .keys()
            .filter(|(c, _)| *c == conn)
            .map(|(_, t)| t.clone())
            .collect();
        nth(&mine, rng)
    }

    /// The operation for `step`. Phases of [`PHASE`] steps alternate between the plain
    /// mix (where jobs and references accumulate) and a shrinking one.
    fn gen_op(&self, rng: &mut Rng, step: usize) -> Op {
        let conn = Self::conn(rng);
        // For release, bury and touch: mostly a connection that holds something.
        let holding: Vec<ConnId> = self
            .held
            .iter()
            .filter(|(_, h)| !h.is_empty())
            .map(|(c, _)| *c)
            .collect();
        let holder = if !holding.is_empty() && rng.chance(75) {
            *rng.pick(&holding)
        } else {
            conn
        };
        if (step / PHASE) % 2 == 1
            && rng.chance(35)
            && let Some(op) = self.shrink_op(rng, conn)
        {
            return op;
        }
        match rng.below(100) {
            0..=15 => Op::Put {
                tube: Self::tube(rng),
                pri: Self::pri(rng),
                delay: Self::delay(rng, 65),
                ttr: Self::ttr(rng),
                body: Self::body(rng),
            },
            16 => Op::BurnId,
            17..=27 => Op::Reserve {
                conn,
                watched: self.watched(rng, conn),
            },
            28..=31 => Op::ReserveJob {
                conn,
                id: self.id(rng, conn, 10),
            },
            32..=39 => Op::Delete {
                conn,
                id: self.id(rng, conn, 30),
            },
            40..=46 => Op::Release {
                conn: holder,
                id: self.id(rng, holder, 65),
                pri: Self::pri(rng),
                delay: Self::delay(rng, 70),
            },
            47..=51 => Op::Bury {
                conn: holder,
                id: self.id(rng, holder, 65),
                pri: Self::pri(rng),
            },
            52..=53 => Op::Touch {
                conn: holder,
                id: self.id(rng, holder, 65),
            },
            54..=56 => Op::Kick {
                tube: Self::tube(rng),
                bound: if rng.chance(5) {
                    u32::MAX
                } else {
                    rng.below(5) as u32
                },
            },
            57..=59 => Op::KickJob {
                id: self.id(rng, conn, 5),
            },
            60..=61 => Op::Peek {
                id: self.id(rng, conn, 20),
            },
            62 => Op::PeekReady {
                tube: Self::tube(rng),
            },
            63 => Op::PeekDelayed {
                tube: Self::tube(rng),
            },
            64 => Op::PeekBuried {
                tube: Self::tube(rng),
            },
            65..=66 => Op::JobInfo {
                id: self.id(rng, conn, 20),
            },
            67..=68 => Op::TubeInfo {
                tube: Self::tube(rng),
            },
            69 => Op::Totals,
            70 => Op::ListTubes,
            71..=73 => Op::Pause {
                tube: Self::tube(rng),
                delay: Self::delay(rng, 40),
            },
            74 => Op::HasReady {
                watched: self.watched(rng, conn),
            },
            75 => Op::SoonestDeadline { conn },
            76 => Op::NextDeadline,
            77..=78 => Op::ReleaseAll { conn },
            79..=82 => Op::Use {
                conn,
                tube: Self::tube(rng),
            },
            83..=86 => match Self::referenced(&self.using, rng, conn) {
                Some(tube) => Op::Unuse { conn, tube },
                None => Op::Use {
                    conn,
                    tube: Self::tube(rng),
                },
            },
            87..=90 => Op::Watch {
                conn,
                tube: Self::tube(rng),
            },
            91..=95 => match Self::referenced(&self.watching, rng, conn) {
                Some(tube) => Op::Unwatch { conn, tube },
                None => Op::Watch {
                    conn,
                    tube: Self::tube(rng),
                },
            },
            _ => Op::Tick,
        }
    }

    fn bump(refs: &mut BTreeMap<(ConnId, TubeName), u32>, conn: ConnId, tube: &TubeName, up: bool) {
        let key = (conn, tube.clone());
        let n = refs.entry(key.clone()).or_default();
        if up {
            *n += 1;
        } else {
            *n = n.saturating_sub(1);
            if *n == 0 {
                refs.remove(&key);
            }
        }
    }

    /// Learn from the reference (memory) store's result.
    fn learn(&mut self, op: &Op, out: &Out) {
        match (op, out) {
            (Op::Put { .. }, Out::Id(id)) => {
                self.live.insert(*id);
                self.next_id = self.next_id.max(id + 1);
            }
            (Op::BurnId, Out::Id(id)) => self.next_id = self.next_id.max(id + 1),
            (Op::Reserve { conn, .. } | Op::ReserveJob { conn, .. }, Out::Reserved(Some(r))) => {
                self.held.entry(*conn).or_default().insert(r.0);
            }
            (Op::Delete { id, .. }, Out::Bool(true)) => {
                self.live.remove(id);
                for h in self.held.values_mut() {
                    h.remove(id);
                }
            }
            (Op::Release { conn, id, .. }, Out::Tube(Some(_)))
            | (Op::Bury { conn, id, .. }, Out::Bool(true)) => {
                if let Some(h) = self.held.get_mut(conn) {
                    h.remove(id);
                }
            }
            (Op::ReleaseAll { conn }, _) => {
                self.held.remove(conn);
            }
            (Op::Use { conn, tube }, _) => Self::bump(&mut self.using, *conn, tube, true),
            (Op::Unuse { conn, tube }, _) => Self::bump(&mut self.using, *conn, tube, false),
            (Op::Watch { conn, tube }, _) => Self::bump(&mut self.watching, *conn, tube, true),
            (Op::Unwatch { conn, tube }, _) => Self::bump(&mut self.watching, *conn, tube, false),
            _ => {}
        }
    }
}

/// One mismatch, with everything needed to understand and replay it.
struct Mismatch {
    seed: u64,
    step: usize,
    what: String,
    memory: String,
    redis: String,
    history: Vec<String>,
}

/// The two stores of one seed, driven in lockstep.
struct Pair {
    memory: AnyStore,
    redis: AnyStore,
    /// The memory store's synthetic clock.
    mem_now: Nanos,
}

impl Pair {
    /// Run `op` on both stores and return both results (Redis failures are fatal: the
    /// Redis is private and local).
    async fn run(&mut self, op: &Op) -> (Out, Out) {
        self.mem_now += 1_000_000;
        let m = apply(&self.memory, op, self.mem_now)
            .await
            .expect("memory store failed");
        let mut redis_now = self.redis.clock().now();
        if matches!(op, Op::Tick) {
            // The local estimate of the Redis clock trails it by a round trip; a second
            // more lets the tick see a zero pause ended a moment ago (nothing else can
            // fall due within a second).
            redis_now += NANOS_PER_SEC;
        }
        let r = apply(&self.redis, op, redis_now)
            .await
            .unwrap_or_else(|e| panic!("redis store failed on {op:?}: {e}"));
        (m, r)
    }
}

/// The full comparison: tube list, every tube's figures, jobs' figures, readiness and
/// deadlines; with `retention`, the jobs' histories and records too. `ids` are the job
/// ids to compare.
fn sweep_ops(ids: impl Iterator<Item = JobId>, retention: bool) -> Vec<Op> {
    let mut ops = vec![Op::Totals, Op::ListTubes, Op::NextDeadline];
    for name in TUBES {
        ops.push(Op::TubeInfo { tube: t(name) });
        ops.push(Op::HasReady {
            watched: vec![t(name)],
        });
        ops.push(Op::PeekReady { tube: t(name) });
    }
    for c in 1..=CONNS {
        ops.push(Op::SoonestDeadline { conn: ConnId(c) });
    }
    for id in ids {
        ops.push(Op::JobInfo { id });
        if retention {
            ops.push(Op::History { id });
            ops.push(Op::Record { id });
        }
    }
    ops
}

/// Per operation kind: how many were generated, and how many had an effect or found
/// something (a job, a true, a non-zero count, a non-empty list).
type Coverage = BTreeMap<String, (u64, u64)>;

fn record(coverage: &mut Coverage, op: &Op, out: &Out) {
    let debug = format!("{op:?}");
    let kind: String = debug
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    let hit = match out {
        Out::Reserved(r) => r.is_some(),
        Out::Bool(b) => *b,
        Out::Tube(t) => t.is_some(),
        Out::Count(n) => *n > 0,
        Out::Body(b) => b.is_some(),
        Out::Job(j) => j.is_some(),
        Out::TubeFigs(t) => t.is_some(),
        Out::Tubes(v) => !v.is_empty(),
        Out::Events(e) => e.is_some(),
        Out::Record(r) => r.is_some(),
        Out::Id(_) | Out::Totals(_) | Out::Unit => true,
    };
    let entry = coverage.entry(kind).or_default();
    entry.0 += 1;
    entry.1 += u64::from(hit);
}

/// The jobs whose figures `op` may have changed (compared right after it): the job it
/// names or made, or those a `close` without references returned (`model` as before the op).
fn touched_jobs(op: &Op, out: &Out, model: &Model) -> Vec<JobId> {
    match (op, out) {
        (_, Out::Id(id)) => vec![*id],
        (_, Out::Reserved(Some((id, _, _)))) => vec![*id],
        (Op::ReleaseAll { conn }, _) => model
            .held
            .get(conn)
            .map(|h| h.iter().copied().collect())
            .unwrap_or_default(),
        (
            Op::ReserveJob { id, .. }
            | Op::Delete { id, .. }
            | Op::Release { id, .. }
            | Op::Bury { id, .. }
            | Op::Touch { id, .. }
            | Op::KickJob { id },
            _,
        ) => vec![*id],
        _ => Vec::new(),
    }
}

async fn run_seed(
    url: &str,
    seed: u64,
    ops: usize,
    coverage: &mut Coverage,
) -> Result<usize, Box<Mismatch>> {
    let redis = redis_store(url, &format!("diff-{seed:x}")).await;
    let mut pair = Pair {
        memory: AnyStore::Memory(MemoryStore::new()),
        redis: AnyStore::Redis(redis),
        mem_now: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    };
    // Odd seeds run with retention on: both stores record every job's events and keep
    // every deleted job's record, compared at each sweep and after each delete.
    let retention = seed % 2 == 1;
    if retention {
        let limits = RetentionLimits {
            keep_ms: 3_600_000,
            max_jobs: 1_000_000,
            max_bytes: 1 << 30,
            bodies: true,
        };
        pair.memory.set_retention(limits);
        pair.redis.set_retention(limits);
    }
    let mut rng = Rng::new(seed);
    let mut model = Model::new();
    let mut history: VecDeque<String> = VecDeque::new();
    let mut tube_count = 1;
    let mismatch = |step: usize, what: String, m: &Out, r: &Out, history: &VecDeque<String>| {
        Box::new(Mismatch {
            seed,
            step,
            what,
            memory: format!("{m:?}"),
            redis: format!("{r:?}"),
            history: history.iter().cloned().collect(),
        })
    };
    for step in 0..ops {
        let op = model.gen_op(&mut rng, step);
        let (m, r) = pair.run(&op).await;
        if !agree(&op, &m, &r, retention) {
            return Err(mismatch(step, format!("{op:?}"), &m, &r, &history));
        }
        let touched = touched_jobs(&op, &m, &model);
        model.learn(&op, &m);
        record(coverage, &op, &m);
        history.push_back(format!("{step}: {op:?} -> {m:?}"));
        if history.len() > HISTORY {
            history.pop_front();
        }
        let last = step + 1 == ops;
        let checks = if last {
            sweep_ops(1..model.next_id + 1, retention)
        } else if (step + 1) % SWEEP_EVERY == 0 {
            let mut ids = model.live.clone();
            ids.extend(model.held.values().flatten());
            sweep_ops(ids.into_iter(), retention)
        } else {
            let mut v = vec![Op::Totals, Op::ListTubes];
            for id in touched {
                v.push(Op::JobInfo { id });
                if retention {
                    v.push(Op::History { id });
                    v.push(Op::Record { id });
                }
            }
            v
        };
        for check in checks {
            let (m, r) = pair.run(&check).await;
            if let Out::Totals(x) = &m {
                if x.tubes < tube_count {
                    let entry = coverage.entry("(tube destroyed)".into()).or_default();
                    entry.0 += tube_count - x.tubes;
                    entry.1 += tube_count - x.tubes;
                }
                tube_count = x.tubes;
            }
            if !agree(&check, &m, &r, retention) {
                let what = format!("{check:?} after step {step} ({op:?})");
                return Err(mismatch(step, what, &m, &r, &history));
            }
        }
    }
    Ok(ops)
}

fn parse_seed(s: &str) -> u64 {
    let s = s.trim();
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => s.replace('_', "").parse(),
    };
    parsed.unwrap_or_else(|e| panic!("REDSTALK_STORE_SEED: bad seed {s:?}: {e}"))
}

#[tokio::test]
async fn memory_vs_redis_differential() {
    let Some(redis) = start_redis() else { return };
    let url = redis.url();
    let seeds: Vec<u64> = match std::env::var("REDSTALK_STORE_SEED") {
        Ok(v) if !v.trim().is_empty() => v.split(',').map(parse_seed).collect(),
        _ => {
            let clock = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0)
                & 0xffff_ffff;
            eprintln!(
                "store contract: seed {clock:#x} comes from the clock (replay: REDSTALK_STORE_SEED={clock:#x})"
            );
            let mut s = FIXED_SEEDS.to_vec();
            s.push(clock);
            s
        }
    };
    let ops: usize = match std::env::var("REDSTALK_STORE_OPS") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("REDSTALK_STORE_OPS: {v:?}: {e}")),
        Err(_) => DEFAULT_OPS,
    };

    let started = Instant::now();
    let mut done = 0;
    let mut mismatches = Vec::new();
    let mut coverage = Coverage::new();
    for &seed in &seeds {
        match run_seed(&url, seed, ops, &mut coverage).await {
            Ok(n) => done += n,
            Err(m) => {
                done += m.step + 1;
                eprintln!();
                eprintln!("MISMATCH: seed {:#x}, step {}", m.seed, m.step);
                eprintln!("  op:     {}", m.what);
                eprintln!("  memory: {}", m.memory);
                eprintln!("  redis:  {}", m.redis);
                eprintln!("  the preceding operations (-> the memory store's result):");
                for h in &m.history {
                    eprintln!("    {h}");
                }
                eprintln!(
                    "  replay: REDSTALK_STORE_SEED={:#x} REDSTALK_STORE_OPS={} cargo test --test store_contract memory_vs_redis -- --nocapture",
                    m.seed,
                    m.step + 1
                );
                mismatches.push(m.seed);
            }
        }
    }
    eprintln!(
        "store contract: {done} ops over {} seeds, memory vs redis, {} mismatches",
        seeds.len(),
        mismatches.len()
    );
    let figures: Vec<String> = coverage
        .iter()
        .map(|(kind, (n, hits))| format!("{kind} {hits}/{n}"))
        .collect();
    eprintln!(
        "store contract: {:.1} s; operations with an effect or a find / generated: {}",
        started.elapsed().as_secs_f64(),
        figures.join(", ")
    );
    let failed: Vec<String> = mismatches.iter().map(|s| format!("{s:#x}")).collect();
    assert!(
        mismatches.is_empty(),
        "memory and redis stores disagree (seeds {failed:?})"
    );
}

// ---------------------------------------------------------------------------------
// Bounded script calls (Redis only)
// ---------------------------------------------------------------------------------

/// How many script calls (EVALSHA and FCALL: the store calls its scripts as Redis
/// Functions where Redis has them) the Redis at `url` has run (`INFO commandstats`).
async fn script_calls(url: &str) -> u64 {
    script_calls_of(&calls_by_command(url).await)
}

/// The script calls (EVALSHA and FCALL) among `calls`.
fn script_calls_of(calls: &BTreeMap<String, u64>) -> u64 {
    ["evalsha", "fcall"]
        .iter()
        .filter_map(|c| calls.get(*c))
        .sum()
}

/// Every command the Redis at `url` has run, by its lower-case name, with how many
/// times (`INFO commandstats`: a script's own commands count, each by its name).
async fn calls_by_command(url: &str) -> BTreeMap<String, u64> {
    let client = redis::Client::open(url).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis");
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .expect("INFO commandstats");
    calls_in(&info)
}

/// The calls of each command in `INFO commandstats` text.
fn calls_in(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(":calls=")?;
            let n = rest
                .split(',')
                .next()?
                .parse::<u64>()
                .expect("a call count");
            Some((name.to_string(), n))
        })
        .collect()
}

/// Put `n` jobs (priority 100, TTR [`LONG`]) into `tube`, many at a time.
async fn put_many(s: &AnyStore, tube: &str, n: usize, delay: u32) -> Vec<JobId> {
    let mut ids = Vec::with_capacity(n);
    let numbers: Vec<usize> = (0..n).collect();
    for batch in numbers.chunks(500) {
        let bodies: Vec<String> = batch.iter().map(|i| format!("job {i}")).collect();
        let puts = bodies.iter().map(|b| put(s, tube, 100, delay, LONG, b));
        ids.extend(futures_util::future::join_all(puts).await);
    }
    ids
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{sig} {pid}");
}

/// Many more due delayed jobs than one script call moves ([`SCRIPT_CHUNK`]): one tick
/// makes every one ready, through several bounded calls.
#[tokio::test]
async fn tick_promotes_more_due_jobs_than_one_call_moves() {
    let Some(redis) = start_redis() else { return };
    let url = redis.url();
    let s = AnyStore::Redis(redis_store(&url, "tick-chunks").await);
    const N: usize = 5_000;
    let calls_needed = N as u64 / u64::from(SCRIPT_CHUNK);
    assert!(calls_needed >= 2, "the test needs several calls' worth");
    put_many(&s, "many", N, 1).await;
    let put_done = Instant::now();
    // Only a tick promotes them, however long the puts took.
    assert_eq!(tube_of(&s, "many").await.delayed, N as u64);
    tokio::time::sleep(Duration::from_millis(1100).saturating_sub(put_done.elapsed())).await;

    let before = script_calls(&url).await;
    let woken = s.tick(now(&s)).await.expect("tick");
    let calls = script_calls(&url).await - before;
    let info = tube_of(&s, "many").await;
    assert_eq!((info.ready, info.delayed), (N as u64, 0));
    assert_eq!(sorted_names(woken), vec!["many".to_string()]);
    assert!(
        calls >= calls_needed,
        "{N} due jobs took {calls} script calls; at most {SCRIPT_CHUNK} a call needs {calls_needed}"
    );
}

/// A kick of more jobs than one call moves goes on over several calls, and keeps to
/// the set its first call chose: exactly one call's worth of buried jobs, with delayed
/// jobs behind them, are kicked alone.
#[tokio::test]
async fn kick_of_more_jobs_than_one_call_moves_keeps_to_one_set() {
    let Some(redis) = start_redis() else { return };
    let url = redis.url();
    let s = AnyStore::Redis(redis_store(&url, "kick-chunks").await);
    let chunk = SCRIPT_CHUNK as u64;
    for id in put_many(&s, "k", chunk as usize, 0).await {
        reserve_and_bury(&s, C1, id, 5).await;
    }
    put_many(&s, "k", 2 * chunk as usize + 500, LONG).await;
    let counts = |i: TubeInfo| (i.ready, i.buried, i.delayed);

    let kicked = s.kick(&t("k"), u32::MAX, now(&s)).await.expect("kick");
    assert_eq!(
        kicked, SCRIPT_CHUNK,
        "a kick of everything takes the buried jobs only"
    );
    assert_eq!(counts(tube_of(&s, "k").await), (chunk, 0, 2 * chunk + 500));

    let bound = 2 * SCRIPT_CHUNK + 100;
    let before = script_calls(&url).await;
    let kicked = s.kick(&t("k"), bound, now(&s)).await.expect("kick");
    let calls = script_calls(&url).await - before;
    assert_eq!(kicked, bound, "delayed jobs, up to the bound");
    assert_eq!(
        calls, 3,
        "a kick of {bound} took {calls} calls of at most {SCRIPT_CHUNK}"
    );
    assert_eq!(
        counts(tube_of(&s, "k").await),
        (chunk + u64::from(bound), 0, 400)
    );
}

/// A reserve whose answer was lost (Redis frozen past the response timeout, then run)
/// in a tube holding more reservations than one reclaim call looks at: the next tick
/// finds its job among them and returns it to ready, uncounted; the others stay held.
#[tokio::test]
async fn lost_reserve_is_reclaimed_among_many_reservations() {
    let Some(redis) = start_redis() else { return };
    let s = AnyStore::Redis(redis_store(&redis.url(), "reclaim-chunks").await);
    let n = 2 * SCRIPT_CHUNK as usize + 500;
    put_many(&s, "r", n, 0).await;
    for _ in 0..n {
        assert!(reserve(&s, C1, &["r"]).await.is_some());
    }
    let lost = put(&s, "r", 0, 0, LONG, "lost").await;

    let pid = redis.pid().expect("redis pid");
    signal(pid, "STOP");
    let r = s.reserve(C2, &tubes(&["r"]), now(&s)).await;
    signal(pid, "CONT");
    assert!(r.is_err(), "a reserve with Redis frozen answered {r:?}");
    // Redis runs the reserve once it resumes.
    let resumed = Instant::now();
    loop {
        if let Ok(Some(j)) = s.job_info(lost, now(&s)).await
            && j.state == JobState::Reserved
        {
            break;
        }
        assert!(
            resumed.elapsed() < Duration::from_secs(5),
            "the lost reserve never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let woken = s.tick(now(&s)).await.expect("tick");
    let j = job(&s, lost).await;
    assert_eq!((j.state, j.reserves), (JobState::Ready, 0));
    assert_eq!(sorted_names(woken), vec!["r".to_string()]);
    assert_eq!(tube_of(&s, "r").await.reserved, n as u64);
}
